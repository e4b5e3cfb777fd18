"""Opening the one SQLite file with apsw, and turning apsw errors into ours.

Choices (see README, "The SQLite file"):

* WAL journal, so readers (the UI, ``flowdesk runs``) never block the writer.
* A busy wait of ``busy_timeout_s`` seconds (default 10 s, not apsw's 100 ms):
  a second process waits for the write lock instead of failing with "database
  is locked". The wait is a Python busy handler (:class:`BusyWait`) that
  sleeps with the GIL released: SQLite's own ``busy_timeout`` sleeps inside
  apsw's ``with conn:`` (``BEGIN IMMEDIATE``) while holding the GIL, so a
  second store in the same process, which holds the write lock and only needs
  the GIL to commit, could not finish until the waiter gave up.
* ``foreign_keys=ON``.
* ``cell_size_check=ON``: each page is checked as SQLite loads it, so a page
  damaged on disk whose header still looks valid raises "database disk image
  is malformed" (:class:`~desktop_app.errors.DatabaseCorruptError`) instead
  of reading as a page without rows. It costs nothing measurable
  (docs/measurements.md); a full ``quick_check`` is left to ``flowdesk doctor``.
* ``journal_size_limit`` 4 MiB, and after a full disk (ENOSPC) the store
  truncates the WAL (``wal_checkpoint(TRUNCATE)``) at its first commit once
  space allows, so freed space is not kept by a WAL left at its full size.
  A new process does the same when it opens its first connection to a file
  whose ``-wal`` is larger than 4 MiB (left by a process that died) and no
  other connection holds the log.
* ``transaction_mode = "IMMEDIATE"``: every ``with conn:`` write transaction
  starts with ``BEGIN IMMEDIATE``, so a read-then-write transaction never
  fails half-way on a lock upgrade.
* ``synchronous=FULL`` by default: with NORMAL a commit can roll back after a
  power loss and a finished step would run again. ``fullfsync`` (macOS) is an
  opt-in setting.
* ``auto_vacuum=INCREMENTAL`` on a new file, so space freed by pruning and
  deleting runs goes back to the file system (``SqliteCheckpointStore.vacuum``).
* The file is created with mode 0600 before SQLite opens it; SQLite gives its
  ``-wal`` and ``-shm`` files the same mode.
* The header of an existing file is read with Python (to refuse a text file
  SQLite would take for an empty database) only while no connection to that
  file is open in this process. Closing any descriptor of a file drops every
  POSIX lock the process holds on it; with SQLite's locks gone, another
  process's reader can delete the ``-wal`` still being written. Once a
  connection exists the header is checked through SQLite only.
* No ``mmap_size`` and SQLite's default ``cache_size``: with several
  processes on one file, another process's commit makes SQLite drop a
  connection's whole page cache whatever its size, and pages read through a
  mapping are read again all the same (the pages a step reads are mostly in
  the ``-wal``, read with ``pread`` either way); both measured without gain
  (docs/measurements.md, 2026-12-03, 2026-12-04 and 2026-12-05 05:56), and a
  mapping turns an I/O error into ``SIGBUS`` instead of an error SQLite
  reports. What several processes gain from is fewer changes of writer: the
  write gate's turns (:mod:`desktop_app.store.write_gate`).
* No weak reference with a callback ever points at a connection: the
  registry of open connections holds plain ``weakref.ref`` objects and the
  busy handler is an attribute of the connection. apsw 3.54.1.0's
  ``Connection`` deallocator calls the weak references' callbacks while the
  dying connection is still tracked by the cycle collector; Python code run
  there (a ``WeakSet``'s or ``WeakKeyDictionary``'s clean-up) can start a
  collection, in this thread or in another one that takes the GIL
  meanwhile, which finds the connection with no reference left, takes it for
  garbage and deallocates it again: a segmentation fault, there or later
  anywhere in the process (reproduced by tests/test_connection_teardown.py).
  Without a callback nothing runs there.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import weakref
from pathlib import Path
from typing import Literal

import apsw

from desktop_app.errors import (
    DatabaseCorruptError,
    DatabaseLockedError,
    DatabaseMissingError,
    DatabaseNotAFileError,
    DatabaseOpenError,
    DatabaseReadOnlyError,
    DiskFullError,
    StoreError,
    WalMissingError,
)
from desktop_app.store.write_gate import (
    LOCK_SUFFIX,
    GatedConnection,
    ThreadBusyError,
    describe_holder,
    gate_for,
)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_LIMIT_BYTES = 4 * 2**20


def untranslated(exc: BaseException, path: str | os.PathLike[str] | None) -> StoreError | None:
    """:func:`translate` of ``exc`` when it is an apsw error that got past the
    stores' guards (a read outside them), for the command line's last
    resort; ``None`` for any other exception (a bug: its traceback stays).
    ``path``: the SQLite file in use, ``None`` on PostgreSQL or unknown."""
    return translate(exc, path) if isinstance(exc, apsw.Error) else None


def translate(exc: apsw.Error, path: str | os.PathLike[str] | None = None) -> StoreError:
    """A typed :class:`StoreError` with advice for an apsw error."""
    where = f" ({path})" if path else ""
    if isinstance(exc, apsw.BusyError):
        # only now, the wait over: who holds the write gate (/proc/locks)
        holder = describe_holder(Path(f"{path}{LOCK_SUFFIX}")) if path else None
        who = "another process"
        if isinstance(exc, ThreadBusyError):  # the gate's own wait, between this process's threads
            who = "another thread of this process"
        return DatabaseLockedError(
            f"the database{where} stayed locked by {who} past the busy timeout"
            + (f" ({holder})" if holder else "")
            + "; nothing was written."
            + DatabaseLockedError.ADVICE
        )
    if isinstance(exc, apsw.FullError):
        return DiskFullError(f"the database {path}" if path else "the database")
    if getattr(exc, "extendedresult", None) == apsw.SQLITE_IOERR_SHMSIZE:
        # the -shm index could not grow: ENOSPC (SQLite says only "disk I/O error")
        return DiskFullError(f"the database's index {path}-shm" if path else "the database")
    if isinstance(exc, apsw.IOError) and path is not None and _wal_deleted(Path(path), exc):
        return WalMissingError(
            f"the database's write-ahead log {path}-wal is missing or empty although its "
            f"index {path}-shm says it holds commits: it was deleted while the database was "
            "open (SQLite said only 'disk I/O error'). Commits since the last checkpoint were "
            "in that file; nothing more was written here. Quit every Flowdesk process "
            f"using {path} normally (the app, `flowdesk agent`; do not kill them): the one "
            "that still has the deleted log open writes its commits back into the database "
            "as it exits. Then open it again. If no such process runs any more, restore a "
            f"backup, or delete {path}-shm to open the database as of its last checkpoint "
            "(later commits are lost). Never delete the -wal or -shm file of an open database."
        )
    if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError)) and on_read_only_fs(path):
        return DatabaseReadOnlyError(str(path), str(exc))
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreError(
            f"the database{where} is read-only; nothing was written. "
            "Check the file's and its folder's permissions, or use another path (--db PATH)."
        )
    if isinstance(exc, apsw.NotADBError):
        return DatabaseOpenError(
            f"{path or 'the file'} is not a SQLite database; it was left untouched. "
            "Use another path (--db PATH)."
        )
    if isinstance(exc, apsw.CorruptError):
        return DatabaseCorruptError(str(path) if path else "", str(exc))
    if isinstance(exc, apsw.CantOpenError):
        return DatabaseOpenError(
            f"cannot open the database{where}: check that its folder exists and is writable, "
            "or use another path (--db PATH)."
        )
    return StoreError(f"database error{where}: {exc}")


def on_read_only_fs(path: str | os.PathLike[str] | None) -> bool:
    """``path`` (or, when it is missing, its folder) is on a file system
    mounted read-only (``statvfs``'s ``ST_RDONLY``: writing there fails
    with ``EROFS``); ``False`` for ``None`` or a path that cannot be stat'ed."""
    if path is None:
        return False
    folder = os.path.dirname(os.path.abspath(path))
    for candidate in (os.fspath(path), folder):
        try:
            return bool(os.statvfs(candidate).f_flag & os.ST_RDONLY)
        except OSError:
            continue
    return False


