"""One LangGraph thread: its checkpoints as a timeline, the state at each,
the diff between two, and its unanswered question.

The timeline lists the thread's root checkpoints oldest first (LangGraph's
step and source, the pending writes stored on each). The state panel shows
the channel values at the highlighted checkpoint (LangGraph's internal
``branch:``/``__`` channels left out); ``m`` marks a checkpoint, and while
one is marked the diff panel shows what changed from it to the highlighted
one, path by path (:func:`desktop_app.app.state_diff.diff_states`). A
waiting thread shows its question and an answer field (``a``); the answer
is stored as LangGraph's ``Command(resume=...)`` stores it
(:func:`desktop_app.integrations.langgraph.threads.store_answer`), and the
graph goes on when its program runs it again.

Decoding a checkpoint needs the ``langgraph`` extra; without it the screen
says so. Everything shown is plain text (never markup).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from desktop_app.app.format import when
from desktop_app.app.host import Host, host
from desktop_app.app.state_diff import change_text, diff_states, value_text
from desktop_app.app.widgets.bars import Footer, Header
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.cli.output import moved_hint
from desktop_app.errors import FlowdeskError, moved_to
from desktop_app.integrations.langgraph import threads
from desktop_app.runs_view import INTERRUPTED, display_status
from desktop_app.store.protocol import CheckpointStore

#: checkpoints shown, newest (a longer thread shows its latest ones)
MAX_CHECKPOINTS = 500


@dataclass(frozen=True)
class Point:
    """One checkpoint as the screen shows it."""

    checkpoint_id: str
    created_at: str
    step: Any
    source: Any
    writes: int
    state: dict[str, Any]


def jsonable(value: Any) -> Any:
    """A channel value as JSON-mode data (pydantic models such as LangChain
    messages by ``model_dump``; anything else unknown as its ``str``)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump())
    return str(value)


def load_points(store: CheckpointStore, thread_id: str) -> list[Point]:
    """The thread's root checkpoints, oldest first (at most :data:`MAX_CHECKPOINTS`).

    Raises:
        ImportError: the ``langgraph`` extra is not installed.
    """
    from desktop_app.integrations.langgraph.saver import FlowdeskSaver

    saver = FlowdeskSaver(store)
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    points = [
        Point(
            checkpoint_id=t.checkpoint["id"],
            created_at=t.checkpoint["ts"],
            step=t.metadata.get("step"),
            source=t.metadata.get("source"),
            writes=len(t.pending_writes or []),
            state={
                k: jsonable(v)
                for k, v in t.checkpoint["channel_values"].items()
                if not k.startswith(("branch:", "__"))
            },
        )
        for t in saver.list(config, limit=MAX_CHECKPOINTS)
    ]
    return points[::-1]


