"""A ``flowdesk agent`` worker whose flow code changed since a run started
(a step renamed) says so, once per run, on stderr and in its log, naming
both versions and what works, and ``flowdesk runs`` marks such a run (a new
user's report: on PostgreSQL the worker's claim passed over runs of the old
version, it said nothing and the runs stayed ``pending`` / ``interrupted``
for ever). The worker still never claims such a run (a worker with the old
code may run it: rolling upgrades). Every command it prints is then run as
printed, with the worker's ``--db``/``--scope``. Real PostgreSQL server, real
worker processes (one killed with SIGKILL mid-step), the real CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_forkserver, renamed_flows, sigterm_flows
from tests.cli_support import REPO, as_printed, flowdesk

pytestmark = pytest.mark.postgres
BOUND_S = 90.0
SCOPE = "team"


def old_code() -> dict[str, str]:
    """The environment of a process with ``effects``' old code."""
    return {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}


def new_code() -> dict[str, str]:
    """The environment of a process with ``effects``' new code."""
    return {**os.environ, "FLOWDESK_FLOWS": renamed_flows.FLOWS_ENV}


def wait_for(pred, what) -> None:
    deadline = time.monotonic() + BOUND_S
    while not pred():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def start_old(url: str, tmp_path: Path, name: str, gate: Path) -> str:
    """A pending run of ``effects`` started under its old code (as the app
    of a machine not upgraded yet starts one)."""
    from desktop_app.flow import Engine
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(url, scope=SCOPE)
    try:
        engine = Engine(store, flows=[sigterm_flows.effects])
        return engine.start("effects", {"sink": str(tmp_path / f"{name}.log"), "gate": str(gate)})
    finally:
        store.close()


def agent(url: str, env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    """``flowdesk --db URL --scope team agent`` with ``env``, its output in ``out``."""
    argv = ["-m", "desktop_app.cli", "--db", url, "--scope", SCOPE, "agent", "--poll", "0.2"]
    with out.open("w") as f:
        return cli_forkserver.popen(
            [sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env
        )


def status(url: str, run_id: str) -> str:
    shown = flowdesk(url, "--scope", SCOPE, "show", run_id, env=new_code())
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.splitlines()[0]


@pytest.mark.slow
def test_a_worker_with_a_flows_new_code_says_so_once_per_run_and_its_hints_work(
    pg_url: str, tmp_path: Path
) -> None:
    assert sigterm_flows.effects.version != renamed_flows.effects.version
    # a worker with the old code executes a run, and is killed mid-step
    old_out = tmp_path / "old.err"
    old = agent(pg_url, old_code(), old_out)
    try:
        killed = start_old(pg_url, tmp_path, "killed", tmp_path / "killed-gate")
        sink = tmp_path / "killed.log"
        wait_for(lambda: sink.exists() and "begin s1" in sink.read_text(), old_out.read_text)
    finally:
        old.kill()
        old.wait(timeout=60)
    (tmp_path / "killed-gate").touch()  # what runs it next runs straight through
    gate = tmp_path / "gate"
    gate.touch()
    pending = start_old(pg_url, tmp_path, "pending", gate)  # started under the old code
    ended = start_old(pg_url, tmp_path, "ended", gate)

    err = tmp_path / "new.err"
    worker = agent(pg_url, new_code(), err)
    try:
        for run_id in (killed, pending, ended):
            said = f"flowdesk agent: run {run_id} cannot go on here"
            wait_for(lambda s=said: s in err.read_text(), err.read_text)
        time.sleep(1.0)  # more passes: said once, not once a pass
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = err.read_text()
    logged = (Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log").read_text()
    hints: dict[str, list[str]] = {}
    for run_id in (killed, pending, ended):
        assert text.count(f"run {run_id} cannot go on") == 1, text
        assert logged.count(f"run {run_id} cannot go on in worker") == 1, logged
        (line,) = [x for x in text.splitlines() if f"run {run_id} cannot go on here" in x]
        assert (
            f"run {run_id} was started under flow version {sigterm_flows.effects.version} "
            f"but the flow is now {renamed_flows.effects.version}; nothing was run." in line
        ), line
        hints[run_id] = re.findall(r"`(flowdesk [^`]*)`", line)
        assert len(hints[run_id]) == 3, line
        for hint in hints[run_id]:
            assert hint.startswith(f"flowdesk --db {pg_url} --scope {SCOPE} "), hint
    # the worker with the new code claimed none of them
    assert not (tmp_path / "pending.log").exists()
    assert " status interrupted" in status(pg_url, killed)
    assert " status pending" in status(pg_url, pending)

    listed = flowdesk(pg_url, "--scope", SCOPE, "runs", env=new_code())
    for run_id in (killed, pending, ended):
        (row,) = [x for x in listed.stdout.splitlines() if x.startswith(run_id)]
        assert row.endswith("· its flow changed since it started (see show)"), row

    # what it printed, as printed: the old code resumes one where it stopped ...
    resume, cancel, onto = hints[pending]
    assert resume.endswith(f" resume {pending}") and cancel.endswith(f" cancel {pending}")
    done = as_printed(resume, old_code(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert " status completed" in status(pg_url, pending)
    assert (tmp_path / "pending.log").read_text().count("effect s3 ") == 1
    # ... the new code continues another from the step it stopped at ...
    onto = hints[killed][2]
    assert onto.endswith(f" resume {killed} --onto-current"), onto
    went_on = as_printed(onto, new_code(), timeout=120)
    assert went_on.returncode == 0, went_on.stderr
    assert " status canceled" in status(pg_url, killed)
    assert (tmp_path / "killed.log").read_text().count("effect last ") == 1
    # ... and the third is ended
    cancel = hints[ended][1]
    assert cancel.endswith(f" cancel {ended}"), cancel
    canceled = as_printed(cancel, new_code())
    assert canceled.returncode == 0, canceled.stderr
    assert " status canceled" in status(pg_url, ended)
