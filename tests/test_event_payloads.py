"""``flowdesk publish`` with a payload a run waiting for the event cannot
take blocked the run for good: its step failed on the event, the printed
``resume`` began a new wait that met the same event and failed again, and
a good event published later never reached it. An event is a broadcast
(every run waiting for its type may take it): ``publish`` now refuses a
payload a run waiting for that type now cannot take, before storing it
(exit 2, naming every such run, its step and the type it takes); a wait
that meets one stored anyway refuses it and goes on waiting from just
after it (as Temporal's SDKs drop a signal they cannot decode), recorded
in the run's ``meta["refused_events"]`` and shown by ``show``; a run an
older version failed that way waits again after ``resume``. The real CLI
in subprocesses, on a SQLite file and on PostgreSQL; every hint it prints
is run as printed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import as_printed, flowdesk, serving, spawn, user_db
from tests.event_flows import FLOWS_ENV


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return user_db(request, tmp_path, _env())


def _env() -> dict[str, str]:
    return {**os.environ, "FLOWDESK_FLOWS": FLOWS_ENV}


def _bare() -> dict[str, str]:
    """A process that registers neither flow: it cannot judge a payload."""
    return {k: v for k, v in os.environ.items() if k != "FLOWDESK_FLOWS"}


def fd(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return flowdesk(db, *args, env=_env())


def events(db: str) -> list[tuple[int, str]]:
    """``(event_id, payload)`` of every stored event, oldest first."""
    query = "SELECT event_id, payload FROM {}events ORDER BY event_id"
    if db.startswith("postgresql"):
        import psycopg

        with psycopg.connect(db) as conn:  # Flowdesk's tables are in schema flowdesk
            return [(int(a), str(b)) for a, b in conn.execute(query.format("flowdesk.")).fetchall()]
    with sqlite3.connect(db) as conn:
        return [(int(a), str(b)) for a, b in conn.execute(query.format("")).fetchall()]


def wakeable(db: str) -> list[str]:
    """The runs the store says have something to act on now (what every
    worker, the app and ``resume --all`` wake)."""
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.sqlite.store import open_store

    store = open_postgres_store(db) if db.startswith("postgresql") else open_store(Path(db))
    try:
        return store.wakeable_runs(store.now())
    finally:
        store.close()


def show(db: str, run_id: str) -> str:
    shown = fd(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def status(db: str, run_id: str) -> str:
    return show(db, run_id).split("status ", 1)[1].split()[0]


def started(db: str, flow: str, order: str = "o-1") -> str:
    """A run of ``flow``, waiting for the event ``order-shipped``."""
    out = fd(db, "start", flow, "--input", f'{{"order": "{order}"}}')
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.splitlines()[0]
    assert status(db, run_id) == "waiting"
    return run_id


def publish_hint(shown: str) -> str:
    return next(x for x in shown.splitlines() if "publish it with: " in x).split("with: ", 1)[1]


@pytest.mark.scenario("S100")
def test_a_payload_a_waiting_run_cannot_take_is_refused_before_it_is_published(
    db: str,
) -> None:
    run_id = started(db, "shipping")

    bad = fd(db, "publish", "order-shipped", "--payload", "[1,2]")

    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert bad.stdout == ""
    assert bad.stderr.strip() == (
        f"flowdesk: event 'order-shipped' was not published: run {run_id} waits for it at "
        "step 'ship', which takes a payload of type dict[str, Any] | None; [1,2] does not "
        "fit: Input should be a valid dictionary. Nothing was stored; publish a payload of "
        "type dict[str, Any] | None"
    )
    assert events(db) == []
    assert status(db, run_id) == "waiting"
    hint = publish_hint(show(db, run_id))
    assert hint == f"flowdesk --db {db} publish order-shipped"
    good = as_printed(hint + ' --payload \'{"carrier": "dhl"}\'', _env())
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == ["event 1 published", f"for 1 waiting run: {run_id}"]
    assert status(db, run_id) == "completed"
    assert events(db) == [(1, '{"carrier":"dhl"}')]


@pytest.mark.scenario("S100")
def test_an_event_is_refused_when_any_run_waiting_for_its_type_cannot_take_it(db: str) -> None:
    """A broadcast: two runs take a JSON object, one a number; an object
    is refused for the one that takes a number (named with its step and
    type), a number for the two that take an object (both named). Once
    the counting run is canceled, the object is published and reaches both
    others."""
    ship1, ship2 = started(db, "shipping"), started(db, "shipping")
    count = started(db, "counting")

    obj = fd(db, "publish", "order-shipped", "--payload", '{"a": 1}')
    num = fd(db, "publish", "order-shipped", "--payload", "3")

    assert obj.returncode == 2 and obj.stdout == ""
    assert obj.stderr.strip() == (
        f"flowdesk: event 'order-shipped' was not published: run {count} waits for it at "
        "step 'count', which takes a payload of type int | None; {\"a\":1} does not fit: "
        "Input should be a valid integer. Nothing was stored; publish a payload of type "
        "int | None"
    )
    assert num.returncode == 2 and num.stdout == ""
    first, other = (ship1, ship2) if f"run {ship1} waits" in num.stderr else (ship2, ship1)
    assert num.stderr.strip() == (
        f"flowdesk: event 'order-shipped' was not published: run {first} waits for it at "
        "step 'ship', which takes a payload of type dict[str, Any] | None; 3 does not fit: "
        f"Input should be a valid dictionary; run {other} cannot take it either (step "
        "'ship', type dict[str, Any] | None). Nothing was stored; publish a payload of "
        "type dict[str, Any] | None"
    )
    assert events(db) == []
    assert {status(db, r) for r in (ship1, ship2, count)} == {"waiting"}
    assert fd(db, "cancel", count).returncode == 0
    again = fd(db, "publish", "order-shipped", "--payload", '{"a": 1}')
    assert again.returncode == 0, again.stderr
    assert (status(db, ship1), status(db, ship2)) == ("completed", "completed")


@pytest.mark.scenario("S100")
def test_a_bad_event_stored_anyway_is_refused_by_the_wait_which_keeps_waiting(db: str) -> None:
    """Published from a process without the runs' flows, which cannot judge
    it: stored. The processes that run the flows refuse it: each run goes
    on waiting, from just after it (no worker wakes it again for it), says
    why in ``show`` (and ``show -o json``), and takes the next good event
    published with the command ``show`` prints."""
    ship, count = started(db, "shipping"), started(db, "counting")
    sent = flowdesk(db, "publish", "order-shipped", "--payload", "[1,2]", env=_bare())
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.splitlines()[0] == "event 1 published"
    assert sorted(wakeable(db)) == sorted([ship, count])

    resumed = fd(db, "resume", ship)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.strip() == f"run {ship} waiting"
    shown = as_printed(resumed.stderr.strip().split("answers it: ", 1)[1], _env()).stdout
    assert "status waiting" in shown
    assert (
        "refused events (their payload did not fit; the run went on waiting):\n"
        f"  event 1 (wait {ship}:ship:0): field 'shipped' (dict[str, Any] | None): [1,2] does "
        "not fit: Input should be a valid dictionary\n"
    ) in shown
    assert "--payload JSON, of type dict[str, Any] | None (another is refused)" in shown
    assert wakeable(db) == [count]  # the refused event wakes it no more
    assert fd(db, "resume", "--all").returncode == 0
    assert wakeable(db) == []
    assert json.loads(fd(db, "show", count, "-o", "json").stdout)["refused_events"] == [
        {
            "event": 1,
            "wait": f"{count}:count:0",
            "reason": "field 'boxes' (int | None): [1,2] does not fit: Input should be a "
            "valid integer",
        }
    ]
    assert events(db) == [(1, "[1,2]")]  # kept: an event is never consumed

    good = as_printed(publish_hint(shown) + " --payload 4", _env())  # fits counting only
    assert good.returncode == 2 and f"run {ship} waits for it" in good.stderr
    assert fd(db, "cancel", ship).returncode == 0
    good = as_printed(publish_hint(shown) + " --payload 4", _env())
    assert good.returncode == 0, good.stderr
    assert status(db, count) == "completed"


@pytest.mark.scenario("S100")
def test_a_run_an_older_version_failed_on_a_bad_event_resumes_and_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that failed on a stored bad event, as this version did (its
    wait took any event and failed the step on the payload): the ``resume``
    it printed could only fail again (the new wait looked from the failed
    one's start). Now the new wait refuses the event and waits, and a good
    event published then completes the run."""
    from desktop_app.flow import Engine, waiting
    from desktop_app.store.sqlite.store import open_store
    from tests.event_flows import shipping

    db = str(tmp_path / "e.db")
    assert fd(db, "db", "apply").returncode == 0
    run_id = started(db, "shipping")
    store = open_store(Path(db))
    engine = Engine(store, flows=[shipping])
    store.publish_event("order-shipped", [1, 2], engine.clock.now())
    with monkeypatch.context() as old:
        old.setattr(waiting, "_unfit", lambda *a: None)  # the older version's wait
        assert engine.wake(run_id).status == "failed"
    store.close()
    assert "WaitPayloadError" in fd(db, "show", run_id).stdout

    resumed = as_printed(f"flowdesk --db {db} resume {run_id}", _env())  # its old hint

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.strip() == f"run {run_id} waiting"
    shown = as_printed(resumed.stderr.strip().split("answers it: ", 1)[1], _env()).stdout
    assert f"  event 1 (wait {run_id}:ship:1): field 'shipped'" in shown
    assert wakeable(db) == []
    good = as_printed(publish_hint(shown) + " --payload '{\"a\": 1}'", _env())
    assert good.returncode == 0, good.stderr
    assert status(db, run_id) == "completed"


