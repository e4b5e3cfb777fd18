"""The multi-process :class:`~desktop_app.flow.worker.Worker`, driven in the
test's own process (so mutation testing maps these tests to worker.py).

Stores are real: SQLite files (``db_path``, poll only: SQLite has no
listener) and PostgreSQL databases (``pg_url``/``pg_store``) with the store's
real listener as the worker's wake source and liveness. Passes are run one
at a time with :meth:`Worker.run_pass` on a real thread pool; a pool shut
down with ``wait=True`` is the point where every run a pass started has
finished. Time comes from a :class:`ManualClock` (SQLite) or the database's
clock (:class:`ServerClock`, tested in test_server_clock.py); the fence cooldown
reads ``time`` from worker.py's module namespace, which the tests replace
with a fake one where they decide what time it is. Every blocking wait is
bounded by ``BOUND_S``, which only ever fails a test.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import DatabaseUnreachableError, SchemaMissingError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import RunFinished
from desktop_app.flow.worker import ServerClock, Worker
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

BOUND_S = 30.0  # upper bound on any blocking wait (shared, loaded CPUs)
OWNER = f"worker-a:{os.getpid()}:inproc"


class S(BaseModel):
    n: int = 0
    key: str = "k"
    got: Any = None


class Gate:
    """Step bodies that record each start and block until :attr:`open` is set."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.starts: list[tuple[str, str]] = []
        self.threads: list[str] = []
        self._cond = threading.Condition()

    def body(self, state: S, ctx: Any) -> dict[str, Any]:
        with self._cond:
            self.starts.append((ctx.run_id, ctx.step_id))
            self.threads.append(threading.current_thread().name)
            self._cond.notify_all()
        assert self.open.wait(BOUND_S), "the test never opened the gate"
        return {"n": state.n + 1}

    def wait_starts(self, n: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.starts) >= n, BOUND_S)
        assert ok, f"expected {n} step starts, saw {self.starts}"

    def started(self, run_id: str, step_id: str | None = None) -> int:
        with self._cond:
            return sum(
                1 for r, s in self.starts if r == run_id and (step_id is None or s == step_id)
            )


def two_steps(gate: Gate, name: str = "two") -> Any:
    return FlowBuilder(name, S).step("a", gate.body).step("b", gate.body).chain().compile()


def waiter(gate: Gate) -> Any:
    return (
        FlowBuilder("waiter", S)
        .wait_signal("wait", "go", lambda s: s.key, into="got")
        .step("after", gate.body)
        .chain()
        .compile()
    )


def sleeper(gate: Gate, seconds: float = 10.0) -> Any:
    return (
        FlowBuilder("sleeper", S).sleep("nap", seconds).step("after", gate.body).chain().compile()
    )


class CountingPool(ThreadPoolExecutor):
    """A real thread pool that counts what the worker submits to it."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads, thread_name_prefix="test-run")
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def one_pass(worker: Worker, threads: int = 4) -> CountingPool:
    """Run one pass on a fresh pool and wait until every run it started finished."""
    pool = CountingPool(threads)
    try:
        worker.run_pass(pool)
    finally:
        pool.shutdown(wait=True)
    return pool


@pytest.fixture
def manual() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sq(db_path: Path, manual: ManualClock) -> Iterator[Any]:
    """A SQLite store deciding leases on the test's manual clock."""
    store = open_store(db_path, clock=manual.now)
    yield store
    store.close()


def start_in_order(engine: Engine, clock: ManualClock, flow: str, n: int) -> list[str]:
    """``n`` runs created one second apart (claims take the oldest first)."""
    runs = []
    for _ in range(n):
        runs.append(engine.start(flow, {}))
        clock.advance(1.0)
    return runs


def lease_owner(store: Any, run_id: str) -> str | None:
    owner: str | None = store.get_run(run_id).lease_owner
    return owner


# -- what a pass claims (SQLite: claim_runnable) ------------------------------


