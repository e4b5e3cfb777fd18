"""Agent crash scenarios with a real SIGKILL inside a tool call (or right
after a dispatched agent finished), then a freshly built agent over the same
file in a new process: S35, S38, S40. Executions are counted from the
worker's fsync'd log."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

WORKER = Path(__file__).resolve().parent / "agent_worker.py"


def worker(db: Path, log: Path, case: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(WORKER), str(db), str(log), case, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def agent_runs(db: Path):
    store = open_store(db)
    try:
        return SqliteAgentStore(store).list()
    finally:
        store.close()


@pytest.mark.scenario("S35")
def test_agent_killed_in_a_tool_reenters_with_saved_history_in_a_new_process(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "ask", "--kill-in-tool", "b")
    assert r.returncode == -signal.SIGKILL
    (run,) = agent_runs(db_path)
    assert run.status not in ("done", "failed")
    r = worker(db_path, log, "ask")
    assert r.returncode == 0, r.stderr
    assert "resumed done" in r.stdout
    tools = Counter(line for line in lines(log) if line.startswith("tool"))
    assert tools == {"tool a": 1, "tool b": 2}  # a completed before the kill: not invoked again
    models = [line for line in lines(log) if line.startswith("model")]
    # the restarted model call saw the saved input and both tool results
    assert models[-1] == "model 'find a then b' tools=['result for a', 'result for b']"
    assert len(models) == 3
    (run,) = agent_runs(db_path)
    assert run.status == "done"


@pytest.mark.scenario("S38")
def test_streaming_resume_after_a_sigkill_does_not_replay_a_completed_tool(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "stream", "--kill-in-tool", "b")
    assert r.returncode == -signal.SIGKILL
    assert "event tool_end lookup" in r.stdout  # a's tool finished before the kill
    r = worker(db_path, log, "stream")
    assert r.returncode == 0, r.stderr
    assert "streamed done: a and b" in r.stdout
    assert "tools ['lookup']" in r.stdout  # only b started again
    assert "resumed done" in r.stdout
    tools = Counter(line for line in lines(log) if line.startswith("tool"))
    assert tools == {"tool a": 1, "tool b": 2}
    (run,) = agent_runs(db_path)
    assert run.status == "done"


@pytest.mark.scenario("S40")
def test_replayed_flow_step_reattaches_to_its_agent_run_after_a_sigkill(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "flow", "--kill-after-agent")
    assert r.returncode == -signal.SIGKILL
    assert lines(log) == ["model 'Capital of France?' tools=[]", "ask step returned"]
    r = worker(db_path, log, "flow")
    assert r.returncode == 0, r.stderr
    assert "recovered completed" in r.stdout
    counts = Counter(lines(log))
    # the step ran again and reattached to its child: one model call in all
    assert counts == {"model 'Capital of France?' tools=[]": 1, "ask step returned": 2, "count": 1}
    store = open_store(db_path)
    (parent,) = store.list_runs(flow_name="quiz")
    assert parent.status == "completed"
    children = SqliteAgentStore(store).list()
    assert len(children) == 1 and children[0].parent_run_id == parent.run_id
    assert children[0].status == "done"
    store.close()
