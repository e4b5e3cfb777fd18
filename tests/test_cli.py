"""The headless commands, as a user runs them: real processes, real files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import cli_forkserver
from tests.digest_corpus import make_corpus


def flowdesk(db: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(["--db", str(db), *args], timeout=timeout)


def test_version():
    out = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("flowdesk ")


def test_run_list_show(tmp_path):
    db = tmp_path / "f.db"
    folder = tmp_path / "docs"
    make_corpus(folder, 12)
    missing = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"))
    assert missing.returncode == 1 and f"flowdesk --db {db} db apply" in missing.stderr
    assert not db.exists()  # a read or run command never creates the database
    assert flowdesk(db, "db", "apply").returncode == 0
    out = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout and "report:" in out.stdout
    assert "step summarize done" in out.stderr and "12/12" in out.stderr
    listing = flowdesk(db, "runs", "--json")
    (row,) = [json.loads(line) for line in listing.stdout.splitlines()]
    assert row["status"] == "completed" and row["progress"] == [12, 12]
    table = flowdesk(db, "runs")
    assert "digest" in table.stdout and "12/12" in table.stdout
    show = flowdesk(db, "show", row["run_id"])
    assert "scan" in show.stdout and "summarize" in show.stdout and "iteration 12" in show.stdout
    assert f"{row['run_id']}:0" in show.stdout
    unknown = flowdesk(db, "show", "nope")
    assert unknown.returncode == 2 and "no run nope" in unknown.stderr  # README: 2 = bad input


def test_kill_cli_mid_run_then_resume_all(tmp_path):
    db = tmp_path / "f.db"
    folder = tmp_path / "docs"
    files = make_corpus(folder, 1500)
    assert flowdesk(db, "db", "apply").returncode == 0
    proc = cli_forkserver.popen(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(db),
            "run",
            "digest",
            "--folder",
            str(folder),
            "--out",
            str(tmp_path / "o"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # wait until the summarize loop has committed some files, then kill -9
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = flowdesk(db, "runs", "--json").stdout.splitlines()
        if runs and (json.loads(runs[0])["progress"] or [0])[0] >= 20:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    (row,) = [json.loads(x) for x in flowdesk(db, "runs", "--json").stdout.splitlines()]
    assert row["stored_status"] == "running", "the run finished before the kill; use more files"
    assert row["status"] == "interrupted"  # its process is gone
    assert 20 <= row["progress"][0] < len(files)
    resumed = flowdesk(db, "resume", "--all")
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {row['run_id']} completed" in resumed.stdout
    (row,) = [json.loads(x) for x in flowdesk(db, "runs", "--json").stdout.splitlines()]
    assert row["status"] == "completed" and row["progress"] == [len(files), len(files)]
    again = flowdesk(db, "resume", "--all")
    assert "no interrupted runs" in again.stdout
