"""The run driver's edges (kill tests for mutants of ``flow/driver.py``): how
a drive starts and ends (events, the engine's record of what it executes,
deadlines, cancellation, max_steps, pruning), what a driver loaded from a
checkpoint carries over (progress, error, context, a checkpoint that does not
decode).

Every run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import CheckpointDecodeError
from desktop_app.flow import Engine, EventBus, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.flow.events import RunFinished, RunStarted
from desktop_app.store.sqlite import open_store

T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0
    note: str = ""
    error: str = ""


class Fatal(Exception):
    retryable = False


class Env:
    def __init__(self, db_path: Path) -> None:
        self.store = open_store(db_path)
        self.clock = ManualClock(T0)
        self.events: list[Any] = []
        bus = EventBus()
        bus.subscribe(self.events.append)
        self.engine = Engine(self.store, clock=self.clock, events=bus, group_commit=False)


@pytest.fixture
def env(db_path: Path):
    e = Env(db_path)
    yield e
    e.store.close()


def add(k: int):
    return lambda s: {"n": s.n + k}


# -- starting and ending a drive ---------------------------------------------


def test_a_drive_is_announced_tracked_and_finished(env):
    inside: dict[str, Any] = {}

    def work(s: S, ctx) -> dict:
        inside["active"] = ctx.run_id in env.engine.active
        return {"n": 1}

    env.engine.register(FlowBuilder("one", S).step("work", work).compile())
    r = env.engine.run("one", S())
    assert r.status == "completed" and inside == {"active": True}
    assert r.run_id not in env.engine.active  # no longer executing: its lease is not renewed
    assert r.run_id not in env.engine._cancel  # nor its cancel flag kept
    ends = [e for e in env.events if isinstance(e, (RunStarted, RunFinished))]
    assert ends == [RunStarted(r.run_id, "one"), RunFinished(r.run_id, "completed", None)]

    env.events.clear()
    env.engine.register(FlowBuilder("bad", S).step("work", lambda s: 1 / 0).compile())
    r = env.engine.run("bad", S())
    assert r.status == "failed"
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "failed", r.error)
    assert "ZeroDivisionError" in r.error


def test_a_run_past_its_deadline_ends_timed_out_and_says_so(env):
    def slow(s: S) -> dict:
        env.clock.advance(11.0)
        return {"n": 1}

    env.engine.register(
        FlowBuilder("dl", S, deadline_s=10.0).step("a", slow).step("b", add(1)).chain().compile()
    )
    r = env.engine.run("dl", S())
    assert r.status == "timed_out" and r.state.n == 1
    assert r.error == f"run deadline passed ({T0 + 10.0:.3f})"
    assert r.revision == env.store.get_run(r.run_id).revision
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "timed_out", r.error)


def test_a_run_canceled_by_its_step_reports_the_stored_cancel(env):
    def cancels(s: S, ctx) -> dict:
        env.engine.cancel(ctx.run_id, "stop it")
        return {"n": 1}

    env.engine.register(FlowBuilder("c", S).step("a", cancels).step("b", add(1)).chain().compile())
    r = env.engine.run("c", S())
    latest = env.store.latest(r.run_id)
    assert r.status == "canceled" and latest.status == "canceled"
    assert r.revision == latest.revision and r.error == latest.error
    assert "stop it" in (r.error or "")
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "canceled", latest.error)


def test_max_steps_allows_exactly_that_many_steps(env):
    ran: list[str] = []

    def mark(name: str):
        def fn(s: S) -> dict:
            ran.append(name)
            return {"n": s.n + 1}

        return fn

    env.engine.register(FlowBuilder("one", S, max_steps=1).step("a", mark("a")).compile())
    r = env.engine.run("one", S())
    assert r.status == "completed" and ran == ["a"]

    ran.clear()
    env.engine.register(
        FlowBuilder("three", S, max_steps=2)
        .step("a", mark("a"))
        .step("b", mark("b"))
        .step("c", mark("c"))
        .chain()
        .compile()
    )
    r = env.engine.run("three", S())
    assert r.status == "failed" and ran == ["a", "b"]
    assert r.error == "halted: max_steps 2 reached at step 'c'"


def test_a_finished_run_is_pruned_to_keep_last_n(env):
    env.engine.register(
        FlowBuilder("k", S, keep_last_n=4)
        .step("a", add(1))
        .step("b", add(1))
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("k", S())  # revisions 0..3: too few for a prune while it ran
    assert r.status == "completed" and r.revision == 3
    assert [i.revision for i in env.engine.history(r.run_id)] == [0, 1, 2, 3]

    env.engine.register(
        FlowBuilder("k2", S, keep_last_n=2)
        .step("a", add(1))
        .step("b", add(1))
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("k2", S())
    assert [i.revision for i in env.engine.history(r.run_id)] == [2, 3]


def test_a_long_run_is_pruned_every_keep_last_n_revisions(env):
    """The driver prunes once a run has 2n revisions, then every n: the
    history a step sees (all but its own checkpoint) follows that rule."""
    seen: list[tuple[int, list[int]]] = []

    def body(s: S, ctx) -> dict:
        revisions = [i.revision for i in env.engine.history(ctx.run_id)]
        seen.append((revisions[-1], revisions))
        return {"n": s.n + 1}

    env.engine.register(
        FlowBuilder("long", S, keep_last_n=3)
        .loop("count", body, until=lambda s: s.n >= 11)
        .compile()
    )
    r = env.engine.run("long", S())
    assert r.status == "completed" and r.revision == 12  # 11 iterations, then the step

    def expected(latest: int) -> list[int]:
        pruned_at = [v for v in range(1, latest + 1) if v >= 6 and v % 3 == 0]
        first = pruned_at[-1] - 2 if pruned_at else 0
        return list(range(first, latest + 1))

    assert [latest for latest, _ in seen] == list(range(11))
    assert [revisions for _, revisions in seen] == [expected(v) for v in range(11)]
    assert [i.revision for i in env.engine.history(r.run_id)] == [10, 11, 12]


def test_a_waiting_run_keeps_no_lease(env):
    env.engine.register(
        FlowBuilder("w", S).await_input("ask", "note").step("b", add(1)).chain().compile()
    )
    r = env.engine.run("w", S())
    assert r.status == "waiting"
    assert env.store.get_run(r.run_id).lease_owner is None


# -- what a loaded driver carries over ----------------------------------------


def test_a_resumed_run_keeps_its_progress_and_a_woken_paused_run_its_error(env):
    fixed = {"on": False}

    def first(s: S, ctx) -> dict:
        ctx.progress(1, 3)
        return {"n": 1}

    def second(s: S) -> dict:
        if not fixed["on"]:
            raise Fatal("needs a hand")
        return {"n": 2}

    env.engine.register(
        FlowBuilder("p", S)
        .step("a", first)
        .step("b", second, on_error="pause")
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("p", S())
    assert r.status == "waiting"
    assert r.error == "paused after step 'b' failed: Fatal: needs a hand"
    woken = env.engine.wake(r.run_id)  # a paused run is left to the operator
    assert (woken.status, woken.error) == ("waiting", r.error)
    fixed["on"] = True
    r = env.engine.resume(r.run_id)
    assert r.status == "completed" and r.state.n == 3
    later = [
        env.engine.checkpoint(f"{r.run_id}:{i.revision}") for i in env.engine.history(r.run_id)
    ]
    assert [cp.progress for cp in later[3:]] == [(1, 3)] * (len(later) - 3)


def test_a_step_gets_the_runs_context_and_a_store_to_query(env):
    seen: dict[str, Any] = {}

    def work(s: S, ctx) -> dict:
        seen["user"] = ctx.context.user_id
        seen["run"] = ctx.context.run_id
        seen["status"] = ctx.query(
            lambda tx: tx.fetchone("SELECT status FROM runs WHERE run_id=?", (ctx.run_id,))[0]
        )
        return {}

    env.engine.register(FlowBuilder("ctx", S).step("work", work).compile())
    r = env.engine.run("ctx", S(), context=ExecutionContext(user_id="u-7"))
    assert r.status == "completed", r.error
    assert seen == {"user": "u-7", "run": r.run_id, "status": "running"}


def test_resuming_a_checkpoint_that_does_not_decode_names_run_and_revision(db_path):
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock(T0))
    flow = FlowBuilder("d", S).step("a", add(1)).step("b", lambda s: 1 / 0).chain().compile()
    engine.register(flow)
    r = engine.run("d", S())
    assert r.status == "failed"
    store.close()
    with sqlite3.connect(db_path) as conn:  # the file is closed: edit its latest row
        conn.execute(
            'UPDATE checkpoints SET state=\'{"set": {"n": "not a number"}}\', checksum=NULL '
            "WHERE run_id=? AND revision=?",
            (r.run_id, r.revision),
        )
    conn.close()
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[flow], clock=ManualClock(T0))
        with pytest.raises(CheckpointDecodeError) as info:
            engine.resume(r.run_id)
        assert (info.value.run_id, info.value.revision) == (r.run_id, r.revision)
    finally:
        store.close()
