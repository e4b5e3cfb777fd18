"""The runs table: one row per run (flow runs and agent runs), newest first,
updated in place. A run's status is the one
:func:`desktop_app.runs_view.display_status` gives (``interrupted`` when no
process executes it any more); an agent run's is shown in the flow-run
vocabulary (:func:`desktop_app.runs_view.agent_status_as_flow`) and its
progress as turns."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from desktop_app.app.format import STATUS_STYLES, ago, bar, plural, progress, short_id
from desktop_app.app.progress import Pace, ProgressMeter
from desktop_app.app.widgets.cells import PADDING, SCROLLBAR, cut_middle, keep_columns
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.integrations.langgraph.threads import Thread
from desktop_app.runs_view import agent_status_as_flow, display_status
from desktop_app.store.protocol import RUN_STATUSES, RunRecord
from desktop_app.store.records import AgentRun

#: a row of the table: a flow run, an agent run or a LangGraph thread
AnyRun = RunRecord | AgentRun | Thread

COLUMNS = (
    ("run", "Run"),
    ("kind", "Kind"),
    ("flow", "Flow"),
    ("status", "Status"),
    ("bar", ""),
    ("progress", "Progress"),
    ("pace", "Rate · left"),
    ("started", "Started"),
    ("updated", "Updated"),
)
#: Columns dropped whole when the table is too narrow for all, least
#: valuable first (the run id and its status always show).
DROP_ORDER = ("pace", "started", "kind", "bar", "updated", "progress", "flow")
#: Cells of the progress bar.
BAR_WIDTH = 10

#: Columns start this wide, so a value that changes in place (``running`` ->
#: ``completed``, ``9/33875`` -> ``27582/33875``) is never cut; wider values
#: still widen their column when they arrive.
MIN_WIDTHS = {
    "status": max(len(s) for s in RUN_STATUSES),
    "progress": len("123456/123456"),
    "bar": BAR_WIDTH,
    "pace": len("12.3/s · 12m 30s left"),
}


def run_kind(run: AnyRun) -> str:
    """``"flow"``, ``"agent"`` or ``"langgraph"``."""
    if isinstance(run, Thread):
        return "langgraph"
    return "agent" if isinstance(run, AgentRun) else "flow"


def thread_cells(run: Thread, now: float) -> dict[str, Text]:
    """A LangGraph thread's cells: ``graph`` in the flow column, its status
    (or ``interrupted``), no progress."""
    status = display_status(run, now)
    return {
        "run": Text(short_id(run.thread_id)),
        "kind": Text("langgraph", style="magenta"),
        "flow": Text("graph"),
        "status": Text(status, style=STATUS_STYLES.get(status, "")),
        "bar": Text(""),
        "progress": Text(""),
        "pace": Text(""),
        "started": Text(ago(run.created_at, now)),
        "updated": Text(ago(run.updated_at, now)),
    }


def agent_cells(run: AgentRun, now: float) -> dict[str, Text]:
    """An agent run's cells: its agent in the flow column, its status in the
    flow vocabulary (or ``interrupted``), its turns as progress."""
    status = agent_status_as_flow(display_status(run, now))
    return {
        "run": Text(short_id(run.run_id)),
        "kind": Text("agent", style="cyan"),
        "flow": Text(run.agent),
        "status": Text(status, style=STATUS_STYLES.get(status, "")),
        "bar": Text(""),
        "progress": Text(plural(run.turns, "turn")),
        "pace": Text(""),
        "started": Text(ago(run.created_at, now)),
        "updated": Text(ago(run.updated_at, now)),
    }


def run_cells(run: AnyRun, now: float, pace: Pace | None = None) -> dict[str, Text]:
    """The cells of a run's row by column key (plain text, never markup);
    statuses that need attention are highlighted; times are relative to
    ``now`` (``3 min ago``; the run's detail shows them in full), which is
    also when the status is judged (:func:`display_status`); ``pace`` (a
    running run's rate and ETA) fills the bar and rate columns, never for an
    interrupted run."""
    if isinstance(run, AgentRun):
        return agent_cells(run, now)
    if isinstance(run, Thread):
        return thread_cells(run, now)
    done_total = run.progress
    if pace is not None:
        done_total = (pace.done, pace.total)
    fraction = done_total[0] / done_total[1] if done_total and done_total[1] > 0 else None
    status = display_status(run, now)
    running = status == "running"
    return {
        "run": Text(short_id(run.run_id)),
        "kind": Text("flow"),
        "flow": Text(run.flow_name),
        "status": Text(status, style=STATUS_STYLES.get(status, "")),
        "bar": Text(
            bar(fraction, BAR_WIDTH) if fraction is not None else "",
            style="green" if running else "dim",
        ),
        "progress": Text(progress(done_total)),
        "pace": Text(pace.rate_text() if pace is not None and running else ""),
        "started": Text(ago(run.created_at, now)),
        "updated": Text(ago(run.updated_at, now)),
    }


def plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def sort_value(run: AnyRun, key: str, now: float) -> tuple[int, float, str]:
    """What column ``key`` sorts ``run`` by: times and progress as numbers
    (a run with no progress last), every other column by its text."""
    if key == "started":
        return (0, run.created_at, "")
    if key == "updated":
        return (0, run.updated_at, "")
    if key in ("progress", "bar") and isinstance(run, RunRecord):
        done_total = run.progress
        if done_total and done_total[1] > 0:
            return (0, done_total[0] / done_total[1], "")
        return (1, 0.0, "")
    return (0, 0.0, run_cells(run, now)[key].plain.casefold())


class RunsTable(RowTable):
    """Runs, newest first, or sorted by a column (:meth:`sort_by`: a click on
    its header, or ``S`` on the runs screen); the row key is the run id."""

    DEFAULT_CSS = """
    RunsTable {
        height: 1fr;
    }
    """

    def __init__(
        self,
        *,
        id: str | None = None,
        now: Callable[[], float] | None = None,
        meter: ProgressMeter | None = None,
    ) -> None:
        """``now``: the clock relative times are shown against (UTC epoch
        seconds); ``meter``: the rates of running runs."""
        super().__init__(id=id)
        self._now = now if now is not None else time.time
        self.meter = meter if meter is not None else ProgressMeter()
        self._records: dict[str, AnyRun] = {}
        self._live: dict[str, tuple[int, int]] = {}
        #: the column keys shown, in order (all, or NARROW on a small terminal)
        self.shown_columns: tuple[str, ...] = tuple(k for k, _ in COLUMNS)
        self._order: list[str] = []
        self._follow: str | None = None
        #: the width the table was fitted to (``None``: every column)
        self._width: int | None = None
        #: the cells a run id may take at that width (``None``: any)
        self._id_room: int | None = None
        #: the column the rows are sorted by (``None``: newest first) and whether descending
        self.sort_key: str | None = None
        self.sort_reverse = False

    def on_mount(self) -> None:
        if not self.columns:  # fit() may have added them already
            self._add_columns()

    def _label(self, key: str) -> str:
        label = dict(COLUMNS)[key]
        if key != self.sort_key:
            return label
        return f"{label} {'▼' if self.sort_reverse else '▲'}"

    def _add_columns(self) -> None:
        for key in self.shown_columns:
            column_key = self.add_column(self._label(key), key=key)
            column = self.columns[column_key]
            column.content_width = max(column.content_width, MIN_WIDTHS.get(key, 0))

    def fit(self, width: int) -> None:
        """Show the columns whose widest values fit in ``width`` cells,
        dropping whole columns in :data:`DROP_ORDER` (never one cut at the edge)."""
        self._width = width
        self._refit()

    def _cells(self, run: AnyRun, pace: Pace | None = None) -> dict[str, Text]:
        """:func:`run_cells`, the run id whole (``short_id``) unless it is
        wider than the table leaves it beside the status: then its middle is
        cut with ``…`` (never a bare prefix, which two ids may share)."""
        cells = run_cells(run, self._now(), pace)
        room, shown = self._id_room, cells["run"]
        if room is not None and cell_len(shown.plain) > room:
            cells["run"] = Text(cut_middle(shown.plain, room), style=shown.style)
        return cells

    def _widths(self) -> dict[str, int]:
        """Each column's widest label or value over the runs shown (cells)."""
        widths = {k: max(cell_len(label), MIN_WIDTHS.get(k, 0)) for k, label in COLUMNS}
        for run in self._records.values():
            for key, value in self._cells(run).items():
                widths[key] = max(widths[key], cell_len(value.plain))
        return widths

    def _refit(self) -> None:
        if self._width is None:
            return
        # the run id and the status always show: the id gets what the status leaves
        room = self._width - SCROLLBAR - 2 * PADDING - MIN_WIDTHS["status"]
        recut, self._id_room = room != self._id_room, room
        kept, _ = keep_columns(self._widths(), self._width, DROP_ORDER)
        wanted = tuple(kept)
        if wanted == self.shown_columns and not recut:
            return
        self.shown_columns = wanted
        if not self.columns:
            return  # not mounted yet: on_mount adds these
        records = [self._records[r] for r in self._order if r in self._records]
        selected = self.selected_run_id()
        self.clear(columns=True)
        self._add_columns()
        self._order = []
        self.show(records)
        if selected in self._order:
            self.move_cursor(row=self._order.index(selected))

    def _row(self, run: AnyRun) -> list[Text]:
        cells = self._cells(run, self._pace(run))
        return [cells[k] for k in self.shown_columns]

    def _pace(self, run: AnyRun) -> Pace | None:
        now = self._now()
        if not isinstance(run, RunRecord) or display_status(run, now) != "running":
            self._live.pop(run.run_id, None)
            return None
        done_total = self._live.get(run.run_id) or run.progress
        if done_total is None:
            return None
        if run.progress is not None and run.run_id not in self._live:
            self.meter.record(run.run_id, *run.progress, now)  # run by another process
        return self.meter.pace(run.run_id, done_total[0], done_total[1], now)

    def show(self, runs: Iterable[AnyRun]) -> None:
        """Show ``runs`` (any order) newest first, keeping the selected run selected."""
        if not self.columns:  # called before on_mount
            self._add_columns()
        ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        if self.sort_key is not None:  # stable: newest first among equals
            key, now = self.sort_key, self._now()
            ordered.sort(key=lambda r: sort_value(r, key, now), reverse=self.sort_reverse)
        order = [r.run_id for r in ordered]
        if order == self._order:
            for run in ordered:
                self.update_run(run)
            self._follow_now()
            return
        selected = self.selected_run_id()
        self.clear()
        for run in ordered:
            self.add_row(*self._row(run), key=run.run_id)
        self._records = {r.run_id: r for r in ordered}
        self._order = order
        if selected in order:
            self.move_cursor(row=order.index(selected))
        self._follow_now()
        self._refit()  # wider values may not fit any more (or fit again)

    def sort_by(self, key: str | None, reverse: bool | None = None) -> None:
        """Sort the rows shown by column ``key`` (``None``: newest first, the
        default); ``reverse`` says descending (``None``: ascending for a new
        column, the other way for the column already sorted by). The header
        of the sorted column shows ▲ or ▼."""
        if reverse is None:
            reverse = key == self.sort_key and not self.sort_reverse
        self.sort_key, self.sort_reverse = key, reverse
        for column_key in self.shown_columns:
            self.columns[ColumnKey(column_key)].label = Text(self._label(column_key))
        records = [self._records[r] for r in self._order if r in self._records]
        self._order = []
        self.show(records)
        self.refresh()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's header sorts by it (again: the other way)."""
        event.stop()
        if event.column_key.value is not None:
            self.sort_by(event.column_key.value)

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
        if wider:
            self.call_after_refresh(self._refit)  # the table may not fit any more

    def update_run(self, run: AnyRun) -> bool:
        """Update the row of ``run`` in place; False when the run has no row."""
        if run.run_id not in self._order:
            return False
        self._records[run.run_id] = run
        for key, value in zip(self.shown_columns, self._row(run), strict=True):
            self._set(run.run_id, key, value)
        return True

    def recheck(self) -> list[str]:
        """Judge again whether the runs shown as executing still are (a
        process that died changes no row, so no reload shows it); returns
        the run ids whose row changed to ``interrupted`` or back."""
        now = self._now()
        changed = []
        for run_id in self._order:
            run = self._records.get(run_id)
            if run is None or run.status not in ("running", "pending"):
                continue
            shown = self.cell(run_id, "status")
            if shown != agent_status_as_flow(display_status(run, now)):
                self.update_run(run)
                changed.append(run_id)
        return changed

    def refresh_times(self) -> None:
        """Recompute the relative times of the rows shown ("3 min ago" ages)."""
        now = self._now()
        for run_id in self._order:
            run = self._records.get(run_id)
            if run is not None:
                for key, ts in (("started", run.created_at), ("updated", run.updated_at)):
                    if key in self.shown_columns:
                        self._set(run_id, key, Text(ago(ts, now)))

    def set_progress(self, run_id: str, done: int, total: int) -> bool:
        """Show live progress for a run; False when the run has no row."""
        if run_id not in self._order:
            return False
        self._live[run_id] = (done, total)
        run = self._records.get(run_id)
        if isinstance(run, AgentRun | Thread):
            return False
        if run is None or display_status(run, self._now()) != "running":
            self._set(run_id, "progress", Text(progress((done, total))))
            return True
        cells = run_cells(run, self._now(), self._pace(run))
        for key in ("bar", "progress", "pace"):
            if key in self.shown_columns:
                self._set(run_id, key, cells[key])
        return True

    def record_of(self, run_id: str) -> AnyRun | None:
        """The run as its row shows it, or ``None`` when it has no row."""
        return self._records.get(run_id)

    def kind_of(self, run_id: str) -> str | None:
        """``"flow"``, ``"agent"``, ``"langgraph"``, or ``None`` when the run has no row."""
        run = self._records.get(run_id)
        return None if run is None else run_kind(run)

    def live_progress(self, run_id: str) -> tuple[int, int] | None:
        """The latest live ``(done, total)`` shown for a running run, if any."""
        return self._live.get(run_id)

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