def test_a_pass_claims_the_oldest_runs_up_to_concurrency_and_no_more(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    r1, r2, r3 = start_in_order(engine, manual, "two", 3)
    worker = Worker(engine, concurrency=2)
    pool = CountingPool(4)  # more threads than the worker may use
    try:
        worker.run_pass(pool)
        # claimed synchronously: the two oldest, leased to this worker; the third untouched
        assert [lease_owner(sq, r) for r in (r1, r2, r3)] == [OWNER, OWNER, None]
        gate.wait_starts(2)
        assert gate.started(r1, "a") == 1 and gate.started(r2, "a") == 1
        worker.run_pass(pool)  # both slots busy: claims nothing more
        assert lease_owner(sq, r3) is None
        assert pool.submitted == 2
        assert sq.get_run(r3).status == "pending"
        gate.open.set()
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert [sq.get_run(r).status for r in (r1, r2)] == ["completed", "completed"]
    one_pass(worker)  # the slots are free again: the third runs now
    assert sq.get_run(r3).status == "completed"
    assert sq.latest(r3).state["n"] == 2


def test_concurrency_below_one_means_one_run_at_a_time(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    r1, r2 = start_in_order(engine, manual, "two", 2)
    worker = Worker(engine, concurrency=0)
    assert worker.concurrency == 1
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        assert [lease_owner(sq, r) for r in (r1, r2)] == [OWNER, None]
        gate.wait_starts(1)
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert pool.submitted == 1
    assert [sq.get_run(r).status for r in (r1, r2)] == ["completed", "pending"]


def test_a_worker_runs_four_at_once_by_default(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    runs = start_in_order(engine, manual, "two", 5)
    pool = CountingPool(8)
    try:
        Worker(engine).run_pass(pool)
        assert [lease_owner(sq, r) for r in runs] == [OWNER] * 4 + [None]
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert pool.submitted == 4


def test_a_pass_wakes_at_most_fifty_waiting_runs(sq, manual):
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[sleeper(gate, seconds=1.0)], clock=manual, owner=OWNER)
    runs = [engine.run("sleeper", {}).run_id for _ in range(51)]
    manual.advance(1.0)
    pool = one_pass(Worker(engine, concurrency=100), threads=8)
    assert pool.submitted == 50
    statuses = [sq.get_run(r).status for r in runs]
    assert (statuses.count("completed"), statuses.count("waiting")) == (50, 1)


def test_a_finished_run_frees_its_slot_for_the_next_pass(sq, manual):
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    r1, r2 = start_in_order(engine, manual, "two", 2)
    worker = Worker(engine, concurrency=1)
    one_pass(worker)
    assert [sq.get_run(r).status for r in (r1, r2)] == ["completed", "pending"]
    one_pass(worker)
    assert sq.get_run(r2).status == "completed"


def test_a_run_the_worker_is_executing_is_never_submitted_again(sq, manual):
    """SQLite's claim hands back runs already leased to the claimer, so the
    second pass receives the executing run again: it must be skipped (not
    submitted a second time) while the next claimed run still starts."""
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    r1 = engine.start("two", {})
    worker = Worker(engine, concurrency=3)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
        manual.advance(1.0)
        r2 = engine.start("two", {})
        worker.run_pass(pool)  # claims [r1 (ours, executing), r2]
        gate.wait_starts(2)
        assert gate.started(r2, "a") == 1
        assert pool.submitted == 2
        assert gate.started(r1) == 1
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert [sq.get_run(r).status for r in (r1, r2)] == ["completed", "completed"]
    assert gate.started(r1) == 2  # a, b: each step of r1 ran once


def test_a_pass_fills_every_free_slot_while_older_runs_of_its_own_execute(sq, manual):
    """SQLite's claim returns the runs this worker executes first (the oldest,
    leased to it): they must not use up the free slots."""
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    [r1] = start_in_order(engine, manual, "two", 1)
    worker = Worker(engine, concurrency=2)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
        r2, r3 = start_in_order(engine, manual, "two", 2)
        worker.run_pass(pool)
        assert [lease_owner(sq, r) for r in (r2, r3)] == [OWNER, None]
        gate.wait_starts(2)
        assert gate.started(r2, "a") == 1
        assert pool.submitted == 2
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert [sq.get_run(r).status for r in (r1, r2, r3)] == ["completed", "completed", "pending"]


def test_runs_of_another_version_or_an_unknown_flow_are_left_to_other_workers(sq, manual, caplog):
    """SQLite's claim matches flows by name only: a run of another version
    of a flow this worker has is handed back (lease released) instead of
    failing to resume on every pass, and never takes a slot from the runs
    this worker can execute; a flow it lacks is never claimed."""
    gate = Gate()
    gate.open.set()
    other_version = FlowBuilder("two", S).step("a", gate.body).compile()
    old = Engine(sq, flows=[other_version, sleeper(gate)], clock=manual)
    stale = start_in_order(old, manual, "two", 3)  # more than the free slots
    unknown = old.start("sleeper", {})
    manual.advance(1.0)
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    [fresh] = start_in_order(engine, manual, "two", 1)
    worker = Worker(engine, concurrency=1)
    with caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"):
        pool = one_pass(worker)
        assert pool.submitted == 1
        assert sq.get_run(fresh).status == "completed"
        assert one_pass(worker).submitted == 0  # again: nothing this worker can run
    for run_id in (*stale, unknown):
        assert sq.get_run(run_id).status == "pending"
        assert lease_owner(sq, run_id) is None
    assert [r for r in caplog.records if r.name == "desktop_app.flow.worker"] == []
    one_pass(Worker(old))  # a worker with that version runs them
    statuses = [sq.get_run(r).status for r in (*stale, unknown)]
    assert statuses == ["completed"] * 3 + ["waiting"]


# -- waking waiting runs --------------------------------------------------------


def test_a_pass_wakes_a_waiting_run_once_its_deadline_falls_due(sq, manual):
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[sleeper(gate)], clock=manual, owner=OWNER)
    run_id = engine.run("sleeper", {}).run_id
    assert sq.get_run(run_id).status == "waiting"
    worker = Worker(engine, concurrency=2)
    manual.advance(9.5)
    one_pass(worker)
    assert sq.get_run(run_id).status == "waiting"
    assert gate.started(run_id) == 0
    manual.advance(0.5)
    one_pass(worker)
    assert sq.get_run(run_id).status == "completed"
    assert gate.started(run_id, "after") == 1


def test_a_pass_wakes_runs_whose_signal_arrived_within_its_free_slots(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[waiter(gate)], clock=manual, owner=OWNER)
    runs = [engine.run("waiter", {"key": k}).run_id for k in ("k1", "k2", "k3")]
    app = Engine(sq, flows=[waiter(gate)], clock=manual, executes=False)
    app.signal("go", "k1", "one")
    app.signal("go", "k2", "two")  # k3 gets no signal
    worker = Worker(engine, concurrency=1)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    statuses = sorted(sq.get_run(r).status for r in runs[:2])
    assert statuses == ["completed", "waiting"]  # one slot: one woken this pass
    assert pool.submitted == 1
    one_pass(worker)  # the other one next pass
    assert [sq.get_run(r).status for r in runs] == ["completed", "completed", "waiting"]
    assert [sq.latest(r).state["got"] for r in runs] == ["one", "two", None]


def test_a_pass_with_no_free_slot_wakes_nothing(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate), waiter(gate)], clock=manual, owner=OWNER)
    waiting = engine.run("waiter", {"key": "k1"}).run_id
    busy = engine.start("two", {})
    worker = Worker(engine, concurrency=1)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
        Engine(sq, flows=[waiter(gate)], clock=manual, executes=False).signal("go", "k1", 1)
        worker.run_pass(pool)  # the slot is taken by `busy`
        assert pool.submitted == 1
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert sq.get_run(busy).status == "completed"
    assert sq.get_run(waiting).status == "waiting"


