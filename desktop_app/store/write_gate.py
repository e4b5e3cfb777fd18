"""One writer at a time across processes: an ``flock`` around SQLite write
transactions, held by one process for a turn of up to :data:`HOLD_S` (all
its write transactions in that time) and tried every 0.05-1 ms by a waiter,
so it goes on within a millisecond of the holder's turn instead of sleeping
through SQLite's busy back-off (1, 2, 5 ... 100 ms).

Why: with several processes on one file (the app, the CLI, ``flowdesk
agent``), SQLite's only way to wait for another process's write lock is to
poll it from the busy handler (sleeps of 1, 2, 5 ... 100 ms). One process then
commits again and again while the others sleep: measured with
``benchmarks/bench_processes.py``, 8 processes spent 70-88% of their wall time
in the busy handler and together did fewer steps per second than one.

How (see docs/design.md, "The SQLite file"):

* :class:`GatedConnection` is the ``apsw.Connection`` every Flowdesk process
  opens. Its ``with conn:`` (the ``BEGIN IMMEDIATE`` of every write
  transaction: the store's appends and batches, claims, agent runs,
  migrations) takes this process's :class:`WriteGate` for the file *before*
  ``BEGIN IMMEDIATE`` and gives it back after ``COMMIT``/``ROLLBACK``. A
  nested ``with conn:`` (a savepoint) does not touch it. Readers never take it.
* The gate is a ``threading.RLock`` (the threads of this process, waited for
  at most the busy timeout, then the same "stayed locked" error as SQLite's)
  and an exclusive ``flock`` on ``<db>-flowdesk.lock`` (0600, created at the
  first write, never deleted, holding only the planned end of the holder's
  turn, :data:`_TURN_END`) for the other processes, tried without
  blocking; a waiter sleeps until the holder's turn ends, then polls
  (:data:`POLL_MIN_S` doubling to :data:`POLL_MAX_S`), for at most the busy
  timeout in all; the kernel releases the
  lock of a process that dies (``kill -9``), so a crash never leaves it held.
* Turns: a process keeps the ``flock`` after a commit, for its next write
  transactions, until :data:`HOLD_S` seconds after it took it; then its
  next commit gives it back, and if it had to wait for its turn it waits
  :data:`YIELD_S` before trying again, so a waiting process goes next. A
  reaper thread (a daemon, one per gate, ended after :data:`REAPER_IDLE_S`
  without a turn) gives back at the turn's end a ``flock`` kept by a
  process that wrote nothing since; closing a connection and a failed
  transaction give it back at once. Why: every change of writer costs
  both processes. Another process's commit drops SQLite's whole page cache
  of a connection (read again at its next transaction), and each hand-over
  is a sleep, a wake-up and a switch of processes on the core. With the
  ``flock`` given back after every transaction, 8 processes on one file
  changed writer at nearly every step and spent 2-2.5x the CPU per step of
  one process; in turns, a process writes a whole run's steps (10-20
  commits) before the next takes over (docs/measurements.md, 2026-12-05
  05:50: 8 processes 1.3-1.9x the steps/s of the per-commit gate at a
  ~100 us fsync and 1.7x with no fsync, one process unchanged; but 0.7x on
  a saturated disk with 1-10 ms commits, where the holder's Python between
  its commits had overlapped another process's fsync). The cost: another
  process's write waits up to one turn (4 ms) per process writing before
  it, and a process stopped within a turn by ``SIGSTOP`` holds the gate as
  one stopped inside a transaction does (below); Ctrl-Z does not
  (:func:`stop_gives_back_the_gate`).
* SQLite's own locks still decide: the gate only orders Flowdesk's writers.
  A writer that does not take it (an older Flowdesk, the ``sqlite3`` shell)
  still works: the gated writers wait for it in the busy handler as before.
  The gate is always taken before SQLite's write lock and never while waiting
  for one, so the two cannot deadlock.
* Where ``flock`` is refused (``ENOLCK`` on some network file systems, a
  folder the lock file cannot be created in), the file is written without the
  gate, as before it existed, and that is logged once per file.

Ctrl-Z (``SIGTSTP``): the foreground commands, ``flowdesk agent`` and the
app install :func:`stop_gives_back_the_gate`, which gives the kept turn
back before the process stops, or stops it right after its open write
transaction ends. A process stopped by ``SIGSTOP`` (not catchable), or one
without the handler, inside a write transaction or within its turn, holds
the gate: the others wait for it no longer than their busy timeout and then
get the same "stayed locked" error as without the gate, which then names
the holder (:func:`describe_holder`: pid, command line, stopped or not,
read from ``/proc/locks`` only once the wait failed).

A blocking ``flock`` (measured first) could not be given a timeout and, in
the same rounds on this machine, gave 8 processes 1.6x fewer
steps/s than polling: the kernel wakes a waiter at every release, so the
writer changed at every commit. ``PRAGMA mmap_size`` and a larger
``cache_size`` do not help here (SQLite drops the cache whatever its size,
and pages read from the mapping are still misses: measured, not kept).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import queue
import signal
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

from desktop_app.process_state import STOPPED, is_stopped

log = logging.getLogger(__name__)

#: the lock file's name is the database's with this appended
LOCK_SUFFIX = "-flowdesk.lock"
#: seconds between two tries of a held gate: from the first to the last
POLL_MIN_S = 0.00005
POLL_MAX_S = 0.001
#: seconds a process keeps the ``flock`` between its own write transactions,
#: from when it took it (its turn); ``0`` gives it back after every transaction
HOLD_S = 0.004
#: seconds a process that had to wait for its turn waits, once its turn ended
#: while it was still writing, before it tries again (more than
#: :data:`POLL_MAX_S`, so that a waiting process gets the next turn)
YIELD_S = 0.0015
#: seconds without a turn after which the reaper thread ends (the next turn
#: starts another)
REAPER_IDLE_S = 5.0
#: the lock file's first bytes: the planned end of the holder's turn
#: (``time.monotonic()`` seconds, a little-endian double), written when it
#: takes the ``flock``; a waiting process sleeps until then instead of
#: polling through the turn (8 processes polled 2.85 times per step)
_TURN_END = struct.Struct("<d")


class ThreadBusyError(apsw.BusyError):
    """Another thread of this process held the gate (its write transaction)
    past the busy timeout: SQLite's busy error, told apart so the message
    does not blame another process."""


class WriteGate:
    """This process's gate for one database file (shared by all its
    connections to that file, so that two connections of one process never
    wait for each other's ``flock``).

    Args:
        db: the database file; the lock file is ``db`` + :data:`LOCK_SUFFIX`.
    """

    def __init__(self, db: Path) -> None:
        self.db = db
        self.lock_path = Path(f"{db}{LOCK_SUFFIX}")
        self._mutex = threading.RLock()
        self._depth = 0  # nesting of this process's holders (one thread)
        self._fd: int | None = None
        self.disabled = False  # flock refused here: write as before, logged once
        #: pauses slept waiting for another process's turn, so far (for
        #: measurements: each costs this process a sleep and a wake-up, ~20 us
        #: of CPU on a virtual machine, whatever the pause)
        self.polls = 0
        self._kept = False  # the flock held between two transactions (this process's turn)
        self._taken_at = 0.0  # time.monotonic() when this process took the flock
        self._waited = False  # whether taking it had to wait for another process
        self._kept_in_turn = False  # whether it was kept after a commit in this turn
        self._yield_until = 0.0  # time.monotonic() before which it does not try again
        #: a token put when a turn first keeps the ``flock``, for the reaper: a
        #: ``SimpleQueue`` (C, no lock a signal handler's exception can leave
        #: taken), not a ``threading.Event``, whose ``set()`` is Python code
        #: around a lock: a Ctrl-C landing inside it left that lock held by
        #: nobody, and the reaper and the exit (:func:`_stop_reapers`) waited
        #: on it for ever
        self._turn: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._reaper: threading.Thread | None = None
        #: set at interpreter exit (:func:`_stop_reapers`): no flock is kept
        #: between transactions any more and the reaper ends
        self._stopping = False

    def acquire(self, timeout_s: float) -> None:
        """Take the gate: this process's other writers, and other processes'
        writers, wait up to ``timeout_s`` seconds each.

        Raises:
            apsw.BusyError: another process held it longer than ``timeout_s``
                (callers translate it as SQLite's own); ``ThreadBusyError``
                when it was another thread of this process.
        """
        mutex = self._mutex
        if not mutex.acquire(blocking=False) and not mutex.acquire(timeout=timeout_s):
            raise ThreadBusyError("database is locked (another thread's write transaction)")
        if self._depth == 0 and not self.disabled and not self._kept:
            try:
                self._lock_file(timeout_s)
            except OSError as exc:
                self._disable(exc)
            except BaseException:
                mutex.release()
                raise
        self._depth += 1

    def release(self, keep: bool = True) -> None:
        """Give the gate back to this process's other threads. The outermost
        holder keeps the ``flock`` for this process's next write transaction
        until :data:`HOLD_S` seconds after this process took it (the reaper
        gives it back then if no transaction is open), unless ``keep`` is
        false (the transaction failed) or the turn is over."""
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None and not self.disabled:
                now = time.monotonic()
                if keep and not self._stopping and now - self._taken_at < HOLD_S:
                    self._kept = True
                    if not self._kept_in_turn:  # the reaper watches the turn's end
                        self._kept_in_turn = True
                        self._start_reaper()
                        self._turn.put(None)
                else:
                    self._unlock()
                    if keep and self._waited and self._kept_in_turn:
                        # a turn of several transactions, and others wait: let one
                        # in (a turn of one transaction, as at a slow fsync, goes
                        # on as if there were no turns)
                        self._yield_until = now + YIELD_S
        finally:
            self._mutex.release()
        if _STOP_PENDING and self._depth == 0:
            # a Ctrl-Z came inside this transaction: stop now that it ended
            # (the handler runs again in the main thread and checks every gate)
            os.kill(os.getpid(), signal.SIGTSTP)

    def give_back(self) -> None:
        """Give a ``flock`` kept between transactions back now (a connection
        closing). Waits at most 1 s for this process's other holders of
        the gate's mutex (the reaper holds it for microseconds, longer on a
        loaded machine; without the wait, a close landing then left the
        ``flock`` to the turn's end): if another thread of this process is
        inside a transaction that long, its end or the reaper gives it back."""
        if self._mutex.acquire(timeout=1.0):
            try:
                if self._depth == 0 and self._kept:
                    self._unlock()
            finally:
                self._mutex.release()

    def _unlock(self) -> None:
        self._kept = False
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _reap(self) -> None:
        """The reaper thread's loop (a daemon, one per gate, started at the
        first turn): at the end of each turn, give back a ``flock`` kept by a
        process that wrote nothing since, so an idle process never holds the
        others up longer than :data:`HOLD_S`."""
        while True:
            try:
                self._turn.get(timeout=REAPER_IDLE_S)
            except queue.Empty:
                with self._mutex:  # release() starts a new reaper under it
                    if self._stopping or self._turn.empty():
                        self._reaper = None
                        return
                continue
            # the turns signalled so far are read now: a turn whose token this
            # takes has already written its start (_took wrote it before
            # release() put the token)
            with contextlib.suppress(queue.Empty):
                while True:
                    self._turn.get_nowait()
            while not self._stopping:  # until the (latest) turn's end
                pause = self._taken_at + HOLD_S - time.monotonic()
                if pause <= 0:
                    break
                with contextlib.suppress(queue.Empty):  # the exit's token wakes it
                    self._turn.get(timeout=pause)
            if self._stopping:  # the exit: no mutex, so the exit never waits for it
                self._reaper = None
                return
            with self._mutex:
                # a turn taken since (its own end is due later) is left to the next loop
                if self._kept and time.monotonic() >= self._taken_at + HOLD_S:
                    self._unlock()

    def _took(self, waited: bool) -> None:
        """Start a turn: the flock was just taken. Its planned end goes in
        the lock file (:data:`_TURN_END`), for the processes that wait."""
        self._taken_at = time.monotonic()
        self._waited = waited
        self._kept_in_turn = False
        if self._fd is not None:
            with contextlib.suppress(OSError):  # unknown to the waiters: they poll
                os.pwrite(self._fd, _TURN_END.pack(self._taken_at + HOLD_S), 0)

    @staticmethod
    def _turn_left(fd: int) -> float:
        """Seconds until the holder's turn ends, as it wrote when it took the
        ``flock`` (``CLOCK_MONOTONIC``, one clock for every process of the
        machine); 0 when that is unknown (a lock file written by an older
        Flowdesk, or emptied by :meth:`SqliteCheckpointStore.file_system_now`),
        passed or implausible (more than :data:`HOLD_S` ahead).

        Raises:
            OSError: the lock file cannot be read (the gate is then disabled,
                as where ``flock`` is refused)."""
        data = os.pread(fd, _TURN_END.size, 0)
        if len(data) != _TURN_END.size:
            return 0.0
        left: float = _TURN_END.unpack(data)[0] - time.monotonic()
        return left if 0.0 < left <= HOLD_S else 0.0  # NaN: neither

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(
                target=self._reap, name=f"flowdesk-write-gate {self.db.name}", daemon=True
            )
            self._reaper.start()

    def _lock_file(self, timeout_s: float) -> None:
        """``flock`` the lock file, opened once per process (0600 like the
        database; O_CLOEXEC, Python's default, so a program this process
        starts never holds it). Not checked for deletion at every write (a
        ``stat`` would cost a third of the gate): a lock file deleted while
        processes run only loses the turn-taking between the processes that
        opened it before and after, until they restart."""
        if self._fd is None:
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fd = self._fd
        pause = self._yield_until - time.monotonic()
        if pause > 0:  # its last turn just ended: another process's goes first
            time.sleep(pause)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._took(waited=False)
            return
        except BlockingIOError:
            pass
        # another process writes: sleep until its turn's planned end, then
        # poll briefly (a waiter learns of the release within POLL_MAX_S, not
        # SQLite's back-off of up to 100 ms), never longer than the busy
        # timeout, so a holder that is stopped (Ctrl-Z) mid-transaction gives
        # the usual "database is locked" error, not a hang
        deadline = time.monotonic() + timeout_s
        pause = POLL_MIN_S
        while True:
            left = self._turn_left(fd)
            if left > 0.0:  # in a turn: no try before its end (polls cost CPU)
                time.sleep(min(left, max(0.0, deadline - time.monotonic())))
                pause = POLL_MIN_S
            else:
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
            self.polls += 1
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._took(waited=True)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise apsw.BusyError(
                        "database is locked (another process's write transaction held it "
                        f"for over {timeout_s:g} s)"
                    ) from None

    def _disable(self, exc: OSError) -> None:
        self.disabled = True
        log.warning(
            "cannot lock %s (%s): writes to this database wait for other processes in "
            "SQLite's busy handler only, slower with several processes on one file",
            self.lock_path,
            exc.strerror or exc,
        )

    def _reset_after_fork(self) -> None:
        """In a forked child: drop the parent's descriptor (closing it does
        not release the parent's lock) and any holder state."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._depth = 0
        self._mutex = threading.RLock()
        self._kept = False
        self._kept_in_turn = False
        self._yield_until = 0.0
        self._turn = queue.SimpleQueue()
        self._reaper = None  # threads do not survive a fork


