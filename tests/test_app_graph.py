"""The flow graph drawing: steps from the entry, kinds, routes, parallel
branches and where a run is; shown in a run's Graph tab (key 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from textual.widgets import Static, TabbedContent

from desktop_app import bootstrap
from desktop_app.app.graph import graph_text, step_order
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.config import load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from tests.app_support import settle


class S(BaseModel):
    big: bool = False
    a: int = 0
    b: int = 0
    ok: str | None = None


def shaped_flow() -> CompiledFlow[S]:
    return (
        FlowBuilder("shaped", S, description="A flow with every shape.")
        .step("start", lambda s: {})
        .parallel("fan", {"left": lambda s: {"a": 1}, "right": lambda s: {"b": 1}})
        .step("small", lambda s: {})
        .step("large", lambda s: {})
        .await_input("ask", "ok", prompt="Go on?")
        .edge("start", "fan")
        .route("fan", lambda s: "large" if s.big else "small", ["small", "large"])
        .edge("small", "ask")
        .edge("large", "ask")
        .compile()
    )


def lines(text: Any) -> list[str]:
    return [line.rstrip() for line in text.plain.splitlines()]


def test_the_drawing_shows_kinds_routes_branches_and_the_run_position() -> None:
    flow = shaped_flow()
    assert step_order(flow) == ["start", "fan", "small", "large", "ask"]
    drawn = lines(graph_text(flow, done=["start", "fan", "small"], waiting=["ask"]))
    assert drawn[1] == "A flow with every shape."
    rows = {line.split()[1]: line for line in drawn[3:]}
    assert rows["start"].startswith(" ● start") and rows["start"].endswith("✔")
    assert "parallel" in rows["fan"] and "route → small | large" in rows["fan"]
    assert "⫴" in rows["fan"]
    assert rows["ask"].startswith(" ? ask") and rows["ask"].endswith("⏸ waits here")
    assert "→ end" in rows["ask"]


async def test_the_graph_tab_shows_where_a_waiting_run_is(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[shaped_flow()])
    try:
        run_id = engine.run("shaped", S()).run_id
    finally:
        engine.store.close()
    app = FlowdeskApp(settings, flows=[shaped_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.controller.open_run(run_id)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        await pilot.press("7")
        assert screen.query_one(TabbedContent).active == "tab-graph"
        drawn = str(screen.query_one("#graph", Static).render())
        assert "ask" in drawn and "waits here" in drawn
        assert "branches: left, right" in drawn