# -- fencing ----------------------------------------------------------------------


def test_fence_stops_the_runs_it_executes_before_their_next_step(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    r1 = engine.start("two", {})
    worker = Worker(engine, concurrency=2, fence_cooldown_s=3600.0)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
        worker.fence()
        assert r1 in engine.lost
        r2 = engine.start("two", {})
        worker.run_pass(pool)  # cooling down: claims nothing
        assert lease_owner(sq, r2) is None
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert gate.started(r1, "b") == 0
    assert sq.get_run(r1).status != "completed"
    assert pool.submitted == 1
    # the run stayed resumable: another worker finishes it
    other = Engine(sq, flows=[two_steps(gate)], clock=manual, owner="worker-b:2:x")
    manual.advance(engine.lease_ttl_s + 1)
    one_pass(Worker(other))
    assert sq.get_run(r1).status == "completed"
    assert sq.get_run(r2).status == "completed"


def test_after_a_fence_the_worker_claims_again_once_the_default_cooldown_passed(
    sq, manual, fake_time
):
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    run_id = engine.start("two", {})
    worker = Worker(engine)
    assert worker.fence_cooldown_s == 1.0
    worker.fence()
    fake_time.mono = 1000.999
    assert one_pass(worker).submitted == 0
    assert sq.get_run(run_id).status == "pending"
    assert lease_owner(sq, run_id) is None
    fake_time.mono = 1001.0
    one_pass(worker)
    assert sq.get_run(run_id).status == "completed"


def test_a_worker_never_fenced_claims_at_once(sq, manual, fake_time):
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    run_id = engine.start("two", {})
    fake_time.mono = 0.0
    one_pass(Worker(engine, fence_cooldown_s=1e9))
    assert sq.get_run(run_id).status == "completed"


# -- errors in a run's body ----------------------------------------------------------


def test_an_unexpected_error_in_a_run_is_logged_with_its_traceback(sq, manual, caplog):
    """An error the engine itself trips over escapes it as a plain exception:
    here a step raises an exception whose ``retryable`` flag (which the retry
    policy reads) itself raises, a bug in the flow's code. The worker logs it
    with the traceback and goes on with its other runs. (A failing step,
    route, wait key or on_enter fails its step instead.)"""
    gate = Gate()
    gate.open.set()

    class Broken(Exception):
        @property
        def retryable(self) -> bool:
            raise RuntimeError("no route for you")

    def bad(state: S) -> dict:
        raise Broken("step a")

    broken = FlowBuilder("broken", S).step("a", bad).step("x", gate.body).chain().compile()
    engine = Engine(sq, flows=[broken, two_steps(gate)], clock=manual, owner=OWNER)
    bad = engine.start("broken", {})
    good = engine.start("two", {})
    with caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"):
        one_pass(Worker(engine, concurrency=2))
    assert sq.get_run(good).status == "completed"
    recs = [r for r in caplog.records if r.name == "desktop_app.flow.worker"]
    assert [r.levelno for r in recs] == [logging.ERROR], sq.get_run(bad)
    assert recs[0].getMessage() == f"flowdesk worker {OWNER}: run {bad} failed"
    assert recs[0].exc_info is not None and "no route for you" in str(recs[0].exc_info[1])


# -- serve: the loop, its blocking and stopping ------------------------------------


class RecordingStop(threading.Event):
    """A real stop event. Each timed wait (the loop's wait between passes when
    there is no listener) is recorded and stops the worker at once, so a test
    sees exactly one pass and the wait it chose; the stopper thread's untimed
    wait is the real one."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return super().wait()
        self.timeouts.append(timeout)
        self.set()
        return True


class Serving:
    """``worker.serve(stop)`` on a thread; :meth:`join` fails after BOUND_S."""

    def __init__(self, worker: Worker, stop: threading.Event) -> None:
        self.stop = stop
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(worker,), daemon=True)
        self.thread.start()

    def _serve(self, worker: Worker) -> None:
        try:
            worker.serve(self.stop)
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.thread.join(BOUND_S)
        if self.thread.is_alive():
            self.stop.set()
            raise AssertionError("serve did not return")
        assert self.error is None, self.error


def test_serve_without_a_listener_waits_poll_s_between_passes(sq, manual):
    ticks: list[int] = []
    engine = Engine(sq, flows=[two_steps(Gate())], clock=manual, owner=OWNER)
    worker = Worker(engine, poll_s=7.5, on_tick=lambda: ticks.append(worker.passes))
    stop = RecordingStop()
    Serving(worker, stop).join()
    assert stop.timeouts == [7.5]
    assert ticks == [0]  # on_tick runs after the pass, before it is counted
    assert (worker.passes, worker.notified_passes) == (1, 0)
    assert engine.shutdown_event.is_set()  # serve stopped the engine on its way out


def test_serve_polls_every_second_by_default(sq, manual):
    engine = Engine(sq, flows=[two_steps(Gate())], clock=manual, owner=OWNER)
    stop = RecordingStop()
    Serving(Worker(engine), stop).join()
    assert stop.timeouts == [1.0]


@pytest.mark.parametrize(("poll_s", "ahead", "expected"), [(60.0, 6.0, 6.0), (2.0, 6.0, 2.0)])
def test_serve_waits_until_the_next_stored_deadline_or_poll_s(sq, manual, poll_s, ahead, expected):
    gate = Gate()
    engine = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual, owner=OWNER)
    engine.run("sleeper", {})
    manual.advance(10.0 - ahead)
    stop = RecordingStop()
    Serving(Worker(engine, poll_s=poll_s), stop).join()
    assert stop.timeouts == [pytest.approx(expected, abs=1e-3)]


def test_a_due_deadline_this_worker_cannot_wake_is_refused_once_and_waits_the_poll(
    sq, manual, caplog
):
    """The run's flow is not registered here: waking it is refused (a
    warning, and ``on_refused``, once) and its deadline stays due; the next
    pass waits the poll interval, not zero (passes back to back, each
    refusing again, were a busy loop), and never a negative wait."""
    gate = Gate()
    app = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual)
    run_id = app.run("sleeper", {}).run_id
    manual.advance(15.0)
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    stop = RecordingStop()
    refused: list[tuple[str, str]] = []
    worker = Worker(
        engine, poll_s=60.0, on_refused=lambda rid, exc: refused.append((rid, type(exc).__name__))
    )
    with caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"):
        Serving(worker, stop).join()
    assert stop.timeouts == [60.0]
    assert sq.get_run(run_id).status == "waiting"
    assert refused == [(run_id, "UnknownFlowError")] and worker.refused == {run_id}
    [rec] = [r for r in caplog.records if r.name == "desktop_app.flow.worker"]
    assert rec.levelno == logging.WARNING
    assert rec.getMessage().startswith(f"run {run_id} cannot go on in worker {OWNER}: ")
    assert "sleeper" in rec.getMessage()
    # a later pass does not try it again
    with ThreadPoolExecutor(1) as pool:
        worker.run_pass(pool)
    assert refused == [(run_id, "UnknownFlowError")]


def test_a_pass_the_store_fails_is_logged_and_the_loop_goes_on(sq, manual, caplog):
    engine = Engine(sq, flows=[two_steps(Gate())], clock=manual, owner=OWNER)
    sq.close()  # every query now raises StoreError
    ticks: list[int] = []
    worker = Worker(engine, poll_s=3.0, on_tick=lambda: ticks.append(1))
    stop = RecordingStop()
    with caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"):
        Serving(worker, stop).join()
    assert stop.timeouts == [3.0]  # next_deadline failed too: the poll interval
    assert ticks == [1] and worker.passes == 1
    [rec] = [r for r in caplog.records if r.name == "desktop_app.flow.worker"]
    assert rec.levelno == logging.WARNING
    assert rec.getMessage().startswith(f"flowdesk worker {OWNER}: pass failed: ")
    assert "closed" in rec.getMessage()


def test_stopping_serve_stops_its_runs_resumable_and_waits_for_their_threads(sq, manual):
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    run_id = engine.start("two", {})
    stop = threading.Event()
    serving = Serving(Worker(engine, poll_s=3600.0), stop)
    try:
        gate.wait_starts(1)
        stop.set()
        assert engine.shutdown_event.wait(BOUND_S)
        # step "a" is still in flight: serve waits for its thread
        assert serving.thread.is_alive()
    finally:
        gate.open.set()
    serving.join()
    assert gate.threads[0].startswith("flowdesk-run")  # serve's own pool
    assert gate.started(run_id, "b") == 0
    run = sq.get_run(run_id)
    assert run.status != "completed" and run.lease_owner is None  # released at stop
    # resumable: a new worker finishes it
    again = Engine(sq, flows=[two_steps(gate)], clock=manual, owner="worker-b:2:x")
    one_pass(Worker(again))
    assert sq.get_run(run_id).status == "completed"
    assert gate.started(run_id, "b") == 1


# -- PostgreSQL: claim_for_worker, the real listener as wake source and liveness ---


class Observed:
    """The store's real listener, with the worker's calls on it recorded: the
    tests must know when ``serve`` is blocked in ``wait`` (to act exactly
    then), what timeout it chose and how often finished runs poked it.
    Every call goes to the real listener."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self.timeouts: list[float] = []
        self.results: list[bool] = []
        self.pokes = 0
        self._cond = threading.Condition()

    @property
    def alive(self) -> bool:
        return bool(self.listener.alive)

    def wait(self, timeout: float) -> bool:
        with self._cond:
            self.timeouts.append(timeout)
            self._cond.notify_all()
        woke = bool(self.listener.wait(timeout))
        with self._cond:
            self.results.append(woke)
        return woke

    def poke(self) -> None:
        with self._cond:
            self.pokes += 1
        self.listener.poke()

    def in_wait(self, n: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.timeouts) >= n, BOUND_S)
        assert ok, f"serve never reached wait #{n}"


