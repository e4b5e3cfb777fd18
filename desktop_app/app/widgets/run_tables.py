"""The run detail tables: the latest step records and the checkpoint timeline."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from desktop_app.app.format import short_id, when
from desktop_app.store.protocol import Checkpoint, CheckpointInfo, StepRecord


def step_cells(rec: StepRecord) -> tuple[str, ...]:
    return (
        rec.step_id,
        rec.status,
        str(rec.attempts),
        str(rec.iteration) if rec.iteration else "-",
        rec.error or "",
    )


def texts(cells: tuple[str, ...]) -> tuple[Text, ...]:
    """Cells as plain text: a step id or an error is never read as markup."""
    return tuple(Text(c) for c in cells)


class StepsTable(DataTable[Text]):
    """Step records of a run's latest checkpoint (step, status, attempts, iteration, error)."""

    DEFAULT_CSS = """
    StepsTable {
        height: auto;
        max-height: 12;
    }
    """

    COLUMNS = (
        ("step", "Step"),
        ("status", "Status"),
        ("attempts", "Attempts"),
        ("iteration", "Iteration"),
        ("error", "Error"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, checkpoint: Checkpoint) -> None:
        rows = [step_cells(rec) for rec in checkpoint.steps.values()]
        shown = [tuple(c.plain for c in self.get_row_at(i)) for i in range(self.row_count)]
        if rows == shown:
            return
        cursor = self.cursor_row
        self.clear()
        for cells in rows:
            self.add_row(*texts(cells), key=cells[0])
        if rows:
            self.move_cursor(row=min(cursor, len(rows) - 1))

    def status_of(self, step_id: str) -> str:
        """The status shown for a step (``""`` when the step has no row yet)."""
        try:
            return self.get_cell(step_id, "status").plain
        except CellDoesNotExist:
            return ""


def checkpoint_cells(info: CheckpointInfo) -> tuple[str, ...]:
    return (
        f"{short_id(info.run_id)}:{info.revision}",
        str(info.revision),
        info.status,
        info.step_id or "-",
        when(info.created_at),
    )


class CheckpointsTable(DataTable[Text]):
    """The run's checkpoints, oldest first; new revisions are appended as they commit."""

    DEFAULT_CSS = """
    CheckpointsTable {
        height: 1fr;
    }
    """

    COLUMNS = (
        ("id", "Checkpoint"),
        ("revision", "Revision"),
        ("status", "Status"),
        ("step", "Step"),
        ("time", "Time (UTC)"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._revisions: list[int] = []

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, history: Sequence[CheckpointInfo]) -> None:
        """Show ``history`` (oldest first); append only what is new when possible."""
        revisions = [info.revision for info in history]
        shown = self._revisions
        if revisions[: len(shown)] != shown:  # pruned or another run: start over
            self.clear()
            shown = self._revisions = []
        at_end = not shown or self.cursor_row >= len(shown) - 1
        for info in history[len(shown) :]:
            self.add_row(*texts(checkpoint_cells(info)), key=str(info.revision))
            self._revisions.append(info.revision)
        if at_end and self._revisions:
            self.move_cursor(row=len(self._revisions) - 1)

    @property
    def revisions(self) -> list[int]:
        return list(self._revisions)
