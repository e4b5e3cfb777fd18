"""More in-process tests of :class:`~desktop_app.flow.worker.Worker`: what a
pass leases exactly (SQLite, seen through a trigger on the real file), a run
still executing here is neither released nor woken twice, a release that
fails, the pool and stopper thread ``serve`` starts, the liveness session
given to the constructor, and PostgreSQL's takeover of a dead worker's runs.

Helpers come from ``tests/test_worker_inprocess.py``; its fixtures are copied.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import RunFinished
from desktop_app.flow.worker import Worker
from desktop_app.store.sqlite.store import open_store
from tests.test_worker_inprocess import (
    BOUND_S,
    OWNER,
    CountingPool,
    Gate,
    PgWorld,
    S,
    lease_owner,
    one_pass,
    sleeper,
    start_in_order,
    two_steps,
)


@pytest.fixture
def manual() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sq(db_path: Path, manual: ManualClock) -> Iterator[Any]:
    """A SQLite store deciding leases on the test's manual clock."""
    store = open_store(db_path, clock=manual.now)
    yield store
    store.close()


@pytest.fixture
def pg(pg_store: Any) -> Iterator[PgWorld]:
    world = PgWorld(pg_store, Gate())
    yield world
    world.gate.open.set()
    world.close()


def side_connection(db_path: Path) -> apsw.Connection:
    """A second connection to the store's real file (for triggers/tables)."""
    return apsw.Connection(str(db_path))


def log_leases(db_path: Path) -> apsw.Connection:
    """Record, in a table of its own, every run a lease is set on (by anyone)."""
    conn = side_connection(db_path)
    conn.execute("CREATE TABLE test_lease_log(run_id TEXT, owner TEXT)")
    conn.execute(
        "CREATE TRIGGER test_lease_log_t AFTER UPDATE OF lease_owner ON runs "
        "WHEN NEW.lease_owner IS NOT NULL "
        "BEGIN INSERT INTO test_lease_log VALUES (NEW.run_id, NEW.lease_owner); END"
    )
    return conn


def leased(conn: apsw.Connection, owner: str = OWNER) -> set[str]:
    return {r for (r,) in conn.execute("SELECT run_id FROM test_lease_log WHERE owner=?", (owner,))}


def old_two(gate: Gate) -> Any:
    """Another version of the flow ``two``."""
    return FlowBuilder("two", S).step("a", gate.body).compile()


# -- SQLite: exactly which runs a pass leases ------------------------------------


def test_a_pass_leases_only_the_runs_its_claim_rounds_need(db_path, sq, manual):
    """One free slot, the oldest run of another version: the first round
    (limit 1) takes that one, the second asks for 1 + 2*1 = 3 runs and finds
    nothing new to skip; the fourth run is never leased, not even briefly."""
    gate = Gate()
    gate.open.set()
    [stale] = start_in_order(Engine(sq, flows=[old_two(gate)], clock=manual), manual, "two", 1)
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    f1, f2, x = start_in_order(engine, manual, "two", 3)
    log = log_leases(db_path)
    pool = one_pass(Worker(engine, concurrency=1))
    assert pool.submitted == 1
    assert sq.get_run(f1).status == "completed"
    assert leased(log) == {stale, f1, f2}
    assert [lease_owner(sq, r) for r in (stale, f2, x)] == [None, None, None]
    assert [sq.get_run(r).status for r in (stale, f2, x)] == ["pending"] * 3


def test_a_pass_never_leases_a_run_of_a_flow_it_lacks(db_path, sq, manual):
    """The claim is restricted to the worker's flow names: an older run of a
    flow it lacks is left alone (a peer that has the flow may be claiming it)."""
    gate = Gate()
    gate.open.set()
    other = Engine(sq, flows=[sleeper(gate)], clock=manual)
    [unknown] = start_in_order(other, manual, "sleeper", 1)
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    [fresh] = start_in_order(engine, manual, "two", 1)
    log = log_leases(db_path)
    assert one_pass(Worker(engine, concurrency=1)).submitted == 1
    assert sq.get_run(fresh).status == "completed"
    assert leased(log) == {fresh}
    assert sq.get_run(unknown).status == "pending"


def test_a_run_still_executing_here_keeps_its_lease_when_claimed_again(sq, manual):
    """SQLite's claim hands back the run this worker executes; the worker
    skips it and must not release it (it still executes it)."""
    gate = Gate()
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    [r1] = start_in_order(engine, manual, "two", 1)
    worker = Worker(engine, concurrency=2)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        gate.wait_starts(1)
        worker.run_pass(pool)  # claims r1 again (ours): skipped, kept
        assert lease_owner(sq, r1) == OWNER
        assert pool.submitted == 1
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert sq.get_run(r1).status == "completed"


