"""Moving a run onto a new flow version, publishing events and stopping the
engine, where no scenario test pinned the details down: what the upgrade
fork keeps (completed steps the new flow still has, the step it stopped at,
its lineage), what it refuses, the old run's in-process cancel flag, an event
published past a run this process cannot wake, and the leases ``stop`` hands
back at once."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import CheckpointDecodeError, RunStateError, StoreError
from desktop_app.flow import Engine, FlowBuilder, RunResult
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.flow.events import RunStarted
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store
from tests.polling import until


class S(BaseModel):
    n: int = 0
    answer: str | None = None
    notes: list[str] = []


class Smaller(BaseModel):
    n: int = 0
    answer: str | None = None


class Retyped(BaseModel):
    n: list[str] = []
    answer: str | None = None
    notes: list[str] = []


def engine_for(db_path, *flows, clock=None) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock())


def _v1(ran: list[str]):
    def prep(s: S) -> dict:
        ran.append("prep")
        return {"n": 1}

    return (
        FlowBuilder("up", S, version="1")
        .step("prep", prep)
        .step("gone", lambda s: {"notes": ["gone"]})
        .await_input("ok", "answer")
        .step("go", lambda s: {"notes": [*s.notes, "v1"]})
        .chain()
        .compile()
    )


def _v2(ran: list[str]):
    def prep(s: S) -> dict:
        ran.append("prep v2")
        return {"n": 1}

    return (
        FlowBuilder("up", S, version="2")
        .step("prep", prep)
        .await_input("ok", "answer")
        .step("go", lambda s: {"notes": [*s.notes, "v2"]})
        .chain()
        .compile()
    )


def _waiting_v1_run(db_path, ran: list[str]) -> tuple[str, ManualClock]:
    clock = ManualClock()
    old = engine_for(db_path, _v1(ran), clock=clock)
    ctx = ExecutionContext(tenant_id="t-1", user_id="u-1", correlation_id="c-1")
    res = old.run("up", S(), context=ctx)
    assert res.status == "waiting"
    old.store.close()
    return res.run_id, clock


def test_fork_onto_current_keeps_only_completed_steps_the_new_flow_has(db_path):
    ran: list[str] = []
    old_id, clock = _waiting_v1_run(db_path, ran)
    v2 = _v2(ran)
    engine = engine_for(db_path, v2, clock=clock)
    v1_version = engine.status(old_id).flow_version
    report = engine.incompatible_runs()
    assert [(r.run_id, r.flow_name, r.status, r.step) for r in report] == [
        (old_id, "up", "waiting", "ok")
    ]
    last = engine.store.latest(old_id)
    forked = engine.fork_onto_current(old_id)
    assert forked.status == "waiting" and forked.state.notes == ["gone"]
    first = engine.store.get_checkpoint(forked.run_id, 0)
    assert first.frontier == ("ok",)  # continues where it stopped, not at the entry
    assert first.steps["prep"] == last.steps["prep"]
    assert first.steps["prep"].status == "completed"
    assert "gone" not in first.steps  # v2 has no such step
    assert set(first.steps) == {"prep", "ok"}
    assert first.meta["forked_from_version"] == v1_version != v2.version
    assert first.meta["forked_from"] == f"{old_id}:{last.revision}"
    run = engine.status(forked.run_id)
    assert run.parent_run_id == old_id and run.flow_version == v2.version
    assert (run.context["tenant_id"], run.context["user_id"]) == ("t-1", "u-1")
    assert run.context["correlation_id"] == "c-1" and run.context["run_id"] == forked.run_id
    done = engine.resume_with(forked.run_id, "yes")
    assert done.status == "completed" and done.state.notes == ["gone", "v2"]
    assert ran == ["prep"]  # the completed step never ran again
    superseded = engine.status(old_id)
    assert superseded.status == "canceled"
    assert superseded.error == f"superseded by run {forked.run_id} on flow version {v2.version}"
    assert engine.incompatible_runs() == []
    engine.store.close()


def test_fork_onto_current_refuses_a_state_the_new_model_cannot_decode(db_path):
    ran: list[str] = []
    old_id, clock = _waiting_v1_run(db_path, ran)
    v3 = FlowBuilder("up", Retyped, version="3").await_input("ok", "answer").compile()
    engine = engine_for(db_path, v3, clock=clock)
    rev = engine.store.latest(old_id).revision
    with pytest.raises(CheckpointDecodeError) as err:
        engine.fork_onto_current(old_id)
    assert (err.value.run_id, err.value.revision, err.value.field_path) == (old_id, rev, "n")
    assert str(err.value).startswith(f"checkpoint of run {old_id} revision {rev} cannot")
    assert engine.status(old_id).status == "waiting"
    assert [r.run_id for r in engine.store.list_runs(flow_name="up")] == [old_id]
    engine.store.close()


def test_fork_onto_current_leaves_out_a_field_the_new_model_removed(db_path):
    """The new model lacks ``notes``: the new run's state leaves it out, and
    the old run's checkpoints keep it (``state.upgraded_state``)."""
    ran: list[str] = []
    old_id, clock = _waiting_v1_run(db_path, ran)
    v3 = FlowBuilder("up", Smaller, version="3").await_input("ok", "answer").compile()
    engine = engine_for(db_path, v3, clock=clock)
    forked = engine.fork_onto_current(old_id)
    assert forked.status == "waiting"
    assert engine.get(forked.run_id) == Smaller(n=1)
    assert engine.store.latest(old_id).state["notes"] == ["gone"]
    assert engine.status(old_id).status == "canceled"
    engine.store.close()


