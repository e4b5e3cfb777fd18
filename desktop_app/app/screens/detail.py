"""Run detail: header, the latest step records and the checkpoint timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, Static

from desktop_app.app.format import STATUS_STYLES, progress, when
from desktop_app.app.widgets.run_tables import CheckpointsTable, StepsTable
from desktop_app.store.protocol import RunRecord

if TYPE_CHECKING:
    from desktop_app.app.main import FlowdeskApp

#: Seconds between refreshes while events keep arriving for this run.
REFRESH_S = 0.5


def header_text(run: RunRecord) -> Text:
    text = Text()
    text.append("Run ", style="bold")
    text.append(run.run_id)
    text.append("   Flow ", style="bold")
    text.append(f"{run.flow_name} ({run.flow_version})")
    text.append("\nStatus ", style="bold")
    text.append(run.status, style=STATUS_STYLES.get(run.status, ""))
    text.append("   Progress ", style="bold")
    text.append(progress(run.progress))
    text.append("   Started ", style="bold")
    text.append(when(run.created_at))
    text.append("   Updated ", style="bold")
    text.append(when(run.updated_at))
    if run.error:
        text.append("\nError ", style="bold red")
        text.append(run.error)
    return text


class RunDetailScreen(Screen[None]):
    """One run: its steps and checkpoints, updated live while it works."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "resume", "Resume"),
        Binding("a", "answer", "Answer"),
        Binding("c", "cancel", "Cancel run"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.record: RunRecord | None = None
        self._dirty = False

    @property
    def flowdesk(self) -> FlowdeskApp:
        return cast("FlowdeskApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"Run {self.run_id}"), id="run-header")
        yield Label("Steps", classes="section")
        yield StepsTable(id="steps")
        yield Label("Checkpoints", classes="section")
        yield CheckpointsTable(id="checkpoints")
        yield Footer()

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(REFRESH_S, self._flush)
        self.query_one(StepsTable).focus()

    def refresh_run(self, run_id: str) -> None:
        if run_id == self.run_id:
            self._dirty = True

    def data_changed(self) -> None:
        self._dirty = True

    def set_progress(self, run_id: str, done: int, total: int) -> None:
        self.refresh_run(run_id)

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.reload()

    def reload(self) -> None:
        run_id = self.run_id
        got = self.flowdesk.read(
            lambda store: (store.get_run(run_id), store.latest(run_id), store.history(run_id))
        )
        if got is None:
            return
        run, checkpoint, history = got
        self.record = run
        self.query_one("#run-header", Static).update(header_text(run))
        self.query_one(StepsTable).show(checkpoint)
        self.query_one(CheckpointsTable).show(history)

    def action_resume(self) -> None:
        self.flowdesk.resume_run(self.run_id)

    def action_answer(self) -> None:
        self.flowdesk.answer_run(self.run_id)

    def action_cancel(self) -> None:
        self.flowdesk.cancel_run(self.run_id)
