"""``db copy`` racing the program that resumes a waiting LangGraph thread.

The hole it closes: a program loaded a *waiting* thread (the saver's
``get_tuple``) just before ``db copy`` marked it moved, then resumed it with
``Command(resume=...)``: its nodes ran once on the file before its first
write was refused, and again when the program on PostgreSQL continued the
copy. The checkpointer owned only running and answered threads it loaded,
and the copy held only a running thread busy. Now the checkpointer owns a
waiting thread it loads (checking, in that write, that it has not moved),
and the copy refuses an unfinished thread whose owner lives.

Released together by a barrier (a file both processes wait for), 20 rounds:
the copy and the program, each a process kept across rounds (imports paid
once). The waiting thread's file is prepared once and copied per round.
Node starts are counted in a file: across the file and PostgreSQL (where
the program continues what moved) ``review`` runs twice (once asking, once
answered) and ``finish`` once, whatever the round's outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from desktop_app.errors import redact
from tests import cli_forkserver
from tests.cli_support import REPO
from tests.test_db_copy_live_runs import _pg_clear
from tests.test_langgraph_crash import counted

ROUNDS = 20
THREAD = "lg-race"
#: seconds the program waits between loading the thread and running it
LOADED_S = 0.2

#: a racer kept across rounds: for round N it waits for ``prep-N``, readies
#: itself (``ready-N-ROLE``), waits for ``go-N`` and acts, then writes
#: ``out-N-ROLE`` (JSON). The program resumes the thread on ``rN/file.db``
#: after ``delay`` s, and waits :data:`LOADED_S` between loading the thread
#: and running it (the copy's mark may land there); the copy runs ``flowdesk
#: db copy`` of it to the URL.
RACER = r"""
import contextlib, io, json, sys, time
from pathlib import Path
from langgraph.types import Command
from desktop_app.cli import main
from desktop_app.integrations.langgraph import FlowdeskSaver
from tests.langgraph_worker import build_graph

folder, role, url, thread = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[5]
rounds = int(sys.argv[4])
LOADED_S = float(sys.argv[6])

class Loaded(FlowdeskSaver):
    # the user's checkpointer, in a program slow between loading the thread
    # and running its nodes (the window the copy's mark may land in)

    def get_tuple(self, config):
        found = super().get_tuple(config)
        if "__pregel_runtime" in config["configurable"]:  # LangGraph's loop loads it to run it
            time.sleep(LOADED_S)
        return found

def wait(path):
    while not path.exists():
        time.sleep(0.001)

