"""A LangGraph thread whose program runs it again shows ``running`` while it
does: after a SIGKILL (the resumed invoke runs the killed step before it
stores any checkpoint) and after an answer stored through ``flowdesk
answer``. ``db copy`` refuses it while that process lives; once the process
ends the thread shows its real status."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.cli_support import flowdesk
from tests.test_langgraph_crash import counted, wait_for, worker


def _status(db: Path, thread: str) -> str:
    listed = flowdesk(db, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    return {r["run_id"]: r["status"] for r in rows}[thread]


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def _refused(db: Path, pg_url: str | None, thread: str, pid: int) -> None:
    if pg_url is None:
        return
    refused = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert thread in refused.stderr and f"process {pid} on host" in refused.stderr
    assert "Nothing was copied" in refused.stderr


@pytest.fixture(params=["plain", pytest.param("copy", marks=pytest.mark.postgres)])
def pg(request) -> str | None:  # type: ignore[no-untyped-def]
    """With PostgreSQL: also check ``db copy`` refuses the live thread."""
    return request.getfixturevalue("pg_url") if request.param == "copy" else None


@pytest.mark.slow
def test_a_resumed_thread_shows_running_while_its_process_runs_it(
    db_path: Path, tmp_path: Path, pg: str | None
) -> None:
    counts = tmp_path / "counts.txt"
    thread = "lg-resumed"
    first = worker(db_path, counts, thread, "--hang", "c")
    try:
        wait_for(lambda: counted(counts)["work:c"] == 1, "the first run's hanging worker")
        assert _status(db_path, thread) == "running"
    finally:
        _kill(first)
    assert _status(db_path, thread) == "interrupted"

    # run again: the resumed invoke hangs in the killed step once more
    second = worker(db_path, counts, thread, "--hang", "c")
    try:
        wait_for(lambda: counted(counts)["work:c"] == 2, "the resumed run's hanging worker")
        assert _status(db_path, thread) == "running"
        _refused(db_path, pg, thread, second.pid)
    finally:
        _kill(second)
    assert second.returncode == -signal.SIGKILL
    assert _status(db_path, thread) == "interrupted"

    # a run to the question: waiting; answered through Flowdesk: answered
    third = worker(db_path, counts, thread)
    _, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert _status(db_path, thread) == "waiting"
    answered = flowdesk(db_path, "answer", thread, "yes")
    assert answered.returncode == 0, answered.stderr
    assert _status(db_path, thread) == "answered"

    # the invoke after the answer runs review and hangs in finish: running
    fourth = worker(db_path, counts, thread, "--hang", "finish")
    try:
        wait_for(lambda: counted(counts)["finish"] == 1, "the answered run's finish")
        assert _status(db_path, thread) == "running"
        _refused(db_path, pg, thread, fourth.pid)
    finally:
        _kill(fourth)
    assert fourth.returncode == -signal.SIGKILL
    assert _status(db_path, thread) == "interrupted"

    # run to the end: completed, every step counted
    last = worker(db_path, counts, thread)
    _, err = last.communicate(timeout=120)
    assert last.returncode == 0, err
    assert _status(db_path, thread) == "completed"
    assert counted(counts) == Counter(
        {"plan": 1, "work:a": 1, "work:b": 1, "work:c": 3, "review": 2, "finish": 2}
    )