@pytest.mark.scenario("S100")
def test_a_refusal_survives_kill_9_of_the_agent_that_made_it(db: str) -> None:
    """``flowdesk agent`` refuses a bad event published from a process
    without the flow and is killed with SIGKILL: the refusal was stored
    with the checkpoint, so the restarted agent (and ``resume --all``)
    neither meets the event again nor records it twice, the run still
    waits, and a good event completes it."""
    run_id = started(db, "shipping")
    agent = spawn("--db", db, "agent", env=_env())
    try:
        serving(agent)
        sent = flowdesk(db, "publish", "order-shipped", "--payload", "[1,2]", env=_bare())
        assert sent.returncode == 0, sent.stderr
        for _ in range(600):  # each a `show` subprocess: minutes, not a timing assert
            if "refused events" in show(db, run_id):
                break
            assert agent.poll() is None, agent.communicate()
        else:
            pytest.fail(f"the agent did not refuse the event: {show(db, run_id)}")
        agent.send_signal(signal.SIGKILL)
        agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate(timeout=60)
    assert agent.returncode == -signal.SIGKILL

    again = fd(db, "resume", "--all")

    assert again.returncode == 0, again.stdout + again.stderr
    assert wakeable(db) == []
    shown = json.loads(fd(db, "show", run_id, "-o", "json").stdout)
    assert shown["status"] == "waiting"
    assert [r["event"] for r in shown["refused_events"]] == [1]
    good = as_printed(publish_hint(show(db, run_id)) + " --payload '{\"a\": 1}'", _env())
    assert good.returncode == 0, good.stderr
    assert status(db, run_id) == "completed"


