"""A ``start`` whose run a ``flowdesk agent`` worker took over says so, with
exit 3 and the ``show`` command that follows the run (run as printed), not
exit 1 and "revision N conflicts …; Reload the run and try again" (a new
user's report: a PostgreSQL restart while ``start`` ran its run in-process
lapsed its lease, a worker took the run over and completed it).

Real processes on a real PostgreSQL: the ``start`` process is held in its
``gate`` step and stopped (SIGSTOP: no heartbeat renews its lease, as while
the database is unreachable), its lease is made to lapse (set to the past by
SQL, as the 30 s TTL running out by the database's clock), a real worker
takes the run over and completes it; the ``start`` process, continued,
finds its run gone on without it. The ``gate`` step ran in both processes
(steps run at least once, as the message says); ``last`` ran once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psycopg
import pytest

from tests.cli_support import as_printed, flowdesk, spawn
from tests.gated_flows import FLOWS_ENV
from tests.polling import until

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def shown(url: str, run_id: str) -> dict:
    out = flowdesk(url, "show", run_id, "-o", "json", env=ENV)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_start_whose_run_a_worker_took_over_says_so_with_exit_3(
    tmp_path: Path, pg_url: str
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    start = spawn(
        "--db", pg_url, "start", "gated", "--input", json.dumps({"dir": str(work)}), env=ENV,
        new_session=True,  # it is stopped with SIGSTOP below
    )  # fmt: skip
    agent = None
    try:
        runs = work / "gate.runs"  # made by open() before its line is written: wait for the line
        until(
            lambda: runs.exists() and runs.read_text().endswith("\n"),
            "the start process to reach its gate step",
        )
        start.send_signal(signal.SIGSTOP)  # no heartbeat from here on
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute(
                "UPDATE flowdesk.runs SET lease_expires_at = now() - interval '1 second' "
                "WHERE flow_name = 'gated' RETURNING run_id, lease_owner"
            ).fetchall()
        assert len(rows) == 1, rows
        run_id, owner = rows[0]
        (work / "go").touch()
        agent = spawn("--db", pg_url, "agent", "--poll", "0.2", env=ENV)
        until(
            lambda: shown(pg_url, run_id)["status"] == "completed",
            "the worker to complete the run it took over",
            bound_s=120,
        )
        start.send_signal(signal.SIGCONT)
        _, err = start.communicate(timeout=120)
    finally:
        start.send_signal(signal.SIGCONT)
        if start.poll() is None:
            start.kill()
            start.communicate()
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.communicate(timeout=60)
    assert start.returncode == 3, err
    assert "Traceback" not in err and "Reload the run" not in err, err
    assert f"run {run_id} was taken over by another process" in err, err
    assert "it went on there and is completed now" in err, err
    assert "had in flight ran again there (steps run at least once" in err, err
    hint = err.split("Follow the run with: ", 1)[1].strip()
    assert hint == f"flowdesk --db {pg_url} show {run_id}", hint
    followed = as_printed(hint, {**os.environ, **ENV})
    assert followed.returncode == 0, followed.stderr
    assert f"run {run_id}" in followed.stdout and "status completed" in followed.stdout
    # the gate step ran in both processes; the last step once, in the worker
    gate_pids = (work / "gate.runs").read_text().split()
    assert len(gate_pids) == 2 and gate_pids[0] == str(start.pid), gate_pids
    assert (work / "last.runs").read_text().split() == [gate_pids[1]]
    assert str(start.pid) in owner, owner
