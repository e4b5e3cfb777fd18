"""The launch report (S51): runs left by an older version of their flow.

Only runs no process executes are listed (``Engine.incompatible_runs``
leaves out another mode of the same version, such as the CLI's ``digest
--model``, and runs a live process holds).

After launch recovery, :func:`check_after_launch` asks the engine for live
runs whose flow changed since they started (``Engine.incompatible_runs``).
When there are any, :class:`LaunchReportScreen` lists them with what launch
recovery did, and lets a person decide per run: fail it, fork it onto the
current version of the flow, or keep it (for a process that still has the
old flow). Nothing is decided silently. A run failed from the report
(reason ``flow changed``) is not asked about again at the next launch.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Label, Static

from desktop_app.app.flow_changes import flow_change
from desktop_app.app.format import short_id
from desktop_app.app.host import Host, host
from desktop_app.app.messages import RunChanged
from desktop_app.app.screens.help import HELP_BINDING
from desktop_app.app.widgets.bars import Footer
from desktop_app.app.widgets.cells import cut_words, keep_columns, update_fitting
from desktop_app.app.widgets.row_table import RowTable
from desktop_app.errors import CheckpointCorruptError, FlowdeskError
from desktop_app.flow.engine import Engine, IncompatibleRun
from desktop_app.runs_view import display_status

#: The dialog's widest (cells; flowdesk.tcss says the same).
DIALOG_WIDTH = 140
#: rows of the dialog that are not its scrolling body: border and padding
#: (4), the buttons' margin and height (4), the footer (1)
FRAME_ROWS = 9
#: The reason a run failed from this report is given.
FAIL_REASON = "flow changed"


def check_after_launch(app: App[Any]) -> None:
    """Look for runs of older flow versions in a worker; show the report if any."""
    engine = host(app).engine
    if engine is None:
        return

    def decided(run: IncompatibleRun) -> bool:
        """Failed from this report at an earlier launch: not asked again."""
        return run.status == "failed" and engine.status(run.run_id).error == FAIL_REASON

    def find() -> None:
        try:
            runs = [r for r in engine.incompatible_runs() if not decided(r)]
        except FlowdeskError as exc:
            host(app).say(f"Could not look for runs of older flow versions: {exc}", "error")
            return
        except Exception as exc:
            host(app).say(
                f"Could not look for runs of older flow versions: {type(exc).__name__}: {exc}",
                "error",
            )
            return
        if runs:
            changes = {r.run_id: describe_change(engine, r) for r in runs}
            now = engine.store.now()
            # a running run whose process is gone shows as interrupted
            statuses = {r.run_id: display_status(engine.status(r.run_id), now) for r in runs}
            # call_later posts a message: safe from this thread.
            app.call_later(show_report, app, runs, changes, statuses)

    app.run_worker(find, thread=True, group="launch-report", name="find runs of older flows")


def describe_change(engine: Engine, run: IncompatibleRun) -> str:
    """What changed in the run's flow (steps added, removed, renamed; the
    version strings), from the steps its latest checkpoint knows; a run
    whose latest checkpoint is damaged is said so (the others are still
    listed), and the two versions are given."""
    try:
        latest = engine.store.latest(run.run_id)
    except CheckpointCorruptError as exc:
        return f"version {run.stored_version} → {run.current_version}; {exc}"
    known = [*latest.steps, *latest.frontier]
    current = list(engine.flow(run.flow_name).steps)
    return flow_change(run.stored_version, run.current_version, known, current).describe()


def show_report(
    app: App[Any],
    runs: list[IncompatibleRun],
    changes: dict[str, str] | None = None,
    statuses: dict[str, str] | None = None,
) -> None:
    if not app.is_running:
        return
    app.push_screen(LaunchReportScreen(runs, host(app).recovery, changes, statuses))


class Decided(Message):
    """A decision on one run was carried out (``outcome``) or refused (``error``)."""

    def __init__(self, run_id: str, outcome: str, error: str | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.outcome = outcome
        self.error = error


class LaunchReportScreen(ModalScreen[None]):
    """Runs of older flow versions: fail, fork onto the current version, or keep."""

    BINDINGS = [
        Binding("k", "keep", "Keep"),
        Binding("o", "fork", "Fork onto current"),
        Binding("f", "fail", "Fail run"),
        Binding("escape", "close", "Close"),
        HELP_BINDING,
    ]

    COLUMNS = (
        ("run", "Run"),
        ("flow", "Flow"),
        ("status", "Status"),
        ("step", "Stopped at"),
        ("changed", "What changed"),
        ("decision", "Decision"),
    )

    def __init__(
        self,
        runs: list[IncompatibleRun],
        recovery: str | None = None,
        changes: dict[str, str] | None = None,
        statuses: dict[str, str] | None = None,
    ) -> None:
        """``changes``: what changed in each run's flow, by run id (default:
        the two version strings); ``statuses``: the status shown, by run id
        (``display_status``: ``interrupted`` for a run whose process is gone;
        default: the stored one)."""
        super().__init__()
        self.runs = runs
        self.changes = changes or {}
        self.statuses = statuses or {}
        self.recovery = recovery
        self.decisions: dict[str, str] = {r.run_id: "undecided" for r in runs}
        self._busy: set[str] = set()

    @property
    def flowdesk(self) -> Host:
        return host(self.app)

    def compose(self) -> ComposeResult:
        n = len(self.runs)
        whose, them = ("their", "them") if n != 1 else ("its", "it")
        # the report scrolls on a short terminal; the buttons stay below it
        with Vertical(id="dialog"):
            with VerticalScroll(id="body"):
                yield Label("[b]Launch report[/b]")
                if self.recovery:
                    yield Static(Text(self.recovery), id="recovery")
                yield Static(
                    Text(
                        f"{n} run{'s were' if n != 1 else ' was'} started under an older "
                        f"version of {whose} flow, and no process runs {them} now. For each: "
                        "k keeps it for a process that still has the old flow, o forks it "
                        "onto the current version (from its latest state and step; the old "
                        "run is canceled as superseded), f fails it ('flow changed')."
                    ),
                    id="explain",
                )
                yield RowTable(id="incompatible")
                # the selected run's whole change: the table's column is cut to fit
                yield Static("", id="change")
            with Horizontal(id="buttons"):
                # keeping first, failing last: the default never destroys work
                yield Button("Keep", variant="primary", id="keep")
                yield Button("Fork onto current", id="fork")
                yield Button("Fail run", variant="error", id="fail")
                yield Button("Close", id="close")
        yield Footer(show_command_palette=False)

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        """The report takes what the terminal's height leaves beside the
        dialog's frame, its buttons and the footer (it scrolls when that is
        less than it needs): Keep, Fork, Fail and Close are always on screen."""
        self.query_one("#body").styles.max_height = max(3, height - FRAME_ROWS)

    def on_mount(self) -> None:
        self._fit(self.app.size.height)
        table = self.query_one("#incompatible", DataTable)
        self._full_changes = {
            r.run_id: self.changes.get(r.run_id, f"{r.stored_version} → {r.current_version}")
            for r in self.runs
        }
        rows = {
            r.run_id: {
                "run": short_id(r.run_id),
                "flow": r.flow_name,
                "status": self.statuses.get(r.run_id, r.status),
                "step": r.step or "-",
                "changed": self._full_changes[r.run_id],
                "decision": self.decisions[r.run_id],
            }
            for r in self.runs
        }
        labels = dict(self.COLUMNS)
        widths = {
            key: max([cell_len(label), *(cell_len(cells[key]) for cells in rows.values())])
            for key, label in self.COLUMNS
        }
        # the table's width: the dialog's (at most DIALOG_WIDTH cells) less its
        # border and padding, and the body's scrollbar on a short terminal (a
        # column cut to fit without it was cut again, mid-word, by the table)
        room = min(DIALOG_WIDTH, self.app.size.width) - 8
        kept, changed = keep_columns(widths, room, ("step", "flow"), elastic="changed", floor=20)
        self.shown_columns = kept
        for key in kept:
            table.add_column(labels[key], key=key)  # a decision widens its column
        for run_id, cells in rows.items():
            cells["changed"] = cut_words(cells["changed"], changed)
            table.add_row(*(Text(cells[k]) for k in kept), key=run_id)
        table.focus()
        self._show_change()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_change()

    def _show_change(self) -> None:
        """The selected run's whole "What changed", wrapped under the table."""
        run = self.selected
        text = Text("")
        if run is not None:
            change = self._full_changes[run.run_id]
            text = Text.assemble(
                ("What changed in run ", "bold"), short_id(run.run_id), ": ", change
            )
        self.query_one("#change", Static).update(text)

    @property
    def selected(self) -> IncompatibleRun | None:
        table = self.query_one("#incompatible", DataTable)
        if not self.runs or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.runs[table.cursor_row]

    def decision(self, run_id: str) -> str:
        """What was decided for ``run_id`` (``undecided`` until then)."""
        return self.decisions[run_id]

    def _decide(self, run_id: str, text: str) -> None:
        self.decisions[run_id] = text
        update_fitting(self.query_one("#incompatible", DataTable), run_id, "decision", Text(text))

    def _pick(self) -> IncompatibleRun | None:
        run = self.selected
        if run is None:
            return None
        if run.run_id in self._busy:
            self.flowdesk.say(f"Run {short_id(run.run_id)} is being handled already.", "warning")
            return None
        if self.decisions[run.run_id] not in ("undecided", "kept"):
            self.flowdesk.say(
                f"Run {short_id(run.run_id)} is {self.decisions[run.run_id]} already.", "warning"
            )
            return None
        return run

    # -- actions ---------------------------------------------------------------

    def action_fail(self) -> None:
        if (run := self._pick()) is not None:
            self._busy.add(run.run_id)
            self._decide(run.run_id, "failing…")
            self._fail(run)

    def action_fork(self) -> None:
        if (run := self._pick()) is not None:
            self._busy.add(run.run_id)
            self._decide(run.run_id, "forking…")
            self._fork(run)

    def action_keep(self) -> None:
        if (run := self._pick()) is not None:
            self._decide(run.run_id, "kept")
            self.flowdesk.say(
                f"Run {short_id(run.run_id)} is kept as it is (flow {run.flow_name} "
                f"{run.stored_version})."
            )

    def action_close(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        action = {"fail": self.action_fail, "fork": self.action_fork, "keep": self.action_keep}
        action.get(event.button.id or "", self.action_close)()

    # -- workers -----------------------------------------------------------------

    @work(thread=True, group="launch-report", name="fail run of an older flow")
    def _fail(self, run: IncompatibleRun) -> None:
        engine = self.flowdesk.engine
        assert engine is not None
        try:
            record = engine.fail_run(run.run_id, FAIL_REASON)
        except FlowdeskError as exc:
            self.post_message(Decided(run.run_id, "undecided", f"not failed: {exc}"))
        except Exception as exc:
            self.post_message(
                Decided(run.run_id, "undecided", f"not failed: {type(exc).__name__}: {exc}")
            )
        else:
            self.flowdesk.say(f"Run {short_id(run.run_id)} is {record.status}: {FAIL_REASON}.")
            self.post_message(Decided(run.run_id, record.status))
        finally:
            self.app.post_message(RunChanged(run.run_id))

    @work(thread=True, group="launch-report", name="fork run onto the current flow")
    def _fork(self, run: IncompatibleRun) -> None:
        engine = self.flowdesk.engine
        assert engine is not None

        def created(new_id: str) -> None:
            # named at once: the new run's steps may take long (a model call)
            self.post_message(Decided(run.run_id, f"forked → {short_id(new_id)} (running)"))
            self.app.post_message(RunChanged(run.run_id))
            self.app.post_message(RunChanged(new_id))

        try:
            result = engine.fork_onto_current(run.run_id, on_created=created)
        except FlowdeskError as exc:
            self.post_message(Decided(run.run_id, "undecided", f"not forked: {exc}"))
        except Exception as exc:
            self.post_message(
                Decided(run.run_id, "undecided", f"not forked: {type(exc).__name__}: {exc}")
            )
        else:
            new = short_id(result.run_id)
            self.flowdesk.say(
                f"Run {short_id(run.run_id)} forked onto {run.flow_name} {run.current_version} "
                f"as run {new}, now {result.status}."
            )
            self.post_message(Decided(run.run_id, f"forked → {new} ({result.status})"))
            self.app.post_message(RunChanged(result.run_id))
        finally:
            self.app.post_message(RunChanged(run.run_id))

    def on_decided(self, message: Decided) -> None:
        self._busy.discard(message.run_id)
        self._decide(message.run_id, message.outcome)
        if message.error:
            self.flowdesk.say(f"Run {short_id(message.run_id)} {message.error}", "error")
