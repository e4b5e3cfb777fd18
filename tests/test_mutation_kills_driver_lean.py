"""The lean step path (kill tests for mutants of ``RunDriver.run_lean`` and
``take_output`` in ``flow/driver.py``): what a subscriber is told when a lean
step starts, what its context says, a step resumed while its retry's backoff
was still pending, and the errors that name the step.

Every run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import StepStarted
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0
    items: list[str] = []
    key: str = ""
    attempt: int = 0
    iteration: int = -1


def test_a_lean_step_is_announced_with_its_run_step_and_attempt(db_path: Path):
    """A subscriber gets ``StepStarted(run_id, step_id, attempt)`` for each
    lean step, the attempt being the one the step's record counts."""

    flow = (
        FlowBuilder("announced", S)
        .step("a", lambda s: {"n": s.n + 1})
        .step("b", lambda s, ctx: {"n": s.n + 1})
        .chain()
        .compile()
    )
    assert set(flow.lean) == {"a", "b"}
    store = open_store(db_path)
    engine = Engine(store, flows=[flow], clock=ManualClock(T0))
    started: list[Any] = []
    engine.events.subscribe(lambda e: started.append(e) if isinstance(e, StepStarted) else None)
    res = engine.run("announced", S())
    store.close()
    assert res.status == "completed"
    assert started == [StepStarted(res.run_id, "a", 1), StepStarted(res.run_id, "b", 1)]


def test_a_lean_steps_context_gives_its_attempt_iteration_and_idempotency_key(db_path: Path):
    """The context a lean step asks for carries the attempt (1 on the first),
    the iteration (0 outside a loop) and the idempotency key built from
    them, which a step hands to an outside service to dedupe its calls."""

    def keyed(s: S, ctx) -> dict[str, object]:
        return {"key": ctx.idempotency_key, "attempt": ctx.attempt, "iteration": ctx.iteration}

    flow = FlowBuilder("keyed", S).step("pay", keyed).chain().compile()
    assert "pay" in flow.lean
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=ManualClock(T0)).run("keyed", S())
    state = store.latest(res.run_id).state
    store.close()
    assert res.status == "completed"
    assert (state["key"], state["attempt"], state["iteration"]) == (f"{res.run_id}:pay:0", 1, 0)


