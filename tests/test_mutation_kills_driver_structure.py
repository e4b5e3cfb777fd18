"""Loops, conditions, parallel steps and the child journal (flow/driver.py):
what a user of the engine sees when one of them is paused, retried, resumed
or crashes, and what they leave in the checkpoint.

Every run uses a real SQLite file and the injected clock; the crash case
SIGKILLs a real worker process (tests/driver_structure_worker.py).
"""

from __future__ import annotations

import asyncio
import operator
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, EventBus, FlowBuilder, Step
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import Policy
from desktop_app.flow.events import RunProgress, StepFinished, StepResult
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store

WORKER = Path(__file__).resolve().parent / "driver_structure_worker.py"
T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0
    items: list[str] = []
    note: str = ""
    a: str = ""
    b: str = ""
    error: str = ""
    blob: Any = None


class Retryable(Exception):
    retryable = True


class Fatal(Exception):
    retryable = False


@pytest.fixture
def env(db_path):
    store = open_store(db_path)
    clock = ManualClock(T0)
    events: list[Any] = []
    bus = EventBus()
    bus.subscribe(events.append)
    engine = Engine(store, clock=clock, events=bus, group_commit=False)
    yield store, engine, clock, events
    store.close()


def _steps(store, run_id):
    return store.latest(run_id).steps


# -- loops -----------------------------------------------------------------


def test_loop_checks_until_first_caps_at_max_and_reports_each_iteration(env):
    store, engine, _clock, events = env
    seen: list[int] = []
    calls: list[tuple[int, int]] = []

    def body(s: S, ctx) -> dict:
        seen.append(ctx.iteration)
        return {"n": s.n + 1}

    engine.register(
        FlowBuilder("until3", S)
        .loop(
            "count",
            body,
            until=lambda s: s.n >= 3,
            max_iterations=10,
            on_iteration=lambda i, s: calls.append((i, s.n)),
            progress=lambda s: (s.n, 3),
        )
        .compile()
    )
    r = engine.run("until3", S())
    assert r.status == "completed" and r.state.n == 3
    assert seen == [1, 2, 3]  # ctx.iteration is 1-based
    assert calls == [(1, 1), (2, 2), (3, 3)]
    mine = [(e.done, e.total) for e in events if isinstance(e, RunProgress)]
    assert mine[:3] == [(1, 3), (2, 3), (3, 3)]
    assert all(e.run_id == r.run_id for e in events if isinstance(e, RunProgress))
    cp = store.latest(r.run_id)
    assert cp.progress == (3, 3) and cp.steps["count"].iteration == 3

    # the cap ends the loop without error (the guard in until stops a runaway)
    seen.clear()
    engine.register(
        FlowBuilder("cap3", S)
        .loop("count", body, until=lambda s: s.n >= 20, max_iterations=3)
        .compile()
    )
    r = engine.run("cap3", S())
    assert r.status == "completed" and r.state.n == 3 and seen == [1, 2, 3]

    # until is checked before the first iteration: nothing to do, nothing runs
    seen.clear()
    engine.register(FlowBuilder("empty", S).loop("count", body, until=lambda s: True).compile())
    r = engine.run("empty", S())
    assert r.status == "completed" and r.state.n == 0 and seen == []


