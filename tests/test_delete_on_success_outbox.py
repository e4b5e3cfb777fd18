"""``delete_on_success`` and the outbox: a run is deleted once its side
effects are delivered, never before.

A tryout: a flow that deletes its runs on success queued an HTTP post in
its last step; the run was deleted as it completed, its intent stayed
``pending`` with no run row, and no dispatcher ever claimed it (claims go
through the run's row): the post was never made, and nothing showed it.
`flowdesk signal`, whose signal completed such a run, said "no run ... in
scope" and exited 1. Now the run stays, completed, until its last intent
is delivered; the next engine tick deletes it; an intent given up on keeps
it; the signal says what happened."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_app.errors import CheckpointNotFoundError
from desktop_app.flow import Engine
from desktop_app.flow.outbox import Dispatcher
from tests.cli_support import flowdesk
from tests.delete_flows import FLOWS_ENV, Order, paid_notify, paid_only

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        from desktop_app.store.memory.store import InMemoryCheckpointStore

        return InMemoryCheckpointStore()
    return request.getfixturevalue(f"{'pg' if request.param == 'postgres' else 'sqlite'}_store")


class Counting:
    """A destination that counts what it is sent (by idempotency key)."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: dict[str, int] = {}
        self.fail = fail

    def send(self, idempotency_key: str, payload: Any) -> str:
        if self.fail:
            err = RuntimeError("refused for good")
            err.retryable = False  # type: ignore[attr-defined]
            raise err
        self.sent[idempotency_key] = self.sent.get(idempotency_key, 0) + 1
        return "ok"


@pytest.mark.scenario("S125")
def test_a_deleted_on_success_run_waits_for_its_side_effect_then_goes(store) -> None:
    engine = Engine(store, flows=[paid_notify])
    run_id = engine.run("paid_notify", Order(key="k1")).run_id
    engine.signal("paid", "k1", {"amount": 3})
    assert store.get_run(run_id).status == "completed"  # kept: its post is not made yet
    engine.tick()
    assert store.get_run(run_id).status == "completed"  # still queued: still kept
    http = Counting()
    assert Dispatcher(store, {"http": http}).dispatch() == 1
    assert list(http.sent.values()) == [1]
    engine.tick()  # delivered: now it goes
    with pytest.raises(CheckpointNotFoundError):
        store.get_run(run_id)
    assert Dispatcher(store, {"http": http}).dispatch() == 0
    assert list(http.sent.values()) == [1]  # made once


def test_a_run_whose_side_effect_was_given_up_on_is_kept(store) -> None:
    engine = Engine(store, flows=[paid_notify])
    run_id = engine.run("paid_notify", Order(key="k2")).run_id
    engine.signal("paid", "k2", {"amount": 3})
    assert Dispatcher(store, {"http": Counting(fail=True)}).dispatch() == 0
    assert [i.status for i in store.intents(("failed",), 10, run_id=run_id)] == ["failed"]
    engine.tick()
    assert store.get_run(run_id).status == "completed"  # the failure stays visible


def test_runs_kept_for_failed_side_effects_hide_no_delivered_one(store) -> None:
    """A tryout: the sweep read the oldest 100 completed runs of the flow,
    so 101 kept for good (an intent given up on) hid every newer one whose
    side effect was delivered: it was never deleted."""
    engine = Engine(store, flows=[paid_notify])
    refusing = Dispatcher(store, {"http": Counting(fail=True)})
    for i in range(101):
        engine.run("paid_notify", Order(key=f"f{i}"))
        engine.signal("paid", f"f{i}", {"amount": 1})
        refusing.dispatch()
    run_id = engine.run("paid_notify", Order(key="ok")).run_id
    engine.signal("paid", "ok", {"amount": 1})
    assert Dispatcher(store, {"http": Counting()}).dispatch() == 1
    engine.tick()
    with pytest.raises(CheckpointNotFoundError):
        store.get_run(run_id)
    assert len(store.list_runs(statuses=["completed"])) == 101  # the failures stay


def test_a_run_with_no_side_effect_is_deleted_as_it_completes(store) -> None:
    engine = Engine(store, flows=[paid_only])
    run_id = engine.run("paid_only", Order(key="k3")).run_id
    result = engine.signal("paid", "k3", {"amount": 3})
    assert result is not None
    with pytest.raises(CheckpointNotFoundError):
        store.get_run(run_id)


@pytest.mark.scenario("S125")
def test_an_answer_that_completes_a_kept_run_says_so(tmp_path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "asked_notify", "--input", '{"key": "a1"}', env=ENV)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[0]
    answered = flowdesk(db, "answer", run_id, "yes", env=ENV)
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} completed" in answered.stdout
    assert (
        f"run {run_id} is kept until its side effects are delivered (1 side effect queued), "
        "then deleted by the next pass" in answered.stdout
    ), answered.stdout
    assert "flowdesk does not deliver" in answered.stdout  # its program's own destination


