"""Agent runs: every durable agent run, its conversation and its tool results.

The table lists the runs newest first and reloads whenever anyone commits
(the app's read-only store's ``data_version`` changes). ``enter`` on a run
shows its conversation below the table: each message with its role, its
content (truncated), the tool calls an assistant asked for (name and
canonical JSON arguments) and the tool results (``(reused)`` when an earlier
identical call answered), then a table of the run's tool results. A run
waiting for the user (``input_required``) shows its question, how the inbox
answers it (``i``, then ``enter``, or ``y``/``n`` for a tool call's
approval) and the command that does the same.

Reads run in thread workers over the app's read-only store (never behind
the engine's writes), the list :data:`AGENT_PAGE` runs at a time, newest
first, each page shown as it arrives; results come back as messages. A
parent's children (a ``digest --model`` run's agent run per file) share
one group row, opened with enter. Everything shown is
plain text: message contents are never read as markup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import get_current_worker

from desktop_app.agent import drives
from desktop_app.agent.messages import call_status, canonical_json, is_outcome_unknown
from desktop_app.agent.runtime import AgentEvent, AgentResponse
from desktop_app.agent.tools import is_tool_call
from desktop_app.app.format import json_text, local_when, plural, short_id, when
from desktop_app.app.host import Host, host
from desktop_app.app.screens.ask import (
    AnswerDelta,
    AnswerFinished,
    AnswerToolEvent,
    AskScreen,
    StreamingAnswer,
)
from desktop_app.app.screens.inbox import agent_hint, agent_outcome, answer_in_inbox
from desktop_app.app.widgets.bars import Footer, Header
from desktop_app.app.widgets.conversation import ConversationView
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.cli.output import Hints, moved_line
from desktop_app.errors import FlowdeskError
from desktop_app.runs_view import INTERRUPTED, MOVED, display_status
from desktop_app.store.records import AGENT_ENDED, AgentRun, ToolResult
from desktop_app.textsafe import visible_controls

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from desktop_app.app.services import AgentStore
    from desktop_app.store.protocol import AgentLog

#: Characters of a message's content shown before it is cut.
CONTENT_CHARS = 300
#: Rich styles of the agent statuses that need attention.
AGENT_STATUS_STYLES: dict[str, str] = {
    "input_required": "bold yellow",
    "failed": "bold red",
    "timeout": "red",
    "rate_limited": "yellow",
    "expired": "dim",
    "canceled": "dim",
    INTERRUPTED: "bold magenta",
}


def truncate(text: str, limit: int = CONTENT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (``…`` marks the cut)."""
    return text if len(text) <= limit else text[:limit] + "…"


def question_of(run: AgentRun) -> str | None:
    """What an ``input_required`` run asks (``None`` when it asks nothing); a
    tool call waiting for approval as the exact tool and arguments."""
    from desktop_app.agent.approvals import pending_approval

    request = pending_approval(run.pending_call)
    if request is not None:
        return request.question()
    arguments = (run.pending_call or {}).get("arguments")
    if not isinstance(arguments, dict):
        return None
    question = arguments.get("question")
    return None if question is None else json_text(question)


def _indented(text: str) -> list[str]:
    return ["  " + line for line in (text.splitlines() or [""])]


def message_lines(index: int, message: dict[str, Any]) -> list[str]:
    """One message as a block of plain lines: role, content, tool calls."""
    role = str(message.get("role", "?"))
    head = f"#{index} {role}"
    if role == "tool":
        head += f" result {message.get('name') or '?'}"
        if message.get("reused"):
            head += " (reused)"
        if is_outcome_unknown(message.get("content")):
            head += " (outcome unknown: not repeated)"
        if message.get("tool_call_id"):
            head += f" [call {message['tool_call_id']}]"
    lines = [head]
    content = json_text(message.get("content"))
    if content:
        lines.extend(_indented(truncate(content)))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        name, call_id = call.get("name", "?"), call.get("id", "?")
        arguments = truncate(canonical_json(call.get("arguments") or {}))
        lines.append(f"  → tool call {name} {arguments} [id {call_id}]")
    return lines


