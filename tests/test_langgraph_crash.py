"""S95: a LangGraph graph checkpointed by Flowdesk is killed with SIGKILL
mid-run (inside a ``Send`` fan-out) and resumed in a new process: completed
nodes do not run again (executions counted in a file); its ``interrupt()``
is answered with the command ``flowdesk show`` prints, run as printed; the
graph goes on; the thread shows in ``flowdesk runs`` (kind ``langgraph``)
and ``show`` with its checkpoints and the ExecutionContext ids."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk

WORKER = str(REPO / "tests" / "langgraph_worker.py")


def worker(db: Path | str, counts: Path, thread: str, *extra: str) -> subprocess.Popen[str]:
    return cli_forkserver.popen(
        [sys.executable, WORKER, str(db), str(counts), thread, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def counted(counts: Path) -> Counter[str]:
    return Counter(counts.read_text().split()) if counts.exists() else Counter()


def stored_results(db: Path | str, thread: str) -> int:
    """How many ``results`` writes of finished fan-out tasks the database holds."""
    from desktop_app.integrations.langgraph import FlowdeskSaver

    with FlowdeskSaver.open(db) as saver:
        row = saver.store.query(
            lambda tx: tx.fetchone(
                "SELECT count(*) FROM langgraph_writes WHERE thread_id=? AND channel='results'",
                (thread,),
            )
        )
    assert row is not None
    return int(row[0])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request, db_path: Path) -> Path | str:
    """The database the graph checkpoints into: a SQLite file or a PostgreSQL URL."""
    return request.getfixturevalue("pg_url") if request.param == "postgres" else db_path


def wait_for(predicate, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def as_printed(command: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """Run a command Flowdesk suggested exactly as printed (``flowdesk`` is this checkout)."""
    argv = shlex.split(command)
    assert argv[0] == "flowdesk", command
    return cli_forkserver.run(argv[1:], input=stdin, cwd=REPO, timeout=120)


@pytest.mark.scenario("S95")
@pytest.mark.slow
def test_sigkill_mid_fan_out_then_resume_and_answer(database: Path | str, tmp_path: Path) -> None:
    db_path = database
    counts = tmp_path / "counts.txt"
    thread = "lg-thread-1"

    first = worker(db_path, counts, thread, "--hang", "c")
    try:
        # the worker of c hangs; a's and b's writes are committed
        wait_for(lambda: counted(counts)["work:c"] == 1, "the hanging worker")
        wait_for(lambda: stored_results(db_path, thread) == 2, "a's and b's writes")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert counted(counts) == Counter({"plan": 1, "work:a": 1, "work:b": 1, "work:c": 1})

    # the killed thread lists as an interrupted langgraph run
    listed = flowdesk(db_path, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["kind"], r["run_id"], r["status"]) for r in rows] == [
        ("langgraph", thread, "interrupted")
    ]
    # resume --all cannot run a graph: it names the thread and what continues it
    resumed = flowdesk(db_path, "resume", "--all")
    assert resumed.returncode == 0, resumed.stderr
    assert f"langgraph thread {thread} is interrupted" in resumed.stdout
    assert "no interrupted runs" not in resumed.stdout  # one is: the thread
    assert resumed.stdout.startswith("no interrupted flow or agent runs in ")
    go_on = f"graph.invoke(None, {{'configurable': {{'thread_id': '{thread}'}}}}, " + (
        'durability="sync")'
    )
    assert f"its program continues it with {go_on}\n" in resumed.stdout
    assert counted(counts) == Counter({"plan": 1, "work:a": 1, "work:b": 1, "work:c": 1})

    second = worker(db_path, counts, thread, "--call", go_on)  # the program runs it as printed
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    got = json.loads(out.splitlines()[-1])
    assert got["interrupts"] == [{"question": "approve these results?", "results": ["A", "B", "C"]}]
    # plan, a and b never ran again; only the killed worker of c did
    assert counted(counts) == Counter(
        {"plan": 1, "work:a": 1, "work:b": 1, "work:c": 2, "review": 1}
    )

    shown = flowdesk(db_path, "show", thread)
    assert shown.returncode == 0, shown.stderr
    assert f"langgraph thread {thread}  status waiting" in shown.stdout
    assert "session_id s-1" in shown.stdout and "tenant_id acme" in shown.stdout
    assert "approve these results?" in shown.stdout
    hint = re.search(r"answer it \(the answer on standard input\): (.+)", shown.stdout)
    assert hint is not None, shown.stdout
    answered = as_printed(hint.group(1), stdin="ship it\n")
    assert answered.returncode == 0, answered.stderr
    assert f"langgraph thread {thread} answered" in answered.stdout
    # until its program runs the graph again, the thread says so: answered,
    # not running (no process runs it) nor interrupted (nothing stopped)
    shown = flowdesk(db_path, "show", thread)
    assert f"langgraph thread {thread}  status answered" in shown.stdout, shown.stdout
    assert f"its program runs {go_on}\n" in shown.stdout
    listed = json.loads(flowdesk(db_path, "runs", "--status", "answered", "-o", "json").stdout)
    assert [r["run_id"] for r in listed] == [thread]

    third = worker(db_path, counts, thread, "--call", go_on)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    got = json.loads(out.splitlines()[-1])
    assert got == {"interrupts": [], "summary": "['A', 'B', 'C'] approved=ship it"}
    # review ran again to receive the answer (LangGraph re-runs an interrupted
    # node from its start); nothing else did
    assert counted(counts) == Counter(
        {"plan": 1, "work:a": 1, "work:b": 1, "work:c": 2, "review": 2, "finish": 1}
    )

    shown = flowdesk(db_path, "show", thread, "--json")
    detail = json.loads(shown.stdout)
    assert detail["status"] == "completed"
    assert detail["context"] == {"run_id": thread, "session_id": "s-1", "tenant_id": "acme"}
    assert len(detail["checkpoints"]) >= 5
    assert detail["state"]["summary"] == "['A', 'B', 'C'] approved=ship it"
