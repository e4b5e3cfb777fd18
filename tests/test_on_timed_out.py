"""A flow's ``waiting.on_timed_out`` hook: the domain writes it gives are
committed with the run's ``timed_out`` checkpoint, however the run times
out (an ``await_input`` past its deadline, an interrupt past its deadline,
the run's own deadline), and not when a timeout routes the run on. Real
SQLite file; the deadlines pass on the engine's injected clock."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.waiting import _TIMED_OUT_HOOKS, on_timed_out


class S(BaseModel):
    answer: str = ""
    done: bool = False


def ask(state: S, ctx: Any) -> dict[str, str]:
    return {"answer": str(ctx.interrupt("well?", timeout_s=60))}


FLOWS = {
    "awaits": lambda: FlowBuilder("awaits", S).await_input("a", "answer", timeout_s=60),
    "interrupts": lambda: FlowBuilder("interrupts", S).step("a", ask),
    "deadline": lambda: FlowBuilder("deadline", S, deadline_s=60).await_input("a", "answer"),
    "routes": lambda: (
        FlowBuilder("routes", S)
        .await_input("a", "answer", timeout_s=60, on_timeout="late")
        .step("late", lambda s: {"done": True})
    ),
}


@pytest.fixture
def notes(sqlite_store):
    """Each flow's hook records the run in table ``notes``."""
    sqlite_store.write(lambda tx: tx.execute("CREATE TABLE notes (flow TEXT, run_id TEXT)"))
    for name in FLOWS:

        def hook(run_id: str, name: str = name) -> list[Any]:
            return [
                lambda tx: tx.execute("INSERT INTO notes VALUES (?, ?)", (name, run_id)),
            ]

        on_timed_out(name, hook)
    yield sqlite_store
    for name in FLOWS:
        _TIMED_OUT_HOOKS.pop(name, None)


@pytest.mark.parametrize("flow", ["awaits", "interrupts", "deadline"])
def test_the_hooks_writes_commit_with_the_timed_out_checkpoint(notes, flow):
    clock = ManualClock()
    compiled = FLOWS[flow]().chain().compile()
    engine = Engine(notes, flows=[compiled], clock=clock)
    rid = engine.run(flow, S()).run_id
    assert engine.status(rid).status == "waiting"
    clock.advance(59)
    engine.tick()
    assert notes.conn.execute("SELECT * FROM notes").fetchall() == []
    clock.advance(2)
    engine.tick()
    assert engine.status(rid).status == "timed_out"
    assert notes.conn.execute("SELECT * FROM notes").fetchall() == [(flow, rid)]


def test_a_timeout_that_routes_the_run_on_writes_nothing(notes):
    clock = ManualClock()
    engine = Engine(notes, flows=[FLOWS["routes"]().chain().compile()], clock=clock)
    rid = engine.run("routes", S()).run_id
    clock.advance(61)
    engine.tick()
    assert engine.status(rid).status == "completed" and engine.get(rid).done
    assert notes.conn.execute("SELECT * FROM notes").fetchall() == []