def run_lines(run: AgentRun, now: float, hints: Hints) -> list[str]:
    """The run's header: ids, status (judged at ``now``, UTC epoch seconds:
    ``interrupted`` when its process is gone, with how to resume it), times,
    input, answer or error, question."""
    from desktop_app.agent.approvals import agent_wait_id, pending_approval

    status = display_status(run, now)
    lines = [
        f"Agent run {run.run_id} · agent {run.agent} · {status} · {plural(run.turns, 'turn')}",
        f"Created {local_when(run.created_at)} · updated {when(run.updated_at)}",
    ]
    if run.parent_run_id:
        lines.append(f"Parent run {run.parent_run_id}")
    if run.deadline_at is not None:
        lines.append(f"Deadline {when(run.deadline_at)}")
    if run.expires_at is not None:
        lines.append(f"Expires {when(run.expires_at)}")
    if run.retry_at is not None:
        lines.append(f"Retry after {when(run.retry_at)}")
    lines.append(f"Input: {truncate(run.input)}")
    if run.response is not None:
        lines.append(f"Answer: {truncate(run.response)}")
    if run.error is not None:
        kind = f" ({run.error_type})" if run.error_type else ""
        lines.append(f"Error{kind}: {truncate(run.error)}")
    if status == INTERRUPTED:
        lines.append("Interrupted: its process stopped; press r to resume it.")
    moved = moved_line(hints, run.run_id, run.lease_owner) if status == MOVED else None
    if moved is not None:  # db copy moved it: answered there, not here
        lines.append(f"Moved: {moved}")
    if run.status == "input_required":
        lines.append(f"Question: {question_of(run) or '(no question)'}")
    if run.status == "input_required" and moved is None:
        request = pending_approval(run.pending_call)
        lines.append(f"Answer it here: {answer_in_inbox(request is not None)}.")
        asked = agent_wait_id(run.pending_call)
        lines.append(f"Answer it with: {agent_hint(hints, run.run_id, asked)}")
    return [visible_controls(line) for line in lines]  # error, answer: model text


def conversation_text(
    run: AgentRun, messages: list[dict[str, Any]], now: float, hints: Hints
) -> str:
    """The run's header (status judged at ``now``) then its messages, as plain text."""
    lines = run_lines(run, now, hints)
    lines.append("")
    if not messages:
        lines.append("(no messages)")
    for i, message in enumerate(messages, 1):
        lines.extend(message_lines(i, message))
    return "\n".join(lines)


class AgentRunsLoaded(Message):
    """The agent runs read so far, newest first, read in a worker (``error``
    when the read failed; ``done``: no page follows)."""

    def __init__(self, runs: list[AgentRun], error: str | None = None, done: bool = True) -> None:
        super().__init__()
        self.runs = runs
        self.error = error
        self.done = done


#: Agent runs read per page (the first page shows while the next ones are read).
AGENT_PAGE = 250
#: Children of one parent from which they share one row, opened with enter.
GROUP_FROM = 2
#: Characters of a child's own part of its id shown (its tail when longer).
CHILD_CHARS = 32


def group_key(parent_run_id: str) -> str:
    """The row key of the group row of ``parent_run_id``'s children."""
    return f"group:{parent_run_id}"


def child_label(run: AgentRun) -> str:
    """What tells a child apart from its siblings: its id after the parent's
    (``<flow run id>:notes/a.md`` → ``notes/a.md``), its tail when long."""
    parent = run.parent_run_id or ""
    own = run.run_id[len(parent) + 1 :] if run.run_id.startswith(parent + ":") else run.run_id
    own = own if len(own) <= CHILD_CHARS else "…" + own[-(CHILD_CHARS - 1) :]
    return f"└ {own}"


def group_cells(
    parent_run_id: str, children: list[AgentRun], open_: bool, now: float
) -> list[Text]:
    """A group row: the parent, how many children, how many are done, their turns."""
    done = sum(r.status == "done" for r in children)
    statuses = [display_status(r, now) for r in children]
    attention = next((s for s in ("input_required", INTERRUPTED, "failed") if s in statuses), None)
    status = f"{done:,}/{len(children):,} done"
    if attention is not None:
        status = f"{statuses.count(attention):,} {attention}"
    return [
        Text(f"{'▾' if open_ else '▸'} {short_id(parent_run_id)}", style="bold"),
        Text(f"{len(children):,} child runs", style="bold"),
        Text(status, style=AGENT_STATUS_STYLES.get(attention or "", "")),
        Text(f"{sum(r.turns for r in children):,}", justify="right"),
        Text("-"),
        Text(when(max(r.updated_at for r in children))),
    ]


