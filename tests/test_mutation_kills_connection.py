"""Opening the SQLite file and explaining its errors (store/connection.py).

The fault and power-loss tests meet these paths in worker processes, where
no in-process test sees them: which typed error and advice each apsw error
becomes, when a bare "disk I/O error" means a deleted write-ahead log, the
busy handler's back-off and give-up point, and the count of this process's
open connections to a file.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from desktop_app.errors import (
    DatabaseCorruptError,
    DatabaseLockedError,
    DatabaseNotAFileError,
    DatabaseOpenError,
    DiskFullError,
    StoreError,
    WalMissingError,
)
from desktop_app.store import connection
from desktop_app.store.connection import (
    BusyWait,
    busy_timeout_s,
    connections_open,
    open_connection,
    translate,
)

# -- translate: one typed error with advice per apsw error --------------------


_BUSY = (
    "stayed locked by another process past the busy timeout; nothing was written. "
    "Retry, or raise FLOWDESK_BUSY_TIMEOUT_S."
)
_READ_ONLY = (
    "is read-only; nothing was written. Check the file's and its folder's permissions, "
    "or use another path (--db PATH)."
)
_CORRUPT = (
    "is corrupt: database disk image is malformed. Restore it from a backup; "
    "what met the damage wrote nothing."
)
_CANT_OPEN = ": check that its folder exists and is writable, or use another path (--db PATH)."


@pytest.mark.parametrize(
    ("exc", "kind", "with_path", "without_path"),
    [
        (
            apsw.BusyError("database is locked"),
            DatabaseLockedError,
            f"the database (/data/f.db) {_BUSY}",
            f"the database {_BUSY}",
        ),
        (
            apsw.ReadOnlyError("attempt to write a readonly database"),
            StoreError,
            f"the database (/data/f.db) {_READ_ONLY}",
            f"the database {_READ_ONLY}",
        ),
        (
            apsw.CorruptError("database disk image is malformed"),
            DatabaseCorruptError,
            f"the database (/data/f.db) {_CORRUPT}",
            f"the database {_CORRUPT}",
        ),
        (
            apsw.CantOpenError("unable to open database file"),
            DatabaseOpenError,
            f"cannot open the database (/data/f.db){_CANT_OPEN}",
            f"cannot open the database{_CANT_OPEN}",
        ),
        (
            apsw.SQLError("no such table: runs"),
            StoreError,
            "database error (/data/f.db): no such table: runs",
            "database error: no such table: runs",
        ),
    ],
    ids=["busy", "read-only", "corrupt", "cant-open", "other"],
)
def test_each_apsw_error_becomes_a_typed_error_naming_the_database(
    exc, kind, with_path, without_path
):
    # the whole message: it is the advice the user acts on
    err = translate(exc, "/data/f.db")
    assert type(err) is kind and str(err) == with_path
    bare = translate(exc)
    assert type(bare) is kind and str(bare) == without_path


def test_not_a_database_names_the_file_and_what_to_pass():
    err = translate(apsw.NotADBError("file is not a database"), "/data/notes.txt")
    assert type(err) is DatabaseOpenError
    assert str(err) == (
        "/data/notes.txt is not a SQLite database; it was left untouched. "
        "Use another path (--db PATH)."
    )
    assert str(translate(apsw.NotADBError("x"))).startswith("the file is not a SQLite database")


def test_a_full_disk_is_a_disk_full_pause_naming_the_database():
    err = translate(apsw.FullError("database or disk is full"), "/data/f.db")
    assert type(err) is DiskFullError
    assert "the disk holding the database /data/f.db is full" in str(err)
    bare = translate(apsw.FullError("database or disk is full"))
    assert type(bare) is DiskFullError
    assert "the disk holding the database is full" in str(bare)


# -- a deleted write-ahead log behind a bare "disk I/O error" -----------------


def _short_read() -> apsw.IOError:
    exc = apsw.IOError("disk I/O error")
    exc.extendedresult = apsw.SQLITE_IOERR_SHORT_READ  # what SQLite sets on a short read
    return exc


@pytest.mark.parametrize("wal", ["missing", "empty"])
def test_short_read_with_the_wal_gone_and_its_index_left_is_a_wal_missing_error(tmp_path, wal):
    db = tmp_path / "f.db"
    db.write_bytes(b"")
    Path(f"{db}-shm").write_bytes(b"\0" * 32)
    if wal == "empty":
        Path(f"{db}-wal").write_bytes(b"")
    err = translate(_short_read(), db)
    assert type(err) is WalMissingError
    assert str(err) == (
        f"the database's write-ahead log {db}-wal is missing or empty although its "
        f"index {db}-shm says it holds commits: it was deleted while the database was "
        "open (SQLite said only 'disk I/O error'). Commits since the last checkpoint were "
        "in that file; nothing more was written here. Quit every Flowdesk process "
        f"using {db} normally (the app, `flowdesk agent`; do not kill them): the one "
        "that still has the deleted log open writes its commits back into the database "
        "as it exits. Then open it again. If no such process runs any more, restore a "
        f"backup, or delete {db}-shm to open the database as of its last checkpoint "
        "(later commits are lost). Never delete the -wal or -shm file of an open database."
    )


def test_short_read_with_a_wal_that_holds_data_is_a_plain_error(tmp_path):
    db = tmp_path / "f.db"
    Path(f"{db}-shm").write_bytes(b"\0" * 32)
    Path(f"{db}-wal").write_bytes(b"frames")
    err = translate(_short_read(), db)
    assert type(err) is StoreError and "disk I/O error" in str(err)


def test_short_read_without_an_index_file_is_a_plain_error(tmp_path):
    db = tmp_path / "f.db"
    err = translate(_short_read(), db)
    assert type(err) is StoreError and "disk I/O error" in str(err)


def test_another_io_error_with_the_wal_gone_is_a_plain_error(tmp_path):
    db = tmp_path / "f.db"
    Path(f"{db}-shm").write_bytes(b"\0" * 32)
    exc = apsw.IOError("disk I/O error")
    exc.extendedresult = apsw.SQLITE_IOERR_READ
    assert type(translate(exc, db)) is StoreError
    assert type(translate(apsw.IOError("disk I/O error"), db)) is StoreError
    assert type(translate(_short_read())) is StoreError  # no path: nothing to look at


def test_a_wal_that_cannot_be_examined_is_a_plain_error(tmp_path):
    db = tmp_path / "f.db"
    Path(f"{db}-wal").mkdir(parents=True)  # stat works: a folder, not a log
    Path(f"{db}-shm").write_bytes(b"")
    assert type(translate(_short_read(), tmp_path / "nofolder" / "x" / "f.db")) is StoreError
    blocked = tmp_path / "file-not-folder"
    blocked.write_bytes(b"")
    # "<file>/f.db-wal": stat fails with NotADirectoryError (an OSError, not FileNotFound)
    assert type(translate(_short_read(), blocked / "f.db")) is StoreError


# -- the busy handler: SQLite's back-off, then 100 ms steps, up to the timeout -


class FakeTime:
    """Stand-in for the ``time`` module: a monotonic clock that moves when slept."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(connection, "time", fake)
    return fake


