"""Resuming a run (kill tests for mutants of ``flow/driver.py``'s
``prepare_resume``, ``run_head``, ``restore_stored_state``, ``lease_lost``,
``new_context`` and ``__init__``): what a resume records for the timeline
(``meta["resumed"]``), the attempt it starts, the state a retry starts from,
and the error of a driver whose lease is lost.

Every run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.app.widgets.run_tables import resumed_at
from desktop_app.errors import LeaseLostError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0
    seen: list[int] = []


class Fatal(Exception):
    retryable = False


class Env:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.store = open_store(db_path)
        self.clock = ManualClock(T0)
        self.engine = self.new_engine()

    def new_engine(self) -> Engine:
        """Another engine on the same file, as a new process would open it."""
        return Engine(self.store, clock=self.clock, group_commit=False)


@pytest.fixture
def env(db_path: Path):
    e = Env(db_path)
    yield e
    e.store.close()


def add(k: int):
    return lambda s: {"n": s.n + k}


# -- what a resume records for the timeline ----------------------------------


def test_a_paused_run_resumed_records_paused_and_forgets_the_pause(env):
    fails = {"left": 1}

    def flaky(s: S) -> dict:
        if fails["left"]:
            fails["left"] -= 1
            raise Fatal("the disk was full")
        return {"n": s.n + 10}

    env.engine.register(
        FlowBuilder("p", S).step("a", add(1)).step("b", flaky, on_error="pause").chain().compile()
    )
    r = env.engine.run("p", S())
    assert r.status == "waiting"
    paused = env.store.latest(r.run_id)
    assert "pause" in paused.meta and "resumed" not in paused.meta
    again = env.engine.resume(r.run_id)
    assert (again.status, again.state.n) == ("completed", 11)
    resumed = env.store.get_checkpoint(r.run_id, paused.revision + 1)
    assert resumed.status == "running"
    assert resumed.meta["resumed"] == [[paused.revision + 1, "paused"]]
    assert "pause" not in resumed.meta  # the operator's pause is over
    assert resumed.steps["b"].attempts == 1  # a fresh attempt budget
    last = env.store.latest(r.run_id)
    assert "pause" not in last.meta
    assert resumed_at(last.meta) == {paused.revision + 1: "paused"}


def test_a_failed_run_resumed_twice_records_both_stops(env):
    fails = {"left": 2}

    def flaky(s: S) -> dict:
        if fails["left"]:
            fails["left"] -= 1
            raise Fatal(f"try again ({fails['left']})")
        return {"n": s.n + 10}

    env.engine.register(FlowBuilder("f", S).step("a", add(1)).step("b", flaky).chain().compile())
    r = env.engine.run("f", S())
    assert r.status == "failed"
    first = env.store.latest(r.run_id).revision
    second_try = env.engine.resume(r.run_id)
    assert second_try.status == "failed"
    second = env.store.latest(r.run_id).revision
    done = env.engine.resume(r.run_id)
    assert (done.status, done.state.n) == ("completed", 11)
    last = env.store.latest(r.run_id)
    assert last.meta["resumed"] == [[first + 1, "failed"], [second + 1, "failed"]]
    assert resumed_at(last.meta) == {first + 1: "failed", second + 1: "failed"}
    assert last.error is None


def test_a_run_stopped_while_running_resumed_records_interrupted(env):
    def first(s: S) -> dict:
        env.engine.shutdown_event.set()  # the process lets go before the next step
        return {"n": 1}

    env.engine.register(FlowBuilder("i", S).step("a", first).step("b", add(10)).chain().compile())
    r = env.engine.run("i", S())
    assert r.status == "running"
    stopped = env.store.latest(r.run_id)
    later = env.new_engine()
    later.register(FlowBuilder("i", S).step("a", first).step("b", add(10)).chain().compile())
    done = later.resume(r.run_id)
    assert (done.status, done.state.n) == ("completed", 11)
    last = env.store.latest(r.run_id)
    assert last.meta["resumed"] == [[stopped.revision + 1, "running"]]
    assert resumed_at(last.meta) == {stopped.revision + 1: "interrupted"}


def test_a_pending_run_resumed_records_no_stop(env):
    env.engine.register(FlowBuilder("q", S).step("a", add(1)).step("b", add(10)).chain().compile())
    rid = env.engine.start("q", S())
    assert env.store.latest(rid).status == "pending"
    done = env.engine.resume(rid)
    assert (done.status, done.state.n) == ("completed", 11)
    assert "resumed" not in env.store.latest(rid).meta  # it never ran, so never stopped


# -- a lost lease ------------------------------------------------------------


def test_a_driver_that_lost_its_lease_tells_its_step_and_says_so_word_for_word(env):
    seen: list[bool] = []

    def work(s: S, ctx) -> dict:
        seen.append(ctx.cancelled)
        env.engine.lost.add(ctx.run_id)  # the heartbeat could not renew the lease
        seen.append(ctx.cancelled)  # a long step checks it and returns early
        return {"n": 1}

    env.engine.register(FlowBuilder("l", S).step("a", work).step("b", add(10)).chain().compile())
    with pytest.raises(LeaseLostError) as err:
        env.engine.run("l", S(), run_id="r-lost")
    assert str(err.value) == (
        f"run r-lost: this process ({env.engine.owner}) can no longer prove it "
        "holds the run's lease (another process took it over, or the lease could not "
        "be renewed in time); it stops before committing anything more. The run stays "
        "resumable: its current step runs again wherever it is resumed."
    )
    assert seen == [False, True]
    assert env.store.latest("r-lost").state["n"] == 0  # the step's save was refused


# -- the attempt a resume starts ----------------------------------------------

NO_WAIT = Backoff(initial_s=0.0, max_s=0.0, jitter_s=0.0)


def test_a_resume_after_a_crash_mid_attempt_counts_it_and_keeps_the_last_error(env):
    attempts: list[int] = []

    def shaky(s: S, ctx) -> dict:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("the server said 503")
        if ctx.attempt == 2:
            raise KeyboardInterrupt  # the process dies mid-attempt: nothing is saved
        return {"n": s.n + 10}

    env.engine.register(
        FlowBuilder("c", S, retry=RetryPolicy(retries=3, backoff=NO_WAIT))
        .step("a", add(1))
        .step("b", shaky)
        .chain()
        .compile()
    )
    with pytest.raises(KeyboardInterrupt):
        env.engine.run("c", S(), run_id="r-crash")
    crashed = env.store.latest("r-crash")
    assert crashed.status == "running"
    rec = crashed.steps["b"]
    assert (rec.status, rec.attempts, rec.next_retry_at) == ("in_progress", 2, None)
    env.clock.advance(60.0)
    done = env.engine.resume("r-crash")
    assert (done.status, done.state.n) == ("completed", 11)
    assert attempts == [1, 2, 3]  # the crashed attempt counts: this is the third
    resumed = env.store.get_checkpoint("r-crash", crashed.revision + 1)
    rec = resumed.steps["b"]
    assert (rec.status, rec.attempts, rec.started_at) == ("in_progress", 3, T0 + 60.0)
    assert (rec.error, rec.error_type) == ("ValueError: the server said 503", "ValueError")
    assert resumed.frontier == ("b",) and resumed.error is None
    assert env.store.latest("r-crash").steps["b"].attempts == 3


def test_a_failed_loop_resumed_goes_on_at_the_iteration_that_failed(env):
    """The step record counts finished iterations; ``ctx.iteration`` is
    the running one (1-based)."""
    ran: list[int] = []
    fails = {"left": 1}

    def body(s: S, ctx) -> dict:
        ran.append(ctx.iteration)
        if ctx.iteration == 3 and fails["left"]:
            fails["left"] -= 1
            raise Fatal("iteration 3 broke")
        return {"n": s.n + 1, "seen": [*s.seen, ctx.iteration]}

    env.engine.register(
        FlowBuilder("loop", S).loop("each", body, until=lambda s: s.n >= 4).compile()
    )
    r = env.engine.run("loop", S(), run_id="r-loop")
    assert r.status == "failed"
    failed = env.store.latest("r-loop")
    assert (failed.steps["each"].status, failed.steps["each"].iteration) == ("failed", 2)
    done = env.engine.resume("r-loop")
    assert (done.status, done.state.n, done.state.seen) == ("completed", 4, [1, 2, 3, 4])
    assert ran == [1, 2, 3, 3, 4]  # iterations 1 and 2 are not run again
    resumed = env.store.get_checkpoint("r-loop", failed.revision + 1).steps["each"]
    assert (resumed.status, resumed.attempts, resumed.iteration) == ("in_progress", 1, 2)
    assert resumed.started_at == T0


# -- a checkpoint the store refuses (S84) --------------------------------------

NOTES = "CREATE TABLE notes(name TEXT UNIQUE)"


def _note(name: str, ran: list[str]):
    def insert(s: S, ctx) -> dict:
        ran.append(name)
        if len(ran) > 1:  # a second run of the step ends the drive at once
            raise Fatal("the step ran again")
        ctx.write(lambda tx: tx.execute("INSERT INTO notes(name) VALUES (?)", (name,)))
        return {"n": s.n + 100, "seen": [*s.seen, 7]}  # forgotten: nothing of it is saved

    return insert


@pytest.mark.scenario("S84")
def test_a_step_whose_write_breaks_a_unique_fails_once_from_the_stored_state(env):
    env.store.write(lambda tx: tx.execute(NOTES))
    env.store.write(lambda tx: tx.execute("INSERT INTO notes(name) VALUES ('taken')"))
    ran: list[str] = []
    env.engine.register(
        FlowBuilder("w", S, retry=RetryPolicy(retries=3, backoff=NO_WAIT))
        .step("a", add(1))
        .step("b", _note("taken", ran))
        .step("c", add(10))
        .chain()
        .compile()
    )
    r = env.engine.run("w", S(), run_id="r-dup")
    assert (r.status, r.state.n, r.state.seen) == ("failed", 1, [])  # the state as stored
    assert ran == ["taken"]  # not retried, not run again
    last = env.store.latest("r-dup")
    rec = last.steps["b"]
    assert (rec.status, rec.attempts, rec.error_type) == ("failed", 1, "DomainWriteError")
    assert "'notes'" in (rec.error or "") and last.state == {"n": 1, "seen": []}
    assert last.error is not None and "step 'b'" in last.error and "DomainWriteError" in last.error
    assert "c" not in last.steps  # the run stopped at b


def test_a_refused_write_with_an_error_route_goes_on_there_with_the_message(env):
    env.store.write(lambda tx: tx.execute(NOTES))
    env.store.write(lambda tx: tx.execute("INSERT INTO notes(name) VALUES ('taken')"))
    ran: list[str] = []

    class E(BaseModel):
        n: int = 0
        seen: list[int] = []
        why: str = ""

    env.engine.register(
        FlowBuilder("wr", E)
        .step("a", add(1))
        .step("b", _note("taken", ran), on_error="route", error_route="h", error_field="why")
        .step("h", lambda s: {"n": s.n + 10})
        .edge("a", "b")
        .finish("b", "h")
        .compile()
    )
    r = env.engine.run("wr", E(), run_id="r-route")
    assert (r.status, r.state.n, r.state.seen) == ("completed", 11, [])
    assert r.state.why.startswith("DomainWriteError: ") and "'notes'" in r.state.why
    assert ran == ["taken"]
    steps = env.store.latest("r-route").steps
    assert (steps["b"].status, steps["b"].error_type) == ("failed", "DomainWriteError")
    assert steps["h"].status == "completed"