def test_loop_commits_each_iterations_writes_intents_and_reported_progress(env):
    store, engine, _clock, events = env
    committed: list[int] = []

    def body(s: S, ctx) -> dict:
        i = ctx.iteration
        ctx.write(lambda tx: committed.append(i))
        ctx.send("sink", {"i": i})
        ctx.progress(i, 3)
        return {"n": s.n + 1}

    engine.register(FlowBuilder("w", S).loop("count", body, until=lambda s: s.n >= 3).compile())
    r = engine.run("w", S())
    assert r.status == "completed"
    assert committed == [1, 2, 3]
    sent = [i for i in store.intents(["pending"]) if i.run_id == r.run_id]
    assert sorted(i.payload["i"] for i in sent) == [1, 2, 3]
    mine = [(e.done, e.total) for e in events if isinstance(e, RunProgress)]
    assert mine[:3] == [(1, 3), (2, 3), (3, 3)]
    # each iteration's checkpoint holds its position and progress
    infos = engine.history(r.run_id)
    by_iteration = {}
    for info in infos:
        cp = engine.checkpoint(f"{r.run_id}:{info.revision}")
        rec = cp.steps.get("count")
        if rec is not None and rec.status == "in_progress" and cp.state.get("n"):
            by_iteration[rec.iteration] = (cp.state["n"], cp.progress)
            assert (rec.step_id, rec.attempts, rec.started_at) == ("count", 1, T0)
    assert by_iteration == {1: (1, (1, 3)), 2: (2, (2, 3)), 3: (3, (3, 3))}


def test_paused_loop_resumes_at_the_iteration_it_stopped_at(env):
    store, engine, _clock, _events = env
    seen: list[int] = []
    fail = {"on": True}

    def body(s: S, ctx) -> dict:
        seen.append(ctx.iteration)
        ctx.send("sink", {"i": ctx.iteration})
        if ctx.iteration == 3 and fail["on"]:
            raise Fatal("iteration 3 broke")
        return {"n": s.n + 1}

    def sent(run_id: str) -> list[int]:
        return sorted(i.payload["i"] for i in store.intents(["pending"]) if i.run_id == run_id)

    engine.register(
        FlowBuilder("p", S)
        .loop("count", body, until=lambda s: s.n >= 4, max_iterations=6, on_error="pause")
        .compile()
    )
    r = engine.run("p", S())
    assert r.status == "waiting" and r.state.n == 2
    rec = _steps(store, r.run_id)["count"]
    assert (rec.step_id, rec.status, rec.attempts) == ("count", "failed", 1)
    assert (rec.iteration, rec.started_at) == (2, T0)
    assert sent(r.run_id) == [1, 2]  # committed with their iterations, before the failure
    fail["on"] = False
    r = engine.resume(r.run_id)
    assert r.status == "completed" and r.state.n == 4
    assert sent(r.run_id) == [1, 2, 3, 4]
    assert seen == [1, 2, 3, 3, 4]  # iterations 1 and 2 never ran again


def test_loop_attempt_runs_under_the_steps_timeout(env):
    _store, engine, _clock, _events = env

    async def body(s: S) -> dict:
        # never set: only the step's 0.05 s timeout ends it (the 5 s bound
        # only stops a broken engine from hanging the suite)
        await asyncio.wait_for(asyncio.Event().wait(), 5)
        return {}

    engine.register(
        FlowBuilder("t", S).loop("count", body, until=lambda s: False, timeout_s=0.05).compile()
    )
    r = engine.run("t", S())
    assert r.status == "failed"
    assert "StepTimeoutError" in r.error and "timed out after 0.05 s" in r.error


# -- conditions ------------------------------------------------------------


def _cond_flow(fail: dict[str, bool], decided: list[bool], log: list[str]):
    def nested(name: str, changes_note: bool = False):
        def run(s: S, ctx) -> dict:
            log.append(f"{name}:{ctx.attempt}")
            if fail.get(name):
                raise Fatal(f"{name} broke")
            out: dict[str, Any] = {"items": [*s.items, name]}
            if changes_note:
                out["note"] = "changed"  # re-deciding now would skip the rest
            return out

        return run

    def predicate(s: S) -> bool:
        decided.append(s.note == "go")
        return s.note == "go"

    return (
        FlowBuilder("cond", S)
        .step("before", lambda s: {"note": "go"})
        .condition(
            "check",
            predicate,
            [("n1", nested("n1", True)), ("n2", nested("n2")), ("n3", nested("n3"))],
        )
        .step("after", lambda s: {"n": 1})
        .chain()
        .compile()
    )


