"""The SQLite files beside a database (``-wal``, ``-shm``) hold its data
too: SQLite creates them with the database file's own mode, so a database
copied in as 0644 (or made by another tool) got world-readable ones under a
umask of 000 (a privacy tryout). Flowdesk creates them 0600 itself before
SQLite does, whatever the database's mode and the umask."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import flowdesk

REPO = Path(__file__).resolve().parents[1]

HOLD_OPEN = r"""
import os, stat, sys
from desktop_app.store.connection import open_connection
db = sys.argv[1]
conn = open_connection(db)
conn.execute("CREATE TABLE IF NOT EXISTS tryout(x)")  # a write: the WAL is in use
conn.execute("INSERT INTO tryout VALUES (1)")
print(" ".join(f"{stat.S_IMODE(os.stat(db + s).st_mode):o}" for s in ("", "-wal", "-shm")))
conn.close()
"""


@pytest.mark.scenario("S115")
@pytest.mark.parametrize("mode", [0o644, 0o666, 0o600])
def test_the_wal_and_shm_files_are_0600_whatever_the_database_mode_and_umask(
    tmp_path: Path, mode: int
) -> None:
    db = tmp_path / "copied.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    for leftover in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        assert not leftover.exists()  # the last connection removed them
    db.chmod(mode)  # as a copy or another tool left it
    out = subprocess.run(
        [sys.executable, "-c", HOLD_OPEN, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        umask=0,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"{mode:o}", "600", "600"]  # the database keeps its own
    assert stat.S_IMODE(db.stat().st_mode) == mode
