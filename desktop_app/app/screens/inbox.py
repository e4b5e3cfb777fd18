"""The inbox: every run waiting for a person, with deadlines.

Flow runs waiting on a question (``input`` waits) are approved (``y``),
rejected (``n``) or answered (``enter``, the answer dialog) in place. An
agent run's ``ask_user`` question is answered with ``enter`` (a one-line
answer field), and the run continues as ``flowdesk ask --resume RUN --answer
TEXT`` continues it. An agent run waiting for a tool call to be approved
shows the exact tool and arguments (control characters visible) and the two
commands, yes and no; ``y``/``n`` approve or decline it in place. Both
continue the run in a worker with the tools it recorded, as launch recovery
resumes agent runs (:func:`~desktop_app.agent.recovery.resume_with_recorded_tools`):
a run of Flowdesk's own agent with the configured model (with none set up,
the inbox says so and shows the command that does it), a Pydantic AI
agent's run with its registered agent and that agent's own model.
LangGraph threads waiting on an ``interrupt()`` open their thread view on
``enter``, where the answer is typed.

What ``flowdesk db copy`` moved to PostgreSQL (a flow run, agent run or
thread of this file whose owner says ``moved to URL``) waits there, not
here: its row (after the others) says where it moved and the command that
shows it there (``flowdesk --db URL show R``), as ``flowdesk waiting`` lists
it; no key answers it here (the file would refuse the answer).

A key acts only on the question the person selected: the inbox follows it
by ``(run id, wait id)`` across refreshes, and when it leaves (answered
here, or elsewhere: a notice says so) no row is selected until an arrow
key picks one (:class:`InboxTable`). Every answer carries the wait id shown
(a flow run's wait, an agent run's
:func:`~desktop_app.agent.approvals.agent_wait_id`), so a run that asks
something else by then refuses it.

Reads and answers run in thread workers (the engine's store may be waiting
for another process's lock); results come back as messages.

However many runs wait, the inbox reads and shows the oldest
:data:`INBOX_LIMIT` flow questions (waiting runs read a page at a time,
each run's latest checkpoint once), so opening it and selecting a row cost
about the same with 20,000 waiting runs as with 300: with 20,300 it took
36 s to open and 16 s per ``space`` (every run read, every row redrawn),
now about 1 s and 0.2 s (``benchmarks/bench_app_inbox.py``).
The status line says when more wait; answered questions make room for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from rich.cells import cell_len
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from desktop_app.agent import drives
from desktop_app.app.format import countdown, json_text, local_when, short_id, time_left_bar
from desktop_app.app.host import Host, host
from desktop_app.app.messages import AnswerAccepted, AnswerRefused
from desktop_app.app.previews import PREVIEWS
from desktop_app.app.screens.answer import NO, YES, AnswerScreen
from desktop_app.app.screens.ask import AskScreen
from desktop_app.app.widgets.bars import Footer, Header
from desktop_app.app.widgets.cells import cut_words, keep_columns, update_fitting
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.cli.output import Hints, moved_waiting
from desktop_app.errors import FlowdeskError, moved_to
from desktop_app.flow.clock import reading
from desktop_app.integrations.langgraph.threads import Thread, list_threads
from desktop_app.store.protocol import CheckpointStore, RunRecord, Wait
from desktop_app.textsafe import visible_controls
from desktop_app.words import listing, plural

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from desktop_app.app.services import AgentStore
    from desktop_app.flow import Engine

#: Seconds between updates of the deadline countdowns.
TICK_S = 1.0
#: Cells the question column keeps however narrow the terminal (its text
#: shows in full under the table).
QUESTION_MIN = 20
#: The value ``y`` answers with.
APPROVE = YES
#: The value ``n`` answers with.
REJECT = NO
#: The most flow questions the inbox reads and shows (the oldest first).
INBOX_LIMIT = 200
#: Waiting runs read per query while the inbox looks for flow questions.
RUNS_PER_READ = 200


class _NoModel(Exception):
    """No chat model is set up (the inbox says so and shows the command)."""


#: what the How column says of an agent run's question (``ask_user``)
ANSWER_HOW = "enter answer"
#: what it says of a question of a run whose flow changed since it started
CHANGED_HOW = (
    "its flow changed since it started: answered once its code is restored "
    "(c in the runs list cancels it)"
)


def agent_outcome(hints: Hints, res: Any) -> tuple[str, SeverityLevel]:
    """``(text, severity)`` saying how an answered or resumed agent run went
    on, as ``flowdesk answer`` prints it (``cli.ask._finish``)."""
    rid = short_id(res.run_id)
    if res.status == "done":
        return f"Agent run {rid} done: {visible_controls(res.text)}", "information"
    if res.status == "input_required":
        return f"Agent run {rid} asks: {visible_controls(str(res.question))}", "information"
    error = visible_controls(str(res.error))
    if res.status == "canceled":  # canceled meanwhile (`flowdesk cancel`): not resumable
        return f"Agent run {rid} canceled: {error}", "warning"
    hint = hints.cmd(f"resume {res.run_id}")
    return f"Agent run {rid} {res.status}: {error}  ({hint})", "error"


def agent_hint(hints: Hints, run_id: str, wait_id: str | None) -> str:
    """The command that answers an agent run waiting for the user on
    ``wait_id`` (:func:`~desktop_app.agent.approvals.agent_wait_id`), with
    the app's database and scope (see :class:`~desktop_app.cli.output.Hints`):
    for a tool call waiting for approval the command that approves that
    call, then ``" · "`` and the one that declines it; for a question
    ``ask --resume RUN --answer TEXT``; each with ``--wait-id``, refused
    once the run waits on another."""
    from desktop_app.agent.approvals import APPROVAL_PREFIX, answer_commands, ask_command

    if wait_id is not None and wait_id.startswith(APPROVAL_PREFIX):
        yes, no = answer_commands(run_id, wait_id)
        return f"{hints.cmd(yes)} · {hints.cmd(no)}"
    return str(hints.cmd(ask_command(run_id, wait_id)))


def answer_in_inbox(approval: bool = False) -> str:
    """How an agent run waiting for the user is answered in the app (the
    agent runs screen says it as the inbox does it)."""
    if approval:
        return "press i (the inbox), then y to approve the call or n to decline it"
    return f"press i (the inbox), then {ANSWER_HOW.replace(' ', ' to ')} it"


@dataclass(frozen=True)
class InboxItem:
    """One thing a person is asked: a flow run's input wait or an agent's question.

    Attributes:
        key: the row key (the wait id, or ``agent:<run id>``).
        run_id: the flow or agent run.
        kind: ``flow`` or ``agent``.
        name: the flow or agent name.
        prompt: the question, as text.
        deadline_at: when the question times out (UTC epoch seconds), or ``None``.
        run: the flow run (``None`` for agent runs).
        wait: the flow run's wait (``None`` for agent runs).
        approval: an agent run waiting for a tool call's approval.
        questions: how many questions the run asks at once (a LangGraph
            thread whose parallel nodes each called ``interrupt()``: more
            than one, which only its program can answer, by interrupt id).
        wait_id: what is asked, as the person read it: the flow run's wait
            id, the agent run's :func:`~desktop_app.agent.approvals.agent_wait_id`,
            the LangGraph thread's checkpoint id. An answer carries it (a
            run that waits on something else by then refuses it), and a
            row whose ``(run_id, wait_id)`` changed is another question.
        moved_to: the database ``flowdesk db copy`` moved the run to
            (``postgresql://host/db``, no password): it waits there, and
            nothing here answers it; ``None`` for a run that waits here.
        changed: the flow run's flow is registered here at another version
            than the run started with (``Engine.version_refusal``): its
            question takes no answer until the flow's code is restored.
    """

    key: str
    run_id: str
    kind: str
    name: str
    prompt: str
    deadline_at: float | None
    run: RunRecord | None = None
    wait: Wait | None = None
    asked_at: float | None = None
    approval: bool = False
    wait_id: str | None = None
    questions: int = 1
    moved_to: str | None = None
    changed: bool = False

    @property
    def answerable(self) -> bool:
        """Whether an answer given here can be taken (not moved, not changed)."""
        return self.moved_to is None and not self.changed

    @property
    def identity(self) -> tuple[str, str | None]:
        """``(run_id, wait_id)``: the question itself, not the row it is in."""
        return self.run_id, self.wait_id

    @property
    def source(self) -> str:
        """Who asks: the flow's name, ``agent <name>`` or ``LangGraph thread``."""
        if self.kind == "flow":
            return self.name
        return "LangGraph thread" if self.kind == "langgraph" else f"agent {self.name}"

    @property
    def noun(self) -> str:
        """``run``, ``agent run`` or ``LangGraph thread`` (as ``flowdesk waiting`` names it)."""
        return {"flow": "run", "agent": "agent run"}.get(self.kind, "LangGraph thread")

    def moved_text(self, hints: Hints) -> str:
        """Where ``db copy`` moved it, with the command that shows it there
        (``hints``: the app's database and scope); ``""`` when it waits here."""
        if self.moved_to is None:
            return ""
        return moved_waiting(hints, self.moved_to, self.run_id)

    def how(self, hints: Hints) -> str:
        if self.moved_to is not None:
            return self.moved_text(hints)
        if self.changed:
            return CHANGED_HOW
        if self.kind == "flow":
            return "y approve · n reject · enter answer"
        if self.kind == "langgraph" and self.questions > 1:
            return f"{self.questions} questions at once: its program answers them (enter opens it)"
        if self.kind == "langgraph":
            return "enter answer (in the thread)"
        if not self.approval:
            return ANSWER_HOW
        return agent_hint(hints, self.run_id, self.wait_id)


class InboxLoaded(Message):
    """The inbox's items, read in a worker (``error`` when a read failed;
    ``more``: flow questions past the first :data:`INBOX_LIMIT` may wait;
    ``unread``: every read failed, ``items`` is empty for that reason)."""

    def __init__(
        self,
        items: list[InboxItem],
        error: str | None = None,
        more: bool = False,
        unread: bool = False,
    ) -> None:
        super().__init__()
        self.items = items
        self.error = error
        self.more = more
        self.unread = unread  # no kind of question could be read


def _flow_items(
    store: CheckpointStore, errors: list[str], engine: Engine | None
) -> tuple[list[InboxItem], bool]:
    """The oldest :data:`INBOX_LIMIT` input waits of waiting flow runs, and
    whether waiting runs were left unread (they may ask more). Reads
    :data:`RUNS_PER_READ` waiting runs at a time (oldest first), and the
    latest checkpoint of each run read; a run gone or changed meanwhile is
    said in ``errors``, and a run a shifted page gives twice is listed once
    (a duplicate row key would stop the table). Raises what the store raises for the page reads."""
    items: list[InboxItem] = []
    offset = 0
    seen: set[str] = set()
    while True:
        runs = store.list_runs(statuses=("waiting",), limit=RUNS_PER_READ, offset=offset)
        for run in runs:
            if len(items) >= INBOX_LIMIT:
                return items, True
            if run.run_id in seen:  # the pages shifted (a run began waiting meanwhile)
                continue
            seen.add(run.run_id)
            try:
                waits = store.latest(run.run_id).waits
            except FlowdeskError as exc:  # gone or changed meanwhile
                errors.append(str(exc))
                continue
            items += [
                InboxItem(
                    key=w.wait_id,
                    run_id=run.run_id,
                    kind="flow",
                    name=run.flow_name,
                    prompt=json_text(w.prompt) or "(no prompt)",
                    deadline_at=w.deadline_at,
                    run=run,
                    wait=w,
                    asked_at=w.created_at,
                    wait_id=w.wait_id,
                    moved_to=moved_to(run.lease_owner),
                    changed=engine is not None and engine.version_refusal(run) is not None,
                )
                for w in waits
                if w.kind == "input"
            ]
        if len(runs) < RUNS_PER_READ:
            return items, False
        if len(items) >= INBOX_LIMIT:
            more = store.list_runs(statuses=("waiting",), limit=1, offset=offset + len(runs))
            return items, bool(more)
        offset += len(runs)


def read_inbox(app: Host) -> tuple[list[InboxItem], str | None, bool, bool]:
    """Flow input waits (the oldest :data:`INBOX_LIMIT`) then agent
    questions, oldest first (call in a worker); the read errors, said in
    one line, a cause shared by every kind of question once (``None``:
    none); whether more flow questions may wait; whether no kind of
    question could be read (then the items are none of what waits).
    Read through the UI's store: on PostgreSQL it waits seconds, not the
    pool's 30 s per try, for a server that cannot be reached (the inbox
    said "Reading the inbox…" for minutes during an outage)."""
    store = app.reader
    if store is None or app.services is None:
        return [], "The database is not open.", False, True
    agents = app.services.reader_agents
    items: list[InboxItem] = []
    errors: list[str] = []
    more = False

    def flow_items() -> list[InboxItem]:
        nonlocal more
        found, more = _flow_items(store, errors, app.engine)
        return found

    kinds: tuple[tuple[str, Callable[[], list[InboxItem]]], ...] = (
        ("flow questions", flow_items),
        ("agent questions", lambda: _agent_items(agents)),
        ("LangGraph questions", lambda: _thread_items(store)),
    )
    failed: list[tuple[str, str]] = []  # (what, why) of each kind not read
    for what, read in kinds:
        try:
            items += read()
        except Exception as exc:  # never a traceback in the user's face
            failed.append((what, _why(exc)))
    if len({why for _, why in failed}) == 1:  # one cause (a server away): said once
        errors.append(_sentence(listing([w for w, _ in failed]), failed[0][1]))
    else:
        errors += [_sentence(what, why) for what, why in failed]
    # what db copy moved waits there: after what waits here (stable order)
    items.sort(key=lambda i: i.moved_to is not None)
    return items, " ".join(errors) or None, more, len(failed) == len(kinds)


def _sentence(what: str, why: str) -> str:
    """``what: why`` as a sentence (its first letter upper-case)."""
    return f"{what[0].upper()}{what[1:]}: {why}"


def _why(exc: Exception) -> str:
    """A read's failure as the inbox says it: Flowdesk's message, or the
    exception's type and text (never a traceback)."""
    said = str(exc) if isinstance(exc, FlowdeskError) else f"{type(exc).__name__}: {exc}"
    return said if said.endswith(".") else f"{said}."


def waiting_threads(store: CheckpointStore) -> list[Thread]:
    """LangGraph threads waiting on an ``interrupt()`` (the inbox's rows, and
    what the runs screen's banner counts)."""
    return list_threads(store, store.scope, statuses=["waiting"])


def _thread_items(store: CheckpointStore) -> list[InboxItem]:
    """LangGraph threads waiting on an ``interrupt()``."""
    return [
        InboxItem(
            key=f"langgraph:{t.thread_id}",
            run_id=t.thread_id,
            kind="langgraph",
            name="graph",
            prompt="; ".join(json_text(v) for v in t.interrupts) or "(no question)",
            deadline_at=None,
            asked_at=t.updated_at,
            wait_id=t.wait_id,
            questions=max(1, len(t.interrupts)),
            moved_to=moved_to(t.owner),
        )
        for t in waiting_threads(store)
    ]


def _agent_items(agents: AgentStore) -> list[InboxItem]:
    out = []
    from desktop_app.agent.approvals import agent_wait_id, pending_approval

    for run in agents.list(statuses=["input_required"]):
        request = pending_approval(run.pending_call)
        arguments = (run.pending_call or {}).get("arguments", {})
        question = arguments.get("question") if isinstance(arguments, dict) else None
        prompt = request.question() if request else json_text(question) or "(no question)"
        out.append(
            InboxItem(
                key=f"agent:{run.run_id}",
                run_id=run.run_id,
                kind="agent",
                name=run.agent,
                prompt=prompt,
                deadline_at=run.deadline_at,
                asked_at=run.updated_at,
                approval=request is not None,
                wait_id=agent_wait_id(run.pending_call),
                moved_to=moved_to(run.lease_owner),
            )
        )
    return out


class AgentAnswered(Message):
    """An agent run answered from the inbox went on: ``text`` says how
    (``severity`` as for a notice)."""

    def __init__(self, run_id: str, text: str, severity: str = "information") -> None:
        super().__init__()
        self.run_id = run_id
        self.text = text
        self.severity = severity


class InboxTable(RowTable):
    """The inbox's rows. When the question the person had selected leaves
    the inbox (answered here or elsewhere), the screen hides the cursor: no
    row is selected, so ``y``/``n``/``enter`` answer nothing until the person
    picks a row again. The first cursor key (or a click) then shows the
    cursor without acting: ``down`` on the question that came after the one
    that left (:attr:`gap`), ``up`` on the one before it, ``home``/``end``/
    page keys as usual, a click on the row clicked."""

    #: the row index the question that left was at
    gap = 0

    class NothingSelected(Message):
        """``enter`` was pressed while no row is selected."""

    def action_select_cursor(self) -> None:
        if self.show_cursor:
            super().action_select_cursor()
        else:  # the screen says why nothing happens
            self.post_message(self.NothingSelected())

    def _pick(self, row: int) -> None:
        self.show_cursor = True
        self.move_cursor(row=max(0, min(row, self.row_count - 1)))

    def action_cursor_down(self) -> None:
        if self.show_cursor:
            super().action_cursor_down()
        else:
            self._pick(self.gap)

    def action_cursor_up(self) -> None:
        if self.show_cursor:
            super().action_cursor_up()
        else:
            self._pick(self.gap - 1)

    def action_page_down(self) -> None:
        self.show_cursor = True
        super().action_page_down()

    def action_page_up(self) -> None:
        self.show_cursor = True
        super().action_page_up()

    def action_scroll_top(self) -> None:
        self.show_cursor = True
        super().action_scroll_top()

    def action_scroll_bottom(self) -> None:
        self.show_cursor = True
        super().action_scroll_bottom()

    async def _on_click(self, event: events.Click) -> None:
        row = event.style.meta.get("row")
        if not self.show_cursor and isinstance(row, int) and row >= 0:
            self._pick(row)  # selects the row; a second click acts on it
            return
        await super()._on_click(event)


class InboxScreen(Screen[None]):
    """Every run waiting for a person; approve, reject or answer in place."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("y", "approve", "Approve"),
        Binding("space", "mark", "Select", show=False),
        Binding("n", "reject", "Reject"),
        Binding("enter", "answer", "Answer", show=True),
        Binding("q", "app.quit", "Quit"),
    ]

    COLUMNS = (
        ("run", "Run"),
        ("from", "From"),
        ("question", "Question"),
        ("deadline", "Deadline"),
        ("left", "Time left"),
        ("how", "How"),
    )

    #: every column's key, in order
    ALL_KEYS = tuple(key for key, _ in COLUMNS)
    #: columns dropped whole on a narrow terminal, least valuable first
    DROP_ORDER = ("how", "left", "from")

    def __init__(self) -> None:
        super().__init__()
        #: the column keys shown, in order
        self.shown_columns: list[str] = []
        #: rows selected with space (their keys): y and n answer them all
        self.marked: set[str] = set()
        self.items: list[InboxItem] = []
        self.loaded = False
        self._data_version: int | None = None
        self._status = ""
        #: agent runs whose approval is being answered (a second y waits)
        self.answering: set[str] = set()
        #: the selected question that left the inbox (no row is selected
        #: since; ``None`` once the person picks a row again)
        self.gone: InboxItem | None = None
        #: ``(run_id, wait_id)`` of the questions answered from this screen
        self._sent: set[tuple[str, str | None]] = set()

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one("#inbox", DataTable)

    @property
    def status_text(self) -> str:
        """The line above the table (how many questions wait, or a read error)."""
        return self._status

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Reading the inbox…", id="inbox-status")
        yield InboxTable(id="inbox")
        yield Static("", id="inbox-question")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.sub_title = "Inbox"
        table = self.table
        for key, label in self.COLUMNS:
            table.add_column(label, key=key)
        self.shown_columns = [key for key, _ in self.COLUMNS]
        table.focus()
        self.set_interval(TICK_S, self._tick)
        self.set_interval(self.flowdesk.POLL_S, self._poll)
        self.reload()

    # -- reading -----------------------------------------------------------

    def _poll(self) -> None:
        """Reload when anyone committed since the last look."""
        version = self.flowdesk.store_version()
        if version is not None and version != self._data_version:
            self._data_version = version
            self.reload()

    @work(thread=True, exclusive=True, group="inbox", name="read inbox")
    def reload(self) -> None:
        items, error, more, unread = read_inbox(self.flowdesk)
        self.post_message(InboxLoaded(items, error, more, unread))

    def on_inbox_loaded(self, message: InboxLoaded) -> None:
        before = self.selected
        # nothing could be read (a server away): the list stays as last read,
        # never "nothing is waiting"
        kept = message.unread and self.loaded
        if not kept:
            self.items = message.items
        self.loaded = True
        keys = {i.key for i in self.items}
        self.marked &= keys  # a selected (space) question answered elsewhere is not answered again
        self._fill(before)
        self.refresh_bindings()  # y / n / enter only while something waits
        self._show_question()
        here = [i for i in self.items if i.answerable]
        asking = sum(i.kind == "flow" for i in here)
        agents = sum(i.kind == "agent" for i in here)
        graphs = sum(i.questions for i in here if i.kind == "langgraph")
        failed = None if kept else message.error  # of the items listed
        if not here and message.unread and not kept:
            status = "Could not read the inbox."
        elif not here and failed:
            status = "Nothing is waiting for you in what could be read."
        elif not here:
            status = "Nothing is waiting for you."
        else:
            kinds = (
                (asking, "flow question"),
                (agents, "agent question"),
                (graphs, "LangGraph question"),
            )
            listed = listing([plural(n, one) for n, one in kinds if n])
            one = asking + agents + graphs == 1
            status = f"{listed} {'waits' if one else 'wait'} for you."
            if message.more:  # the first INBOX_LIMIT flow questions only
                status = (
                    f"{listed} wait for you, and more: the oldest {asking:,} flow questions "
                    "are shown (answering them shows the next)."
                )
        changed = [i for i in self.items if i.moved_to is None and i.changed]
        if changed:
            one = len(changed) == 1
            status += (
                f" {plural(len(changed), 'more waits', 'more wait')} under a flow that changed "
                f"since {'it' if one else 'they'} started: answered once its code is restored "
                f"(c in the runs list cancels {'it' if one else 'one'})."
            )
        gone = [i for i in self.items if i.moved_to is not None]
        if gone:
            where = ", ".join(sorted({str(i.moved_to) for i in gone}))
            one = len(gone) == 1
            status += (
                f" {plural(len(gone), 'more was', 'more were')} waiting when flowdesk db copy "
                f"moved {'it' if one else 'them'} to {where}: answered there, not here "
                f"(select {'it' if one else 'one'}: the question says how to see it there)."
            )
        if kept:
            status = f"As last read: {status} Could not read it again: {message.error}"
        elif message.error and not message.unread:
            status += f" Could not read everything: {message.error}"
        elif message.error:
            status += f" {message.error}"
        if message.error and self.flowdesk.away is None:  # else the outage was said once
            self.flowdesk.say(message.error, "error")
        self._status = status
        self._show_status()

    def _show_status(self) -> None:
        status = self._status
        if self.items and not self.table.show_cursor:
            status += " No question is selected: ↑ or ↓ picks one."
        self.query_one("#inbox-status", Static).update(Text(status))

    def on_resize(self, event: events.Resize) -> None:
        if self.loaded:
            self._fill()

    def _fill(self, before: InboxItem | None = None) -> None:
        """The rows, in the columns that fit the terminal's width: the
        question takes what the others leave (cut at a word, in full below
        the table); on a narrow terminal How, then Time left, then From are
        dropped whole, so Deadline is never pushed off screen.

        The cursor stays on the question selected before (``before``, else
        the one selected now), found by ``(run id, wait id)``, wherever its
        row went. When that question left the inbox (or its run now asks
        something else), no row is selected (:meth:`_lose`): the cursor never
        lands on another question that ``y`` would answer."""
        table = cast(InboxTable, self.table)
        before = before if before is not None else self.selected
        was_at = table.cursor_row
        now = self._now()
        rows = [
            (item, dict(zip(self.ALL_KEYS, self._cells(item, now), strict=True)))
            for item in self.items
        ]
        labels = dict(self.COLUMNS)
        widths = {
            key: max([cell_len(labels[key]), *(cell_len(cells[key]) for _, cells in rows)])
            for key in self.ALL_KEYS
        }
        kept, question = keep_columns(
            widths, self.app.size.width, self.DROP_ORDER, elastic="question", floor=QUESTION_MIN
        )
        table.clear(columns=kept != self.shown_columns)
        if kept != self.shown_columns:
            for key in kept:
                table.add_column(labels[key], key=key)
            self.shown_columns = kept
        for item, cells in rows:
            cells["question"] = cut_words(cells["question"], question)
            table.add_row(*(Text(cells[k]) for k in kept), key=item.key)
        identities = [i.identity for i in self.items]
        if before is not None and before.identity in identities:
            table.move_cursor(row=identities.index(before.identity))
        elif before is not None:
            self._lose(before, was_at)
        elif not table.show_cursor:
            table.move_cursor(row=min(table.gap, max(0, table.row_count - 1)))

    def _lose(self, item: InboxItem, row: int) -> None:
        """The selected question ``item`` (at row index ``row``) left the
        inbox: select nothing, and say so unless it was answered here."""
        table = cast(InboxTable, self.table)
        self.gone = item
        table.gap = row
        table.show_cursor = False
        if self.items:
            table.move_cursor(row=min(row, table.row_count - 1))
        if item.identity not in self._sent:
            self.flowdesk.say(
                f"{self._gone_text(item)}; no question is selected: ↑ or ↓ picks one.",
                "warning",
            )
        self._show_status()

    def _gone_text(self, item: InboxItem) -> str:
        """Why ``item`` left the inbox, as far as the store and the clock
        tell: its run timed out or was canceled, its deadline passed (a flow
        whose timeout leads on), or else someone answered it elsewhere."""
        who = "Run" if item.kind == "flow" else item.source.capitalize()
        head = f"{who} {short_id(item.run_id)}'s question"
        if item.kind == "flow":
            rid = item.run_id
            latest = self.flowdesk.read(lambda s: s.latest(rid), quiet=True)
            if latest is not None and latest.status == "timed_out":
                return f"{head} timed out"
            if latest is not None and latest.status == "canceled":
                return f"{head} is gone: the run was canceled"
        if item.deadline_at is not None and self._now() >= item.deadline_at:
            return f"{head} timed out (its deadline passed)"
        return f"{head} was answered elsewhere"

    def _cells(self, item: InboxItem, now: float) -> tuple[str, ...]:
        source = item.source
        mark = "● " if item.key in self.marked else ""
        return (
            mark + short_id(item.run_id),
            source,
            item.prompt,
            countdown(item.deadline_at, now),
            time_left_bar(item.asked_at, item.deadline_at, now),
            item.how(self.flowdesk.hints),
        )

    def _now(self) -> float:
        engine = self.flowdesk.engine
        return reading(engine.clock) if engine is not None else time.time()

    def _tick(self) -> None:
        try:
            table = self.table
        except NoMatches:  # the screen is closing
            return
        now = self._now()
        for item in self.items:
            text = countdown(item.deadline_at, now)
            if "deadline" not in self.shown_columns:
                break
            if table.get_cell(item.key, "deadline").plain != text:
                update_fitting(table, item.key, "deadline", Text(text))
            left = time_left_bar(item.asked_at, item.deadline_at, now)
            if "left" in self.shown_columns and table.get_cell(item.key, "left").plain != left:
                bar = Text(left, style=self._bar_style(item, now))
                update_fitting(table, item.key, "left", bar)

    @staticmethod
    def _bar_style(item: InboxItem, now: float) -> str:
        if item.deadline_at is None or item.asked_at is None:
            return ""
        span = item.deadline_at - item.asked_at
        left = (item.deadline_at - now) / span if span > 0 else 0
        return "red" if left < 0.1 else "yellow" if left < 0.5 else "green"

    def deadline_text(self, key: str) -> str:
        """The countdown shown for row ``key``."""
        return str(self.table.get_cell(key, "deadline").plain)

    # -- the selected item ---------------------------------------------------

    @property
    def selected(self) -> InboxItem | None:
        """The question under the cursor; ``None`` when no row is selected
        (the selected question left the inbox, :attr:`gone`) or none waits."""
        table = self.table
        if not self.items or not table.show_cursor:
            return None
        if not table.is_valid_row_index(table.cursor_row):
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return next((i for i in self.items if i.key == row_key.value), None)

    def _nothing_selected(self) -> None:
        """Say why a key that answers the selected question did nothing."""
        if not self.items:
            self.flowdesk.say("Nothing selected: nothing is waiting for you.", "warning")
            return
        why = "No question is selected"
        if self.gone is not None and self.gone.identity not in self._sent:
            why = f"{self._gone_text(self.gone)}; nothing was sent"
        elif self.gone is not None:
            why = f"{why} (you answered run {short_id(self.gone.run_id)}'s)"
        self.flowdesk.say(f"{why}: ↑ or ↓ picks a question, then press the key again.", "warning")

    def _refuse_here(self, item: InboxItem) -> bool:
        """Say why ``item`` takes no answer here and return ``True`` when
        ``db copy`` moved it (where, and the command that shows it there)
        or its flow changed since it started: nothing is sent."""
        if item.answerable:
            return False
        said = item.how(self.flowdesk.hints)  # where it moved, or that its flow changed
        who = f"{item.noun.capitalize()} {short_id(item.run_id)}"
        self.flowdesk.say(f"{who} {said}; nothing was sent.", "warning")
        return True

    def _selected_flow_item(self) -> InboxItem | None:
        item = self.selected
        if item is None:
            self._nothing_selected()
            return None
        if self._refuse_here(item):
            return None
        if item.kind == "langgraph":
            there = (
                f"it waits on {item.questions} questions at once, which its program answers "
                "by interrupt id; enter opens it"
                if item.questions > 1
                else "enter opens it; answer it there"
            )
            self.flowdesk.say(f"LangGraph thread {short_id(item.run_id)}: {there}.", "warning")
            return None
        if item.kind != "flow":
            how = (
                "waits for a tool call's approval: y approves it, n declines it"
                if item.approval
                else f"asks a question: {ANSWER_HOW}s it"
            )
            self.flowdesk.say(f"Agent run {short_id(item.run_id)} {how}.", "warning")
            return None
        return item

    # -- actions -------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``y``, ``n``, ``enter`` and ``space`` show (and work) only while
        something waits here: an empty inbox offered Approve and Reject, and
        so did one holding only what ``flowdesk db copy`` moved away (under
        "Nothing is waiting for you")."""
        if action in ("approve", "reject", "answer", "mark"):
            return any(i.answerable for i in self.items)
        return True

    def action_approve(self) -> None:
        self._send(APPROVE)

    def action_reject(self) -> None:
        self._send(REJECT)

    def action_mark(self) -> None:
        """Select or unselect the row (space): y and n then answer every selected one."""
        item = self._selected_flow_item()
        if item is None:
            return
        self.marked ^= {item.key}
        self._show_mark(item)
        n = len(self.marked)
        them = "it" if n == 1 else "them all"
        self.flowdesk.say(f"{n} selected: y approves {them}, n rejects {them}.")

    def _show_mark(self, item: InboxItem) -> None:
        """Redraw only ``item``'s run cell (``●`` when selected with space):
        redrawing every row took seconds with thousands of questions."""
        if "run" in self.shown_columns:
            cell = self._cells(item, self._now())[0]
            update_fitting(self.table, item.key, "run", Text(cell))

    def _targets(self) -> list[InboxItem]:
        """The selected rows (space), else the row under the cursor."""
        marked = [
            i for i in self.items if i.key in self.marked and i.kind == "flow" and i.answerable
        ]
        if marked:
            return marked
        item = self._selected_flow_item()
        return [] if item is None else [item]

    def _send(self, value: Any) -> None:
        item = self.selected
        flow_marked = any(i.key in self.marked and i.kind == "flow" for i in self.items)
        if item is not None and not item.answerable and not flow_marked:
            self._refuse_here(item)
            return
        if item is not None and item.approval and not flow_marked:
            self._answer_approval(item, "yes" if value == APPROVE else "no")
            return
        targets = self._targets()
        if value == APPROVE:
            # a run's plan shows before its first approval (the answer dialog shows it)
            unseen = [
                i
                for i in targets
                if i.name in PREVIEWS and i.run_id not in self.flowdesk.plans_shown
            ]
            if unseen and unseen[0].run is not None:
                self.flowdesk.say(
                    f"Run {short_id(unseen[0].run_id)}'s plan shows first: Yes approves it."
                )
                self.app.push_screen(
                    AnswerScreen(unseen[0].run, on_sending=self._sent.add), self._answered
                )
                return
        for item in targets:
            assert item.wait is not None
            # The app drives the answer in its worker and tells this screen how it
            # went (AnswerAccepted / AnswerRefused), as it does for the answer dialog.
            # The wait id is the one shown: a run that waits on another refuses it.
            refused = self.flowdesk.controller.send_answer(
                cast(AnswerScreen, self), item.run_id, item.wait.wait_id, value
            )
            if refused:
                self.flowdesk.say(refused, "error")
            else:
                self._sent.add(item.identity)
        self.marked.clear()

    # -- answering an agent run (a tool call's approval, or its question) -----

    def _answer_approval(self, item: InboxItem, answer: str) -> None:
        command = agent_hint(self.flowdesk.hints, item.run_id, item.wait_id).split(" · ")
        verb = "Approving" if answer == "yes" else "Declining"
        notice = f"{verb} agent run {short_id(item.run_id)}'s tool call…"
        self._answer_agent(item, answer, command[0 if answer == "yes" else 1], notice)

    def _answer_question(self, item: InboxItem) -> None:
        """The answer field for an agent run's ``ask_user`` question (enter)."""
        from desktop_app.agent.approvals import ask_command

        if self.flowdesk.services is None:
            self.flowdesk.controller.require_engine()
            return

        def answered(text: str | None) -> None:
            if text:
                rest = ask_command(item.run_id, item.wait_id, text)
                notice = f"Answering agent run {short_id(item.run_id)}…"
                self._answer_agent(item, text, self.flowdesk.hints.cmd(rest), notice)

        title = f"Agent run {short_id(item.run_id)} asks: {item.prompt}"
        self.app.push_screen(AskScreen(title, "your answer; enter sends it"), answered)

    def _answer_agent(self, item: InboxItem, answer: str, by_hand: str, notice: str) -> None:
        """Continue agent run ``item`` with ``answer`` in a worker (``by_hand``:
        the command that does the same, shown when the app cannot; ``notice``
        said meanwhile)."""
        rid = short_id(item.run_id)
        if self.flowdesk.services is None:
            self.flowdesk.controller.require_engine()
            return
        if item.run_id in self.answering:
            self.flowdesk.say(f"Agent run {rid} is already being answered.", "warning")
            return
        self.answering.add(item.run_id)
        self._sent.add(item.identity)
        self.flowdesk.say(notice)
        self._drive_answer(item.run_id, answer, by_hand, item.wait_id)

    @work(thread=True, group="inbox-agent", name="answer an agent run")
    def _drive_answer(
        self, run_id: str, answer: str, by_hand: str, wait_id: str | None = None
    ) -> None:
        """``Agent.resume_input(run_id, answer, wait_id=wait_id)`` on this
        thread, with the tools the run recorded and the configured model, or
        a Pydantic AI agent's run with its registered agent and that agent's
        own model (no Flowdesk model needed, as ``flowdesk answer`` does); the
        outcome comes back as :class:`AgentAnswered`. ``wait_id``: the
        question the person answered; a run that waits on another by now
        (answered elsewhere) is not answered."""
        from desktop_app.agent.recovery import ToolSources, resume_with_recorded_tools

        rid = short_id(run_id)
        services = self.flowdesk.services
        assert services is not None
        store = services.services.agents
        if not services.engine.executes:  # PostgreSQL: the workers execute it
            self._hand_answer(run_id, answer, wait_id)
            return
        try:
            model = None
            if ToolSources.of_run(store, run_id).pydantic_ai is None:
                model = self.flowdesk.chat_model()
                if model is None:
                    raise _NoModel
            with drives.driving_thread():  # the app's quit waits for its call in flight
                res = resume_with_recorded_tools(
                    store, self.flowdesk.settings, model, store.get(run_id), answer, wait_id=wait_id
                )
        except _NoModel:
            text = (
                f"No model is set up (Settings, ctrl+s) to continue agent run {rid}; "
                f"answer it with `{by_hand}`"
            )
            self.post_message(AgentAnswered(run_id, text, "warning"))
            return
        except Exception as exc:  # never a traceback in the user's face
            why = str(exc) if isinstance(exc, FlowdeskError) else f"{type(exc).__name__}: {exc}"
            text = f"Agent run {rid} was not answered: {visible_controls(why)}"
            if _recorded(store, run_id, wait_id):  # before its tools or agent could start
                again = self.flowdesk.hints.cmd(f"resume {run_id}")
                text = (
                    f"Agent run {rid}: your answer is recorded, but the run cannot go on here: "
                    f"{visible_controls(why)}; it goes on with it at `{again}` (or a "
                    "`flowdesk agent` pass)"
                )
            self.post_message(AgentAnswered(run_id, text, "error"))
            return
        self.post_message(AgentAnswered(run_id, *agent_outcome(self.flowdesk.hints, res)))

    def _hand_answer(self, run_id: str, answer: str, wait_id: str | None) -> None:
        """Store the answer and hand the run to the workers (the app executes
        nothing on a database workers serve: no tool call, no model call
        here), then say so as :class:`AgentAnswered`."""
        from desktop_app.agent.recovery import hand_answer_to_workers

        services = self.flowdesk.services
        assert services is not None
        store, engine = services.services.agents, services.engine
        rid = short_id(run_id)
        try:
            hand_answer_to_workers(
                store,
                store.get(run_id),
                answer,
                owner=engine.owner,
                now=engine.clock.now(),
                wait_id=wait_id,
            )
        except Exception as exc:  # never a traceback in the user's face
            why = str(exc) if isinstance(exc, FlowdeskError) else f"{type(exc).__name__}: {exc}"
            text = f"Agent run {rid} was not answered: {visible_controls(why)}"
            self.post_message(AgentAnswered(run_id, text, "error"))
            return
        text = f"Agent run {rid} is answered and saved; a worker (flowdesk agent) executes it."
        self.post_message(AgentAnswered(run_id, text, "information"))

    def on_agent_answered(self, message: AgentAnswered) -> None:
        self.answering.discard(message.run_id)
        self.flowdesk.say(message.text, cast("SeverityLevel", message.severity))
        self.reload()

    def action_answer(self) -> None:
        item = self.selected
        if item is not None and self._refuse_here(item):
            return
        if item is not None and item.kind == "langgraph":
            self.flowdesk.controller.open_thread(item.run_id)
            return
        if item is not None and item.kind == "agent" and not item.approval:
            self._answer_question(item)
            return
        item = self._selected_flow_item()
        if item is None or item.run is None:
            return
        self.app.push_screen(AnswerScreen(item.run, on_sending=self._sent.add), self._answered)

    def _answered(self, answered: tuple[str, str] | None) -> None:
        """The answer dialog closed (``answered``: the question it answered,
        already in ``_sent`` through its ``on_sending``): read the inbox again."""
        self.reload()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if self.table.show_cursor and self.gone is not None:  # the person picked a row
            self.gone = None
            self._show_status()
        self._show_question()

    def _show_question(self) -> None:
        """The selected question in full, with its deadline in local time."""
        item = self.selected
        shown = self.query_one("#inbox-question", Static)
        if item is None:
            shown.update("")
            return
        due = f"  Deadline: {local_when(item.deadline_at)}" if item.deadline_at else ""
        source = item.source
        text = Text.assemble((f"{source} {short_id(item.run_id)} asks: ", "bold"), item.prompt, due)
        if item.moved_to is not None:  # in full, whatever the How column shows
            text.append(f"\n{item.noun.capitalize()} {item.moved_text(self.flowdesk.hints)}")
        elif item.changed:
            text.append(f"\nRun {short_id(item.run_id)}: {CHANGED_HOW}")
        elif "how" not in self.shown_columns:  # dropped on a narrow terminal: said here
            text.append(f"\n{item.how(self.flowdesk.hints)}", style="dim")
        shown.update(text)

    @property
    def question_text(self) -> str:
        """The full question shown under the table."""
        return str(self.query_one("#inbox-question", Static).render())

    def on_inbox_table_nothing_selected(self, event: InboxTable.NothingSelected) -> None:
        event.stop()
        self._nothing_selected()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # enter on the table (the table's own binding) or a click on a row
        event.stop()
        self.action_answer()

    def on_answer_accepted(self, _message: AnswerAccepted) -> None:
        self.reload()

    def on_answer_refused(self, message: AnswerRefused) -> None:
        self.flowdesk.say(message.error, "error")
        self.reload()


def _recorded(store: Any, run_id: str, wait_id: str | None) -> bool:
    """Whether an answer to agent run ``run_id`` was recorded although
    continuing it failed: it no longer waits on ``wait_id`` (or on anything)
    and is ``running`` (interrupted: its tools or its agent could not start).
    ``False`` when the run cannot be read."""
    from desktop_app.agent.approvals import agent_wait_id

    try:
        run = store.get(run_id)
    except Exception:  # unreadable: say only what failed
        return False
    if run.status != "running":
        return False
    return wait_id is None or agent_wait_id(run.pending_call) != wait_id