def test_resumed_condition_keeps_its_decision_and_skips_completed_nested_steps(env):
    store, engine, _clock, _events = env
    fail = {"n2": True}
    decided: list[bool] = []
    log: list[str] = []
    engine.register(_cond_flow(fail, decided, log))
    r = engine.run("cond", S())
    assert r.status == "failed" and "n2 broke" in r.error
    steps = _steps(store, r.run_id)
    assert steps["n1"].status == "completed" and steps["n2"].status == "failed"
    fail["n2"] = False
    r = engine.resume(r.run_id)
    assert r.status == "completed"
    assert r.state.items == ["n1", "n2", "n3"] and r.state.n == 1
    assert log == ["n1:1", "n2:1", "n2:1", "n3:1"]  # n1 never again
    assert decided == [True]  # decided once, stored, never re-decided
    steps = _steps(store, r.run_id)
    assert [steps[n].status for n in ("n1", "n2", "n3")] == ["completed"] * 3


def test_condition_nested_records_events_writes_and_skips(env):
    store, engine, clock, events = env
    committed: list[str] = []

    def nested(name: str):
        def run(s: S, ctx) -> dict:
            began = time.perf_counter()
            clock.advance(2.0)
            ctx.write(lambda tx: committed.append(name))
            ctx.send("sink", {"from": name})
            inner[name] = (time.perf_counter() - began) * 1000
            return {"items": [*s.items, name]}

        return run

    inner: dict[str, float] = {}
    engine.register(
        FlowBuilder("c", S)
        .condition(
            "check", lambda s: s.note != "skip", [("n1", nested("n1")), ("n2", nested("n2"))]
        )
        .compile()
    )
    outer = time.perf_counter()
    r = engine.run("c", S())
    outer_ms = (time.perf_counter() - outer) * 1000
    assert r.status == "completed" and r.state.items == ["n1", "n2"]
    assert committed == ["n1", "n2"]
    sent = [i for i in store.intents(["pending"]) if i.run_id == r.run_id]
    assert [(i.step_id, i.payload) for i in sent] == [
        ("n1", {"from": "n1"}),
        ("n2", {"from": "n2"}),
    ]
    steps = _steps(store, r.run_id)
    for k, name in enumerate(("n1", "n2")):
        rec = steps[name]
        assert (rec.step_id, rec.status, rec.attempts) == (name, "completed", 1)
        assert (rec.started_at, rec.finished_at) == (T0 + 2 * k, T0 + 2 * k + 2)
        assert inner[name] <= rec.duration_ms <= outer_ms
    done = [e for e in events if isinstance(e, StepFinished) and e.result.name in ("n1", "n2")]
    assert [(e.run_id, e.result.name, e.result.status, e.result.error) for e in done] == [
        (r.run_id, "n1", "done", None),
        (r.run_id, "n2", "done", None),
    ]
    assert done[0].result.duration_ms == steps["n1"].duration_ms

    events.clear()
    r = engine.run("c", S(note="skip"))
    assert r.status == "completed" and r.state.items == []
    steps = _steps(store, r.run_id)
    assert [(steps[n].step_id, steps[n].status) for n in ("n1", "n2")] == [
        ("n1", "skipped"),
        ("n2", "skipped"),
    ]
    skipped = [e for e in events if isinstance(e, StepFinished) and e.result.name in ("n1", "n2")]
    assert skipped == [
        StepFinished(r.run_id, StepResult("n1", "skipped", None, 0.0)),
        StepFinished(r.run_id, StepResult("n2", "skipped", None, 0.0)),
    ]


def test_nested_step_retries_under_its_own_policy(env):
    store, engine, clock, _events = env
    attempts: list[int] = []

    def flaky(s: S, ctx) -> dict:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            clock.advance(1.0)
            raise Retryable("first try fails")
        return {"note": "ok"}

    engine.register(
        FlowBuilder("c", S)
        .condition("check", lambda s: True, [Step("n1", flaky, Policy(retry=1))])
        .compile()
    )
    r = engine.run("c", S())
    assert r.status == "completed" and r.state.note == "ok"
    assert attempts == [1, 2]
    rec = _steps(store, r.run_id)["n1"]
    assert (rec.status, rec.attempts, rec.started_at, rec.finished_at) == (
        "completed",
        2,
        T0,
        T0 + 1.0,
    )


