"""Crash cases with real processes killed by SIGKILL, then restarted."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.store.sqlite.store import open_store

WORKER = Path(__file__).resolve().parent / "flow_worker.py"


def worker(db: Path, log: Path, flow: str, kill: str | None = None):
    cmd = [sys.executable, str(WORKER), str(db), str(log), flow]
    if kill:
        cmd += ["--kill", kill]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def final(db: Path, flow_name: str):
    from tests import flow_worker

    store = open_store(db)
    engine = Engine(store, flows=[flow_worker.FLOWS[flow_name]()])
    (run,) = store.list_runs()
    return store, engine, run


@pytest.mark.scenario("S19")
@pytest.mark.scenario("S49")
def test_crash_in_one_branch_reruns_only_that_branch(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "parallel3", kill="branch-c")
    assert r.returncode == -signal.SIGKILL, r.stderr
    # the worker orders the branches through the file: b, then a (after b's
    # checkpoint), then c (after both checkpoints), so both were saved before c died
    assert lines(log) == ["before", "branch:b", "branch:a", "branch:c"]
    r = worker(db_path, log, "parallel3")
    assert r.returncode == 0, r.stderr
    counts = Counter(lines(log))
    assert counts == {"before": 1, "branch:a": 1, "branch:b": 1, "branch:c": 2, "after": 1}
    store, engine, run = final(db_path, "parallel3")
    state = engine.get(run.run_id)
    assert run.status == "completed"
    assert state.items == ["a", "b", "c"]  # declared order, not completion order
    assert state.n == 3
    store.close()


@pytest.mark.scenario("S20")
def test_loop_checkpointed_per_iteration_resumes_at_next_iteration(db_path, tmp_path):
    log = tmp_path / "log"
    assert worker(db_path, log, "loop10", kill="iteration-6").returncode == -signal.SIGKILL
    assert worker(db_path, log, "loop10").returncode == 0
    counts = Counter(lines(log))
    assert counts["iteration:6"] == 2  # in flight at the kill
    assert all(counts[f"iteration:{i}"] == 1 for i in (1, 2, 3, 4, 5, 7, 8, 9, 10))
    assert "iteration:11" not in counts and counts["done"] == 1
    store, engine, run = final(db_path, "loop10")
    assert engine.get(run.run_id).n == 10
    store.close()


@pytest.mark.scenario("S22")
def test_resume_only_step_runs_on_recover_after_crash(db_path, tmp_path):
    log = tmp_path / "log"
    assert worker(db_path, log, "recover", kill="body").returncode == -signal.SIGKILL
    assert worker(db_path, log, "recover").returncode == 0
    assert lines(log) == ["first", "body", "on_recover", "last"]
    store, engine, run = final(db_path, "recover")
    assert engine.get(run.run_id).note == "recovered"
    assert store.latest(run.run_id).steps["charge"].attempts == 2
    store.close()


@pytest.mark.scenario("S2")
def test_sigkill_mid_step_reruns_only_that_step(db_path, tmp_path):
    log = tmp_path / "log"
    assert worker(db_path, log, "linear10", kill="step-5").returncode == -signal.SIGKILL
    assert worker(db_path, log, "linear10").returncode == 0
    counts = Counter(lines(log))
    assert counts == {**{f"s{i}": 1 for i in range(10)}, "s5": 2}
    store, engine, run = final(db_path, "linear10")
    assert run.status == "completed" and engine.get(run.run_id).n == 10
    rec = store.latest(run.run_id).steps
    assert rec["s5"].attempts == 2 and all(rec[f"s{i}"].attempts == 1 for i in range(10) if i != 5)
    store.close()


@pytest.mark.slow
@pytest.mark.scenario("S15")
@pytest.mark.scenario("S48")
def test_kill_during_backoff_resumes_at_attempt_3_at_stored_time(db_path, tmp_path):
    log = tmp_path / "log"
    r = worker(db_path, log, "backoff", kill="backoff-2")
    assert r.returncode == -signal.SIGKILL
    store = open_store(db_path)
    (run,) = store.list_runs()
    rec = store.latest(run.run_id).steps["call"]
    store.close()
    assert rec.status == "in_progress" and rec.attempts == 3  # attempt 3 is next
    assert rec.next_retry_at is not None
    assert rec.error_type == "ConnectionResetError"
    r = worker(db_path, log, "backoff")
    assert r.returncode == 0, r.stderr
    attempts = [line.split(":") for line in lines(log)]
    assert [a[1] for a in attempts] == ["1", "2", "3"]  # attempt 3, not 1 again
    assert float(attempts[2][2]) >= rec.next_retry_at - 0.01  # not before the stored time
    store, engine, run = final(db_path, "backoff")
    assert run.status == "completed" and engine.get(run.run_id).n == 3
    assert store.latest(run.run_id).steps["call"].attempts == 3
    store.close()
