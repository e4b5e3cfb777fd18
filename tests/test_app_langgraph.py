"""LangGraph threads in the app: a row of kind ``langgraph`` in the runs
table; enter opens the thread: its checkpoints as a timeline, the state at
the highlighted one, the diff between a marked one and the highlighted one,
and an answer field that answers its ``interrupt()``; the graph then goes on.
Driven headless with Pilot over a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.langgraph_thread import ThreadScreen
from desktop_app.config import load_settings
from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests.app_support import settle, wait_until
from tests.langgraph_worker import build_graph

SIZE = (140, 50)


@pytest.mark.scenario("S95")
async def test_a_thread_shows_its_checkpoints_state_diff_and_is_answered(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    counts = str(tmp_path / "counts.txt")
    config = {"configurable": {"thread_id": "lg-app", "tenant_id": "acme"}}
    with FlowdeskSaver.open(tmp_path / "t.db") as saver:
        graph = build_graph(counts).compile(checkpointer=saver)
        first = graph.invoke({"topic": "t"}, config)
        assert [i.value["question"] for i in first["__interrupt__"]] == ["approve these results?"]

    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        assert table.run_ids == ["lg-app"]
        assert table.cell("lg-app", "kind") == "langgraph"
        assert table.cell("lg-app", "status") == "waiting"
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ThreadScreen)
        head = str(screen.query_one("#thread-head").render())
        assert "approve these results?" in head and "tenant_id acme" in head
        # the timeline: every root checkpoint, the latest highlighted
        assert len(screen.points) >= 4
        assert screen.selected() is screen.points[-1]
        assert "results" in str(screen.query_one("#state").render())
        # mark the first checkpoint, go to the latest: the diff between them
        timeline = screen.query_one("#timeline")
        timeline.move_cursor(row=0)
        await pilot.press("m")
        timeline.move_cursor(row=len(screen.points) - 1)
        await settle(pilot)
        diff = str(screen.query_one("#diff").render())
        assert f"Changes from {screen.points[0].checkpoint_id}" in diff
        assert "added   results" in diff
        # the inbox lists its question; enter there opens the thread
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert "LangGraph thread lg-app asks" in inbox.question_text
        assert "approve these results?" in inbox.question_text
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ThreadScreen)
        # answer it here
        await pilot.press("a")
        await pilot.press(*"ok")
        await pilot.press("enter")
        await settle(pilot)

    with FlowdeskSaver.open(tmp_path / "t.db") as saver:
        thread = get_thread(saver.store, saver.scope, "lg-app")
        assert thread is not None and thread.status == "answered"
        graph = build_graph(counts).compile(checkpointer=saver)
        done = graph.invoke(None, config)
        assert done["summary"] == "['A', 'B', 'C'] approved=ok"
        assert get_thread(saver.store, saver.scope, "lg-app").status == "completed"


async def test_the_side_panel_and_the_footer_follow_a_threads_status(tmp_path: Path) -> None:
    """A new user's report, at 160 columns: with a LangGraph thread selected
    the side panel said "No run selected.", and the footer offered `a
    Answer` on a completed thread (pressing it said it waits for nothing).
    The panel names the thread and its status; `a` is offered while it
    waits only."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    counts = str(tmp_path / "counts.txt")
    config = {"configurable": {"thread_id": "lg-side"}}
    with FlowdeskSaver.open(tmp_path / "t.db") as saver:
        graph = build_graph(counts).compile(checkpointer=saver)
        assert graph.invoke({"topic": "t"}, config)["__interrupt__"]

    app = FlowdeskApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        assert screen.table.run_ids == ["lg-side"]
        assert screen.summary.text.splitlines()[:2] == [
            "LangGraph thread lg-side",
            "Status   waiting",
        ]
        assert "enter opens its checkpoints" in screen.summary.text
        assert "a" in screen.active_bindings  # it waits: a answers it

        from langgraph.types import Command

        with FlowdeskSaver.open(tmp_path / "t.db") as saver:
            graph = build_graph(counts).compile(checkpointer=saver)
            graph.invoke(Command(resume="yes"), config)
        # the app's poll sees the commit made elsewhere
        await wait_until(pilot, lambda: screen.table.cell("lg-side", "status") == "completed")
        await settle(pilot)
        assert screen.summary.text.splitlines()[1] == "Status   completed"
        assert "a" not in screen.active_bindings  # nothing to answer


@pytest.mark.scenario("S107")
async def test_a_thread_whose_node_raised_shows_failed_with_the_node_and_the_call(
    tmp_path: Path,
) -> None:
    """A thread whose node raised was shown `running` (then `interrupted`):
    the table says `failed`, and the thread's screen names the node, its
    error and the call that runs it again, as `flowdesk show` does."""
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    class Order(TypedDict, total=False):
        charged: bool

    def charge(state: Order) -> dict[str, bool]:
        raise RuntimeError("card declined")

    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    config = {"configurable": {"thread_id": "lg-failed"}}
    with FlowdeskSaver.open(tmp_path / "t.db") as saver:
        graph = StateGraph(Order).add_node(charge).add_edge(START, "charge")
        with pytest.raises(RuntimeError, match="card declined"):
            graph.compile(checkpointer=saver).invoke({}, config, durability="sync")

    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.runs_screen.table.cell("lg-failed", "status") == "failed"
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ThreadScreen)
        head = str(screen.query_one("#thread-head").render())
        assert "lg-failed  failed" in head, head
        assert "failed: node charge raised RuntimeError('card declined')" in head, head
        assert "its program continues the thread with graph.invoke(None, " in head, head
