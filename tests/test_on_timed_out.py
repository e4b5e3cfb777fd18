"""A flow's ``on_timed_out`` option (``FlowBuilder(on_timed_out=...)``,
kept on the compiled flow): the domain writes it gives are committed with
the run's ``timed_out`` checkpoint, however the run times out (an
``await_input`` past its deadline, an interrupt past its deadline, the
run's own deadline), and not when a timeout routes the run on. The hook
travels with the flow, so two flows of one name in one process each keep
their own. Real SQLite files; the deadlines pass on the engine's injected
clock."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    answer: str = ""
    done: bool = False


def ask(state: S, ctx: Any) -> dict[str, str]:
    return {"answer": str(ctx.interrupt("well?", timeout_s=60))}


def note(tag: str):  # type: ignore[no-untyped-def]
    """A hook recording ``(tag, run_id)`` in table ``notes``."""

    def hook(run_id: str) -> list[Any]:
        return [lambda tx: tx.execute("INSERT INTO notes VALUES (?, ?)", (tag, run_id))]

    return hook


FLOWS = {
    "awaits": lambda hook: FlowBuilder("awaits", S, on_timed_out=hook).await_input(
        "a", "answer", timeout_s=60
    ),
    "interrupts": lambda hook: FlowBuilder("interrupts", S, on_timed_out=hook).step("a", ask),
    "deadline": lambda hook: FlowBuilder(
        "deadline", S, deadline_s=60, on_timed_out=hook
    ).await_input("a", "answer"),
    "routes": lambda hook: (
        FlowBuilder("routes", S, on_timed_out=hook)
        .await_input("a", "answer", timeout_s=60, on_timeout="late")
        .step("late", lambda s: {"done": True})
    ),
}


def with_notes(store):  # type: ignore[no-untyped-def]
    store.write(lambda tx: tx.execute("CREATE TABLE notes (flow TEXT, run_id TEXT)"))
    return store


@pytest.mark.parametrize("flow", ["awaits", "interrupts", "deadline"])
def test_the_hooks_writes_commit_with_the_timed_out_checkpoint(sqlite_store, flow):
    notes = with_notes(sqlite_store)
    clock = ManualClock()
    compiled = FLOWS[flow](note(flow)).chain().compile()
    assert compiled.on_timed_out is not None
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


def test_a_timeout_that_routes_the_run_on_writes_nothing(sqlite_store):
    notes = with_notes(sqlite_store)
    clock = ManualClock()
    engine = Engine(notes, flows=[FLOWS["routes"](note("routes")).chain().compile()], clock=clock)
    rid = engine.run("routes", S()).run_id
    clock.advance(61)
    engine.tick()
    assert engine.status(rid).status == "completed" and engine.get(rid).done
    assert notes.conn.execute("SELECT * FROM notes").fetchall() == []


def test_two_flows_of_one_name_keep_their_own_hook(db_path, tmp_path):
    """Two engines in one process, each with its own flow ``awaits``: one
    with a hook, one with another hook, one with none. Building a second
    flow of the name never replaces the first one's hook (a registry keyed
    by flow name did), and the flow without one writes nothing."""
    import shutil

    paths = [db_path, tmp_path / "b.db", tmp_path / "c.db"]
    for p in paths[1:]:
        shutil.copy(db_path, p)
    stores = [with_notes(open_store(p)) for p in paths]
    try:
        flows = [
            FLOWS["awaits"](note("first")).chain().compile(),
            FLOWS["awaits"](note("second")).chain().compile(),
            FLOWS["awaits"](None).chain().compile(),
        ]
        clock = ManualClock()
        engines = [Engine(s, flows=[f], clock=clock) for s, f in zip(stores, flows, strict=True)]
        rids = [e.run("awaits", S()).run_id for e in engines]
        clock.advance(61)
        for e in engines:
            e.tick()
        assert [e.status(r).status for e, r in zip(engines, rids, strict=True)] == ["timed_out"] * 3
        assert [s.conn.execute("SELECT * FROM notes").fetchall() for s in stores] == [
            [("first", rids[0])],
            [("second", rids[1])],
            [],
        ]
    finally:
        for s in stores:
            s.close()