def _wal_deleted(path: Path, exc: apsw.IOError) -> bool:
    """A short read of a missing or empty ``-wal`` while its ``-shm`` index
    exists: the WAL was deleted under an open database (a new connection
    recreates it empty). Stat only: never opens the files (module docstring)."""
    if getattr(exc, "extendedresult", None) != apsw.SQLITE_IOERR_SHORT_READ:
        return False
    try:
        wal_size = Path(f"{path}-wal").stat().st_size
    except FileNotFoundError:
        wal_size = 0
    except OSError:
        return False
    return wal_size == 0 and Path(f"{path}-shm").exists()


#: what a file that is not a regular file is, for :func:`_refuse_non_file`
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _refuse_non_file(path: Path) -> None:
    """Refuse ``path`` unless it is a regular file (a symlink to one counts)
    or absent, with ``os.stat`` only: opening a FIFO blocks until a writer
    comes, so it is never opened.

    Raises:
        DatabaseNotAFileError: a folder, FIFO, socket or device (exit 2).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:  # absent, or unreadable: SQLite's own open says which
        return
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise DatabaseNotAFileError(
        f"{path} is {kind}, not a database file; nothing was opened. "
        "Use the path of a database file, or of a new one (--db PATH)."
    )


def _private_companions(path: Path) -> None:
    """Make the ``-wal`` and ``-shm`` files of the open WAL database
    ``path`` mode 0600 when the group or others may read them: SQLite
    creates them with the database file's own mode (and gives an empty one
    that mode again as it opens it), so a database copied in as 0644 got
    world-readable copies of its pages. They live as long as a connection
    is open, so once per open is enough. Best effort: a file owned by
    another user, or a read-only medium, is left as it is (``doctor``
    reports the database's own mode)."""
    for suffix in ("-wal", "-shm"):
        name = f"{path}{suffix}"
        try:
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)
        except OSError:  # gone meanwhile (another connection closed), or not ours
            pass