class StopDuringSleep(ManualClock):
    """A clock whose first backoff wait is where the process is told to stop
    (a worker's SIGTERM): the wait ends early and the driver stops."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.engine: Engine | None = None

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        assert self.engine is not None
        self.engine.shutdown_event.set()
        return True


def test_a_lean_step_resumed_before_its_backoff_ends_waits_for_the_stored_time(db_path: Path):
    """A run stopped while its step's retry waited out a backoff keeps the
    next attempt's time (``next_retry_at``); resumed by another engine, the
    step is tried again only at that time, not at once."""
    calls: list[float] = []
    clock: ManualClock

    def flaky(s: S, ctx) -> dict[str, object]:
        calls.append(clock.now())
        if len(calls) == 1:
            raise RuntimeError("service busy")
        return {"n": ctx.attempt}

    policy = RetryPolicy(retries=2, backoff=Backoff(initial_s=30.0, max_s=30.0, jitter_s=0.0))
    flow = FlowBuilder("backoff", S, retry=policy).step("flaky", flaky).chain().compile()
    assert "flaky" in flow.lean
    store = open_store(db_path)
    stopping = StopDuringSleep(T0)
    clock = stopping
    first = Engine(store, flows=[flow], clock=stopping)
    stopping.engine = first
    res = first.run("backoff", S())
    assert res.status == "running"
    rec = store.latest(res.run_id).steps["flaky"]
    assert (rec.attempts, rec.next_retry_at) == (2, T0 + 30.0)

    clock = ManualClock(T0 + 5.0)
    again = Engine(store, flows=[flow], clock=clock).resume(res.run_id)
    assert again.status == "completed"
    assert calls == [T0, T0 + 30.0]
    assert store.latest(res.run_id).state["n"] == 2
    store.close()


def test_a_lean_step_changing_the_state_in_place_fails_naming_itself(db_path: Path):
    """A lean step that appends to a state list in place, instead of
    returning the new list, fails with the error naming the step and field."""

    def appends(s: S) -> None:
        s.items.append("x")

    flow = (
        FlowBuilder("in_place", S, retry=0)
        .step("fill", lambda s: {"items": ["a"]})
        .step("appends", appends)
        .chain()
        .compile()
    )
    assert "appends" in flow.lean
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=ManualClock(T0)).run("in_place", S())
    latest = store.latest(res.run_id)
    store.close()
    assert res.status == "failed"
    assert latest.steps["appends"].error_type == "StateMutatedError"
    assert "step 'appends' changed state field 'items' in place" in (res.error or "")
    assert latest.state["items"] == ["a"]


def test_a_lean_step_returning_an_unstorable_value_fails_naming_itself(db_path: Path):
    """A value the checkpoint cannot hold fails the lean step's attempt with
    the error naming the step (S58), and nothing of it is stored."""

    class Loose(BaseModel):
        model_config = {"arbitrary_types_allowed": True}
        thing: Any = None

    flow = (
        FlowBuilder("unstorable", Loose, retry=0)
        .step("grab", lambda s: {"thing": threading.Lock()})
        .chain()
        .compile()
    )
    assert "grab" in flow.lean
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=ManualClock(T0)).run("unstorable", Loose())
    latest = store.latest(res.run_id)
    store.close()
    assert res.status == "failed"
    assert latest.steps["grab"].error_type == "StateNotStorableError"
    assert "'grab'" in (res.error or "") and "'thing'" in (res.error or "")
    assert latest.state["thing"] is None


@pytest.mark.parametrize("path", ["lean", "general"])
def test_a_retry_without_backoff_runs_at_once_even_past_the_runs_deadline(db_path: Path, path: str):
    """A step's retry with no backoff is part of the attempt that failed, on
    the lean path as on the general one: the run's deadline, passed during
    the failed attempt, is checked only once the step has ended, so the
    retry runs and its result is stored before the run times out."""
    clock = ManualClock(T0)
    calls: list[float] = []

    def flaky(s: S) -> dict[str, object]:
        calls.append(clock.now())
        if len(calls) == 1:
            clock.advance(11.0)  # the failed attempt outlasts the run's deadline
            raise RuntimeError("service busy")
        return {"n": 7}

    timeout = {"timeout_s": 60.0} if path == "general" else {}
    flow = (
        FlowBuilder("dl_retry", S, deadline_s=10.0, retry=1)
        .step("flaky", flaky, **timeout)
        .step("after", lambda s: {"key": "ran"})
        .chain()
        .compile()
    )
    assert ("flaky" in flow.lean) == (path == "lean")
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=clock).run("dl_retry", S())
    latest = store.latest(res.run_id)
    store.close()
    assert calls == [T0, T0 + 11.0]
    assert res.status == "timed_out"
    assert latest.state["n"] == 7 and latest.state["key"] == ""
    assert (latest.steps["flaky"].status, latest.steps["flaky"].attempts) == ("completed", 2)


def test_each_step_record_keeps_when_its_step_was_entered(db_path: Path):
    """A step is entered when the step before it completes: its stored
    record says so (``started_at``: in progress, then completed), which
    ``show`` prints as the step's start."""
    clock = ManualClock(T0)

    def slow(s: S) -> dict[str, object]:
        clock.advance(5.0)
        return {"n": 1}

    def seen(s: S) -> dict[str, object]:
        clock.advance(2.0)
        return {"n": 2}

    flow = FlowBuilder("entered", S).step("a", slow).step("b", seen).chain().compile()
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=clock).run("entered", S())
    last = store.latest(res.run_id)
    before = store.get_checkpoint(res.run_id, last.revision - 1)
    store.close()
    assert res.status == "completed"
    a, b = last.steps["a"], last.steps["b"]
    assert (a.started_at, a.finished_at) == (T0, T0 + 5.0)
    assert (b.started_at, b.finished_at) == (T0 + 5.0, T0 + 7.0)
    in_progress = before.steps["b"]
    assert (in_progress.status, in_progress.started_at) == ("in_progress", T0 + 5.0)
