"""What a failed, retried, routed, paused or timed-out attempt leaves behind in
the run driver (kill tests for mutants of ``flow/driver.py``): the step
records in the checkpoint (status, attempts, error, error type, times on the
injected clock, duration), the parent record of a nested step that failed and
routed, the events published, the answers and continuations forgotten, and
how a step function is called (threads, timeouts, awaitables).

Every run uses a real SQLite file (and, where a record's own step id is the
point, the in-memory store, which keeps records exactly as given) and the
injected clock. Durations are checked only from below, against a minimum the
step itself measured with ``time.perf_counter``, and from above against the
test's own measurement around the run: no wall-clock constant.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import DiskFullError, RunLeasedError, StepTimeoutError
from desktop_app.flow import Engine, EventBus, FlowBuilder, Step
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import Policy, WaitStep
from desktop_app.flow.events import RunProgress, StepFinished, StepResult, StepStarted
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0
NO_WAIT = Backoff(initial_s=0.0, max_s=0.0, jitter_s=0.0)


class S(BaseModel):
    n: int = 0
    items: list[str] = []
    note: str = ""
    error: str = ""
    blob: Any = None
    visits: int = 0


class Retryable(Exception):
    retryable = True


class Fatal(Exception):
    retryable = False


class Env:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.events: list[Any] = []
        bus = EventBus()
        bus.subscribe(self.events.append)
        self.engine = Engine(store, clock=self.clock, events=bus, group_commit=False)

    def saved_by(self, run_id: str, step_id: str) -> list[Any]:
        """Every checkpoint ``step_id`` saved, oldest first."""
        return [
            self.engine.checkpoint(f"{run_id}:{i.revision}")
            for i in self.engine.history(run_id)
            if i.step_id == step_id
        ]

    def mine(self, kind: type, run_id: str | None = None) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture(params=["sqlite", "memory"])
def env(request, db_path: Path):
    store = open_store(db_path) if request.param == "sqlite" else InMemoryCheckpointStore()
    yield Env(store)
    store.close()


@pytest.fixture
def sq(db_path: Path):
    store = open_store(db_path)
    yield Env(store)
    store.close()


def slow_for(ms: float) -> float:
    """Take at least ``ms`` milliseconds (by perf_counter); return how long it took."""
    began = time.perf_counter()
    pause = threading.Event()  # never set: each wait just lets time pass
    while (time.perf_counter() - began) * 1000 < ms:
        pause.wait(0.005)
    return (time.perf_counter() - began) * 1000


# -- a nested step that fails and routes ------------------------------------


def test_a_nested_step_that_routes_fails_its_parent_and_starts_the_route(env):
    inner: dict[str, float] = {}

    def broken(s: S) -> dict:
        env.clock.advance(3.0)
        inner["ms"] = slow_for(20)
        raise Fatal("n1 broke")

    env.engine.register(
        FlowBuilder("nested", S)
        .condition(
            "check",
            lambda s: True,
            [Step("n1", broken, Policy(on_error="route", error_route="handle"))],
        )
        .step("handle", lambda s: {"note": "handled"})
        .step("after", lambda s: {"n": 1})
        .edge("check", "after")
        .finish("handle", "after")
        .compile()
    )
    outer = time.perf_counter()
    r = env.engine.run("nested", S())
    outer_ms = (time.perf_counter() - outer) * 1000
    assert r.status == "completed" and r.state.note == "handled" and r.state.n == 0
    assert r.state.error == "Fatal: n1 broke"

    (routed,) = env.saved_by(r.run_id, "n1")
    n1 = routed.steps["n1"]
    assert (n1.step_id, n1.status, n1.attempts) == ("n1", "failed", 1)
    assert (n1.started_at, n1.finished_at) == (T0, T0 + 3.0)
    assert (n1.error, n1.error_type) == ("Fatal: n1 broke", "Fatal")
    assert inner["ms"] <= n1.duration_ms <= outer_ms
    parent = routed.steps["check"]  # the condition ended with its nested step
    assert (parent.step_id, parent.status, parent.attempts) == ("check", "failed", 1)
    assert parent.finished_at == T0 + 3.0
    assert (parent.error, parent.error_type) == ("Fatal: n1 broke", "Fatal")
    handle = routed.steps["handle"]
    assert (handle.step_id, handle.status, handle.attempts) == ("handle", "in_progress", 1)
    assert handle.started_at == T0 + 3.0
    assert routed.frontier == ("handle",)
    assert routed.meta["steps_taken"] == 1  # the routed step counts as one step taken
    assert routed.status == "running" and routed.state["error"] == "Fatal: n1 broke"

    final = env.store.latest(r.run_id)
    done = final.steps["handle"]
    assert (done.status, done.attempts, done.started_at) == ("completed", 1, T0 + 3.0)
    assert final.meta["steps_taken"] == 2
    assert "after" not in final.steps

    (err,) = [e for e in env.mine(StepFinished) if e.result.status == "error"]
    assert (err.run_id, err.result.name, err.result.error) == (r.run_id, "n1", "Fatal: n1 broke")
    assert err.result.duration_ms == n1.duration_ms


def test_a_routed_step_keeps_the_rest_of_the_frontier(sq):
    ran: list[str] = []

    def mark(name: str):
        def fn(s: S) -> dict:
            ran.append(name)
            return {"items": [*s.items, name]}

        return fn

    def broken(s: S) -> dict:
        ran.append("work")
        raise Fatal("work broke")

    sq.engine.register(
        FlowBuilder("fanout", S)
        .step("start", mark("start"))
        .step("work", broken, on_error="route", error_route="handle")
        .step("side", mark("side"))
        .step("other", mark("other"))
        .step("handle", mark("handle"))
        .edge("start", "work")
        .edge("start", "side")
        .edge("start", "other")
        .finish("side", "other", "handle")
        .compile()
    )
    r = sq.engine.run("fanout", S())
    assert r.status == "completed"
    (routed,) = sq.saved_by(r.run_id, "work")
    assert routed.frontier == ("handle", "side", "other")
    assert ran == ["start", "work", "handle", "side", "other"]
    assert sorted(r.state.items) == ["handle", "other", "side", "start"]


def test_a_route_from_the_first_step_counts_one_step_taken(sq):
    def broken(s: S) -> dict:
        raise Fatal("first broke")

    sq.engine.register(
        FlowBuilder("first", S)
        .step("work", broken, on_error="route", error_route="handle")
        .step("handle", lambda s: {"note": "h"})
        .finish("handle")
        .compile()
    )
    r = sq.engine.run("first", S())
    assert r.status == "completed"
    (routed,) = sq.saved_by(r.run_id, "work")
    assert routed.meta["steps_taken"] == 1
    assert sq.store.latest(r.run_id).meta["steps_taken"] == 2


def test_routed_steps_count_against_max_steps(sq):
    """Each routed failure is a step taken: a step that keeps failing into a
    handler that sends it back is halted by max_steps."""
    visits: list[int] = []

    def broken(s: S) -> dict:
        visits.append(s.visits)
        raise Fatal("again")

    def handle(s: S) -> dict:
        if s.visits >= 5:  # a guard: a broken count would bounce for ever
            raise Fatal("runaway")
        return {"visits": s.visits + 1}

    sq.engine.register(
        FlowBuilder("bounce", S, max_steps=4)
        .step("work", broken, on_error="route", error_route="handle")
        .step("handle", handle)
        .edge("handle", "work")
        .compile()
    )
    r = sq.engine.run("bounce", S())
    assert r.status == "failed"
    # work (routed) 1, handle 2, work (routed) 3, handle 4: halted before work
    assert visits == [0, 1]
    assert r.error == "halted: max_steps 4 reached at step 'work'"
    assert sq.store.latest(r.run_id).meta["steps_taken"] == 4


# -- the failed and the retried record --------------------------------------


def test_a_failed_step_records_its_error_times_and_duration(env):
    inner: dict[str, float] = {}

    def broken(s: S) -> dict:
        env.clock.advance(5.0)
        inner["ms"] = slow_for(50)
        raise Fatal("boom")

    env.engine.register(FlowBuilder("fail", S).step("work", broken).compile())
    outer = time.perf_counter()
    r = env.engine.run("fail", S())
    outer_ms = (time.perf_counter() - outer) * 1000
    assert r.status == "failed"
    assert r.error == f"run {r.run_id}: step 'work' failed after 1 attempt: Fatal: boom"
    rec = env.store.latest(r.run_id).steps["work"]
    assert (rec.step_id, rec.status, rec.attempts) == ("work", "failed", 1)
    assert (rec.started_at, rec.finished_at) == (T0, T0 + 5.0)
    assert (rec.error, rec.error_type) == ("Fatal: boom", "Fatal")
    assert inner["ms"] >= 50 and inner["ms"] <= rec.duration_ms <= outer_ms
    (err,) = [e for e in env.mine(StepFinished) if e.result.name == "work"]
    assert err == StepFinished(
        r.run_id, StepResult("work", "error", "Fatal: boom", rec.duration_ms, "Fatal")
    )


def test_a_retried_attempt_records_why_and_when_it_runs_again(env):
    inner: list[float] = []
    seen: list[tuple[int, int]] = []

    def flaky(s: S, ctx) -> dict:
        seen.append((ctx.attempt, ctx.iteration))
        if ctx.attempt == 1:
            env.clock.advance(1.0)
            inner.append(slow_for(20))
            raise Retryable("first try fails")
        return {"n": 1}

    policy = RetryPolicy(retries=1, backoff=Backoff(initial_s=2.0, max_s=10.0, jitter_s=0.0))
    env.engine.register(FlowBuilder("retry", S, retry=policy).step("work", flaky).compile())
    outer = time.perf_counter()
    r = env.engine.run("retry", S())
    outer_ms = (time.perf_counter() - outer) * 1000
    assert r.status == "completed" and seen == [(1, 0), (2, 0)]
    first, begun, done = env.saved_by(r.run_id, "work")
    rec = first.steps["work"]
    assert (rec.step_id, rec.status, rec.attempts) == ("work", "in_progress", 2)
    assert (rec.started_at, rec.iteration) == (T0, 0)
    assert (rec.error, rec.error_type) == ("Retryable: first try fails", "Retryable")
    assert inner[0] <= rec.duration_ms <= outer_ms
    assert rec.next_retry_at == T0 + 1.0 + 2.0  # failed at T0 + 1, backoff 2 s
    # the retry begins: saved before its body, so a crash in it is not taken
    # for an attempt that never began (tests/test_attempt_begun.py)
    assert begun.steps["work"] == dataclasses.replace(rec, next_retry_at=None)
    final = done.steps["work"]
    assert (final.status, final.attempts, final.started_at) == ("completed", 2, T0)
    assert final.finished_at == T0 + 3.0  # the retry waited on the injected clock
    started = [(e.run_id, e.step_id, e.attempt) for e in env.mine(StepStarted)]
    assert started == [(r.run_id, "work", 1), (r.run_id, "work", 2)]


def test_a_backoff_under_a_second_is_waited_too(env):
    """A retry's backoff of half a second is waited (on the injected clock)
    before the retry begins, as a longer one is."""

    def flaky(s: S, ctx) -> dict:
        if ctx.attempt == 1:
            env.clock.advance(1.0)
            raise Retryable("first try fails")
        return {"n": 1}

    policy = RetryPolicy(retries=1, backoff=Backoff(initial_s=0.5, max_s=10.0, jitter_s=0.0))
    env.engine.register(FlowBuilder("half", S, retry=policy).step("work", flaky).compile())
    r = env.engine.run("half", S())
    assert r.status == "completed"
    *_, done = env.saved_by(r.run_id, "work")
    assert done.steps["work"].finished_at == T0 + 1.0 + 0.5


def test_a_retry_without_backoff_stores_no_retry_time(sq):
    """With a zero backoff the retry runs at once: no ``next_retry_at`` is
    stored, so a restart counts the lost attempt instead of taking it for one
    that never started."""

    def flaky(s: S, ctx) -> dict:
        if ctx.attempt == 1:
            raise Retryable("again")
        return {"n": 1}

    sq.engine.register(
        FlowBuilder("now", S, retry=RetryPolicy(retries=1, backoff=NO_WAIT))
        .step("work", flaky)
        .compile()
    )
    r = sq.engine.run("now", S())
    assert r.status == "completed"
    rec = sq.saved_by(r.run_id, "work")[0].steps["work"]
    assert (rec.status, rec.attempts, rec.next_retry_at) == ("in_progress", 2, None)


def test_a_retried_loop_attempt_keeps_its_position(sq):
    seen: list[int] = []
    failed = {"once": False}

    def body(s: S, ctx) -> dict:
        seen.append(ctx.iteration)
        if ctx.iteration == 3 and not failed["once"]:
            failed["once"] = True
            raise Retryable("iteration 3 broke")
        return {"n": s.n + 1}

    sq.engine.register(
        FlowBuilder("loop", S, retry=RetryPolicy(retries=1, backoff=NO_WAIT))
        .loop("count", body, until=lambda s: s.n >= 4)
        .compile()
    )
    r = sq.engine.run("loop", S())
    assert r.status == "completed" and r.state.n == 4
    assert seen == [1, 2, 3, 3, 4]
    retry = [
        cp.steps["count"]
        for cp in sq.saved_by(r.run_id, "count")
        if cp.steps["count"].error is not None
    ]
    assert [(x.attempts, x.iteration, x.error) for x in retry] == [
        (2, 2, "Retryable: iteration 3 broke")
    ]


def test_a_failed_attempt_goes_back_to_the_loop_position_last_stored(sq):
    """Without a checkpoint per iteration the position stored last is the one
    a child journal saved (iteration 1); a failed attempt starts again from
    there, not from the start of the loop."""
    seen: list[int] = []
    failed = {"once": False}

    def body(s: S, ctx) -> dict:
        seen.append(ctx.iteration)
        if ctx.iteration == 2 and not failed["once"]:
            ctx.child_run_id()  # saves the run now: state n=1, position 1
        if ctx.iteration == 3 and not failed["once"]:
            failed["once"] = True
            raise Retryable("iteration 3 broke")
        return {"n": s.n + 1}

    sq.engine.register(
        FlowBuilder("loop", S, retry=RetryPolicy(retries=1, backoff=NO_WAIT))
        .loop("count", body, until=lambda s: s.n >= 4, checkpoint_each_iteration=False)
        .compile()
    )
    r = sq.engine.run("loop", S())
    assert r.status == "completed" and r.state.n == 4
    assert seen == [1, 2, 3, 2, 3, 4]
    rec = [cp.steps["count"] for cp in sq.saved_by(r.run_id, "count")][-2]
    assert (rec.attempts, rec.iteration, rec.error) == (2, 1, "Retryable: iteration 3 broke")


def test_a_paused_step_records_what_failed_for_the_operator(sq):
    fixed = {"on": False}

    def work(s: S) -> dict:
        if not fixed["on"]:
            raise Fatal("needs a hand")
        return {"n": 1}

    sq.engine.register(FlowBuilder("pause", S).step("work", work, on_error="pause").compile())
    r = sq.engine.run("pause", S())
    assert r.status == "waiting"
    assert r.error == "paused after step 'work' failed: Fatal: needs a hand"
    cp = sq.store.latest(r.run_id)
    assert cp.meta["pause"] == {"step": "work", "error": "Fatal: needs a hand"}
    fixed["on"] = True
    r = sq.engine.resume(r.run_id)
    assert r.status == "completed" and "pause" not in sq.store.latest(r.run_id).meta


def test_a_step_that_fills_the_disk_pauses_the_run_and_names_the_step(sq, tmp_path):
    out = str(tmp_path / "out")
    full = {"on": True}

    def work(s: S) -> dict:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", out)
        return {"n": 1}

    sq.engine.register(FlowBuilder("disk", S).step("work", work).compile())
    with pytest.raises(DiskFullError) as info:
        sq.engine.run("disk", S())
    (run,) = sq.store.list_runs()
    assert f"the disk holding {out} (run {run.run_id}, step work) is full" in str(info.value)
    assert run.status == "running"
    full["on"] = False
    assert sq.engine.resume(run.run_id).status == "completed"


def test_a_nested_attempt_lost_to_a_full_disk_counts_on_resume(sq):
    """The nested step's stored attempt (2, after a retry) was in progress
    when the run stopped; resuming runs attempt 3."""
    attempts: list[int] = []
    full = {"on": True}

    def nested(s: S, ctx) -> dict:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise Retryable("first")
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", "out")
        return {"note": "ok"}

    sq.engine.register(
        FlowBuilder("c", S, retry=RetryPolicy(retries=5, backoff=NO_WAIT))
        .condition("check", lambda s: True, [("n1", nested)])
        .compile()
    )
    with pytest.raises(DiskFullError):
        sq.engine.run("c", S())
    (run,) = sq.store.list_runs()
    rec = sq.store.latest(run.run_id).steps["n1"]
    assert (rec.status, rec.attempts) == ("in_progress", 2)
    full["on"] = False
    r = sq.engine.resume(run.run_id)
    assert r.status == "completed" and attempts == [1, 2, 3]
    rec = sq.store.latest(r.run_id).steps["n1"]
    assert (rec.status, rec.attempts) == ("completed", 3)


# -- a completed step --------------------------------------------------------


def test_a_completed_step_records_its_duration_progress_and_events(env):
    inner: dict[str, float] = {}

    def work(s: S, ctx) -> dict:
        env.clock.advance(2.0)
        ctx.progress(1, 2)
        inner["ms"] = slow_for(50)
        return {"n": 1}

    env.engine.register(
        FlowBuilder("done", S).step("work", work).step("next", lambda s: {}).chain().compile()
    )
    outer = time.perf_counter()
    r = env.engine.run("done", S())
    outer_ms = (time.perf_counter() - outer) * 1000
    assert r.status == "completed"
    (cp,) = env.saved_by(r.run_id, "work")
    rec = cp.steps["work"]
    assert (rec.status, rec.started_at, rec.finished_at) == ("completed", T0, T0 + 2.0)
    assert inner["ms"] >= 50 and inner["ms"] <= rec.duration_ms <= outer_ms
    assert cp.progress == (1, 2)
    finished = [e for e in env.mine(StepFinished) if e.result.name == "work"]
    assert finished == [StepFinished(r.run_id, StepResult("work", "done", None, rec.duration_ms))]
    # the progress event follows its step's StepFinished
    order = [e for e in env.events if isinstance(e, (StepFinished, RunProgress))]
    assert order[:2] == [finished[0], RunProgress(r.run_id, 1, 2)]
    assert env.store.latest(r.run_id).progress == (1, 2)


def test_a_plain_steps_context_is_at_iteration_zero(sq):
    seen: dict[str, Any] = {}

    def work(s: S, ctx) -> dict:
        seen["iteration"] = ctx.iteration
        seen["key"] = ctx.send("sink", {"x": 1})
        return {}

    sq.engine.register(FlowBuilder("it", S).step("work", work).compile())
    r = sq.engine.run("it", S())
    assert r.status == "completed"
    assert seen == {"iteration": 0, "key": f"{r.run_id}:work:0:0"}
    (intent,) = [i for i in sq.store.intents(["pending"]) if i.run_id == r.run_id]
    assert intent.intent_id == f"{r.run_id}:work:0:0"


def test_a_parallel_step_run_twice_runs_its_branches_again(sq):
    runs: list[str] = []

    def branch(name: str):
        def fn(s: S) -> dict:
            runs.append(f"{name}{s.visits}")
            return {name: f"{name}{s.visits}"} if name in ("note", "error") else {}

        return fn

    sq.engine.register(
        FlowBuilder("twice", S)
        .parallel("fan", {"note": branch("note"), "error": branch("error")}, max_concurrency=1)
        .step("again", lambda s: {"visits": s.visits + 1})
        .step("end", lambda s: {})
        .edge("fan", "again")
        .route("again", lambda s: "fan" if s.visits < 2 else "end", ["fan", "end"])
        .finish("end")
        .compile()
    )
    r = sq.engine.run("twice", S())
    assert r.status == "completed"
    assert runs == ["note0", "error0", "note1", "error1"]
    assert (r.state.note, r.state.error) == ("note1", "error1")
    for cp in sq.saved_by(r.run_id, "fan"):
        if cp.steps["fan"].status == "completed":
            assert "fan" not in cp.meta.get("branches", {})


def test_a_completed_steps_continuation_is_forgotten(sq):
    seen: list[Any] = []

    def ask(s: S, ctx) -> dict:
        seen.append(ctx.continuation)
        if s.visits == 0:
            answer = ctx.interrupt("go?", continuation={"visit": s.visits})
            return {"note": str(answer), "visits": 1}
        return {"visits": s.visits + 1}

    sq.engine.register(
        FlowBuilder("cont", S)
        .step("ask", ask)
        .step("end", lambda s: {})
        .route("ask", lambda s: "ask" if s.visits < 2 else "end", ["ask", "end"])
        .finish("end")
        .compile()
    )
    r = sq.engine.run("cont", S())
    (w,) = sq.engine.waits(r.run_id)
    r = sq.engine.resume_with(r.run_id, "yes", wait_id=w.wait_id)
    assert r.status == "completed" and r.state.note == "yes"
    # asked, answered (its continuation), then visited again: nothing left over
    assert seen == [None, {"visit": 0}, None]
    (first,) = [cp for cp in sq.saved_by(r.run_id, "ask") if cp.state.get("visits") == 1]
    assert first.meta.get("continuations", {}) == {}
    assert sq.store.latest(r.run_id).meta.get("continuations", {}) == {}


# -- how a step function is called -------------------------------------------


def test_a_sync_step_past_its_timeout_is_abandoned_and_its_result_dropped(sq):
    seen: dict[str, Any] = {}

    def slow(s: S, ctx) -> dict:
        seen["thread"] = (threading.current_thread().name, threading.current_thread().daemon)
        seen["n"] = s.n
        end = time.perf_counter() + 5  # only a broken engine reaches this bound
        pause = threading.Event()
        while not ctx.cancelled and time.perf_counter() < end:
            pause.wait(0.002)
        try:
            ctx.send("sink", {"late": True})
        except Exception as exc:  # the type is the point
            seen["send"] = (type(exc).__name__, str(exc))
        return {"n": 99}

    sq.engine.register(FlowBuilder("slow", S).step("work", slow, timeout_s=0.05).compile())
    r = sq.engine.run("slow", S(n=7))
    assert r.status == "failed" and r.state.n == 7
    assert r.error.endswith("StepTimeoutError: step 'work' timed out after 0.05 s")
    assert seen["thread"] == ("step-work", True)
    assert seen["n"] == 7
    assert seen["send"] == ("StepTimeoutError", "step 'work' timed out after 0.05 s")
    rec = sq.store.latest(r.run_id).steps["work"]
    assert (rec.error_type, rec.error) == (
        "StepTimeoutError",
        "StepTimeoutError: step 'work' timed out after 0.05 s",
    )
    assert [i for i in sq.store.intents(["pending"]) if i.run_id == r.run_id] == []


def test_a_sync_step_under_a_timeout_gets_its_state_and_context(sq):
    def adds(s: S, ctx) -> dict:
        return {"n": s.n + ctx.attempt}

    def fails(s: S, ctx) -> dict:
        raise Fatal(f"attempt {ctx.attempt} at n={s.n}")

    sq.engine.register(FlowBuilder("ok", S).step("work", adds, timeout_s=30).compile())
    r = sq.engine.run("ok", S(n=10))
    assert r.status == "completed" and r.state.n == 11

    sq.engine.register(FlowBuilder("bad", S).step("work", fails, timeout_s=30).compile())
    r = sq.engine.run("bad", S(n=3))
    assert r.status == "failed"
    assert r.error.endswith("failed after 1 attempt: Fatal: attempt 1 at n=3")
    rec = sq.store.latest(r.run_id).steps["work"]
    assert (rec.error_type, rec.error) == ("Fatal", "Fatal: attempt 1 at n=3")


def test_an_async_step_past_its_timeout_is_cancelled(sq):
    seen: list[str] = []
    kept: list[Any] = []

    async def hangs(s: S, ctx) -> dict:
        kept.append(ctx)
        try:
            # never set: only the step's timeout ends it (the 5 s bound only
            # stops a broken engine from hanging the suite)
            await asyncio.wait_for(asyncio.Event().wait(), 5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        except TimeoutError:
            seen.append("ran to its own bound")
        return {"n": 1}

    sq.engine.register(FlowBuilder("async", S).step("work", hangs, timeout_s=0.05).compile())
    r = sq.engine.run("async", S())
    assert r.status == "failed" and r.state.n == 0
    assert r.error.endswith("StepTimeoutError: step 'work' timed out after 0.05 s")
    assert seen == ["cancelled"]
    with pytest.raises(StepTimeoutError) as info:  # the abandoned context refuses effects
        kept[0].send("sink", {})
    assert str(info.value) == "step 'work' timed out after 0.05 s"


def test_a_sync_step_returning_an_awaitable_is_awaited(sq):
    async def later(n: int) -> dict:
        await asyncio.sleep(0)
        return {"n": n + 1}

    sq.engine.register(FlowBuilder("aw", S).step("work", lambda s: later(s.n)).compile())
    r = sq.engine.run("aw", S(n=41))
    assert r.status == "completed" and r.state.n == 42


def test_a_steps_in_place_change_and_unstorable_value_name_the_step(sq):
    def mutates(s: S) -> None:
        s.items.append("x")

    sq.engine.register(FlowBuilder("mut", S).step("work", mutates).compile())
    r = sq.engine.run("mut", S())
    assert r.status == "failed"
    assert "step 'work' changed state field 'items' in place" in r.error

    sq.engine.register(
        FlowBuilder("lock", S).step("work", lambda s: {"blob": threading.Lock()}).compile()
    )
    r = sq.engine.run("lock", S())
    assert r.status == "failed"
    assert "step 'work' returned a value for state field 'blob' that cannot be stored" in r.error


def test_a_timer_whose_entry_effect_outlasts_it_fires_with_that_effect(sq):
    """``on_enter`` commits with the wait; if the clock is already past the
    timer when it returns, the timer fires at once and the effect commits
    with the step's completion."""

    def enter(s: S, ctx) -> None:
        ctx.send("sink", {"entered": True})
        sq.clock.advance(10.0)  # on_enter took longer than the timer

    sq.engine.register(
        FlowBuilder("timer", S)
        .add(WaitStep("nap", "timer", timeout_s=1.0, on_enter=enter))
        .step("after", lambda s: {"n": 1})
        .chain()
        .compile()
    )
    r = sq.engine.run("timer", S())
    assert r.status == "completed" and r.state.n == 1
    sent = [i for i in sq.store.intents(["pending"]) if i.run_id == r.run_id]
    assert [(i.step_id, i.payload) for i in sent] == [("nap", {"entered": True})]