def _create_private(path: Path) -> None:
    """Create an empty file with mode 0600 if it does not exist."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except (FileExistsError, IsADirectoryError):
        return
    except FileNotFoundError as exc:
        raise DatabaseOpenError(
            f"cannot create the database {path}: its folder does not exist. "
            "Create the folder or use another path (--db PATH)."
        ) from exc
    except PermissionError as exc:
        raise DatabaseOpenError(
            f"cannot create the database {path}: the folder is not writable. "
            "Use a path in a writable folder (--db PATH)."
        ) from exc
    except OSError as exc:  # a read-only file system, a full disk, a file as a folder
        raise DatabaseOpenError(
            f"cannot create the database {path}: {exc.strerror or exc}. "
            "Use a path in a writable folder (--db PATH)."
        ) from exc
    os.close(fd)


# (st_dev, st_ino) of each database file -> this process's connections to it,
# as plain weak references: no callback (see the module docstring, last point);
# the dead ones are dropped when the file's list is read
_OPEN: dict[tuple[int, int], list[weakref.ref[apsw.Connection]]] = {}
_OPEN_LOCK = threading.Lock()
# SQLite's own busy back-off (milliseconds), then 100 ms steps
_DELAYS_S = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.025, 0.025, 0.05, 0.05)


class BusyWait:
    """Busy handler: retry a locked database for up to ``timeout_s`` seconds.

    Sleeps with ``time.sleep`` (GIL released) using SQLite's back-off
    (1 ms rising to 100 ms). ``calls`` is SQLite's count of earlier calls for
    the same lock event (0 on the first).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._started = 0.0

    def __call__(self, calls: int) -> bool:
        now = time.monotonic()
        if calls == 0:
            self._started = now
        left = self.timeout_s - (now - self._started)
        if left <= 0:
            return False
        time.sleep(min(left, _DELAYS_S[calls] if calls < len(_DELAYS_S) else 0.1))
        return True


def busy_timeout_s(conn: apsw.Connection) -> float | None:
    """Seconds ``conn`` waits for a lock (None: not opened by :func:`open_connection`)."""
    handler = getattr(conn, "busy_wait", None)
    return handler.timeout_s if isinstance(handler, BusyWait) else None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _live(conn: apsw.Connection) -> bool:
    """Whether ``conn`` is still open. Safe to call from any thread: a
    connection another thread is using right now is open (apsw refuses even
    an attribute read then, with ``ThreadingViolationError``)."""
    try:
        conn.filename  # noqa: B018 - raises once closed
    except apsw.ConnectionClosedError:
        return False
    except apsw.ThreadingViolationError:
        return True
    return True


def connections_open(path: str | os.PathLike[str]) -> int:
    """How many open connections this process has to the file at ``path``."""
    key = _identity(Path(path))
    with _OPEN_LOCK:
        return 0 if key is None else sum(1 for c in _registered(key) if _live(c))


def _registered(key: tuple[int, int]) -> list[apsw.Connection]:
    """The connections of this process to the file ``key`` not yet freed
    (call under ``_OPEN_LOCK``); forgets the freed ones."""
    refs = _OPEN.get(key)
    if refs is None:
        return []
    conns = [c for c in (r() for r in refs) if c is not None]
    if len(conns) < len(refs):
        refs[:] = [weakref.ref(c) for c in conns]
    return conns


def _open_registered(path: Path, vfs: str | None = None) -> GatedConnection:
    """Check the header (only if no connection to the file is open in this
    process), open the connection and record it, under one lock so that two
    threads opening their first connections cannot interleave."""
    with _OPEN_LOCK:
        key = _identity(path)
        if key is None or not any(_live(c) for c in _registered(key)):
            _check_header(path)
            try:
                st = path.stat()
                if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                    os.chmod(path, 0o600)  # an empty file we are about to make a database
            except OSError:
                pass
        conn = GatedConnection(str(path)) if vfs is None else GatedConnection(str(path), vfs=vfs)
        key = _identity(path)  # SQLite may just have created the file
        if key is not None:
            _OPEN.setdefault(key, []).append(weakref.ref(conn))  # no callback: see above
        return conn