class PgWorld:
    """A worker's engine on the PostgreSQL store, its listener (liveness, with
    ``on_lost`` fencing the worker) and an app engine that only submits."""

    def __init__(self, store: Any, gate: Gate) -> None:
        self.store = store
        self.gate = gate
        self.owner = f"pg-host-a:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        flows = [two_steps(gate), waiter(gate)]
        self.engine = Engine(
            store, flows=flows, clock=ServerClock(store.server_time), owner=self.owner
        )
        self.app = Engine(store, flows=flows, executes=False)
        self.fenced = threading.Event()
        self.listeners: list[Any] = []
        self.finished: dict[str, str] = {}
        self.finished_cond = threading.Condition()
        self.engine.events.subscribe(self._on_event)

    def _on_event(self, event: object) -> None:
        if isinstance(event, RunFinished):
            with self.finished_cond:
                self.finished[event.run_id] = event.status
                self.finished_cond.notify_all()

    def wait_finished(self, run_id: str, status: str = "completed") -> None:
        with self.finished_cond:
            ok = self.finished_cond.wait_for(lambda: self.finished.get(run_id) == status, BOUND_S)
        assert ok, f"run {run_id} never finished {status}: {self.finished.get(run_id)}"

    def worker(self, **kwargs: Any) -> Worker:
        worker = Worker(self.engine, **kwargs)

        def lost() -> None:
            worker.fence()
            self.fenced.set()

        listener = self.store.listener(owner=self.owner, on_lost=lost)
        self.listeners.append(listener)
        worker.session = listener
        return worker

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()


