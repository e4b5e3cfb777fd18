"""A run as the engine reads it before it drives it (kill tests for
``flow/run.py``): a question's choices and prompt digest leave the
checkpoint with its step, a run a live process holds is not taken over
(whatever its lease's clock says), and an answer that loses a race to a
cancel or a ``fail_run`` is told what happened, not that the question was
answered.

A real engine over a real SQLite file (``db_path``), a manual clock."""

from __future__ import annotations

import logging
import math
import os
import socket

import pytest
from pydantic import BaseModel

from desktop_app.errors import (
    RevisionConflictError,
    RunLeasedError,
    RunStateError,
    WaitAlreadyResolvedError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.records import Lease
from desktop_app.store.sqlite.store import open_store
from tests.hook_clock import racing_engines


class S(BaseModel):
    n: int = 0
    said: list[str] = []


def _asking_three_times() -> object:
    def ask(s: S, ctx) -> dict:
        word = ctx.interrupt(f"ship batch {s.n}?", choices=("yes", "no"))
        return {"n": s.n + 1, "said": [*s.said, word]}

    return (
        FlowBuilder("ask3", S)
        .step("ask", ask)
        .step("end", lambda s: {})
        .route("ask", lambda s: "ask" if s.n < 3 else "end", ["ask", "end"])
        .finish("end")
        .compile()
    )


def test_a_revisited_questions_choices_and_prompts_leave_the_checkpoint(db_path):
    """A step asks a yes/no question on each of three visits: once a visit
    completes, its question's choices and prompt digest are gone from the
    checkpoint (only the open question's stay), so a step revisited many
    times does not grow every later checkpoint of the run."""
    store = open_store(db_path)
    engine = Engine(store, flows=[_asking_three_times()], clock=ManualClock())
    try:
        rid = engine.run("ask3", S()).run_id
        seen: list[str] = []
        for visit in range(3):
            (wait,) = engine.waits(rid)
            wait_id = wait.wait_id
            assert wait_id not in seen  # each visit asks anew
            seen.append(wait_id)
            meta = store.latest(rid).meta
            assert meta.get("choices") == {wait_id: ["yes", "no"]}, visit
            assert meta.get("asked", {}) == {}, visit
            engine.resume_with(rid, "yes" if visit < 2 else "no", wait_id=wait_id)
        run = engine.status(rid)
        assert run.status == "completed", run.error
        assert engine.get(rid).said == ["yes", "yes", "no"]
        meta = store.latest(rid).meta
        assert (meta.get("answers"), meta.get("choices"), meta.get("asked")) == ({}, {}, {})
    finally:
        store.close()


def _counting() -> tuple[object, list[int]]:
    ran: list[int] = []
    flow = FlowBuilder("count", S).step("work", lambda s: ran.append(1) or {"n": 1}).compile()
    return flow, ran


def test_a_run_a_live_process_of_this_host_holds_is_not_taken_over_once_its_lease_expired(
    db_path,
):
    """The holder is a process of this host that still runs (this one, under
    another owner id); its lease expired by the clock a minute ago. Liveness
    beats clocks: resume refuses with RunLeasedError naming the holder, the
    step does not run, and the holder keeps the run."""
    flow, ran = _counting()
    store = open_store(db_path)
    clock = ManualClock()
    engine = Engine(store, flows=[flow], clock=clock)
    holder = f"{socket.gethostname()}:{os.getpid()}:feed01"
    try:
        rid = engine.start("count", S())
        expires = clock.now() - 60.0
        store.claim(rid, Lease(holder, expires), math.inf)
        with pytest.raises(RunLeasedError) as refused:
            engine.resume(rid)
        assert (refused.value.owner, refused.value.expires_at) == (holder, expires)
        assert ran == []
        row = store.get_run(rid)
        assert (row.status, row.lease_owner) == ("pending", holder)
    finally:
        store.close()


def test_a_run_another_hosts_live_lease_holds_is_refused_before_anything_runs(db_path, caplog):
    """The holder is on another host and its lease runs for another minute:
    resume refuses with RunLeasedError, the step does not run, the holder
    keeps the run, and the log never says this process took it over."""
    caplog.set_level(logging.INFO, logger="desktop_app")
    flow, ran = _counting()
    store = open_store(db_path)
    clock = ManualClock()
    engine = Engine(store, flows=[flow], clock=clock)
    holder = "elsewhere.example:4242:abc123"
    try:
        rid = engine.start("count", S())
        expires = clock.now() + 60.0
        store.claim(rid, Lease(holder, expires), math.inf)
        with pytest.raises(RunLeasedError) as refused:
            engine.resume(rid)
        assert (refused.value.owner, refused.value.expires_at) == (holder, expires)
        assert ran == []
        assert store.get_run(rid).lease_owner == holder
        said = [r.getMessage() for r in caplog.records]
        assert not [m for m in said if "takes it over" in m], said
    finally:
        store.close()


def _approval() -> object:
    def approve(s: S, ctx) -> dict:
        return {"said": [ctx.interrupt("ship it?", choices=("yes", "no"))]}

    return FlowBuilder("approve", S).step("approve", approve).chain().compile()


def test_an_answer_that_loses_the_race_to_a_cancel_says_the_run_was_canceled(db_path):
    """The CLI cancels the run between the app's read of the question and
    its save of the answer: the answer is refused with RunStateError saying
    the run was canceled a moment ago and nothing was answered (before, the
    driver's internal stop signal escaped); the run stays canceled."""
    with racing_engines(db_path, _approval) as (first, second, clock):
        rid = first.run("approve", S()).run_id
        clock.arm(lambda: first.cancel(rid, "changed my mind"))
        with pytest.raises(RunStateError) as lost:
            second.resume_with(rid, "yes")
        assert str(lost.value) == (
            f"run {rid} was canceled a moment ago by another process; nothing was answered"
        )
        run = first.status(rid)
        assert (run.status, run.error) == ("canceled", "changed my mind")
        assert first.get(rid).said == []


def test_an_answer_that_loses_the_race_to_fail_run_is_not_told_it_was_answered(db_path):
    """An operator fails the run between the app's read of the question and
    its save of the answer: the save conflicts and says another writer got
    there first (reload the run), not that the question "was answered a
    moment ago" (before, any question no longer pending counted as
    answered); the run stays failed and nothing ran."""
    with racing_engines(db_path, _approval) as (first, second, clock):
        rid = first.run("approve", S()).run_id
        clock.arm(lambda: first.fail_run(rid, "stuck"))
        with pytest.raises(RevisionConflictError) as lost:
            second.resume_with(rid, "yes")
        assert not isinstance(lost.value, WaitAlreadyResolvedError)
        assert str(lost.value).endswith(
            "another writer got there first. Reload the run and try again."
        )
        run = first.status(rid)
        assert (run.status, run.error) == ("failed", "stuck")
        assert first.get(rid).said == []
