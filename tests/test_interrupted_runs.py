"""A run whose process died says so (S81): ``interrupted``, not ``running``,
in ``flowdesk runs``/``show`` and their ``--json``, and in the app's table,
detail and side panel within one refresh of the death, with no rate and no
time left; the app resumes it with ``r``.

Real processes: a ``flowdesk start`` of the ``gated`` flow
(:mod:`tests.interrupted_flows`) holds its run in a step until the test
opens the gate, and is killed there with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import load_settings
from desktop_app.flow.owners import new_owner
from desktop_app.runs_view import display_status
from desktop_app.store.records import AgentRun, RunRecord, RunStatus
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.app_support import settle, wait_until
from tests.cli_support import REPO, flowdesk
from tests.interrupted_flows import FLOWS_ENV, gated

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def start_gated(db: Path | str, folder: Path) -> tuple[subprocess.Popen[str], str]:
    """``flowdesk start gated`` in a process of its own, returned once its run
    is inside the ``hold`` step (holding its lease), with the run id."""
    started = folder / "started"
    state = {"started": str(started), "gate": str(folder / "gate")}
    proc = cli_forkserver.popen(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(db),
            "start",
            "gated",
            "--input",
            json.dumps(state),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, **ENV},
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, "the gated run's process ended early"
        assert time.monotonic() < deadline, "the gated run never reached its hold step"
        time.sleep(0.02)
    return proc, run_id


def kill9(proc: subprocess.Popen[str]) -> None:
    proc.kill()  # SIGKILL: no handler runs, the lease stays in the file
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def runs_json(db: Path | str) -> list[dict[str, object]]:
    out = flowdesk(db, "runs", "--json", env=ENV)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.scenario("S81")
def test_display_status_judges_the_owner_then_the_lease() -> None:
    gone = cli_forkserver.popen([sys.executable, "-c", "pass"])
    gone.wait()
    here, dead = new_owner(), f"{socket.gethostname()}:{gone.pid}:x"
    now = 1000.0

    def shown(status: RunStatus, owner: str | None, expires: float | None) -> str:
        run = RunRecord("r" * 32, "f", "v", status, 0, 0.0, 0.0)
        return display_status(replace(run, lease_owner=owner, lease_expires_at=expires), now)

    assert shown("running", None, None) == "interrupted"  # its process let go (Ctrl-C)
    assert shown("pending", None, None) == "pending"  # queued, nobody took it yet
    assert shown("running", dead, now + 30) == "interrupted"  # gone, lease still live
    assert shown("pending", dead, now + 30) == "interrupted"
    assert shown("running", here, now - 60) == "running"  # alive here: late, not gone
    assert shown("running", "elsewhere:1:x", now) == "interrupted"  # expired at now
    assert shown("running", "elsewhere:1:x", now + 0.5) == "running"
    assert shown("waiting", dead, now - 60) == "waiting"
    assert shown("completed", None, None) == "completed"
    agent = AgentRun("a" * 32, "helper", "running", "go", 0.0, 0.0, lease_owner=dead)
    assert display_status(agent, now) == "interrupted"
    assert display_status(replace(agent, status="done"), now) == "done"


@pytest.mark.scenario("S81")
def test_a_killed_run_is_interrupted_in_runs_show_and_their_json(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    proc, rid = start_gated(db, tmp_path)
    try:
        (row,) = runs_json(db)
        assert (row["status"], row["stored_status"]) == ("running", "running")  # alive
    finally:
        kill9(proc)
    (row,) = runs_json(db)
    assert (row["run_id"], row["status"], row["stored_status"]) == (rid, "interrupted", "running")
    table = flowdesk(db, "runs", env=ENV).stdout.splitlines()
    assert table[1].split()[:4] == [rid, "flow", "gated", "interrupted"]
    shown = flowdesk(db, "show", rid[:8], env=ENV).stdout.splitlines()
    assert shown[0].endswith("status interrupted")
    assert shown[1].startswith("interrupted: the process that ran it")
    assert shown[1].endswith(f"flowdesk --db {db} resume {rid} continues it")
    detail = json.loads(flowdesk(db, "show", rid, "--json", env=ENV).stdout)
    assert (detail["status"], detail["stored_status"]) == ("interrupted", "running")
    # the printed command continues it
    (tmp_path / "gate").touch()
    resumed = flowdesk(db, "resume", rid, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    (row,) = runs_json(db)
    assert (row["status"], row["stored_status"]) == ("completed", "completed")


@pytest.mark.scenario("S81")
def test_a_killed_agent_run_is_interrupted_in_runs_and_show(db_path: Path, tmp_path: Path) -> None:
    worker = Path(__file__).resolve().parent / "agent_worker.py"
    cmd = [sys.executable, str(worker), str(db_path), str(tmp_path / "log"), "ask"]
    killed = subprocess.run([*cmd, "--kill-in-tool", "b"], capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL  # inside a tool call, its lease held
    (row,) = runs_json(db_path)
    assert (row["kind"], row["status"], row["stored_status"]) == ("agent", "interrupted", "running")
    shown = flowdesk(db_path, "show", str(row["run_id"])).stdout.splitlines()
    assert " status interrupted " in shown[0]
    assert shown[1].endswith(f"flowdesk --db {db_path} resume {row['run_id']} continues it")


WIDE = (170, 45)


@pytest.mark.slow
@pytest.mark.scenario("S81")
async def test_the_app_shows_a_killed_run_interrupted_and_r_resumes_it(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    proc, rid = start_gated(db, tmp_path)
    app = FlowdeskApp(load_settings(db_path=db), flows=[gated])
    try:
        async with app.run_test(size=WIDE) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunsScreen)
            table = screen.table
            await wait_until(pilot, lambda: table.cell(rid, "status") == "running")
            assert "running" in str(screen.summary.render())
            kill9(proc)  # no row changes: the app must notice on its own
            await wait_until(pilot, lambda: table.cell(rid, "status") == "interrupted", 3.0)
            assert table.cell(rid, "pace") == ""  # no rate, no time left
            side = str(screen.summary.render())
            assert "interrupted — press r to resume" in side
            assert "measuring" not in side and "left" not in side and "Elapsed" not in side
            await pilot.press("enter")
            await settle(pilot)
            detail = app.screen
            assert isinstance(detail, RunDetailScreen)
            header = str(detail.query_one("#run-header").render())
            assert "Status interrupted — press r to resume" in header
            assert "measuring" not in header and "elapsed" not in header
            assert not detail.query_one("#throughput-row").display
            (tmp_path / "gate").touch()
            await pilot.press("r")
            await wait_until(pilot, lambda: table.cell(rid, "status") == "completed", 30.0)
            await settle(pilot)
    finally:
        if proc.poll() is None:
            kill9(proc)
    store = open_store(db)
    try:
        run = store.get_run(rid)
        assert (run.status, store.latest(rid).state["done"]) == ("completed", True)
    finally:
        store.close()