def test_fork_onto_current_refuses_a_run_stopped_at_a_step_the_new_flow_lacks(db_path):
    ran: list[str] = []
    old_id, clock = _waiting_v1_run(db_path, ran)
    v4 = (
        FlowBuilder("up", S, version="4")
        .step("prep", lambda s: {})
        .await_input("approve", "answer")
        .chain()
        .compile()
    )
    engine = engine_for(db_path, v4, clock=clock)
    with pytest.raises(RunStateError) as err:
        engine.fork_onto_current(old_id)
    assert str(err.value) == (
        f"run {old_id} stopped at 'ok', which flow 'up' {v4.version} no longer has, so it "
        "cannot go on under this version; end it, or keep it for the flow's old code"
    )
    assert engine.status(old_id).status == "waiting"
    assert [r.run_id for r in engine.store.list_runs(flow_name="up")] == [old_id]
    engine.store.close()


class _ForkInBackoff(ManualClock):
    """A clock whose first backoff sleep moves the run being driven onto the
    current flow (as a person in the app could, from another thread)."""

    engine: Engine | None = None
    run_ids: list[str]
    forking = False
    forked: RunResult | None = None

    def sleep(self, seconds, cancel=None):  # type: ignore[override]
        assert self.engine is not None
        if not self.forking:  # once: the new run's own backoff just passes
            self.forking = True
            self.forked = self.engine.fork_onto_current(self.run_ids[0])
        return super().sleep(seconds, cancel)


def test_the_superseded_run_stops_before_its_next_attempt(db_path):
    seen: list[tuple[str, int]] = []

    def flaky(s: S, ctx) -> dict:
        seen.append((ctx.run_id, ctx.attempt))
        if ctx.attempt == 1:
            raise ValueError("flaky")
        return {"n": ctx.attempt}

    policy = RetryPolicy(retries=3, backoff=Backoff(initial_s=5.0, jitter_s=0.0))
    flow = FlowBuilder("bo", S, retry=policy).step("flaky", flaky).compile()
    clock = _ForkInBackoff()
    clock.run_ids = []
    engine = engine_for(db_path, flow, clock=clock)
    clock.engine = engine

    def track(event) -> None:
        if isinstance(event, RunStarted) and not clock.run_ids:
            clock.run_ids.append(event.run_id)

    engine.events.subscribe(track)
    res = engine.run("bo", S())
    forked = clock.forked
    assert forked is not None and forked.status == "completed"
    assert res.status == "canceled"
    old = res.run_id
    new = forked.run_id
    assert seen == [(old, 1), (new, 1), (new, 2)]  # the old run never tried again
    assert engine.status(old).error == f"superseded by run {new} on flow version {flow.version}"
    engine.store.close()


