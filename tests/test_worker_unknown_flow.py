"""A ``flowdesk agent`` worker that does not have a run's flow registered
says so, once per run, naming the flow and what to set (a new user's
report: it said nothing and the run stayed ``interrupted`` for ever); and
``show`` of such a run, in a process configured the same way, says what
must be set before its ``resume`` hint works, which then works as printed.
Real PostgreSQL server, real worker process, the real CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_forkserver, sigterm_flows
from tests.cli_support import REPO, as_printed, flowdesk

pytestmark = pytest.mark.postgres
BOUND_S = 90.0


def submit(url: str, tmp_path: Path, name: str) -> str:
    """A pending run of ``effects`` (its gate open: it runs straight through)."""
    from desktop_app.flow import Engine
    from desktop_app.store.postgres.store import open_postgres_store

    gate = tmp_path / "gate"
    gate.touch()
    store = open_postgres_store(url)
    try:
        engine = Engine(store, flows=[sigterm_flows.effects])
        return engine.start("effects", {"sink": str(tmp_path / f"{name}.log"), "gate": str(gate)})
    finally:
        store.close()


def killed_mid_run(url: str, tmp_path: Path) -> str:
    """A run of ``effects`` that ``flowdesk start`` (which has the flow) was
    executing when it got SIGKILL: ``interrupted``."""
    sink, gate = tmp_path / "first.log", tmp_path / "first-gate"
    state = f'{{"sink": "{sink}", "gate": "{gate}"}}'
    argv = ["--db", url, "start", "effects", "--input", state]
    start = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV},
    )
    wait_for(lambda: sink.exists() and "begin s1" in sink.read_text(), "start never began s1")
    start.kill()
    start.wait(timeout=60)
    gate.touch()  # the resume as printed runs through
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(url)
    try:
        (run,) = [r for r in store.list_runs() if r.flow_name == "effects"]
    finally:
        store.close()
    return run.run_id


def wait_for(pred, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.slow
def test_a_worker_without_the_runs_flow_says_so_once_and_show_says_what_to_set(
    pg_url: str, tmp_path: Path
) -> None:
    err = tmp_path / "worker.err"
    env = {k: v for k, v in os.environ.items() if k != "FLOWDESK_FLOWS"}
    with err.open("w") as out:
        worker = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", pg_url, "agent", "--poll", "0.2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )
    try:
        first = killed_mid_run(pg_url, tmp_path)
        said = f"flowdesk agent: run {first} cannot go on here"
        wait_for(lambda: said in err.read_text(), f"the worker said nothing: {err.read_text()}")
        second = submit(pg_url, tmp_path, "second")  # another look at the runs is made
        wait_for(lambda: f"run {second} cannot go on here" in err.read_text(), err.read_text())
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = err.read_text()
    assert text.count(f"run {first} ") == 1, text  # once, not on every pass
    (line,) = [x for x in text.splitlines() if said in x]
    assert "its flow 'effects' is not registered in this worker" in line
    assert "Set FLOWDESK_FLOWS (the flows setting) on this worker" in line
    logged = (Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log").read_text()
    assert logged.count(f"run {first} cannot go on in worker") == 1

    listed = flowdesk(pg_url, "runs")
    (row,) = [x for x in listed.stdout.splitlines() if x.startswith(first)]
    assert " interrupted " in row and row.endswith("· its flow is not registered here (see show)")
    shown = flowdesk(pg_url, "show", first)
    assert shown.returncode == 0, shown.stderr
    found = re.search(
        r"^interrupted: .*its flow 'effects' is not registered here, .*set FLOWDESK_FLOWS"
        r".*; then (flowdesk .*) continues it$",
        shown.stdout,
        re.M,
    )
    assert found, shown.stdout
    resumed = as_printed(
        found.group(1), {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    done = flowdesk(pg_url, "show", first, env={"FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV})
    assert " status completed" in done.stdout.splitlines()[0], done.stdout
