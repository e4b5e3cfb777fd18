"""Every action is reachable on a small terminal (issue 28): the answer
dialog's Yes/No/Send/Close and the settings' Save/Store key/Close at 80x24,
and help scrolls to its last key at 80x24 and 120x35."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel
from textual.widgets import Button, DataTable

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.help import HelpScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.settings import SettingsScreen
from desktop_app.config import Settings
from desktop_app.flow import FlowBuilder
from tests.app_support import settle
from tests.fit_support import reachable
from tests.test_app_inbox_settings import Approval, approve_flow, settings_for, waiting_runs

SMALL = (80, 24)


async def test_the_answer_dialog_buttons_are_reachable_at_80x24(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    waiting_runs(settings, [approve_flow("1")], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[approve_flow("1")])
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AnswerScreen)
        for button in ("#answer-yes", "#answer-no", "#send", "#close"):
            # on screen at once, below what scrolls (a tidy's plan pushed Yes
            # and No below the fold)
            region = app.screen.query_one(button, Button).region
            assert region.height and region.bottom <= 24 and region.right <= 80, button
            assert await reachable(pilot, app.screen.query_one(button, Button)), button


async def test_the_settings_buttons_are_reachable_at_80x24(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, SettingsScreen)
        for button in ("#save", "#save-key", "#close"):
            assert await reachable(pilot, app.screen.query_one(button, Button)), button
        # what Save did shows beside it
        await pilot.click("#save")
        await settle(pilot)
        assert app.screen.saved_text.startswith("Saved")
        assert await reachable(pilot, app.screen.query_one("#save", Button))


@pytest.mark.parametrize("size", [(80, 24), (120, 35)], ids=["80x24", "120x35"])
async def test_help_scrolls_to_its_last_key(tmp_path: Path, size: tuple[int, int]) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f1")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-keys", DataTable)
        await pilot.press("end")  # a new user's key (DataTable's own End scrolls sideways)
        await pilot.pause()
        assert table.cursor_row == table.row_count - 1
        # the last key's row is inside the table's visible part, which is on screen
        assert table.scroll_offset.y == table.max_scroll_y
        assert table.region.bottom <= size[1] - 1  # above the footer
        assert table.max_scroll_y == 0 or table.scroll_offset.y == table.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_offset.y == 0


class Long(BaseModel):
    done: int = 0


def long_named_runs(settings: Settings) -> None:
    """Completed runs of a flow with a long name, progress in the tens of thousands."""
    flow = (
        FlowBuilder("import-the-quarterly-purchase-orders", Long)
        .loop("count", lambda s, ctx: {"done": s.done + 1}, until=lambda s: s.done >= 3)
        .chain()
        .compile()
    )
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[flow])
    try:
        for _ in range(2):
            engine.run(flow.name, Long())
    finally:
        engine.store.close()


@pytest.mark.parametrize("width", [80, 100, 120, 200])
async def test_runs_columns_drop_whole_never_cut(tmp_path: Path, width: int) -> None:
    settings = settings_for(tmp_path / "t.db")
    long_named_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(width, 30)) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        assert table.row_count == 2
        assert {"run", "status"} <= set(table.shown_columns)
        # every column shown is whole: the table is no wider than its place
        assert table.virtual_size.width <= table.size.width, table.shown_columns
        if width >= 120:
            assert "updated" in table.shown_columns


def tidy_waiting(tmp_path: Path, files: int) -> Settings:
    """A tidy of ``files`` files waiting for its approval (a long question)."""
    from desktop_app.flows.tidy import TidyState

    folder = tmp_path / "Downloads"
    folder.mkdir()
    for i in range(files):
        (folder / f"report-{i:03d}-quarterly-figures.pdf").write_bytes(b"pdf")
    settings = settings_for(tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        assert engine.run("tidy", TidyState(folder=str(folder))).status == "waiting"
    finally:
        engine.store.close()
    return settings


@pytest.mark.parametrize("width", [80, 120, 200])
async def test_the_inbox_keeps_its_deadline_on_screen_with_a_tidy_question(
    tmp_path: Path, width: int
) -> None:
    app = FlowdeskApp(tidy_waiting(tmp_path, 40))
    async with app.run_test(size=(width, 30)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert isinstance(inbox, InboxScreen)
        table = inbox.table
        assert table.virtual_size.width <= table.size.width  # nothing off screen
        assert "deadline" in inbox.shown_columns
        if width >= 120:
            assert "left" in inbox.shown_columns
        [item] = inbox.items
        shown = table.get_cell(item.key, "question").plain
        assert shown == item.prompt or (shown.endswith("…") and item.prompt.startswith(shown[:-1]))
        assert item.prompt in inbox.question_text  # in full under the table