@pytest.fixture
def pg(pg_store: Any) -> Iterator[PgWorld]:
    world = PgWorld(pg_store, Gate())
    yield world
    world.gate.open.set()
    world.close()


@pytest.mark.postgres
def test_pg_a_pass_claims_runs_of_flows_it_can_execute_up_to_concurrency(pg):
    old = Engine(pg.store, flows=[FlowBuilder("two", S).step("a", pg.gate.body).compile()])
    stale = old.start("two", {})  # the oldest, but of another version of "two"
    r1, r2, r3 = (pg.app.start("two", {}) for _ in range(3))
    worker = pg.worker(concurrency=2)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        owners = [lease_owner(pg.store, r) for r in (stale, r1, r2, r3)]
        assert owners.count(pg.owner) == 2 and owners[0] is None
        pg.gate.wait_starts(2)
        worker.run_pass(pool)
        assert pool.submitted == 2
    finally:
        pg.gate.open.set()
        pool.shutdown(wait=True)
    one_pass(worker)
    assert [pg.store.get_run(r).status for r in (r1, r2, r3)] == ["completed"] * 3
    assert pg.store.get_run(stale).status == "pending"


@pytest.mark.postgres
def test_pg_a_worker_whose_listener_is_down_claims_and_wakes_nothing(pg):
    pending = pg.app.start("two", {})
    pg.gate.open.set()
    waiting = pg.engine.run("waiter", {"key": "k1"}).run_id
    pg.app.signal("go", "k1", "hello")
    worker = pg.worker(concurrency=2)
    worker.session.close()  # type: ignore[union-attr]  # the real listener, now down
    assert worker.session is not None and not worker.session.alive
    pool = one_pass(worker)
    assert pool.submitted == 0
    assert lease_owner(pg.store, pending) is None
    assert pg.store.get_run(waiting).status == "waiting"


