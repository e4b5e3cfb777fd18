"""Run detail: the checkpoint timeline, the state at any revision and the diff
between two, step records, waits with live countdowns, outbox intents, the
execution context ids, and replay or fork from a checkpoint.

Reads that the screen refreshes live (the run, its latest checkpoint, its
history, its intents) go through the app's read-only store on the UI thread,
like every other screen. A revision's state is loaded with
``Engine.checkpoint`` in a thread worker; checkpoints are immutable, so each
one is loaded once. Replays and forks run in an app worker (the new run is
driven to its end there, as a run started from the app is).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (
    DataTable,
    Label,
    Sparkline,
    Static,
    TabbedContent,
    TabPane,
)
from textual.worker import get_current_worker

from desktop_app.app.format import (
    STATUS_STYLES,
    ago,
    app_version_refusal,
    local_when,
    progress,
    short_id,
    when,
)
from desktop_app.app.graph import graph_text
from desktop_app.app.host import Host, host
from desktop_app.app.messages import BranchFinished, BranchRequested
from desktop_app.app.progress import SPARK_S, Pace
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.fork import ForkScreen
from desktop_app.app.state_diff import diff_states, ordered
from desktop_app.app.widgets.bars import Footer, Header
from desktop_app.app.widgets.run_summary import damaged_hint, interrupted_hint, latest_or_damage
from desktop_app.app.widgets.run_tables import (
    INTENT_STATUSES,
    CheckpointsTable,
    ContextTable,
    OutboxTable,
    StepsTable,
    WaitsTable,
    outbox_title,
    resumed_at,
)
from desktop_app.app.widgets.state_view import DiffTable, StateTree
from desktop_app.cli.output import Hints, moved_line
from desktop_app.errors import (
    ENDED_RUN_STATUSES,
    CheckpointCorruptError,
    CheckpointDecodeError,
    FlowdeskError,
)
from desktop_app.flow import CompiledFlow, Engine
from desktop_app.flow.clock import reading
from desktop_app.runs_view import (
    INTERRUPTED,
    MOVED,
    display_status,
    row_actions,
    steps_run_again,
    stopped_holder,
    stopped_holder_words,
)
from desktop_app.store.protocol import Checkpoint, CheckpointInfo, RunRecord, checkpoint_id
from desktop_app.words import duration, plural

#: Seconds between refreshes while events keep arriving for this run.
REFRESH_S = 0.5
#: Seconds between updates of the deadline countdowns.
TICK_S = 1.0
#: Outbox intents read (all runs, oldest first) to find this run's.
OUTBOX_LIMIT = 10_000
#: Checkpoints kept in memory (the selected one and the diff base always are).
KEEP_CHECKPOINTS = 32

#: Tab pane ids, in the order of the tabs (keys 1..6 switch to them).
TABS = (
    "tab-state",
    "tab-diff",
    "tab-steps",
    "tab-waits",
    "tab-outbox",
    "tab-context",
    "tab-graph",
)

#: the names of tabs cut short when the full ones do not fit
SHORT_TAB_NAMES = {"tab-outbox": "Out", "tab-context": "Ctx"}


def header_text(
    run: RunRecord,
    now: float,
    pace: Pace | None = None,
    hints: Hints | None = None,
    engine: Engine | None = None,
    damage: CheckpointDecodeError | None = None,
) -> Text:
    """The run's header: id, flow, status (judged at ``now``:
    :func:`display_status`; an interrupted run says how to resume it, a
    moved one where ``db copy`` moved it and, with ``hints`` (the app's
    database and scope), the command that shows it there; ``damage``: why
    its latest checkpoint cannot be read, and the keys that work on it),
    progress (a bar with rate, time left and elapsed time while it runs);
    times in the local time zone with how long ago they were."""
    status = display_status(run, now)
    text = Text()
    text.append("Run ", style="bold")
    text.append(run.run_id)
    text.append("   Flow ", style="bold")
    # the author's version; its fingerprint (the part after "+") is in the Context tab
    text.append(f"{run.flow_name} {run.flow_version.split('+')[0]}")
    text.append("\nStatus ", style="bold")
    text.append(status, style=STATUS_STYLES.get(status, ""))
    if status == INTERRUPTED:
        text.append(f" — {interrupted_hint(run, engine, damage, opened=True)}")
    elif damage is not None:
        ended = run.status in ENDED_RUN_STATUSES
        text.append(f" — {damaged_hint(damage, opened=True, ended=ended)}", style="red")
    elif status in ("running", "pending") and (pid := stopped_holder(run)) is not None:
        text.append(f" — {stopped_holder_words(pid)}", style="yellow")
    moved = moved_line(hints or Hints(None, None), run.run_id, run.lease_owner)
    if status == MOVED and moved is not None:
        text.append(f" — {moved}")
    text.append("   Progress ", style="bold")
    done_total = (pace.done, pace.total) if pace is not None else run.progress
    text.append(progress(done_total))
    if pace is not None:
        text.append(f"  {pace.bar(20)}", style="green" if status == "running" else "dim")
        if status == "running":
            if pace.rate_text():
                text.append(f"  {pace.rate_text()}")
            text.append(f"  elapsed {duration(now - run.created_at)}")
    text.append("\nStarted ", style="bold")
    text.append(f"{local_when(run.created_at)} ({ago(run.created_at, now)})")
    text.append("   Updated ", style="bold")
    text.append(f"{local_when(run.updated_at)} ({ago(run.updated_at, now)})")
    if run.parent_run_id:
        text.append("   Parent ", style="bold")
        text.append(short_id(run.parent_run_id))
    if run.error:
        text.append("\nError ", style="bold red")
        text.append(run.error)
    return text


def revision_title(cp: Checkpoint) -> Text:
    text = Text()
    text.append(f"Revision {cp.revision}", style="bold")
    text.append(f"  {cp.status}", style=STATUS_STYLES.get(cp.status, ""))
    text.append(f"  after {cp.step_id or 'the start'}  {when(cp.created_at)}")
    if cp.frontier:
        text.append(f"  next: {', '.join(cp.frontier)}", style="dim")
    return text


class CheckpointLoaded(Message):
    """A revision read in a worker (``error`` when it could not be read)."""

    def __init__(self, revision: int, checkpoint: Checkpoint | None, error: str = "") -> None:
        super().__init__()
        self.revision = revision
        self.checkpoint = checkpoint
        self.error = error


#: Checkpoints read per page of a run's history (the timeline shows the
#: first page, then asks for the next one once it is on screen).
HISTORY_PAGE = 2000


class HistoryLoaded(Message):
    """A page of the run's checkpoint history, read in a worker.

    ``restart``: the page starts the history (first read, or the oldest
    checkpoints were pruned); ``more``: another page may follow.
    """

    def __init__(
        self,
        history: list[CheckpointInfo],
        error: str | None,
        *,
        restart: bool = True,
        more: bool = False,
    ) -> None:
        super().__init__()
        self.history = history
        self.error = error
        self.restart = restart
        self.more = more


def tab_label(pane: str, name: str) -> str:
    """A tab's label with the key that shows it: ``"5 Outbox"``."""
    return f"{TABS.index(pane) + 1} {name}"