def test_a_release_the_store_refuses_is_ignored_and_the_pass_goes_on(db_path, sq, manual):
    """Handing back a run it does not start may fail (the store refuses):
    the run's lease then expires on its own; the pass still starts the rest."""
    gate = Gate()
    gate.open.set()
    [stale] = start_in_order(Engine(sq, flows=[old_two(gate)], clock=manual), manual, "two", 1)
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    [fresh] = start_in_order(engine, manual, "two", 1)
    conn = side_connection(db_path)
    conn.execute(
        "CREATE TRIGGER test_no_release BEFORE UPDATE OF lease_owner ON runs "
        f"WHEN OLD.run_id = '{stale}' AND NEW.lease_owner IS NULL "
        "BEGIN SELECT RAISE(ABORT, 'release refused'); END"
    )
    assert one_pass(Worker(engine, concurrency=1)).submitted == 1
    assert sq.get_run(fresh).status == "completed"
    assert lease_owner(sq, stale) == OWNER  # not handed back: it expires
    assert sq.get_run(stale).status == "pending"


# -- waking: a run still executing here is not woken again -----------------------


def test_a_due_run_whose_thread_is_still_busy_here_is_not_woken_again(sq, manual):
    """The run reached its sleep (stored ``waiting``) but its thread is still
    busy here (an event subscriber runs): when its deadline falls due
    meanwhile, the next pass leaves it to that thread instead of waking it
    on a second one."""
    gate = Gate()
    gate.open.set()
    engine = Engine(sq, flows=[sleeper(gate, seconds=10.0)], clock=manual, owner=OWNER)
    run_id = engine.start("sleeper", {})
    reached, release = threading.Event(), threading.Event()

    def hold(event: object) -> None:
        if isinstance(event, RunFinished) and event.status == "waiting":
            reached.set()
            assert release.wait(BOUND_S), "the test never released the subscriber"

    unsubscribe = engine.events.subscribe(hold)
    worker = Worker(engine, concurrency=2)
    pool = CountingPool(4)
    try:
        worker.run_pass(pool)
        assert reached.wait(BOUND_S)
        unsubscribe()
        assert sq.get_run(run_id).status == "waiting"
        manual.advance(10.0)
        assert run_id in sq.wakeable_runs(manual.now())
        worker.run_pass(pool)
        assert pool.submitted == 1
    finally:
        release.set()
        pool.shutdown(wait=True)
    assert gate.started(run_id) == 0
    one_pass(worker)  # its thread is done: now it is woken
    assert sq.get_run(run_id).status == "completed"
    assert gate.started(run_id, "after") == 1


# -- serve's threads ----------------------------------------------------------------