@pytest.mark.postgres
def test_pg_losing_the_liveness_session_fences_the_runs_before_their_next_step(pg):
    r1 = pg.app.start("two", {})
    worker = pg.worker(concurrency=2, fence_cooldown_s=3600.0)
    listener = worker.session
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        pg.gate.wait_starts(1)
        with pg.store.pool.connection() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (listener.backend_pid,))  # type: ignore[union-attr]
        assert pg.fenced.wait(BOUND_S), "on_lost never ran"
        assert r1 in pg.engine.lost
        r2 = pg.app.start("two", {})
        worker.run_pass(pool)  # down or cooling down: claims nothing
        assert lease_owner(pg.store, r2) is None
    finally:
        pg.gate.open.set()
        pool.shutdown(wait=True)
    assert pg.gate.started(r1, "b") == 0
    assert pg.store.get_run(r1).status != "completed"
    assert pool.submitted == 1


@pytest.mark.postgres
def test_pg_serve_wakes_on_a_notification_and_runs_what_arrived(pg):
    pg.gate.open.set()
    waiting = pg.engine.run("waiter", {"key": "k9"}).run_id
    worker = pg.worker(concurrency=2, poll_s=3600.0)  # only a notification wakes it
    observed = Observed(worker.session)
    worker.session = observed
    stop = threading.Event()
    serving = Serving(worker, stop)
    try:
        observed.in_wait(1)
        assert observed.timeouts[0] == 3600.0  # no deadline stored: the poll interval
        run_id = pg.app.start("two", {})  # its NOTIFY ends the wait
        pg.wait_finished(run_id)
        pg.app.signal("go", "k9", "there")  # so does this one's
        pg.wait_finished(waiting)
    finally:
        stop.set()
    serving.join()
    assert pg.store.latest(waiting).state["got"] == "there"
    assert worker.notified_passes == observed.results.count(True) >= 2
    # a wait follows every pass but the one stop interrupted, if it did; at
    # least the two waits the run's and the signal's notifications ended
    assert 2 <= len(observed.timeouts) <= worker.passes <= len(observed.timeouts) + 1


