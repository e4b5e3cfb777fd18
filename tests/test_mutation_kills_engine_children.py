"""The Engine's child runs and its terminal moves that no scenario test pinned
down: a reattached waiting child comes back exactly as stored, a canceled or
timed-out child stops its parent's step with a message saying what to do,
canceling a parent hands its children the parent's reason and reports every
child it could not cancel, and cancel / fail_run write the reason, the time,
the step and the end of the waits into the terminal checkpoint."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import CheckpointDecodeError, RunStateError, StoreError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.children import register_child_kind
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store

HOUR = 3600.0


class P(BaseModel):
    note: str = ""
    seen: list[list] = []


class C(BaseModel):
    text: str = "child"
    answer: str | None = None


class Other(BaseModel):
    renamed: str = ""


def engine_for(db_path, *flows, clock=None) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock())


def _asking_child(deadline_s: float | None = None):
    return FlowBuilder("kid", C, deadline_s=deadline_s).await_input("ask", "answer").compile()


def _parent(engine: Engine, **catch):
    """A parent whose step starts (or reattaches to) one child, records what
    ``run_child`` gave, then waits for a person: answering it re-runs the step."""

    def start(s: P, ctx) -> dict:
        try:
            kid = engine.run_child(ctx, "kid", {"text": "from parent"})
        except tuple(catch.values()) as exc:
            return {"note": f"{type(exc).__name__}: {exc}"}
        seen = [*s.seen, [kid.run_id, kid.status, kid.state.model_dump(), kid.revision, kid.error]]
        ctx.interrupt("hold")
        return {"seen": seen}

    return FlowBuilder("parent", P).step("start", start).compile()


# -- run_child ---------------------------------------------------------------


def test_a_waiting_child_is_given_back_as_stored_when_its_step_runs_again(db_path):
    engine = engine_for(db_path, _asking_child())
    engine.register(_parent(engine))
    res = engine.run("parent", P())
    assert res.status == "waiting"
    kid = f"{res.run_id}:start"
    stored = engine.store.latest(kid)
    done = engine.resume_with(res.run_id, "go")
    assert done.status == "completed"
    expected = [kid, "waiting", {"text": "from parent", "answer": None}, stored.revision, None]
    # the first run of the step started the child; the second reattached to it
    assert done.state.seen == [expected]
    assert engine.store.latest(kid).revision == stored.revision  # nothing ran in the child
    assert engine.status(kid).status == "waiting"
    engine.store.close()


def test_a_reattached_paused_child_keeps_its_pause_reason(db_path):
    broken = [True]

    def work(s: C) -> dict:
        if broken[0]:
            raise ValueError("disk full")
        return {"answer": "ok"}

    kid_flow = FlowBuilder("kid", C).step("work", work, on_error="pause").compile()
    engine = engine_for(db_path, kid_flow)
    engine.register(_parent(engine))
    res = engine.run("parent", P())
    kid = f"{res.run_id}:start"
    paused = engine.status(kid)
    assert paused.status == "waiting" and paused.error and "disk full" in paused.error
    done = engine.resume_with(res.run_id, "go")
    assert done.status == "completed"
    rev = engine.store.latest(kid).revision
    assert done.state.seen == [
        [kid, "waiting", {"text": "from parent", "answer": None}, rev, paused.error]
    ]
    engine.store.close()


def test_a_waiting_child_that_no_longer_decodes_names_itself_and_its_revision(db_path):
    engine = engine_for(db_path, _asking_child())
    engine.register(_parent(engine))
    res = engine.run("parent", P())
    kid = f"{res.run_id}:start"
    rev = engine.store.latest(kid).revision
    engine.store.close()
    # same flow name and version, but its state model lost a field
    changed = FlowBuilder("kid", Other).await_input("ask", "renamed").compile()
    again = engine_for(db_path, changed, clock=engine.clock)
    again.register(_parent(again, decode=CheckpointDecodeError))
    out = again.resume_with(res.run_id, "go")
    assert out.status == "completed"
    assert out.state.note.startswith(
        f"CheckpointDecodeError: checkpoint of run {kid} revision {rev} cannot be decoded"
    )
    again.store.close()


def test_a_canceled_child_stops_the_step_with_what_to_do(db_path):
    engine = engine_for(db_path, _asking_child())
    engine.register(_parent(engine, state=RunStateError))
    res = engine.run("parent", P())
    kid = f"{res.run_id}:start"
    engine.cancel(kid)
    out = engine.resume_with(res.run_id, "go")
    assert out.status == "completed"
    assert out.state.note == (
        f"RunStateError: child run {kid} of step 'start' is canceled; replay or fork it, "
        "or fail the parent"
    )
    assert out.state.seen == []  # the step never got a result for the child
    engine.store.close()


def test_a_timed_out_child_stops_the_step_with_what_to_do(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, _asking_child(deadline_s=HOUR), clock=clock)
    engine.register(_parent(engine, state=RunStateError))
    res = engine.run("parent", P())
    kid = f"{res.run_id}:start"
    clock.advance(HOUR + 1)
    assert engine.wake(kid).status == "timed_out"
    out = engine.resume_with(res.run_id, "go")
    assert out.status == "completed"
    assert out.state.note == (
        f"RunStateError: child run {kid} of step 'start' is timed_out; replay or fork it, "
        "or fail the parent"
    )
    engine.store.close()


def test_a_failed_child_is_resumed_when_its_step_runs_again(db_path):
    broken = [True]

    def work(s: C) -> dict:
        if broken[0]:
            raise ValueError("not yet")
        return {"answer": s.text.upper()}

    engine = engine_for(db_path, FlowBuilder("kid", C).step("work", work).compile())

    def start(s: P, ctx) -> dict:
        kid = engine.run_child(ctx, "kid", {"text": "again"})
        return {"note": f"{kid.status}:{kid.state.answer}"}

    engine.register(FlowBuilder("parent", P).step("start", start).compile())
    res = engine.run("parent", P())
    assert res.status == "completed" and res.state.note == "failed:None"
    broken[0] = False
    rerun = engine.replay(f"{res.run_id}:0")
    assert rerun.state.note == "completed:AGAIN"
    assert engine.status(f"{res.run_id}:start").status == "completed"
    engine.store.close()


# -- cancel, fail_run, the terminal checkpoint -------------------------------


def test_cancel_without_a_reason_says_the_user_canceled_and_children_get_the_parents(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, _asking_child(), clock=clock)
    engine.register(_parent(engine))
    res = engine.run("parent", P())
    kid = f"{res.run_id}:start"
    assert engine.waits(kid) and engine.waits(res.run_id)
    clock.advance(42.0)
    out = engine.cancel(res.run_id)
    assert (out.status, out.error) == ("canceled", "canceled by user")
    child = engine.status(kid)
    assert (child.status, child.error) == ("canceled", f"parent run {res.run_id} was canceled")
    for rid, step in ((res.run_id, "start"), (kid, "ask")):
        cp = engine.store.latest(rid)
        assert (cp.status, cp.step_id, cp.waits) == ("canceled", step, ())
        assert cp.created_at == clock.now()
        assert engine.waits(rid) == []
    engine.store.close()


def test_cancel_and_fail_run_store_the_given_reason_and_the_head_step(db_path):
    clock = ManualClock()
    flow = FlowBuilder("kid", C).step("first", lambda s: {}).step("second", lambda s: {}).chain()
    engine = engine_for(db_path, flow.compile(), clock=clock)
    pending = engine.start("kid", C())
    assert engine.store.latest(pending).step_id == ""
    clock.advance(5.0)
    out = engine.cancel(pending, "wrong input file")
    assert (out.status, out.error) == ("canceled", "wrong input file")
    cp = engine.store.latest(pending)
    assert (cp.step_id, cp.error, cp.created_at) == ("first", "wrong input file", clock.now())

    other = engine.start("kid", C())
    clock.advance(5.0)
    failed = engine.fail_run(other, "flow changed; abandoned")
    assert (failed.status, failed.error) == ("failed", "flow changed; abandoned")
    cp = engine.store.latest(other)
    assert (cp.status, cp.step_id, cp.error) == ("failed", "first", "flow changed; abandoned")
    assert cp.created_at == clock.now()
    engine.store.close()


@pytest.mark.parametrize("how", ["completed", "canceled", "timed_out"])
def test_a_finished_run_cannot_be_canceled_or_failed(db_path, how):
    clock = ManualClock()
    flows = [
        FlowBuilder("done", C).step("only", lambda s: {"answer": "x"}).compile(),
        _asking_child(deadline_s=HOUR),
    ]
    engine = engine_for(db_path, *flows, clock=clock)
    if how == "completed":
        rid = engine.run("done", C()).run_id
    else:
        rid = engine.run("kid", C()).run_id
        if how == "canceled":
            engine.cancel(rid)
        else:
            clock.advance(HOUR + 1)
            assert engine.wake(rid).status == "timed_out"
    before = engine.history(rid)
    message = f"run {rid} is already {how}; nothing to do"
    with pytest.raises(RunStateError) as err:
        engine.cancel(rid)
    assert str(err.value) == message
    with pytest.raises(RunStateError) as err:
        engine.fail_run(rid, "too late")
    assert str(err.value) == message
    assert engine.history(rid) == before and engine.status(rid).status == how
    engine.store.close()


# -- children a canceled parent could not cancel -----------------------------


def test_every_child_that_could_not_be_canceled_is_reported_and_the_rest_are(db_path):
    calls: list[tuple[object, str, str]] = []

    def refuse(store, child_id: str, reason: str, now: float) -> None:
        calls.append((store, child_id, reason))
        raise StoreError("the job server is gone")

    register_child_kind("kill-test-refusing-job", refuse)
    engine = engine_for(db_path, _asking_child())

    def start(s: P, ctx) -> dict:
        ctx.child_run_id("kill-test-unknown-job")
        ctx.child_run_id("kill-test-refusing-job")
        engine.run_child(ctx, "kid", {})
        ctx.interrupt("hold")
        return {}

    engine.register(FlowBuilder("parent", P).step("start", start).compile())
    res = engine.run("parent", P())
    pid = res.run_id
    with pytest.raises(RunStateError) as err:
        engine.cancel(pid)
    assert str(err.value) == (
        f"run {pid} was canceled, but not all its children: "
        f"kill-test-unknown-job child {pid}:start: no imported module cancels "
        "'kill-test-unknown-job' children; "
        f"kill-test-refusing-job child {pid}:start:1: the job server is gone"
    )
    assert calls == [(engine.store, f"{pid}:start:1", f"parent run {pid} was canceled")]
    assert calls[0][0] is engine.store
    assert engine.status(pid).status == "canceled"
    # the flow child after the two that failed is canceled all the same
    assert engine.status(f"{pid}:start:2").status == "canceled"
    engine.store.close()