@pytest.mark.scenario("S100")
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_the_engine_refuses_a_bad_event_on_every_store_and_its_wait_looks_past_it(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """``Engine.publish`` refuses (``EventPayloadError``, nothing stored);
    one stored anyway is refused by the wait, recorded once, the same wait
    (id, deadline) looks on from just after it, so ``wakeable_runs`` no
    longer names the run, and the next good event completes the run. The in-memory store as the
    SQLite file."""
    from desktop_app.errors import EventPayloadError
    from desktop_app.flow import Engine
    from desktop_app.store.memory.store import InMemoryCheckpointStore
    from desktop_app.store.sqlite.store import open_store
    from tests.event_flows import counting, shipping

    store: Any = (
        InMemoryCheckpointStore()
        if backend == "memory"
        else open_store(request.getfixturevalue("db_path"))
    )
    engine = Engine(store, flows=[shipping, counting])
    run_id = engine.run("shipping", {"order": "o-1"}).run_id
    before = store.latest(run_id).waits

    with pytest.raises(EventPayloadError) as refused:
        engine.publish("order-shipped", 3)

    assert (refused.value.run_id, refused.value.step_id) == (run_id, "ship")
    assert refused.value.unfit == [(run_id, "ship", "dict[str, Any] | None")]
    assert store.first_event("order-shipped", 0.0) is None
    bad = store.publish_event("order-shipped", 3, engine.clock.now())
    assert store.wakeable_runs(engine.clock.now()) == [run_id]
    assert engine.wake(run_id).status == "waiting"
    cp = store.latest(run_id)
    assert cp.meta["refused_events"] == [
        {
            "event": bad,
            "wait": f"{run_id}:ship:0",
            "reason": "field 'shipped' (dict[str, Any] | None): 3 does not fit: Input should "
            "be a valid dictionary",
        }
    ]
    [wait] = cp.waits
    assert (wait.wait_id, wait.deadline_at) == (before[0].wait_id, before[0].deadline_at)
    assert wait.created_at > store.first_event("order-shipped", 0.0).published_at
    assert store.wakeable_runs(engine.clock.now()) == []
    assert engine.wake(run_id).status == "waiting"
    assert store.latest(run_id).revision == cp.revision  # met no more: nothing saved
    assert engine.publish("order-shipped", {"carrier": "dhl"}) == bad + 1
    assert store.get_run(run_id).status == "completed"
    assert store.latest(run_id).meta["refused_events"] == cp.meta["refused_events"]
    store.close()
