"""``flowdesk agent`` on SQLite resumes a run another process left behind
while the agent runs (a new user's report: it did so only when it started,
so a digest killed a minute after the agent started stayed ``interrupted``
until the agent was restarted). Real processes: the agent, a ``flowdesk run``
killed with SIGKILL or stopped with Ctrl-C, and the CLI to read the outcome.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import apsw
import pytest

from tests.cli_support import flowdesk, spawn
from tests.digest_corpus import make_corpus
from tests.test_digest import read_rows

FILES = 1500


def statuses(db: Path) -> dict[str, str]:
    out = flowdesk(db, "runs", "--json")
    assert out.returncode == 0, out.stderr
    return {r["run_id"]: r["status"] for r in map(json.loads, out.stdout.splitlines())}


def _completed_while_stopped(db: Path, pid: int, run_id: str) -> bool:
    """Whether run ``run_id`` is stored ``completed``, read once process
    ``pid`` is stopped (its state ``T``; ``Z``: it ended on its own just
    before the stop), so nothing it does later counts."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "TtZ":
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.01)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT status FROM runs WHERE run_id=?", (run_id,)).fetchone()
    finally:
        conn.close()
    return row is not None and row[0] == "completed"


def stopped_mid_way(db: Path, folder: Path, out: Path, stop: signal.Signals) -> str | None:
    """A ``flowdesk run digest`` stopped with ``stop`` once it reported 20
    files done; its run id, or ``None`` when it had finished before the
    signal (this test read its progress lines from a pipe the run filled
    faster than a loaded machine let the test read: the race was lost, not
    the behaviour)."""
    run = spawn("--db", str(db), "run", "digest", "--folder", str(folder), "--out", str(out))
    assert run.stdout is not None and run.stderr is not None
    run_id = run.stdout.readline().strip()
    for line in run.stderr:  # plain progress lines: "  done/total"
        m = re.match(rf"\s+(\d+)/{FILES}", line)
        if m and int(m.group(1)) >= 20:
            break
    run.send_signal(signal.SIGSTOP)  # at once: nothing more runs until the stop lands
    if run.poll() is not None:
        run.communicate(timeout=60)
        assert run.returncode == 0, run.returncode
        return None
    if _completed_while_stopped(db, run.pid, run_id):
        # its last step was saved before the stop (it was only ending): the
        # race was lost, and a Ctrl-C now would find nothing left to stop
        run.send_signal(signal.SIGCONT)
        run.communicate(timeout=60)
        assert run.returncode == 0, run.returncode
        return None
    run.send_signal(stop)
    run.send_signal(signal.SIGCONT)
    run.communicate(timeout=60)
    if stop == signal.SIGINT and run.returncode == 0:
        # Ctrl-C lets the step under way end and saves it; that was the
        # last one (under load the stop came as it began): the run completed
        # and nothing was left behind, the race was lost
        assert statuses(db)[run_id] == "completed"
        return None
    assert run.returncode in (-signal.SIGKILL, 130)
    return run_id


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_the_agent_resumes_a_run_left_behind_after_it_started(
    tmp_path: Path, stop: signal.Signals
) -> None:
    folder = tmp_path / "docs"
    make_corpus(folder, FILES)
    for attempt in range(3):  # a new database for each: a finished run is no left-behind one
        db, out = tmp_path / f"f{attempt}.db", tmp_path / f"o{attempt}"
        assert flowdesk(db, "db", "apply").returncode == 0
        agent = spawn("--db", str(db), "agent", "--poll", "0.2")
        try:
            assert agent.stderr is not None
            assert "flowdesk agent: serving" in agent.stderr.readline()
            run_id = stopped_mid_way(db, folder, out, stop)
            if run_id is not None:
                deadline = time.monotonic() + 120
                while statuses(db)[run_id] != "completed":
                    assert time.monotonic() < deadline, f"the agent left run {run_id}"
                    time.sleep(0.2)
        finally:
            agent.send_signal(signal.SIGTERM)
            _, said = agent.communicate(timeout=60)
        assert agent.returncode == 0
        if run_id is not None:
            # it says so of each run it ends, as a PostgreSQL worker does
            assert f"flowdesk agent: run {run_id} completed\n" in said, said
            break
    assert run_id is not None, "the run finished before the signal, three times"
    assert statuses(db) == {run_id: "completed"}  # the same run, no second one
    rows = read_rows(db)
    assert len(rows) == FILES and all(r["times_processed"] == 1 for r in rows)
    assert (out / "digest.md").is_file()


def shown(db: str, run_id: str) -> dict[str, object]:
    out = flowdesk(db, "show", run_id, "--json")
    assert out.returncode == 0, out.stderr
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


@pytest.mark.slow
def test_a_postgres_worker_takes_over_at_once_a_run_whose_process_on_this_host_died(
    tmp_path: Path, pg_url: str
) -> None:
    """A ``flowdesk run`` holds its run without a worker's liveness lock; killed,
    its lease ran on for 30 s and a worker on the same machine waited for it
    (a new user's report). The worker now takes it over before that lease
    expires, as the README says of an owner on this host that is gone."""
    from datetime import datetime

    folder, out = tmp_path / "docs", tmp_path / "o"
    make_corpus(folder, FILES)
    run = spawn("--db", pg_url, "run", "digest", "--folder", str(folder), "--out", str(out))
    assert run.stdout is not None and run.stderr is not None
    run_id = run.stdout.readline().strip()
    for line in run.stderr:
        m = re.match(rf"\s+(\d+)/{FILES}", line)
        if m and int(m.group(1)) >= 20:
            break
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=60)
    dead = shown(pg_url, run_id)
    assert dead["status"] == "interrupted"
    expires = datetime.fromisoformat(str(dead["lease_expires_at"]).replace("Z", "+00:00"))
    agent = spawn("--db", pg_url, "agent", "--poll", "0.2")
    try:
        while True:
            now = time.time()
            doc = shown(pg_url, run_id)
            if (
                doc["lease_owner"] not in (dead["lease_owner"], None)
                or doc["status"] != "interrupted"
            ):
                break
            assert now < expires.timestamp() + 5, "the worker waited for the dead lease to expire"
            time.sleep(0.2)
        assert now < expires.timestamp()  # taken over before the dead lease expired
        deadline = time.monotonic() + 120
        while shown(pg_url, run_id)["status"] != "completed":
            assert time.monotonic() < deadline, shown(pg_url, run_id)
            time.sleep(0.2)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)
    assert agent.returncode == 0
    assert (out / "digest.md").is_file()
