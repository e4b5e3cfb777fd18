"""Cells updated in place never cut their value (issue 28): the timeline's
live loop count grows from ``x5`` to ``x55`` and shows every digit."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets.data_table import ColumnKey

from desktop_app.app.widgets.run_tables import CheckpointsTable
from desktop_app.store.records import CheckpointInfo


class TimelineApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CheckpointsTable(id="timeline")


def info(revision: int, step: str) -> CheckpointInfo:
    return CheckpointInfo("0a1b2c3d4e5f60718293a4b5c6d7e8f9", revision, "running", step, revision)


def history(last: int) -> list[CheckpointInfo]:
    steps = ["", "scan", *["summarize"] * 1000]
    return [info(r, steps[r]) for r in range(last + 1)]


async def test_the_live_loop_count_is_never_cut() -> None:
    app = TimelineApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(CheckpointsTable)
        for last in range(0, 58):  # one refresh per committed revision, as a live run
            table.show(history(last))
        await pilot.pause()
        [*_, loop] = table.groups
        assert (loop.first, loop.last, loop.iterations) == (2, 57, 55)
        cell = table.get_cell("2", "step").plain
        assert cell == "summarize x55"
        assert table.columns[ColumnKey("step")].content_width >= len(cell)
        for last in range(58, 103):
            table.show(history(last))
        await pilot.pause()
        cell = table.get_cell("2", "step").plain
        assert cell == "summarize x100"
        assert table.columns[ColumnKey("step")].content_width >= len(cell)
        took = table.get_cell("2", "took").plain
        assert table.columns[ColumnKey("took")].content_width >= len(took)
