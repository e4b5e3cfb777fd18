"""Waits, deadlines, answers and resume in the run driver: what each one stores
and what the run does next (kill tests for mutants of ``flow/driver.py``).

Every test runs on a real SQLite file and the injected clock; the two crash
tests SIGKILL a real worker process mid-attempt and resume the run here.
"""

from __future__ import annotations

import os
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import InputError, WaitAlreadyResolvedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.protocol import StepRecord
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver


def both_ways(ts: float) -> str:
    """A deadline as a run's timeout error gives it: local time, then UTC."""
    moment = datetime.fromtimestamp(ts, UTC)
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return f"{moment.astimezone():%Y-%m-%d %H:%M:%S %Z} (local), {utc} (UTC)"


ROOT = Path(__file__).resolve().parents[1]


class S(BaseModel):
    n: int = 0
    count: int = 0
    answer: str | None = None
    payload: dict | None = None
    notes: list[str] = []
    visits: int = 0
    error: str | None = None


class Strict(BaseModel):
    amount: int = 0


def engine_for(db_path: Path, *flows, clock: ManualClock | None = None, **kw) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock(), **kw)


def checkpoint_after(engine: Engine, run_id: str, step_id: str, status: str | None = None):
    """The last checkpoint saved by ``step_id`` (optionally with ``status``)."""
    infos = [
        i
        for i in engine.history(run_id)
        if i.step_id == step_id and (status is None or i.status == status)
    ]
    assert infos, [(i.revision, i.step_id, i.status) for i in engine.history(run_id)]
    return engine.checkpoint(infos[-1].id)


def note(text: str):
    return lambda s: {"notes": [*s.notes, text]}


# -- an await step's deadline -------------------------------------------------


def approve_flow(on_timeout: bool):
    if not on_timeout:
        return (
            FlowBuilder("approve", S)
            .step("start", lambda s: {"n": 1})
            .await_input("ok", "answer", prompt="ship?", timeout_s=60.0)
            .step("ship", note("shipped"))
            .chain()
            .compile()
        )
    # start fans out to the await step and a side step: both are on the frontier
    return (
        FlowBuilder("approve", S)
        .step("start", lambda s: {"n": 1})
        .await_input("ok", "answer", prompt="ship?", timeout_s=60.0, on_timeout="expired")
        .step("side", note("side"))
        .step("ship", note("shipped"))
        .step("expired", note("expired"))
        .await_input("again", "answer", prompt="retry?")
        .edge("start", "ok")
        .edge("start", "side")
        .edge("ok", "ship")
        .edge("expired", "again")
        .finish("ship", "side", "again")
        .compile()
    )


def test_await_deadline_with_on_timeout_records_the_timeout_and_routes(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, approve_flow(True), clock=clock)
    res = engine.run("approve", S())
    assert res.status == "waiting"
    (wait,) = engine.waits(res.run_id)
    assert wait.wait_id == f"{res.run_id}:ok:0"
    assert wait.prompt == "ship?" and wait.deadline_at == wait.created_at + 60.0
    clock.advance(60.0)  # exactly at the deadline: it has passed
    fired = clock.now()
    out = engine.wake(res.run_id)
    assert out.status == "waiting"  # on to the second question after the timeout route
    cp = engine.store.latest(res.run_id)
    message = f"wait {wait.wait_id} timed out (deadline {both_ways(wait.deadline_at)})"
    assert cp.steps["ok"] == StepRecord(
        "ok",
        "completed",
        attempts=1,
        started_at=wait.created_at,
        finished_at=fired,
        error=message,
        error_type="WaitTimeout",
    )
    # the side branch on the frontier still ran; the timeout route ran once
    assert out.state.notes.count("side") == 1 and out.state.notes.count("expired") == 1
    assert "ship" not in cp.steps
    # the timed-out wait is gone, only the new question waits
    assert [w.wait_id for w in cp.waits] == [f"{res.run_id}:again:0"]
    assert cp.meta["await"] == {"step": "again", "into": "answer", "prompt": "retry?"}
    # the route target was recorded in progress, first attempt, when the wait fired
    routed = checkpoint_after(engine, res.run_id, "ok")
    assert routed.status == "running"
    assert routed.steps["expired"] == StepRecord(
        "expired", "in_progress", attempts=1, started_at=fired
    )
    assert "await" not in routed.meta
    assert routed.waits == ()
    done = cp.steps["expired"]
    assert (done.status, done.attempts, done.started_at) == ("completed", 1, fired)
    # the timed-out question counts as resolved: a late answer to it is refused
    with pytest.raises(WaitAlreadyResolvedError, match=wait.wait_id):
        engine.resume_with(res.run_id, "late", wait_id=wait.wait_id)
    engine.store.close()


