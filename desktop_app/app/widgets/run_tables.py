"""The run detail tables: step records, the checkpoint timeline, waits with
their countdowns, outbox intents and the execution context ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from desktop_app.app.format import countdown, json_text, short_id, wait_target, when
from desktop_app.app.state_diff import shorten
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointInfo,
    Intent,
    RunRecord,
    StepRecord,
    Wait,
)

#: Characters of an error or a prompt shown in a table cell.
CELL_CHARS = 100


def duration_text(ms: float | None) -> str:
    """Milliseconds as ``12``, ``12.5`` or ``-`` when unknown."""
    if ms is None:
        return "-"
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}".removesuffix(".0")


def error_text(rec: StepRecord) -> str:
    """``ErrorType: message`` of a step's last failure (``""`` when none)."""
    if not rec.error:
        return ""
    text = f"{rec.error_type}: {rec.error}" if rec.error_type else rec.error
    return shorten(text, CELL_CHARS)


def step_cells(rec: StepRecord) -> tuple[str, ...]:
    return (
        rec.step_id,
        rec.status,
        str(rec.attempts),
        str(rec.iteration) if rec.iteration else "-",
        duration_text(rec.duration_ms),
        when(rec.next_retry_at) if rec.next_retry_at else "-",
        error_text(rec),
    )


def texts(cells: tuple[str, ...]) -> tuple[Text, ...]:
    """Cells as plain text: a step id or an error is never read as markup."""
    return tuple(Text(c) for c in cells)


class StepsTable(DataTable[Text]):
    """Step records of a run's latest checkpoint (step, status, attempts,
    iteration, duration of the last attempt, next retry, last error)."""

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
        ("duration", "Duration (ms)"),
        ("retry", "Next retry (UTC)"),
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


def short_wait_id(wait_id: str) -> str:
    """``<run id>:<step>:<n>`` with the run id cut to 8 characters (also for
    intent ids, which start with the run id too)."""
    run_id, sep, rest = wait_id.partition(":")
    return f"{short_id(run_id)}{sep}{rest}"


def wait_cells(wait: Wait, now: float) -> tuple[str, ...]:
    return (
        short_wait_id(wait.wait_id),
        wait.kind,
        countdown(wait.deadline_at, now),
        when(wait.deadline_at),
        wait_target(wait),
        shorten(json_text(wait.prompt), CELL_CHARS),
    )


class WaitsTable(DataTable[Text]):
    """A run's pending waits; :meth:`tick` updates the countdown to each deadline."""

    DEFAULT_CSS = """
    WaitsTable {
        height: 1fr;
    }
    """

    COLUMNS = (
        ("wait", "Wait"),
        ("kind", "Kind"),
        ("left", "Time left"),
        ("deadline", "Deadline (UTC)"),
        ("target", "Waits for"),
        ("prompt", "Prompt"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.waits: tuple[Wait, ...] = ()

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, waits: Sequence[Wait], now: float) -> None:
        waits = tuple(waits)
        if waits == self.waits:
            self.tick(now)
            return
        self.waits = waits
        cursor = self.cursor_row
        self.clear()
        for wait in waits:
            self.add_row(*texts(wait_cells(wait, now)), key=wait.wait_id)
        if waits:
            self.move_cursor(row=min(cursor, len(waits) - 1))

    def tick(self, now: float) -> None:
        """Update the time left to each deadline (``in 3h 12m``, ``expired``)."""
        for wait in self.waits:
            text = countdown(wait.deadline_at, now)
            if self.get_cell(wait.wait_id, "left").plain != text:
                self.update_cell(wait.wait_id, "left", Text(text))

    def left(self, wait_id: str) -> str:
        """The time left shown for a wait (``""`` when it has no row)."""
        try:
            return self.get_cell(wait_id, "left").plain
        except CellDoesNotExist:
            return ""


#: Outbox statuses shown in the run detail.
INTENT_STATUSES = ("pending", "sending", "delivered", "failed")


def intent_cells(intent: Intent) -> tuple[str, ...]:
    return (
        short_wait_id(intent.intent_id),  # <run id>:<step>:<iteration>:<n>
        intent.status,
        str(intent.attempts),
        intent.destination,
        intent.step_id,
        shorten(intent.last_error or "", CELL_CHARS),
    )


class OutboxTable(DataTable[Text]):
    """A run's outbox intents and their delivery."""

    DEFAULT_CSS = """
    OutboxTable {
        height: 1fr;
    }
    """

    COLUMNS = (
        ("intent", "Intent"),
        ("status", "Status"),
        ("attempts", "Attempts"),
        ("destination", "Destination"),
        ("step", "Step"),
        ("error", "Last error"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.intents: list[Intent] = []

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, intents: Sequence[Intent]) -> None:
        if list(intents) == self.intents:
            return
        self.intents = list(intents)
        cursor = self.cursor_row
        self.clear()
        for intent in self.intents:
            self.add_row(*texts(intent_cells(intent)), key=intent.intent_id)
        if self.intents:
            self.move_cursor(row=min(cursor, len(self.intents) - 1))

    def status_of(self, intent_id: str) -> str:
        try:
            return self.get_cell(intent_id, "status").plain
        except CellDoesNotExist:
            return ""


#: The execution context ids, in the order shown.
CONTEXT_IDS = (
    ("tenant_id", "Tenant"),
    ("user_id", "User"),
    ("session_id", "Session"),
    ("run_id", "Run"),
    ("trace_id", "Trace"),
    ("correlation_id", "Correlation"),
)


def context_rows(run: RunRecord) -> list[tuple[str, str]]:
    """``(name, value)`` of the six context ids, then the run's lineage."""
    ctx: Mapping[str, object] = run.context or {}
    rows = [(label, str(ctx.get(key) or "-")) for key, label in CONTEXT_IDS]
    rows.append(("Parent run", run.parent_run_id or "-"))
    rows.append(("Flow key", run.flow_key or "-"))
    rows.append(("Scope", run.scope))
    return rows


class ContextTable(DataTable[Text]):
    """The run's execution context ids (tenant, user, session, run, trace, correlation)."""

    DEFAULT_CSS = """
    ContextTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._rows: list[tuple[str, str]] = []

    def on_mount(self) -> None:
        self.add_column("Id", key="name")
        self.add_column("Value", key="value")

    def show(self, run: RunRecord) -> None:
        rows = context_rows(run)
        if rows == self._rows:
            return
        self._rows = rows
        self.clear()
        for name, value in rows:
            self.add_row(Text(name, style="bold"), Text(value), key=name)

    def value(self, name: str) -> str:
        """The value shown for ``name`` (``Tenant``, ``Trace``, ...)."""
        try:
            return self.get_cell(name, "value").plain
        except CellDoesNotExist:
            return ""
