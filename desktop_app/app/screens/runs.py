"""The runs dashboard (the default screen).

The table shows one page of runs (:data:`PAGE` rows, newest first) read with
one bounded ``list_runs(limit=PAGE + 1, offset=...)``: the extra row only says
whether a next page exists, so a refresh costs the same with 100 runs in the
file or 100,000. ``]`` and ``[`` page; ``/`` (or ``f``) opens the filter bar;
``S`` (or a click on a column's header) sorts the page shown by a column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Static

from desktop_app.app.format import short_id
from desktop_app.app.host import Host, host
from desktop_app.app.widgets.banner import ErrorBanner, StatusLine
from desktop_app.app.widgets.bars import Footer, Header
from desktop_app.app.widgets.run_filters import RunFilter, RunFilters
from desktop_app.app.widgets.run_summary import RunSummary, latest_or_damage
from desktop_app.app.widgets.runs_table import COLUMNS, AnyRun, RunsTable, run_cells, run_kind
from desktop_app.errors import CheckpointNotFoundError, moved_to
from desktop_app.runs_view import (
    Leased,
    agent_status_words,
    display_status,
    left_over,
    merged_page,
    row_actions,
)
from desktop_app.store.protocol import CheckpointStore, RunRecord
from desktop_app.store.records import AgentRun
from desktop_app.words import plural

L = TypeVar("L", bound=Leased)

#: Columns ``S`` sorts by, in the order it steps through them.
SORTABLE = ("run", "kind", "flow", "status", "progress", "started", "updated")
#: Rows per page of the runs table.
PAGE = 200
#: Terminal width (cells) from which the selected run's summary shows beside the table.
SIDE_PANEL_AT = 160
#: Cells the summary panel takes.
SUMMARY_WIDTH = 44
#: Seconds between updates of the relative times ("42 s ago", "3 min ago"):
#: one second, as they count seconds (a new user saw them lag by 10 s at 15 s);
#: only cells whose text changed are redrawn.
TIMES_S = 1.0
#: Seconds between two judgements of whether the runs shown as running still
#: have a live process (a death changes no row, so no reload shows it).
LIVENESS_S = 1.0
#: the row keys offered only for a run they apply to (action -> :func:`row_actions` word)
ROW_ACTIONS = {"resume_run": "resume", "answer_run": "answer", "cancel_run": "cancel"}
#: Actions of keys that step aside while the focus is in the filter bar.
TABLE_ACTIONS = frozenset(
    {
        "open_run",
        "filters",
        "new_run",
        "resume_run",
        "answer_run",
        "cancel_run",
        "open_output",
        "copy_id",
        "next_page",
        "previous_page",
        "sort",
    }
)


def _get_run(store: CheckpointStore, run_id: str) -> RunRecord:
    return store.get_run(run_id)


def welcome_text() -> Text:
    """What a new user reads on an empty database: the two built-in flows and
    the keys that start them."""
    text = Text()
    text.append("Welcome to Flowdesk\n", style="bold")
    text.append(
        "Flowdesk runs flows that survive crashes: every step is saved, so a run "
        "goes on where it stopped after a quit, a crash or a reboot.\n\n"
    )
    text.append("digest", style="bold")
    text.append(
        "  summarises every file of a folder into one digest.md (it only reads the folder). Press "
    )
    text.append("n", style="bold reverse")
    text.append(" to start one.\n")
    text.append("tidy", style="bold")
    text.append(
        "    sorts a folder's files into Kind/Month subfolders. It shows you the "
        "planned moves and moves nothing until you approve (i, the inbox); an "
        "undo list is kept. Press "
    )
    text.append("s", style="bold reverse")
    text.append(" and choose tidy.\n\n")
    text.append("F1 lists every key; ctrl+p searches every action.", style="dim")
    return text


class RunsScreen(Screen[None]):
    """The runs of the database, one page at a time, newest first, updated live."""

    BINDINGS = [
        Binding("n", "new_run", "New digest"),
        Binding("enter", "open_run", "Open", priority=True),
        Binding("r", "resume_run", "Resume"),
        Binding("a", "answer_run", "Answer"),
        # shown only for a run it can cancel; "Cancel" and a compact footer: it fits 80 columns
        Binding("c", "cancel_run", "Cancel"),
        Binding("o", "open_output", "Open output", show=False),
        Binding("y", "copy_id", "Copy run id", show=False),
        Binding("slash", "filters", "Filter", key_display="/"),
        Binding("S", "sort", "Sort", show=False),  # the footer is full at 80 columns; F1 lists it
        Binding("f", "filters", "Filter", show=False),
        Binding("right_square_bracket", "next_page", "Next page", key_display="]", show=False),
        Binding(
            "left_square_bracket", "previous_page", "Previous page", key_display="[", show=False
        ),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._statuses: dict[str, str] = {}
        #: index of the page shown (0 = newest runs)
        self.page = 0
        #: whether a page after this one exists
        self.has_more = False
        self.filter = RunFilter()
        self._flows_seen: set[str] = set()
        #: interrupted runs of flows with ``recovery = "ask"``, by run id (their flow)
        self.asking: dict[str, str] = {}

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    @property
    def status_line(self) -> StatusLine:
        return self.query_one(StatusLine)

    @property
    def hint(self) -> StatusLine:
        """Says how many runs wait (hidden when none)."""
        return self.query_one("#hint", StatusLine)

    @property
    def banner(self) -> ErrorBanner:
        return self.query_one(ErrorBanner)

    @property
    def filters(self) -> RunFilters | None:
        """The filter bar, once it was opened (mounted then, not at startup)."""
        bars = self.query(RunFilters)
        return bars.first() if bars else None

    @property
    def page_line(self) -> StatusLine:
        """``Runs 1-200 · ] next page`` (which rows are shown, and how to page)."""
        return self.query_one("#page", StatusLine)

    def compose(self) -> ComposeResult:
        yield Header()
        yield ErrorBanner(id="banner")
        yield StatusLine("Opening the database…", id="status")
        yield StatusLine("", id="hint", classes="-empty")
        yield StatusLine("", id="asking", classes="-empty")
        yield Static(welcome_text(), id="welcome")
        with Horizontal(id="runs-body"):
            yield RunsTable(id="runs", now=lambda: self.flowdesk.now(), meter=self.flowdesk.meter)
            yield RunSummary(id="run-summary")
        yield StatusLine("", id="page", classes="-empty")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.table.focus()
        self.set_interval(TIMES_S, self._refresh_times)
        self.set_interval(LIVENESS_S, self._recheck)
        self._fit(self.app.size.width)

    # -- layout: columns collapse when narrow, a side panel when wide -----

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        wide = width >= SIDE_PANEL_AT
        self.set_class(wide, "-wide")
        self.table.fit(width - (SUMMARY_WIDTH if wide else 0))
        if wide:
            self._show_summary()

    @property
    def summary(self) -> RunSummary:
        return self.query_one("#run-summary", RunSummary)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()  # the footer offers only the keys the run takes
        if self.has_class("-wide"):
            self._show_summary()

    def _show_summary(self) -> None:
        run_id = self.table.selected_run_id()
        record = None if run_id is None else self.table.record_of(run_id)
        if run_id is None or record is None:
            self.summary.show(None, None, None, self.flowdesk.now())
            return
        kind = run_kind(record)
        if kind != "flow":  # in the table's words (an agent run's done: completed)
            status = run_cells(record, self.flowdesk.now())["status"].plain
            self.summary.show_other(run_id, kind, status)
            return
        run = self.flowdesk.read(lambda s: s.get_run(run_id), quiet=True)
        latest = self.flowdesk.read(lambda s: latest_or_damage(s, run_id), quiet=True)
        if run is None:
            return
        now = self.flowdesk.now()
        pace = None
        live = self.table.live_progress(run_id) or run.progress
        if live is not None:
            pace = self.flowdesk.meter.pace(run_id, live[0], live[1], now)
        self.summary.show(run, latest, pace, now)

    # -- refreshing (called by the app) ---------------------------------

    def _refresh_times(self) -> None:
        """The relative times ("42 s ago") of the table and the side panel."""
        self.table.refresh_times()
        if self.has_class("-wide"):
            self.summary.refresh_times(self.flowdesk.now())

    def _recheck(self) -> None:
        """Show ``interrupted`` for a shown run whose process died since the
        last look (and its side panel without rate or time left)."""
        changed = self.table.recheck()
        if self.has_class("-wide") and self.summary.run_id in changed:
            self._show_summary()

    def data_changed(self) -> None:
        self.reload()

    def _read_page(self, store: CheckpointStore) -> tuple[list[AnyRun], bool]:
        """The runs of the current page (flow runs and agent runs merged,
        newest first) and whether more follow (bounded flow-run reads only;
        the top-level agent runs are read in full, they are few)."""
        wanted = self.filter
        offset = self.page * PAGE
        services = self.flowdesk.services
        agents: list[AnyRun] = []
        if services is not None:
            agents += wanted.agent_runs(services.reader_agents)
        agents += wanted.threads(store)  # LangGraph threads: few, read in full like agent runs
        if not wanted.search:

            def read_flows(at: int, limit: int) -> list[RunRecord]:
                if not wanted.wants_flows:
                    return []
                return wanted.list_runs(store, limit=limit, offset=at)

            return merged_page(read_flows, agents, offset=offset, size=PAGE)
        flows, more = self._search_flows(store) if wanted.wants_flows else ([], False)
        if self.page == 0:  # agent runs whose id starts with the search text
            found: list[AnyRun] = [*agents, *flows]
            return found[:PAGE], more or len(found) > PAGE
        return list(flows), more

    def _search_flows(self, store: CheckpointStore) -> tuple[list[RunRecord], bool]:
        wanted = self.filter
        offset = self.page * PAGE
        # Exact run id (first, on the first page), then runs with that flow key.
        by_key = wanted.list_runs(store, limit=PAGE + 1, offset=offset, flow_key=wanted.search)
        runs = by_key[:PAGE]
        if self.page == 0:
            try:
                exact = store.get_run(wanted.search)
            except CheckpointNotFoundError:
                exact = None
            if exact is not None and wanted.matches(exact):
                runs = [exact, *(r for r in runs if r.run_id != exact.run_id)][:PAGE]
            elif exact is None:  # a short id, as the table shows it
                found = wanted.by_prefix(store, limit=PAGE + 1)
                runs = [*found, *(r for r in runs if r not in found)][:PAGE]
                by_key += found
        more = len(by_key) > PAGE
        if (flow := wanted.named_flow(self._known_flows())) is not None:  # the text names a flow
            of_flow = replace(wanted, search="", flow=flow)
            by_flow = of_flow.list_runs(store, limit=PAGE + 1, offset=offset)
            runs = [*runs, *(r for r in by_flow if r not in runs)][:PAGE]
            more = more or len(by_flow) > PAGE
        return runs, more

    def _known_flows(self) -> set[str]:
        """The flows this app runs and those of the runs it has shown."""
        engine = self.flowdesk.engine
        return {*self._flows_seen, *(engine.flows if engine is not None else ())}

    def reload(self) -> None:
        page = self.flowdesk.read(self._read_page)
        if page is None:
            return
        runs, more = page
        if not runs and self.page > 0:  # the page emptied (runs deleted): go back
            self.page -= 1
            self.reload()
            return
        self.has_more = more
        self.table.show(runs)
        # First launch (or every run deleted): say what Flowdesk does.
        self.query_one("#welcome", Static).display = (
            not runs and self.page == 0 and not self.filter.active
        )
        self._statuses = {r.run_id: r.status for r in runs if isinstance(r, RunRecord)}
        self._flows_seen.update(r.flow_name for r in runs if isinstance(r, RunRecord))
        self._show_page(len(runs))
        self._show_hint()
        self._recheck_asking(list(self.asking))
        self.refresh_bindings()
        if self.has_class("-wide"):  # the selected run as the table now shows it
            self._show_summary()

    def refresh_run(self, run_id: str) -> None:
        run = self.flowdesk.read(lambda store: store.get_run(run_id), quiet=True)
        if run_id in self.asking:
            self._recheck_asking([run_id])
        if run is not None and self.table.update_run(run):
            if self._statuses.get(run_id) != run.status:
                self._statuses[run_id] = run.status
                self._show_hint()
                self.refresh_bindings()
            if self.has_class("-wide") and self.summary.run_id == run_id:
                self._show_summary()
        elif self.page == 0 and not self.filter.active:
            self.reload()  # a new run: it belongs at the top of the first page
        # else: a run of another page or outside the filter; the next
        # data_version poll reloads this page if anything on it changed.

    def action_sort(self) -> None:
        """Sort this page's runs by the next column (``S``; a header click
        sorts by that column), back to newest first after the last."""
        table = self.table
        keys = [k for k in SORTABLE if k in table.shown_columns]
        at = keys.index(table.sort_key) + 1 if table.sort_key in keys else 0
        table.sort_by(keys[at] if at < len(keys) else None, reverse=False)
        self._show_page(len(table.rows))

    def on_data_table_header_selected(self, _event: DataTable.HeaderSelected) -> None:
        self._show_page(len(self.table.rows))  # the table sorted itself: say how

    def _show_page(self, shown: int) -> None:
        first = self.page * PAGE + 1
        where = f" matching {self.filter.describe()}" if self.filter.active else ""
        table = self.table
        if table.sort_key is not None:
            label = dict(COLUMNS)[table.sort_key] or table.sort_key
            way = "descending" if table.sort_reverse else "ascending"
            where += f", this page sorted by {label.lower()} ({way}; S: next column)"
        if not shown:
            if self.filter.active:
                text = f"No runs{where}."
            else:
                text = "No runs yet; press n to start one."
        else:
            text = f"Runs {first}-{first + shown - 1}{where}"
            moves = [
                m for m, ok in (("[ previous", self.page > 0), ("] next page", self.has_more)) if ok
            ]
            if moves:
                text += " · " + " · ".join(moves)
        self.page_line.say(text)

    def _show_hint(self) -> None:
        """How many runs wait: flow runs (one bounded, indexed read: at most
        PAGE + 1 rows), agent runs asking a question or an approval
        (``input_required``; answered in the inbox) and LangGraph threads
        waiting on an ``interrupt()`` (the inbox's read); not those ``db
        copy`` moved (they wait there: their status says ``moved``)."""
        waiting_runs = self.flowdesk.read(
            lambda store: store.list_runs(statuses=("waiting",), limit=PAGE + 1), quiet=True
        )
        waiting = len(_here(waiting_runs or []))
        services = self.flowdesk.services
        asking_runs = (
            self.flowdesk.read(
                lambda _store: services.reader_agents.list(statuses=("input_required",)),
                quiet=True,
            )
            if services is not None
            else None
        )
        asking = len(_here(asking_runs or []))
        from desktop_app.app.screens.inbox import waiting_threads

        # the inbox's own read: a banner and an inbox that count alike
        graphs = self.flowdesk.read(waiting_threads, quiet=True)
        threads = len(_here(graphs or []))
        parts: list[str] = []
        if waiting:
            if waiting > PAGE:
                runs = f"More than {PAGE} runs are"
            else:
                runs = f"{plural(waiting, 'run')} {'is' if waiting == 1 else 'are'}"
            parts.append(f"{runs} waiting: select one and press a to see what for.")
        if asking:
            agents = f"{plural(asking, 'agent run')} {'is' if asking == 1 else 'are'}"
            parts.append(f"{agents} waiting for an answer: i opens the inbox.")
        if threads:
            graph = f"{plural(threads, 'LangGraph thread')} {'is' if threads == 1 else 'are'}"
            parts.append(f"{graph} waiting for an answer: i opens the inbox.")
        self.hint.say(" ".join(parts))

    # -- interrupted runs that wait for a person (recovery = "ask") ---------

    @property
    def asking_line(self) -> StatusLine:
        """Stays while interrupted runs of ``recovery = "ask"`` flows wait."""
        return self.query_one("#asking", StatusLine)

    def ask_about(self, runs: dict[str, str]) -> None:
        """Show ``runs`` (run id → flow) until each is resumed, canceled or
        otherwise no longer interrupted."""
        self.asking = dict(runs)
        self._show_asking()

    def _recheck_asking(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        now = self.flowdesk.now()
        for run_id in run_ids:
            run = self.flowdesk.read(partial(_get_run, run_id=run_id), quiet=True)
            if run is None or not left_over(run, now):
                self.asking.pop(run_id, None)
        self._show_asking()

    def _show_asking(self) -> None:
        if not self.asking:
            self.asking_line.say("")
            return
        n = len(self.asking)
        flows = ", ".join(sorted(set(self.asking.values())))
        runs = plural(n, "interrupted run")
        self.asking_line.say(
            f"{runs} of {flows} wait for you (recovery = ask): select one and press r to "
            "resume it, or c to cancel it."
        )

    def set_progress(self, run_id: str, done: int, total: int) -> None:
        self.table.set_progress(run_id, done, total)
        if self.has_class("-wide") and self.summary.run_id == run_id:
            self._show_summary()

    # -- paging and filters ---------------------------------------------

    def _database_open(self) -> bool:
        """Whether the database is open; else says so (as ``n`` does: the
        one true reason, not "no run selected" on an empty table)."""
        return self.flowdesk.controller.require_engine() is not None

    def action_next_page(self) -> None:
        if not self._database_open():
            return
        if not self.has_more:
            self.app.notify("This is the last page.", timeout=2)
            return
        self.page += 1
        self.reload()
        self.table.move_cursor(row=0)

    def action_previous_page(self) -> None:
        if not self._database_open():
            return
        if self.page == 0:
            self.app.notify("This is the first page.", timeout=2)
            return
        self.page -= 1
        self.reload()
        self.table.move_cursor(row=0)

    async def action_filters(self) -> None:
        """Show the filter bar (or hide it, clearing the filter, when it is open)."""
        bar = self.filters
        if not (bar is not None and bar.is_open) and not self._database_open():
            return
        if bar is None:
            bar = RunFilters(id="filters")
            await self.mount(bar, before=self.query_one("#runs-body"))
        elif bar.is_open:
            bar.action_close()
            return
        bar.set_flows(self._known_flows())
        bar.open()

    def set_filter(self, wanted: RunFilter) -> None:
        """Show the first page of the runs that pass ``wanted``."""
        if wanted == self.filter:
            return
        self.filter = wanted
        self.page = 0
        self.reload()

    def on_run_filters_changed(self, event: RunFilters.Changed) -> None:
        event.stop()
        self.set_filter(event.value)

    def on_run_filters_closed(self, event: RunFilters.Closed) -> None:
        event.stop()
        self.table.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While a filter field has focus, enter submits it (or opens the
        # select, or chooses in its open list) and letters are typed: the
        # table's keys step aside.
        if self._in_filters() and action in TABLE_ACTIONS:
            return False
        # r / a / c show (and work) only for a run they apply to
        if (wanted := ROW_ACTIONS.get(action)) is not None:
            return wanted in self._selected_actions()
        return True

    def _in_filters(self) -> bool:
        """Whether the focus is in the filter bar: a field, a select, or a
        select's open list (its overlay, a widget of its own inside the
        select: enter there chooses the highlighted choice)."""
        focused = self.focused
        return focused is not None and any(
            isinstance(node, RunFilters) for node in focused.ancestors_with_self
        )

    def _selected_actions(self) -> frozenset[str]:
        """:func:`~desktop_app.runs_view.row_actions` of the selected run (a
        LangGraph thread: answer, which opens it); none without a selection;
        all while the database is not open (each then says so)."""
        if self.flowdesk.engine is None:  # each key says why it cannot work yet
            return frozenset(ROW_ACTIONS.values())
        run_id = self.table.selected_run_id()
        run = None if run_id is None else self.table.record_of(run_id)
        if run is None:
            return frozenset()
        if run_kind(run) == "langgraph":  # a waiting one: answer opens it
            waits = display_status(run, self.flowdesk.now()) == "waiting"
            return frozenset({"answer"}) if waits else frozenset()
        return row_actions(display_status(run, self.flowdesk.now()))

    # -- actions ---------------------------------------------------------

    def follow(self, run_id: str) -> None:
        """Select ``run_id`` now, or as soon as its row appears."""
        self.table.follow(run_id)

    def selected_run_id(self) -> str | None:
        """The run under the cursor, if any."""
        return self.table.selected_run_id()

    def _shown(self, run_id: str) -> RunRecord | None:
        """The flow run as its row shows it."""
        run = self.table.record_of(run_id)
        return run if isinstance(run, RunRecord) else None

    def action_new_run(self) -> None:
        self.flowdesk.controller.new_digest()

    def action_open_run(self) -> None:
        if not self._database_open():
            return
        run_id = self.table.selected_run_id()
        if run_id is None:
            self.flowdesk.say("No run selected; press n to start one.", "warning")
            return
        self._open(run_id)

    def _open(self, run_id: str) -> None:
        """A flow run's detail, or an agent run's conversation."""
        if self.table.kind_of(run_id) == "agent":
            self.flowdesk.controller.open_agent_run(run_id)
        elif self.table.kind_of(run_id) == "langgraph":
            self.flowdesk.controller.open_thread(run_id)
        else:
            self.flowdesk.controller.open_run(run_id)

    def _selected(self) -> str | None:
        """The selected flow run (an agent run is answered in the inbox and
        opened with enter)."""
        if not self._database_open():
            return None
        run_id = self.table.selected_run_id()
        if run_id is None:
            self.flowdesk.say("No run selected.", "warning")
        elif self.table.kind_of(run_id) == "agent":
            self.flowdesk.say(self._agent_keys(run_id), "warning")
            return None
        elif self.table.kind_of(run_id) == "langgraph":
            self.flowdesk.say(
                f"{short_id(run_id)} is a LangGraph thread: enter shows its checkpoints and "
                "answers its question; its program resumes it.",
                "warning",
            )
            return None
        return run_id

    def _agent_keys(self, run_id: str) -> str:
        """What the keys do for the selected agent run, only those that apply
        to its status (a done run: enter shows it, nothing else)."""
        run = self.table.record_of(run_id)
        status = display_status(run, self.flowdesk.now()) if run is not None else ""
        acts = row_actions(status)
        keys = ["enter shows its conversation"]
        if "resume" in acts:
            keys.append("r resumes it")
        if status == "input_required":
            keys.append("i (the inbox) answers it")
        if "cancel" in acts:
            keys.append("c cancels it")
        said = ", ".join(keys[:-1]) + (" and " if len(keys) > 1 else "") + keys[-1]
        return f"{short_id(run_id)} is an agent run ({agent_status_words(status)}): {said}."

    def action_open_output(self) -> None:
        if (run_id := self._selected()) is not None:
            self.flowdesk.controller.open_output(run_id)

    def action_copy_id(self) -> None:
        if not self._database_open():
            return
        run_id = self.table.selected_run_id()
        if run_id is None:
            self.flowdesk.say("No run selected.", "warning")
        else:
            self.flowdesk.controller.copy_run_id(run_id)

    def action_resume_run(self) -> None:
        if not self._database_open():
            return
        run_id = self.table.selected_run_id()
        if run_id is not None and self.table.kind_of(run_id) == "agent":
            self.flowdesk.controller.open_agent_run(run_id, resume=True)
        elif (run_id := self._selected()) is not None:
            self.flowdesk.controller.resume(run_id, self._shown(run_id))

    def action_answer_run(self) -> None:
        if not self._database_open():
            return
        run_id = self.table.selected_run_id()
        if run_id is not None and self.table.kind_of(run_id) == "langgraph":
            self.flowdesk.controller.open_thread(run_id)
        elif (run_id := self._selected()) is not None and (run := self._shown(run_id)):
            self.flowdesk.controller.answer(run)

    def action_cancel_run(self) -> None:
        if not self._database_open():
            return
        run_id = self.table.selected_run_id()
        agent = None if run_id is None else self.table.record_of(run_id)
        if isinstance(agent, AgentRun):  # what `flowdesk cancel` does to an agent run
            self.flowdesk.controller.cancel_agent(agent)
        elif (run_id := self._selected()) is not None and (run := self._shown(run_id)):
            self.flowdesk.controller.cancel(run)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # A click on a row (enter is bound above, at screen priority).
        event.stop()
        if event.row_key.value is not None:
            self._open(event.row_key.value)


def _here(runs: Sequence[L]) -> list[L]:
    """``runs`` but those ``flowdesk db copy`` moved away (their lease or
    owner says ``moved to URL``: they wait there, not here)."""
    return [r for r in runs if moved_to(r.lease_owner) is None]