def test_nested_step_in_progress_while_it_journals_a_child(env):
    store, engine, _clock, _events = env
    seen: dict[str, Any] = {}

    def spawn(s: S, ctx) -> dict:
        child = ctx.child_run_id()
        cp = store.latest(ctx.run_id)  # the journal's checkpoint, saved before it returns
        seen["rec"] = cp.steps["n1"]
        seen["step_id"] = cp.step_id
        seen["journal"] = cp.meta["children"]
        return {"note": child}

    engine.register(
        FlowBuilder("c", S).condition("check", lambda s: True, [("n1", spawn)]).compile()
    )
    r = engine.run("c", S())
    assert r.status == "completed" and r.state.note == f"{r.run_id}:n1"
    rec = seen["rec"]
    assert (rec.step_id, rec.status, rec.attempts, rec.started_at) == ("n1", "in_progress", 1, T0)
    assert seen["step_id"] == "check"  # the head step saved it
    assert seen["journal"] == {"n1": [{"id": f"{r.run_id}:n1", "kind": "flow"}]}


def test_crash_during_a_nested_retry_counts_the_lost_attempt(db_path, tmp_path):
    log = tmp_path / "log"

    def worker() -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(WORKER), str(db_path), str(log), "nested_retry"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert worker().returncode == -signal.SIGKILL
    r = worker()
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["n1:1", "n1:2", "n1:3"]
    store = open_store(db_path)
    try:
        (run,) = store.list_runs()
        assert run.status == "completed"
        rec = store.latest(run.run_id).steps["n1"]
        assert (rec.status, rec.attempts) == ("completed", 3)
    finally:
        store.close()


def test_crash_on_the_last_nested_attempt_fails_the_run(db_path, tmp_path):
    """The attempt lost to the crash uses up the nested step's budget."""
    log = tmp_path / "log"
    cmd = [sys.executable, str(WORKER), str(db_path), str(log), "nested_retry", "--tight"]
    assert subprocess.run(cmd, capture_output=True, timeout=60).returncode == -signal.SIGKILL
    assert subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    store = open_store(db_path)
    try:
        (run,) = store.list_runs()
        assert run.status == "failed"
        assert "'n1'" in (run.error or "") and "3 attempt" in (run.error or "")
        assert log.read_text().splitlines() == ["n1:1", "n1:2", "n1:3"]
    finally:
        store.close()


# -- parallel steps --------------------------------------------------------


def _fan(engine, name: str, branches, **kw):
    engine.register(
        FlowBuilder(name, S, **kw.pop("flow", {})).parallel("fan", branches, **kw).compile()
    )


def test_branch_retries_follow_the_steps_policy_then_the_flows(env):
    _store, engine, _clock, _events = env
    tries: Counter[str] = Counter()
    seen: dict[str, list[int]] = {}

    def fails(times: int, key: str):
        def run(s: S, ctx) -> dict:
            tries[key] += 1
            seen.setdefault(key, []).append(ctx.attempt)
            if tries[key] > 5:
                raise Fatal("runaway")  # a guard, never reached on a correct engine
            if tries[key] <= times:
                raise Retryable(f"{key} try {tries[key]}")
            return {"n": tries[key]}

        return run

    # step retry=1 over a flow retry of 0
    _fan(engine, "step1", {"ok": fails(1, "s-ok")}, retry=1)
    assert engine.run("step1", S()).status == "completed"
    _fan(engine, "step1x", {"bad": fails(9, "s-bad")}, retry=1)
    r = engine.run("step1x", S())
    assert r.status == "failed" and tries["s-bad"] == 2
    assert seen["s-ok"] == [1, 2] and seen["s-bad"] == [1, 2]

    # step retry 0 inherits the flow's 2
    _fan(engine, "flow2", {"ok": fails(2, "f-ok")}, flow={"retry": 2})
    assert engine.run("flow2", S()).status == "completed" and tries["f-ok"] == 3
    _fan(engine, "flow2x", {"bad": fails(9, "f-bad")}, flow={"retry": 2})
    assert engine.run("flow2x", S()).status == "failed" and tries["f-bad"] == 3
    assert seen["f-bad"] == [1, 2, 3]

    # a non-retryable error is never retried
    def fatal(s: S) -> dict:
        tries["fatal"] += 1
        raise Fatal("no point retrying")

    _fan(engine, "fatal", {"x": fatal}, flow={"retry": 3})
    r = engine.run("fatal", S())
    assert r.status == "failed" and tries["fatal"] == 1
    assert "x: Fatal: no point retrying" in r.error