def test_busy_wait_backs_off_like_sqlite_then_in_100_ms_steps(fake_time):
    wait = BusyWait(30.0)
    for calls in range(14):
        assert wait(calls) is True
    assert fake_time.slept == pytest.approx(
        [0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.025, 0.025, 0.05, 0.05, 0.1, 0.1, 0.1]
    )


def test_busy_wait_gives_up_once_the_timeout_has_passed(fake_time):
    wait = BusyWait(5.0)
    assert wait(0) is True
    fake_time.now += 4.5  # 0.5 s left: still waiting, for no longer than what is left
    assert wait(20) is True
    assert fake_time.slept[-1] == pytest.approx(0.1)
    fake_time.now = 100.0 + 5.0  # exactly the timeout after the first call
    assert wait(21) is False
    fake_time.now += 1.0
    assert wait(22) is False


def test_busy_wait_sleeps_no_longer_than_the_time_left(fake_time):
    wait = BusyWait(0.05)
    assert wait(0) is True
    fake_time.now = 100.0 + 0.04
    assert wait(30) is True
    assert fake_time.slept[-1] == pytest.approx(0.01)


def test_busy_wait_starts_its_clock_at_each_new_lock_event(fake_time):
    wait = BusyWait(1.0)
    assert wait(0) is True
    fake_time.now += 10.0  # a later, separate lock event: calls starts again at 0
    assert wait(0) is True


def test_busy_timeout_is_known_only_for_connections_flowdesk_opened(tmp_path):
    conn = open_connection(tmp_path / "f.db", busy_timeout_s=2.5)
    other = apsw.Connection(str(tmp_path / "g.db"))
    try:
        assert busy_timeout_s(conn) == 2.5
        assert busy_timeout_s(other) is None
    finally:
        conn.close()
        other.close()


# -- this process's open connections to one file ------------------------------


def test_connections_open_counts_live_connections_to_that_file(tmp_path):
    path = tmp_path / "f.db"
    assert connections_open(path) == 0  # no file yet
    first = open_connection(path)
    second = open_connection(path)
    elsewhere = open_connection(tmp_path / "g.db")
    try:
        assert connections_open(path) == 2
        assert connections_open(str(path)) == 2
        second.close()
        assert connections_open(path) == 1
        assert connections_open(tmp_path / "g.db") == 1
    finally:
        first.close()
        elsewhere.close()
    assert connections_open(path) == 0
    assert connections_open(tmp_path / "never.db") == 0


# -- open_connection: the file, its pragmas, and what it refuses --------------