def test_publish_wakes_the_runs_it_can_past_one_whose_flow_is_not_here(db_path):
    clock = ManualClock()
    listen = FlowBuilder("listen", S).wait_event("w", "order.paid", into="answer").compile()
    other = FlowBuilder("other", S).wait_event("w", "order.paid", into="answer").compile()
    first = engine_for(db_path, listen, clock=clock)
    foreign = first.run("listen", S()).run_id
    first.store.close()
    engine = engine_for(db_path, other, clock=clock)
    mine = engine.run("other", S()).run_id
    assert sorted(engine.store.runs_waiting_for("event", "order.paid")) == sorted([foreign, mine])
    event_id = engine.publish("order.paid", "p-1")
    assert isinstance(event_id, int)
    assert engine.status(mine).status == "completed"
    assert engine.get(mine).answer == "p-1"
    assert engine.status(foreign).status == "waiting"  # left for a process that has its flow
    engine.store.close()


def test_stop_keeps_the_lease_while_the_step_runs_and_hands_it_back_once_it_ended(db_path):
    """SIGTERM's ``stop`` mid-step: a peer must not take the run over while
    this step may still run (a new user saw it run twice at once), so the
    lease stays ours until the step ended; then it is handed back at once."""
    seen: list[object] = []
    engine: Engine

    def work(s: S, ctx) -> dict:
        assert engine.store.get_run(ctx.run_id).lease_owner == engine.owner
        engine.stop()
        seen.append(engine.store.get_run(ctx.run_id).lease_owner)
        return {"n": 1}

    clock = ManualClock()
    flow = FlowBuilder("st", S).step("work", work).step("after", lambda s: {"n": 2}).chain()
    engine = engine_for(db_path, flow.compile(), clock=clock)
    res = engine.run("st", S())
    assert seen == [engine.owner]
    assert res.status in ("running", "pending")
    run = engine.store.get_run(res.run_id)
    assert (run.lease_owner, run.lease_expires_at) == (None, None)
    assert engine.store.latest(res.run_id).steps["work"].status == "completed"
    engine.store.close()
    later = engine_for(db_path, flow.compile(), clock=clock)
    assert later.resume(res.run_id).state.n == 2
    later.store.close()


def test_stop_still_stops_when_the_store_has_gone_away(db_path):
    stopped: list[bool] = []
    engine: Engine

    def work(s: S, ctx) -> dict:
        engine.store.close()  # the disk went away under the run
        engine.stop()
        stopped.append(engine.shutdown_event.is_set())
        return {"n": 1}

    engine = engine_for(db_path, FlowBuilder("st", S).step("work", work).compile())
    with pytest.raises(StoreError):
        engine.run("st", S())
    assert stopped == [True]


class Cond(BaseModel):
    n: int = 0
    b_ran: bool = False


def test_fork_onto_current_keeps_a_condition_it_entered_decided(db_path):
    """The nested step ``a`` changes what the predicate reads: re-deciding the
    condition on the new version would skip ``b`` though ``a`` already ran."""
    ran: list[str] = []
    broken = [True]

    def a(s: Cond) -> dict:
        ran.append("a")
        return {"n": 1}

    def b(s: Cond) -> dict:
        ran.append("b")
        if broken[0]:
            raise ValueError("b fails once")
        return {"b_ran": True}

    def flow(version: str):
        return (
            FlowBuilder("cond", Cond, version=version)
            .condition("pick", lambda s: s.n == 0, [("a", a), ("b", b)])
            .step("end", lambda s: {})
            .chain()
            .compile()
        )

    clock = ManualClock()
    old = engine_for(db_path, flow("1"), clock=clock)
    first = old.run("cond", Cond())
    assert first.status == "failed" and first.state.n == 1
    assert old.store.latest(first.run_id).meta["conditions"] == {"pick": True}
    old.store.close()
    broken[0] = False
    engine = engine_for(db_path, flow("2"), clock=clock)
    moved = engine.fork_onto_current(first.run_id)
    assert moved.status == "completed"
    assert moved.state == Cond(n=1, b_ran=True)
    assert ran == ["a", "b", "b"]  # a is not run again, b is
    assert engine.store.latest(moved.run_id).steps["b"].status == "completed"
    engine.store.close()


