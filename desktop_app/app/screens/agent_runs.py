"""Agent runs: every durable agent run, its conversation and its tool results.

The table lists the runs newest first and reloads whenever anyone commits
(the app's read-only store's ``data_version`` changes). ``enter`` on a run
shows its conversation below the table: each message with its role, its
content (truncated), the tool calls an assistant asked for (name and
canonical JSON arguments) and the tool results (``(reused)`` when an earlier
identical call answered), then a table of the run's tool results. A run
waiting for the user (``input_required``) shows its question and the command
that answers it.

Reads run in thread workers over the engine's store (it may be waiting for
another process's lock); results come back as messages. Everything shown is
plain text: message contents are never read as markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from desktop_app.agent.messages import canonical_json, is_outcome_unknown
from desktop_app.agent.runtime import AgentResponse
from desktop_app.agent.tools import is_tool_call
from desktop_app.app.format import json_text, short_id, when
from desktop_app.app.screens.ask import (
    AnswerDelta,
    AnswerFinished,
    AnswerToolEvent,
    AskScreen,
    StreamingAnswer,
)
from desktop_app.app.screens.inbox import agent_hint
from desktop_app.app.widgets.conversation import ConversationView
from desktop_app.cli.output import Hints
from desktop_app.errors import FlowdeskError
from desktop_app.runs_view import INTERRUPTED, display_status
from desktop_app.store.records import AGENT_TERMINAL, AgentRun, ToolResult
from desktop_app.textsafe import visible_controls

if TYPE_CHECKING:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.services import AgentStore

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
    status = display_status(run, now)
    lines = [
        f"Agent run {run.run_id} · agent {run.agent} · {status} · {run.turns} turn(s)",
        f"Created {when(run.created_at)} UTC · updated {when(run.updated_at)} UTC",
    ]
    if run.parent_run_id:
        lines.append(f"Parent run {run.parent_run_id}")
    if run.deadline_at is not None:
        lines.append(f"Deadline {when(run.deadline_at)} UTC")
    if run.expires_at is not None:
        lines.append(f"Expires {when(run.expires_at)} UTC")
    if run.retry_at is not None:
        lines.append(f"Retry after {when(run.retry_at)} UTC")
    lines.append(f"Input: {truncate(run.input)}")
    if run.response is not None:
        lines.append(f"Answer: {truncate(run.response)}")
    if run.error is not None:
        kind = f" ({run.error_type})" if run.error_type else ""
        lines.append(f"Error{kind}: {truncate(run.error)}")
    if status == INTERRUPTED:
        lines.append("Interrupted: its process stopped; press r to resume it.")
    if run.status == "input_required":
        lines.append(f"Question: {question_of(run) or '(no question)'}")
        approval = (run.pending_call or {}).get("approval") is not None
        lines.append(f"Answer it with: {agent_hint(hints, run.run_id, approval)}")
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
    """The agent runs, read in a worker (``error`` when the read failed)."""

    def __init__(self, runs: list[AgentRun], error: str | None = None) -> None:
        super().__init__()
        self.runs = runs
        self.error = error


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


def _agent_store(app: FlowdeskApp) -> AgentStore:
    """The app's agent-run log (raises ``LookupError`` while the database is not open)."""
    services = app.services
    if services is None:
        raise LookupError(app.startup_error or "The database is still opening.")
    return services.agents


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
        ("updated", "Updated (UTC)"),
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
        self.loaded = False
        self.shown: AgentRunDetail | None = None
        self._shown_id: str | None = None
        self._data_version: int | None = None
        self._status = ""
        self._conversation = ""

    @property
    def flowdesk(self) -> FlowdeskApp:
        return cast("FlowdeskApp", self.app)

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
        yield DataTable[Text](id="agent-runs", cursor_type="row", zebra_stripes=True)
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
        """Reload when anyone committed since the last look."""
        version = self.flowdesk.store_version()
        if version is not None and version != self._data_version:
            self._data_version = version
            self.reload()
            if self._shown_id is not None:
                self.load_run(self._shown_id)

    @work(thread=True, exclusive=True, group="agent-runs", name="read agent runs")
    def reload(self) -> None:
        try:
            runs = _agent_store(self.flowdesk).list()
        except Exception as exc:  # never a traceback in the user's face
            self.post_message(AgentRunsLoaded([], _failure(exc)))
            return
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        self.post_message(AgentRunsLoaded(runs))

    @work(thread=True, exclusive=True, group="agent-run", name="read agent run")
    def load_run(self, run_id: str) -> None:
        try:
            store = _agent_store(self.flowdesk)
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
        keep = self.selected_id
        table.clear()
        for run in self.runs:
            table.add_row(*self._cells(run, self.flowdesk.now()), key=run.run_id)
        ids = [r.run_id for r in self.runs]
        if keep in ids:
            table.move_cursor(row=ids.index(keep))
        opening, self._open_first = self._open_first, None
        if opening in ids:
            table.move_cursor(row=ids.index(opening))
            self.action_open_run()
        if message.error:
            status = f"Could not read agent runs: {message.error}"
        elif not self.runs:
            status = "No agent runs yet."
        else:
            waiting = sum(r.status == "input_required" for r in self.runs)
            status = f"{len(self.runs)} agent run(s), {waiting} waiting for you."
        self._status = status
        self.query_one("#agent-runs-status", Static).update(Text(status))

    @staticmethod
    def _cells(run: AgentRun, now: float) -> tuple[Text, ...]:
        status = display_status(run, now)
        return (
            Text(short_id(run.run_id)),
            Text(run.agent),
            Text(status, style=AGENT_STATUS_STYLES.get(status, "")),
            Text(str(run.turns), justify="right"),
            Text(short_id(run.parent_run_id) if run.parent_run_id else "-"),
            Text(when(run.updated_at)),
        )

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
        for result in calls:
            tools.add_row(
                Text(result.tool),
                Text("unknown" if is_outcome_unknown(result.result) else result.status),
                Text(str(result.attempts), justify="right"),
                Text(str(result.reused), justify="right"),
                key=result.tool_key,
            )
        tools.display = bool(calls)

    # -- the selected run ------------------------------------------------------

    @property
    def selected_id(self) -> str | None:
        table = self.table
        if not self.runs or not table.is_valid_row_index(table.cursor_row):
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return row_key.value

    def action_open_run(self) -> None:
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
            self.flowdesk.require_engine()
            return
        self.app.push_screen(AskScreen(), self._asked)

    def _asked(self, question: str | None) -> None:
        if not question:
            return
        self._begin_stream(question)
        self._stream(None, question)

    def action_resume(self) -> None:
        """Resume the selected agent run here, its answer streamed like ``a``'s."""
        run_id = self.selected_id
        if run_id is None:
            self.flowdesk.say("No agent run selected.", "warning")
        else:
            self.resume_run(run_id)

    def resume_run(self, run_id: str) -> None:
        """Resume agent run ``run_id`` (``Agent.resume_stream``) when this app
        can: a run of :attr:`ASK_AGENT` that is not finished, not waiting for
        a person and not being driven by another process. Otherwise say why
        and what to do instead."""
        if self.flowdesk.services is None:
            self.flowdesk.require_engine()
            return
        try:
            run = _agent_store(self.flowdesk).get(run_id)
            used_tools = bool(_agent_store(self.flowdesk).tool_results(run_id))
        except Exception as exc:  # never a traceback in the user's face
            self.flowdesk.say(_failure(exc), "error")
            return
        rid = short_id(run_id)
        problem = None
        if run.status == "done":
            problem = f"Agent run {rid} is done; its answer is shown with enter."
        elif run.status == "input_required":
            problem = f"Agent run {rid} waits for an answer: press i (the inbox) to answer it."
        elif run.status in AGENT_TERMINAL:
            problem = f"Agent run {rid} is {run.status}; it cannot be resumed."
        elif run.agent != self.ASK_AGENT or used_tools:
            problem = (
                f"Agent run {rid} uses tools set up on the command line; resume it "
                f"with `{self.flowdesk.hints.cmd(f'resume {run_id}')}`."
            )
        if problem is not None:
            self.flowdesk.say(problem, "warning")
            return
        self.flowdesk.say(f"Resuming agent run {rid}…")
        self._begin_stream(question_of(run) or run.input)
        self._stream(run_id, None)

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
            events = agent.resume_stream(run_id) if run_id else agent.stream(question or "")
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
        except Exception as exc:  # never a traceback in the user's face
            self.post_message(AnswerFinished(None, _failure(exc)))

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
