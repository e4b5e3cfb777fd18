"""The run detail tables: step records, the checkpoint timeline, waits with
their countdowns, outbox intents and the execution context ids."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widgets.data_table import CellDoesNotExist

from desktop_app.app.format import (
    STATUS_STYLES,
    countdown,
    json_text,
    short_id,
    wait_target,
    when,
)
from desktop_app.app.state_diff import shorten
from desktop_app.app.widgets.cells import keep_columns, update_fitting
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.runs_view import steps_in_order
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointInfo,
    Intent,
    RunRecord,
    StepRecord,
    Wait,
)
from desktop_app.words import duration, step_status_text

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


def step_cells(rec: StepRecord, run_status: str = "") -> tuple[str, ...]:
    """A step record's cells; ``run_status``: its run's (a step a cancel cut
    off reads ``canceled``, :func:`~desktop_app.words.step_status_text`)."""
    return (
        rec.step_id,
        step_status_text(rec.status, run_status),
        str(rec.attempts),
        str(rec.iteration) if rec.iteration else "-",
        duration_text(rec.duration_ms),
        when(rec.next_retry_at) if rec.next_retry_at else "-",
        error_text(rec),
    )


def texts(cells: tuple[str, ...]) -> tuple[Text, ...]:
    """Cells as plain text: a step id or an error is never read as markup."""
    return tuple(Text(c) for c in cells)


class StepsTable(RowTable):
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
        ("retry", "Next retry"),
        ("error", "Error"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, checkpoint: Checkpoint) -> None:
        rows = [step_cells(rec, checkpoint.status) for rec in steps_in_order(checkpoint.steps)]
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


@dataclass
class CheckpointGroup:
    """Consecutive checkpoints of one step with one status (a loop's
    iterations): one row of the timeline, however many revisions it holds.

    A group with ``stopped`` set is the row of a stop: the run was
    ``stopped`` (``interrupted``, ``failed``, ``paused``) after revision
    ``first - 1`` and resumed at revision ``first``, ``first_at`` to
    ``last_at`` the time it lay stopped."""

    step_id: str
    status: str
    run_id: str
    first: int
    last: int
    first_at: float
    last_at: float
    count: int = 1
    stopped: str = ""

    def takes(self, info: CheckpointInfo) -> bool:
        return not self.stopped and info.step_id == self.step_id and info.status == self.status

    def add(self, info: CheckpointInfo) -> None:
        self.last, self.last_at = info.revision, info.created_at
        self.count += 1

    @property
    def iterations(self) -> int:
        """The loop's iterations in this row: one checkpoint of the group is
        the loop's entry (or the resume), so ``count - 1``."""
        return self.count - 1


#: what a run was before a resume (``meta["resumed"]``) as the stop row says it
STOP_WORDS = {"running": "interrupted", "failed": "failed", "paused": "paused"}


def resumed_at(meta: Mapping[str, Any]) -> dict[int, str]:
    """The revisions that resumed a stopped run, with what it was before
    (``interrupted``, ``failed``, ``paused``), from a checkpoint's
    ``meta["resumed"]`` (the engine records ``[revision, status]`` there)."""
    out: dict[int, str] = {}
    for entry in meta.get("resumed") or ():
        if isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], int):
            out[entry[0]] = STOP_WORDS.get(str(entry[1]), str(entry[1]))
    return out


def _group_of(info: CheckpointInfo) -> CheckpointGroup:
    return CheckpointGroup(
        info.step_id,
        info.status,
        info.run_id,
        info.revision,
        info.revision,
        info.created_at,
        info.created_at,
    )


def _stop_of(before: CheckpointGroup, info: CheckpointInfo, stopped: str) -> CheckpointGroup:
    return CheckpointGroup(
        before.step_id,
        stopped,
        info.run_id,
        info.revision,
        info.revision,
        before.last_at,
        info.created_at,
        stopped=stopped,
    )


def group_history(
    history: Sequence[CheckpointInfo], resumed: Mapping[int, str] | None = None
) -> list[CheckpointGroup]:
    """``history`` (oldest first) as timeline rows: runs of one step and
    status merged; before each revision of ``resumed`` (see
    :func:`resumed_at`) a row of the stop, and no group spans it."""
    resumed = resumed or {}
    groups: list[CheckpointGroup] = []
    for info in history:
        stop = resumed.get(info.revision)
        if stop is not None and groups:
            groups.append(_stop_of(groups[-1], info, stop))
        if groups and groups[-1].takes(info):
            groups[-1].add(info)
        else:
            groups.append(_group_of(info))
    return groups


