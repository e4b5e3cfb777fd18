"""Opening the one SQLite file with apsw, and turning apsw errors into ours.

Choices (see README, "The SQLite file"):

* WAL journal, so readers (the UI, ``flowdesk runs``) never block the writer.
* ``busy_timeout`` in seconds (default 10 s, not apsw's 100 ms): a second
  process waits for the write lock instead of failing with "database is locked".
* ``foreign_keys=ON``.
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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import apsw

from desktop_app.errors import DatabaseOpenError, StoreError

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
SQLITE_MAGIC = b"SQLite format 3\x00"


def translate(exc: apsw.Error, path: str | os.PathLike[str] | None = None) -> StoreError:
    """A typed :class:`StoreError` with advice for an apsw error."""
    where = f" ({path})" if path else ""
    if isinstance(exc, apsw.BusyError):
        return StoreError(
            f"the database{where} stayed locked by another process past the busy timeout; "
            "nothing was written. Retry, or raise FLOWDESK_BUSY_TIMEOUT_S."
        )
    if isinstance(exc, apsw.FullError):
        return StoreError(
            f"the disk holding the database{where} is full; nothing was written. "
            "Free some space and resume the run."
        )
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreError(
            f"the database{where} is read-only; nothing was written. "
            "Check the file's and its folder's permissions, or pass --db PATH."
        )
    if isinstance(exc, apsw.NotADBError):
        return DatabaseOpenError(
            f"{path or 'the file'} is not a SQLite database; it was left untouched. "
            "Pass --db with another path."
        )
    if isinstance(exc, apsw.CorruptError):
        return StoreError(
            f"the database{where} is corrupt: {exc}. Restore it from a backup; Flowdesk "
            "did not write to it."
        )
    if isinstance(exc, apsw.CantOpenError):
        return DatabaseOpenError(
            f"cannot open the database{where}: check that its folder exists and is writable, "
            "or pass --db PATH."
        )
    return StoreError(f"database error{where}: {exc}")


def _create_private(path: Path) -> None:
    """Create an empty file with mode 0600 if it does not exist."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except (FileExistsError, IsADirectoryError):
        return
    except FileNotFoundError as exc:
        raise DatabaseOpenError(
            f"cannot create the database {path}: its folder does not exist. "
            "Create the folder or pass --db PATH."
        ) from exc
    except PermissionError as exc:
        raise DatabaseOpenError(
            f"cannot create the database {path}: the folder is not writable. "
            "Pass --db with a path in a writable folder."
        ) from exc
    os.close(fd)


def _check_header(path: Path) -> None:
    """Refuse a non-empty file that is not SQLite, before SQLite touches it."""
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except PermissionError as exc:
        raise DatabaseOpenError(
            f"cannot read the database {path}: permission denied. Fix its permissions "
            "or pass --db PATH."
        ) from exc
    except IsADirectoryError as exc:
        raise DatabaseOpenError(
            f"{path} is a folder, not a database file; pass --db with a file path."
        ) from exc
    if head and head != SQLITE_MAGIC:
        raise DatabaseOpenError(
            f"{path} is not a SQLite database; it was left untouched. Pass --db with another path."
        )


def open_connection(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "FULL",
    busy_timeout_s: float = 10.0,
    fullfsync: bool = False,
    create: bool = True,
) -> apsw.Connection:
    """Open (and create, mode 0600) the SQLite file with Flowdesk's pragmas.

    Args:
        path: the database file.
        synchronous: SQLite ``synchronous`` pragma; ``FULL`` by default.
        busy_timeout_s: seconds to wait for a lock before failing.
        fullfsync: set ``PRAGMA fullfsync`` (macOS durability).
        create: create the file when missing.

    Raises:
        DatabaseOpenError: missing/unwritable folder, not a SQLite file.
        StoreError: any other failure.
    """
    p = Path(path)
    if create:
        _create_private(p)
    elif not p.exists():
        raise DatabaseOpenError(f"no database at {p}; run `flowdesk --db {p} db apply` first.")
    _check_header(p)
    try:
        if p.stat().st_size == 0:
            os.chmod(p, 0o600)  # an empty file we are about to make a database: keep it private
    except OSError:
        pass
    try:
        conn = apsw.Connection(str(p))
        conn.set_busy_timeout(int(busy_timeout_s * 1000))
        if conn.execute("PRAGMA page_count").fetchall()[0][0] == 0:
            # only settable before the first table: lets pruning give space back
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
        if str(mode).lower() != "wal":
            raise StoreError(f"could not switch {p} to WAL mode (got {mode!r}).")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        if fullfsync:
            conn.execute("PRAGMA fullfsync=ON")
        conn.transaction_mode = "IMMEDIATE"
    except apsw.Error as exc:
        raise translate(exc, p) from exc
    return conn