def test_a_new_file_gets_incremental_auto_vacuum_and_the_default_pragmas(tmp_path):
    conn = open_connection(tmp_path / "new.db")
    try:
        assert conn.execute("PRAGMA auto_vacuum").fetchall() == [(2,)]  # INCREMENTAL
        assert conn.execute("PRAGMA fullfsync").fetchall() == [(0,)]
        assert conn.execute("PRAGMA synchronous").fetchall() == [(2,)]  # FULL
        assert conn.execute("PRAGMA cell_size_check").fetchall() == [(1,)]  # damage is an error
        assert busy_timeout_s(conn) == 10.0
    finally:
        conn.close()
    synced = open_connection(tmp_path / "mac.db", fullfsync=True)
    try:
        assert synced.execute("PRAGMA fullfsync").fetchall() == [(1,)]
    finally:
        synced.close()


def test_an_empty_file_someone_else_created_is_made_private(tmp_path):
    path = tmp_path / "touched.db"
    path.write_bytes(b"")
    path.chmod(0o644)
    conn = open_connection(path)
    conn.close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_missing_file_without_create_names_db_apply(tmp_path):
    path = tmp_path / "none.db"
    with pytest.raises(DatabaseOpenError) as err:
        open_connection(path, create=False)
    assert str(err.value) == f"no database at {path}; run `flowdesk --db {path} db apply` first."
    assert not path.exists()


def test_a_missing_folder_says_create_it(tmp_path):
    path = tmp_path / "no" / "such" / "f.db"
    with pytest.raises(DatabaseOpenError) as err:
        open_connection(path)
    assert str(err.value) == (
        f"cannot create the database {path}: its folder does not exist. "
        "Create the folder or use another path (--db PATH)."
    )


def test_a_folder_in_place_of_the_file_is_refused(tmp_path):
    path = tmp_path / "dir.db"
    path.mkdir()
    with pytest.raises(DatabaseNotAFileError) as err:
        open_connection(path)
    assert str(err.value) == (
        f"{path} is a folder, not a database file; nothing was opened. "
        "Use the path of a database file, or of a new one (--db PATH)."
    )


def test_a_file_with_the_magic_but_no_database_is_refused_naming_it(tmp_path):
    path = tmp_path / "fake.db"
    content = b"SQLite format 3\x00" + b"\xff" * 200
    path.write_bytes(content)
    with pytest.raises(DatabaseOpenError) as err:
        open_connection(path)
    assert str(err.value) == (
        f"{path} is not a SQLite database; it was left untouched. Use another path (--db PATH)."
    )
    assert path.read_bytes() == content


class _PassThroughVfs(apsw.VFS):
    def __init__(self) -> None:
        super().__init__("flowdesk-kill-test-vfs", "")


def test_the_named_vfs_is_the_one_used(tmp_path):
    vfs = _PassThroughVfs()
    conn = open_connection(tmp_path / "v.db", vfs="flowdesk-kill-test-vfs")
    try:
        assert conn.vfsname("main").startswith("apsw.VFSFile/")  # the Python VFS
    finally:
        conn.close()
    plain = open_connection(tmp_path / "p.db")
    try:
        assert not plain.vfsname("main").startswith("apsw.VFSFile/")
    finally:
        plain.close()
    del vfs


def test_an_unknown_vfs_is_a_store_error_naming_the_database(tmp_path):
    path = tmp_path / "v.db"
    with pytest.raises(StoreError) as err:
        open_connection(path, vfs="no-such-vfs")
    assert str(err.value) == f"database error ({path}): no such vfs: no-such-vfs"


def test_a_missing_database_in_a_missing_folder_names_both_commands_and_they_work(tmp_path):
    """A new user's report: ``runs`` on a path whose folder is missing printed
    a ``db apply`` hint that failed as printed (its folder does not exist)."""
    import os
    import re
    import subprocess

    from tests.cli_support import as_printed, flowdesk

    path = tmp_path / "no" / "such" / "f.db"
    out = flowdesk(path, "runs")
    assert out.returncode == 1
    folder = tmp_path / "no" / "such"
    assert f"no database at {path}, and its folder {folder} does not exist" in out.stderr
    mkdir, apply = re.findall(r"`([^`]+)`", out.stderr)
    assert mkdir == f"mkdir -p {folder}"
    subprocess.run(mkdir.split(), check=True)  # as printed
    done = as_printed(apply, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert flowdesk(path, "runs").returncode == 0


def test_a_database_under_a_file_is_refused_with_what_to_do(tmp_path):
    """Not a traceback (a read-only file system or a full disk take the same path)."""
    from tests.cli_support import flowdesk

    (tmp_path / "notes.txt").write_text("x")
    path = tmp_path / "notes.txt" / "f.db"
    out = flowdesk(path, "db", "apply")
    assert out.returncode == 1
    assert out.stderr == (
        f"flowdesk: cannot create the database {path}: Not a directory. "
        "Use a path in a writable folder (--db PATH).\n"
    )
