"""A step the run enters again is a new visit with keys of its own.

Routes may lead back to a step that already ran (a review loop: draft, ask,
draft again until approved), and so may an error route or a timeout route.
Each entry after the first is a new *visit* of that step. What the step
keys by its id gets a visit suffix from the second visit on (``<step>@2``,
``<step>@3``, …), so it never meets what the earlier visit recorded:

* its ``ctx.interrupt()`` wait ids (``<run>:<step>@2:<n>``): before, the
  second visit asked again under the first visit's answered id, which
  ``resume_with`` refuses, so the run could never finish;
* its idempotency key and outbox intent ids (``<run>:<step>@2:<iteration>``):
  before, the second visit's intent hit the first one's primary key and the
  run stopped with a misleading ``RevisionConflictError``;
* its child runs (``<run>:<step>@2``): before, the second visit reattached
  to the first visit's completed child and ran nothing;
* a condition step decides again and runs its nested steps again: before,
  it kept the first visit's decision and skipped the nested steps that had
  completed then.

The first visit keeps the keys it always had, so stored runs are read as
before. Within one visit the keys stay stable across retries and restarts
(the visit number is saved with the checkpoint that enters the step).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import FlowDefinitionError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    rounds: int = 0
    verdict: str = ""
    log: list[str] = []


def _again_until(n: int, step: str, done: str = "done"):
    """A route from ``step``: back to itself until ``rounds`` reaches ``n``."""
    return lambda s: done if s.rounds >= n else step


class C(BaseModel):
    n: int = 0


def _register_spawning_flow(engine: Engine) -> list[int]:
    """Register ``parent``: its step ``spawn`` runs a ``child`` flow and is
    visited twice; returns the list each child execution appends its input to."""
    ran: list[int] = []

    def child_step(c: C) -> dict:
        ran.append(c.n)
        return {"n": c.n * 10}

    child = FlowBuilder("child", C).step("work", child_step).compile()

    def spawn(s: S, ctx) -> dict:
        out = engine.run_child(ctx, child, C(n=s.rounds + 1))
        return {"rounds": s.rounds + 1, "log": [*s.log, f"{out.run_id}={out.state.n}"]}

    engine.register(child)
    engine.register(
        FlowBuilder("parent", S)
        .step("spawn", spawn)
        .step("done", lambda s: {})
        .route("spawn", _again_until(2, "spawn"), ["done", "spawn"])
        .finish("done")
        .compile()
    )
    return ran


@pytest.fixture
def engine(db_path):
    store = open_store(db_path)
    yield Engine(store, clock=ManualClock())
    store.close()


def test_a_review_loop_asks_each_round_under_a_new_wait_id(engine):
    def review(s: S, ctx) -> dict:
        verdict = ctx.interrupt(f"round {s.rounds + 1}: approve?")
        return {"verdict": verdict, "rounds": s.rounds + 1, "log": [*s.log, verdict]}

    flow = (
        FlowBuilder("review", S)
        .step("review", review)
        .step("done", lambda s: {})
        .route("review", lambda s: "done" if s.verdict == "ok" else "review", ["done", "review"])
        .entry("review")
        .finish("done")
        .compile()
    )
    engine.register(flow)
    rid = engine.run("review", S()).run_id
    seen = []
    for answer in ["no", "not yet", "ok"]:
        (wait,) = engine.waits(rid)
        seen.append(wait.wait_id)
        assert wait.step_id == "review"
        r = engine.resume_with(rid, answer, wait_id=wait.wait_id)
    assert seen == [f"{rid}:review:0", f"{rid}:review@2:0", f"{rid}:review@3:0"]
    assert r.status == "completed"
    assert (r.state.rounds, r.state.log) == (3, ["no", "not yet", "ok"])
    meta = engine.store.latest(rid).meta
    assert meta["visits"] == {"review": 2}
    assert meta.get("answers", {}) == {}


def test_a_revisited_step_sends_each_time_under_its_own_idempotency_key(engine):
    keys: list[str] = []

    def draft(s: S, ctx) -> dict:
        keys.append(ctx.idempotency_key)
        ctx.send("mail", {"round": s.rounds})
        return {"rounds": s.rounds + 1}

    flow = (
        FlowBuilder("drafts", S)
        .step("draft", draft)
        .step("done", lambda s: {})
        .route("draft", _again_until(3, "draft"), ["done", "draft"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("drafts", S())
    rid = r.run_id
    assert r.status == "completed", r.error
    assert keys == [f"{rid}:draft:0", f"{rid}:draft@2:0", f"{rid}:draft@3:0"]
    queued = {i.intent_id: i.payload for i in engine.store.intents(["pending"])}
    assert queued == {f"{k}:0": {"round": n} for n, k in enumerate(keys)}


def test_a_retry_within_a_visit_keeps_that_visit_s_key(engine):
    """The visit number is saved when the step is entered: a failed attempt
    of the second visit retries under the second visit's key, and its intent
    is queued once."""
    keys: list[str] = []
    failed = []

    def draft(s: S, ctx) -> dict:
        keys.append(ctx.idempotency_key)
        ctx.send("mail", {"round": s.rounds})
        if s.rounds == 1 and not failed:
            failed.append(True)
            raise RuntimeError("flaky")
        return {"rounds": s.rounds + 1}

    flow = (
        FlowBuilder("drafts", S, retry=1)
        .step("draft", draft)
        .step("done", lambda s: {})
        .route("draft", _again_until(2, "draft"), ["done", "draft"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("drafts", S())
    rid = r.run_id
    assert r.status == "completed", r.error
    assert keys == [f"{rid}:draft:0", f"{rid}:draft@2:0", f"{rid}:draft@2:0"]
    queued = sorted(i.intent_id for i in engine.store.intents(["pending"]))
    assert queued == [f"{rid}:draft:0:0", f"{rid}:draft@2:0:0"]


def test_a_revisited_step_starts_a_new_child_run_each_visit(engine):
    ran = _register_spawning_flow(engine)
    r = engine.run("parent", S())
    rid = r.run_id
    assert r.status == "completed", r.error
    assert ran == [1, 2]
    assert r.state.log == [f"{rid}:spawn=10", f"{rid}:spawn@2=20"]
    assert engine.store.get_run(f"{rid}:spawn@2").status == "completed"


def test_a_revisited_condition_decides_again_and_reruns_its_nested_steps(engine):
    decided: list[int] = []

    def pick(s: S) -> bool:
        decided.append(s.rounds)
        return s.rounds != 1  # true on the 1st and 3rd visits, false on the 2nd

    flow = (
        FlowBuilder("cond", S)
        .condition("check", pick, [("mark", lambda s: {"log": [*s.log, f"mark{s.rounds}"]})])
        .step("count", lambda s: {"rounds": s.rounds + 1})
        .step("done", lambda s: {})
        .edge("check", "count")
        .route("count", lambda s: "done" if s.rounds >= 3 else "check", ["done", "check"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("cond", S())
    assert r.status == "completed", r.error
    assert decided == [0, 1, 2]
    assert r.state.log == ["mark0", "mark2"]
    assert engine.store.latest(r.run_id).steps["mark"].status == "completed"


def test_a_revisited_loop_keys_its_iterations_by_visit(engine):
    keys: list[str] = []

    class L(BaseModel):
        i: int = 0
        rounds: int = 0

    def body(s: L, ctx) -> dict:
        keys.append(ctx.idempotency_key)
        ctx.send("mail", {"i": s.i})
        return {"i": s.i + 1}

    flow = (
        FlowBuilder("loops", L)
        .loop("work", body, until=lambda s: s.i >= 2 * (s.rounds + 1), max_iterations=5)
        .step("count", lambda s: {"rounds": s.rounds + 1})
        .step("done", lambda s: {})
        .edge("work", "count")
        .route("count", lambda s: "done" if s.rounds >= 2 else "work", ["done", "work"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("loops", L())
    rid = r.run_id
    assert r.status == "completed", r.error
    assert keys == [f"{rid}:work:1", f"{rid}:work:2", f"{rid}:work@2:1", f"{rid}:work@2:2"]
    queued = sorted(i.intent_id for i in engine.store.intents(["pending"]))
    assert queued == sorted(f"{k}:0" for k in keys)


def test_a_revisited_parallel_step_asks_its_branches_under_new_wait_ids(engine):
    def a(s: S, ctx) -> dict:
        return {"verdict": ctx.interrupt("a?")}

    def b(s: S) -> dict:
        return {"log": [*s.log, "b"]}

    flow = (
        FlowBuilder("fan", S)
        .parallel("fan", {"a": a, "b": b})
        .step("count", lambda s: {"rounds": s.rounds + 1})
        .step("done", lambda s: {})
        .edge("fan", "count")
        .route("count", _again_until(2, "fan"), ["done", "fan"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    rid = engine.run("fan", S()).run_id
    asked = []
    for answer in ["first", "second"]:
        (wait,) = engine.waits(rid)
        asked.append(wait.wait_id)
        r = engine.resume_with(rid, answer, wait_id=wait.wait_id)
    assert asked == [f"{rid}:fan/a:0", f"{rid}:fan/a@2:0"]
    assert r.status == "completed", r.error
    assert (r.state.verdict, r.state.rounds, r.state.log) == ("second", 2, ["b", "b"])


def test_an_error_route_back_to_a_step_is_a_new_visit(engine):
    keys: list[str] = []

    class E(BaseModel):
        tries: int = 0
        error: str = ""

    def fetch(s: E, ctx) -> dict:
        keys.append(ctx.idempotency_key)
        ctx.send("audit", {"try": s.tries})
        return {"tries": s.tries + 1}

    def check(s: E) -> dict:
        if s.tries < 2:
            raise ValueError("not enough")
        return {}

    flow = (
        FlowBuilder("errs", E)
        .step("fetch", fetch)
        .step("check", check, on_error="route", error_route="fetch", error_field="error")
        .chain()
        .compile()
    )
    engine.register(flow)
    r = engine.run("errs", E())
    rid = r.run_id
    assert r.status == "completed", r.error
    assert keys == [f"{rid}:fetch:0", f"{rid}:fetch@2:0"]
    assert engine.store.latest(rid).meta["visits"] == {"fetch": 1, "check": 1}


@pytest.mark.parametrize("bad", ["a@2", "@"])
def test_compile_refuses_at_signs_in_step_ids_and_branch_names(bad):
    with pytest.raises(FlowDefinitionError, match="'@'"):
        FlowBuilder("f", S).step(bad, lambda s: {}).compile()
    with pytest.raises(FlowDefinitionError, match="'@'"):
        FlowBuilder("f", S).parallel("p", {bad: lambda s: {}}).compile()


WORKER = Path(__file__).resolve().parent / "flow_worker.py"


def test_a_visit_killed_mid_step_runs_again_under_the_same_key(db_path, tmp_path):
    """SIGKILL in the second visit of ``draft``, after it queued its mail:
    nothing of that attempt was saved, the checkpoint that entered the step
    holds the visit count, so the restarted process runs the second visit
    again under ``draft@2`` and every visit's mail is queued exactly once."""
    log = tmp_path / "log"

    def worker(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(WORKER), str(db_path), str(log), "redraft", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    r = worker("--kill", "draft2")
    assert r.returncode == -signal.SIGKILL, r.stderr
    store = open_store(db_path)
    try:
        (run,) = store.list_runs()
        rid = run.run_id
        assert store.latest(rid).meta["visits"] == {"draft": 1}
        assert [i.intent_id for i in store.intents(["pending"])] == [f"{rid}:draft:0:0"]
    finally:
        store.close()
    r = worker()
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["recovered", "completed"]
    assert log.read_text().splitlines() == [
        f"draft1 {rid}:draft:0",
        f"draft2 {rid}:draft@2:0",
        f"draft2 {rid}:draft@2:0",
        f"draft3 {rid}:draft@3:0",
        "done",
    ]
    store = open_store(db_path)
    try:
        queued = {i.intent_id: i.payload for i in store.intents(["pending"])}
        assert queued == {
            f"{rid}:draft:0:0": {"visit": "draft1"},
            f"{rid}:draft@2:0:0": {"visit": "draft2"},
            f"{rid}:draft@3:0:0": {"visit": "draft3"},
        }
        assert store.get_run(rid).status == "completed"
    finally:
        store.close()


def test_a_revisited_await_step_asks_again_and_a_timeout_route_back_is_a_new_visit(engine):
    """Await steps number their waits per step across visits; a timeout route
    back to the step that timed out asks again under the next number."""
    flow = (
        FlowBuilder("ask", S)
        .await_input("ask", "verdict", "approve?", timeout_s=60, on_timeout="ask")
        .step("count", lambda s: {"rounds": s.rounds + 1, "log": [*s.log, s.verdict]})
        .step("done", lambda s: {})
        .edge("ask", "count")
        .route("count", _again_until(2, "ask"), ["done", "ask"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    rid = engine.run("ask", S()).run_id
    (wait,) = engine.waits(rid)
    assert wait.wait_id == f"{rid}:ask:0"
    engine.resume_with(rid, "first", wait_id=wait.wait_id)
    (wait,) = engine.waits(rid)
    assert wait.wait_id == f"{rid}:ask:1"
    engine.clock.advance(61)
    assert engine.wake(rid).status == "waiting"
    (wait,) = engine.waits(rid)
    assert wait.wait_id == f"{rid}:ask:2"
    r = engine.resume_with(rid, "second", wait_id=wait.wait_id)
    assert r.status == "completed", r.error
    assert r.state.log == ["first", "second"]
    assert engine.store.latest(rid).meta["visits"] == {"ask": 2, "count": 1}


def test_a_replay_of_a_later_visit_reattaches_to_that_visit_s_child(engine):
    """A replay from the checkpoint that entered ``spawn`` the second time
    keeps the visit count, so the re-executed visit reattaches to the child
    that visit started (``<run>:spawn@2``), not the first visit's."""
    ran = _register_spawning_flow(engine)
    src = engine.run("parent", S()).run_id
    assert ran == [1, 2]
    entered = next(
        info.revision
        for info in engine.history(src)
        if engine.store.get_checkpoint(src, info.revision).meta.get("visits") == {"spawn": 1}
    )
    r = engine.replay(f"{src}:{entered}")
    assert r.status == "completed", r.error
    assert ran == [1, 2]  # reattached: no child ran again
    assert r.state.log == [f"{src}:spawn=10", f"{src}:spawn@2=20"]
    assert engine.store.latest(r.run_id).meta["visits"] == {"spawn": 1}