def group_cells(group: CheckpointGroup, width: int = 10) -> tuple[Text, ...]:
    """Checkpoint id, revision(s), status, step (with its count), how long
    the group ran (a stop row: how long the run lay stopped), and when it
    started."""
    if group.stopped:
        return (
            Text(f"{short_id(group.run_id)}:{group.last}"),
            Text(f"{group.first - 1} → {group.first}"),
            Text(group.stopped, style=STATUS_STYLES.get(group.stopped, "bold red")),
            Text(f"{group.stopped} → resumed", style="italic"),
            Text(f"({duration(group.last_at - group.first_at)} stopped)", style="dim"),
            Text(when(group.last_at)),
        )
    single = group.count == 1
    revisions = str(group.first) if single else f"{group.first}-{group.last}"
    step = group.step_id or "-"
    if not single:
        step = f"{step} x{group.iterations:,}"
    span = group.last_at - group.first_at
    took = "" if single else f"{span:.1f} s"
    return (
        Text(f"{short_id(group.run_id)}:{group.last}"),
        Text(revisions),
        Text(group.status, style=STATUS_STYLES.get(group.status, "")),
        Text(step, style="bold" if not single else ""),
        Text(took),
        Text(when(group.first_at)),
    )


class CheckpointsTable(RowTable):
    """The run's timeline, oldest first: one row per checkpoint, except that
    consecutive checkpoints of one step with one status (a loop's iterations)
    share a row (``summarize x2,450``: iterations, not checkpoints); new
    revisions extend the last row or are appended as they commit. A stop
    (the run interrupted, then resumed) is a row of its own, so no row's
    Took counts time the run lay stopped. A row stands for its last revision."""

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
        ("took", "Took"),
        ("time", "Time"),
    )

    #: columns dropped whole when the table is too narrow, least valuable first
    DROP_ORDER = ("id", "time", "revision", "took")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._groups: list[CheckpointGroup] = []
        self._seen: list[int] = []  # first and last revision shown, for appending
        self._resumed: dict[int, str] = {}
        #: the column keys shown, in order
        self.shown_columns: list[str] = [key for key, _ in self.COLUMNS]
        self._width: int | None = None

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width
        self._refit()

    def _cells(self, group: CheckpointGroup) -> list[Text]:
        cells = dict(zip((k for k, _ in self.COLUMNS), group_cells(group), strict=True))
        return [cells[k] for k in self.shown_columns]

    def _refit(self) -> None:
        """Show the columns whose widest values fit the table's width,
        dropping whole ones in :attr:`DROP_ORDER` (never one cut at the edge)."""
        if self._width is None:
            return
        keys = [k for k, _ in self.COLUMNS]
        widths = {k: cell_len(label) for k, label in self.COLUMNS}
        for group in self._groups:
            for key, cell in zip(keys, group_cells(group), strict=True):
                widths[key] = max(widths[key], cell_len(cell.plain))
        kept, _ = keep_columns(widths, self._width, self.DROP_ORDER)
        if kept == self.shown_columns:
            return
        cursor = self.cursor_row
        self.shown_columns = kept
        self.clear(columns=True)
        labels = dict(self.COLUMNS)
        for key in kept:
            self.add_column(labels[key], key=key)
        for index, group in enumerate(self._groups):
            self.add_row(*self._cells(group), key=str(index))
        if self._groups:
            self.move_cursor(row=min(cursor, len(self._groups) - 1))

    def show(
        self, history: Sequence[CheckpointInfo], resumed: Mapping[int, str] | None = None
    ) -> None:
        """Show ``history`` (oldest first) with the stops of ``resumed`` (see
        :func:`resumed_at`); extend or append only what is new when possible."""
        resumed = dict(resumed or {})
        if not history:
            self.clear()
            self._groups, self._seen = [], []
            return
        groups = self._groups
        # pruned, or a resume learnt late among revisions shown: start over
        fresh = (
            not groups
            or self._seen[0] != history[0].revision
            or any(r <= self._seen[1] and r not in self._resumed for r in resumed)
        )
        self._resumed = resumed
        if fresh:
            self.clear()
            groups = self._groups = []
            new: Sequence[CheckpointInfo] = history
        else:
            last = self._seen[1]
            start = next((i for i, h in enumerate(history) if h.revision > last), len(history))
            new = history[start:]
        at_end = not groups or self.cursor_row >= len(groups) - 1
        changed_last = False
        for info in new:
            stop = resumed.get(info.revision)
            if groups and stop is None and groups[-1].takes(info):
                groups[-1].add(info)
                changed_last = True
                continue
            if changed_last:
                self._update_row(len(groups) - 1)
                changed_last = False
            if stop is not None and groups:
                groups.append(_stop_of(groups[-1], info, stop))
                self.add_row(*self._cells(groups[-1]), key=str(len(groups) - 1))
            groups.append(_group_of(info))
            self.add_row(*self._cells(groups[-1]), key=str(len(groups) - 1))
        if changed_last:
            self._update_row(len(groups) - 1)
        self._seen = [history[0].revision, history[-1].revision]
        if at_end and groups:
            self.move_cursor(row=len(groups) - 1)
        self._refit()

    def _update_row(self, index: int) -> None:
        key = str(index)
        for column, value in zip(self.shown_columns, self._cells(self._groups[index]), strict=True):
            update_fitting(self, key, column, value)

    @property
    def groups(self) -> list[CheckpointGroup]:
        return list(self._groups)

    @property
    def revisions(self) -> list[int]:
        """The revision each row stands for (a group's last; a stop's: the
        revision that resumed the run), in row order."""
        return [g.last for g in self._groups]


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


