"""The runs table: one row per run, newest first, updated in place."""

from __future__ import annotations

from collections.abc import Iterable

from textual.coordinate import Coordinate
from textual.widgets import DataTable

from desktop_app.app.format import progress, short_id, when
from desktop_app.store.protocol import RunRecord

COLUMNS = (
    ("run", "Run"),
    ("flow", "Flow"),
    ("status", "Status"),
    ("progress", "Progress"),
    ("started", "Started (UTC)"),
    ("updated", "Updated (UTC)"),
)


def run_cells(run: RunRecord) -> tuple[str, ...]:
    """The cells of a run's row, in column order."""
    return (
        short_id(run.run_id),
        run.flow_name,
        run.status,
        progress(run.progress),
        when(run.created_at),
        when(run.updated_at),
    )


class RunsTable(DataTable[str]):
    """Runs, newest first; the row key is the run id."""

    DEFAULT_CSS = """
    RunsTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, runs: Iterable[RunRecord]) -> None:
        """Show ``runs`` (any order) newest first, keeping the selected run selected."""
        ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        order = [r.run_id for r in ordered]
        if order == self._order:
            for run in ordered:
                self.update_run(run)
            return
        selected = self.selected_run_id()
        self.clear()
        for run in ordered:
            self.add_row(*run_cells(run), key=run.run_id)
        self._order = order
        if selected in order:
            self.move_cursor(row=order.index(selected))

    def update_run(self, run: RunRecord) -> bool:
        """Update the row of ``run`` in place; False when the run has no row."""
        if run.run_id not in self._order:
            return False
        for (key, _label), value in zip(COLUMNS, run_cells(run), strict=True):
            if self.get_cell(run.run_id, key) != value:
                self.update_cell(run.run_id, key, value)
        return True

    def set_progress(self, run_id: str, done: int, total: int) -> bool:
        """Show live progress for a run; False when the run has no row."""
        if run_id not in self._order:
            return False
        self.update_cell(run_id, "progress", progress((done, total)))
        return True

    def selected_run_id(self) -> str | None:
        """The run id of the row under the cursor, if any."""
        if not self._order or not self.is_valid_row_index(self.cursor_row):
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key
        return key.value

    def cell(self, run_id: str, column: str) -> str:
        """The text shown in one cell (for tests and the detail header)."""
        return str(self.get_cell(run_id, column))

    @property
    def run_ids(self) -> list[str]:
        """Run ids in display order (newest first)."""
        return list(self._order)
