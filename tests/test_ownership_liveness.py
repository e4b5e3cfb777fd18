"""Liveness beats clocks (S78, S79): a run held by a live process of this
host is never taken over, whatever the clocks say, and an owner that can no
longer prove its lease stops before it commits anything more.

The holder is a real process (``tests/lease_holder.py``) running one long
step; the others are real processes too: an engine whose injected clock runs
60 s ahead, and ``flowdesk resume --all`` under a ``time.time()`` shifted by
60 s. What ran is read from the step's own log (pid and wall-clock time of
each start, cancel and end).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO

HOLDER = Path(__file__).resolve().parent / "lease_holder.py"
FLOWS = '["tests.lease_holder:hold"]'
LIMIT_S = 60.0


def _events(sink: Path) -> list[tuple[str, int, float]]:
    if not sink.exists():
        return []
    out = []
    for line in sink.read_text().splitlines():
        what, pid, t = line.split()
        out.append((what, int(pid), float(t)))
    return out


def _wait_for(sink: Path, what: str, count: int = 1) -> None:
    deadline = time.monotonic() + LIMIT_S
    while sum(1 for e in _events(sink) if e[0] == what) < count:
        assert time.monotonic() < deadline, f"no {what!r} in {_events(sink)}"
        time.sleep(0.02)


def _holder(
    db: Path,
    sink: Path,
    ttl: float,
    busy: float = 10.0,
    hold_s: float = 4.0,
    release: Path | None = None,
):
    env = {**os.environ, "LEASE_HOLD_S": str(hold_s)}
    if release is not None:
        env["LEASE_RELEASE"] = str(release)
    proc = cli_forkserver.popen(
        [sys.executable, str(HOLDER), str(db), str(sink), str(ttl), str(busy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert run_id, proc.stderr.read() if proc.stderr else ""
    return proc, run_id


AHEAD_ENGINE = """
import sys
from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine
from desktop_app.flow.clock import SystemClock
from desktop_app.store.sqlite.store import open_store
from tests.lease_holder import hold

class Ahead(SystemClock):
    def now(self):
        return super().now() + 60.0

engine = Engine(open_store(sys.argv[1]), flows=[hold], clock=Ahead())
try:
    engine.resume(sys.argv[2])
    print("resumed")
except RunLeasedError as exc:
    print("leased", exc.owner)
report = engine.recover()
print("recover", [(r.run_id, type(out).__name__) for r, out in report])
"""

SHIFTED_CLI = """
import sys, time
_real = time.time
time.time = lambda: _real() + 60.0
from desktop_app.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.scenario("S78")
def test_a_process_whose_clock_runs_60_s_ahead_never_takes_a_live_owners_run(db_path, tmp_path):
    sink = tmp_path / "steps"
    env = {**os.environ, "LEASE_SINK": str(sink), "FLOWDESK_FLOWS": FLOWS, "PYTHONPATH": str(REPO)}
    # the step lasts until the others have tried (a loaded machine takes
    # seconds to start each of them), not a fixed time they could outlast
    release = tmp_path / "release"
    holder, run_id = _holder(db_path, sink, ttl=1.0, hold_s=LIMIT_S, release=release)
    try:
        _wait_for(sink, "start")
        ahead = cli_forkserver.run_argv(
            [sys.executable, "-c", AHEAD_ENGINE, str(db_path), run_id],
            capture_output=True, text=True, timeout=LIMIT_S, cwd=REPO, env=env,
        )  # fmt: skip
        assert ahead.returncode == 0, ahead.stderr
        assert f"leased {holder_owner(db_path, run_id)}" in ahead.stdout
        assert f"recover [('{run_id}', 'RunLeasedError')]" in ahead.stdout
        shifted = cli_forkserver.run_argv(
            [sys.executable, "-c", SHIFTED_CLI, "--db", str(db_path), "resume", "--all"],
            capture_output=True, text=True, timeout=LIMIT_S, cwd=REPO, env=env,
        )  # fmt: skip
        assert run_id[:8] in shifted.stdout + shifted.stderr, shifted
        assert "held by a live process" in shifted.stdout + shifted.stderr
        release.touch()
        out, err = holder.communicate(timeout=LIMIT_S)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 0, err
    assert out.splitlines()[-1] == "result completed"  # the owner finished, undisturbed
    assert [(w, p) for w, p, _ in _events(sink)] == [
        ("start", holder.pid),
        ("end", holder.pid),
    ], "the step ran somewhere else too"
    store = open_store(db_path)
    assert store.get_run(run_id).status == "completed"
    store.close()


def holder_owner(db: Path, run_id: str) -> str:
    store = open_store(db)
    try:
        return store.get_run(run_id).lease_owner or "?"
    finally:
        store.close()