for n in range(rounds):
    wait(folder / f"prep-{n}")
    here = folder / f"r{n}"
    db = here / "file.db"
    delay = float((here / "delay").read_text())
    out = {}
    if role == "program":
        with Loaded.open(str(db)) as saver:
            graph = build_graph(str(here / "counts.txt")).compile(checkpointer=saver)
            config = {"configurable": {"thread_id": thread}}
            (folder / f"ready-{n}-{role}").touch()
            wait(folder / f"go-{n}")
            time.sleep(delay)
            try:
                res = graph.invoke(Command(resume="yes"), config, durability="sync")
                out = {"rc": 0, "summary": res.get("summary")}
            except Exception as exc:
                out = {"rc": 1, "error": f"{type(exc).__name__}: {exc}"}
    else:
        (folder / f"ready-{n}-{role}").touch()
        wait(folder / f"go-{n}")
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = main(["--db", str(db), "db", "copy", "--from", str(db), "--to", url])
        out = {"rc": rc, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
    (folder / f"out-{n}-{role}.tmp").write_text(json.dumps(out))
    (folder / f"out-{n}-{role}.tmp").rename(folder / f"out-{n}-{role}")
"""


def _racer(folder: Path, role: str, url: str) -> subprocess.Popen[str]:
    return cli_forkserver.popen(
        [sys.executable, "-c", RACER, str(folder), role, url, str(ROUNDS), THREAD, str(LOADED_S)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def _wait(path: Path, proc: subprocess.Popen[str]) -> None:
    """Wait for ``path``, which the racer ``proc`` writes (the other one
    may have ended, its last round done)."""
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"a racer exited ({proc.returncode}): {out}{err}")
        time.sleep(0.002)


def _waiting_thread(db: Path, folder: Path) -> tuple[Path, Path]:
    """The file ``db`` (schema applied), its thread waiting on ``review``'s
    question (made once), and the node starts counted so far."""
    counts = folder / "counts.txt"
    source = (
        "from desktop_app.integrations.langgraph import FlowdeskSaver\n"
        "from tests.langgraph_worker import build_graph\n"
        f"with FlowdeskSaver.open({str(db)!r}) as saver:\n"
        f"    g = build_graph({str(counts)!r}).compile(checkpointer=saver)\n"
        f"    out = g.invoke({{'topic': 't'}}, {{'configurable': {{'thread_id': {THREAD!r}}}}}, "
        "durability='sync')\n"
        "    assert out['__interrupt__'], out\n"
    )
    made = cli_forkserver.run_code(  # `python -c source`, LangGraph imported already
        source, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        flavour="langgraph",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return db, counts


def _copy_file(src: Path, dst: Path) -> None:
    """``src`` (WAL included) as one file at ``dst``, 0600."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()
    dst.chmod(0o600)


def _resume_there(saver_line: str, counts: Path) -> str:
    """The program on PostgreSQL: the checkpointer line the refusal printed,
    evaluated as printed, resumes the thread; its summary."""
    from langgraph.types import Command

    from desktop_app.integrations.langgraph import FlowdeskSaver
    from tests.langgraph_worker import build_graph

    with eval(saver_line, {"FlowdeskSaver": FlowdeskSaver}) as saver:
        graph = build_graph(str(counts)).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": THREAD}}
        out = graph.invoke(Command(resume="yes"), config, durability="sync")
    return str(out.get("summary"))


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_db_copy_racing_the_resume_of_a_waiting_thread_runs_each_node_once_in_all(
    db_path: Path, tmp_path: Path, pg_url: str
) -> None:
    base_db, base_counts = _waiting_thread(db_path, tmp_path)
    asked = counted(base_counts)
    assert asked["review"] == 1 and asked["finish"] == 0, asked
    where = redact(pg_url, mask=None)
    racers = {role: _racer(tmp_path, role, pg_url) for role in ("program", "copy")}
    outcomes = {"copy refused (busy)": 0, "copy refused (changed)": 0, "moved": 0}
    outcomes["finished before the copy"] = 0
    try:
        for n in range(ROUNDS):
            here = tmp_path / f"r{n}"
            here.mkdir()
            _copy_file(base_db, here / "file.db")
            shutil.copy(base_counts, here / "counts.txt")
            # the program starts 0-190 ms after the barrier: before, during and after the copy
            (here / "delay").write_text(str((n % 20) * 0.01))
            _pg_clear(pg_url)
            (tmp_path / f"prep-{n}").touch()
            for role in ("program", "copy"):
                _wait(tmp_path / f"ready-{n}-{role}", racers[role])
            (tmp_path / f"go-{n}").touch()
            out = {}
            for role in ("program", "copy"):
                _wait(tmp_path / f"out-{n}-{role}", racers[role])
                out[role] = json.loads((tmp_path / f"out-{n}-{role}").read_text())
            program, copy = out["program"], out["copy"]
            if copy["rc"] != 0:  # the program owned the thread: it finished on the file
                assert copy["rc"] == 1, copy
                said = copy["stderr"]
                busy = f"LangGraph thread {THREAD} (scope default): process " in said
                assert busy or "changed while the copy read it" in said, said
                assert program == {"rc": 0, "summary": "['A', 'B', 'C'] approved=yes"}, program
                outcomes[f"copy refused ({'busy' if busy else 'changed'})"] += 1
            elif program["rc"] == 1:  # moved before the program owned it: no node ran here
                error = program["error"]
                assert error.startswith(
                    f"ThreadMovedError: LangGraph thread {THREAD} moved to {where} "
                ), error
                assert counted(here / "counts.txt") == asked, (n, error)
                line = error.split("run the graph there: ", 1)[1].strip()
                summary = _resume_there(line, here / "counts.txt")
                assert summary == "['A', 'B', 'C'] approved=yes"
                outcomes["moved"] += 1
            else:  # the program finished before the copy's snapshot: a completed thread copied
                assert program == {"rc": 0, "summary": "['A', 'B', 'C'] approved=yes"}, program
                assert "marked" not in copy["stdout"], copy
                outcomes["finished before the copy"] += 1
            seen = counted(here / "counts.txt")
            assert seen["review"] == 2 and seen["finish"] == 1, (n, out, seen)
            assert {k: v for k, v in seen.items() if k not in ("review", "finish")} == {
                k: v for k, v in asked.items() if k != "review"
            }
    finally:
        for proc in racers.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=60)
    assert sum(outcomes.values()) == ROUNDS, outcomes
    print(outcomes)  # how the rounds went (-s shows it)