def _check_header(path: Path) -> None:
    """Refuse a non-empty file that is not SQLite, before SQLite touches it.

    Only called while this process has no connection to the file (see the
    module docstring): reading it then cannot drop SQLite's locks."""
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except PermissionError as exc:
        raise DatabaseOpenError(
            f"cannot read the database {path}: permission denied. Fix its permissions "
            "or use another path (--db PATH)."
        ) from exc
    if head and head != SQLITE_MAGIC:
        raise DatabaseOpenError(
            f"{path} is not a SQLite database; it was left untouched. Use another path (--db PATH)."
        )


def _reclaim_wal(conn: GatedConnection, path: Path) -> None:
    """Give back the space of a ``-wal`` left larger than :data:`WAL_LIMIT_BYTES`
    (by a process that died after a full disk stopped its checkpoints):
    ``wal_checkpoint(TRUNCATE)``, once, as the process's first connection.

    It never waits: without a busy handler, a checkpoint another connection
    blocks (a reader, a writer in another process) is left to that process,
    whose own commits reset the log. On a disk still full it writes nothing
    and the first write reports the full disk (:class:`DiskFullError`)."""
    try:
        if os.stat(f"{path}-wal").st_size <= WAL_LIMIT_BYTES:
            return
    except OSError:  # no -wal file: nothing to give back
        return
    conn.set_busy_handler(None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except (apsw.BusyError, apsw.LockedError, apsw.FullError):
        pass  # see the docstring: another process holds it, or no space yet
    finally:
        conn.set_busy_handler(conn.busy_wait)


def open_connection(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "FULL",
    busy_timeout_s: float = 10.0,
    fullfsync: bool = False,
    create: bool = True,
    vfs: str | None = None,
    write_gate: bool = True,
) -> apsw.Connection:
    """Open (and create, mode 0600) the SQLite file with Flowdesk's pragmas.

    Args:
        path: the database file.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` by default.
        busy_timeout_s: seconds to wait for a lock before failing.
        fullfsync: set ``PRAGMA fullfsync`` (macOS durability).
        create: create the file when missing.
        vfs: name of a registered SQLite VFS (default: the platform's); the
            test suite simulates power loss and full disks with one.
        write_gate: take this process's :class:`~desktop_app.store.write_gate.WriteGate`
            (a ``flock`` on ``<path>-flowdesk.lock``) around every write
            transaction, so that several processes writing the file take
            turns instead of polling SQLite's lock.

    Raises:
        DatabaseNotAFileError: ``path`` is a folder, FIFO, socket or device.
        DatabaseOpenError: missing/unwritable folder, not a SQLite file.
        StoreError: any other failure.
    """
    p = Path(path)
    _refuse_non_file(p)
    if create:
        _create_private(p)
    elif not p.exists():
        raise DatabaseMissingError(str(p))
    first = connections_open(p) == 0
    try:
        conn = _open_registered(p, vfs)
    except apsw.Error as exc:
        raise translate(exc, p) from exc
    try:
        # an attribute, not a weak-keyed registry: see the module docstring
        conn.busy_wait = BusyWait(busy_timeout_s)
        key = _identity(p)
        if write_gate and key is not None:
            conn.gate = gate_for(p, key)
            conn.gate_timeout_s = busy_timeout_s
        conn.set_busy_handler(conn.busy_wait)
        if conn.execute("PRAGMA page_count").fetchall()[0][0] == 0:
            # only settable before the first table: lets pruning give space back
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
        if str(mode).lower() != "wal":
            raise StoreError(f"could not switch {p} to WAL mode (got {mode!r}).")
        _private_companions(p)  # open now, whatever mode SQLite gave them
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        # a damaged page whose header still looks valid is reported as corrupt
        # when read, not taken as holding no rows (a run "without" its checkpoint)
        conn.execute("PRAGMA cell_size_check=ON")
        # a WAL that grew (a long reader, a full disk) shrinks back at its next reset
        conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        if fullfsync:
            conn.execute("PRAGMA fullfsync=ON")
        conn.transaction_mode = "IMMEDIATE"
        if first:
            _reclaim_wal(conn, p)
    except (apsw.Error, StoreError) as exc:
        conn.close()
        if isinstance(exc, StoreError):
            raise
        raise translate(exc, p) from exc
    return conn