def test_await_deadline_without_on_timeout_ends_the_run_timed_out(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, approve_flow(False), clock=clock)
    res = engine.run("approve", S())
    (wait,) = engine.waits(res.run_id)
    clock.advance(59.9)
    assert engine.wake(res.run_id).status == "waiting"
    clock.advance(0.1)
    fired = clock.now()
    out = engine.wake(res.run_id)
    message = f"wait {wait.wait_id} timed out (deadline {both_ways(wait.deadline_at)})"
    assert out.status == "timed_out" and out.error == message
    cp = engine.store.latest(res.run_id)
    assert cp.status == "timed_out" and cp.error == message and cp.waits == ()
    assert cp.steps["ok"] == StepRecord(
        "ok",
        "failed",
        attempts=1,
        started_at=wait.created_at,
        finished_at=fired,
        error=message,
        error_type="WaitTimeout",
    )
    assert "await" not in cp.meta
    assert engine.history(res.run_id)[-1].step_id == "ok"
    engine.store.close()


# -- the run's own deadline ---------------------------------------------------


def test_run_deadline_while_waiting_ends_the_run_with_the_deadline_in_the_error(db_path):
    clock = ManualClock()
    flow = (
        FlowBuilder("dl", S, deadline_s=100.0)
        .step("a", lambda s: {"n": 1})
        .await_input("ask", "answer", prompt="name?")
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("dl", S())
    deadline = engine.status(res.run_id).deadline_at
    assert deadline == pytest.approx(clock.now() + 100.0)
    assert engine.store.latest(res.run_id).meta["await"]["step"] == "ask"
    clock.advance(100.0)
    out = engine.wake(res.run_id)
    assert out.status == "timed_out"
    assert out.error == f"run deadline passed ({both_ways(deadline)})"
    cp = engine.store.latest(res.run_id)
    assert cp.waits == () and "await" not in cp.meta
    assert engine.history(res.run_id)[-1].step_id == "ask"
    engine.store.close()


# -- an interrupt's deadline (the head is a plain step) ----------------------


def ask_flow(timeout_s: float | None = 30.0):
    def ask(s: S, ctx) -> dict:
        return {"answer": ctx.interrupt("approve?", timeout_s=timeout_s)}

    return FlowBuilder("ask", S).step("prep", lambda s: {"n": 1}).step("ask", ask).chain().compile()


def test_interrupt_deadline_times_the_run_out_on_wake(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, ask_flow(), clock=clock)
    res = engine.run("ask", S())
    (wait,) = engine.waits(res.run_id)
    assert wait.wait_id == f"{res.run_id}:ask:0"
    assert wait.deadline_at == wait.created_at + 30.0
    clock.advance(29.0)
    assert engine.wake(res.run_id).status == "waiting"
    clock.advance(1.0)  # exactly the deadline
    fired = clock.now()
    out = engine.wake(res.run_id)
    assert out.status == "timed_out"
    assert out.error == f"wait {wait.wait_id} timed out (deadline {both_ways(wait.deadline_at)})"
    cp = engine.store.latest(res.run_id)
    assert cp.waits == ()
    assert cp.steps["ask"] == StepRecord(
        "ask",
        "failed",
        attempts=1,
        started_at=wait.created_at,
        finished_at=fired,
        error=f"wait {wait.wait_id} timed out",
        error_type="WaitTimeout",
    )
    assert cp.meta["resolved"][-1] == wait.wait_id
    assert engine.history(res.run_id)[-1].step_id == "ask"
    engine.store.close()


def test_interrupt_deadline_in_a_parallel_branch_fails_the_parallel_step(db_path):
    clock = ManualClock()

    def asks(s: S, ctx) -> dict:
        return {"answer": ctx.interrupt("which?", timeout_s=10.0)}

    flow = (
        FlowBuilder("par", S)
        .parallel("fan", {"quick": lambda s: {"n": 5}, "who/asks": asks})  # a "/" in a branch name
        .step("after", note("after"))
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("par", S())
    (wait,) = engine.waits(res.run_id)
    assert wait.step_id == "fan/who/asks"
    clock.advance(10.0)
    fired = clock.now()
    out = engine.wake(res.run_id)
    assert out.status == "timed_out"
    cp = engine.store.latest(res.run_id)
    # the parallel step (not its branch) failed on the timeout
    assert cp.steps["fan"] == StepRecord(
        "fan",
        "failed",
        attempts=1,
        started_at=wait.created_at,
        finished_at=fired,
        error=f"wait {wait.wait_id} timed out",
        error_type="WaitTimeout",
    )
    assert set(cp.steps) == {"fan"}
    assert engine.history(res.run_id)[-1].step_id == "fan/who/asks"
    engine.store.close()


def test_interrupt_records_the_head_waiting_with_its_attempt_and_start(db_path):
    clock = ManualClock()
    tries: list[int] = []

    def ask(s: S, ctx) -> dict:
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("flaky")
        return {"answer": ctx.interrupt("ok?", timeout_s=None)}

    flow = (
        FlowBuilder("ask", S, retry=2)
        .step("prep", lambda s: {"n": 1})
        .step("ask", ask)
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    started = clock.now()
    res = engine.run("ask", S())
    assert res.status == "waiting" and res.error is None
    cp = engine.store.latest(res.run_id)
    assert cp.error is None
    assert cp.steps["ask"] == StepRecord("ask", "waiting", attempts=2, started_at=started)
    (wait,) = cp.waits
    assert wait.deadline_at is None
    clock.advance(5.0)
    answered_at = clock.now()
    done = engine.resume_with(res.run_id, "yes")
    assert done.status == "completed" and done.state.answer == "yes"
    assert tries == [1, 2, 2]  # the answered attempt keeps its number
    rec = engine.store.latest(res.run_id).steps["ask"]
    assert (rec.status, rec.attempts, rec.started_at) == ("completed", 2, answered_at)
    engine.store.close()


def test_interrupt_inside_a_loop_resumes_at_the_same_iteration(db_path):
    ran: list[int] = []

    def body(s: S, ctx) -> dict:
        ran.append(ctx.iteration)
        if ctx.iteration == 3:
            return {"count": s.count + 1, "answer": ctx.interrupt("go on?")}
        return {"count": s.count + 1}

    flow = FlowBuilder("lp", S).loop("lp", body, until=lambda s: s.count >= 4).compile()
    engine = engine_for(db_path, flow)
    res = engine.run("lp", S())
    assert res.status == "waiting"
    rec = engine.store.latest(res.run_id).steps["lp"]
    assert (rec.status, rec.iteration) == ("waiting", 2)
    answered = engine.store.latest(res.run_id)
    assert answered.steps["lp"].started_at is not None
    done = engine.resume_with(res.run_id, "yes")
    assert done.status == "completed" and done.state.count == 4
    assert ran == [1, 2, 3, 3, 4]  # iterations 1 and 2 never ran again
    engine.store.close()


# -- answers ------------------------------------------------------------------


def test_two_questions_of_one_step_both_answers_are_kept(db_path):
    def ask(s: S, ctx) -> dict:
        first = ctx.interrupt("first?")
        second = ctx.interrupt("second?")
        return {"answer": f"{first}+{second}"}

    flow = FlowBuilder("two", S).step("ask", ask).compile()
    engine = engine_for(db_path, flow)
    res = engine.run("two", S())
    assert [w.wait_id for w in engine.waits(res.run_id)] == [f"{res.run_id}:ask:0"]
    mid = engine.resume_with(res.run_id, "a")
    assert mid.status == "waiting"
    assert [w.wait_id for w in engine.waits(res.run_id)] == [f"{res.run_id}:ask:1"]
    done = engine.resume_with(res.run_id, "b")
    assert done.status == "completed" and done.state.answer == "a+b"
    engine.store.close()


def test_an_answer_is_recorded_before_anything_runs(db_path):
    """An observer process (executes=False) records the answer; the worker
    that runs the run later hands it to the step."""
    clock = ManualClock()
    seen: list[str] = []

    def ask(s: S, ctx) -> dict:
        reply = ctx.interrupt("ok?")
        seen.append(reply)
        return {"answer": reply}

    def flow():
        return (
            FlowBuilder("obs", S)
            .step("prep", lambda s: {"n": 1})
            .step("ask", ask)
            .chain()
            .compile()
        )

    engine = engine_for(db_path, flow(), clock=clock)
    res = engine.run("obs", S())
    (wait,) = engine.waits(res.run_id)
    engine.store.close()
    observer = engine_for(db_path, flow(), clock=clock, executes=False)
    clock.advance(3.0)
    answered_at = clock.now()
    before = observer.store.latest(res.run_id).steps["ask"]
    assert observer.resume_with(res.run_id, "yes").status == "running"
    cp = observer.store.latest(res.run_id)
    assert cp.status == "running" and cp.waits == ()
    assert cp.meta["answers"] == {wait.wait_id: "yes"}
    # handed to a worker with its attempt not begun (next_retry_at now)
    assert cp.steps["ask"] == StepRecord(
        "ask",
        "in_progress",
        attempts=before.attempts,
        started_at=answered_at,
        next_retry_at=answered_at,
    )
    observer.store.close()
    worker = engine_for(db_path, flow(), clock=clock)
    done = worker.resume(res.run_id)
    assert done.status == "completed" and done.state.answer == "yes"
    assert seen == ["yes"]
    # the step runs again after its answer in the same attempt, as it does
    # in a process that executes (not a second one, as after a crash)
    assert worker.store.latest(res.run_id).steps["ask"].attempts == before.attempts
    worker.store.close()


def test_continuations_of_two_branches_survive_each_others_answers(db_path):
    seen: dict[str, object] = {}

    def a(s: S, ctx) -> dict:
        first = ctx.interrupt("a first?", continuation={"draft": 1})
        second = ctx.interrupt("a second?")
        seen["a"] = ctx.continuation
        return {"answer": first + second}

    def b(s: S, ctx) -> dict:
        reply = ctx.interrupt("b?", continuation={"draft": 2})
        seen["b"] = ctx.continuation
        return {"notes": [reply]}

    flow = FlowBuilder("cont", S).parallel("fan", {"a": a, "b": b}).compile()
    engine = engine_for(db_path, flow)
    rid = engine.run("cont", S()).run_id
    engine.resume_with(rid, "1", wait_id=f"{rid}:fan/a:0")
    engine.resume_with(rid, "x", wait_id=f"{rid}:fan/b:0")
    done = engine.resume_with(rid, "2", wait_id=f"{rid}:fan/a:1")
    assert done.status == "completed" and done.state.answer == "12"
    assert seen == {"a": {"draft": 1}, "b": {"draft": 2}}
    engine.store.close()


def test_a_second_question_in_a_branch_is_registered_beside_a_pending_one(db_path):
    def a(s: S, ctx) -> dict:
        first = ctx.interrupt("a first?")
        return {"answer": first + ctx.interrupt("a second?")}

    def b(s: S, ctx) -> dict:
        return {"notes": [ctx.interrupt("b?")]}

    flow = FlowBuilder("br", S).parallel("fan", {"a": a, "b": b}).compile()
    engine = engine_for(db_path, flow)
    res = engine.run("br", S())
    rid = res.run_id
    engine.resume_with(rid, "1", wait_id=f"{rid}:fan/a:0")
    ids = sorted(w.wait_id for w in engine.waits(rid))
    assert ids == [f"{rid}:fan/a:1", f"{rid}:fan/b:0"]
    engine.resume_with(rid, "2", wait_id=f"{rid}:fan/a:1")
    done = engine.resume_with(rid, "x", wait_id=f"{rid}:fan/b:0")
    assert done.status == "completed" and done.state.answer == "12"
    assert done.state.notes == ["x"]
    engine.store.close()


# -- await input ---------------------------------------------------------------


def test_await_input_into_a_required_field_takes_the_value(db_path):
    flow = (
        FlowBuilder("amt", Strict)
        .await_input("amount", "amount", prompt="how much?")
        .step("end", lambda s: {"amount": s.amount * 2})
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow)
    res = engine.run("amt", Strict())
    with pytest.raises(InputError, match="amount"):
        engine.resume_with(res.run_id, "lots")
    assert engine.status(res.run_id).status == "waiting"
    done = engine.resume_with(res.run_id, 21)
    assert done.status == "completed" and done.state.amount == 42
    engine.store.close()


def test_await_step_visited_twice_gets_a_new_wait_id_each_time(db_path):
    clock = ManualClock()
    flow = (
        FlowBuilder("cyc", S)
        .await_input("ask", "answer", prompt="again?")
        .step("count", lambda s: {"visits": s.visits + 1})
        .edge("ask", "count")
        .route("count", lambda s: "ask" if s.visits < 3 else "end", ["ask", "end"])
        .step("end", note("end"))
        .finish("end")
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("cyc", S())
    rid = res.run_id
    for n in range(3):
        (wait,) = engine.waits(rid)
        assert wait.wait_id == f"{rid}:ask:{n}" and wait.prompt == "again?"
        cp = engine.store.latest(rid)
        assert cp.steps["ask"] == StepRecord(
            "ask", "waiting", attempts=1, started_at=wait.created_at
        )
        assert cp.meta["await"] == {"step": "ask", "into": "answer", "prompt": "again?"}
        assert cp.error is None and engine.status(rid).error is None
        clock.advance(1.0)
        out = engine.resume_with(rid, f"v{n}", wait_id=wait.wait_id)
        rec = checkpoint_after(engine, rid, "ask", "running").steps["ask"]
        assert (rec.status, rec.attempts, rec.started_at) == ("completed", 1, wait.created_at)
        assert rec.finished_at == clock.now()
        with pytest.raises(WaitAlreadyResolvedError, match=wait.wait_id):
            engine.resume_with(rid, "late", wait_id=wait.wait_id)
    assert out.status == "completed" and out.state.visits == 3
    for n in range(3):  # every answered question stays answered
        with pytest.raises(WaitAlreadyResolvedError, match=f"{rid}:ask:{n}"):
            engine.resume_with(rid, "late", wait_id=f"{rid}:ask:{n}")
    cp = engine.store.latest(rid)
    assert cp.waits == () and "await" not in cp.meta
    engine.store.close()


# -- signal waits ----------------------------------------------------------------


def test_signal_wait_without_a_field_completes_and_rechecks_save_nothing(db_path):
    clock = ManualClock()
    flow = (
        FlowBuilder("sig", S)
        .wait_signal("go", "go", key="k", timeout_s=100.0)
        .step("after", note("after"))
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("sig", S())
    rev = engine.store.latest(res.run_id).revision
    for _ in range(3):  # nothing arrived: no new checkpoint
        clock.advance(1.0)
        assert engine.wake(res.run_id).status == "waiting"
    assert engine.store.latest(res.run_id).revision == rev
    engine.signal("go", "k", {"ignored": True})
    cp = engine.store.latest(res.run_id)
    assert cp.status == "completed" and cp.waits == ()
    assert engine.get(res.run_id).notes == ["after"]
    engine.store.close()


def test_a_signal_sent_before_the_run_reaches_its_wait_is_delivered_at_once(db_path):
    clock = ManualClock()

    def prep(s: S) -> dict:
        clock.advance(5.0)  # the step takes five seconds
        return {"n": 1}

    flow = (
        FlowBuilder("late", S)
        .step("prep", prep)
        .wait_signal("w", "go", key="k", into="payload")
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    engine.signal("go", "k", {"v": 3})
    res = engine.run("late", S())
    assert res.status == "completed" and res.state.payload == {"v": 3}
    rec = engine.store.latest(res.run_id).steps["w"]
    assert (rec.status, rec.attempts, rec.started_at) == ("completed", 1, clock.now())
    assert engine.store.next_signal("go", "k") is None  # consumed by this wait
    engine.store.close()


def test_signal_already_there_when_the_wait_begins_keeps_the_on_enter_effects(db_path):
    clock = ManualClock()
    entered: list[tuple] = []

    def enter(s: S, ctx) -> dict:
        entered.append((ctx.step_id, ctx.attempt, ctx.iteration))
        ctx.send("mail", {"to": "ops"})
        return {"notes": ["entered"]}

    flow = (
        FlowBuilder("pre", S)
        .wait_signal("go", "go", key="k", into="payload", on_enter=enter)
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    engine.signal("go", "k", {"v": 1})  # sent before the run starts
    res = engine.run("pre", S())
    assert res.status == "completed" and res.state.payload == {"v": 1}
    assert res.state.notes == ["entered"]
    assert entered == [("go", 1, 0)]
    intents = engine.store.intents(("pending", "sent", "delivered", "failed"))
    assert [(i.destination, i.payload) for i in intents] == [("mail", {"to": "ops"})]
    assert intents[0].intent_id == f"{res.run_id}:go:0:0"
    engine.store.close()


def test_wait_entry_effects_commit_with_the_wait_and_run_once(db_path):
    clock = ManualClock()
    entered: list[int] = []

    def enter(s: S, ctx) -> dict:
        entered.append(ctx.attempt)
        ctx.send("mail", {"to": "ops"})
        ctx.write(lambda c: c.execute("CREATE TABLE IF NOT EXISTS marks(x TEXT)"))
        ctx.write(lambda c: c.execute("INSERT INTO marks VALUES ('entered')"))
        return {"notes": ["entered"]}

    flow = (
        FlowBuilder("ent", S)
        .wait_signal("go", "go", key="k", into="payload", on_enter=enter, timeout_s=50.0)
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("ent", S())
    assert res.status == "waiting" and res.error is None
    cp = engine.store.latest(res.run_id)
    assert cp.error is None and cp.state["notes"] == ["entered"]
    (intent,) = engine.store.intents(("pending", "sent", "delivered", "failed"))
    assert (intent.destination, intent.payload) == ("mail", {"to": "ops"})
    clock.advance(10.0)
    engine.tick()
    engine.signal("go", "k", {"v": 2})
    assert engine.status(res.run_id).status == "completed"
    assert engine.get(res.run_id).payload == {"v": 2}
    assert entered == [1]
    assert len(engine.store.intents(("pending", "sent", "delivered", "failed"))) == 1
    engine.store.close()
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT x FROM marks").fetchall() == [("entered",)]


def test_a_failed_attempt_of_an_unsaved_loop_starts_again_from_the_stored_iteration(db_path):
    ran: list[tuple[int, int]] = []

    def body(s: S, ctx) -> dict:
        ran.append((ctx.iteration, ctx.attempt))
        if ctx.iteration == 3 and ctx.attempt == 1:
            raise ValueError("flaky")
        return {"count": s.count + 1}

    flow = (
        FlowBuilder("lp", S, retry=1)
        .loop("lp", body, until=lambda s: s.count >= 4, checkpoint_each_iteration=False)
        .compile()
    )
    clock = ManualClock()
    engine = engine_for(db_path, flow, clock=clock)
    started = clock.now()
    res = engine.run("lp", S())
    assert res.status == "completed" and res.state.count == 4
    assert ran == [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (3, 2), (4, 2)]
    rec = engine.store.latest(res.run_id).steps["lp"]
    assert (rec.attempts, rec.started_at, rec.iteration) == (2, started, 4)
    engine.store.close()


def test_an_unsaved_loop_failing_every_attempt_stops_after_its_retries(db_path):
    failures: list[int] = []

    def body(s: S, ctx) -> dict:
        if ctx.iteration == 3 and len(failures) < 5:  # a guard: never loops forever
            failures.append(ctx.attempt)
            raise ValueError("always")
        return {"count": s.count + 1}

    flow = (
        FlowBuilder("lp", S, retry=1)
        .loop("lp", body, until=lambda s: s.count >= 4, checkpoint_each_iteration=False)
        .compile()
    )
    engine = engine_for(db_path, flow)
    res = engine.run("lp", S())
    assert res.status == "failed" and failures == [1, 2]
    rec = engine.store.latest(res.run_id).steps["lp"]
    assert (rec.status, rec.attempts, rec.iteration) == ("failed", 2, 0)
    assert "2 attempt" in res.error and "ValueError: always" in res.error
    engine.store.close()


def test_a_nested_condition_step_that_fails_once_is_retried(db_path):
    tries: list[int] = []

    def flaky(s: S, ctx) -> dict:
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("flaky")
        return {"n": 7}

    flow = (
        FlowBuilder("cond", S, retry=1)
        .condition("if", lambda s: True, [("inner", flaky)])
        .compile()
    )
    engine = engine_for(db_path, flow)
    res = engine.run("cond", S())
    assert res.status == "completed" and res.state.n == 7
    assert tries == [1, 2]
    steps = engine.store.latest(res.run_id).steps
    # the nested step was retried; the condition step itself never failed
    assert (steps["inner"].status, steps["inner"].attempts) == ("completed", 2)
    assert (steps["if"].status, steps["if"].attempts, steps["if"].error) == ("completed", 1, None)
    engine.store.close()


def test_event_published_as_the_wait_begins_keeps_the_on_enter_effects(db_path):
    """An event stored at the instant the wait begins is delivered at once;
    what on_enter staged commits with that step."""
    clock = ManualClock()

    def enter(s: S, ctx) -> dict:
        ctx.send("pager", {"msg": "deploying"})
        return {"notes": ["entered"]}

    flow = (
        FlowBuilder("ev", S)
        .wait_event("deploy", "deployed", into="payload", on_enter=enter)
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    engine.publish("deployed", {"version": "2.1"})  # same instant as the wait's start
    res = engine.run("ev", S())
    assert res.status == "completed" and res.state.payload == {"version": "2.1"}
    assert res.state.notes == ["entered"]
    intents = engine.store.intents(("pending", "sent", "delivered", "failed"))
    assert [(i.destination, i.payload) for i in intents] == [("pager", {"msg": "deploying"})]
    engine.store.close()


def test_a_route_failing_after_a_wait_resolved_fails_the_step_and_keeps_the_signal(db_path):
    """The route after a signal wait raises: the step fails (RouteError), the
    run is released, and the signal stays unconsumed, so another process
    resumes the run and its new wait receives the same signal."""
    clock = ManualClock()
    picks: list[int] = []

    def pick(s: S) -> str:
        picks.append(1)
        if len(picks) == 1:
            raise RuntimeError("route service down")
        return "a"

    def flow():
        return (
            FlowBuilder("rt", S)
            .wait_signal("w", "go", key="k", into="payload")
            .route("w", pick, ["a", "b"])
            .step("a", note("a"))
            .step("b", note("b"))
            .finish("a", "b")
            .compile()
        )

    engine = engine_for(db_path, flow(), clock=clock)
    engine.signal("go", "k", {"v": 1})
    failed = engine.run("rt", S())
    assert failed.status == "failed"
    assert "RouteError" in failed.error and "route service down" in failed.error
    (run,) = engine.store.list_runs()
    assert run.lease_owner is None
    other = engine_for(db_path, flow(), clock=clock)
    done = other.resume(run.run_id)
    assert done.status == "completed" and done.state.notes == ["a"]
    assert done.state.payload == {"v": 1}
    assert picks == [1, 1]
    other.store.close()
    engine.store.close()


# -- resume ------------------------------------------------------------------------


def test_resume_of_a_failed_loop_starts_a_fresh_attempt_at_its_iteration(db_path):
    clock = ManualClock()
    ran: list[tuple[int, int]] = []
    broken = [True]

    def body(s: S, ctx) -> dict:
        ran.append((ctx.iteration, ctx.attempt))
        if ctx.iteration == 3 and broken[0]:
            raise ValueError("disk hiccup")
        return {"count": s.count + 1}

    flow = FlowBuilder("lp", S).loop("lp", body, until=lambda s: s.count >= 4).compile()
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("lp", S())
    assert res.status == "failed"
    failed_rev = engine.store.latest(res.run_id).revision
    broken[0] = False
    clock.advance(7.0)
    resumed_at = clock.now()
    done = engine.resume(res.run_id)
    assert done.status == "completed" and done.error is None
    assert ran == [(1, 1), (2, 1), (3, 1), (3, 1), (4, 1)]
    rec = engine.store.latest(res.run_id).steps["lp"]
    assert (rec.status, rec.attempts, rec.started_at, rec.iteration) == (
        "completed",
        1,
        resumed_at,
        4,
    )
    resumed = engine.checkpoint(f"{res.run_id}:{failed_rev + 1}")  # saved by the resume
    assert resumed.steps["lp"] == StepRecord(
        "lp", "in_progress", attempts=1, started_at=resumed_at, iteration=2
    )
    engine.store.close()


def test_a_started_run_picked_up_later_begins_its_entry_loop_at_iteration_one(db_path):
    clock = ManualClock()
    ran: list[int] = []

    def body(s: S, ctx) -> dict:
        ran.append(ctx.iteration)
        return {"count": s.count + 1}

    flow = FlowBuilder("later", S).loop("lp", body, until=lambda s: False, max_iterations=3)
    engine = engine_for(db_path, flow.compile(), clock=clock)
    rid = engine.start("later", S())  # pending: nothing ran, the entry has no record yet
    assert engine.status(rid).status == "pending"
    clock.advance(2.0)
    done = engine.resume(rid)
    assert done.status == "completed" and done.state.count == 3
    assert ran == [1, 2, 3]
    rec = engine.store.latest(rid).steps["lp"]
    assert (rec.attempts, rec.started_at, rec.iteration) == (1, clock.now(), 3)
    engine.store.close()


def test_resume_after_a_pause_lets_later_waits_fire(db_path):
    clock = ManualClock()
    broken = [True]

    def step(s: S) -> dict:
        if broken[0]:
            raise ValueError("needs an operator")
        return {"n": 1}

    flow = (
        FlowBuilder("pz", S)
        .step("work", step, on_error="pause")
        .sleep("nap", 10.0)
        .step("end", note("end"))
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("pz", S())
    assert res.status == "waiting" and "pause" in engine.store.latest(res.run_id).meta
    broken[0] = False
    out = engine.resume(res.run_id)
    assert out.status == "waiting"
    assert "pause" not in engine.store.latest(res.run_id).meta
    clock.advance(10.0)
    assert engine.wake(res.run_id).status == "completed"
    engine.store.close()


class _StopInBackoff(ManualClock):
    """A clock whose backoff sleep shuts the engine down (as SIGTERM would)."""

    engine: Engine | None = None

    def sleep(self, seconds, cancel=None):  # type: ignore[override]
        assert self.engine is not None
        self.engine.stop()
        return super().sleep(seconds, cancel)


def test_resume_during_a_backoff_runs_the_stored_attempt_not_a_new_one(db_path):
    from desktop_app.flow.retry import Backoff, RetryPolicy

    seen: list[int] = []

    def flaky(s: S, ctx) -> dict:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("flaky")
        return {"n": 1}

    def flow():
        policy = RetryPolicy(retries=3, backoff=Backoff(initial_s=5.0, jitter_s=0.0))
        return FlowBuilder("bo", S, retry=policy).step("flaky", flaky).compile()

    clock = _StopInBackoff()
    engine = engine_for(db_path, flow(), clock=clock)
    clock.engine = engine
    res = engine.run("bo", S())
    assert res.status == "running"
    rec = engine.store.latest(res.run_id).steps["flaky"]
    assert (rec.status, rec.attempts) == ("in_progress", 2) and rec.next_retry_at is not None
    engine.store.close()
    plain = ManualClock(clock.now())
    again = engine_for(db_path, flow(), clock=plain)
    done = again.resume(res.run_id)
    assert done.status == "completed"
    assert seen == [1, 2]
    assert again.store.latest(res.run_id).steps["flaky"].attempts == 2
    again.store.close()


# -- resume after a real crash ----------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from tests.test_mutation_kills_driver_waits import crash_flows, S
    from desktop_app.flow import Engine
    from desktop_app.flow.clock import ManualClock
    from desktop_app.store.sqlite.store import open_store

    db, log, which = sys.argv[1], sys.argv[2], sys.argv[3]
    engine = Engine(open_store(db), flows=crash_flows(log, kill=True), clock=ManualClock())
    engine.run(which, S())
    """
)


def _log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def crash_flows(log: str, kill: bool):
    """Two flows whose worker SIGKILLs itself mid-attempt (``kill``)."""
    import signal

    def body(s: S, ctx) -> dict:
        _log(log, f"body {ctx.iteration} {ctx.attempt}")
        if ctx.iteration == 3 and ctx.attempt == 1:
            raise ValueError("flaky")
        if ctx.iteration == 3 and kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"count": s.count + 1}

    def charge(s: S, ctx) -> dict:
        _log(log, f"charge {ctx.attempt}")
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"n": 1}

    def recover(s: S, ctx) -> dict:
        _log(log, f"recover {ctx.attempt}")
        return {"n": 2}

    loop = (
        FlowBuilder("crash_loop", S, retry=1)
        .loop("lp", body, until=lambda s: s.count >= 5)
        .compile()
    )
    once = (
        FlowBuilder("crash_charge", S)
        .step("charge", charge, recovery="resume_only", on_recover=recover)
        .compile()
    )
    return [loop, once]


def _crash(db_path: Path, log: Path, which: str) -> str:
    proc = cli_forkserver.run_argv(
        [sys.executable, "-c", _WORKER, str(db_path), str(log), which],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr.decode()
    store = open_store(db_path)
    (run,) = store.list_runs()
    store.close()
    return run.run_id


def test_resume_after_a_crash_mid_loop_counts_an_attempt_and_keeps_the_iteration(db_path, tmp_path):
    log = tmp_path / "log"
    rid = _crash(db_path, log, "crash_loop")
    assert log.read_text().splitlines() == [
        "body 1 1",
        "body 2 1",
        "body 3 1",
        "body 3 2",
    ]
    clock = ManualClock(1_800_000_000.0)
    engine = engine_for(db_path, *crash_flows(str(log), kill=False), clock=clock)
    crashed = engine.store.latest(rid)
    assert crashed.steps["lp"].status == "in_progress"
    done = engine.resume(rid)
    assert done.status == "completed" and done.state.count == 5
    assert log.read_text().splitlines()[4:] == ["body 3 3", "body 4 3", "body 5 3"]
    resumed = engine.checkpoint(f"{rid}:{crashed.revision + 1}")
    assert resumed.steps["lp"] == StepRecord(
        "lp",
        "in_progress",
        attempts=3,
        started_at=clock.now(),
        iteration=2,
        error="ValueError: flaky",
        error_type="ValueError",
    )
    engine.store.close()


def test_resume_after_a_crash_runs_on_recover_for_a_resume_only_step(db_path, tmp_path):
    log = tmp_path / "log"
    rid = _crash(db_path, log, "crash_charge")
    engine = engine_for(db_path, *crash_flows(str(log), kill=False))
    done = engine.resume(rid)
    assert done.status == "completed" and done.state.n == 2
    assert log.read_text().splitlines() == ["charge 1", "recover 2"]
    engine.store.close()


# -- every stored step record names its step (the memory store keeps the object) --


def _records_name_their_steps(engine: Engine, run_id: str) -> int:
    seen = 0
    for info in engine.history(run_id):
        for key, rec in engine.checkpoint(info.id).steps.items():
            assert rec.step_id == key, (info.revision, info.step_id, key, rec)
            seen += 1
    return seen


def test_every_step_record_in_every_checkpoint_names_its_step():
    """The SQLite and PostgreSQL rows key a record by its step; the in-memory
    store keeps the record itself, so a record must name its own step."""
    from desktop_app.store.memory.store import InMemoryCheckpointStore

    clock = ManualClock()
    broken = [True]

    def work(s: S) -> dict:
        if broken[0]:
            raise ValueError("down")
        return {"count": 1}

    def ask(s: S, ctx) -> dict:
        return {"answer": ctx.interrupt("ok?", timeout_s=5.0)}

    flows = [
        approve_flow(True),
        FlowBuilder("fails", S).step("work", work).step("ask", ask).chain().compile(),
        ask_flow(30.0),
    ]
    engine = Engine(InMemoryCheckpointStore(clock=clock.now), flows=flows, clock=clock)
    timed = engine.run("approve", S())
    clock.advance(60.0)
    engine.wake(timed.run_id)  # the timeout route; then waits on "again"
    failing = engine.run("fails", S())
    assert failing.status == "failed"
    broken[0] = False
    assert engine.resume(failing.run_id).status == "waiting"  # a fresh attempt, then a question
    answered = engine.run("ask", S())
    assert engine.resume_with(answered.run_id, "yes").status == "completed"
    expired = engine.run("ask", S())
    clock.advance(31.0)
    assert engine.wake(expired.run_id).status == "timed_out"
    counted = sum(
        _records_name_their_steps(engine, r.run_id) for r in (timed, failing, answered, expired)
    )
    # a wait that times out with no route; a step interrupted (Ctrl-C) mid-attempt
    interrupted = [True]

    def halts(s: S) -> dict:
        if interrupted[0]:
            interrupted[0] = False
            raise KeyboardInterrupt  # not a step failure: nothing is saved
        return {"n": 1}

    more = [approve_flow(False), FlowBuilder("halt", S).step("halts", halts).compile()]
    other = Engine(InMemoryCheckpointStore(clock=clock.now), flows=more, clock=clock)
    no_route = other.run("approve", S())
    clock.advance(60.0)
    assert other.wake(no_route.run_id).status == "timed_out"
    with pytest.raises(KeyboardInterrupt):
        other.run("halt", S())
    (halted,) = other.pending()
    resumed = other.resume(halted.run_id)
    assert resumed.status == "completed"
    assert other.store.latest(halted.run_id).steps["halts"].attempts == 2
    counted += _records_name_their_steps(other, no_route.run_id)
    counted += _records_name_their_steps(other, halted.run_id)
    assert counted > 20


def test_the_last_200_answered_questions_are_remembered():
    """A run remembers the ids of its last 200 answered questions (its
    checkpoint does not grow with every answer): a late answer to one of
    them is refused as already answered, an older one as unknown."""
    from desktop_app.errors import WaitError
    from desktop_app.store.memory.store import InMemoryCheckpointStore

    def ask(s: S, ctx) -> dict:
        for _ in range(202):
            ctx.interrupt("next?")
        return {"n": 1}

    clock = ManualClock()
    flow = FlowBuilder("many", S).step("ask", ask).compile()
    engine = Engine(InMemoryCheckpointStore(clock=clock.now), flows=[flow], clock=clock)
    rid = engine.run("many", S()).run_id
    for n in range(201):
        engine.resume_with(rid, n, wait_id=f"{rid}:ask:{n}")
    resolved = engine.store.latest(rid).meta["resolved"]
    assert resolved == [f"{rid}:ask:{n}" for n in range(1, 201)]
    with pytest.raises(WaitAlreadyResolvedError):
        engine.resume_with(rid, "late", wait_id=f"{rid}:ask:1")
    with pytest.raises(WaitError, match="no pending wait"):
        engine.resume_with(rid, "late", wait_id=f"{rid}:ask:0")


def test_an_error_escaping_the_engine_hands_the_run_back(db_path):
    """An error the engine itself trips over (here: a step's exception whose
    ``retryable`` flag raises when the retry policy reads it) escapes
    ``Engine.run``; the run is released at once, so another process resumes
    it instead of waiting for the lease to expire."""
    clock = ManualClock()
    tries: list[int] = []

    class Broken(Exception):
        @property
        def retryable(self) -> bool:
            raise RuntimeError("flag broken")

    def flaky(s: S) -> dict:
        tries.append(1)
        if len(tries) == 1:
            raise Broken("first try")
        return {}

    def flow():
        return FlowBuilder("esc", S).step("x", flaky).step("a", note("a")).chain().compile()

    engine = engine_for(db_path, flow(), clock=clock)
    with pytest.raises(RuntimeError, match="flag broken"):
        engine.run("esc", S())
    (run,) = engine.store.list_runs()
    assert (run.status, run.lease_owner) == ("running", None)
    other = engine_for(db_path, flow(), clock=clock)
    done = other.resume(run.run_id)
    assert done.status == "completed" and done.state.notes == ["a"]
    other.store.close()
    engine.store.close()