def test_branch_retries_wait_their_backoff_on_the_injected_clock(env):
    _store, engine, clock, _events = env
    times: list[float] = []

    def flaky(s: S, ctx) -> dict:
        times.append(clock.now())
        if len(times) < 3:
            raise Retryable("again")
        return {"n": 1}

    policy = RetryPolicy(retries=2, backoff=Backoff(initial_s=0.5, max_s=10, jitter_s=0.0))
    _fan(engine, "b", {"x": flaky}, flow={"retry": policy})
    assert engine.run("b", S()).status == "completed"
    assert times == [T0, T0 + 0.5, T0 + 1.5]


def test_cancel_during_a_branch_backoff_ends_it_at_once(env):
    _store, engine, clock, _events = env
    tries: list[int] = []

    def cancels(s: S, ctx) -> dict:
        tries.append(ctx.attempt)
        engine.cancel(ctx.run_id, "stop it")
        raise Retryable("would retry in 30 s")

    policy = RetryPolicy(retries=2, backoff=Backoff(initial_s=30, max_s=60, jitter_s=0.0))
    _fan(engine, "c", {"x": cancels}, flow={"retry": policy})
    r = engine.run("c", S())
    assert r.status == "canceled" and tries == [1]
    assert clock.now() == T0  # the 30 s backoff never ran


def test_failed_branches_are_named_and_completed_ones_stay_saved(env):
    _store, engine, _clock, _events = env
    runs: Counter[str] = Counter()
    fixed = {"on": False}

    def a(s: S) -> dict:
        runs["a"] += 1
        if not fixed["on"]:
            raise ValueError("bad a")
        return {"a": "A"}

    def b(s: S) -> dict:
        runs["b"] += 1
        return {"b": "B"}

    def c(s: S):
        runs["c"] += 1
        return {"note": "C"} if fixed["on"] else ["not", "a", "dict"]

    # one worker: a fails first, then b completes, then c fails
    _fan(engine, "f", {"a": a, "b": b, "c": c}, max_concurrency=1)
    r = engine.run("f", S())
    assert r.status == "failed"
    assert (
        "parallel step 'fan': 2 branch(es) failed: a: ValueError: bad a; c: TypeError: "
        "parallel branch 'c' must return a dict of field updates or None"
    ) in r.error
    fixed["on"] = True
    r = engine.resume(r.run_id)
    assert r.status == "completed" and (r.state.a, r.state.b, r.state.note) == ("A", "B", "C")
    assert runs == {"a": 2, "b": 1, "c": 2}  # b's saved output was reused


def test_branch_output_shapes_and_what_an_error_blames(env):
    _store, engine, _clock, _events = env

    def doubles(s: S) -> dict:
        return {"n": s.n * 2}

    def nothing(s: S) -> None:
        return None

    _fan(engine, "ok", {"d": doubles, "none": nothing})
    r = engine.run("ok", S(n=21))
    assert r.status == "completed" and r.state.n == 42

    _fan(engine, "bad", {"d": doubles, "lock": lambda s: {"blob": threading.Lock()}})
    r = engine.run("bad", S(n=1))
    assert r.status == "failed"
    assert "step 'fan/lock' returned a value for state field 'blob' that cannot be stored" in (
        r.error
    )


