"""The runs table: one row per run, newest first, updated in place."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from desktop_app.app.format import STATUS_STYLES, ago, progress, short_id
from desktop_app.store.protocol import RUN_STATUSES, RunRecord

COLUMNS = (
    ("run", "Run"),
    ("flow", "Flow"),
    ("status", "Status"),
    ("progress", "Progress"),
    ("started", "Started"),
    ("updated", "Updated"),
)

#: Columns start this wide, so a value that changes in place (``running`` ->
#: ``completed``, ``9/33875`` -> ``27582/33875``) is never cut; wider values
#: still widen their column when they arrive.
MIN_WIDTHS = {
    "status": max(len(s) for s in RUN_STATUSES),
    "progress": len("123456/123456"),
}


def run_cells(run: RunRecord, now: float) -> tuple[Text, ...]:
    """The cells of a run's row, in column order (plain text, never markup);
    statuses that need attention are highlighted; times are relative to
    ``now`` (``3 min ago``; the run's detail shows them in full)."""
    return (
        Text(short_id(run.run_id)),
        Text(run.flow_name),
        Text(run.status, style=STATUS_STYLES.get(run.status, "")),
        Text(progress(run.progress)),
        Text(ago(run.created_at, now)),
        Text(ago(run.updated_at, now)),
    )


def plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class RunsTable(DataTable[Text]):
    """Runs, newest first; the row key is the run id."""

    DEFAULT_CSS = """
    RunsTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None, now: Callable[[], float] | None = None) -> None:
        """``now``: the clock relative times are shown against (UTC epoch seconds)."""
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._now = now if now is not None else time.time
        self._records: dict[str, RunRecord] = {}
        self._order: list[str] = []
        self._follow: str | None = None

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            column_key = self.add_column(label, key=key)
            column = self.columns[column_key]
            column.content_width = max(column.content_width, MIN_WIDTHS.get(key, 0))

    def show(self, runs: Iterable[RunRecord]) -> None:
        """Show ``runs`` (any order) newest first, keeping the selected run selected."""
        ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        order = [r.run_id for r in ordered]
        if order == self._order:
            for run in ordered:
                self.update_run(run)
            self._follow_now()
            return
        selected = self.selected_run_id()
        self.clear()
        for run in ordered:
            self.add_row(*run_cells(run, self._now()), key=run.run_id)
        self._records = {r.run_id: r for r in ordered}
        self._order = order
        if selected in order:
            self.move_cursor(row=order.index(selected))
        self._follow_now()

    def follow(self, run_id: str) -> None:
        """Select ``run_id`` now, or as soon as its row appears."""
        self._follow = run_id
        self._follow_now()

    def _follow_now(self) -> None:
        run_id = self._follow
        if run_id is not None and run_id in self._order:
            self._follow = None
            self.move_cursor(row=self._order.index(run_id))

    def _set(self, run_id: str, column: str, value: Text) -> None:
        """Update one cell; its column widens when the value does not fit."""
        if plain(self.get_cell(run_id, column)) == plain(value):
            return
        wider = cell_len(plain(value)) > self.columns[ColumnKey(column)].content_width
        self.update_cell(run_id, column, value, update_width=wider)

    def update_run(self, run: RunRecord) -> bool:
        """Update the row of ``run`` in place; False when the run has no row."""
        if run.run_id not in self._order:
            return False
        self._records[run.run_id] = run
        for (key, _label), value in zip(COLUMNS, run_cells(run, self._now()), strict=True):
            self._set(run.run_id, key, value)
        return True

    def refresh_times(self) -> None:
        """Recompute the relative times of the rows shown ("3 min ago" ages)."""
        now = self._now()
        for run_id in self._order:
            run = self._records.get(run_id)
            if run is not None:
                self._set(run_id, "started", Text(ago(run.created_at, now)))
                self._set(run_id, "updated", Text(ago(run.updated_at, now)))

    def set_progress(self, run_id: str, done: int, total: int) -> bool:
        """Show live progress for a run; False when the run has no row."""
        if run_id not in self._order:
            return False
        self._set(run_id, "progress", Text(progress((done, total))))
        return True

    def selected_run_id(self) -> str | None:
        """The run id of the row under the cursor, if any."""
        if not self._order or not self.is_valid_row_index(self.cursor_row):
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key
        return key.value

    def cell(self, run_id: str, column: str) -> str:
        """The text shown in one cell (for tests and the detail header)."""
        return plain(self.get_cell(run_id, column))

    def column_width(self, column: str) -> int:
        """How many cells wide a column's content may be."""
        return self.columns[ColumnKey(column)].content_width

    @property
    def run_ids(self) -> list[str]:
        """Run ids in display order (newest first)."""
        return list(self._order)