@pytest.mark.scenario("S79")
@pytest.mark.slow
def test_an_owner_that_cannot_renew_for_its_ttl_stops_before_committing(db_path, tmp_path):
    sink = tmp_path / "steps"
    env = {**os.environ, "LEASE_SINK": str(sink), "FLOWDESK_FLOWS": FLOWS, "PYTHONPATH": str(REPO)}
    holder, run_id = _holder(db_path, sink, ttl=0.6, busy=0.1, hold_s=20.0)
    try:
        _wait_for(sink, "start")
        store = open_store(db_path)
        before = store.latest(run_id)
        store.close()
        lock = apsw.Connection(str(db_path))
        lock.execute("BEGIN EXCLUSIVE")  # the file is locked past the lease's TTL
        try:
            _wait_for(sink, "cancelled")  # the step sees ctx.cancelled
            during = cli_forkserver.run_argv(
                [sys.executable, "-m", "desktop_app.cli", "--db", str(db_path), "resume", "--all"],
                capture_output=True, text=True, timeout=LIMIT_S, cwd=REPO, env=env,
            )  # fmt: skip
            assert during.returncode != 0  # the file is locked: nothing can run
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        out, err = holder.communicate(timeout=LIMIT_S)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 4, out + err
    assert out.splitlines()[-1].startswith(f"lost run {run_id}: this process")
    store = open_store(db_path)
    after = store.latest(run_id)
    assert after.revision == before.revision  # the owner committed nothing more
    assert after.steps["long"].status == "in_progress"
    store.close()
    # its process is gone: the run is resumed elsewhere, and its step runs again there
    again = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db_path), "resume", "--all"],
        capture_output=True, text=True, timeout=LIMIT_S, cwd=REPO,
        env={**env, "LEASE_HOLD_S": "0.1"},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    events = _events(sink)
    starts = [(p, t) for w, p, t in events if w == "start"]
    ends = [(p, t) for w, p, t in events if w == "end"]
    assert len(starts) == 2 and starts[0][0] == holder.pid
    assert starts[1][0] != holder.pid
    assert ends[0][1] <= starts[1][1], "the step ran in two processes at once"
    store = open_store(db_path)
    assert store.get_run(run_id).status == "completed"
    store.close()


@pytest.mark.scenario("S80")
def test_a_run_that_went_waiting_is_leased_by_no_one_so_a_signal_wakes_it_after_its_worker_died(
    pg_url, pg_store
):
    from desktop_app.flow import Engine
    from tests.pg_worker import waiter_flow
    from tests.test_postgres_workers import db_now, spawn

    engine = Engine(pg_store, flows=[waiter_flow()], owner="machine-a:1:a00001", lease_ttl_s=30.0)
    append = pg_store.append

    def append_then_heartbeat(cp, *args, **kwargs):
        append(cp, *args, **kwargs)
        if cp.status == "waiting":  # the heartbeat fires while the run is still driven here
            engine.renew_leases()

    pg_store.append = append_then_heartbeat
    res = engine.run("waiter", {})
    assert res.status == "waiting"
    run = pg_store.get_run(res.run_id)
    assert (run.lease_owner, run.lease_expires_at) == (None, None)  # leased by no one
    # machine-a never comes back; a worker of another machine polls every 0.25 s
    worker = spawn(pg_url, "machine-b", "--poll", "0.25")
    try:
        sent_at = db_now(pg_store)
        pg_store.send_signal("go", "k", {"v": 1}, sent_at)
        woken = worker.expect(lambda w: w[0] == "woken" and w[1] == res.run_id, timeout=20)
    finally:
        worker.stop()
    latency = float(woken[2]) - sent_at
    assert latency < 5.0, f"woken {latency:.1f} s after the signal: it waited for a lease"


def test_a_takeover_on_postgres_leases_for_the_engines_ttl_whatever_its_clock(pg_store):
    """An engine with an injected clock (here months behind the server)
    takes over a dead owner's run: the lease it sets runs for its TTL by the
    database's clock, not for the difference between its clock and the wall
    clock (which made it expire at once)."""
    from desktop_app.flow import Engine
    from desktop_app.flow.clock import ManualClock
    from tests.ownership_racer import N, race_flow
    from tests.test_ownership_races import dead_owner, interrupted_flow_runs

    left: list[float] = []

    def step(s: N, ctx) -> dict:
        left.append((pg_store.get_run(ctx.run_id).lease_expires_at or 0.0) - pg_store.now())
        return {"n": s.n + 1}

    (rid,) = interrupted_flow_runs(pg_store, 1, dead_owner())
    engine = Engine(pg_store, flows=[race_flow(step)], clock=ManualClock(), lease_ttl_s=60.0)
    assert engine.resume(rid).status == "completed"
    assert len(left) == 1 and 50.0 < left[0] <= 60.0, left
