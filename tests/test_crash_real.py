"""Crash scenarios with a real SIGKILL of a real process, then a restart:
each asserts the final status and counts executions from the worker's
fsync'd log (S2's condition case, S47)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.store.sqlite.store import open_store
from tests import flow_worker

WORKER = Path(__file__).resolve().parent / "flow_worker.py"


def worker(db: Path, log: Path, flow: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(WORKER), str(db), str(log), flow, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.scenario("S2")
def test_condition_step_after_a_crash_skips_its_completed_nested_steps(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "cond3", "--kill", "n2")
    assert r.returncode == -signal.SIGKILL
    assert lines(log) == ["before", "n1", "n2"]
    r = worker(db_path, log, "cond3")
    assert r.returncode == 0, r.stderr
    assert "recovered completed" in r.stdout
    assert Counter(lines(log)) == {"before": 1, "n1": 1, "n2": 2, "n3": 1, "after": 1}
    store = open_store(db_path)
    engine = Engine(store, flows=[flow_worker.cond3()])
    (run,) = store.list_runs()
    assert run.status == "completed"
    assert engine.get(run.run_id).items == ["n1", "n2", "n3"]
    steps = store.latest(run.run_id).steps
    assert all(steps[n].status == "completed" for n in ("n1", "n2", "n3"))
    assert steps["n1"].attempts == 1 and steps["n3"].attempts == 1
    store.close()


@pytest.mark.scenario("S47")
def test_answered_wait_is_not_asked_again_after_a_sigkill_in_the_next_step(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "approve")
    assert r.returncode == 0, r.stderr
    assert "ran waiting" in r.stdout
    r = worker(db_path, log, "approve", "--answer", "approved", "--kill", "after")
    assert r.returncode == -signal.SIGKILL  # killed during the step after the approval
    assert lines(log) == ["prep", "approve", "approve", "after"]
    r = worker(db_path, log, "approve")
    assert r.returncode == 0, r.stderr
    assert "recovered completed" in r.stdout
    # prep once; the approval step's body ran when it asked and when it was
    # answered, never again; only the step in flight at the kill ran twice
    assert Counter(lines(log)) == {"prep": 1, "approve": 2, "after": 2}
    store = open_store(db_path)
    engine = Engine(store, flows=[flow_worker.approve()])
    (run,) = store.list_runs()
    assert run.status == "completed"
    state = engine.get(run.run_id)
    assert (state.note, state.n, state.items) == ("approved", 1, ["prepped"])
    assert engine.waiting() == [] and store.latest(run.run_id).waits == ()
    store.close()