class WaitsTable(RowTable):
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
        ("deadline", "Deadline"),
        ("target", "Waits for"),
        ("prompt", "Prompt"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
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
                update_fitting(self, wait.wait_id, "left", Text(text))

    def left(self, wait_id: str) -> str:
        """The time left shown for a wait (``""`` when it has no row)."""
        try:
            return self.get_cell(wait_id, "left").plain
        except CellDoesNotExist:
            return ""


#: Outbox statuses shown in the run detail.
INTENT_STATUSES = ("pending", "sending", "delivered", "failed")


#: an intent's status as the Outbox tab shows it: one ``sending`` began and
#: its outcome was not recorded (its process may have died mid-send, or the
#: send failed midway with a retryable error)
INTENT_STATUS_SHOWN = {"sending": "sending: may have been made (outcome unknown)"}


def intent_status(intent: Intent) -> str:
    """An intent's status as the Outbox tab shows it: one ``db copy`` moved
    is ``moved to URL`` (that database's dispatchers deliver it, none of
    this file's), whatever its row here still says."""
    if intent.moved_to is not None:
        return f"moved to {intent.moved_to}"
    return INTENT_STATUS_SHOWN.get(intent.status, intent.status)


def outbox_title(intents: Sequence[Intent]) -> Text:
    """The Outbox tab's title over a run's ``intents``: how many were
    delivered, and where the ones ``db copy`` moved are delivered."""
    if not intents:
        return Text("This run has no outbox intents.", style="dim")
    moved = Counter(i.moved_to for i in intents if i.moved_to is not None)
    delivered = sum(i.status == "delivered" and i.moved_to is None for i in intents)
    title = f"{delivered} of {len(intents)} delivered here"
    for where, count in moved.items():
        title += f" · {count} moved to {where} by db copy: delivered there"
    return Text(title)


def intent_cells(intent: Intent) -> tuple[str, ...]:
    """An intent's cells, in :attr:`OutboxTable.COLUMNS` order."""
    return (
        intent_status(intent),
        str(intent.attempts),
        intent.step_id,
        intent.destination,
        shorten(intent.last_error or "", CELL_CHARS),
        short_wait_id(intent.intent_id),  # <run id>:<step>:<iteration>:<n>
    )


class OutboxTable(RowTable):
    """A run's outbox intents and their delivery."""

    DEFAULT_CSS = """
    OutboxTable {
        height: 1fr;
    }
    """

    #: the short columns first, the intent id (its run, step and key: a tidy
    #: move's key is the file's whole path) last, so a narrow pane cuts the
    #: end of an id, never a status ("de" of "delivered" showed at 100 columns)
    COLUMNS = (
        ("status", "Status"),
        ("attempts", "Attempts"),
        ("step", "Step"),
        ("destination", "Destination"),
        ("error", "Last error"),
        ("intent", "Intent"),
    )

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
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
    """``(name, value)`` of the six context ids, then the run's lineage and
    its flow's full version (the header shows only the author's part)."""
    ctx: Mapping[str, object] = run.context or {}
    rows = [(label, str(ctx.get(key) or "-")) for key, label in CONTEXT_IDS]
    rows.append(("Parent run", run.parent_run_id or "-"))
    rows.append(("Flow key", run.flow_key or "-"))
    rows.append(("Flow version", run.flow_version))  # with its fingerprint, in full
    rows.append(("Scope", run.scope))
    return rows


class ContextTable(RowTable):
    """The run's execution context ids (tenant, user, session, run, trace, correlation)."""

    DEFAULT_CSS = """
    ContextTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
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
