"""The runs table for people: short ids in the filter, relative times against
the app's (injected) clock, absolute local times in the run's detail."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from textual.widgets import Input, Static

from desktop_app import bootstrap
from desktop_app.app.format import ago
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle, wait_until

START = ManualClock().now()


class Note(BaseModel):
    text: str = ""


def note_flow() -> CompiledFlow[Note]:
    return FlowBuilder("note", Note).step("write", lambda s: {"text": "x"}).chain().compile()


@pytest.fixture(autouse=True)
def paris_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def three_runs(settings: Settings) -> list[str]:
    """Three uuid-id runs, made a minute apart from START."""
    bootstrap.apply_schema(settings)
    clock = ManualClock(START)
    engine = Engine(open_store(settings.db_path), flows=[note_flow()], clock=clock)
    ids = []
    try:
        for _ in range(3):
            ids.append(engine.run("note", Note()).run_id)
            clock.advance(60)
    finally:
        engine.store.close()
    return ids


def test_ago_words() -> None:
    assert ago(None, 0) == "-"
    assert ago(100, 102) == "just now"
    assert ago(100, 142) == "42 s ago"
    assert ago(0, 3 * 60 + 59) == "3 min ago"
    assert ago(0, 5 * 3600) == "5 h ago"
    assert ago(0, 2 * 86400 + 1) == "2 d ago"


async def test_a_short_id_filters_to_its_run(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=ManualClock(START + 600))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        assert len(screen.table.run_ids) == 3
        await pilot.press("slash", *ids[1][:8], "enter")  # the 8 characters the table shows
        await settle(pilot)
        assert screen.table.run_ids == [ids[1]]
        app.query_one("#filter-search", Input).value = ""
        await pilot.press("enter")
        await settle(pilot)
        assert len(screen.table.run_ids) == 3


async def test_times_are_relative_in_the_table_and_local_in_the_detail(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)
    clock = ManualClock(START + 600)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#runs")
        assert [table.cell(r, "started") for r in ids] == ["10 min ago", "9 min ago", "8 min ago"]
        clock.advance(3600)  # the screen's timer redraws the ages within seconds
        await wait_until(pilot, lambda: table.cell(ids[0], "started") == "1 h ago", timeout=5)
        app.controller.open_run(ids[0])
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)
        header = str(app.screen.query_one("#run-header", Static).render())
        # 2026-01-01 00:00 UTC is 01:00 in Paris (UTC+1 in winter)
        assert "Started 2026-01-01 01:00:00 +0100 (1 h ago)" in header


async def test_columns_collapse_at_80x24_and_a_side_panel_shows_at_200x60(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=ManualClock(START + 600))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.table
        assert table.shown_columns == (
            "run",
            "kind",
            "flow",
            "status",
            "bar",
            "progress",
            "updated",
        )
        assert table.virtual_size.width <= 80  # no column is cut off
        assert not screen.summary.display
        await pilot.resize_terminal(200, 60)
        await settle(pilot)
        assert "pace" in table.shown_columns and "started" in table.shown_columns
        assert screen.summary.display and screen.summary.region.width > 0
        summary = str(screen.summary.render())
        assert ids[2] in summary and "completed" in summary  # the newest run is selected
        await pilot.press("down")
        await settle(pilot)
        assert ids[1] in str(screen.summary.render())


async def test_first_launch_welcomes_with_digest_and_tidy_and_goes_away(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    app = FlowdeskApp(settings, flows=[note_flow()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        welcome = app.screen.query_one("#welcome", Static)
        assert welcome.display
        text = str(welcome.render())
        assert "digest" in text and "tidy" in text and "Press n" in text
        assert app.controller.start_flow("note", {}) is not None
        await settle(pilot)
        await pilot.pause()
        assert not welcome.display


async def test_the_app_is_constructible_with_defaults_for_textual_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``textual run desktop_app.app.main:FlowdeskApp`` calls ``FlowdeskApp()``."""
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("FLOWDESK_DB_PATH", str(tmp_path / "default.db"))
    app = FlowdeskApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.startup_error is None and app.engine is not None
        assert Path(app.settings.db_path) == tmp_path / "default.db"
    assert (tmp_path / "default.db").exists()


async def test_the_side_panel_follows_the_selected_run_changed_by_another_process(
    tmp_path: Path,
) -> None:
    """A run another process moves on (a worker, the CLI) changes in the side
    panel as in the table, without moving the selection (a tryout's panel
    said "running … Revision 1" of a run the table showed completed)."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    paid = (
        FlowBuilder("paid", Note)
        .wait_signal("wait", "paid", "o-1")
        .step("write", lambda s: {"text": "paid"})
        .chain()
        .compile()
    )
    other = Engine(open_store(settings.db_path), flows=[paid])
    try:
        run_id = other.run("paid", Note()).run_id  # waits for its signal
        app = FlowdeskApp(settings, flows=[paid])
        async with app.run_test(size=(200, 60)) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunsScreen)
            assert screen.summary.run_id == run_id
            assert "waiting" in str(screen.summary.render())
            other.cancel(run_id)  # another process's cancel
            await wait_until(
                pilot, lambda: "canceled" in str(screen.table.get_row(run_id)), timeout=30
            )
            await settle(pilot)
            shown = str(screen.summary.render())
            assert "canceled" in shown and "waiting" not in shown, shown
    finally:
        other.store.close()