def tab_labels(active: str, counts: dict[str, int], width: int) -> dict[str, str]:
    """Every tab's label for a tab row ``width`` cells wide: ``"5 Outbox"``
    when all fit (one cell between labels), else with the long names cut
    (``"5 Out"``, ``"6 Ctx"``), else the active tab's full label and the
    others' keys only (``"4 (1)"``): the row never runs past the edge (the
    tabs get 40 cells at 80 columns, 60 at 120). ``counts``: the number shown
    after a tab's name (the Waits tab's open waits)."""

    def labels(names: dict[str, str]) -> dict[str, str]:
        out = {}
        for pane in TABS:
            name = names.get(pane, pane.removeprefix("tab-").capitalize())
            count = counts.get(pane, 0)
            out[pane] = tab_label(pane, f"{name} ({count})" if count else name)
        return out

    for tier in (labels({}), labels(SHORT_TAB_NAMES)):
        if sum(cell_len(label) + 1 for label in tier.values()) <= width:
            return tier
    full = labels({})
    keys = {}
    for pane in TABS:
        count = counts.get(pane, 0)
        key = str(TABS.index(pane) + 1)
        keys[pane] = full[pane] if pane == active else f"{key} ({count})" if count else key
    return keys


class RunDetailScreen(Screen[None]):
    """One run: its timeline, states, steps, waits, outbox and context, updated live."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "resume", "Resume"),
        Binding("a", "answer", "Answer"),
        Binding("c", "cancel", "Cancel run"),
        Binding("d", "diff_base", "Diff base", show=False),
        Binding("p", "replay", "Replay"),
        Binding("f", "fork", "Fork"),  # not k: k moves up, as j moves down
        Binding("u", "undo", "Undo tidy", show=False),
        Binding("o", "open_output", "Open output", show=False),
        Binding("y", "copy_id", "Copy run id", show=False),
        Binding("q", "app.quit", "Quit", show=False),
        *(
            Binding(
                str(i + 1),
                f"show_tab('{tab}')",
                f"{tab.removeprefix('tab-').capitalize()} tab",
                show=False,
            )
            for i, tab in enumerate(TABS)
        ),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.record: RunRecord | None = None
        self.latest: Checkpoint | None = None
        #: why the latest checkpoint cannot be read (damaged, or no longer
        #: fitting the model), or ``None``: the run's history still shows,
        #: and its intact revisions can be replayed or forked
        self.damage: CheckpointDecodeError | None = None
        #: The revision selected in the timeline, and the diff base (``d``).
        self.selected_revision: int | None = None
        self._live: tuple[int, int] | None = None
        #: the history read so far, oldest first (pages appended as they arrive)
        self.history: list[CheckpointInfo] = []
        #: the throughput sparkline's bars (steps per second, oldest first)
        self.throughput: list[float] = []
        self.base_revision: int | None = None
        self.checkpoints: dict[int, Checkpoint] = {}
        self._load_errors: dict[int, str] = {}
        self._loading: set[int] = set()
        self._dirty = False
        self._outbox_stale = True
        #: The run a replay or fork from here is creating, until it is opened.
        self.branching: str | None = None
        self._fields: list[str] | None = None
        #: the count shown in a tab's label (the Waits tab's open waits)
        self._tab_counts: dict[str, int] = {}

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"Run {self.run_id}"), id="run-header")
        with Horizontal(id="throughput-row"):
            yield Label("", id="throughput-label")
            yield Sparkline([], id="throughput", summary_function=max)
        with Horizontal(id="detail-body"):
            with Vertical(id="timeline"):
                yield Label("Checkpoints (d diff base, p replay, f fork)", classes="section")
                yield CheckpointsTable(id="checkpoints")
            with TabbedContent(id="panels", initial="tab-state"):
                with TabPane(tab_label("tab-state", "State"), id="tab-state"):
                    yield Static("Select a checkpoint.", id="state-title", classes="pane-title")
                    yield StateTree(id="state")
                with TabPane(tab_label("tab-diff", "Diff"), id="tab-diff"):
                    yield Static("", id="diff-title", classes="pane-title")
                    yield DiffTable(id="diff")
                with TabPane(tab_label("tab-steps", "Steps"), id="tab-steps"):
                    yield StepsTable(id="steps")
                with TabPane(tab_label("tab-waits", "Waits"), id="tab-waits"):
                    yield WaitsTable(id="waits")
                with TabPane(tab_label("tab-outbox", "Outbox"), id="tab-outbox"):
                    yield Static("", id="outbox-title", classes="pane-title")
                    yield OutboxTable(id="outbox")
                with TabPane(tab_label("tab-context", "Context"), id="tab-context"):
                    yield ContextTable(id="context")
                with TabPane(tab_label("tab-graph", "Graph"), id="tab-graph"):
                    yield Static("", id="graph")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.call_after_refresh(self._fit_tabs)
        self._show_diff()
        self.reload()
        self.set_interval(REFRESH_S, self._flush)
        self.set_interval(TICK_S, self._tick)
        self.query_one(CheckpointsTable).focus()

    # -- live updates (called by the app) ---------------------------------

    def refresh_run(self, run_id: str) -> None:
        if run_id == self.run_id:
            self._dirty = True
        elif run_id == self.branching:
            self._open_branch(run_id)

    def data_changed(self) -> None:
        self._dirty = True

    def set_progress(self, run_id: str, done: int, total: int) -> None:
        if run_id == self.run_id:
            self._live = (done, total)
            self._show_header()
        self.refresh_run(run_id)

    def _show_header(self) -> None:
        run = self.record
        if run is None:
            return
        now = self.flowdesk.now()
        running = display_status(run, now) == "running"
        done_total = self._live if running and self._live else run.progress
        pace = None
        if done_total is not None:
            if running and self._live is None:
                self.flowdesk.meter.record(run.run_id, *done_total, now)  # run elsewhere
            pace = self.flowdesk.meter.pace(run.run_id, done_total[0], done_total[1], now)
        header = header_text(run, now, pace, self.flowdesk.hints, self.flowdesk.engine, self.damage)
        self.query_one("#run-header", Static).update(header)
        self._show_throughput(run.run_id, running and done_total is not None, now)

    def _show_throughput(self, run_id: str, shown: bool, now: float) -> None:
        """The run's progress per second over the last minute, as a
        sparkline: for a running run that reports progress (files, items)
        only. It counts what the flow's progress counts, not steps (a
        tryout: a flow reporting none showed "steps/s" flat at 0 while it
        took a step a second)."""
        row = self.query_one("#throughput-row")
        row.display = shown
        if not shown:
            return
        rates = self.flowdesk.meter.throughput(run_id, now)
        self.throughput = rates
        self.query_one("#throughput", Sparkline).data = rates
        label = f"done/s, last {SPARK_S:.0f} s (peak {max(rates):.1f}) "
        self.query_one("#throughput-label", Label).update(Text(label, style="dim"))

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.reload()

    def now(self) -> float:
        """The engine's clock (what deadlines are measured against)."""
        engine = self.flowdesk.engine
        if engine is not None:
            return reading(engine.clock)  # never raises: display only
        return time.time()

    def _tick(self) -> None:
        try:
            waits = self.query_one(WaitsTable)
        except NoMatches:  # the screen is closing
            return
        waits.tick(self.now())
        if self.record is not None:
            # the sparkline moves on with the clock, a process that died
            # (which changes no row) shows as interrupted, and "(2 min ago)"
            # moves on for an ended run too (a tryout: it stayed at "1 min
            # ago" while the runs table said 2)
            self._show_header()

    def reload(self) -> None:
        """The run and its latest checkpoint now (two indexed reads); its
        history in a worker (a long run has tens of thousands of checkpoints:
        the timeline shows a loading indicator until it arrives)."""
        run_id = self.run_id
        got = self.flowdesk.read(
            lambda store: (store.get_run(run_id), latest_or_damage(store, run_id))
        )
        if got is None:
            return
        run, checkpoint = got
        self.record = run
        self.damage = checkpoint if isinstance(checkpoint, CheckpointDecodeError) else None
        self._show_header()
        self.refresh_bindings()  # the footer offers only the keys the run takes
        self.query_one(ContextTable).show(run)
        timeline = self.query_one(CheckpointsTable)
        if not timeline.revisions:
            timeline.loading = True
        self._load_history()
        if isinstance(checkpoint, CheckpointDecodeError):  # the header says what works
            self.latest = None
        else:
            self.latest = checkpoint
            self._remember(checkpoint)
            self.query_one(StepsTable).show(checkpoint)
            self.query_one(WaitsTable).show(checkpoint.waits, self.now())
            self._show_graph(run, checkpoint)
            self._set_tab_label("tab-waits", "Waits", len(checkpoint.waits))
        self._outbox_stale = True
        if self.query_one(TabbedContent).active == "tab-outbox":
            self.load_outbox()
        self._sync_selection()

    def _set_tab_label(self, pane: str, name: str, count: int) -> None:
        self._tab_counts[pane] = count
        self._fit_tabs()

    def _fit_tabs(self) -> None:
        """Labels that fit the tab row's width (:func:`tab_labels`)."""
        panels = self.query_one(TabbedContent)
        width = panels.size.width or self.app.size.width // 2
        labels = tab_labels(panels.active, self._tab_counts, width)
        for pane, label in labels.items():
            tab = panels.get_tab(pane)
            if tab.label_text != label:
                tab.label = label

    def on_resize(self, _event: events.Resize) -> None:
        self.call_after_refresh(self._fit_tabs)

    # -- outbox ------------------------------------------------------------

    def load_outbox(self) -> None:
        """Read this run's outbox intents (only when the Outbox tab shows)."""
        run_id = self.run_id
        mine = self.flowdesk.read(
            lambda s: s.intents(INTENT_STATUSES, limit=OUTBOX_LIMIT, run_id=run_id)
        )
        if mine is None:
            return
        self._outbox_stale = False
        self.query_one(OutboxTable).show(mine)
        self.query_one("#outbox-title", Static).update(outbox_title(mine))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._fit_tabs()
        if event.pane.id == "tab-outbox" and self._outbox_stale:
            self.load_outbox()

    def action_show_tab(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane

    # -- the selected revision ---------------------------------------------

    def state_of(self, cp: Checkpoint) -> dict[str, Any]:
        """A checkpoint's state with its fields in the state model's order."""
        if self._fields is None and self.record is not None and self.flowdesk.engine:
            try:
                model = self.flowdesk.engine.flow(self.record.flow_name).state_type
            except FlowdeskError:
                self._fields = []
            else:
                self._fields = list(model.model_fields)
        return ordered(cp.state, self._fields)

    @property
    def state_tree(self) -> StateTree:
        return self.query_one(StateTree)

    @property
    def diff_table(self) -> DiffTable:
        return self.query_one(DiffTable)

    def _show_graph(self, run: RunRecord, checkpoint: Checkpoint) -> None:
        """The flow's graph with where this run is (its latest checkpoint)."""
        engine = self.flowdesk.engine
        graph = self.query_one("#graph", Static)
        try:
            flow = engine.flow(run.flow_name) if engine is not None else None
        except FlowdeskError:
            flow = None
        if flow is None:
            graph.update(Text(f"Flow {run.flow_name} is not registered here.", style="dim"))
            return
        done = [sid for sid, rec in checkpoint.steps.items() if rec.status == "completed"]
        waiting = [w.step_id for w in checkpoint.waits]
        graph.update(graph_text(flow, done=done, frontier=checkpoint.frontier, waiting=waiting))

    @work(thread=True, exclusive=True, group="history", name="read run history")
    def _load_history(self) -> None:
        """The next page of the history after what was read (one bounded,
        indexed read; the first page when nothing was, or when the oldest
        checkpoints were pruned since)."""
        reader = self.flowdesk.reader
        if reader is None:
            return
        run_id = self.run_id
        known = self.history
        after = known[-1].revision if known else -1
        try:
            if known:
                head = reader.history_page(run_id, limit=1)
                if not head or head[0].revision != known[0].revision:
                    known, after = [], -1  # pruned: start over
            page = reader.history_page(run_id, after=after, limit=HISTORY_PAGE)
        except FlowdeskError as exc:
            self.post_message(HistoryLoaded([], str(exc)))
            return
        self.post_message(
            HistoryLoaded(page, None, restart=not known, more=len(page) == HISTORY_PAGE)
        )

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        timeline = self.query_one(CheckpointsTable)
        timeline.loading = False
        if message.error:
            self.flowdesk.say(message.error, "error")
            return
        if message.restart:
            self.history = list(message.history)
        else:
            last = self.history[-1].revision if self.history else -1
            self.history.extend(h for h in message.history if h.revision > last)
        resumed = resumed_at(self.latest.meta) if self.latest is not None else {}
        timeline.show(self.history, resumed)
        self._sync_selection()
        if message.more:  # the next page once this one is on screen
            self.call_after_refresh(self._load_history)

    def _cursor_revision(self) -> int | None:
        table = self.query_one(CheckpointsTable)
        revisions = table.revisions
        if not revisions or not table.is_valid_row_index(table.cursor_row):
            return None
        return revisions[table.cursor_row]

    def _sync_selection(self) -> None:
        revision = self._cursor_revision()
        if revision is not None and revision != self.selected_revision:
            self.select_revision(revision)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if isinstance(event.data_table, CheckpointsTable):
            event.stop()
            self._sync_selection()

    def select_revision(self, revision: int) -> None:
        """Show ``revision``'s state (loading it first when needed) and the diff to it."""
        self.selected_revision = revision
        if revision in self.checkpoints:
            self._show_selected()
        else:
            self.query_one("#state-title", Static).update(
                Text(f"Reading revision {revision}…", style="dim")
            )
            self._request(revision)
        self._show_diff()

    def _request(self, revision: int) -> None:
        if revision not in self._loading:
            self._loading.add(revision)
            self._load(revision)

    @work(thread=True, group="checkpoint", name="read checkpoint")
    def _load(self, revision: int) -> None:
        engine = self.flowdesk.engine
        if engine is None:
            self.post_message(CheckpointLoaded(revision, None, "The database is not open."))
            return
        try:
            cp = engine.checkpoint(checkpoint_id(self.run_id, revision))
        except FlowdeskError as exc:
            message = CheckpointLoaded(revision, None, str(exc))
        except Exception as exc:  # never a traceback in the user's face
            message = CheckpointLoaded(revision, None, f"{type(exc).__name__}: {exc}")
        else:
            message = CheckpointLoaded(revision, cp)
        if not get_current_worker().is_cancelled:
            self.post_message(message)

    def on_checkpoint_loaded(self, message: CheckpointLoaded) -> None:
        self._loading.discard(message.revision)
        if message.checkpoint is not None:
            self._remember(message.checkpoint)
            self._load_errors.pop(message.revision, None)
        else:
            self._load_errors[message.revision] = message.error
        if message.revision == self.selected_revision:
            self._show_selected()
        if message.revision in (self.selected_revision, self.base_revision):
            self._show_diff()

    def _remember(self, cp: Checkpoint) -> None:
        """Keep ``cp`` (checkpoints never change); forget the least recent ones
        beyond :data:`KEEP_CHECKPOINTS`, except the selected one and the base."""
        self.checkpoints.pop(cp.revision, None)
        self.checkpoints[cp.revision] = cp
        keep = (self.selected_revision, self.base_revision)
        for revision in list(self.checkpoints):
            if len(self.checkpoints) <= KEEP_CHECKPOINTS:
                break
            if revision not in keep:
                del self.checkpoints[revision]

    def _show_selected(self) -> None:
        revision = self.selected_revision
        title = self.query_one("#state-title", Static)
        if revision is None:
            return
        cp = self.checkpoints.get(revision)
        if cp is None:
            error = self._load_errors.get(revision, "")
            title.update(Text(f"Revision {revision} could not be read: {error}", style="red"))
            self.state_tree.show_state(f"revision {revision}", None)
            return
        title.update(revision_title(cp))
        self.state_tree.show_state(f"revision {revision}", self.state_of(cp))

    # -- diff ------------------------------------------------------------

    def action_diff_base(self) -> None:
        """Mark the selected revision as the diff base (again: clear the base)."""
        revision = self.selected_revision
        if revision is None:
            self.flowdesk.say("Select a checkpoint first.", "warning")
            return
        if self.base_revision == revision:
            self.base_revision = None
        else:
            self.base_revision = revision
            if revision not in self.checkpoints:
                self._request(revision)
            self.query_one(TabbedContent).active = "tab-diff"
        self._show_diff()

    def _show_diff(self) -> None:
        title = self.query_one("#diff-title", Static)
        table = self.diff_table
        base, selected = self.base_revision, self.selected_revision
        if base is None:
            title.update(
                Text(
                    "Press d on a checkpoint to mark it as the diff base, then select "
                    "another: what changed from the base shows here.",
                    style="dim",
                )
            )
            table.show([])
            self._set_tab_label("tab-diff", "Diff", 0)
            return
        old = self.checkpoints.get(base)
        new = self.checkpoints.get(selected) if selected is not None else None
        if old is None or new is None:
            missing = base if old is None else selected
            error = self._load_errors.get(missing or 0)
            note = f"could not be read: {error}" if error else "is being read…"
            title.update(Text(f"Diff base {base}: revision {missing} {note}", style="dim"))
            table.show([])
            return
        changes = diff_states(self.state_of(old), self.state_of(new))
        head = f"Revision {base} (base) → revision {new.revision}: "
        if not changes:
            summary = "no change" if base != new.revision else "select another revision"
        else:
            summary = plural(len(changes), "change")
        title.update(Text.assemble((head, "bold"), summary, "   (d again clears the base)"))
        table.show(changes)
        self._set_tab_label("tab-diff", "Diff", len(changes))

    # -- replay and fork -------------------------------------------------

    def _branchable(self) -> tuple[str, CompiledFlow[Any]] | None:
        """The selected checkpoint's id and the run's flow, or ``None`` (said why)."""
        app = self.flowdesk
        engine = app.controller.require_writer()
        run, revision = self.record, self.selected_revision
        if engine is None or run is None:
            return None
        if revision is None:
            app.say("Select a checkpoint first.", "warning")
            return None
        try:
            flow = engine.flow(run.flow_name)
        except FlowdeskError as exc:
            app.say(str(exc), "error")
            return None
        refusal = engine.version_refusal(run)
        if refusal is not None:
            live = run.status in ("pending", "running", "waiting", "failed")
            app.say(app_version_refusal(refusal, live=live), "error")
            return None
        return checkpoint_id(run.run_id, revision), flow

    def action_replay(self) -> None:
        """Ask, then continue from the selected checkpoint as a new run."""
        got = self._branchable()
        if got is None:
            return
        cid, _flow = got
        revision = self.selected_revision

        def chosen(yes: bool | None) -> None:
            if yes:
                self.branch(cid, None)

        assert revision is not None
        self.app.push_screen(
            ConfirmScreen(
                f"Replay from checkpoint {short_id(cid)}:{revision}?",
                f"A new run goes on from revision {revision} with the state it had then "
                "(steps completed before it are kept). This run is left as it is.\n"
                + self._runs_again(revision),
                yes="Replay",
                no="Keep",
            ),
            chosen,
        )

    def _runs_again(self, revision: int) -> str:
        """What a replay from ``revision`` executes again: the steps this run
        took after it (as far as its timeline is read), whose side effects
        (files moved or written, messages sent) happen again."""
        again = steps_run_again(self.history, revision)
        damage = self.damage
        if (
            isinstance(damage, CheckpointCorruptError)
            and damage.missing
            and damage.revision > revision
        ):  # its row is gone, and with it the step it was saved for
            again.append(
                f"the step revision {damage.revision} saved (its checkpoint was deleted "
                "outside Flowdesk, so which step it was is not known)"
            )
        if not again:
            return "Runs again: the steps after it (this run took none yet)."
        listed = ", ".join(again[:-1]) + " and " + again[-1] if len(again) > 1 else again[0]
        done = "what they did" if len(again) > 1 else "what it did"
        return (
            f"Runs again: {listed}; {done} (files moved or written, messages sent) is done again."
        )

    def action_fork(self) -> None:
        """Edit the selected checkpoint's state, then run a new run from it."""
        got = self._branchable()
        if got is None:
            return
        cid, flow = got
        revision = self.selected_revision
        assert revision is not None
        cp = self.checkpoints.get(revision)
        if cp is None:
            run_id = self.run_id
            cp = self.flowdesk.read(lambda s: s.get_checkpoint(run_id, revision))
            if cp is None:
                return
            self._remember(cp)

        def chosen(changes: dict[str, Any] | None) -> None:
            if changes:
                self.branch(cid, changes)

        self.app.push_screen(
            ForkScreen(
                cid,
                f"Fork run {short_id(self.run_id)} from revision {revision}",
                self.state_of(cp),
                flow.state_type,
            ),
            chosen,
        )

    def action_undo(self) -> None:
        """Move a completed tidy run's files back (asks first)."""
        self.flowdesk.controller.undo_tidy(self.run_id)

    def branch(self, cid: str, changes: Mapping[str, Any] | None) -> str:
        """Ask the app to replay (``changes`` is ``None``) or fork ``cid`` as a
        new run (:class:`BranchRequested`); returns the new run's id. It opens
        here once it exists (:class:`BranchFinished`)."""
        new_id = uuid.uuid4().hex
        self.branching = new_id
        self.post_message(
            BranchRequested(self, cid, new_id, dict(changes) if changes is not None else None)
        )
        return new_id

    def on_branch_finished(self, message: BranchFinished) -> None:
        if message.ok:
            self._open_branch(message.run_id)
        if message.run_id == self.branching:  # not opened: failed, or the user moved on
            self.branching = None

    def _open_branch(self, run_id: str) -> None:
        """Open the new run's detail (once, and only while this screen is in front)."""
        if run_id != self.branching or not self.is_current:
            return
        if self.flowdesk.read(lambda s: s.get_run(run_id), quiet=True) is None:
            return  # not created (yet)
        self.branching = None
        self.flowdesk.controller.open_run(run_id)

    # -- run control -----------------------------------------------------

    def action_open_output(self) -> None:
        self.flowdesk.controller.open_output(self.run_id)

    def action_copy_id(self) -> None:
        self.flowdesk.controller.copy_run_id(self.run_id)

    def _shown(self) -> RunRecord | None:
        """The run as this screen shows it (read now if it could not be yet)."""
        run_id = self.run_id
        return self.record or self.flowdesk.read(lambda s: s.get_run(run_id))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``r``, ``a`` and ``c`` show (and work) only for a run they apply
        to (:func:`~desktop_app.runs_view.row_actions`, as on the runs
        screen); all of them until the run is read (each then says why)."""
        if action in ("resume", "answer") and self.damage is not None:
            return False  # both read the damaged checkpoint; the header says what works
        if action in ("resume", "answer", "cancel") and self.record is not None:
            return action in row_actions(display_status(self.record, self.flowdesk.now()))
        return True

    def action_resume(self) -> None:
        self.flowdesk.controller.resume(self.run_id, self.record)

    def action_answer(self) -> None:
        if (run := self._shown()) is not None:
            self.flowdesk.controller.answer(run)

    def action_cancel(self) -> None:
        if (run := self._shown()) is not None:
            self.flowdesk.controller.cancel(run)
