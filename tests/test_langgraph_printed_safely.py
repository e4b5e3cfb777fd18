"""What Flowdesk prints about LangGraph threads: a thread id is the user's
and may hold control or bidi characters (ESC, U+202E), shown escaped in
every line (``show``'s ``context:`` line, ``db copy``'s refusal); ``db
copy`` of threads says their own program continues them (no worker does),
with a checkpointer line that, run as printed, continues a copied thread."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk
from tests.langgraph_worker import build_graph

ODD = "rel \x1b[31m\u202e-1"
SHOWN = "rel \\x1b[31m\\u202e-1"
RAW = ("\x1b", "\u202e")


def _run_to_question(db: Path | str, counts: Path, thread: str) -> None:
    from desktop_app.integrations.langgraph import FlowdeskSaver

    with FlowdeskSaver.open(db) as saver:
        graph = build_graph(str(counts)).compile(checkpointer=saver)
        out = graph.invoke({"topic": "t"}, {"configurable": {"thread_id": thread}})
    assert out["__interrupt__"], out


def test_show_escapes_the_thread_id_in_its_context_line(db_path: Path, tmp_path: Path) -> None:
    _run_to_question(db_path, tmp_path / "counts.txt", ODD)
    shown = flowdesk(db_path, "show", ODD)
    assert shown.returncode == 0, shown.stderr
    assert not any(c in shown.stdout for c in RAW), shown.stdout
    assert f"langgraph thread {SHOWN}  status waiting" in shown.stdout
    assert f"context: run_id {SHOWN}" in shown.stdout, shown.stdout


@pytest.mark.postgres
def test_db_copy_refusal_escapes_a_live_threads_id(db_path: Path, pg_url: str) -> None:
    import apsw

    from desktop_app.flow.owners import new_owner

    me, now = new_owner(), time.time()  # this test's process: alive
    conn = apsw.Connection(str(db_path))
    conn.execute(
        "INSERT INTO langgraph_threads (scope, thread_id, status, created_at, updated_at, owner) "
        "VALUES ('default', ?, 'running', ?, ?, ?)",
        (ODD, now, now, me),
    )
    conn.close()
    refused = flowdesk(db_path, "db", "copy", "--from", str(db_path), "--to", pg_url)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert not any(c in refused.stderr for c in RAW), refused.stderr
    assert f"LangGraph thread {SHOWN} (scope default): process {os.getpid()}" in refused.stderr
    # a thread is continued by its own program, never by a worker
    assert "Nothing was copied: their program on the target would run them" in refused.stderr
    assert (
        "a stopped LangGraph thread is copied as interrupted and its own program continues it, "
        "with its checkpointer opened on the new database), then copy again"
    ) in refused.stderr
    assert "first worker" not in refused.stderr


@pytest.mark.postgres
def test_db_copy_of_threads_says_their_program_continues_them_and_its_line_does(
    db_path: Path, tmp_path: Path, pg_empty_url: str
) -> None:
    counts = tmp_path / "counts.txt"
    _run_to_question(db_path, counts, "lg-copied")
    assert flowdesk(db_path, "answer", "lg-copied", "yes").returncode == 0
    assert flowdesk(pg_empty_url, "db", "apply").returncode == 0
    copied = flowdesk(db_path, "db", "copy", "--from", str(db_path), "--to", pg_empty_url)
    assert copied.returncode == 0, copied.stderr
    assert f"copied 1 LangGraph thread from {db_path} to " in copied.stdout
    lines = copied.stdout.splitlines()
    assert "agent" not in lines[-1] and "on each worker machine" not in copied.stdout
    assert lines[-2] == (
        "next, for the LangGraph threads: a worker does not continue them; each one's own "
        "program does, running graph.invoke with its checkpointer opened on the new database:"
    )
    opened = lines[-1].strip()
    assert opened == f"FlowdeskSaver.open({pg_empty_url!r})"
    # the line as printed, in a program of the graph's own: it goes on from the answer
    program = (
        "import json\n"
        "from desktop_app.integrations.langgraph import FlowdeskSaver\n"
        "from tests.langgraph_worker import build_graph\n"
        f"with {opened} as saver:\n"
        f"    graph = build_graph({str(counts)!r}).compile(checkpointer=saver)\n"
        "    out = graph.invoke(None, {'configurable': {'thread_id': 'lg-copied'}}, "
        "durability='sync')\n"
        "print(json.dumps(out['summary']))\n"
    )
    ran = cli_forkserver.run_argv(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == "['A', 'B', 'C'] approved=yes"
    assert counted_finish(counts) == 1


def counted_finish(counts: Path) -> int:
    return counts.read_text().split().count("finish")
