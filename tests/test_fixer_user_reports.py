"""Defects a new user met from a clean clone, each reproduced as the user ran it:
``python -m desktop_app.cli`` in a real subprocess over real files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite import open_store
from tests import flow_worker

REPO = Path(__file__).resolve().parents[1]


def flowdesk(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


def two_steps() -> object:
    return (
        FlowBuilder("two", flow_worker.S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: {"n": 2})
        .chain()
        .compile()
    )


def test_a_killed_but_unreaped_owner_loses_its_lease_at_once(db_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    child.kill()  # SIGKILL; the Popen is kept and never waited: the child stays a zombie
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # until it has died, unreaped
    assert Path(f"/proc/{child.pid}").exists()  # still in the process table
    clock = ManualClock()
    store = open_store(db_path)
    flow = two_steps()
    owner = f"{socket.gethostname()}:{child.pid}:abc"
    dead = Engine(store, flows=[flow], clock=clock, owner=owner, lease_ttl_s=600)
    rid = dead.start("two", flow_worker.S())
    store.claim(rid, dead.lease(), clock.now())
    res = Engine(store, flows=[flow], clock=clock, lease_ttl_s=600).resume(rid)
    assert res.status == "completed" and res.state.n == 2
    store.close()
    child.wait()


def test_the_lease_message_gives_its_expiry_in_iso_utc(db_path):
    clock = ManualClock(1796129469.0)
    store = open_store(db_path)
    flow = two_steps()
    remote = Engine(store, flows=[flow], clock=clock, owner="otherhost:4242:abc", lease_ttl_s=60)
    rid = remote.start("two", flow_worker.S())
    store.claim(rid, remote.lease(), clock.now())
    with pytest.raises(RunLeasedError) as info:
        Engine(store, flows=[flow], clock=clock, lease_ttl_s=60).resume(rid)
    assert "until 2026-12-01T" in str(info.value) and "epoch" not in str(info.value)
    store.close()


@pytest.mark.parametrize(
    "args",
    [["--limit", "-1"], ["--limit", "0"], ["--limit", "x"], ["--status", "bogus"]],
)
def test_runs_refuses_a_bad_limit_or_status_as_a_usage_error(tmp_path, args):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    got = flowdesk(db, "runs", *args)
    assert got.returncode == 2, got
    assert args[0] in got.stderr and got.stdout == ""
    assert flowdesk(db, "runs", "--status", "completed", "--limit", "1").returncode == 0