@pytest.mark.postgres
def test_pg_stop_wakes_serve_out_of_its_wait(pg):
    worker = pg.worker(poll_s=3600.0)
    observed = Observed(worker.session)
    worker.session = observed
    stop = threading.Event()
    serving = Serving(worker, stop)
    observed.in_wait(1)
    stop.set()
    serving.join()  # within BOUND_S, not poll_s
    assert worker.passes == 1


@pytest.mark.postgres
def test_pg_stop_during_a_pass_ends_serve_without_waiting(pg):
    stop = threading.Event()
    worker = pg.worker(poll_s=3600.0, on_tick=stop.set)
    observed = Observed(worker.session)
    worker.session = observed
    Serving(worker, stop).join()
    assert observed.timeouts == []
    assert (worker.passes, worker.notified_passes) == (1, 0)


@pytest.mark.postgres
def test_pg_each_finished_run_pokes_the_listener_for_the_next_claim(pg):
    pg.gate.open.set()
    runs = [pg.app.start("two", {}) for _ in range(2)]
    worker = pg.worker(concurrency=2)
    observed = Observed(worker.session)
    worker.session = observed
    one_pass(worker)
    assert [pg.store.get_run(r).status for r in runs] == ["completed", "completed"]
    assert observed.pokes == 2


@pytest.mark.postgres
def test_pg_a_run_whose_lease_expired_while_it_executes_here_is_not_started_again(pg):
    """claim_for_worker hands a run of this worker back once its lease
    expired (a stalled heartbeat, made here by moving the expiry into the
    past); the worker keeps executing it once, never twice."""
    pg.engine.lease_ttl_s = 3600.0  # no heartbeat renews the lease meanwhile
    r1 = pg.app.start("two", {})
    worker = pg.worker(concurrency=2)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        pg.gate.wait_starts(1)
        with pg.store.pool.connection() as conn:
            conn.execute(
                "UPDATE runs SET lease_expires_at = clock_timestamp() - interval '1 second' "
                "WHERE run_id=%s",
                (r1,),
            )
        worker.run_pass(pool)
        assert lease_owner(pg.store, r1) == pg.owner  # claimed again: ours
        assert pool.submitted == 1
    finally:
        pg.gate.open.set()
        pool.shutdown(wait=True)
    assert pg.store.get_run(r1).status == "completed"
    assert (pg.gate.started(r1, "a"), pg.gate.started(r1, "b")) == (1, 1)


@pytest.mark.postgres
def test_pg_a_pass_that_also_takes_a_dead_local_owners_run_starts_each_run_once(pg):
    """A run whose owner was a process of this host that died (a killed
    ``flowdesk run``; no liveness lock) is taken over in the same pass that
    claims a fresh run through ``claim_for_worker``; ``claim_runnable``, used
    for the first, hands the fresh one back again (ours): each starts once
    and the fresh one keeps its lease."""
    import socket
    import sys

    gone = cli_forkserver.popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = Engine(pg.store, flows=[], owner=f"{socket.gethostname()}:{gone.pid}:dead00")
    left = pg.app.start("two", {})
    pg.store.claim(left, dead.lease(), dead.clock.now())  # its lease runs 30 s more
    fresh = pg.app.start("two", {})
    worker = pg.worker(concurrency=4)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        pg.gate.wait_starts(2)
        assert pool.submitted == 2
        assert lease_owner(pg.store, left) == lease_owner(pg.store, fresh) == pg.owner
    finally:
        pg.gate.open.set()
        pool.shutdown(wait=True)
    assert [pg.store.get_run(r).status for r in (left, fresh)] == ["completed"] * 2
    assert [pg.gate.started(r, "a") for r in (left, fresh)] == [1, 1]


