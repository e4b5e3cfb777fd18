"""Defects a tester found in the Textual app, each driven headless with Pilot
over a real SQLite file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, Select, Tab, TabbedContent

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.start_flow import StartFlowScreen
from desktop_app.app.widgets.run_tables import CheckpointsTable, StepsTable, group_cells
from desktop_app.config import load_settings
from tests.app_support import messages, settle, wait_until
from tests.test_app import start_digest_via_form


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user config file and no FLOWDESK_* variables leak into these tests."""
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))


async def test_first_launch_toast_names_the_file_count_not_the_files(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.schema is not None and app.schema.applied
        n = len(app.schema.applied)
        applied = [m for m in messages(app) if "schema" in m and "Applied" in m]
        assert applied == [f"Applied the schema ({n} files) to {db}"]
        assert not any(name in applied[0] for name in app.schema.applied)


async def test_grouped_timeline_counts_loop_iterations_like_the_steps_tab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "notes"
    src.mkdir()
    for i in range(21):
        (src / f"n{i:02}.md").write_text(f"# Note {i}\n\nSome words about item {i}.\n")
    monkeypatch.chdir(tmp_path)
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await start_digest_via_form(pilot, "notes", "out")
        table = app.runs_screen.table
        await wait_until(pilot, lambda: bool(table.run_ids))
        run_id = table.run_ids[0]
        await wait_until(
            pilot,
            lambda: app.read(lambda s: s.get_run(run_id)).status == "completed",  # type: ignore[union-attr]
        )
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        steps = screen.query_one(StepsTable)
        await wait_until(pilot, lambda: steps.status_of("summarize") == "completed")
        iteration = steps.get_cell("summarize", "iteration").plain
        assert iteration == "21"
        loop = [g for g in screen.query_one(CheckpointsTable).groups if g.step_id == "summarize"]
        assert len(loop) == 1
        assert group_cells(loop[0])[3].plain == f"summarize x{iteration}"


async def test_start_form_fits_80x24_has_bordered_inputs_and_takes_typing_after_tab(
    tmp_path: Path,
) -> None:
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, StartFlowScreen)
        select = form.query_one("#flow", Select)
        select.value = "digest"
        await settle(pilot)
        select.focus()
        await pilot.pause()
        # Tab goes from the flow selector straight to the first field.
        await pilot.press("tab", *"abc")
        await pilot.pause()
        first = form.query_one("#field-folder", Input)
        assert first.has_focus and first.value == "abc"
        # Inputs have a visible border, and no placeholder that reads like a label.
        for field in form.query(Input):
            assert field.styles.border_top[0] not in ("", "none", "hidden")
            assert field.placeholder.strip().lower() not in ("text", "json (or text)")
        # Both buttons are wholly on screen at 80x24.
        screen_region = form.region
        for button in form.query(Button):
            region = button.region
            assert region.height > 0 and screen_region.contains_region(region), button.id


async def open_finished_digest(pilot: Any, tmp_path: Path, files: int) -> RunDetailScreen:
    src = tmp_path / "notes"
    src.mkdir()
    for i in range(files):
        (src / f"n{i:02}.md").write_text(f"# Note {i}\n\nSome words about item {i}.\n")
    app = pilot.app
    await settle(pilot)
    await start_digest_via_form(pilot, "notes", "out")
    table = app.runs_screen.table
    await wait_until(pilot, lambda: bool(table.run_ids))
    run_id = table.run_ids[0]
    await wait_until(
        pilot,
        lambda: app.read(lambda s: s.get_run(run_id)).status == "completed",
    )
    await pilot.press("enter")
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, RunDetailScreen)
    steps = screen.query_one(StepsTable)
    await wait_until(pilot, lambda: steps.status_of("summarize") == "completed")
    return screen


async def test_detail_tab_labels_are_whole_at_120_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_finished_digest(pilot, tmp_path, 2)
        tabs = screen.query_one("#panels", TabbedContent).query(Tab)
        bar = screen.query_one("#panels", TabbedContent).region
        labels = [t.label.plain for t in tabs]
        assert labels[-1] == "7 Graph"
        for tab in tabs:
            assert bar.contains_region(tab.region), tab.label.plain
