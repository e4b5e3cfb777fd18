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