def test_fork_onto_current_counts_on_from_the_steps_already_taken(db_path):
    def flow(version: str):
        return (
            FlowBuilder("cap", S, version=version, max_steps=3)
            .step("one", lambda s: {"n": 1})
            .step("two", lambda s: {"n": 2})
            .await_input("ok", "answer")
            .step("three", lambda s: {"n": 3})
            .step("four", lambda s: {"n": 4})
            .chain()
            .compile()
        )

    clock = ManualClock()
    old = engine_for(db_path, flow("1"), clock=clock)
    first, kept = old.run("cap", S()), old.run("cap", S())
    assert first.status == kept.status == "waiting"
    taken = old.store.latest(first.run_id).meta["steps_taken"]
    # on its own version the run halts at the cap, counting the steps it took
    stays = old.resume_with(kept.run_id, "yes")
    assert stays.status == "failed" and stays.error is not None
    assert stays.error.startswith("halted: max_steps 3 reached")
    old.store.close()
    engine = engine_for(db_path, flow("2"), clock=clock)
    moved = engine.fork_onto_current(first.run_id)
    assert engine.store.get_checkpoint(moved.run_id, 0).meta["steps_taken"] == taken
    out = engine.resume_with(moved.run_id, "yes")
    assert (out.status, out.error, out.state.n) == (stays.status, stays.error, stays.state.n)
    engine.store.close()


def test_fork_onto_current_names_the_new_run_once_stored_before_it_is_driven(db_path):
    """``on_created`` gets the new run's id once it and the old run's cancel
    are stored, before the new run is driven (it is still ``running``, not
    yet waiting at ``ok``): the launch report and ``resume --onto-current``
    name it then. It is called once."""
    ran: list[str] = []
    old_id, clock = _waiting_v1_run(db_path, ran)
    engine = engine_for(db_path, _v2(ran), clock=clock)
    seen: list[tuple[str, str, str]] = []

    def created(new_id: str) -> None:
        seen.append((new_id, engine.status(new_id).status, engine.status(old_id).status))

    forked = engine.fork_onto_current(old_id, on_created=created)
    assert seen == [(forked.run_id, "running", "canceled")]
    assert forked.status == "waiting" and ran == ["prep"]
    engine.store.close()


def test_a_superseded_run_in_a_long_backoff_stops_at_once(db_path):
    """The old run waits out a 60 s retry backoff in another thread when it
    is moved onto the current version: its in-process cancel flag wakes it,
    so it ends (canceled) at once, not at the backoff's end or when the
    lease heartbeat (every 30 s) finds it canceled in the store."""
    import threading

    started = threading.Event()

    def failing(s: S) -> dict:
        started.set()
        raise ValueError("flaky")

    policy = RetryPolicy(retries=3, backoff=Backoff(initial_s=60.0, jitter_s=0.0))
    v1 = FlowBuilder("bo", S, version="1", retry=policy).step("flaky", failing).compile()
    v2 = FlowBuilder("bo", S, version="2").step("flaky", lambda s: {"n": 2}).compile()
    engine = Engine(open_store(db_path), flows=[v1])
    results: list[RunResult] = []
    driver = threading.Thread(target=lambda: results.append(engine.run("bo", S())))
    driver.start()
    assert started.wait(30)
    (run,) = engine.store.list_runs(flow_name="bo")

    def backing_off() -> bool:  # its failed attempt saved: it sleeps out the backoff now
        rec = engine.store.latest(run.run_id).steps.get("flaky")
        return rec is not None and rec.next_retry_at is not None

    until(backing_off, "the failed attempt's backoff to be saved")
    engine.register(v2)  # the flow's new code, registered while the run backs off
    forked = engine.fork_onto_current(run.run_id)
    driver.join(timeout=10)  # at once: well under the heartbeat's 30 s
    assert not driver.is_alive(), "the superseded run waited out its backoff"
    assert forked.status == "completed" and results[0].status == "canceled"
    engine.store.close()
