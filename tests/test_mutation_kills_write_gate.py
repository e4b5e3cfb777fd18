"""The gated connection's transactions on the step path (kill tests for
mutants of ``GatedConnection.begin_write``/``end_write`` in
``store/write_gate.py``): a process keeps the write gate's ``flock``
between its own commits for its turn (``HOLD_S``), but a write that failed
(``BEGIN`` refused, or a transaction rolled back) gives it back at once, so
another process's writer does not wait out this process's turn for a write
that made nothing.

The turn is made a minute long here (``HOLD_S`` patched), so a flock kept by
mistake is still held when the test looks; every store is a real SQLite
file in ``tmp_path``.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import apsw
import pytest

from desktop_app.errors import RevisionConflictError, StoreError
from desktop_app.store import write_gate
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord
from desktop_app.store.sqlite.store import open_store
from desktop_app.store.write_gate import LOCK_SUFFIX
from tests.test_write_gate import held_elsewhere


def _cp(revision: int) -> Checkpoint:
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint("r1", revision, "running", {"n": revision}, {"a": rec}, ("a",), 1.0, "a")


@pytest.fixture
def long_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_gate, "HOLD_S", 60.0)


def test_a_commit_keeps_the_gate_for_the_turn_and_a_refused_append_gives_it_back(
    db_path: Path, long_turn: None
):
    store = open_store(db_path)
    try:
        store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0))
        store.append(_cp(1))
        assert held_elsewhere(db_path)  # kept for this process's next write (its turn)
        with pytest.raises(RevisionConflictError):
            store.append(_cp(1))  # revision 1 is taken: rolled back
        assert not held_elsewhere(db_path)
        assert store.latest("r1").revision == 1
    finally:
        store.close()


def test_a_begin_refused_by_an_outside_writer_gives_the_gate_back(db_path: Path, long_turn: None):
    raw = apsw.Connection(str(db_path))
    raw.execute("BEGIN IMMEDIATE")  # the sqlite3 shell's write, outside the gate
    store = open_store(db_path, busy_timeout_s=0.05)
    try:
        with pytest.raises(StoreError, match="busy timeout"):
            store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0))
        assert not held_elsewhere(db_path)
    finally:
        raw.execute("ROLLBACK")
        raw.close()
        store.close()


# -- waiting for another process's turn (WriteGate._lock_file, _turn_left) ----------


def _held_by_another(db: Path) -> int:
    """A descriptor of our own on the lock file, holding its ``flock`` (as
    another process would: a flock belongs to its open file)."""
    gate = write_gate.WriteGate(db)
    gate.acquire(5.0)  # makes the lock file
    gate.release(keep=False)
    other = os.open(f"{db}{LOCK_SUFFIX}", os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return other


def test_a_waiter_gives_up_at_its_timeout_not_at_the_end_of_a_longer_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_gate, "HOLD_S", 30.0)
    db = tmp_path / "t.db"
    other = _held_by_another(db)
    try:
        os.pwrite(other, write_gate._TURN_END.pack(time.monotonic() + 20.0), 0)
        gate = write_gate.WriteGate(db)
        t0 = time.monotonic()
        with pytest.raises(apsw.BusyError) as refused:
            gate.acquire(0.2)
        # within its 0.2 s, give or take a loaded machine; not the turn's 20 s
        assert time.monotonic() - t0 < 0.9
        assert str(refused.value) == (
            "database is locked (another process's write transaction held it for over 0.2 s)"
        )
    finally:
        os.close(other)


def test_a_waiter_backs_off_when_no_turn_end_is_known(tmp_path: Path) -> None:
    """Unknown turn: polled from 0.05 ms doubling to 1 ms, not retried at once."""
    db = tmp_path / "t.db"
    other = _held_by_another(db)
    try:
        os.ftruncate(other, 0)  # no turn's end written (an older Flowdesk's file)
        threading.Timer(0.3, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        gate = write_gate.WriteGate(db)
        gate.acquire(30.0)
        gate.release(keep=False)
        # ~300 polls of 1 ms at most (fewer on a loaded machine), never thousands
        assert 10 <= gate.polls <= 400, gate.polls
    finally:
        os.close(other)


def test_a_process_that_waited_for_its_turn_lets_a_waiter_in_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn taken after waiting, whose last commit ends past the turn, gives
    the flock back and waits :data:`YIELD_S` before its next try."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.1)
    db = tmp_path / "t.db"
    other = _held_by_another(db)
    try:
        threading.Timer(0.05, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        gate = write_gate.WriteGate(db)
        gate.acquire(30.0)  # waited for the other's turn
        gate.release()  # kept: its turn goes on
        gate.acquire(30.0)
        time.sleep(0.15)  # this transaction ends past the turn
        ended = time.monotonic()
        gate.release()
        assert not held_elsewhere(db)
        assert gate._yield_until > ended  # its next try waits for the others first
    finally:
        os.close(other)


def test_a_process_that_never_waited_does_not_yield_after_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone process (its flock taken at the first try) goes on at once
    after its turn: a yield would stall it YIELD_S at every turn for nobody."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.1)
    db = tmp_path / "t.db"
    gate = write_gate.WriteGate(db)
    gate.acquire(30.0)  # not contended
    gate.release()  # kept: its turn goes on
    gate.acquire(30.0)
    time.sleep(0.15)  # this transaction ends past the turn
    gate.release()
    assert not held_elsewhere(db)
    assert gate._yield_until == 0.0


# -- the reaper, and the exit hook that ends it ---------------------------------
# In this process (the reaper is a thread of it): a turn kept by a process
# that then writes nothing is given back at the turn's end, not at its next
# write; the exit hook gives it back at once, ends the reaper, and keeps no
# turn after it; it does not wait for a reaper this thread holds the mutex of.


def _one_write(db: Path) -> tuple[object, write_gate.WriteGate]:
    from desktop_app.store.connection import open_connection

    conn = open_connection(db)
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS reaped(x)")
    gate = conn.gate
    assert gate is not None
    return conn, gate


def _until(check, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``check()`` held (polled every 5 ms); fails after ``timeout``."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout, "not within the time"
        time.sleep(0.005)
    return time.monotonic() - t0


def test_the_reaper_gives_back_an_idle_turn_at_its_end_and_ends_when_idle(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_gate, "HOLD_S", 0.3)
    monkeypatch.setattr(write_gate, "REAPER_IDLE_S", 0.4)
    conn, gate = _one_write(db_path)
    try:
        assert held_elsewhere(db_path)  # kept for the turn
        reaper = gate._reaper
        assert reaper is not None and reaper.is_alive()
        waited = _until(lambda: not held_elsewhere(db_path), timeout=5)
        assert 0.15 < waited < 1.5  # at the turn's end, not at once and not later
        _until(lambda: not reaper.is_alive(), timeout=5)  # idle for REAPER_IDLE_S: it ends
        assert gate._reaper is None
        with conn:  # a later turn starts a reaper again, which gives it back again
            conn.execute("INSERT INTO reaped VALUES (1)")
        assert held_elsewhere(db_path)
        assert gate._reaper is not None and gate._reaper is not reaper
        _until(lambda: not held_elsewhere(db_path), timeout=5)
    finally:
        conn.close()  # type: ignore[attr-defined]


def test_a_turn_taken_again_before_the_reaper_looks_is_left_to_its_own_end(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_gate, "HOLD_S", 0.3)
    conn, gate = _one_write(db_path)
    try:
        first = gate._taken_at
        gate._unlock()  # the turn ended early (a failed write, say) ...
        time.sleep(0.15)
        with conn:  # ... and this process takes a new one, ending 0.15 s after the first
            conn.execute("INSERT INTO reaped VALUES (1)")
        assert gate._taken_at >= first + 0.15
        # the reaper woke for the first turn: past its end, the new one is not cut short
        time.sleep(max(0.0, first + 0.3 + 0.05 - time.monotonic()))
        assert time.monotonic() < gate._taken_at + 0.3 - 0.03  # (the test's own timing)
        assert held_elsewhere(db_path)
        waited = _until(lambda: not held_elsewhere(db_path), timeout=5)
        assert waited < 1.0  # and given back at its own end
    finally:
        conn.close()  # type: ignore[attr-defined]


def test_the_exit_hook_gives_the_turn_back_ends_the_reaper_and_keeps_no_turn_after(
    db_path: Path, long_turn: None
) -> None:
    conn, gate = _one_write(db_path)
    try:
        assert held_elsewhere(db_path)
        reaper = gate._reaper
        assert reaper is not None
        t0 = time.monotonic()
        write_gate._stop_reapers()
        assert time.monotonic() - t0 < 0.9  # the reaper ended at once, not at the join's bound
        assert not reaper.is_alive() and gate._reaper is None
        assert not held_elsewhere(db_path)  # given back, not left to the minute-long turn
        with conn:  # a write later in the exit keeps nothing
            conn.execute("INSERT INTO reaped VALUES (1)")
        assert not held_elsewhere(db_path)
    finally:
        gate._stopping = False
        conn.close()  # type: ignore[attr-defined]


def test_the_exit_hook_does_not_wait_for_a_reaper_whose_mutex_this_thread_holds(
    db_path: Path, long_turn: None
) -> None:
    conn, gate = _one_write(db_path)
    try:
        reaper = gate._reaper
        assert reaper is not None
        assert write_gate._owned(gate._mutex) is False
        gate._mutex.acquire()  # as a Ctrl-C between taking it and the bookkeeping leaves it
        try:
            assert write_gate._owned(gate._mutex) is True
            t0 = time.monotonic()
            write_gate._stop_reapers()
            assert time.monotonic() - t0 < 0.5  # no second-long join
            assert not held_elsewhere(db_path)  # given back all the same
        finally:
            gate._mutex.release()
        _until(lambda: not reaper.is_alive(), timeout=5)
    finally:
        gate._stopping = False
        conn.close()  # type: ignore[attr-defined]


def test_a_turn_started_while_the_reaper_waited_for_the_mutex_is_not_cut_short(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper, woken at a turn's end, waits for the mutex a transaction
    holds; meanwhile that turn ends and the process takes a new one: the
    reaper leaves the new turn to its own end."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.3)
    conn, gate = _one_write(db_path)
    try:
        first = gate._taken_at
        gate._mutex.acquire()  # a long transaction of this thread, say
        try:
            time.sleep(max(0.0, first + 0.3 + 0.1 - time.monotonic()))  # the reaper woke
            with conn:  # the turn is over: given back at this commit
                conn.execute("INSERT INTO reaped VALUES (1)")
            with conn:  # and a new turn, kept, ending 0.3 s from now
                conn.execute("INSERT INTO reaped VALUES (2)")
            assert gate._taken_at > first + 0.3 and held_elsewhere(db_path)
        finally:
            gate._mutex.release()  # the reaper gets the mutex now
        time.sleep(0.1)
        assert time.monotonic() < gate._taken_at + 0.3 - 0.05  # (the test's own timing)
        assert held_elsewhere(db_path)  # not cut short by the reaper woken for the first turn
        _until(lambda: not held_elsewhere(db_path), timeout=5)  # given back at its own end
    finally:
        conn.close()  # type: ignore[attr-defined]


def test_a_turn_started_while_an_idle_reaper_waited_for_the_mutex_is_still_reaped(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle reaper about to end waits for the mutex; meanwhile a new turn
    starts (and starts no reaper: there is one): that reaper goes on and
    gives the new turn back at its end."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.05)
    monkeypatch.setattr(write_gate, "REAPER_IDLE_S", 0.2)
    conn, gate = _one_write(db_path)
    try:
        _until(lambda: not held_elsewhere(db_path), timeout=5)  # the first turn reaped
        reaper = gate._reaper
        assert reaper is not None
        gate._mutex.acquire()
        try:
            time.sleep(0.4)  # the reaper's idle wait ended: it waits for the mutex
            with conn:  # a new turn, kept; its token is put for that same reaper
                conn.execute("INSERT INTO reaped VALUES (1)")
            assert gate._reaper is reaper and held_elsewhere(db_path)
        finally:
            gate._mutex.release()
        _until(lambda: not held_elsewhere(db_path), timeout=2)  # reaped at its end, not kept
    finally:
        conn.close()  # type: ignore[attr-defined]


def test_the_exit_hook_waits_a_bounded_time_for_a_reaper_another_thread_holds_up(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaper that cannot end (an idle one waiting for the gate's mutex,
    which another thread holds: a transaction stuck in it) delays the exit
    by the join's bound, one second, then the give-back's, one more; not
    longer and not for ever."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.05)
    monkeypatch.setattr(write_gate, "REAPER_IDLE_S", 0.1)
    conn, gate = _one_write(db_path)
    _until(lambda: not held_elsewhere(db_path), timeout=5)  # reaped: the reaper goes idle
    held, done = threading.Event(), threading.Event()

    def stuck_transaction() -> None:
        with gate._mutex:
            held.set()
            done.wait(10)

    blocker = threading.Thread(target=stuck_transaction)
    blocker.start()
    try:
        assert held.wait(5)
        time.sleep(0.3)  # the idle reaper's wait ended: it waits for the mutex
        reaper = gate._reaper
        assert reaper is not None and reaper.is_alive()
        took: list[float] = []

        def exit_hook() -> None:
            t0 = time.monotonic()
            write_gate._stop_reapers()
            took.append(time.monotonic() - t0)

        hook = threading.Thread(target=exit_hook)
        hook.start()
        hook.join(5)
        assert took and 1.8 <= took[0] < 2.7, took  # 1 s + 1 s, not 2 + 1, nor for ever
    finally:
        done.set()
        blocker.join(5)
        gate._stopping = False
        conn.close()  # type: ignore[attr-defined]


def test_the_at_fork_reset_leaves_a_gate_that_works_from_scratch(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a forked child's gate is after ``os.register_at_fork``'s hook
    (called here in this process, where its effects can be seen): the
    parent's descriptor dropped (here the last one: the flock goes with it),
    no turn, no reaper; its next write takes the flock afresh, keeps it for
    a turn and a new reaper gives it back at the turn's end."""
    monkeypatch.setattr(write_gate, "HOLD_S", 0.3)
    conn, gate = _one_write(db_path)
    try:
        assert held_elsewhere(db_path)
        old_reaper = gate._reaper
        gate._reset_after_fork()
        assert not held_elsewhere(db_path)  # its descriptor closed
        with conn:
            conn.execute("INSERT INTO reaped VALUES (1)")
        assert not gate.disabled and gate._fd is not None
        assert held_elsewhere(db_path)  # taken afresh and kept for the turn
        t0 = gate._taken_at
        new_reaper = gate._reaper
        assert isinstance(new_reaper, threading.Thread) and new_reaper is not old_reaper
        assert new_reaper.is_alive()  # a reaper of its own (in a child the old one is gone)
        waited = _until(lambda: not held_elsewhere(db_path), timeout=5)
        assert t0 + 0.2 < time.monotonic() and waited < 1.5  # at the turn's end
    finally:
        conn.close()  # type: ignore[attr-defined]