def test_a_run_another_live_process_holds_is_logged_with_its_owner_not_refused(sq, manual, caplog):
    """Waking a due run that a live process holds (a lease, not a refusal)
    is an INFO line naming this worker, the run and why, and it is tried
    again on later passes (not remembered as refused)."""
    from desktop_app.flow.owners import new_owner
    from desktop_app.store.records import Lease

    gate = Gate()
    gate.open.set()
    app = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual)
    run_id = app.run("sleeper", {}).run_id
    manual.advance(15.0)
    holder = new_owner()  # this host's process: alive
    now = sq.now()
    sq.claim(run_id, Lease(holder, now + 3600, now, ttl_s=3600), now)
    engine = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual, owner=OWNER)
    refused: list[str] = []
    worker = Worker(engine, poll_s=60.0, on_refused=lambda rid, exc: refused.append(rid))
    with (
        caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"),
        ThreadPoolExecutor(1) as pool,
    ):
        worker.run_pass(pool)
    [rec] = [r for r in caplog.records if r.name == "desktop_app.flow.worker"]
    assert rec.levelno == logging.INFO
    message = rec.getMessage()
    assert message.startswith(f"flowdesk worker {OWNER}: run {run_id}: ")
    assert holder in message
    assert refused == [] and worker.refused == set()


def test_a_deadline_due_at_this_very_instant_waits_the_poll(sq, manual):
    """A deadline equal to now after the pass is one this pass already
    handed to a thread (or may not fire): the next pass waits the poll, it
    does not start at once."""
    gate = Gate()
    gate.open.set()
    app = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual)
    run_id = app.run("sleeper", {}).run_id
    manual.set(sq.latest(run_id).waits[0].deadline_at)  # due at this very instant
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    stop = RecordingStop()
    Serving(Worker(engine, poll_s=60.0), stop).join()
    assert stop.timeouts == [60.0]


class CountingStop(threading.Event):
    """A real stop event whose timed waits (between passes, no listener) are
    recorded and return at once; it is set after ``waits`` of them."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.left = waits
        self.timeouts: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return super().wait()
        self.timeouts.append(timeout)
        self.left -= 1
        if self.left <= 0:
            self.set()
        return self.is_set()


def test_an_unreachable_database_never_ends_serve_it_backs_off_and_says_when_back(
    sq, manual, monkeypatch, caplog
):
    """A server outage (every pass fails with DatabaseUnreachableError, here
    five) keeps the worker serving: it says so once, waits with capped
    exponential backoff between tries, says once when the database is back,
    then goes back to its poll interval."""
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    outage = {"left": 5}
    real = sq.next_deadline

    def next_deadline() -> float | None:
        if outage["left"] > 0:
            outage["left"] -= 1
            raise DatabaseUnreachableError("lost the connection to PostgreSQL (test)")
        return real()  # type: ignore[no-any-return]

    monkeypatch.setattr(sq, "next_deadline", next_deadline)
    away: list[BaseException] = []
    back: list[float] = []
    worker = Worker(
        engine, poll_s=3.0, retry_max_s=2.0, on_unreachable=away.append, on_reachable=back.append
    )
    stop = CountingStop(waits=8)
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.worker"):
        serving = Serving(worker, stop)
        serving.join()
    assert serving.error is None
    assert [str(e) for e in away] == ["lost the connection to PostgreSQL (test)"]
    assert len(back) == 1 and back[0] >= 0.0
    tries, after = stop.timeouts[:5], stop.timeouts[5:]
    assert all(0.5 <= t <= 2.0 for t in tries) and tries[-1] == 2.0  # capped at retry_max_s
    assert after == [3.0] * len(after) and after  # the poll interval once it is back
    said = [r.getMessage() for r in caplog.records if r.name == "desktop_app.flow.worker"]
    assert [m for m in said if "unreachable" in m] == [
        f"flowdesk worker {OWNER}: the database is unreachable (lost the connection to "
        "PostgreSQL (test)); retrying every 2 s at most until it is back"
    ]
    assert len([m for m in said if "the database is back after" in m]) == 1
    # serve stopped its engine; a run started now is executed, each step once
    again = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    run_id = again.start("two", {})
    one_pass(Worker(again))
    assert sq.get_run(run_id).status == "completed"
    assert gate.started(run_id, "a") == 1 and gate.started(run_id, "b") == 1


def test_a_missing_schema_ends_serve_with_that_error(sq, manual, monkeypatch):
    """An error that cannot heal by waiting ends serve with that typed error."""
    engine = Engine(sq, flows=[two_steps(Gate())], clock=manual, owner=OWNER)

    def next_deadline() -> float | None:
        raise SchemaMissingError("no Flowdesk schema (test)")

    monkeypatch.setattr(sq, "next_deadline", next_deadline)
    serving = Serving(Worker(engine, poll_s=3.0), CountingStop(waits=50))
    serving.thread.join(BOUND_S)
    assert not serving.thread.is_alive()
    assert isinstance(serving.error, SchemaMissingError)
