"""Answer a waiting run: its pending waits, with deadlines, and an answer field.

Only ``input`` waits (a question to a person) are answered here; for signal,
event and timer waits the screen says what the run waits for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

from rich.cells import cell_len
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, DataTable, Input, Label, Static

from desktop_app.app.format import countdown, json_text, short_id, wait_target
from desktop_app.app.host import Host, host
from desktop_app.app.messages import AnswerAccepted, AnswerRefused, WaitsLoaded
from desktop_app.app.previews import PREVIEWS, Preview
from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer
from desktop_app.app.widgets.cells import update_fitting
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.app.widgets.run_summary import damaged_keys
from desktop_app.app.widgets.run_tables import short_wait_id
from desktop_app.cli.output import Hints
from desktop_app.cli.waits import answer_choices
from desktop_app.errors import CheckpointDecodeError, FlowdeskError, UnknownFlowError
from desktop_app.flow import CompiledFlow
from desktop_app.flow.clock import reading
from desktop_app.store.protocol import RunRecord, Wait
from desktop_app.textsafe import shell_quote

#: Seconds between updates of the deadline countdowns.
TICK_S = 1.0
#: What the Yes and No buttons answer (the words the inbox's y and n send).
YES = "yes"
NO = "no"
#: what a yes/no question's answer field takes for yes and no besides the words
SHORT_ANSWERS = {"y": YES, "n": NO}


#: cells a wrapping preview column keeps however narrow the dialog
WRAP_MIN = 12


def wrap_widths(preview: Preview, room: int) -> list[int | None]:
    """Column widths for ``preview`` in ``room`` cells: ``None`` (fit the
    content) for each column but ``preview.wrap``, which gets what the others
    leave (each column has one cell of padding per side, and a vertical
    scrollbar takes two). When that would leave it less than its content
    and the ``preview.shrink`` columns are wider than their share, they wrap
    too: the room left is shared so that every column stays on screen
    (a column whose content fits its share keeps its content's width; none
    gets less than :data:`WRAP_MIN` cells)."""
    widths: list[int | None] = [None] * len(preview.columns)
    if preview.wrap is None:
        return widths
    natural = [
        max([cell_len(label), *(cell_len(r[i]) for r in preview.rows)])
        for i, label in enumerate(preview.columns)
    ]
    flexible = [preview.wrap, *(i for i in preview.shrink if i != preview.wrap)]
    fixed = sum(natural[i] + 2 for i in range(len(natural)) if i not in flexible)
    left = room - fixed - 2 - 2 * len(flexible)  # the scrollbar, their padding
    if sum(natural[i] for i in flexible) <= left or len(flexible) == 1:
        # the flexible columns fit whole: the wrapping one takes what is left
        shrinks = sum(natural[i] + 2 for i in flexible[1:])
        widths[preview.wrap] = max(20, room - fixed - shrinks - 2 - 2)
        return widths
    # water-filling: a column narrower than its share keeps its width
    todo = sorted(flexible, key=lambda i: natural[i])
    while todo:
        share = left // len(todo)
        i = todo[0]
        if natural[i] > share:
            break
        widths[i] = max(WRAP_MIN, natural[i])
        left -= natural[i]
        todo.pop(0)
    for n, i in enumerate(todo):
        share = left // (len(todo) - n)
        widths[i] = max(WRAP_MIN, share)
        left -= share
    return widths


class PreviewLoaded(Message):
    """The flow's preview of the question, read in a worker."""

    def __init__(self, preview: Preview) -> None:
        super().__init__()
        self.preview = preview


def how_to_deliver(hints: Hints, wait: Wait) -> str:
    """What unblocks a wait that is not a question (a signal's command with
    the app's database and scope, quoted for a shell)."""
    if wait.kind == "signal":
        name, key = shell_quote(wait.name or ""), shell_quote(wait.key or "")
        return f"Send it with: {hints.cmd(f'signal {name} {key}')}"
    if wait.kind == "event":
        return f"It goes on when an event {wait.name} is published."
    return "It goes on by itself when the timer is due."


def register_advice(verb: str) -> str:
    """What makes a run's flow known to the app, so that it can ``verb``
    (``answer``, ``resume``) the run."""
    return (
        "Set FLOWDESK_FLOWS (the flows setting) to the module attribute that defines its flow "
        f"and relaunch the app, or {verb} it where its flow is registered."
    )


