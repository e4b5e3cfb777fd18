"""After ``db copy``, the file's unfinished LangGraph threads are marked moved:
the user's program opening the checkpointer on the file refuses to continue
them, while the same program on PostgreSQL completes them.

The hole it closes: ``db copy`` fenced the file's flow and agent runs, but a
thread left interrupted or waiting in the file could still be continued
there by its program (``graph.invoke`` with ``FlowdeskSaver`` on the file)
while the program on PostgreSQL continued the copy, so its nodes ran in
both places. Node executions are counted in files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.errors import redact
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk
from tests.test_langgraph_crash import counted, stored_results, wait_for, worker


def _program(
    opened: str, counts: Path, thread: str, arg: str = "None"
) -> subprocess.CompletedProcess[str]:
    """The user's program, in a process of its own: ``with OPENED as saver``
    (a line as Flowdesk prints it), the graph of tests/langgraph_worker.py
    run on ``thread`` with ``arg`` (Python source) as its input."""
    source = (
        "import json\n"
        "from langgraph.types import Command\n"
        "from desktop_app.integrations.langgraph import FlowdeskSaver\n"
        "from tests.langgraph_worker import build_graph\n"
        f"with {opened} as saver:\n"
        f"    graph = build_graph({str(counts)!r}).compile(checkpointer=saver)\n"
        f"    out = graph.invoke({arg}, {{'configurable': {{'thread_id': {thread!r}}}}}, "
        "durability='sync')\n"
        "print(json.dumps({'interrupts': [i.value for i in out.get('__interrupt__', [])], "
        "'summary': out.get('summary')}))\n"
    )
    return cli_forkserver.run_code(  # `python -c source`, LangGraph imported already
        source, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        flavour="langgraph",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.postgres
def test_db_copy_marks_unfinished_threads_moved_their_program_on_the_file_refuses_and_on_postgres_completes_them(  # noqa: E501
    db_path: Path, tmp_path: Path, pg_url: str
) -> None:
    db = db_path
    killed, asks = tmp_path / "killed.txt", tmp_path / "asks.txt"
    # a thread killed mid fan-out (its worker of c hangs), one waiting for an answer
    first = worker(db, killed, "lg-killed", "--hang", "c")
    try:
        wait_for(lambda: counted(killed)["work:c"] == 1, "the hanging worker")
        wait_for(lambda: stored_results(db, "lg-killed") == 2, "a's and b's writes")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    waits = _program(f"FlowdeskSaver.open({str(db)!r})", asks, "lg-asks", "{'topic': 't'}")
    assert waits.returncode == 0, waits.stderr
    assert json.loads(waits.stdout)["interrupts"], waits.stdout
    before = {"killed": counted(killed), "asks": counted(asks)}

    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert copied.returncode == 0, copied.stderr
    assert f"marked 2 unfinished LangGraph threads moved in {db}: a checkpointer on it no " in (
        copied.stdout
    )
    where = redact(pg_url, mask=None)
    printed = copied.stdout.splitlines()[-1].strip()  # the checkpointer line db copy prints
    assert printed == f"FlowdeskSaver.open({where!r})", copied.stdout

    # the program on the file refuses both, running no node
    for thread, counts, arg in (
        ("lg-killed", killed, "None"),
        ("lg-asks", asks, "Command(resume='yes')"),
    ):
        refused = _program(f"FlowdeskSaver.open({str(db)!r})", counts, thread, arg)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = refused.stderr.strip().splitlines()[-1]
        assert said.startswith(
            f"desktop_app.errors.ThreadMovedError: LangGraph thread {thread} moved to {where} "
            "(flowdesk db copy): its program continues it there"
        ), said
        assert said.endswith(f"run the graph there: FlowdeskSaver.open({where!r}, scope='default')")
    assert {"killed": counted(killed), "asks": counted(asks)} == before

    # flowdesk answer on the file refuses too; its hint, run as printed, shows it there
    answered = flowdesk(db, "answer", "lg-asks", "yes")
    assert answered.returncode == 1, answered.stdout + answered.stderr
    assert f"LangGraph thread lg-asks moved to {where} (flowdesk db copy)" in answered.stderr
    hint = answered.stderr.split("see it there: ", 1)[1].splitlines()[0]
    assert hint == f"flowdesk --db {where} show lg-asks"
    there = as_printed(hint, dict(os.environ))
    assert there.returncode == 0, there.stderr
    assert "langgraph thread lg-asks  status waiting" in there.stdout
    waiting = flowdesk(db, "waiting")  # apart, with no answer hint that would be refused
    assert waiting.stdout == (
        f"no waiting runs\nLangGraph thread lg-asks moved to {where} by flowdesk db copy "
        f"while it waited: it is answered there, not here (see it there: {hint})\n"
    )
    listed = flowdesk(db, "runs", "--json")
    rows = {r["run_id"]: r["status"] for r in map(json.loads, listed.stdout.splitlines())}
    assert rows == {"lg-killed": "moved", "lg-asks": "moved"}
    only = flowdesk(db, "runs", "--status", "moved", "--json")
    assert only.returncode == 0, only.stderr
    assert sorted(json.loads(ln)["run_id"] for ln in only.stdout.splitlines()) == [
        "lg-asks",
        "lg-killed",
    ]
    for other in ("waiting", "running", "interrupted"):  # stored or shown: not these any more
        listed = flowdesk(db, "runs", "--status", other, "--json")
        assert listed.returncode == 0 and listed.stdout == "", (other, listed)
    shown = flowdesk(db, "show", "lg-asks")
    assert f"moved to {where} by flowdesk db copy: its program continues it there" in shown.stdout
    assert "flowdesk answer" not in shown.stdout  # no answer hint that would be refused
    # a second copy of the file would continue them in two places: refused
    again = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url)
    assert again.returncode == 1
    assert f"LangGraph thread lg-asks (scope default): moved to {where}" in again.stderr

    # the program on PostgreSQL, with the printed line, completes both
    resumed = _program(printed, killed, "lg-killed")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["interrupts"], resumed.stdout
    assert flowdesk(pg_url, "answer", "lg-killed", "yes").returncode == 0
    for thread, counts in (("lg-killed", killed), ("lg-asks", asks)):
        arg = "None" if thread == "lg-killed" else "Command(resume='yes')"
        done = _program(printed, counts, thread, arg)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["summary"] == "['A', 'B', 'C'] approved=yes"
    # each node once, but c's killed worker (again on PostgreSQL) and review, which
    # LangGraph runs again when its interrupt is answered; never on the file
    assert counted(killed) == Counter(
        {"plan": 1, "work:a": 1, "work:b": 1, "work:c": 2, "review": 2, "finish": 1}
    )
    assert counted(asks) == Counter(
        {"plan": 1, "work:a": 1, "work:b": 1, "work:c": 1, "review": 2, "finish": 1}
    )