class ThreadScreen(Screen[None]):
    """A LangGraph thread's timeline, state, diffs and question."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("m", "mark", "Mark for diff"),
        Binding("a", "answer", "Answer"),
    ]

    DEFAULT_CSS = """
    ThreadScreen #timeline { height: 12; }
    ThreadScreen #panels { height: 1fr; }
    ThreadScreen #answer { display: none; }
    ThreadScreen.-waiting #answer { display: block; }
    """

    def __init__(self, thread_id: str) -> None:
        super().__init__()
        self.thread_id = thread_id
        self.points: list[Point] = []
        #: the checkpoint marked for a diff (``m``), if any
        self.marked: str | None = None
        self.thread: threads.Thread | None = None

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="thread-head")
        yield Input(placeholder="your answer (enter stores it)", id="answer")
        yield RowTable(id="timeline")
        with VerticalScroll(id="panels"):
            yield Static("", id="state")
            yield Static("", id="diff")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#timeline", DataTable)
        for label in ("#", "Checkpoint", "Time (UTC)", "Step", "Source", "Writes"):
            table.add_column(label, key=label)
        self.reload()
        table.focus()

    # -- reading -------------------------------------------------------------

    def reload(self) -> None:
        self.thread = self.flowdesk.read(
            lambda s: threads.get_thread(s, s.scope, self.thread_id), quiet=True
        )
        self._show_head()
        try:
            points = self.flowdesk.read(lambda s: load_points(s, self.thread_id))
        except ImportError:
            self.query_one("#state", Static).update(
                Text("Install flowdesk[langgraph] to see this thread's state.")
            )
            return
        self.points = points or []
        table = self.query_one("#timeline", DataTable)
        table.clear()
        for i, p in enumerate(self.points):
            table.add_row(
                Text(str(i + 1)),
                Text(p.checkpoint_id),
                Text(p.created_at[:19].replace("T", " ")),
                Text(str(p.step)),
                Text(str(p.source)),
                Text(str(p.writes)),
                key=p.checkpoint_id,
            )
        if self.points:
            table.move_cursor(row=len(self.points) - 1)
            self._show(self.points[-1])

    def _show_head(self) -> None:
        t = self.thread
        if t is None:
            self.query_one("#thread-head", Static).update(Text(f"No thread {self.thread_id}."))
            return
        head = Text()
        status = display_status(t, self.flowdesk.now())
        head.append(f"LangGraph thread {t.thread_id}  ", style="bold")
        head.append(status)
        head.append(f"  started {when(t.created_at)}  updated {when(t.updated_at)}\n")
        head.append("  ".join(f"{k} {v}" for k, v in sorted(t.context.items())))
        for value in t.interrupts:
            head.append(f"\nasks: {json.dumps(value, ensure_ascii=False, default=str)}")
        moved = self._moved_text(t)
        if moved:  # db copy moved it: not answered here
            head.append(f"\n{moved}")
        elif threads.asks_several(t):
            head.append(
                f"\nIt waits on {len(t.interrupts)} questions at once, which an answer here "
                f"cannot tell apart. {threads.several_hint(t.thread_id)}"
            )
        elif t.status == "waiting":
            head.append("\na: answer it here; its program goes on with ")
            head.append(threads.resume_hint(t.thread_id))
        elif t.status == threads.ANSWERED:
            head.append("\nanswered: it goes on when its program runs ")
            head.append(threads.resume_hint(t.thread_id))
        elif status in (INTERRUPTED, threads.FAILED):
            for line in self._stopped_lines():
                head.append(f"\n{line}")
            head.append("\nits program continues the thread with ")
            head.append(threads.resume_hint(t.thread_id))
        self.query_one("#thread-head", Static).update(head)
        # the answer field only where an answer here works (one question)
        self.set_class(self._answerable(t), "-waiting")
        self.refresh_bindings()

    # -- showing -------------------------------------------------------------

    def point(self, checkpoint_id: str) -> Point | None:
        return next((p for p in self.points if p.checkpoint_id == checkpoint_id), None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value
        point = self.point(key) if key is not None else None
        if point is not None:
            self._show(point)

    def _show(self, point: Point) -> None:
        """The state at ``point`` and, with a marked checkpoint, the diff to it."""
        state = Text()
        state.append(f"State at {point.checkpoint_id} (step {point.step})\n", style="bold")
        for key, value in point.state.items():
            state.append(f"  {key}: {value_text(value)}\n")
        self.query_one("#state", Static).update(state)
        diff = Text()
        marked = self.point(self.marked) if self.marked else None
        if marked is not None and marked is not point:
            changes = diff_states(marked.state, point.state)
            diff.append(
                f"Changes from {marked.checkpoint_id} to {point.checkpoint_id}: {len(changes)}\n",
                style="bold",
            )
            for change in changes:
                diff.append(f"  {change.kind:7} {change.path}: {change_text(change)}\n")
        elif self.points:
            diff.append("m marks this checkpoint; the diff to the highlighted one shows here.")
        self.query_one("#diff", Static).update(diff)

    def selected(self) -> Point | None:
        table = self.query_one("#timeline", DataTable)
        if not self.points or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.points[table.cursor_row]

    # -- actions -------------------------------------------------------------

    def action_mark(self) -> None:
        point = self.selected()
        if point is None:
            return
        self.marked = None if self.marked == point.checkpoint_id else point.checkpoint_id
        self._show(point)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``a`` is offered only while an answer here works (not for several
        questions at once, which its program answers by interrupt id)."""
        if action == "answer":
            t = self.thread
            return not (t is not None and (threads.asks_several(t) or self._moved_text(t)))
        return True

    def _stopped_lines(self) -> list[str]:
        """The nodes that raised or were cut off (as ``flowdesk show`` says
        them); none without the ``langgraph`` extra or when unreadable."""
        try:
            from desktop_app.integrations.langgraph.saver import FlowdeskSaver
        except ImportError:
            return []
        stopped = self.flowdesk.read(
            lambda s: FlowdeskSaver(s).stopped_at(self.thread_id), quiet=True
        )
        return threads.stopped_lines(stopped) if stopped is not None else []

    @staticmethod
    def _answerable(t: threads.Thread) -> bool:
        """Whether an answer here works: one question, and not moved by ``db copy``."""
        return t.status == "waiting" and not threads.asks_several(t) and moved_to(t.owner) is None

    def _moved_text(self, t: threads.Thread) -> str:
        """Where ``db copy`` moved the unfinished thread ``t``, the line that
        opens its checkpointer there and the command that shows it there,
        as ``flowdesk show`` says it; ``""`` when it did not move."""
        where = moved_to(t.owner)
        if where is None or t.status == "completed":
            return ""
        hints = self.flowdesk.hints
        return (
            f"moved to {where} by flowdesk db copy: its program continues it there, with "
            f"{threads.saver_line(where, hints.scope)}; nothing on this database does "
            f"(see it there: {moved_hint(hints, where, t.thread_id)})"
        )

    def action_answer(self) -> None:
        if self.thread is not None and (said := self._moved_text(self.thread)):
            self.flowdesk.say(f"Not answered here: this thread {said}.", "warning")
            return
        if self.thread is None or self.thread.status != "waiting":
            self.app.notify("This thread is not waiting for an answer.", timeout=3)
            return
        if threads.asks_several(self.thread):
            self.flowdesk.say(
                f"Thread {self.thread_id} waits on {len(self.thread.interrupts)} questions at "
                f"once; nothing can be answered here. {threads.several_hint(self.thread_id)}",
                "warning",
            )
            return
        self.query_one("#answer", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        services = self.flowdesk.services
        if not text or services is None:
            return
        store = services.services.checkpoints
        # the question shown: a thread that asks another one by now refuses it
        shown = self.thread.wait_id if self.thread is not None else None
        try:
            threads.store_answer(store, store.scope, self.thread_id, text, wait_id=shown)
        except FlowdeskError as exc:
            self.flowdesk.say(str(exc), "error")
            self.reload()  # e.g. answered elsewhere: show what it asks now
            return
        event.input.value = ""
        self.flowdesk.say(
            f"Answered; thread {self.thread_id} goes on when its program runs "
            f"{threads.resume_hint(self.thread_id)}."
        )
        self.reload()
        self.query_one("#timeline", DataTable).focus()