# (st_dev, st_ino) of each database file -> this process's gate for it
_GATES: dict[tuple[int, int], WriteGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(db: Path, key: tuple[int, int]) -> WriteGate:
    """The one gate of this process for the database file identified by
    ``key`` (its ``(st_dev, st_ino)``), made on first use."""
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None or (gate.db != db and not _names(gate.db, key)):
            # none yet, or the gate of a file deleted since whose inode the
            # file system gave to this one: its lock file is not this file's
            gate = _GATES[key] = WriteGate(db)
        return gate


def _names(db: Path, key: tuple[int, int]) -> bool:
    """Whether the path ``db`` still names the file ``key`` (``(st_dev, st_ino)``)."""
    try:
        st = os.stat(db)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == key


def _after_fork_in_child() -> None:
    for gate in _GATES.values():
        gate._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_reapers() -> None:
    """At interpreter exit, before daemon threads are frozen: end every
    reaper and keep no flock between transactions from now on. A daemon
    reaper frozen by the interpreter's finalization inside its ``with
    self._mutex`` would hold that lock for ever, and a write made later in
    the exit (a generator's ``finally`` giving a lease back) would wait its
    whole busy timeout for it, then fail.

    Never blocks on what a Ctrl-C can leave taken: the wake-up is a
    ``SimpleQueue.put``; a gate whose mutex this thread still holds (a
    ``KeyboardInterrupt`` raised between a transaction's taking it and its
    bookkeeping) has a reaper that cannot be inside it, so it is not waited
    for (it would cost a second); every other wait is bounded."""
    for gate in list(_GATES.values()):
        gate._stopping = True
        gate._turn.put(None)
        reaper = gate._reaper
        if reaper is not None and not _owned(gate._mutex):
            reaper.join(timeout=1.0)
        gate.give_back()


def _owned(mutex: Any) -> bool:
    """Whether this thread holds ``mutex`` (a ``threading.RLock``), by its
    ``_is_owned``, the method ``threading.Condition`` relies on."""
    return bool(mutex._is_owned())


atexit.register(_stop_reapers)


class GatedConnection(apsw.Connection):
    """An ``apsw.Connection`` whose outermost ``with conn:`` (a write
    transaction: ``BEGIN`` with Flowdesk's ``transaction_mode``) holds a
    :class:`WriteGate` until it commits or rolls back. Without a gate
    (:attr:`gate` ``None``) it takes none.

    The outermost transaction's ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` run as
    statements (``execute``), not through apsw's own context manager: apsw
    runs those with the GIL held (``sqlite3_exec`` inside
    ``Connection.__exit__``), so every other thread of the process stood
    still for the whole commit, fsync included (measured: a thread looping in
    Python got 2% of its speed during such commits, 100% during an
    ``execute("COMMIT")``). A statement's step releases the GIL. Nested
    ``with conn:`` blocks are apsw's savepoints, as before. Semantics follow
    apsw's context manager: commit when the block ends normally; roll back
    when it raises, or when ``COMMIT`` itself fails (then the commit's error
    is raised)."""

    gate: WriteGate | None = None
    gate_timeout_s: float = 10.0
    #: the busy handler :func:`~desktop_app.store.connection.open_connection`
    #: set (its ``BusyWait``); kept here rather than in a weak-keyed registry,
    #: whose clean-up callback would run inside apsw's deallocator
    busy_wait: Callable[[int], bool] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: per ``with`` level: ``_SAVEPOINT`` (apsw's), else the outermost
        #: transaction's gate (None: no gate)
        self._held: list[WriteGate | object | None] = []

    def __enter__(self) -> apsw.Connection:
        if self.in_transaction:  # a savepoint of the transaction in progress
            conn = apsw.Connection.__enter__(self)
            self._held.append(_SAVEPOINT)
            return conn
        self._held.append(self.begin_write())
        return self

    def __exit__(
        self,
        etype: type[BaseException] | None,
        evalue: BaseException | None,
        etb: TracebackType | None,
    ) -> bool:
        held = self._held.pop()
        if held is _SAVEPOINT:
            return apsw.Connection.__exit__(self, etype, evalue, etb)
        self.end_write(etype is None and evalue is None, held)  # type: ignore[arg-type]  # a gate or None
        return False

    def begin_write(self) -> WriteGate | None:
        """Open the outermost write transaction as ``with conn:`` does: take
        the gate, then ``BEGIN`` with :attr:`transaction_mode` (the gate is
        given back if that fails); returns the gate taken (``None``: none),
        for :meth:`end_write`. For a caller that runs one transaction
        without the context manager (the store's append of one checkpoint,
        the step path's cost).

        Raises:
            apsw.BusyError: the gate or SQLite's write lock stayed taken
                past the timeout; other ``apsw.Error``: ``BEGIN`` failed.
        """
        gate = self.gate
        if gate is not None:
            gate.acquire(self.gate_timeout_s)
        try:
            self.execute(f"BEGIN {self.transaction_mode}")
        except BaseException:
            if gate is not None:
                gate.release(keep=False)
            raise
        return gate

    def end_write(self, commit: bool, gate: WriteGate | None) -> None:
        """End the transaction :meth:`begin_write` opened: ``COMMIT`` when
        ``commit`` (rolled back, and its error raised, when the commit
        fails), else roll back; then give back ``gate``: the :attr:`gate`
        it took (``None``: none).

        Raises:
            apsw.Error: the commit failed (the transaction was rolled back).
        """
        committed = False
        try:
            if commit:
                try:
                    self.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(apsw.Error):  # the commit's error is the one to see
                        self._rollback()
                    raise
                committed = True
            else:
                self._rollback()
        finally:
            if gate is not None:
                gate.release(keep=committed)

    def close(self, force: bool = False) -> None:
        """Close as apsw does, then give back a ``flock`` this process kept
        between its transactions (:data:`HOLD_S`)."""
        super().close(force)
        if self.gate is not None:
            self.gate.give_back()

    def _rollback(self) -> None:
        """Roll the outermost transaction back, unless SQLite already did
        (an I/O error or a full disk ends the transaction by itself)."""
        if self.in_transaction:
            self.execute("ROLLBACK")


#: marks a ``with`` level that is one of apsw's savepoints
_SAVEPOINT = object()

#: a Ctrl-Z (SIGTSTP) came while a write transaction of this process was
#: open: the process stops when the last one ends (:meth:`WriteGate.release`)
_STOP_PENDING = False


#: how the SIGTSTP handler stops the process once the gates are given back
#: (``None``: SIGTSTP's default action)
_STOP: Callable[[int, Any], Any] | None = None


def stop_gives_back_the_gate(stop: Callable[[int, Any], Any] | None = None) -> None:
    """Make Ctrl-Z (``SIGTSTP``) give back this process's gates before the
    process stops, so that other processes' writers go on while it is
    stopped instead of failing after their busy timeout.

    With no write transaction of this process open, the handler gives back
    every ``flock`` kept between transactions (the turn, :data:`HOLD_S`),
    keeps every gate's thread lock while stopped (so no thread of this
    process takes one again), and stops the process for real; on
    ``SIGCONT`` it goes on, taking the gate again at its next write. With
    one open, the process stops as soon as the last one ends
    (:meth:`WriteGate.release`). Only the main thread may install a
    handler: elsewhere nothing changes. A process stopped by ``SIGSTOP``
    (not catchable) still holds what it held.

    Args:
        stop: the handler that stops the process (Textual's driver's, which
            also restores the terminal); ``None``: ``SIGTSTP``'s default
            action, the handler re-installed once the process goes on.
    """
    global _STOP
    if threading.current_thread() is threading.main_thread():
        if stop is not _on_sigtstp:  # installed already: its stop stays
            _STOP = stop
        signal.signal(signal.SIGTSTP, _on_sigtstp)


def _on_sigtstp(signum: int, frame: Any) -> None:
    global _STOP_PENDING
    gates = list(_GATES.values())  # no _GATES_LOCK: this thread may hold it
    taken: list[WriteGate] = []
    try:
        for gate in gates:
            # a reaper holds it for microseconds; a transaction longer
            if not gate._mutex.acquire(timeout=0.01):
                break  # another thread is inside a transaction
            taken.append(gate)
            if gate._depth:
                break  # this thread (the main one) is inside a transaction
        else:
            _STOP_PENDING = False
            for gate in taken:
                # not only a kept flock: one taken by an acquire() the signal
                # cut before it counted its depth (a transaction that then runs
                # unordered by the gate; SQLite's own lock still guards it)
                gate._unlock()
            if _STOP is not None:
                _STOP(signum, frame)  # returns once the process goes on
                return
            signal.signal(signal.SIGTSTP, signal.SIG_DFL)
            try:
                os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
            finally:
                signal.signal(signal.SIGTSTP, _on_sigtstp)
            return
        _STOP_PENDING = True  # the transaction's end stops the process
    finally:
        for gate in taken:
            gate._mutex.release()


def describe_holder(lock_path: Path) -> str | None:
    """Who holds the ``flock`` on ``lock_path`` (a gate's lock file), for an
    error message: ``"held by pid 1234 (flowdesk run digest ...), stopped
    (SIGSTOP or Ctrl-Z): resume it with `kill -CONT 1234` (or `fg` in its
    shell)"``. Read from ``/proc/locks``
    (Linux), so only when a wait has already failed, never per write.

    Returns:
        the sentence, or ``None`` when ``/proc/locks`` is missing or
        unreadable, the lock file is gone, or no process holds it (a writer
        outside the gate holds SQLite's lock instead).
    """
    try:
        st = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"; a waiter's line
        # is "1: -> FLOCK ...", so its second field is not FLOCK either
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5] != dev or not fields[4].isdigit():
            continue
        pid = int(fields[4])
        if pid == os.getpid():
            continue
        return _said(pid)
    return None


def _said(pid: int) -> str:
    """``held by pid N (its command line)``, and what to do when it is stopped."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    from desktop_app.errors import redact  # a password in a URL stays out

    shown = " ".join(redact(a) for a in argv)
    if len(shown) > 80:  # a long path says least: keep the names of files
        shown = " ".join(
            "\u2026/" + a.rsplit("/", 1)[1] if a.startswith("/") and "/" in a[1:] else a
            for a in (redact(a) for a in argv)
        )
    if len(shown) > 80:
        shown = shown[:79] + "\u2026"
    said = f"held by pid {pid}" + (f" ({shown})" if shown else "")
    return said + (f", {STOPPED.format(pid=pid)}" if is_stopped(pid) else "")
