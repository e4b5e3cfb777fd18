"""Two processes on one file never execute the same run at once (S42)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver, flow_worker

WORKER = Path(__file__).resolve().parent / "flow_worker.py"


def start(db: Path, log: Path, flow: str) -> subprocess.Popen[str]:
    return cli_forkserver.popen(
        [sys.executable, str(WORKER), str(db), str(log), flow],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def wait_for_lines(log: Path, n: int, proc: subprocess.Popen[str]) -> None:
    """Until the worker has fsync'd ``n`` lines (or died: then fail with its stderr)."""
    while len(lines(log)) < n:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"worker exited early: {err}")
        threading.Event().wait(0.01)


@pytest.mark.scenario("S42")
def test_second_process_never_executes_a_leased_run_and_takes_over_a_dead_owner(db_path, tmp_path):
    log = tmp_path / "log"
    a = start(db_path, log, "slow5")
    wait_for_lines(log, 2, a)  # A finished s0 and now holds the run inside s1 (blocked)
    # B finds the run in the file but must not execute it while A holds the lease
    b = cli_forkserver.run_argv(
        [sys.executable, str(WORKER), str(db_path), str(log), "slow5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert b.returncode == 0, b.stderr
    assert "being executed by" in b.stdout
    assert lines(log) == [f"{a.pid} s0", f"{a.pid} s1"]  # B ran nothing
    a.send_signal(signal.SIGKILL)
    assert a.wait(10) == -signal.SIGKILL
    Path(str(log) + ".release").touch()  # s1 may finish now
    c = cli_forkserver.run_argv(
        [sys.executable, str(WORKER), str(db_path), str(log), "slow5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert c.returncode == 0, c.stderr
    assert "recovered completed" in c.stdout  # dead local owner: taken over at once
    by_c = [line.split()[1] for line in lines(log)[2:]]
    assert by_c == ["s1", "s2", "s3", "s4"]  # only the step in flight at the kill ran twice
    owners = [line.split()[0] for line in lines(log)]
    assert owners[:2] == [str(a.pid)] * 2 and len(set(owners[2:])) == 1  # A, then C; never B
    assert owners[2] != str(a.pid)
    store = open_store(db_path)
    (run,) = store.list_runs()
    assert run.status == "completed" and run.lease_owner is None
    store.close()


@pytest.mark.scenario("S42")
def test_lease_of_a_remote_owner_is_taken_over_only_after_it_expires(db_path):
    clock = ManualClock()
    store = open_store(db_path)
    flow = (
        FlowBuilder("two", flow_worker.S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: {"n": 2})
        .chain()
        .compile()
    )
    remote = Engine(store, flows=[flow], clock=clock, owner="otherhost:4242:abc", lease_ttl_s=60)
    rid = remote.start("two", flow_worker.S())
    store.claim(rid, remote.lease(), clock.now())  # the remote process holds it
    local = Engine(store, flows=[flow], clock=clock, lease_ttl_s=60)
    with pytest.raises(RunLeasedError) as info:
        local.resume(rid)
    assert info.value.owner == "otherhost:4242:abc"
    report = local.recover()
    assert isinstance(report[0][1], RunLeasedError)
    assert store.get_run(rid).revision == 0  # nothing ran
    clock.advance(61)
    res = local.resume(rid)
    assert res.status == "completed" and res.state.n == 2
    run = store.get_run(rid)
    assert run.lease_owner is None  # released when it stopped
    store.close()


@pytest.mark.scenario("S42")
def test_a_killed_owner_not_yet_reaped_is_dead(tmp_path):
    """A process killed with SIGKILL stays a zombie until its parent waits for
    it; its leases are taken over at once all the same."""
    from desktop_app.flow.owners import owner_is_dead

    child = cli_forkserver.popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = f"{socket.gethostname()}:{child.pid}:abc"
        assert not owner_is_dead(owner)  # alive
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not owner_is_dead(owner) and time.monotonic() < deadline:
            time.sleep(0.01)  # the kill is delivered asynchronously; no wait() reaps it
        assert owner_is_dead(owner)
    finally:
        child.kill()
        child.wait()