@dataclass
class AgentRunDetail:
    """One agent run with its messages and tool results."""

    run: AgentRun
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[ToolResult] = field(default_factory=list)


class AgentRunLoaded(Message):
    """One run's detail, read in a worker (``detail`` is ``None`` on error)."""

    def __init__(self, run_id: str, detail: AgentRunDetail | None, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.detail = detail
        self.error = error


class AgentRunReport(Message):
    """What came of work done in a worker for an agent run: a question ``a``
    stored as a new run for the workers (PostgreSQL), or a Pydantic AI
    agent's run ``r`` resumed: ``run_id`` (``None`` when no run was stored)
    and what to say."""

    def __init__(self, run_id: str | None, text: str, severity: SeverityLevel) -> None:
        super().__init__()
        self.run_id = run_id
        self.text = text
        self.severity = severity


def _agent_log(app: Host) -> AgentLog:
    """The engine's agent-run log, which resuming a run drives (raises
    ``LookupError`` while the database is not open)."""
    services = app.services
    if services is None:
        raise LookupError(app.startup_error or "The database is still opening.")
    return services.services.agents


def _registered_agent(app: Host, run_id: str) -> str | None:
    """The registered Pydantic AI agent that runs agent run ``run_id`` (its
    recorded tool sources), or ``None`` for a run of Flowdesk's own agent."""
    from desktop_app.agent.recovery import ToolSources

    return ToolSources.of_run(_agent_log(app), run_id).pydantic_ai


def _agent_store(app: Host) -> AgentStore:
    """The app's agent-run log (raises ``LookupError`` while the database is not open)."""
    services = app.services
    if services is None:
        raise LookupError(app.startup_error or "The database is still opening.")
    return services.agents


def _reader_agents(app: Host) -> AgentStore:
    """The agent-run log over the app's read-only store (raises
    ``LookupError`` while the database is not open)."""
    services = app.services
    if services is None:
        raise LookupError(app.startup_error or "The database is still opening.")
    return services.reader_agents


def _failure(exc: Exception) -> str:
    if isinstance(exc, FlowdeskError | LookupError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class AgentRunsScreen(Screen[None]):
    """Agent runs, newest first; ``enter`` shows a run's conversation."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("enter", "open_run", "Open", priority=True),
        Binding("a", "ask", "Ask"),
        Binding("r", "resume", "Resume"),
        Binding("q", "app.quit", "Quit"),
    ]
    #: the agent name of runs started with ``a`` (and the only one ``r`` resumes:
    #: other agents' tools are configured for the command line)
    ASK_AGENT = "ask"

    COLUMNS = (
        ("run", "Run"),
        ("agent", "Agent"),
        ("status", "Status"),
        ("turns", "Turns"),
        ("parent", "Parent"),
        ("updated", "Updated"),
    )
    TOOL_COLUMNS = (
        ("tool", "Tool"),
        ("status", "Status"),
        ("attempts", "Attempts"),
        ("reused", "Reused"),
    )

    def __init__(self, *, open_run_id: str | None = None, resume: bool = False) -> None:
        """``open_run_id``: a run whose conversation shows as soon as the list
        is read; with ``resume``, that run is resumed once the screen is up."""
        super().__init__()
        self._open_first = open_run_id
        self._resume_first = open_run_id if resume else None
        #: the last answer streamed here (``None`` until one ended)
        self.answered: AgentResponse | None = None
        self.runs: list[AgentRun] = []
        #: each run's status as its row was last drawn (see :meth:`_poll`)
        self._judged: list[str] = []
        self.loaded = False
        #: parents whose group of children is open
        self.expanded: set[str] = set()
        #: the key of each row, in order (a run id, or a group's :func:`group_key`)
        self.row_keys: list[str] = []
        self.shown: AgentRunDetail | None = None
        self._shown_id: str | None = None
        self._data_version: int | None = None
        self._status = ""
        self._conversation = ""

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one("#agent-runs", DataTable)

    @property
    def tools_table(self) -> DataTable[Text]:
        return self.query_one("#agent-tools", DataTable)

    @property
    def status_text(self) -> str:
        """The line above the table (how many runs, or a read error)."""
        return self._status

    @property
    def conversation(self) -> str:
        """The shown run's header and conversation, as plain text."""
        return self._conversation

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Reading agent runs…", id="agent-runs-status", markup=False)
        yield RowTable(id="agent-runs")
        with VerticalScroll(id="agent-run-detail"):
            yield Static(
                Text("Select a run and press enter to see its conversation."),
                id="agent-conversation",
                markup=False,
            )
            yield StreamingAnswer(id="agent-stream")
            yield ConversationView(id="agent-messages")
            yield DataTable[Text](id="agent-tools", cursor_type="none", show_cursor=False)
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "Agent runs"
        for key, label in self.COLUMNS:
            self.table.add_column(label, key=key)
        for key, label in self.TOOL_COLUMNS:
            self.tools_table.add_column(label, key=key)
        self.tools_table.can_focus = False
        self.tools_table.display = False
        self.query_one(StreamingAnswer).display = False
        self.table.focus()
        self.set_interval(self.flowdesk.POLL_S, self._poll)
        self.reload()
        if self._resume_first is not None:
            self.resume_run(self._resume_first)

    # -- reading -----------------------------------------------------------

    def _poll(self) -> None:
        """Reload when anyone committed since the last look; else redraw the
        rows when a run's shown status changed with no commit (its process
        was killed: ``running`` becomes ``interrupted``, judged as the runs
        table judges it)."""
        version = self.flowdesk.store_version()
        if version is not None and version != self._data_version:
            self._data_version = version
            self.reload()
            if self._shown_id is not None:
                self.load_run(self._shown_id)
        elif self.loaded and self._judged != self._statuses():
            self._show_rows()
            if self._shown_id is not None:
                self.load_run(self._shown_id)

    def _statuses(self) -> list[str]:
        """Each loaded run's status as shown now (:func:`display_status`)."""
        now = self.flowdesk.now()
        return [display_status(r, now) for r in self.runs]

    @work(thread=True, exclusive=True, group="agent-runs", name="read agent runs")
    def reload(self) -> None:
        """Read the runs newest first, :data:`AGENT_PAGE` at a time, on the
        app's read-only store (never waiting behind the engine's writes);
        each page shows as it arrives."""
        worker = get_current_worker()
        runs: list[AgentRun] = []
        try:
            store = _reader_agents(self.flowdesk)
            while True:
                page = store.list_page(offset=len(runs), limit=AGENT_PAGE)
                runs.extend(page)
                done = len(page) < AGENT_PAGE
                if worker.is_cancelled:
                    return
                self.post_message(AgentRunsLoaded(list(runs), done=done))
                if done:
                    return
        except Exception as exc:  # never a traceback in the user's face
            self.post_message(AgentRunsLoaded(runs, _failure(exc)))

    @work(thread=True, exclusive=True, group="agent-run", name="read agent run")
    def load_run(self, run_id: str) -> None:
        try:
            store = _reader_agents(self.flowdesk)
            detail = AgentRunDetail(
                store.get(run_id), store.messages(run_id), store.tool_results(run_id)
            )
        except Exception as exc:
            self.post_message(AgentRunLoaded(run_id, None, _failure(exc)))
            return
        self.post_message(AgentRunLoaded(run_id, detail, None))

    def on_agent_runs_loaded(self, message: AgentRunsLoaded) -> None:
        try:
            table = self.table
        except NoMatches:  # the screen is closing
            return
        self.runs = message.runs
        self.loaded = True
        self._show_rows()
        opening = self._open_first
        if opening is not None and opening in self.row_keys:
            self._open_first = None
            table.move_cursor(row=self.row_keys.index(opening))
            self.action_open_run()
        elif opening is not None and message.done:
            self._open_first = None
        if message.error:
            status = f"Could not read agent runs: {message.error}"
        elif not self.runs:
            status = "No agent runs yet." if message.done else "Reading agent runs…"
        else:
            waiting = sum(r.status == "input_required" for r in self.runs)
            status = f"{plural(len(self.runs), 'agent run')}, {waiting:,} waiting for you."
            if not message.done:
                status = f"{status[:-1]}; reading more…"
        self._status = status
        self.query_one("#agent-runs-status", Static).update(Text(status))

    def _show_rows(self) -> None:
        """Fill the table from :attr:`runs`: a parent's children (when it has
        :data:`GROUP_FROM` or more) share a group row after the parent's own
        row, or where the newest of them is when the parent is a flow run;
        enter on a group row shows them beneath it. The selection is kept."""
        table = self.table
        keep = self.selected_key
        now = self.flowdesk.now()
        self._judged = self._statuses()
        children: dict[str, list[AgentRun]] = {}
        for run in self.runs:
            if run.parent_run_id:
                children.setdefault(run.parent_run_id, []).append(run)
        grouped = {p: kids for p, kids in children.items() if len(kids) >= GROUP_FROM}
        rows: list[tuple[str, list[Text]]] = []
        placed: set[str] = set()

        def group(parent: str) -> None:
            placed.add(parent)
            kids = grouped[parent]
            is_open = parent in self.expanded
            rows.append((group_key(parent), group_cells(parent, kids, is_open, now)))
            if is_open:
                rows.extend((k.run_id, self._cells(k, now, child=True)) for k in kids)

        for run in self.runs:
            parent = run.parent_run_id
            if parent in grouped:
                if parent not in placed and parent not in {r.run_id for r in self.runs}:
                    group(parent)
                continue
            rows.append((run.run_id, self._cells(run, now)))
            if run.run_id in grouped:
                group(run.run_id)
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        self.row_keys = [key for key, _ in rows]
        if keep in self.row_keys:
            table.move_cursor(row=self.row_keys.index(keep))

    @staticmethod
    def _cells(run: AgentRun, now: float, *, child: bool = False) -> list[Text]:
        """A run's row; a child in an open group shows its own part of its id
        (the group row names the parent)."""
        status = display_status(run, now)
        return [
            Text(child_label(run)) if child else Text(short_id(run.run_id)),
            Text(run.agent),
            Text(status, style=AGENT_STATUS_STYLES.get(status, "")),
            Text(str(run.turns), justify="right"),
            Text("" if child else short_id(run.parent_run_id) if run.parent_run_id else "-"),
            Text(when(run.updated_at)),
        ]

    def cells(self, run_id: str) -> list[str]:
        """The plain text of run ``run_id``'s row."""
        return [c.plain for c in self.table.get_row(run_id)]

    async def on_agent_run_loaded(self, message: AgentRunLoaded) -> None:
        if message.run_id != self._shown_id:
            return  # another run was opened meanwhile
        try:
            view = self.query_one("#agent-conversation", Static)
            tools = self.tools_table
        except NoMatches:
            return
        if message.detail is None:
            self.shown = None
            self._conversation = f"Could not read agent run {message.run_id}: {message.error}"
            view.update(Text(self._conversation))
            await self.query_one(ConversationView).show([], 0)
            tools.display = False
            return
        detail = self.shown = message.detail
        now = self.flowdesk.now()
        self._conversation = conversation_text(
            detail.run, detail.messages, now, self.flowdesk.hints
        )
        view.update(Text("\n".join(run_lines(detail.run, now, self.flowdesk.hints))))
        await self.query_one(ConversationView).show(detail.messages, CONTENT_CHARS * 10)
        tools.clear()
        calls = [r for r in detail.tools if is_tool_call(r.tool_key)]  # not the records
        cut_off = display_status(detail.run, now) == INTERRUPTED  # no process runs it
        for result in calls:
            tools.add_row(
                Text(result.tool),
                Text(call_status(result.status, result.result, cut_off)),
                Text(str(result.attempts), justify="right"),
                Text(str(result.reused), justify="right"),
                key=result.tool_key,
            )
        tools.display = bool(calls)

    # -- the selected run ------------------------------------------------------

    @property
    def selected_key(self) -> str | None:
        """The selected row's key: a run id or a group's :func:`group_key`."""
        table = self.table
        if not self.row_keys or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.row_keys[table.cursor_row]

    @property
    def selected_id(self) -> str | None:
        """The selected run (``None`` on a group row)."""
        key = self.selected_key
        return None if key is None or key.startswith("group:") else key

    def action_open_run(self) -> None:
        key = self.selected_key
        if key is not None and key.startswith("group:"):
            parent = key.removeprefix("group:")
            self.expanded ^= {parent}
            self._show_rows()
            return
        run_id = self.selected_id
        if run_id is None:
            self.flowdesk.say("Nothing selected: there are no agent runs.", "warning")
            return
        self._shown_id = run_id
        self.query_one("#agent-conversation", Static).update(
            Text(f"Reading agent run {short_id(run_id)}…")
        )
        self.load_run(run_id)

    # -- asking (a streamed answer) -------------------------------------------

    def action_ask(self) -> None:
        if self.flowdesk.services is None:
            self.flowdesk.controller.require_engine()
            return
        self.app.push_screen(AskScreen(), self._asked)

    def _asked(self, question: str | None) -> None:
        if not question:
            return
        services = self.flowdesk.services
        if services is not None and not services.engine.executes:  # PostgreSQL: the workers
            self._hand_question(question)
            return
        self._begin_stream(question)
        self._stream(None, question)

    @work(thread=True, group="agent-ask", name="hand a question to the workers")
    def _hand_question(self, question: str) -> None:
        """Store ``question`` as a new run of :attr:`ASK_AGENT` and leave it to
        the workers (``Agent.create``: no model call here; a ``flowdesk
        agent`` worker asks its own configured model, with its credentials);
        the outcome comes back as :class:`AgentRunReport`."""
        services = self.flowdesk.services
        assert services is not None
        try:
            run_id = services.agent(self.ASK_AGENT, None).create(question)
        except Exception as exc:  # never a traceback in the user's face
            said = f"The question was not saved: {_failure(exc)}"
            self.post_message(AgentRunReport(None, said, "error"))
            return
        text = f"Agent run {short_id(run_id)} is saved; a worker (flowdesk agent) answers it."
        text += self._worker_needs_a_model("answers")
        self.post_message(AgentRunReport(run_id, text, "information"))

    def _worker_needs_a_model(self, does: str) -> str:
        """What a run left to the workers needs when this app's settings
        configure no model ("": they do): a worker configured like this app
        leaves it as it is (a tryout's question sat unanswered, said only on
        the worker's terminal)."""
        if self.flowdesk.settings.model.configured:
            return ""
        return (
            " No model is configured here: a worker whose settings set model.base_url and "
            f"model.model {does} it (one configured like this app does not)."
        )

    def on_agent_run_report(self, message: AgentRunReport) -> None:
        self.flowdesk.say(message.text, message.severity)
        if message.run_id is not None:
            self._shown_id = message.run_id
            self._open_first = message.run_id
            self.reload()
            self.load_run(message.run_id)

    def action_resume(self) -> None:
        """Resume the selected agent run here, its answer streamed like ``a``'s."""
        run_id = self.selected_id
        if run_id is None:
            self.flowdesk.say("No agent run selected.", "warning")
        else:
            self.resume_run(run_id)

    def resume_run(self, run_id: str) -> None:
        """Resume agent run ``run_id`` when this app can: a run of
        :attr:`ASK_AGENT` that used no tools, streamed
        (``Agent.resume_stream``); any other run that is not finished, not
        waiting for a person and not being driven by another process with
        the tools it recorded (MCP servers from the settings, the files
        tools) or its registered Pydantic AI agent, in a worker, as the
        launch's recovery resumes it. Otherwise say why and what to do
        instead."""
        if self.flowdesk.services is None:
            self.flowdesk.controller.require_engine()
            return
        try:
            run = _agent_store(self.flowdesk).get(run_id)
            used_tools = bool(_agent_store(self.flowdesk).tool_results(run_id))
            registered = _registered_agent(self.flowdesk, run_id)
        except Exception as exc:  # never a traceback in the user's face
            self.flowdesk.say(_failure(exc), "error")
            return
        rid = short_id(run_id)
        problem = None
        if run.status == "done":
            problem = f"Agent run {rid} is done; its answer is shown with enter."
        elif run.status == "input_required":
            approval = (run.pending_call or {}).get("approval") is not None
            problem = f"Agent run {rid} waits for an answer: {answer_in_inbox(approval)}."
        elif run.status in AGENT_ENDED:
            problem = f"Agent run {rid} is {run.status}; it cannot be resumed."
        elif registered is not None or run.agent != self.ASK_AGENT or used_tools:
            # a Pydantic AI agent's run (its own model and tools), or one with
            # tools it recorded: resumed as the launch's recovery resumes it
            if self.flowdesk.services.engine.executes:
                self.flowdesk.say(f"Resuming agent run {rid}…")
                self._resume_recorded(run_id, registered is not None)
            else:  # PostgreSQL: the workers resume it
                self.flowdesk.say(
                    f"Agent run {rid} is saved as it stopped; a worker (flowdesk agent) resumes it."
                )
            return
        if problem is not None:
            self.flowdesk.say(problem, "warning")
            return
        if not self.flowdesk.services.engine.executes:  # PostgreSQL: the workers resume it
            self.flowdesk.say(
                f"Agent run {rid} is saved as it stopped; a worker (flowdesk agent) resumes it."
                + self._worker_needs_a_model("resumes")
            )
            return
        self.flowdesk.say(f"Resuming agent run {rid}…")
        self._begin_stream(question_of(run) or run.input)
        self._stream(run_id, None)

    @work(thread=True, group="agent-resume", name="resume an agent run with its tools")
    def _resume_recorded(self, run_id: str, pydantic_ai: bool) -> None:
        """Resume an agent run with the tools it recorded and the configured
        model, or a Pydantic AI agent's run (``pydantic_ai``) with its
        registered agent, model and tools included, as ``flowdesk resume``
        and the launch's recovery do; the outcome comes back as
        :class:`AgentRunReport`."""
        from desktop_app.agent.recovery import resume_with_recorded_tools

        try:
            store = _agent_log(self.flowdesk)
            model = None if pydantic_ai else self.flowdesk.chat_model()
            with drives.driving_thread():  # the app's quit waits for its call in flight
                res = resume_with_recorded_tools(
                    store,
                    self.flowdesk.settings,
                    model,
                    store.get(run_id),
                    no_model="no model is set up (Settings, ctrl+s)",
                )
        except Exception as exc:  # never a traceback in the user's face
            why = str(exc) if isinstance(exc, FlowdeskError) else f"{type(exc).__name__}: {exc}"
            said = f"Agent run {short_id(run_id)} was not resumed: {visible_controls(why)}"
            self.post_message(AgentRunReport(run_id, said, "error"))
            return
        self.post_message(AgentRunReport(run_id, *agent_outcome(self.flowdesk.hints, res)))

    def _begin_stream(self, question: str) -> None:
        self._shown_id = None
        self.answered = None
        self.query_one("#agent-conversation", Static).update(Text("Asking…"))
        self.query_one(StreamingAnswer).start(question)
        self.run_worker(self.query_one(ConversationView).show([], 0))
        self.tools_table.display = False

    @work(thread=True, exclusive=True, group="agent-ask", name="ask the agent")
    def _stream(self, run_id: str | None, question: str | None) -> None:
        """``Agent.stream(question)``, or ``Agent.resume_stream(run_id)``, on
        this thread; every event becomes a message."""
        try:
            model = self.flowdesk.chat_model()
            if model is None:
                self.post_message(
                    AnswerFinished(
                        None,
                        "No model is set up: set model.base_url and model.model in "
                        "Settings (ctrl+s) first.",
                    )
                )
                return
            services = self.flowdesk.services
            assert services is not None
            agent = services.agent(self.ASK_AGENT, model)
            if run_id:
                events = agent.resume_stream(run_id)
            else:
                from desktop_app.bootstrap import run_context

                context = run_context(self.flowdesk.settings)
                events = agent.stream(question or "", context=context)
            with drives.driving_thread():  # the app's quit waits for its call in flight
                self._post_events(events)
        except Exception as exc:  # never a traceback in the user's face
            self.post_message(AnswerFinished(None, _failure(exc)))

    def _post_events(self, events: Iterable[AgentEvent]) -> None:
        """Each of an ``Agent.stream``'s events as a message, as they come."""
        for event in events:
            if event.kind == "delta":
                self.post_message(AnswerDelta(event.text))
            elif event.kind == "tool_start":
                self.post_message(AnswerToolEvent(f"calls {event.tool}…"))
            elif event.kind == "tool_end":
                reused = " (reused)" if event.reused else ""
                self.post_message(AnswerToolEvent(f"{event.tool} answered{reused}"))
            elif event.kind == "done":
                self.post_message(AnswerFinished(event.response))

    def on_answer_delta(self, message: AnswerDelta) -> None:
        self.query_one(StreamingAnswer).add(message.text)

    def on_answer_tool_event(self, message: AnswerToolEvent) -> None:
        self.query_one(StreamingAnswer).tool(message.line)

    def on_answer_finished(self, message: AnswerFinished) -> None:
        stream = self.query_one(StreamingAnswer)
        if message.response is None:
            stream.display = False
            self.flowdesk.say(message.error or "The agent stopped.", "error")
            self.query_one("#agent-conversation", Static).update(Text(message.error or ""))
            return
        run_id = message.response.run_id
        self.answered = message.response
        stream.display = False
        self._shown_id = run_id  # the stored conversation replaces the stream
        self._open_first = run_id
        self.reload()
        self.load_run(run_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # a click on a row (enter is the screen's priority binding)
        event.stop()
        if event.data_table.id == "agent-runs":
            self.action_open_run()