def test_branch_attempt_runs_under_the_steps_timeout(env):
    _store, engine, _clock, _events = env

    async def hangs(s: S) -> dict:
        await asyncio.wait_for(asyncio.Event().wait(), 5)  # as in the loop case
        return {}

    _fan(engine, "t", {"slow": hangs}, timeout_s=0.05)
    r = engine.run("t", S())
    assert r.status == "failed"
    assert "slow: StepTimeoutError: step 'fan/slow' timed out after 0.05 s" in r.error


def test_each_branch_attempt_gets_its_own_copy_of_the_stored_state(env):
    _store, engine, _clock, _events = env
    seen: list[list[str]] = []

    def mutates(s: S, ctx) -> dict | None:
        seen.append(list(s.items))
        s.items.append("leaked")  # in place: must reach neither the run nor a retry
        if ctx.attempt == 1:
            raise Retryable("once more")
        return None

    def reads(s: S) -> dict:
        seen.append(list(s.items))
        return {"note": ",".join(s.items)}

    _fan(engine, "m", {"m": mutates, "r": reads}, max_concurrency=1, retry=1)
    r = engine.run("m", S(items=["x"]))
    assert r.status == "completed"
    assert seen == [["x"], ["x"], ["x"]]
    assert r.state.items == ["x"] and r.state.note == "x"


def test_fan_in_merges_fields_and_refuses_an_undeclared_conflict(env):
    _store, engine, _clock, _events = env
    _fan(engine, "m", {"a": lambda s: {"a": "A"}, "b": lambda s: {"b": "B"}})
    r = engine.run("m", S())
    assert r.status == "completed" and (r.state.a, r.state.b) == ("A", "B")

    _fan(engine, "x", {"a": lambda s: {"note": "A"}, "b": lambda s: {"note": "B"}})
    r = engine.run("x", S())
    assert r.status == "failed"
    assert "FanInConflictError: parallel 'fan': branches both write 'note'" in r.error
    assert "declare a reducer for it" in r.error

    _fan(
        engine,
        "r",
        {"a": lambda s: {"items": ["a"]}, "b": lambda s: {"items": ["b"]}},
        reducers={"items": operator.add},
    )
    assert engine.run("r", S()).state.items == ["a", "b"]


def test_routed_parallel_failure_keeps_the_completed_branches_output(env):
    _store, engine, _clock, _events = env

    def broken(s: S) -> dict:
        raise Fatal("a broke")

    engine.register(
        FlowBuilder("route", S)
        .parallel(
            "fan",
            {"a": broken, "b": lambda s: {"b": "B"}},
            max_concurrency=1,
            on_error="route",
            error_route="handle",
        )
        .step("handle", lambda s: {"note": "handled"})
        .finish("handle")
        .compile()
    )
    r = engine.run("route", S())
    assert r.status == "completed" and r.state.note == "handled"
    assert r.state.b == "B" and "a: Fatal: a broke" in r.state.error


def test_branch_writes_and_intents_commit_with_its_checkpoint(env):
    store, engine, _clock, _events = env
    committed: list[str] = []

    def branch(name: str):
        def run(s: S, ctx) -> dict:
            ctx.write(lambda tx: committed.append(name))
            ctx.send("sink", {"from": name})
            return {name: name.upper()}

        return run

    _fan(engine, "w", {"a": branch("a"), "b": branch("b")}, max_concurrency=1)
    r = engine.run("w", S())
    assert r.status == "completed" and committed == ["a", "b"]
    sent = [i for i in store.intents(["pending"]) if i.run_id == r.run_id]
    assert [(i.step_id, i.payload) for i in sent] == [
        ("fan/a", {"from": "a"}),
        ("fan/b", {"from": "b"}),
    ]
    # the idempotency keys a destination de-duplicates on: branch, iteration 0, n
    assert [i.intent_id for i in sent] == [f"{r.run_id}:fan/a:0:0", f"{r.run_id}:fan/b:0:0"]


