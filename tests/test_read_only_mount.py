"""A database on a read-only mount for real: a tmpfs remounted read-only
(``mount -o remount,ro``). Every command names the read-only file system
(EROFS) and says what to do (copy the file somewhere writable and use the
copy: Flowdesk has no read-only mode), instead of "check that its folder
exists and is writable"; the advice is then followed and works.

The tmpfs needs mount privileges (root, or a user namespace): without them
these tests skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from tests.cli_support import flowdesk
from tests.timer_flows import FLOWS_ENV
from tests.tmpfs_support import mounted_tmpfs

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs mounted in ``tmp_path`` (read-write; the test remounts it)."""
    with mounted_tmpfs(tmp_path / "disk", "16m") as mnt:
        yield mnt


def read_only(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)


def a_database_with_one_run(mnt: Path) -> tuple[Path, str]:
    db = mnt / "g.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    out = flowdesk(db, "start", "napper", "--input", json.dumps({"order": "z"}), env=ENV)
    assert out.returncode == 0, out.stderr
    return db, out.stdout.split()[0]


def says_read_only(out: subprocess.CompletedProcess[str], db: Path) -> None:
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    said = f"flowdesk: the database {db} is on a read-only file system (EROFS"
    assert out.stderr.startswith(said), out.stderr
    assert "copy the file (with its -wal file, if there is one) into a writable folder" in (
        out.stderr
    )
    assert "folder exists and is writable" not in out.stderr


def test_a_closed_database_on_a_read_only_mount_names_it_and_a_copy_works(
    disk: Path, tmp_path: Path
) -> None:
    db, run_id = a_database_with_one_run(disk)
    conn = apsw.Connection(str(db))  # the last connection: no -wal or -shm left
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not Path(f"{db}-wal").exists()
    read_only(disk)
    for command in (["runs"], ["resume", "--all"], ["waiting"]):
        says_read_only(flowdesk(db, *command, env=ENV), db)
    copy = tmp_path / "copy.db"  # what the message says to do
    shutil.copy(db, copy)
    listed = flowdesk(copy, "runs", env=ENV)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout


def test_a_write_to_a_read_only_mount_names_it(disk: Path) -> None:
    """Its -wal and -shm left beside it, the file opens and reads (``runs``),
    and a command that writes (``cancel``) names the read-only mount
    (it said "is read-only; check the file's and its folder's permissions")."""
    db, run_id = a_database_with_one_run(disk)
    # the last process left them (flowdesk keeps the WAL file when it exits)
    assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
    read_only(disk)
    listed = flowdesk(db, "runs", env=ENV)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    says_read_only(flowdesk(db, "cancel", run_id, env=ENV), db)
