"""What entering a step again, forgetting answers and a lease lost before the
first save leave behind in the run driver (kill tests for mutants of
``flow/driver.py``): a revisited condition's nested steps marked skipped in
the checkpoint that enters it, the decisions of the other conditions kept, a
condition revisited before any condition decided, the answers of a step whose
id holds ``:`` forgotten when it completes, and the defaults a lost lease's
error reports for an unnamed holder and a lease ending at the epoch.

Runs use a real SQLite file, and the in-memory store where a step record's own
step id and status are the point (it keeps records exactly as given), with the
injected clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.records import Lease, StepRecord
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0


class S(BaseModel):
    rounds: int = 0
    ready: bool = False
    log: list[str] = []
    error: str = ""
    verdict: str = ""


@pytest.fixture(params=["sqlite", "memory"])
def engine(request, db_path: Path):
    store = open_store(db_path) if request.param == "sqlite" else InMemoryCheckpointStore()
    yield Engine(store, clock=ManualClock(T0), group_commit=False)
    store.close()


def _saved(engine: Engine, run_id: str) -> list[Any]:
    """Every checkpoint of the run, oldest first."""
    return [engine.checkpoint(f"{run_id}:{i.revision}") for i in engine.history(run_id)]


def test_a_condition_true_on_both_visits_reruns_its_nested_steps(engine):
    """Entering a condition again marks its nested steps that ran ``skipped``
    (saved with the checkpoint that enters it), so a second true decision
    runs them again; the other conditions' decisions stay recorded."""

    def mark(s: S) -> dict:
        return {"log": [*s.log, f"mark{s.rounds}"]}

    flow = (
        FlowBuilder("cond", S)
        .condition("first", lambda s: True, [("m1", lambda s: {"log": [*s.log, "m1"]})])
        .condition("check", lambda s: True, [("mark", mark)])
        .step("count", lambda s: {"rounds": s.rounds + 1})
        .step("done", lambda s: {})
        .edge("first", "check")
        .edge("check", "count")
        .route("count", lambda s: "done" if s.rounds >= 2 else "check", ["done", "check"])
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("cond", S())
    assert r.status == "completed", r.error
    assert r.state.log == ["m1", "mark0", "mark1"]
    rid = r.run_id
    entered = next(  # the checkpoint of count that entered check the second time
        cp
        for cp in _saved(engine, rid)
        if cp.step_id == "count" and cp.meta.get("visits", {}).get("check") == 1
    )
    assert entered.frontier[0] == "check"
    assert entered.steps["mark"] == StepRecord("mark", "skipped")
    assert entered.steps["m1"].status == "completed"  # not nested in the revisited step
    meta = engine.store.latest(rid).meta
    assert meta["conditions"] == {"first": True, "check": True}
    assert meta["visits"] == {"check": 1, "count": 1}


def test_a_condition_that_failed_before_any_decision_is_entered_again(engine):
    """A condition whose predicate raised routes away before any condition
    decided (no ``meta["conditions"]`` yet); entering it again decides it."""

    def pick(s: S) -> bool:
        if not s.ready:
            raise ValueError("not ready")
        return True

    flow = (
        FlowBuilder("late", S)
        .condition(
            "check",
            pick,
            [("mark", lambda s: {"log": [*s.log, "mark"]})],
            on_error="route",
            error_route="fix",
            error_field="error",
        )
        .step("fix", lambda s: {"ready": True})
        .step("done", lambda s: {})
        .edge("fix", "check")
        .edge("check", "done")
        .finish("done")
        .compile()
    )
    engine.register(flow)
    r = engine.run("late", S())
    assert r.status == "completed", r.error
    assert r.state.log == ["mark"]
    assert r.state.error == "ValueError: not ready"
    meta = engine.store.latest(r.run_id).meta
    assert meta["conditions"] == {"check": True}
    assert meta["visits"] == {"check": 1}


def test_a_step_whose_id_holds_a_colon_forgets_its_answers(engine):
    """Wait ids are ``<run>:<step>:<n>``: the step id is everything before the
    last ``:``, so a step ``a:b`` drops its own answers when it completes."""

    def review(s: S, ctx) -> dict:
        return {"verdict": ctx.interrupt("approve?")}

    flow = FlowBuilder("colon", S).step("a:b", review).step("done", lambda s: {}).chain().compile()
    engine.register(flow)
    rid = engine.run("colon", S()).run_id
    (wait,) = engine.waits(rid)
    assert wait.wait_id == f"{rid}:a:b:0"
    r = engine.resume_with(rid, "ok", wait_id=wait.wait_id)
    assert r.status == "completed", r.error
    assert r.state.verdict == "ok"
    assert engine.store.latest(rid).meta.get("answers", {}) == {}


def test_a_lost_lease_with_an_unnamed_holder_ending_at_the_epoch(db_path: Path):
    """Taken over before its first save by a holder with an empty owner whose
    lease ends at 0.0: the error names the holder ``?`` and reports 0.0."""
    clock = ManualClock(-40.0)  # before the epoch: a lease ending at 0.0 still runs
    store_a, store_b = open_store(db_path), open_store(db_path)

    def stalls(s: S) -> dict:
        clock.advance(31)  # past A's lease (it ended at -10.0)
        (run,) = store_b.list_runs()
        store_b.claim(run.run_id, Lease("", 0.0, clock.now(), takes_over="hosta:1:a"), clock.now())
        return {"rounds": 1}

    flow = FlowBuilder("one", S).step("a", stalls).compile()
    a = Engine(store_a, flows=[flow], clock=clock, owner="hosta:1:a", lease_ttl_s=30)
    try:
        with pytest.raises(RunLeasedError) as info:
            a.run("one", S())
        (run,) = store_b.list_runs()
        assert (run.lease_owner, run.lease_expires_at) == ("", 0.0)
        assert (info.value.run_id, info.value.owner) == (run.run_id, "?")
        assert info.value.expires_at == 0.0
        assert run.revision == 0  # A's step result was not saved
    finally:
        store_a.close()
        store_b.close()