class InWait(threading.Event):
    """A real stop event that reports when serve's loop blocks in its timed wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.waiting.set()
        return super().wait(timeout)


def test_serves_stopper_thread_is_a_daemon_even_when_serve_runs_on_a_non_daemon_thread(sq, manual):
    """The thread that turns ``stop`` into a wake-up never keeps the process
    alive."""
    engine = Engine(sq, flows=[two_steps(Gate())], clock=manual, owner=OWNER)
    stop = InWait()
    before = set(threading.enumerate())
    serving = threading.Thread(target=Worker(engine, poll_s=3600.0).serve, args=(stop,))
    serving.daemon = False
    serving.start()
    try:
        assert stop.waiting.wait(BOUND_S), "serve never reached its wait"
        # the store's write gate has a thread of its own while the file is written
        # (started and ended by the store's writes, whenever they come)
        started = [
            t
            for t in threading.enumerate()
            if t not in before and t is not serving and not t.name.startswith("flowdesk-write-gate")
        ]
        assert len(started) == 1, started  # no run: the pool started no thread
        assert started[0].daemon is True
    finally:
        stop.set()
        serving.join(BOUND_S)
    assert not serving.is_alive()


@pytest.mark.postgres
def test_pg_the_session_given_to_the_constructor_is_the_workers_liveness(pg):
    """``Worker(engine, session=...)`` keeps it: with that listener down the
    worker claims nothing."""
    pending = pg.app.start("two", {})
    listener = pg.store.listener(owner=pg.owner)
    pg.listeners.append(listener)
    listener.close()
    worker = Worker(pg.engine, session=listener, concurrency=2)
    assert worker.session is listener
    assert one_pass(worker).submitted == 0
    assert lease_owner(pg.store, pending) is None
    assert pg.store.get_run(pending).status == "pending"


@pytest.mark.postgres
def test_pg_a_pass_takes_over_the_runs_of_a_worker_whose_liveness_lock_is_gone(pg):
    """A peer leased a run for an hour, then its session ended without
    unregistering (SIGKILL, machine loss): its lease has not expired, yet
    the next pass here claims the run (``claim_for_worker``) and runs it."""
    pg.gate.open.set()
    run_id = pg.app.start("two", {})
    dead = "pg-host-b:1:dead"
    peer = pg.store.listener(owner=dead)
    pg.listeners.append(peer)
    assert [r.run_id for r in pg.store.claim_for_worker(dead, 3600.0, 1)] == [run_id]
    peer.close(unregister=False)  # its advisory lock is gone with its session
    worker = pg.worker(concurrency=2)
    assert one_pass(worker).submitted == 1
    assert pg.store.get_run(run_id).status == "completed"
    assert (pg.gate.started(run_id, "a"), pg.gate.started(run_id, "b")) == (1, 1)


# -- runs of a flow this worker lacks (_tell_unknown_flows) -----------------------


def test_a_run_of_a_flow_this_worker_lacks_is_refused_once_at_its_second_look(sq, manual, caplog):
    """A pending run no live process holds, of a flow not registered here,
    is refused (logged, given to ``on_refused``) at the second look that
    finds it unchanged, naming its flow and this worker's; once only. A run
    of a flow it has but no free slot for, and a run a live process of
    this host holds, are never refused; nor is anything between looks
    closer than ``unknown_every_s``."""
    import logging

    from desktop_app.flow.owners import new_owner
    from desktop_app.flow.worker import unknown_flow
    from desktop_app.store.protocol import Lease

    gate = Gate()
    other = Engine(sq, flows=[sleeper(gate)], clock=manual)
    lost = other.start("sleeper", {})
    held = other.start("sleeper", {})
    live = new_owner()  # another owner of this (live) process
    sq.claim(held, Lease(live, manual.now() + 3600, manual.now()), manual.now())
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    busy, queued = start_in_order(engine, manual, "two", 2)
    refused: list[tuple[str, str]] = []
    worker = Worker(engine, concurrency=1, on_refused=lambda r, e: refused.append((r, str(e))))
    worker.unknown_every_s = 0.0
    pool = CountingPool(2)
    try:
        with caplog.at_level(logging.INFO, logger="desktop_app.flow.worker"):
            worker.run_pass(pool)  # starts `busy`, blocked at the gate: no slot for `queued`
            gate.wait_starts(1)
            assert refused == []  # the first look only notes what it saw
            worker.run_pass(pool)
            assert refused == [(lost, str(unknown_flow("sleeper", ["two"])))]
            worker.run_pass(pool)
            assert len(refused) == 1
        said = [r.getMessage() for r in caplog.records if r.name == "desktop_app.flow.worker"]
        assert len(said) == 1 and lost in said[0] and "'sleeper'" in said[0], said
    finally:
        gate.open.set()
        pool.shutdown(wait=True)
    assert sq.get_run(busy).status == "completed"
    assert sq.get_run(queued).status == "pending"  # left for the next pass, not refused
    assert worker.refused == {lost}
    # the default: at most one look every 5 s (two passes at once look once)
    late = Worker(engine, on_refused=lambda r, e: refused.append((r, str(e))))
    assert late.unknown_every_s == 5.0
    one_pass(late)
    one_pass(late)
    assert [r for r, _ in refused] == [lost]


def test_only_waiting_runs_no_live_process_holds_are_refused_each_in_turn(sq, manual):
    """Of the runs of a flow this worker lacks, one that has ended
    (canceled) is never refused, nor one a process on another host holds
    while its lease runs; one whose lease on another host ran out is; and a
    run refused already does not keep a later one from being refused."""
    from desktop_app.store.protocol import Lease

    gate = Gate()
    gate.open.set()
    other = Engine(sq, flows=[sleeper(gate)], clock=manual)
    free, ended, remote, lapsed = start_in_order(other, manual, "sleeper", 4)
    other.cancel(ended)
    now = manual.now()
    sq.claim(remote, Lease("elsewhere:1:a", now + 3600, now), now)
    sq.claim(lapsed, Lease("elsewhere:1:b", now + 10, now), now)
    manual.advance(20.0)  # lapsed's lease has run out, remote's runs on
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    refused: list[str] = []
    worker = Worker(engine, on_refused=lambda r, e: refused.append(r))
    worker.unknown_every_s = 0.0
    one_pass(worker)
    one_pass(worker)
    assert sorted(refused) == sorted([free, lapsed])
    later = other.start("sleeper", {})  # listed after the runs refused already
    one_pass(worker)
    one_pass(worker)
    assert sorted(refused) == sorted([free, lapsed, later])
    assert sq.get_run(ended).status == "canceled"


def test_a_run_a_peer_held_in_between_is_refused_only_two_free_looks_later(sq, manual):
    """Only two looks in a row that find the run free and unchanged refuse
    it: a run a live peer held at the look between (a worker of the team
    that has its flow) is looked at afresh once it is free again."""
    from desktop_app.flow.owners import new_owner
    from desktop_app.store.protocol import Lease

    gate = Gate()
    gate.open.set()
    other = Engine(sq, flows=[sleeper(gate)], clock=manual)
    between = other.start("sleeper", {})
    engine = Engine(sq, flows=[two_steps(gate)], clock=manual, owner=OWNER)
    refused: list[str] = []
    worker = Worker(engine, on_refused=lambda r, e: refused.append(r))
    worker.unknown_every_s = 0.0
    one_pass(worker)  # first look: free
    peer = new_owner()  # a live owner of this host
    sq.claim(between, Lease(peer, manual.now() + 3600, manual.now()), manual.now())
    one_pass(worker)  # held by the peer: not looked at
    sq.release(between, peer)
    assert sq.get_run(between).status == "pending"
    one_pass(worker)  # free again: a first look
    assert refused == []
    one_pass(worker)
    assert refused == [between]
