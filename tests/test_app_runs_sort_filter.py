"""The runs screen sorts its page by a column (``S``, or a click on a
header) and filters on the status it shows, ``interrupted`` included."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from textual.widgets import Select

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.widgets.runs_table import RunsTable
from desktop_app.config import load_settings
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.owners import _start_ticks
from desktop_app.store.records import Lease
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle
from tests.test_app_runs_view import START, Note, note_flow, three_runs


def left_by_a_dead_process(db: Path) -> str:
    """A started run whose lease a process that exited holds (``kill -9``)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    store = open_store(db)
    try:
        engine = bootstrap.build_engine(load_settings(db_path=db), flows=[note_flow()])
        try:
            run_id = engine.start("note", Note())
        finally:
            engine.store.close()
        owner = f"{socket.gethostname()}:{dead.pid}:abcdef@{_start_ticks(dead.pid) or 1}"
        now = store.now()
        store.claim(run_id, Lease(owner, now + 3600, issued_at=now), now)
    finally:
        store.close()
    return run_id


async def header_click(pilot, table: RunsTable, key: str) -> None:  # type: ignore[no-untyped-def]
    x = 0
    for column in table.ordered_columns:
        if column.key.value == key:
            break
        x += column.get_render_width(table)
    await pilot.click(RunsTable, offset=(x + 2, 0))
    await settle(pilot)


async def test_s_and_header_clicks_sort_the_runs(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)  # oldest first
    app = FlowdeskApp(settings, flows=[note_flow()], clock=ManualClock(START + 600))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.table
        assert table.run_ids == ids[::-1]  # newest first by default
        await pilot.press("S")  # the first column: run id
        await settle(pilot)
        assert table.run_ids == sorted(ids)
        assert "sorted by run (ascending" in str(screen.page_line.render())
        assert str(table.columns[table.ordered_columns[0].key].label) == "Run ▲"
        await header_click(pilot, table, "started")
        assert table.sort_key == "started"
        assert table.run_ids == ids  # oldest first
        await header_click(pilot, table, "started")  # again: the other way
        assert table.run_ids == ids[::-1] and table.sort_reverse
        # the help (F1) lists it
        (sort,) = [b for b in RunsScreen.BINDINGS if getattr(b, "action", "") == "sort"]
        assert (sort.key, sort.description) == ("S", "Sort")


async def test_the_status_filter_offers_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db, recover_on_launch=False)
    ids = three_runs(settings)
    stuck = left_by_a_dead_process(db)
    app = FlowdeskApp(settings, flows=[note_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        assert set(screen.table.run_ids) == {*ids, stuck}
        assert screen.table.cell(stuck, "status") == "interrupted"
        await pilot.press("slash")
        await settle(pilot)
        app.query_one("#filter-status", Select).value = "interrupted"
        await settle(pilot)
        assert screen.table.run_ids == [stuck]
        assert "status=interrupted" in str(screen.page_line.render())
        app.query_one("#filter-status", Select).value = "completed"
        await settle(pilot)
        assert set(screen.table.run_ids) == set(ids)