@pytest.mark.scenario("S125")
@pytest.mark.parametrize("flow", ["paid_notify", "paid_only"])
def test_signal_says_it_completed_a_run_deleted_on_success(tmp_path, flow: str) -> None:
    from desktop_app.store.sqlite.store import open_store

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", flow, "--input", '{"key": "k1"}', env=ENV)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[0]
    sent = flowdesk(db, "signal", "paid", "k1", "--payload", '{"amount": 3}', env=ENV)
    assert sent.returncode == 0, sent.stderr
    assert "Traceback" not in sent.stderr
    if flow == "paid_only":
        assert f"delivered to run {run_id} (now completed, and deleted" in sent.stdout, sent
        return
    assert f"delivered to run {run_id} (now completed)" in sent.stdout, sent
    # kept, and said so: a deleting flow's run stays until its post is made
    assert (
        f"run {run_id} is kept until its side effects are delivered (1 side effect queued), "
        "then deleted by the next pass of a process that runs its flow (flowdesk agent, the "
        "app)" in sent.stdout
    ), sent
    # the post goes to the program's own destination: flowdesk does not deliver it
    assert "'http'" in sent.stdout and "flowdesk does not deliver" in sent.stdout, sent
    store = open_store(db)
    try:
        http = Counting()
        assert Dispatcher(store, {"http": http}).dispatch() == 1
        Engine(store, flows=[paid_notify]).tick()
        with pytest.raises(CheckpointNotFoundError):
            store.get_run(run_id)
        assert list(http.sent.values()) == [1]
    finally:
        store.close()


async def test_the_app_deletes_a_kept_run_once_its_side_effect_was_delivered(
    tmp_path,
) -> None:
    """The app fires timers with its own pass, not ``Engine.tick``: it
    deletes a kept run too once its side effect is delivered."""
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from desktop_app.store.sqlite.store import open_store
    from tests.app_support import settle, wait_until

    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    store = open_store(settings.db_path)
    try:
        engine = Engine(store, flows=[paid_notify])
        run_id = engine.run("paid_notify", Order(key="k9")).run_id
        engine.signal("paid", "k9", {"amount": 3})
        assert Dispatcher(store, {"http": Counting()}).dispatch() == 1
        assert store.get_run(run_id).status == "completed"  # delivered, not deleted yet
    finally:
        store.close()

    def gone() -> bool:
        check = open_store(settings.db_path)
        try:
            check.get_run(run_id)
        except CheckpointNotFoundError:
            return True
        finally:
            check.close()
        return False

    app = FlowdeskApp(settings, flows=[paid_notify])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, gone)


@pytest.mark.parametrize("where", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_flowdesk_agent_deletes_a_kept_run_once_its_side_effect_was_delivered(
    tmp_path, request: pytest.FixtureRequest, where: str
) -> None:
    """A tryout: on PostgreSQL the agent's worker passes never called
    ``Engine.tick``, so a kept run stayed for ever. The agent deletes it
    on both databases once its side effect is delivered (by a program's
    own dispatcher here)."""
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.sqlite.store import open_store
    from tests.cli_support import spawn, stop_agent
    from tests.polling import until

    if where == "postgres":
        db = str(request.getfixturevalue("pg_url"))
        store = open_postgres_store(db)
    else:
        db = str(tmp_path / "f.db")
        assert flowdesk(db, "db", "apply").returncode == 0
        store = open_store(db)
    agent = None
    try:
        engine = Engine(store, flows=[paid_notify])
        run_id = engine.run("paid_notify", Order(key="k7")).run_id
        engine.signal("paid", "k7", {"amount": 3})
        assert Dispatcher(store, {"http": Counting()}).dispatch() == 1
        assert store.get_run(run_id).status == "completed"
        agent = spawn("--db", db, "agent", "--poll", "0.2", env=ENV)

        def gone() -> bool:
            try:
                store.get_run(run_id)
            except CheckpointNotFoundError:
                return True
            return False

        until(gone, "the agent to delete the delivered run", bound_s=60.0)
    finally:
        if agent is not None:
            stop_agent(agent)
        store.close()


def test_a_run_deleted_by_another_engine_meanwhile_is_no_error(store) -> None:
    """Two engines' sweeps (an agent and the app) may both find a run
    deletable: the second finds it gone and goes on."""
    from desktop_app.flow.outbox import delete_when_sent

    engine = Engine(store, flows=[paid_notify])
    run_id = engine.run("paid_notify", Order(key="k5")).run_id
    engine.signal("paid", "k5", {"amount": 3})
    assert Dispatcher(store, {"http": Counting()}).dispatch() == 1
    delete_when_sent(store, run_id)
    delete_when_sent(store, run_id)  # the other sweep, a moment later
    with pytest.raises(CheckpointNotFoundError):
        store.get_run(run_id)


def test_a_run_its_last_wait_completes_is_said_finished_once(store) -> None:
    """A wake that completed the run (its last wait took a signal) ran no
    step loop after it, so no ``RunFinished`` said it completed (the app
    and the CLI's listeners learn that a run ended from it); a wake that
    timed a run out published one. It is published once, as a driven
    run's end is."""
    from desktop_app.flow import EventBus
    from desktop_app.flow.events import RunFinished

    events = EventBus()
    finished: list[RunFinished] = []
    events.subscribe(lambda e: finished.append(e) if isinstance(e, RunFinished) else None)
    engine = Engine(store, flows=[paid_only], events=events)
    run_id = engine.run("paid_only", Order(key="k8")).run_id
    assert finished == [RunFinished(run_id, "waiting", None)]  # its drive stopped at the wait
    engine.signal("paid", "k8", {"amount": 3})
    assert finished[1:] == [RunFinished(run_id, "completed", None)]