def unanswerable_here(run_id: str, exc: UnknownFlowError) -> str:
    """What the answer dialog says as it opens on run ``run_id`` whose flow
    the app does not register (``exc``, from the engine): no answer can be
    sent from here, and what makes the flow known."""
    return f"Run {short_id(run_id)} cannot be answered here: {exc}. {register_advice('answer')}"


#: rows of the answer dialog that are not its scrolling body: border and
#: padding (4), the buttons' margin and height (4), the footer (1)
FRAME_ROWS = 9


class AnswerScreen(ModalScreen[tuple[str, str] | None]):
    """The pending waits of one waiting run; answers its input waits.
    Dismisses with ``(run_id, wait_id)`` of the question it answered, or
    ``None`` when closed without an answer."""

    BINDINGS = [Binding("escape", "close", "Close"), HELP_BINDING]

    COLUMNS = (
        ("wait", "Wait"),
        ("kind", "Kind"),
        ("target", "Waits for"),
        ("deadline", "Deadline"),
    )

    def __init__(
        self, run: RunRecord, on_sending: Callable[[tuple[str, str]], None] | None = None
    ) -> None:
        super().__init__()
        self.run = run
        #: told ``(run_id, wait_id)`` before an answer is sent: the inbox then
        #: knows the question leaves because it was answered here, even when
        #: its reload sees it gone before this dialog is dismissed
        self.on_sending = on_sending
        self.waits: list[Wait] = []
        self.sending = False
        self._error = ""
        #: the wait an answer is being sent to, and the last wait an answer
        #: to was refused (whose Yes never takes focus again)
        self._sent_wait: str | None = None
        self._refused_wait: str | None = None
        self.preview: Preview | None = None
        #: the only answers some waits take, by wait id (their ``choices``)
        self.choices: dict[str, list[str]] = {}
        #: why the last read of the waits failed (``None``: it did not)
        self.read_error: str | None = None
        #: why no answer can be sent from here: the run's flow is not
        #: registered in the app (``None``: it is, or the database is not open)
        self.unregistered: str | None = None

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    def compose(self) -> ComposeResult:
        run = self.run
        # what the run asks scrolls on a short terminal; Yes, No, Send and
        # Close stay below it, on screen at any size
        with Vertical(id="dialog"):
            with VerticalScroll(id="body"):
                yield Label(self._title(run.status), id="title")
                yield RowTable(id="waits")
                yield Static("Reading what it waits for…", id="prompt")
                yield Static("", id="preview-title")
                yield RowTable(id="preview")
                yield Input(
                    placeholder="Type the answer; enter sends it",
                    id="answer",
                    disabled=True,
                    select_on_focus=False,  # a key typed on a button lands here (on_key)
                )
                yield Checkbox("Send as JSON (true, 3, [1, 2], {...})", id="as-json", compact=True)
                yield Static("", id="answer-error")
            with Horizontal(id="buttons"):
                yield Button("Yes", variant="success", id="answer-yes", disabled=True)
                yield Button("No", variant="error", id="answer-no", disabled=True)
                yield Button("Send", variant="primary", id="send", disabled=True)
                send_signal = Button("Send signal…", variant="primary", id="send-signal")
                send_signal.display = False  # shown for a signal wait
                yield send_signal
                yield Button("Close", id="close")
        yield Footer(show_command_palette=False)

    def _title(self, status: str) -> Text:
        """The dialog's first line: the run and its status as last read."""
        run = self.run
        return Text.assemble(
            ("Run ", "bold"),
            short_id(run.run_id),
            (" (", ""),
            run.flow_name,
            (f") is {status}", "bold"),
        )

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        """What the run asks takes what the terminal's height leaves beside
        the dialog's frame, its buttons and the footer (it scrolls when that
        is less than it needs): Send and Close are always on screen."""
        self.query_one("#body").styles.max_height = max(3, height - FRAME_ROWS)

    def on_mount(self) -> None:
        self.unregistered = self._unregistered()
        self._fit(self.app.size.height)
        self.flowdesk.plans_shown.add(self.run.run_id)  # its plan is on screen here
        table = self.query_one("#waits", DataTable)
        for key, label in self.COLUMNS:
            table.add_column(label, key=key)
        self.query_one("#preview", DataTable).display = False
        self.set_interval(TICK_S, self._tick)
        self.load()
        self.load_preview()

    @work(thread=True, exclusive=True, group="preview", name="read preview")
    def load_preview(self) -> None:
        """The flow's preview of its question (what a yes will do), if it has one."""
        engine = self.flowdesk.engine
        build = PREVIEWS.get(self.run.flow_name)
        if engine is None or build is None:
            return
        try:
            preview = build(engine.store, self.run.run_id)
        except Exception as exc:  # the preview is a help, never a blocker
            preview = Preview(f"No preview: {type(exc).__name__}: {exc}", ())
        self.post_message(PreviewLoaded(preview))

    def on_preview_loaded(self, message: PreviewLoaded) -> None:
        self.preview = message.preview
        table = self.query_one("#preview", DataTable)
        table.clear(columns=True)
        preview = message.preview
        widths = wrap_widths(preview, self.query_one("#body").content_size.width)
        for column, width in zip(preview.columns, widths, strict=True):
            table.add_column(column, width=width)
        for row in preview.rows:  # height None: a wrapped cell takes the lines it needs
            table.add_row(*(Text(c) for c in row), height=None if preview.wrap is not None else 1)
        table.display = bool(message.preview.rows)
        self.query_one("#preview-title", Static).update(Text(message.preview.title, style="bold"))

    # -- reading the waits (in a worker: the engine's store may be busy) --

    @work(thread=True, exclusive=True, group="waits", name="read waits")
    def load(self) -> None:
        # the UI's store: on PostgreSQL it waits seconds, not the pool's 30 s
        # per try, for a server that cannot be reached (the dialog said
        # "Reading what it waits for…" for minutes during an outage)
        store = self.flowdesk.reader
        if store is None:
            self.post_message(WaitsLoaded([], "The database is not open."))
            return
        try:
            latest = store.latest(self.run.run_id)
        except CheckpointDecodeError as exc:  # damaged: say what works instead
            keys = damaged_keys(exc, ended=False)  # it is waiting
            self.post_message(
                WaitsLoaded([], f"{exc} Nothing can be answered: press Escape, then {keys}.")
            )
        except FlowdeskError as exc:
            self.post_message(WaitsLoaded([], str(exc)))
        except Exception as exc:  # never a traceback in the user's face
            self.post_message(WaitsLoaded([], f"{type(exc).__name__}: {exc}"))
        else:
            choices = latest.meta.get("choices") or {}
            self.post_message(
                WaitsLoaded(list(latest.waits), choices=dict(choices), status=latest.status)
            )

    def on_waits_loaded(self, message: WaitsLoaded) -> None:
        self.waits = message.waits
        self.choices = message.choices
        self.read_error = message.error or None
        table = self.query_one("#waits", DataTable)
        keep = self.selected_wait_id
        table.clear()
        now = self._now()
        for w in self.waits:
            shown = short_wait_id(w.wait_id)
            cells = (shown, w.kind, wait_target(w), countdown(w.deadline_at, now))
            table.add_row(*(Text(c) for c in cells), key=w.wait_id)
        if message.status is not None:  # e.g. answered elsewhere meanwhile: it went on
            self.query_one("#title", Label).update(self._title(message.status))
        if message.error:
            self._show_error(message.error)
        ids = [w.wait_id for w in self.waits]
        first_input = next((i for i, w in enumerate(self.waits) if w.kind == "input"), 0)
        if self.waits:
            table.move_cursor(row=ids.index(keep) if keep in ids else first_input)
        self._selected_changed()

    def _unregistered(self) -> str | None:
        """Why no answer to this run can be sent from the app (its flow is
        not registered here, so the engine refuses any answer), or ``None``."""
        engine = self.flowdesk.engine
        if engine is None:
            return None
        try:
            engine.flow(self.run.flow_name)
        except UnknownFlowError as exc:
            return unanswerable_here(self.run.run_id, exc)
        return None

    def _now(self) -> float:
        engine = self.flowdesk.engine
        return reading(engine.clock) if engine is not None else 0.0

    def _tick(self) -> None:
        try:
            table = self.query_one("#waits", DataTable)
        except NoMatches:  # the screen is closing
            return
        now = self._now()
        for w in self.waits:
            text = countdown(w.deadline_at, now)
            if table.get_cell(w.wait_id, "deadline").plain != text:
                update_fitting(table, w.wait_id, "deadline", Text(text))

    # -- the selected wait ---------------------------------------------

    @property
    def selected(self) -> Wait | None:
        table = self.query_one("#waits", DataTable)
        if not self.waits or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.waits[table.cursor_row]

    @property
    def selected_wait_id(self) -> str | None:
        wait = self.selected
        return wait.wait_id if wait is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._selected_changed()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        answer = self.query_one("#answer", Input)
        if not answer.disabled:
            answer.focus()

    def _selected_changed(self) -> None:
        wait = self.selected
        answerable = wait is not None and wait.kind == "input"
        prompt = self.query_one("#prompt", Static)
        if wait is None and self.read_error is not None:  # not "nothing": unknown
            prompt.update(
                Text(
                    f"What this run waits for cannot be read now: {self.read_error.rstrip('.')}. "
                    "Nothing was answered."
                )
            )
        elif wait is None:
            note = self.run.error or "no question is pending"
            prompt.update(Text(f"This run waits for nothing that can be answered here ({note})."))
        elif answerable:
            question = json_text(wait.prompt) or "(no prompt)"
            parts: list[str | tuple[str, str]] = [("Question: ", "bold"), question]
            only = self.choices_of(wait)
            if only and set(only) != {YES, NO}:  # yes/no: the buttons say it
                parts += [("\nAnswers: ", "bold"), ", ".join(only)]
            if self.unregistered is not None:  # said now, not after an answer is typed
                parts += ["\n\n", (self.unregistered, "bold")]
            prompt.update(Text.assemble(*parts))
        else:
            prompt.update(
                Text.assemble(
                    ("Waits for ", "bold"),
                    wait_target(wait),
                    ". Only questions (input waits) are answered here. ",
                    "Send signal… below opens the signal form, filled in. "
                    if wait.kind == "signal"
                    else "",
                    how_to_deliver(self.flowdesk.hints, wait),
                )
            )
        answer = self.query_one("#answer", Input)
        # only a question shows the answer's field and buttons (a signal
        # wait's Yes and No were shown greyed, as if they could be pressed);
        # a signal wait offers the app's signal form instead, prefilled; a
        # question of a flow the app does not register shows none (no answer
        # typed here could be sent: the dialog says why and what to set)
        sendable = answerable and self.unregistered is None
        for control in (answer, *self.query("#as-json, #send, #answer-yes, #answer-no")):
            control.disabled = not sendable or self.sending
            control.display = sendable
        send_signal = self.query_one("#send-signal", Button)
        send_signal.display = wait is not None and wait.kind == "signal"
        if send_signal.display:  # enter opens the signal form
            send_signal.focus()
        elif answerable and not sendable:  # enter closes
            self.query_one("#close", Button).focus()
        if sendable and not self.sending:
            # a yes/no question: Yes has focus (enter approves); else the text
            # field. Never Yes once an answer to this wait was refused, or
            # while the field holds text: a typed "nope" refused, then enter
            # on the Yes that took focus, approved what the person declined.
            if (
                wait is not None
                and self.asks_yes_no(wait)
                and wait.wait_id != self._refused_wait
                and not answer.value
            ):
                self.query_one("#answer-yes", Button).focus()
            else:
                answer.focus()

    def on_key(self, event: events.Key) -> None:
        """A character typed while a button has focus goes into the answer
        field, which takes focus: a user who typed "no" with Yes focused
        (a yes/no question) saw nothing typed, and enter then pressed Yes.
        ``?`` stays the help key there."""
        answer = self.query_one("#answer", Input)
        character = event.character
        if (
            isinstance(self.focused, Button)
            and event.is_printable
            and character
            and character != "?"
            and not answer.disabled
        ):
            event.stop()
            event.prevent_default()
            answer.focus()
            answer.insert_text_at_cursor(character)

    def choices_of(self, wait: Wait) -> list[str]:
        """The only answers ``wait`` takes: its ``choices``
        (``ctx.interrupt(..., choices=[...])``), or the values of the
        ``Literal`` its await step's state field is (``Literal["yes", "no"]``,
        also inside ``Optional``/``Annotated``: the engine refuses any
        other); ``[]`` when it takes other answers."""
        explicit = self.choices.get(wait.wait_id)
        if explicit:
            return [str(c) for c in explicit]
        flow = self._flow()
        if flow is None:
            return []
        return answer_choices(flow, wait.step_id.split("/")[-1]) or []

    def _flow(self) -> CompiledFlow[Any] | None:
        engine = self.flowdesk.engine
        if engine is None:
            return None
        try:
            return engine.flow(self.run.flow_name)
        except FlowdeskError:
            return None

    def asks_yes_no(self, wait: Wait) -> bool:
        """Whether ``wait`` is a yes/no question: it takes only the words
        yes and no (its :meth:`choices_of`: ``choices=["yes", "no"]`` as a
        tidy asks, or a ``Literal["yes", "no"]`` field as the README's
        approval example fills), or its await step fills a state field
        whose type is ``bool`` (or ``bool | None``)."""
        if set(self.choices_of(wait)) == {YES, NO}:
            return True
        flow = self._flow()
        if flow is None:
            return False
        step = flow.steps.get(wait.step_id.split("/")[-1])
        into = getattr(step, "into", None)
        field = flow.state_type.model_fields.get(into) if isinstance(into, str) else None
        if field is None:
            return False
        annotation = field.annotation
        return annotation is bool or set(get_args(annotation)) in ({bool}, {bool, type(None)})

    # -- sending ---------------------------------------------------------

    @property
    def error_text(self) -> str:
        """The message shown under the answer (``""`` when none)."""
        return self._error

    def _show_error(self, message: str) -> None:
        self._error = message
        self.query_one("#answer-error", Static).update(Text(message))

    def on_input_changed(self, _event: Input.Changed) -> None:
        if self._error and not self.sending:
            self._show_error("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "send":
            self.submit()
        elif event.button.id == "answer-yes":
            self.send(YES)
        elif event.button.id == "answer-no":
            self.send(NO)
        elif event.button.id == "send-signal":
            # the app's signal form (x), prefilled from the run on screen
            self.dismiss(None)
            self.app.call_later(self.app.run_action, "send_signal")
        else:
            self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        """Send the answer to the selected input wait (in the app's worker)."""
        wait = self.selected
        if self.sending or wait is None or wait.kind != "input":
            return
        text = self.query_one("#answer", Input).value
        value: Any = text
        if self.query_one("#as-json", Checkbox).value:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                self._show_error(f"Not JSON: {exc}")
                return
        elif not text.strip():
            self._show_error("Type an answer first.")
            return
        elif self.asks_yes_no(wait):  # y and n, as the inbox's keys (and a second y typed here)
            value = SHORT_ANSWERS.get(text.strip().casefold(), text)
        self.send(value)

    def send(self, value: Any) -> None:
        """Send ``value`` to the selected input wait (in the app's worker)."""
        wait = self.selected
        if self.sending or wait is None or wait.kind != "input":
            return
        if self.unregistered is not None:  # the engine would refuse it (said as it opened)
            self._show_error(self.unregistered)
            return
        if self.on_sending is not None:
            self.on_sending((self.run.run_id, wait.wait_id))
        refused = self.flowdesk.controller.send_answer(self, self.run.run_id, wait.wait_id, value)
        if refused:
            self._refused_wait = wait.wait_id
            self._show_error(refused)
            self.query_one("#answer", Input).focus()
            return
        self._sent_wait = wait.wait_id
        self._set_sending(True)
        self._show_error("")
        self.query_one("#prompt", Static).update(Text(f"Sending the answer to {wait.wait_id}…"))

    def _set_sending(self, sending: bool) -> None:
        self.sending = sending
        self._selected_changed()

    def on_answer_accepted(self, message: AnswerAccepted) -> None:
        self.dismiss((message.run_id, message.wait_id))

    def on_answer_refused(self, message: AnswerRefused) -> None:
        self._refused_wait = self._sent_wait
        self._set_sending(False)
        self._show_error(message.error)
        self.load()  # the run may have moved on (answered or timed out elsewhere)
