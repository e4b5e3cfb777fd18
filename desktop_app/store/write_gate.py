"""One writer at a time across processes: a blocking ``flock`` around each
SQLite write transaction, so a waiting writer wakes the moment the holder is
done instead of sleeping through SQLite's busy back-off.

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
  first write, never deleted, holding no data) for the other processes: the
  kernel wakes a waiter when the holder unlocks, and releases the lock of a
  process that dies (``kill -9``), so a crash never leaves it held.
* SQLite's own locks still decide: the gate only orders Flowdesk's writers.
  A writer that does not take it (an older Flowdesk, the ``sqlite3`` shell)
  still works: the gated writers wait for it in the busy handler as before.
  The gate is always taken before SQLite's write lock and never while waiting
  for one, so the two cannot deadlock.
* Where ``flock`` is refused (``ENOLCK`` on some network file systems, a
  folder the lock file cannot be created in), the file is written without the
  gate, as before it existed, and that is logged once per file.

A waiter blocked on another process's gate waits as long as that process's
write transaction lasts: a process stopped (``SIGSTOP``, Ctrl-Z) inside one
holds the others' writes until it continues or ends, where without the gate
they would fail after the busy timeout. The same lock idea as
``fcntl``-based lock files in pip's and Mercurial's repositories; the wait
order is the kernel's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

log = logging.getLogger(__name__)

#: the lock file's name is the database's with this appended
LOCK_SUFFIX = "-flowdesk.lock"


class WriteGate:
    """This process's gate for one database file (shared by all its
    connections to that file, so that two connections of one process never
    wait for each other's ``flock``).

    Args:
        db: the database file; the lock file is ``db`` + :data:`LOCK_SUFFIX`.
    """

    def __init__(self, db: Path) -> None:
        self.lock_path = Path(f"{db}{LOCK_SUFFIX}")
        self._mutex = threading.RLock()
        self._depth = 0  # nesting of this process's holders (one thread)
        self._fd: int | None = None
        self.disabled = False  # flock refused here: write as before, logged once

    def acquire(self, timeout_s: float) -> None:
        """Take the gate: this process's other writers wait up to
        ``timeout_s`` seconds, other processes' writers until it is released.

        Raises:
            apsw.BusyError: another thread of this process held it longer
                than ``timeout_s`` (callers translate it as SQLite's own).
        """
        mutex = self._mutex
        if not mutex.acquire(blocking=False) and not mutex.acquire(timeout=timeout_s):
            raise apsw.BusyError("database is locked (another thread's write transaction)")
        if self._depth == 0 and not self.disabled:
            try:
                self._lock_file()
            except OSError as exc:
                self._disable(exc)
        self._depth += 1

    def release(self) -> None:
        """Give the gate back (the ``flock`` too, when the outermost holder)."""
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None and not self.disabled:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._mutex.release()

    def _lock_file(self) -> None:
        """``flock`` the lock file, opened once per process (0600 like the
        database; O_CLOEXEC, Python's default, so a program this process
        starts never holds it). Not checked for deletion at every write (a
        ``stat`` would cost a third of the gate): a lock file deleted while
        processes run only loses the turn-taking between the processes that
        opened it before and after, until they restart."""
        if self._fd is None:
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

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


# (st_dev, st_ino) of each database file -> this process's gate for it
_GATES: dict[tuple[int, int], WriteGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(db: Path, key: tuple[int, int]) -> WriteGate:
    """The one gate of this process for the database file identified by
    ``key`` (its ``(st_dev, st_ino)``), made on first use."""
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = WriteGate(db)
        return gate


def _after_fork_in_child() -> None:
    for gate in _GATES.values():
        gate._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class GatedConnection(apsw.Connection):
    """An ``apsw.Connection`` whose outermost ``with conn:`` (a write
    transaction: ``BEGIN IMMEDIATE`` with Flowdesk's ``transaction_mode``)
    holds a :class:`WriteGate` until it commits or rolls back. Without a gate
    (:attr:`gate` ``None``) it is a plain connection."""

    gate: WriteGate | None = None
    gate_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: per ``with`` level: the gate it took (the outermost) or None
        self._held: list[WriteGate | None] = []

    def __enter__(self) -> apsw.Connection:
        gate = self.gate
        if gate is None or self.in_transaction:  # no gate, or a savepoint
            conn = apsw.Connection.__enter__(self)
            self._held.append(None)
            return conn
        gate.acquire(self.gate_timeout_s)
        try:
            conn = apsw.Connection.__enter__(self)
        except BaseException:
            gate.release()
            raise
        self._held.append(gate)
        return conn

    def __exit__(
        self,
        etype: type[BaseException] | None,
        evalue: BaseException | None,
        etb: TracebackType | None,
    ) -> bool:
        gate = self._held.pop()
        try:
            return apsw.Connection.__exit__(self, etype, evalue, etb)
        finally:
            if gate is not None:
                gate.release()