def test_max_concurrency_one_runs_branches_one_at_a_time_on_named_threads(env):
    _store, engine, _clock, _events = env
    started = threading.Event()
    overlap: list[bool] = []
    threads: list[str] = []

    def first(s: S) -> dict:
        threads.append(threading.current_thread().name)
        # a second worker would start "second" now; give it the chance
        overlap.append(started.wait(0.3))
        return {"a": "A"}

    def second(s: S) -> dict:
        threads.append(threading.current_thread().name)
        started.set()
        return {"b": "B"}

    _fan(engine, "one", {"first": first, "second": second}, max_concurrency=1)
    r = engine.run("one", S())
    assert r.status == "completed" and overlap == [False]
    assert len(set(threads)) == 1 and threads[0].startswith("branch-fan")


def test_a_branch_child_is_journaled_under_the_branch(env):
    store, engine, _clock, _events = env
    seen: dict[str, Any] = {}

    def spawn(s: S, ctx) -> dict:
        first = ctx.child_run_id()
        second = ctx.child_run_id("agent")
        cp = store.latest(ctx.run_id)
        seen["step_id"] = cp.step_id
        return {"a": first, "b": second}

    _fan(engine, "kid", {"x": spawn})
    r = engine.run("kid", S())
    assert r.status == "completed"
    assert (r.state.a, r.state.b) == (f"{r.run_id}:fan/x", f"{r.run_id}:fan/x:1")
    assert seen["step_id"] == "fan"  # saved by the parallel step, the run's head
    assert store.latest(r.run_id).meta["children"] == {
        "fan/x": [
            {"id": f"{r.run_id}:fan/x", "kind": "flow"},
            {"id": f"{r.run_id}:fan/x:1", "kind": "agent"},
        ]
    }


def test_an_answered_branch_finishes_while_the_other_keeps_waiting(env):
    _store, engine, _clock, _events = env
    runs: Counter[str] = Counter()

    def asks(field: str):
        def run(s: S, ctx) -> dict:
            runs[field] += 1
            return {field: ctx.interrupt(f"{field}?")}

        return run

    _fan(engine, "ask", {"a": asks("a"), "legal/b": asks("b")})
    r = engine.run("ask", S())
    assert r.status == "waiting"
    waits = {w.step_id: w.wait_id for w in engine.waits(r.run_id)}
    assert set(waits) == {"fan/a", "fan/legal/b"}
    r = engine.resume_with(r.run_id, "yes-a", wait_id=waits["fan/a"])
    assert r.status == "waiting"
    assert [w.step_id for w in engine.waits(r.run_id)] == ["fan/legal/b"]
    assert runs == {"a": 2, "b": 1}  # the unanswered branch was left alone
    r = engine.resume_with(r.run_id, "yes-b", wait_id=waits["fan/legal/b"])
    assert r.status == "completed" and (r.state.a, r.state.b) == ("yes-a", "yes-b")
    assert runs == {"a": 2, "b": 2}


# -- the child journal -----------------------------------------------------


