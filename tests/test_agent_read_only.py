"""Reads after writes in one agent run: a read-only tool is sent on every
call (its result journaled by its place in the run), a tool with side
effects is reused by name and canonical input, and a resume sends neither
completed call again."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.agent.tools import Tool, file_tools
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


class Crash(BaseException):
    """The process dies (not an Exception: nothing may catch it)."""


def graph_tools(calls: Counter[str]) -> list[Tool]:
    """A knowledge graph as a memory server has it: one read, one write."""
    graph: list[str] = []

    @tool(read_only=True)
    def read_graph() -> str:
        """The whole graph."""
        calls["read_graph"] += 1
        return json.dumps(graph)

    @tool
    def create_entities(names: list[str]) -> str:
        """Add entities to the graph."""
        calls["create_entities"] += 1
        graph.extend(names)
        return f"created {len(names)}"

    return [read_graph, create_entities]


# the same tool call id in every turn, as some local models send
READ = {"tool": "read_graph", "args": {}, "id": "call_0"}
WRITE = {"tool": "create_entities", "args": {"names": ["ada"]}, "id": "call_0"}


def tool_contents(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_read_only_call_after_a_write_is_sent_again_and_sees_the_write(db_path: Path):
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    calls: Counter[str] = Counter()
    agent = Agent("helper", ScriptedModel([READ, WRITE, READ, "ok"]), astore, graph_tools(calls))
    events = list(agent.stream("add ada and show the graph"))
    assert events[-1].response is not None and events[-1].response.status == "done"
    assert calls == {"read_graph": 2, "create_entities": 1}
    assert [e.reused for e in events if e.kind == "tool_end"] == [False, False, False]
    run_id = events[-1].response.run_id
    assert tool_contents(astore.messages(run_id)) == ["[]", "created 1", '["ada"]']
    # both reads are journaled, each at its own place in the run
    keys = {r.tool_key: r.result for r in astore.tool_results(run_id)}
    assert keys["read_graph:{}#1"] == "[]" and keys["read_graph:{}#3"] == '["ada"]'
    store.close()


def test_an_identical_call_with_side_effects_runs_once_and_is_reused(db_path: Path):
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    calls: Counter[str] = Counter()
    model = ScriptedModel([WRITE, WRITE, READ, "ok"])
    res = Agent("helper", model, astore, graph_tools(calls)).ask("add ada twice")
    assert res.status == "done"
    assert calls == {"create_entities": 1, "read_graph": 1}
    msgs = [m for m in astore.messages(res.run_id) if m["role"] == "tool"]
    assert [m.get("reused", False) for m in msgs] == [False, True, False]
    assert msgs[2]["content"] == '["ada"]'  # added once
    store.close()


def test_a_resume_does_not_send_a_completed_read_only_call_again(db_path: Path):
    calls: Counter[str] = Counter()
    tools = graph_tools(calls)
    store = open_store(db_path)
    agent = Agent(
        "helper", ScriptedModel([READ, WRITE, READ, Crash()]), SqliteAgentStore(store), tools
    )
    with pytest.raises(Crash):
        agent.ask("add ada and show the graph")
    store.close()
    assert calls == {"read_graph": 2, "create_entities": 1}
    # a restart: a freshly built agent over the same file (the graph lives on)
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    (run,) = astore.list()
    model = ScriptedModel(["ada is in the graph"])
    res = Agent("helper", model, astore, tools).resume(run.run_id)
    assert res.status == "done" and res.text == "ada is in the graph"
    assert calls == {"read_graph": 2, "create_entities": 1}  # nothing sent again
    seen = [m.content for m in model.seen[0] if m.role == "tool"]
    assert seen == ["[]", "created 1", '["ada"]']
    store.close()


def test_the_file_tools_are_read_only_so_a_listing_after_a_write_is_fresh(
    db_path: Path, tmp_path: Path
):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("a")

    @tool
    def write_note(name: str) -> str:
        """Write an empty note."""
        (folder / name).write_text("")
        return "written"

    script = [
        {"tool": "list_folder", "args": {}},
        {"tool": "write_note", "args": {"name": "b.txt"}},
        {"tool": "list_folder", "args": {}},
        "ok",
    ]
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    agent = Agent("helper", ScriptedModel(script), astore, [*file_tools(folder), write_note])
    res = agent.ask("add b.txt and list the folder")
    assert res.status == "done"
    assert tool_contents(astore.messages(res.run_id)) == ["a.txt", "written", "a.txt\nb.txt"]
    store.close()
