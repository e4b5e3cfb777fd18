"""What the README says of "stayed locked": a holder outside Flowdesk's
write gate (here a Python ``sqlite3`` shell in a process of its own,
holding the file's write lock in an open transaction) is not named; the
message says only that the file stayed locked (a real SQLite file, real
processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli_support import flowdesk
from tests.timer_flows import FLOWS_ENV

HOLD = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_sqlite3_shell_holding_the_lock_is_not_named(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {"FLOWDESK_FLOWS": FLOWS_ENV, "FLOWDESK_BUSY_TIMEOUT_S": "0.5"}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approver", "--input", json.dumps({"order": "z"}), env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[0]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        out = flowdesk(db, "cancel", run_id, env=env)
    finally:
        holder.communicate(input="", timeout=60)
    assert out.returncode == 1, out.stderr
    assert "stayed locked by another process past the busy timeout" in out.stderr, out.stderr
    assert "held by" not in out.stderr and str(holder.pid) not in out.stderr, out.stderr
    assert flowdesk(db, "cancel", run_id, env=env).returncode == 0  # free again
