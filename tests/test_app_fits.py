"""Every action is reachable on a small terminal (issue 28): the answer
dialog's Yes/No/Send/Close and the settings' Save/Store key/Close at 80x24,
and help scrolls to its last key at 80x24 and 120x35."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button, DataTable

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.help import HelpScreen
from desktop_app.app.screens.settings import SettingsScreen
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
        await pilot.press("ctrl+end")
        await pilot.pause()
        assert table.cursor_row == table.row_count - 1
        # the last key's row is inside the table's visible part, which is on screen
        assert table.scroll_offset.y == table.max_scroll_y
        assert table.region.bottom <= size[1] - 1  # above the footer
        assert table.max_scroll_y == 0 or table.scroll_offset.y == table.max_scroll_y
