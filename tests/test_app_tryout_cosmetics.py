"""What a new user's tryout of the app found on screen (and the fixes), each
through Textual's pilot on a real SQLite file: the tidy plan's Status and
the Outbox tab's Status were cut at 100 columns ("planne", "de"); the help's
title read "Keys: /tmp/t9/e.db" and listed "^p palette" in lower case; the
footer never offered c on a run it can cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable
from textual.widgets._footer import FooterKey

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.help import HelpScreen
from desktop_app.app.widgets.run_tables import OutboxTable
from tests.app_support import open_inbox, settle, wait_until
from tests.test_app_new_user_fixes import waiting_tidy


def visible_through(table: DataTable, key: str) -> bool:
    """Whether column ``key`` of ``table`` is whole on screen: every column
    up to it fits the table's visible width (scrolled to its left edge)."""
    used = 0
    for column in table.ordered_columns:
        used += column.get_render_width(table)
        if column.key.value == key:
            return used <= table.scrollable_content_region.width
    raise AssertionError(f"no column {key}")


@pytest.mark.parametrize("size", [(100, 40), (100, 30)])
async def test_the_tidy_plan_in_the_inbox_shows_each_status_whole_at_100_columns(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    folder = tmp_path / "Downloads"
    folder.mkdir()
    for name in (
        "quarterly-financial-report-for-the-board-meeting-final-v3.pdf",
        "holiday-photo-from-the-mountains-with-the-whole-family-2026.jpg",
    ):
        (folder / name).write_bytes(b"x")
    from desktop_app.config import load_settings
    from desktop_app.flows.tidy import TidyState

    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        assert engine.run("tidy", TidyState(folder=str(folder))).status == "waiting"
    finally:
        engine.store.close()
    app = FlowdeskApp(settings)
    async with app.run_test(size=size) as pilot:
        await open_inbox(pilot)
        await pilot.press("y")  # the plan shows first
        await settle(pilot)
        assert isinstance(app.screen, AnswerScreen)
        table = app.screen.query_one("#preview", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2)
        await pilot.pause()
        labels = [str(c.label) for c in table.columns.values()]
        assert labels == ["File", "Kind", "Status", "Moves to"]
        status = table.ordered_columns[2]
        assert status.get_render_width(table) >= len("planned") + 2  # sized to its content
        assert visible_through(table, status.key.value)  # never the column cut at the edge
        assert [str(table.get_row_at(i)[2]) for i in range(2)] == ["planned", "planned"]


async def test_the_outbox_tab_shows_each_status_whole_at_100_columns(tmp_path: Path) -> None:
    settings, run_id, _folder = waiting_tidy(tmp_path)
    engine = bootstrap.build_engine(settings)
    try:
        assert engine.resume_with(run_id, "yes").status == "completed"
    finally:
        engine.store.close()
    app = FlowdeskApp(settings)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)
        await pilot.press("5")  # the Outbox tab
        await settle(pilot)
        outbox = app.screen.query_one(OutboxTable)
        await wait_until(
            pilot,
            lambda: (
                len(outbox.intents) == 2
                and all(outbox.status_of(i.intent_id) == "delivered" for i in outbox.intents)
            ),
        )
        await pilot.pause()
        # the intent ids (the moved file's whole path) are long: they come last
        assert outbox.ordered_columns[0].key.value == "status"
        assert outbox.ordered_columns[-1].key.value == "intent"
        assert visible_through(outbox, "status")
        assert outbox.ordered_columns[0].get_render_width(outbox) >= len("delivered") + 2


async def test_the_help_names_its_database_and_the_palette_in_the_footers_words(
    tmp_path: Path,
) -> None:
    settings, _run_id, _folder = waiting_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f1")
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert help_screen.title_text == f"Keys — database {settings.db_path}"
        keys = {k.key: k.description for k in help_screen.keys}
        assert keys["^p"] == "Command palette"  # as ^s Settings: capitalised
        assert all(d[:1] == d[:1].upper() for d in keys.values()), keys
        await pilot.press("escape")
        await pilot.press("i")
        await settle(pilot)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.title_text == f"Keys — Inbox — database {settings.db_path}"
        await pilot.press("escape")
        await pilot.press("escape")
        await pilot.press("ctrl+p")  # the key the help names opens the palette
        await settle(pilot)
        assert type(app.screen).__name__ == "CommandPalette"


async def test_the_footer_offers_c_on_a_run_it_can_cancel_at_80_columns(tmp_path: Path) -> None:
    settings, run_id, _folder = waiting_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.runs_screen.selected_run_id() == run_id
        keys = {k.action: k for k in app.screen.query(FooterKey)}
        assert keys["cancel_run"].key_display == "c"
        assert keys["cancel_run"].description == "Cancel"
        for key in keys.values():  # the whole footer still fits 80 columns
            assert key.region.width > 0 and key.region.right <= 80, key.key_display
        await pilot.press("c")
        await settle(pilot)
        assert type(app.screen).__name__ == "ConfirmScreen"  # it cancels (after asking)
