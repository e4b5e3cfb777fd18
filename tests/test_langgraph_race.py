"""A step's checkpoint and its interrupt, stored at one instant from two
connections (as LangGraph's background threads store them), leave the thread
``waiting`` whichever commits first: 20 rounds on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Interrupt

from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests import cli_forkserver

ROUNDS = 20


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request, db_path: Path) -> Path | str:
    return request.getfixturevalue("pg_url") if request.param == "postgres" else db_path


def at_once(gate: threading.Barrier, call, *args) -> None:  # type: ignore[no-untyped-def]
    gate.wait()
    call(*args)


@pytest.mark.scenario("S95")
def test_checkpoint_and_interrupt_at_one_instant_leave_the_thread_waiting(database) -> None:
    with FlowdeskSaver.open(database) as a, FlowdeskSaver.open(database) as b:
        waiting = 0
        for n in range(ROUNDS):
            thread = f"race-{n}"
            base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            first = a.put(base, {**empty_checkpoint(), "updated_channels": ["__start__"]}, {}, {})
            step = {**empty_checkpoint(), "updated_channels": ["branch:to:review"]}
            stored = {"configurable": {**first["configurable"], "checkpoint_id": step["id"]}}
            gate = threading.Barrier(2)
            asked = [("__interrupt__", [Interrupt("ok?", id="i")])]
            workers = [
                threading.Thread(target=at_once, args=(gate, a.put, first, step, {"step": 1}, {})),
                threading.Thread(target=at_once, args=(gate, b.put_writes, stored, asked, "task")),
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            got = get_thread(a.store, a.scope, thread)
            assert got is not None and got.checkpoint_id == step["id"]
            waiting += got.status == "waiting" and got.interrupts == ["ok?"]
        assert waiting == ROUNDS


@pytest.mark.slow
@pytest.mark.scenario("S95")
def test_two_answers_at_one_instant_store_one_and_refuse_the_other(
    database, tmp_path: Path
) -> None:
    """The CLI and the app (two real processes) answer a thread's interrupt
    at the same instant, 20 rounds (a thread each) on SQLite and PostgreSQL:
    one answer is stored and the other refused, never both "answered" with
    the second overwriting the first."""
    import subprocess
    import sys
    import time

    worker = Path(__file__).resolve().parent / "langgraph_answer_worker.py"
    threads = [f"answer-race-{n}" for n in range(ROUNDS)]
    with FlowdeskSaver.open(database) as saver:
        for thread in threads:
            base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            step = {**empty_checkpoint(), "updated_channels": ["branch:to:review"]}
            stored = saver.put(base, step, {"step": 1}, {})
            saver.put_writes(stored, [("__interrupt__", [Interrupt("ship?", id="i")])], "task")
            assert get_thread(saver.store, saver.scope, thread).status == "waiting"  # type: ignore[union-attr]
    start = time.time() + 5.0  # both interpreters are up by then
    outs = [tmp_path / "a.out", tmp_path / "b.out"]

    def answering(value: str, out: Path) -> subprocess.Popen[str]:
        argv = [str(database), value, str(start), "0.3", str(out), *threads]
        return cli_forkserver.popen(
            [sys.executable, str(worker), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    procs = [answering("from-a", outs[0]), answering("from-b", outs[1])]
    said = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, said, strict=True):
        assert p.returncode == 0, err
    codes = [dict(line.split() for line in out.read_text().splitlines()) for out in outs]
    refusals = [
        line for _, err in said for line in err.splitlines() if "nothing was stored" in line
    ]
    assert len(refusals) == ROUNDS  # the loser of each round was told so
    with FlowdeskSaver.open(database) as saver:
        for i, thread in enumerate(threads):
            a, b = codes[0][str(i)], codes[1][str(i)]
            assert sorted([a, b]) == ["0", "1"], (i, a, b)  # the loser: exit 1, as a run
            winner = "from-a" if a == "0" else "from-b"
            got = get_thread(saver.store, saver.scope, thread)
            assert got is not None and got.status == "answered"
            tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            assert tup is not None
            resumes = [v for _, ch, v in tup.pending_writes or [] if ch == "__resume__"]
            assert resumes == [winner], (i, resumes)  # the winner's, stored once
