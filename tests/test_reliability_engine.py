"""A step's failure never leaks past its attempt (timeouts, unstorable
results, in-place mutation) and parallel branches keep their own policies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import StepTimeoutError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store import codec
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

REPO = Path(__file__).resolve().parents[1]


class S(BaseModel):
    n: int = 0
    items: list[str] = []
    payload: Any = None
    a: str | None = None
    b: str | None = None
    error: str | None = None
    notified: bool = False


class Transient(Exception):
    retryable = True


class Permanent(Exception):
    retryable = False


# -- S57: a timed-out attempt commits nothing and never overlaps its retry ----


@pytest.mark.scenario("S57")
def test_timed_out_sync_attempt_commits_nothing_and_retry_waits_for_it(db_path):
    store = open_store(db_path)
    order: list[str] = []
    ran_writes: list[int] = []
    refused: list[str] = []
    gate = threading.Event()  # attempt 2 opens it: only reachable if it overlaps

    def slow(s: S, ctx) -> dict:
        order.append(f"start{ctx.attempt}")
        if ctx.attempt == 1:
            for _ in range(300):  # bounded: ends when cancelled (or, today, when overlapped)
                if getattr(ctx, "cancelled", False) or gate.wait(0.01):
                    break
            for effect in (
                lambda: ctx.write(lambda conn: ran_writes.append(1)),
                lambda: ctx.send("mail", {"to": "x"}),
            ):
                try:
                    effect()
                except StepTimeoutError:
                    refused.append("refused")
            order.append("end1")
            return {"n": 100, "items": ["from the timed-out attempt"]}
        gate.set()
        ctx.write(lambda conn: ran_writes.append(2))
        return {"n": 2}

    flow = FlowBuilder("t", S).step("x", slow, timeout_s=0.05, retry=1).compile()
    res = Engine(store, flows=[flow]).run("t", S())
    assert res.status == "completed"
    assert order == ["start1", "end1", "start2"]  # the retry began after attempt 1 ended
    assert res.state.n == 2 and res.state.items == []
    assert store.latest(res.run_id).state["items"] == []
    assert ran_writes == [2]  # only the successful attempt's domain write committed
    assert refused == ["refused", "refused"]
    assert store.intents(("pending", "sent", "failed", "unknown")) == []
    store.close()


@pytest.mark.scenario("S57")
def test_timed_out_attempt_effect_never_lands_after_the_run_returned(db_path):
    store = open_store(db_path)
    landed: list[str] = []

    def slow(s: S, ctx) -> dict:
        for _ in range(300):
            if getattr(ctx, "cancelled", False):
                break
            threading.Event().wait(0.01)
        landed.append("side effect")
        return {"n": 1}

    flow = FlowBuilder("t", S).step("x", slow, timeout_s=0.05).compile()
    res = Engine(store, flows=[flow]).run("t", S())
    assert res.status == "failed" and "timed out after 0.05 s" in (res.error or "")
    # the attempt had ended before the failure was recorded: nothing lands later
    assert landed == ["side effect"]
    assert store.latest(res.run_id).state["n"] == 0
    store.close()


@pytest.mark.scenario("S57")
def test_timed_out_async_attempt_is_cancelled_before_its_retry(db_path):
    store = open_store(db_path)
    seen: list[str] = []

    async def step(s: S, ctx) -> dict:
        seen.append(f"start{ctx.attempt}")
        if ctx.attempt == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.append("cancelled1")
                raise
        return {"n": ctx.attempt}

    flow = FlowBuilder("t", S).step("x", step, timeout_s=0.05, retry=1).compile()
    res = Engine(store, flows=[flow]).run("t", S())
    assert res.status == "completed" and res.state.n == 2
    assert seen == ["start1", "cancelled1", "start2"]
    store.close()


# -- S58: an unstorable result fails the step, typed, and the run resumes -----


def _deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    cur = root
    for _ in range(depth):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    return root


@pytest.mark.scenario("S58")
@pytest.mark.parametrize("kind", ["object", "lock", "deep"])
def test_unstorable_step_result_fails_the_step_typed_and_resumes_after_fix(db_path, kind):
    store = open_store(db_path)
    fixed = {"on": False}

    def produce(s: S) -> dict:
        if fixed["on"]:
            return {"payload": [1, 2]}
        value = {"object": object, "lock": threading.Lock, "deep": lambda: _deep_list(5000)}
        return {"payload": value[kind]()}

    flow = (
        FlowBuilder("u", S)
        .step("produce", produce)
        .step("after", lambda s: {"n": 1})
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("u", S())
    assert res.status == "failed"
    assert "'produce'" in (res.error or "") and "'payload'" in (res.error or "")
    run = store.get_run(res.run_id)
    assert run.status == "failed" and run.revision >= 1
    rec = store.latest(res.run_id).steps["produce"]
    assert rec.status == "failed" and rec.error_type == "StateNotStorableError"
    fixed["on"] = True
    again = engine.resume(res.run_id)
    assert again.status == "completed" and again.state.payload == [1, 2] and again.state.n == 1
    store.close()


@pytest.mark.scenario("S58")
def test_unstorable_result_from_the_cli_exits_1_and_resumes_after_fix(tmp_path):
    db = tmp_path / "f.db"
    env = {
        **os.environ,
        "FLOWDESK_FLOWS": '["tests.reliability_flows:unstorable"]',
        "PYTHONPATH": str(REPO),
    }

    def flowdesk(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return cli_forkserver.run(
            ["--db", str(db), *args], env={**env, **extra}, cwd=REPO, timeout=120
        )

    assert flowdesk("db", "apply").returncode == 0
    started = flowdesk("start", "unstorable")
    assert started.returncode == 1, started.stderr
    assert "Traceback" not in started.stderr
    assert "step 'produce'" in started.stderr and "'payload'" in started.stderr
    run_id = started.stdout.splitlines()[0].strip()  # `start` prints the run id first
    assert started.stdout.strip().endswith("failed")
    resumed = flowdesk("resume", run_id, UNSTORABLE_FIXED="1")
    assert resumed.returncode == 0, resumed.stderr
    assert "completed" in resumed.stdout


# -- S62: every attempt starts from the stored state ---------------------------


@pytest.mark.scenario("S62")
def test_retry_starts_from_stored_state_after_in_place_mutation(db_path):
    store = open_store(db_path)
    seen: list[list[str]] = []

    def mutate_then_fail(s: S, ctx) -> dict:
        seen.append(list(s.items))
        if ctx.attempt == 1:
            s.items.append("attempt 1")  # the mistake: mutated in place, then failed
            raise Transient("flaky")
        return {"items": [*s.items, "attempt 2"]}

    flow = (
        FlowBuilder("m", S)
        .step("seed", lambda s: {"items": ["seed"]})
        .step("x", mutate_then_fail, retry=1)
        .chain()
        .compile()
    )
    res = Engine(store, flows=[flow]).run("m", S())
    assert res.status == "completed"
    assert seen == [["seed"], ["seed"]]
    assert res.state.items == ["seed", "attempt 2"]
    assert store.latest(res.run_id).state["items"] == ["seed", "attempt 2"]
    store.close()


@pytest.mark.scenario("S62")
def test_failed_run_memory_matches_the_database(db_path):
    store = open_store(db_path)

    def mutate_then_fail(s: S) -> dict:
        s.items.append("half done")
        raise Permanent("broken")

    flow = FlowBuilder("m", S).step("x", mutate_then_fail).compile()
    res = Engine(store, flows=[flow]).run("m", S(items=["a"]))
    assert res.status == "failed"
    assert res.state.items == ["a"] == store.latest(res.run_id).state["items"]
    store.close()


# -- S83: a replayed or forked run's retry starts from the stored state too ----


class Nested(BaseModel):
    d: dict[str, Any] = {}
    payload: Any = None


@pytest.mark.scenario("S83")
@pytest.mark.parametrize("how", ["replay", "fork"])
def test_replayed_or_forked_retry_starts_from_stored_nested_state(db_path, how):
    store = open_store(db_path)
    seen: list[tuple[Any, Any]] = []
    fail = {"first attempt": False}

    def mutate_then_fail(s: Nested, ctx) -> dict:
        seen.append((codec.copy(s.d), codec.copy(s.payload)))
        if ctx.attempt == 1 and fail["first attempt"]:
            s.d["k"]["j"] = 1  # the mistake: nested state changed in place, then failed
            s.payload["items"].append("attempt 1")
            raise Transient("flaky")
        return {"payload": {"items": [*s.payload["items"], "done"]}}

    flow = FlowBuilder("m", Nested).step("x", mutate_then_fail, retry=1).compile()
    engine = Engine(store, flows=[flow])
    source = engine.run("m", Nested(d={"k": {}}, payload={"items": ["a"]}))
    assert source.status == "completed"
    fail["first attempt"], seen[:] = True, []
    if how == "replay":
        res = engine.replay(f"{source.run_id}:0")
    else:
        res = engine.fork(f"{source.run_id}:0", {"d": {"k": {}, "forked": True}})
    stored_d = {"k": {}} if how == "replay" else {"k": {}, "forked": True}
    assert res.status == "completed"
    assert seen == [(stored_d, {"items": ["a"]})] * 2  # the retry saw the stored state
    assert res.state.d == stored_d
    assert res.state.payload == {"items": ["a", "done"]}
    for info in engine.history(res.run_id):
        state = store.get_checkpoint(res.run_id, info.revision).state
        assert state["d"] == stored_d, info.revision
        assert "attempt 1" not in state["payload"]["items"], info.revision
    store.close()


@pytest.mark.scenario("S62")
def test_a_new_runs_first_retry_starts_from_its_stored_nested_state(db_path):
    """A run just created starts from copies of its state made at creation
    (not read back): the first step's in-place change of a nested value,
    then failed, reaches neither its retry, nor the caller's model, nor the
    stored revision 0."""
    store = open_store(db_path)
    seen: list[tuple[Any, Any]] = []

    def mutate_then_fail(s: Nested, ctx) -> dict:
        seen.append((codec.copy(s.d), codec.copy(s.payload)))
        if ctx.attempt == 1:
            s.d["k"]["j"] = 1  # the mistake: nested state changed in place, then failed
            s.payload["items"].append("attempt 1")
            raise Transient("flaky")
        return {"payload": {"items": [*s.payload["items"], "done"]}}

    flow = FlowBuilder("m", Nested).step("x", mutate_then_fail, retry=1).compile()
    given = Nested(d={"k": {}}, payload={"items": ["a"]})
    res = Engine(store, flows=[flow]).run("m", given)
    assert res.status == "completed"
    assert seen == [({"k": {}}, {"items": ["a"]})] * 2
    assert given == Nested(d={"k": {}}, payload={"items": ["a"]})
    assert store.get_checkpoint(res.run_id, 0).state == {
        "d": {"k": {}},
        "payload": {"items": ["a"]},
    }
    assert store.latest(res.run_id).state == {"d": {"k": {}}, "payload": {"items": ["a", "done"]}}
    store.close()


# -- S60: parallel branches keep their own retry and error policies -----------


def _fan_flow(order: tuple[str, str], calls: Counter[str]):
    def a(s: S) -> dict:
        calls["A"] += 1
        raise Permanent("A is broken")

    def b(s: S) -> dict:
        calls["B"] += 1
        if calls["B"] == 1:
            raise Transient("B flaked once")
        return {"b": "B output"}

    fns = {"A": a, "B": b}
    return (
        FlowBuilder("fan", S, retry=1)
        .parallel(
            "fan",
            {name: fns[name] for name in order},
            on_error="route",
            error_route="notify",
        )
        .step("notify", lambda s: {"notified": True})
        .step("end", lambda s: {"n": 1})
        .edge("fan", "end")
        .edge("notify", "end")
        .compile()
    )


@pytest.mark.scenario("S60")
@pytest.mark.parametrize("order", [("A", "B"), ("B", "A")])
def test_parallel_branches_apply_their_own_retry_and_keep_outputs(db_path, order):
    store = open_store(db_path)
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[_fan_flow(order, calls)], clock=ManualClock())
    res = engine.run("fan", S())
    assert res.status == "completed"
    assert calls == {"A": 1, "B": 2}  # A not retried (permanent), B retried once
    assert res.state.b == "B output"  # the completed branch's output is kept
    assert res.state.notified is True
    assert "A is broken" in (res.state.error or "")
    rec = store.latest(res.run_id).steps["fan"]
    assert rec.status == "failed" and "A is broken" in (rec.error or "")
    store.close()


@pytest.mark.scenario("S60")
@pytest.mark.parametrize("order", [("A", "B"), ("B", "A")])
def test_parallel_error_route_sees_every_branch_error(db_path, order):
    store = open_store(db_path)
    calls: Counter[str] = Counter()

    def a(s: S) -> dict:
        calls["A"] += 1
        raise Permanent("A is broken")

    def b(s: S) -> dict:
        calls["B"] += 1
        raise Transient(f"B flaked {calls['B']}")

    fns = {"A": a, "B": b}
    flow = (
        FlowBuilder("fan2", S, retry=1)
        .parallel("fan", {n: fns[n] for n in order}, on_error="route", error_route="notify")
        .step("notify", lambda s: {"notified": True})
        .edge("fan", "notify")
        .compile()
    )
    res = Engine(store, flows=[flow], clock=ManualClock()).run("fan2", S())
    assert res.status == "completed" and res.state.notified
    assert calls == {"A": 1, "B": 2}
    error = res.state.error or ""
    assert "A is broken" in error and "B flaked 2" in error
    store.close()


@pytest.mark.scenario("S57")
def test_timed_out_parallel_branch_commits_nothing_and_retries_after_it(db_path):
    store = open_store(db_path)
    order: list[str] = []
    gate = threading.Event()

    def slow(s: S, ctx) -> dict:
        order.append(f"start{ctx.attempt}")
        if ctx.attempt == 1:
            for _ in range(300):
                if getattr(ctx, "cancelled", False) or gate.wait(0.01):
                    break
            with contextlib.suppress(StepTimeoutError):
                ctx.send("mail", {"from": "timed-out attempt"})
            order.append("end1")
            return {"a": "from the timed-out attempt"}
        gate.set()
        ctx.send("mail", {"from": "attempt 2"})
        return {"a": "A output"}

    flow = (
        FlowBuilder("p", S, retry=1)
        .parallel("fan", {"A": slow, "B": lambda s: {"b": "B output"}}, timeout_s=0.05)
        .compile()
    )
    res = Engine(store, flows=[flow], clock=ManualClock()).run("p", S())
    assert res.status == "completed"
    assert order == ["start1", "end1", "start2"]
    assert (res.state.a, res.state.b) == ("A output", "B output")
    sent = store.intents(("pending", "sent", "failed", "unknown"))
    assert [i.payload for i in sent] == [{"from": "attempt 2"}]
    store.close()


@pytest.mark.scenario("S57")
def test_timed_out_loop_iteration_keeps_earlier_iterations_only(db_path):
    store = open_store(db_path)
    ran: list[int] = []
    seen: list[object] = []

    def body(s: S, ctx) -> dict:
        seen.append((ctx.iteration, ctx.attempt))
        if ctx.iteration == 3 and ctx.attempt == 1:
            for _ in range(300):  # bounded: ends when cancelled
                if getattr(ctx, "cancelled", False):
                    break
                threading.Event().wait(0.01)
            with contextlib.suppress(StepTimeoutError):
                ctx.write(lambda conn: ran.append(-ctx.iteration))
            seen.append("end")
            return {"n": 1000}
        ctx.write(lambda conn, i=ctx.iteration: ran.append(i))
        return {"n": s.n + 1}

    flow = (
        FlowBuilder("l", S)
        .loop("count", body, until=lambda s: s.n >= 5, timeout_s=0.05, retry=1)
        .compile()
    )
    res = Engine(store, flows=[flow]).run("l", S())
    assert res.status == "completed" and res.state.n == 5
    assert ran == [1, 2, 3, 4, 5]  # iteration 3's timed-out write never ran
    # the retry of iteration 3 began only after the timed-out one returned
    assert seen == [(1, 1), (2, 1), (3, 1), "end", (3, 2), (4, 2), (5, 2)]
    store.close()
