"""Waits from the command line and the headless agent, as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import cli_forkserver

REPO = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    return {
        **os.environ,
        "FLOWDESK_FLOWS": '["tests.user_flows:approval"]',
        "PYTHONPATH": str(REPO),
    }


def flowdesk(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(["--db", str(db), *args], env=env(), cwd=REPO, timeout=120)


def status(db: Path, run_id: str) -> str:
    rows = [json.loads(x) for x in flowdesk(db, "runs", "--json").stdout.splitlines()]
    return next(r["status"] for r in rows if r["run_id"] == run_id)


def test_user_flow_answer_signal_and_agent(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    listed = flowdesk(db, "flows")
    assert "approval" in listed.stdout and "digest" in listed.stdout
    bad = flowdesk(db, "start", "approval", "--input", '{"nope": 1}')
    assert bad.returncode == 2 and "unknown key 'nope'" in bad.stderr
    bad = flowdesk(db, "start", "approval", "--input", "{}")
    assert bad.returncode == 2 and "order: Field required" in bad.stderr
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}')
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]  # the run id comes first
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting"
    assert started.stdout.strip().endswith("waiting")
    waiting = flowdesk(db, "waiting")
    assert f"{run_id}:approve:0" in waiting.stdout and "Ship this order?" in waiting.stdout
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0 and answered.stdout.strip().endswith("waiting")
    again = flowdesk(db, "answer", run_id, "no", "--wait-id", f"{run_id}:approve:0")
    assert again.returncode == 1 and "already answered" in again.stderr
    assert "signal paid o-1" in flowdesk(db, "waiting").stdout

    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "agent", "--poll", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
    )
    try:
        sent = flowdesk(db, "signal", "paid", "o-1", "--payload", '{"amount": 3}')
        assert sent.returncode == 0 and "stored" in sent.stdout
        deadline = time.monotonic() + 20
        while status(db, run_id) != "completed" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status(db, run_id) == "completed"  # the agent fired the cool-off timer
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err
    assert "stopping" in err
    bad_json = flowdesk(db, "signal", "paid", "o-2", "--payload", "{oops")
    assert bad_json.returncode == 2 and "not JSON" in bad_json.stderr


def test_a_signal_no_run_waits_for_says_so_and_names_where_to_look(tmp_path):
    """A misspelt signal name is stored like any other: ``signal`` says no
    run waits for it and prints the command listing what runs wait for,
    which (run as printed) shows the name the run waits on; the right name
    reaches the run."""
    import re

    from tests.cli_support import as_printed

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "start", "approval", "--input", '{"order": "o-9"}').stdout.split()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    typo = flowdesk(db, "signal", "payment", "o-9")
    assert typo.returncode == 0 and "signal 1 stored" in typo.stdout
    assert "no run waits for signal 'payment' with key 'o-9' now" in typo.stderr
    (hint,) = re.findall(r"what runs wait for: (flowdesk [^)]+)\)", typo.stderr)
    assert hint == f"flowdesk --db {db} waiting"
    listed = as_printed(hint, env())
    assert listed.returncode == 0 and "signal paid o-9" in listed.stdout
    right = flowdesk(db, "signal", "paid", "o-9")
    assert right.returncode == 0 and right.stderr == ""
    assert f"delivered to run {run_id} (now " in right.stdout  # the run that took it
