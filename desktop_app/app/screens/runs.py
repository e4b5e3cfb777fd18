"""The runs dashboard (the default screen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header

from desktop_app.app.widgets.banner import ErrorBanner, StatusLine
from desktop_app.app.widgets.runs_table import RunsTable

if TYPE_CHECKING:
    from desktop_app.app.main import FlowdeskApp


class RunsScreen(Screen[None]):
    """Every run of the database, newest first, updated live."""

    BINDINGS = [
        Binding("n", "new_run", "New digest"),
        Binding("enter", "open_run", "Open", priority=True),
        Binding("r", "resume_run", "Resume"),
        Binding("a", "answer_run", "Answer"),
        Binding("c", "cancel_run", "Cancel run"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._statuses: dict[str, str] = {}

    @property
    def flowdesk(self) -> FlowdeskApp:
        return cast("FlowdeskApp", self.app)

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

    def compose(self) -> ComposeResult:
        yield Header()
        yield ErrorBanner(id="banner")
        yield StatusLine("Opening the database…", id="status")
        yield StatusLine("", id="hint", classes="-empty")
        yield RunsTable(id="runs")
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()

    # -- refreshing (called by the app) ---------------------------------

    def data_changed(self) -> None:
        self.reload()

    def reload(self) -> None:
        runs = self.flowdesk.read(lambda store: store.list_runs(newest_first=True, limit=5000))
        if runs is not None:
            self.table.show(runs)
            self._statuses = {r.run_id: r.status for r in runs}
            self._show_hint()

    def refresh_run(self, run_id: str) -> None:
        run = self.flowdesk.read(lambda store: store.get_run(run_id), quiet=True)
        if run is None or not self.table.update_run(run):
            self.reload()
        elif self._statuses.get(run_id) != run.status:
            self._statuses[run_id] = run.status
            self._show_hint()

    def _show_hint(self) -> None:
        waiting = sum(status == "waiting" for status in self._statuses.values())
        if not waiting:
            self.hint.say("")
            return
        runs = "1 run is" if waiting == 1 else f"{waiting} runs are"
        self.hint.say(f"{runs} waiting: select one and press a to see what for.")

    def set_progress(self, run_id: str, done: int, total: int) -> None:
        self.table.set_progress(run_id, done, total)

    # -- actions ---------------------------------------------------------

    def action_new_run(self) -> None:
        self.flowdesk.action_new_digest()

    def action_open_run(self) -> None:
        run_id = self.table.selected_run_id()
        if run_id is None:
            self.flowdesk.say("No run selected; press n to start one.", "warning")
            return
        self.flowdesk.open_run(run_id)

    def _selected(self) -> str | None:
        run_id = self.table.selected_run_id()
        if run_id is None:
            self.flowdesk.say("No run selected.", "warning")
        return run_id

    def action_resume_run(self) -> None:
        if (run_id := self._selected()) is not None:
            self.flowdesk.resume_run(run_id)

    def action_answer_run(self) -> None:
        if (run_id := self._selected()) is not None:
            self.flowdesk.answer_run(run_id)

    def action_cancel_run(self) -> None:
        if (run_id := self._selected()) is not None:
            self.flowdesk.cancel_run(run_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # A click on a row (enter is bound above, at screen priority).
        event.stop()
        if event.row_key.value is not None:
            self.flowdesk.open_run(event.row_key.value)