def test_re_executed_step_reattaches_to_every_child_it_started(env):
    store, engine, _clock, _events = env
    executed: Counter[str] = Counter()
    fail = {"on": True}

    class C(BaseModel):
        text: str
        out: str = ""

    def work(c: C) -> dict:
        executed[c.text] += 1
        return {"out": c.text.upper()}

    engine.register(FlowBuilder("child", C).step("work", work).compile())

    def spawn(s: S, ctx) -> dict:
        one = engine.run_child(ctx, "child", {"text": "one"})
        two = engine.run_child(ctx, "child", {"text": "two"})
        if fail["on"]:
            raise Fatal("after both children")
        return {"note": f"{one.state.out}+{two.state.out}"}

    engine.register(
        FlowBuilder("parent", S)
        .step("prep", lambda s: {"n": 1})
        .step("spawn", spawn)
        .chain()
        .compile()
    )
    first = engine.run("parent", S())
    assert first.status == "failed"
    rid = first.run_id
    journal = {
        "spawn": [
            {"id": f"{rid}:spawn", "kind": "flow"},
            {"id": f"{rid}:spawn:1", "kind": "flow"},
        ]
    }
    assert store.latest(rid).meta["children"] == journal
    # each slot was saved in a checkpoint of its own, by the step, before its child ran
    saved = [
        engine.checkpoint(f"{rid}:{i.revision}")
        for i in engine.history(rid)
        if engine.checkpoint(f"{rid}:{i.revision}").meta.get("children")
    ]
    assert [len(cp.meta["children"]["spawn"]) for cp in saved[:2]] == [1, 2]
    assert [cp.step_id for cp in saved[:2]] == ["spawn", "spawn"]
    fail["on"] = False
    replayed = engine.replay(f"{rid}:1")  # a new run id: only the journal knows the children
    assert replayed.status == "completed" and replayed.state.note == "ONE+TWO"
    resumed = engine.resume(rid)
    assert resumed.status == "completed" and resumed.state.note == "ONE+TWO"
    assert executed == {"one": 1, "two": 1}
    assert sorted(r.run_id for r in store.list_runs(flow_name="child")) == [
        f"{rid}:spawn",
        f"{rid}:spawn:1",
    ]
    assert store.latest(rid).meta["children"] == journal


def test_a_completed_branchs_answer_is_not_reused_when_its_step_runs_again(env):
    """The parallel step is routed away on a branch failure and later runs
    again: the branch that had completed asks its question again instead of
    taking the earlier answer."""
    _store, engine, _clock, _events = env

    def a(s: S, ctx) -> dict:
        return {"a": ctx.interrupt("a?")}

    def b(s: S, ctx) -> dict:
        if s.note == "second":
            return {"b": "fine"}
        raise Fatal(f"b broke after {ctx.interrupt('b?')}")

    engine.register(
        FlowBuilder("again", S)
        .parallel("fan", {"a": a, "b": b}, on_error="route", error_route="retry_fan")
        .step("retry_fan", lambda s: {"note": "second"})
        .step("end", lambda s: {"n": 1})
        .edge("fan", "end")
        .edge("retry_fan", "fan")
        .finish("end")
        .compile()
    )
    r = engine.run("again", S())
    waits = {w.step_id: w.wait_id for w in engine.waits(r.run_id)}
    r = engine.resume_with(r.run_id, "yes-a", wait_id=waits["fan/a"])
    assert r.status == "waiting"
    r = engine.resume_with(r.run_id, "go", wait_id=waits["fan/b"])
    assert r.status == "waiting" and r.state.note == "second"
    assert [w.step_id for w in engine.waits(r.run_id)] == ["fan/a"]


def test_loop_position_record_names_its_step_in_the_memory_store():
    """The in-memory store keeps the step records as given: each iteration's
    record names its loop step and keeps its first attempt's start."""
    from desktop_app.store.memory.store import InMemoryCheckpointStore

    store = InMemoryCheckpointStore()
    engine = Engine(store, clock=ManualClock(T0))
    engine.register(
        FlowBuilder("m", S)
        .loop("count", lambda s: {"n": s.n + 1}, until=lambda s: s.n >= 2)
        .compile()
    )
    r = engine.run("m", S())
    assert r.status == "completed"
    recs = [
        engine.checkpoint(f"{r.run_id}:{i.revision}").steps.get("count")
        for i in engine.history(r.run_id)
    ]
    looping = [x for x in recs if x is not None and x.status == "in_progress" and x.iteration]
    assert [(x.step_id, x.iteration, x.attempts, x.started_at) for x in looping] == [
        ("count", 1, 1, T0),
        ("count", 2, 1, T0),
    ]
