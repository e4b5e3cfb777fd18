"""What a user sees of one step's run (kill tests for mutants of
``RunDriver.attempt``, ``invoke`` and ``complete`` in ``flow/driver.py``):

* a cancel that lands while a failed step waits out its retry backoff ends
  the run then, not once the backoff is over (``attempt`` passes the run's
  cancel event to the clock's sleep);
* a step that changes its state in place fails with an error that names
  the step (``invoke`` hands the step id to the state check);
* a step entered again by a route records when that visit started
  (``complete`` enters it at the completion's time), and each step's
  checkpoint is dated when the step completed (``complete`` hands that
  time to the save, which also starts the run's lease from it).

Every run uses a real SQLite file in ``tmp_path``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock, SystemClock
from desktop_app.flow.results import RunResult
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0
HOUR = 3600.0


class S(BaseModel):
    rounds: int = 0
    items: list[str] = []


def test_a_cancel_during_a_retry_backoff_ends_the_run_without_waiting_it_out(db_path: Path):
    """The step fails once and its retry is an hour away (on the wall
    clock); the user cancels the run as soon as the failed attempt is
    saved. The run ends ``canceled`` then: the driver's wait for the retry
    is woken by the cancel, and the step is never run again."""
    ran: list[str] = []

    def flaky(s: S, ctx) -> dict:
        ran.append(ctx.run_id)
        raise RuntimeError("the mail server is down")

    hour = Backoff(initial_s=HOUR, max_s=HOUR, jitter_s=0.0)
    flow = (
        FlowBuilder("flaky", S, retry=RetryPolicy(retries=1, backoff=hour))
        .step("send", flaky)
        .compile()
    )
    store = open_store(db_path)
    engine = Engine(store, clock=SystemClock(), group_commit=False)
    engine.register(flow)
    results: list[RunResult] = []
    driver = threading.Thread(
        target=lambda: results.append(engine.run("flaky", S(), run_id="r1")), daemon=True
    )
    driver.start()
    # the failed attempt is saved with its retry an hour away: the driver waits
    for _ in range(6000):
        rec = store.latest("r1").steps.get("send") if ran else None
        if rec is not None and rec.next_retry_at is not None:
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the failed attempt's retry was never scheduled")
    assert rec.next_retry_at - time.time() > HOUR / 2  # the wait ahead is long
    engine.cancel("r1", "the user gave up on this mail")
    driver.join(120)  # a bound, not a measure: unwoken, the driver sleeps an hour
    assert not driver.is_alive(), "the cancel did not end the run's wait for its retry"
    (r,) = results
    assert r.status == "canceled"
    assert "the user gave up on this mail" in (r.error or "")
    assert ran == ["r1"]  # the retry never ran
    assert store.latest("r1").status == "canceled"
    store.close()


def test_a_step_that_changes_its_state_in_place_fails_naming_the_step(db_path: Path):
    """A step (with a timeout: the general path, ``invoke``) that appends
    to its state's list instead of returning a new one fails, and the error
    the user reads names that step and the field."""

    def add(s: S) -> dict:
        s.items.append("x")  # the mistake: in place
        return {"rounds": 1}

    flow = FlowBuilder("inplace", S).step("add_item", add, timeout_s=30).compile()
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock(T0), group_commit=False)
    engine.register(flow)
    r = engine.run("inplace", S())
    assert r.status == "failed"
    assert "step 'add_item' changed state field 'items' in place" in (r.error or "")
    latest = store.latest(r.run_id)
    assert latest.status == "failed"
    assert latest.state["items"] == []  # nothing of the failed attempt stored
    store.close()


def test_a_revisited_step_records_when_each_visit_started(db_path: Path):
    """A route back to the step makes a new visit; its step record starts
    at the time the previous visit completed (each visit takes a minute on
    the injected clock), so the run's history shows when the last visit
    started and ended, not a visit without a start."""
    clock = ManualClock(T0)

    def draft(s: S) -> dict:
        clock.advance(60)
        return {"rounds": s.rounds + 1}

    flow = (
        FlowBuilder("drafts", S)
        .step("draft", draft)
        .step("done", lambda s: {})
        .route("draft", lambda s: "done" if s.rounds >= 3 else "draft", ["done", "draft"])
        .finish("done")
        .compile()
    )
    store = open_store(db_path)
    engine = Engine(store, clock=clock, group_commit=False)
    engine.register(flow)
    r = engine.run("drafts", S())
    assert r.status == "completed", r.error
    rec = store.latest(r.run_id).steps["draft"]
    # the third visit: entered when the second completed (T0 + 120), done a minute later
    assert (rec.status, rec.started_at, rec.finished_at) == ("completed", T0 + 120, T0 + 180)
    # and the checkpoint that entered the second visit already said when it started
    entered = [
        cp.steps["draft"]
        for info in store.history(r.run_id)
        if (cp := store.get_checkpoint(r.run_id, info.revision)).state["rounds"] == 1
        and cp.steps["draft"].status == "in_progress"
    ]
    assert [(rec.started_at, rec.finished_at) for rec in entered] == [(T0 + 60, None)]
    # each step's checkpoint is dated when the step completed: the history
    # the user reads moves with the clock (created, three visits, done)
    times = [info.created_at for info in sorted(store.history(r.run_id), key=lambda i: i.revision)]
    assert times == [T0, T0 + 60, T0 + 120, T0 + 180, T0 + 180]
    store.close()