# -- a lease lost before the first save --------------------------------------


def test_a_run_taken_over_before_its_first_save_names_the_new_holder(db_path: Path):
    clock = ManualClock(T0)
    store_a, store_b = open_store(db_path), open_store(db_path)
    holder: dict[str, Engine] = {}

    def stalls(s: S) -> dict:
        clock.advance(31)  # past A's lease; B takes the run over meanwhile
        (run,) = store_b.list_runs()
        store_b.claim(run.run_id, holder["b"].lease(takes_over="hosta:1:a"), clock.now())
        return {"n": 1}

    def flow():
        return FlowBuilder("one", S).step("a", stalls).compile()

    a = Engine(store_a, flows=[flow()], clock=clock, owner="hosta:1:a", lease_ttl_s=30)
    holder["b"] = Engine(store_b, flows=[flow()], clock=clock, owner="hostb:2:b", lease_ttl_s=30)
    try:
        with pytest.raises(RunLeasedError) as info:
            a.run("one", S())
        (run,) = store_b.list_runs()
        assert (info.value.run_id, info.value.owner) == (run.run_id, "hostb:2:b")
        assert info.value.expires_at == T0 + 31 + 30
        assert run.revision == 0  # A's step result was not saved
    finally:
        store_a.close()
        store_b.close()
