"""The Flowdesk Textual app: wiring, thread workers and live updates.

Threads:

* ``_startup`` applies the schema (the app's explicit, visible choice: the
  files applied are announced) and opens ONE engine plus a read-only view
  for the UI. Nothing here runs SQL: only :mod:`desktop_app.bootstrap`, the
  :class:`~desktop_app.flow.Engine` and the store protocol are used.
* ``_recover`` resumes interrupted runs at launch (``Engine.recover``).
* ``_drive`` runs or resumes one run; at most one driver per run id.

The engine's store serialises its connection across the worker threads.
The UI thread reads through a second connection of its own, so a write
waiting for another process's lock (or an fsync) never freezes the screen,
and ``data_version`` on it changes whenever anyone (this app's engine or
another process) commits. Engine events arrive on worker threads and are
forwarded as messages (``post_message`` is thread-safe). Progress and step
events are coalesced and shown at most :attr:`FlowdeskApp.REFRESH_S` apart
(the latest value per run always lands), so a fast run does not spend its
time repainting the screen; the subscriber never reads the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import platformdirs
from textual import work
from textual._files import generate_datetime_filename
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen

from desktop_app.agent import drives
from desktop_app.agent.messages import unknown_outcome_tools
from desktop_app.agent.recovery import interrupted_agent_runs, recover_agent_runs
from desktop_app.agent.runtime import AgentResponse
from desktop_app.app import terminal
from desktop_app.app.controller import FINISHED, INTERRUPTED, Controller
from desktop_app.app.db_file import OpenedFile, file_notice, opened_file
from desktop_app.app.delivery import OutboxPump
from desktop_app.app.format import app_version_refusal, plural, short_id, skew_notice
from desktop_app.app.messages import (
    BranchRequested,
    DatabaseAway,
    DatabaseBack,
    EngineReady,
    OutboxDelivered,
    ProgressTick,
    RecoveryFinished,
    RunChanged,
    StartupFailed,
    StartupWaiting,
)
from desktop_app.app.progress import ProgressMeter
from desktop_app.app.runs import RunController
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.help import HelpScreen, keys_of
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.launch_report import check_after_launch
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.screens.signal import SignalRequest, SignalScreen, escape_key
from desktop_app.app.screens.start_flow import StartFlowScreen
from desktop_app.app.screens.type_ahead import TypeAheadApp
from desktop_app.app.services import AppServices, open_services
from desktop_app.app.throttle import RefreshThrottle
from desktop_app.app.timers import TimerPump
from desktop_app.app.widgets.run_summary import damaged_in_app
from desktop_app.cli.output import Hints
from desktop_app.config import APP_NAME, Settings, config_file, load_settings, recovery_policy
from desktop_app.errors import (
    AgentRunLeasedError,
    CheckpointDecodeError,
    ClockSkewError,
    DatabaseLockedError,
    DatabaseUnreachableError,
    FlowdeskError,
    FlowVersionMismatchError,
    RunLeasedError,
    ServerUnreachableAtOpenError,
    moved_to,
    redact,
)
from desktop_app.flow import CompiledFlow, Engine, EventBus, RunResult
from desktop_app.flow.clock import SKEW_RECHECK_S, Clock, reading, skew_error
from desktop_app.flow.engine import Refusals
from desktop_app.flow.events import Event, RunFinished, RunProgress, RunStarted, StepFinished
from desktop_app.private import make_private_dirs
from desktop_app.runs_view import left_over, no_signal_waiter, signal_reach, signal_waits
from desktop_app.store.protocol import CheckpointStore, RunRecord, ServerOutages, Wait

if TYPE_CHECKING:
    from desktop_app import bootstrap

T = TypeVar("T")

#: seconds between two tries to open a database another process kept locked
#: past the busy timeout at start-up
STARTUP_RETRY_S = 2.0
#: seconds the quit waits for the tool calls in flight of the Pydantic AI runs
#: an answer drives here (their results are then saved; one still running
#: after it is reported "outcome unknown" by the next resume, never repeated)
QUIT_WAIT_S = 60.0
log = logging.getLogger(__name__)

__all__ = ["FINISHED", "INTERRUPTED", "FlowdeskApp", "Notice", "recovery_summary"]


@dataclass(frozen=True)
class Notice:
    """A message shown to the user (kept after its toast disappears)."""

    message: str
    severity: SeverityLevel = "information"


def screenshot_dir() -> Path:
    """Where screenshots go: the user's Downloads folder when it exists, else
    ``screenshots`` in Flowdesk's user data folder (created 0700)."""
    downloads = platformdirs.user_downloads_path()
    if downloads.is_dir():
        return downloads
    return make_private_dirs(Path(platformdirs.user_data_dir(APP_NAME)) / "screenshots")


def recovery_summary(
    outcomes: Iterable[RunResult | AgentResponse | BaseException],
    unknown: Sequence[str] = (),
) -> tuple[str, bool]:
    """``("Resumed N runs: X completed, Y failed", problem?)``; an agent run
    that answered (``done``) counts as completed. A run a live process holds
    (``RunLeasedError``, an agent run's too) was not resumed and is no
    problem: it is counted apart ("1 run is running in another process";
    one ``db copy`` moved, "1 run moved to postgresql://host/db (flowdesk db
    copy), not run here"), and when it is all there was the text says
    nothing was resumed.

    ``unknown``: the resumed runs with a tool call whose outcome is unknown
    (sent, interrupted before its result was saved, not repeated:
    :func:`~desktop_app.agent.messages.unknown_outcome_tools`); the text
    names them and how to see them, and they are a problem (a side effect
    happens once, or Flowdesk says plainly its outcome is unknown)."""
    done = list(outcomes)
    # a run of a flow that changed since it started is the launch report's
    # (it lists each, with what changed and what can be done): not "resumed"
    changed = sum(isinstance(o, FlowVersionMismatchError) for o in done)
    done = [o for o in done if not isinstance(o, FlowVersionMismatchError)]
    leased = [o for o in done if isinstance(o, RunLeasedError)]
    moved = sorted({o.moved_to for o in leased if o.moved_to is not None})
    held = len(leased)
    done = [o for o in done if not isinstance(o, RunLeasedError)]
    gone = sum(o.moved_to is not None for o in leased)
    live = held - gone
    said = []
    if live:
        said.append(
            f"{plural(live, 'run')} {'is' if live == 1 else 'are'} running in another process"
        )
    if gone:  # db copy moved them: that database's workers run them
        said.append(
            f"{plural(gone, 'run')} moved to {', '.join(moved)} (flowdesk db copy), not run here"
        )
    if changed:
        they = "it" if changed == 1 else "they"
        # of those an earlier process left running: the report lists waiting
        # runs of such flows too (a tryout read 1 here and 2 there)
        said.append(
            f"{plural(changed, 'run')} an earlier process left running "
            f"{'is' if changed == 1 else 'are'} of a flow that changed since {they} started "
            "(see the launch report)"
        )
    elsewhere = "; ".join(said)
    held += changed
    if held and not done:
        return f"{elsewhere}; nothing to resume", False
    results = [o for o in done if not isinstance(o, BaseException)]
    errors = [o for o in done if isinstance(o, BaseException)]
    completed = sum(r.status in ("completed", "done") for r in results)
    failed = sum(r.status == "failed" for r in results)
    parts = [f"{completed} completed", f"{failed} failed"]
    other = len(results) - completed - failed
    if other:
        parts.append(f"{other} waiting or stopped")
    if errors:
        parts.append(f"{len(errors)} not resumed")
    text = f"Resumed {plural(len(done), 'run')}: {', '.join(parts)}"
    if unknown:
        ids = ", ".join(short_id(r) for r in unknown)
        runs = (
            f"agent run {ids}, enter shows it"
            if len(unknown) == 1
            else (f"agent runs {ids}, enter on one shows it")
        )
        text += f"; {len(unknown)} with a tool call whose outcome is unknown (not repeated): {runs}"
    if held:
        text += f"; {elsewhere}"
    return text, bool(failed or errors or unknown)


class FlowdeskApp(TypeAheadApp, App[None]):
    """Runs dashboard, run detail, new digest runs and launch recovery."""

    TITLE = "Flowdesk"
    CSS_PATH = "flowdesk.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit", show=False),
        # Ctrl-Z stops the app as it stops a shell command (Textual has the
        # action, bound to no key): the terminal restored, the write gate's
        # turn given back first; `fg` brings it back
        Binding("ctrl+z", "suspend_process", "Stop (fg resumes)", show=False),
        Binding("i", "inbox", "Inbox"),
        # Shown in the ? help and the command palette; the footer keeps to
        # what fits 80 columns.
        Binding("g", "agent_runs", "Agent runs", show=False),
        Binding("s", "start_flow", "Start flow", show=False),
        Binding("ctrl+s", "settings", "Settings", show=False),
        Binding("x", "send_signal", "Signal", show=False),
        Binding("j", "cursor('down')", "Down", show=False),  # as in vi and less
        Binding("k", "cursor('up')", "Up", show=False),
        Binding("f1", "help", "Help", key_display="F1", priority=True),
        Binding("question_mark", "help", "Help", key_display="?", show=False),
        # Textual's own is described "palette" in lower case; the help lists it
        # with the footer's words (its key shown as Textual shows ctrl keys: ^p)
        Binding(
            "ctrl+p",
            "command_palette",
            "Command palette",
            show=False,
            priority=True,
            tooltip="Open the command palette",
        ),
    ]
    #: Seconds between checks of the store's ``data_version``.
    POLL_S = 1.0
    #: Least seconds between two refreshes of live progress (10 a second).
    REFRESH_S = 0.1
    #: Longest pause (seconds) between two outbox delivery passes; a run of
    #: this app that saves a checkpoint wakes the dispatcher at once.
    OUTBOX_S = 2.0
    #: Longest pause (seconds) between two looks for due timers, deadlines
    #: and arrived signals; a deadline falling due sooner is fired at its time.
    TIMERS_S = 1.0
    #: Seconds an informational status line (schema applied, runs resumed) stays.
    STATUS_S = 8.0
    #: Seconds between two comparisons of this computer's clock with the
    #: database's while the app is open (a laptop woke, NTP or a person moved
    #: it): the engine's own recheck (its clock refuses writes as soon)
    CLOCK_S = SKEW_RECHECK_S

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        flows: list[CompiledFlow[Any]] | None = None,
        clock: Clock | None = None,
        model: Any = None,
        hints: Hints | None = None,
    ) -> None:
        """``hints``: how the commands the app suggests name the database and
        scope (default: as ``FLOWDESK_DB_PATH``/``FLOWDESK_SCOPE`` give them;
        ``flowdesk --db X`` passes its own, so a suggested command runs as
        printed); ``model``: the chat model agents asked from the app use (default:
        the configured one, read when first asked); ``settings`` default to
        :func:`~desktop_app.config.load_settings` (the
        settings file and ``FLOWDESK_*`` environment), so ``textual run
        desktop_app.app.main:FlowdeskApp`` works; ``flows`` replaces the
        built-in flows (tests use instrumented ones); ``clock`` is the time
        source of the engine and of every time shown (default: the system's)."""
        super().__init__()
        if settings is None:
            settings = load_settings()
        self.settings = settings
        #: builds every command the app suggests (the CLI's one rule)
        self.hints = hints if hints is not None else Hints.of(None, None, os.environ)
        self._custom_flows = flows
        self._clock = clock
        self._model = model
        self.services: AppServices | None = None
        self.engine: Engine | None = None
        self.reader: CheckpointStore | None = None
        self.schema: bootstrap.SchemaReport | None = None
        #: claims, the launch-recovery gate and job execution (one place)
        self.runs = RunController()
        #: the domain actions screens call: start, resume, cancel, answer, fork...
        self.controller = Controller(self, self.runs)
        #: the outbox dispatcher's thread, once the database is open
        self.outbox: OutboxPump | None = None
        #: fires due timers and deadlines, once the database is open (SQLite)
        self.timers: TimerPump | None = None
        self.startup_error: str | None = None
        #: what the banner says while a database server cannot be reached
        #: (``None``: reachable, or a file); the UI's reads and the clock
        #: check wait while it is set, a worker probes for the server instead
        self.away: str | None = None
        #: the engine's clock refused to tell the time at launch (skewed):
        #: the runs are shown read-only (:meth:`Controller.require_writer`)
        self.clock_skew: ClockSkewError | None = None
        #: the SQLite file opened (``None``: not open yet, or PostgreSQL)
        self._opened: OpenedFile | None = None
        #: what the banner says while that file is no longer the one at its
        #: path (moved, deleted, replaced): read-only until it is back
        self.file_gone: str | None = None
        self.recovery: str | None = None
        self.notices: list[Notice] = []
        self._progress: dict[str, tuple[int, int]] = {}
        self._changed: set[str] = set()
        self._progress_lock = threading.Lock()
        #: spaces progress refreshes REFRESH_S apart (its clock can be replaced)
        self.throttle = RefreshThrottle(self.REFRESH_S, time.monotonic)
        #: rate and ETA of running runs, from the progress shown
        self.meter = ProgressMeter()
        #: runs whose question (with its plan, when the flow has a preview)
        #: was shown in the answer dialog this session: the inbox's y
        #: approves those directly, and shows the others' plan first
        self.plans_shown: set[str] = set()
        self._data_version: int | None = None
        self._last_read_error: str | None = None
        self._quitting = False
        #: q was pressed while an agent's tool call ran (:meth:`action_quit`)
        self._quit_asked = False
        #: q again: quit without waiting for it (its outcome is then unknown)
        self._quit_now = False
        #: the banner shown while the database stayed locked at start-up
        self._startup_waiting: str | None = None
        #: what launch started once the first page was painted: ``None``
        #: before, ``"writers"`` (delivery, timers, recovery), or
        #: ``"read-only"`` (the clock was skewed: none of them)
        self._launched: str | None = None
        self.sub_title = header(settings)

    # -- screens ---------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        return RunsScreen()

    @property
    def runs_screen(self) -> RunsScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, RunsScreen)
        return screen

    def _live_screens(self) -> list[RunsScreen | RunDetailScreen]:
        return [s for s in self.screen_stack if isinstance(s, RunsScreen | RunDetailScreen)]

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "New digest run",
            "Summarise every file of a folder into digest.md",
            self.controller.new_digest,
        )
        yield SystemCommand("Inbox", "Every run waiting for a person", self.action_inbox)
        yield SystemCommand(
            "Agent runs", "Agent runs, their conversations and tool results", self.action_agent_runs
        )
        yield SystemCommand("Start flow", "Start any registered flow", self.action_start_flow)
        yield SystemCommand("Settings", "Database, durability and model", self.action_settings)
        yield SystemCommand(
            "Send signal", "Store a signal for a run waiting on it", self.action_send_signal
        )
        if isinstance(screen, RunsScreen):
            yield SystemCommand(
                "Open run", "Steps and checkpoints of the selected run", screen.action_open_run
            )
            yield SystemCommand("Resume run", "Resume the selected run", screen.action_resume_run)
            yield SystemCommand(
                "Answer run", "Answer the selected waiting run", screen.action_answer_run
            )
            yield SystemCommand("Cancel run", "Cancel the selected run", screen.action_cancel_run)
        if isinstance(screen, RunDetailScreen):
            yield SystemCommand("Resume run", "Resume this run", screen.action_resume)
            yield SystemCommand("Answer run", "Answer this waiting run", screen.action_answer)
            yield SystemCommand("Cancel run", "Cancel this run", screen.action_cancel)
            yield SystemCommand(
                "Undo tidy run", "Move this tidy run's files back", screen.action_undo
            )

    def chat_model(self) -> Any:
        """The chat model for agent runs started here, or ``None`` when none
        is set up (call on a worker thread: it may read the keyring).

        Raises:
            SecretsError, KeyFileError: the API key cannot be read.
        """
        if self._model is not None:
            return self._model
        services = self.services
        return None if services is None else services.model()

    def now(self) -> float:
        """The engine's clock for display (UTC epoch seconds), never raising
        (:func:`~desktop_app.flow.clock.reading`: the system's while the
        clock is skewed); the system's until it is open."""
        engine = self.engine
        if engine is not None:
            return reading(engine.clock)
        return self._clock.now() if self._clock is not None else time.time()

    # -- notices and reads -----------------------------------------------

    def deliver_screenshot(
        self,
        filename: str | None = None,
        path: str | None = None,
        time_format: str | None = None,
    ) -> str | None:
        """Textual's Screenshot command, saved where it can be: the user's
        Downloads folder when it exists (Textual's default), else
        :func:`screenshot_dir` (created 0700), never failing for want of
        ``~/Downloads``.

        The file is created mode 0600 before Textual writes it (Textual's
        writer opens it ``"w"``, which keeps an existing file's mode): a
        screenshot shows runs' questions, file names and conversations, as
        private as the database they come from, and ``~/Downloads`` is
        usually a folder others may read."""
        if path is None:
            path = str(screenshot_dir())
        if not self.is_web:
            if not filename:
                filename = generate_datetime_filename(self.title, ".svg", time_format)
            target = os.path.join(os.path.expanduser(path), filename)
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                pass  # Textual's own write fails the same way and says so (a toast)
            else:
                try:
                    os.fchmod(fd, 0o600)  # a file of that name made earlier keeps its mode
                finally:
                    os.close(fd)
        return super().deliver_screenshot(filename, path, time_format)

    def action_cursor(self, direction: str) -> None:
        """``j``/``k``: move the focused table's (or list's) cursor down/up."""
        move = getattr(self.focused, f"action_cursor_{direction}", None)
        if callable(move):
            move()

    def say(self, message: str, severity: SeverityLevel = "information") -> None:
        """Notify the user and keep the notice in :attr:`notices` (thread-safe)."""
        self.notices.append(Notice(message, severity))
        self.notify(
            message, severity=severity, markup=False, timeout=12 if severity == "error" else None
        )

    def read(self, op: Callable[[CheckpointStore], T], *, quiet: bool = False) -> T | None:
        """Run a read on the UI's store; a Flowdesk error becomes a notice and ``None``."""
        store = self.reader
        if store is None:
            return None
        try:
            return op(store)
        except FlowdeskError as exc:
            message = str(exc)
            if isinstance(exc, DatabaseUnreachableError):  # the outage's banner says it
                return None
            if not quiet and message != self._last_read_error:
                self._last_read_error = message
                self.say(message, "error")
            return None

    # -- startup ---------------------------------------------------------

    def on_mount(self) -> None:
        theme = self.settings.theme
        if theme is not None:
            if theme in self.available_themes:
                self.theme = theme
            else:
                self.say(f"Unknown theme {theme!r} in the settings; using the default.", "warning")
        self._theme_ready = True
        self._give_back_the_gate_on_ctrl_z()
        self.set_interval(self.POLL_S, self._poll)
        self.set_interval(self.CLOCK_S, self._check_clock)
        self._watch_the_terminal()
        self._startup()

    def _watch_the_terminal(self) -> None:
        """Quit as on ``q`` once the terminal goes away with no ``SIGHUP``
        to this process (:mod:`desktop_app.app.terminal`), instead of running
        on, unseen, with Textual's input thread spinning."""
        fd = None if self.is_headless else terminal.terminal_fd()
        if fd is None:
            return

        def check() -> None:
            if terminal.hung_up(fd):
                log.warning("the terminal went away (hung up): quitting as on q")
                self.exit()

        self.set_interval(terminal.CHECK_S, check)

    def _give_back_the_gate_on_ctrl_z(self) -> None:
        """Ctrl-Z (SIGTSTP): Textual's driver restores the terminal and stops
        the process; before that, give back the SQLite write gate this
        process keeps between its writes, so other processes' writers go on
        while the app is stopped
        (:func:`~desktop_app.store.write_gate.stop_gives_back_the_gate`)."""
        import signal

        from desktop_app.store.write_gate import stop_gives_back_the_gate

        textual = signal.getsignal(signal.SIGTSTP)
        if callable(textual):
            stop_gives_back_the_gate(textual)

    def watch_theme(self, theme: str) -> None:
        """Save a theme chosen in the app (the command palette's "Change
        theme") to the settings file, so the next launch opens with it."""
        if not getattr(self, "_theme_ready", False) or theme == self.settings.theme:
            return
        from desktop_app.app.screens.settings import save_settings

        path = config_file()
        try:
            save_settings(path, {"theme": theme}, {})
        except Exception as exc:  # the theme still changes; only saving failed
            self.say(f"Theme not saved to {path}: {exc}", "warning")
            return
        self.settings = self.settings.model_copy(update={"theme": theme})

    @work(thread=True, group="startup", name="open database")
    def _startup(self) -> None:
        settings = self.settings
        events = EventBus()
        events.subscribe(self._on_engine_event)
        waited = False
        while True:
            try:
                services = open_services(
                    settings, flows=self._custom_flows, events=events, clock=self._clock
                )
                break
            except (DatabaseLockedError, ServerUnreachableAtOpenError) as exc:
                # another process writes for longer than the busy timeout (a
                # long migration, a sqlite3 shell left in a transaction), or the
                # database server is down or starting: the database is fine, so
                # wait for it, saying so, instead of giving up
                if self._quitting:
                    return
                if not waited:
                    waited = True
                    unreachable = isinstance(exc, ServerUnreachableAtOpenError)
                    self.post_message(StartupWaiting(str(exc), unreachable))
                until = time.monotonic() + STARTUP_RETRY_S
                while time.monotonic() < until and not self._quitting:
                    time.sleep(0.05)
            except FlowdeskError as exc:
                self.post_message(StartupFailed(str(exc)))
                return
            except Exception as exc:  # never a traceback in the user's face
                self.post_message(
                    StartupFailed(
                        f"could not open {redact(settings.db_path)}: {type(exc).__name__}: {exc}"
                    )
                )
                return
        self.services = services
        self._opened = opened_file(settings.db_path)  # compared with its path at every poll
        log.info("app: database opened, engine %s", services.engine.owner)
        self.schema = services.schema
        # a skewed clock: read-only (the engine's clock would refuse every write)
        self.clock_skew = skew_error(services.engine.clock)
        self.engine = services.engine
        self.reader = services.reader
        for store in (services.reader, services.engine.store):
            if "server_outages" in store.capabilities:  # said at once, in the banner
                cast(ServerOutages, store).on_unreachable(self._unreachable)
        if self._quitting:  # the app quit while we were opening
            services.close()
            return
        try:
            # PostgreSQL pushes what other machines change; the poll stays the fallback
            services.watch_changes(self._pushed)
        except FlowdeskError as exc:
            self.say(f"Changes made elsewhere show within {self.POLL_S:g} s: {exc}", "warning")
        self.post_message(EngineReady())

    def _unreachable(self, exc: FlowdeskError) -> None:
        """A store's try found the database server unreachable (called in
        the thread that tried, the UI's own too: posted, never run here)."""
        self.post_message(DatabaseAway(str(exc)))

    def on_database_away(self, message: DatabaseAway) -> None:
        """The banner says the server is away until a probe reaches it again
        (:meth:`_probe`); the UI stops reading it meanwhile."""
        if self.away is not None or self._quitting:
            return
        from desktop_app.bootstrap import parse_database

        where = parse_database(self.settings.db_path).shown
        self.away = (
            f"The database server ({where}) cannot be reached: the app keeps trying and "
            "shows what changed once it is back. What was saved there stays saved; runs "
            "go on from their last checkpoint. Starting, answering or resuming may be "
            "refused until then."
        )
        log.warning("app: the database server cannot be reached: %s", message.error)
        self.runs_screen.banner.show_error(self.away)
        if self.screen is not self.runs_screen:  # the banner is not on screen: once, here
            self.say(f"The database server ({where}) cannot be reached; the app keeps trying.",
                     "error")  # fmt: skip

    @work(thread=True, exclusive=True, group="probe", name="probe the database server")
    def _probe(self) -> None:
        """One read on the UI's store (at most ``UI_WAIT_S`` seconds):
        :class:`DatabaseBack` when it went through."""
        reader = self.reader
        if reader is None:
            return
        try:
            reader.data_version()
        except FlowdeskError:
            return
        self.post_message(DatabaseBack())

    def on_database_back(self, _message: DatabaseBack) -> None:
        was = self.away
        if was is None:
            return
        self.away = None
        banner = self.runs_screen.banner
        if banner.message == was:
            banner.show_error(None)
        log.info("app: the database server is back")
        self.say("The database server can be reached again.")
        self._data_version = None
        self._poll()

    def _pushed(self) -> None:
        """The store pushed a change (its watcher thread): check now, not at the next poll."""
        with contextlib.suppress(RuntimeError):  # the app is closing
            self.call_from_thread(self._poll)

    def exit(
        self,
        result: None = None,
        return_code: int = 0,
        message: Any = None,
    ) -> None:
        """Quit; the return code is 1 when the database could not be opened."""
        if self.startup_error and return_code == 0:
            return_code = 1
        super().exit(result, return_code, message)

    def on_startup_waiting(self, message: StartupWaiting) -> None:
        log.warning("app: the database could not be opened yet, trying again: %s", message.error)
        if message.unreachable:
            self._startup_waiting = (
                f"{message.error} Flowdesk tries to open it again every {STARTUP_RETRY_S:g} s "
                "until the server answers (q quits)."
            )
        else:
            self._startup_waiting = (
                f"{message.error.removesuffix(DatabaseLockedError.ADVICE)} "
                f"Flowdesk tries to open it again every {STARTUP_RETRY_S:g} s until it is free "
                "(q quits)."
            )
        self.runs_screen.banner.show_error(self._startup_waiting)

    def on_startup_failed(self, message: StartupFailed) -> None:
        from desktop_app.bootstrap import on_postgres

        self.startup_error = message.error
        self.runs.open_gate()
        self.say(message.error, "error")
        screen = self.runs_screen
        screen.banner.show_error(f"Cannot open the database: {message.error}")
        if on_postgres(self.settings.db_path):
            screen.status_line.say(
                "Nothing was changed. Quit with q, do what the message says, and start "
                "Flowdesk again (or with --db naming another database)."
            )
            return
        screen.status_line.say(
            "Nothing was changed. Quit with q and start Flowdesk with --db PATH "
            "or FLOWDESK_DB_PATH pointing at a usable file."
        )

    def on_engine_ready(self, _message: EngineReady) -> None:
        banner = self.runs_screen.banner
        if self._startup_waiting is not None and banner.message == self._startup_waiting:
            banner.show_error(None)  # the lock was given back: opened now
        self._startup_waiting = None
        report = self.schema
        assert report is not None
        assert self.services is not None
        for problem in self.services.flow_problems:  # the other flows work
            self.say(problem, "error")
        if report.applied:
            n = len(report.applied)
            self.say(f"Applied the schema ({plural(n, 'file')}) to {report.path}")
            status = f"Database {report.path}: schema applied now ({plural(n, 'file')})."
        else:
            status = f"Database {report.path}: schema up to date."
        skew = self.clock_skew
        if skew is not None:
            self.runs_screen.banner.show_error(skew_notice(skew))
            self.runs_screen.status_line.say(
                f"Database {report.path}: read-only while this computer's clock is off."
            )
        else:
            self.runs_screen.status_line.say(status, for_s=self.STATUS_S)
        self._poll()
        # The first page is painted before delivery, recovery and the launch
        # report start (runs still wait for the recovery gate meanwhile).
        self.call_after_refresh(self._after_first_page)

    def _after_first_page(self) -> None:
        if self._quitting:
            return
        if self.clock_skew is not None:  # nothing that writes: no delivery, timer, recovery
            self._launched = "read-only"
            self.runs.open_gate()
            return
        self._start_writers()

    def _start_writers(self) -> None:
        """Start what writes on its own while the app is open: outbox
        delivery, timers (when this app executes runs) and, the first time,
        the launch recovery (else the launch checks)."""
        first = self._launched not in ("writers", "stopped")
        self._launched = "writers"
        # on a database that workers serve, the app resumes nothing, fires no
        # deadline and makes no side effect (they do: a tidy's moves are made
        # on the machine of the worker that ran it, not this one's)
        executes = self.engine is not None and self.engine.executes
        if executes:
            self._start_delivery()
            self._start_timers()
        if not first:
            return
        if self.settings.recover_on_launch and executes:
            self._start_recovery()
        else:
            self.runs.open_gate()
            check_after_launch(self)  # S51: runs left by an older flow version

    def _stop_writers(self) -> None:
        """Stop outbox delivery and timers (without waiting for a pass in
        progress: its writes are refused by the engine's clock anyway)."""
        self._launched = "stopped"
        for pump in (self.outbox, self.timers):
            if pump is not None:
                pump.stop(timeout_s=0)
        self.outbox = self.timers = None

    # -- the clock, checked again while open ---------------------------------

    def _check_clock(self) -> None:
        """Compare this computer's clock with the database's again (every
        :attr:`CLOCK_S`; a laptop woke, NTP or a person moved the clock): one
        that went off turns the app read-only as a skewed launch does (the
        banner, refused actions, no delivery nor timers), and one set right
        again clears the banner and starts them (with the launch recovery a
        skewed launch skipped)."""
        engine = self.engine
        if engine is None or self._launched is None or self._quitting or not self.is_running:
            return
        if self.away is not None:  # the database's clock is not asked on the UI thread
            return
        skew = skew_error(engine.clock)
        was = self.clock_skew
        if skew is None and was is None:
            return
        banner, status = self.runs_screen.banner, self.runs_screen.status_line
        if skew is not None:
            self.clock_skew = skew
            if banner.message != skew_notice(skew):
                banner.show_error(skew_notice(skew))
            if was is None:
                log.warning("app: %s", skew)
                self._stop_writers()
                self.say(f"The clock moved while the app was open. {skew_notice(skew)}", "error")
                status.say("Read-only while this computer's clock is off.")
            self._reload_all()  # ages shown by the database's clock
            return
        self.clock_skew = None
        if was is not None and banner.message == skew_notice(was):
            banner.show_error(None)
        right = (
            "This computer's clock is right again: answering, starting, resuming and "
            "canceling work again."
        )
        log.info("app: the clock is right again")
        self.say(right)
        status.say(right, for_s=self.STATUS_S)
        self._reload_all()
        if self.file_gone is None:
            self._start_writers()

    # -- the database file, still the one at its path ------------------------

    def _check_file(self) -> None:
        """Compare the SQLite file opened with the one at its path (one
        ``os.stat``, at every poll): moved, deleted or replaced, the app turns
        read-only as with a skewed clock (the banner, refused actions, no
        delivery nor timers) rather than write on into a file that is not at
        the path; put back, it goes on."""
        opened = self._opened
        if opened is None or self._launched is None or self._quitting:
            return
        change = opened.change()
        notice = None if change is None else file_notice(opened.path, change)
        was = self.file_gone
        if notice == was:
            return
        banner, status = self.runs_screen.banner, self.runs_screen.status_line
        self.file_gone = notice
        if notice is not None:
            banner.show_error(notice)
            if was is None:
                log.warning("app: %s", notice)
                if self._launched == "writers":  # a skewed launch started none
                    self._stop_writers()
                self.say(notice, "error")
                status.say(f"Read-only: the database file {opened.path} is not at its path.")
            return
        if banner.message == was:
            banner.show_error(None)
        back = (
            f"The database file {opened.path} is back: answering, starting, resuming and "
            "canceling work again."
        )
        log.info("app: the database file is back at its path")
        self.say(back)
        status.say(back, for_s=self.STATUS_S)
        self._data_version = None  # reloaded from the file as it is now
        if self.clock_skew is None:
            self._start_writers()

    # -- outbox delivery (S72) --------------------------------------------

    def _start_delivery(self) -> None:
        """Deliver outbox intents while the app is open, as ``flowdesk agent``
        does: anything approved here takes effect without another process."""
        services = self.services
        assert services is not None
        self.outbox = OutboxPump(
            services.dispatcher.dispatch,
            every_s=self.OUTBOX_S,
            on_delivered=lambda n: self.post_message(OutboxDelivered(n)),
            on_error=lambda text: self.say(text, "warning"),
        )
        self.outbox.start()

    def on_outbox_delivered(self, _message: OutboxDelivered) -> None:
        self._reload_all()

    # -- timers and deadlines ----------------------------------------------

    def _start_timers(self) -> None:
        """Fire due timers and deadlines and deliver arrived signals and
        events while the app is open, as ``flowdesk agent`` does (its
        ``Engine.tick``): a sleeping run goes on and an expired question
        times out (and leaves the inbox) without another process. Each due
        run is woken on a worker once claimed here; its lease decides
        between this app and other processes."""
        engine, services = self.engine, self.services
        assert engine is not None and services is not None
        store = engine.store

        def refused(run_id: str, exc: FlowdeskError) -> None:
            why = app_version_refusal(exc) if isinstance(exc, FlowVersionMismatchError) else exc
            self.say(
                f"Run {short_id(run_id)} cannot go on in this app (its timers and deadlines "
                f"are not fired here): {why}",
                "error",
            )

        refusals = Refusals("the app", log, refused)

        def due() -> list[str]:
            # as Engine.tick: a delete_on_success run kept until its side
            # effects were delivered (by the app's outbox pump) goes now
            engine.delete_delivered_runs()
            return store.wakeable_runs(engine.clock.now())

        self.timers = TimerPump(
            due=due,
            next_deadline=store.next_deadline,
            now=engine.clock.now,
            fire=lambda run_id: self.controller.fire(run_id, refusals.refuse),
            skip=lambda: set(refusals.ids),
            every_s=self.TIMERS_S,
            before_first=self.runs.wait_for_gate,
            on_error=lambda text: self.say(text, "warning"),
        )
        self.timers.start()

    # -- launch recovery -------------------------------------------------

    def _start_recovery(self) -> None:
        everything = self.read(lambda s: s.list_runs(statuses=INTERRUPTED)) or []
        everything = [r for r in everything if not self._other_mode(r)]
        interrupted = [
            r for r in everything if recovery_policy(self.settings, r.flow_name) == "auto"
        ]
        now = self.now()
        asking = [
            r
            for r in everything
            if recovery_policy(self.settings, r.flow_name) == "ask"
            and left_over(r, now)  # not one a live process runs
        ]
        if asking:
            flows = ", ".join(sorted({r.flow_name for r in asking}))
            self.say(
                f"{plural(len(asking), 'interrupted run')} of {flows} "
                f"{'waits' if len(asking) == 1 else 'wait'} for you: "
                "select one and press r to resume it"
            )
            # the toast goes; the banner stays until each is resumed or canceled
            self.runs_screen.ask_about({r.run_id: r.flow_name for r in asking})
        services = self.services
        agents = None if services is None else services.services.agents
        agent_runs = [] if agents is None else interrupted_agent_runs(agents, time.time())
        if not interrupted and not agent_runs and not (agents and _moved_agent_runs(agents)):
            self.runs.open_gate()
            check_after_launch(self)  # S51: runs left by an older flow version
            return
        ids = frozenset(r.run_id for r in interrupted)
        ids = frozenset(i for i in ids if self.runs.claim(i))
        # a run a live process holds is tried all the same (its holder may
        # end meanwhile) but not announced as being resumed
        fresh = sum(left_over(r, now) for r in interrupted if r.run_id in ids)
        if fresh + len(agent_runs):
            text = f"Resuming {plural(fresh + len(agent_runs), 'interrupted run')}…"
            self.say(text)
            self.runs_screen.status_line.say(text)
        self._recover(ids)

    def _other_mode(self, run: RunRecord) -> bool:
        """A run of another mode of a registered flow that this app has no
        such mode of (a flow of the user's naming a variant it does not
        register): the process with that mode resumes it, not this app. The
        built-in ``digest --model`` is registered here
        (:func:`~desktop_app.bootstrap.register_modes`), so its runs are
        resumed here."""
        engine = self.engine
        flow = None if engine is None else engine.flows.get(run.flow_name)
        if engine is None or flow is None or run.flow_version not in flow.variants:
            return False
        return not engine.runs_version(run.flow_name, run.flow_version)

    @work(thread=True, group="recover", name="resume interrupted runs")
    def _recover(self, claimed: frozenset[str]) -> None:
        engine = self.engine
        assert engine is not None
        outcomes: list[RunResult | AgentResponse | BaseException] = []

        def on_result(run: RunRecord, outcome: RunResult | BaseException) -> None:
            self.runs.open_gate()
            self.runs.release(run.run_id)
            outcomes.append(outcome)
            total = max(len(claimed), len(outcomes))
            progress = f"Resuming interrupted runs: {len(outcomes)} of {total} done…"
            with contextlib.suppress(Exception):  # the app may be closing
                self.call_from_thread(self.runs_screen.status_line.say, progress)
            if isinstance(outcome, RunLeasedError):
                pass  # a live process runs it: the summary counts it, no error
            elif isinstance(outcome, FlowVersionMismatchError):
                pass  # the launch report lists it, with what can be done
            elif isinstance(outcome, CheckpointDecodeError):
                said = damaged_in_app(outcome)
                self.say(f"Run {short_id(run.run_id)} was not resumed: {said}", "error")
            elif isinstance(outcome, BaseException):
                self.say(f"Run {short_id(run.run_id)} was not resumed: {outcome}", "error")
            elif outcome.status == "failed":
                self.say(f"Run {short_id(run.run_id)} failed: {outcome.error}", "error")
            self.post_message(RunChanged(run.run_id))

        try:
            engine.recover(
                on_result=on_result,
                only=lambda r: (
                    recovery_policy(self.settings, r.flow_name) == "auto"
                    and not self._other_mode(r)
                ),
            )
        except FlowdeskError as exc:
            self.say(f"Resuming interrupted runs stopped: {exc}", "error")
        except Exception as exc:
            self.say(f"Resuming interrupted runs stopped: {type(exc).__name__}: {exc}", "error")
        finally:
            self.runs.open_gate()
            self.runs.release(*claimed)
        self._recover_agent_runs(outcomes)
        summary, problem = recovery_summary(outcomes, self._unknown_outcomes(outcomes))
        self.recovery = summary
        self.say(summary, "warning" if problem else "information")
        self.post_message(RecoveryFinished(summary, problem))

    def _unknown_outcomes(
        self, outcomes: list[RunResult | AgentResponse | BaseException]
    ) -> list[str]:
        """The resumed agent runs with a tool call whose outcome is unknown,
        read from their journal as ``flowdesk show`` reads it (on the
        recovery worker)."""
        services = self.services
        if services is None:
            return []
        agents = services.services.agents
        found: list[str] = []
        for outcome in outcomes:
            if not isinstance(outcome, AgentResponse):
                continue
            try:
                if unknown_outcome_tools(agents.tool_results(outcome.run_id)):
                    found.append(outcome.run_id)
            except FlowdeskError as exc:  # say it rather than hide what may be unknown
                self.say(f"Agent run {short_id(outcome.run_id)}: {exc}", "error")
        return found

    def _recover_agent_runs(
        self, outcomes: list[RunResult | AgentResponse | BaseException]
    ) -> None:
        """Resume interrupted agent runs with the tools they recorded (on the
        recovery worker, after the flow runs), adding their outcomes."""
        services = self.services
        if services is None:
            return

        def on_result(run: Any, outcome: AgentResponse | BaseException) -> None:
            outcomes.append(outcome)
            if isinstance(outcome, RunLeasedError):
                pass  # a live process runs it: the summary counts it, no error
            elif isinstance(outcome, BaseException):
                self.say(f"Agent run {short_id(run.run_id)} was not resumed: {outcome}", "error")
            elif outcome.status == "failed":
                self.say(f"Agent run {short_id(run.run_id)} failed: {outcome.error}", "error")

        try:
            model = self.chat_model()
        except FlowdeskError as exc:
            model, problem = None, str(exc)
        else:
            problem = "no model is set up (Settings, ctrl+s)"
        agents = services.services.agents
        recover_agent_runs(
            agents, self.settings, model, time.time(), on_result=on_result, no_model=problem
        )
        for run in _moved_agent_runs(agents):  # counted as moved flow runs are
            owner = run.lease_owner or ""
            outcomes.append(AgentRunLeasedError(run.run_id, owner, run.lease_expires_at))

    def on_recovery_finished(self, message: RecoveryFinished) -> None:
        # a problem (a failure, an unknown outcome) stays until the next notice
        keep = None if message.problem else self.STATUS_S
        self.runs_screen.status_line.say(message.summary, for_s=keep)
        self._reload_all()
        check_after_launch(self)  # S51: runs left by an older flow version

    # -- starting and resuming runs --------------------------------------

    def action_inbox(self) -> None:
        """Every run waiting for a person (approve, reject, answer)."""
        if isinstance(self.screen, ModalScreen | InboxScreen):
            return
        if self.controller.require_engine() is not None:
            self.push_screen(InboxScreen())

    def action_agent_runs(self) -> None:
        """Agent runs: conversations, tool calls and tool results."""
        from desktop_app.app.screens.agent_runs import AgentRunsScreen  # not on the first paint

        if isinstance(self.screen, ModalScreen | AgentRunsScreen):
            return
        if self.controller.require_engine() is not None:
            self.push_screen(AgentRunsScreen())

    def action_send_signal(self) -> None:
        """Send a signal (stored first, then delivered to a run waiting on it)."""
        if self.controller.require_writer() is None or isinstance(self.screen, ModalScreen):
            return
        wait = self._signal_wait_in_view()
        if wait is None:
            self.push_screen(SignalScreen(), self._signal_chosen)
            return
        run_id = wait.wait_id.partition(":")[0]
        waiting = (
            f"Run {short_id(run_id)} waits for signal {wait.name} {escape_key(wait.key or '')}."
        )
        self.push_screen(
            SignalScreen(wait.name or "", wait.key or "", waiting=waiting), self._signal_chosen
        )

    def _signal_wait_in_view(self) -> Wait | None:
        """The signal wait of the run on screen (the detail's run, or the
        selected row of the runs table), to prefill the signal form."""
        screen = self.screen
        if isinstance(screen, RunDetailScreen):
            run_id: str | None = screen.run_id
        elif isinstance(screen, RunsScreen):
            run_id = screen.selected_run_id()
        else:
            run_id = None
        if run_id is None:
            return None
        rid = run_id
        latest = self.read(lambda s: s.latest(rid), quiet=True)
        waits = latest.waits if latest is not None else ()
        return next((w for w in waits if w.kind == "signal"), None)

    def _signal_chosen(self, request: SignalRequest | None) -> None:
        if request is not None:
            self._send_signal(request)

    @work(thread=True, group="signal", name="send signal")
    def _send_signal(self, request: SignalRequest) -> None:
        engine = self.engine
        assert engine is not None
        name, key = request.name, request.key
        try:
            before = signal_waits(engine.store, name, key)
            signal_id = engine.signal(name, key, request.payload)
            reach = signal_reach(engine.store, signal_id, name, key, before)
        except FlowdeskError as exc:
            said = str(exc)  # a refused payload's error already says it was not sent
            self.say(said if "not sent" in said else f"The signal was not sent: {said}", "error")
            return
        stored = f"Signal {name} {escape_key(key)} stored (#{signal_id})"
        still = ", ".join(short_id(r) for r in reach.still_waiting)
        n = len(reach.still_waiting)
        if reach.taken_by is not None and reach.refused is not None:
            self.say(
                f"{stored}; run {short_id(reach.taken_by)} refused it and still waits: "
                f"{reach.refused}",
                "warning",
            )
        elif reach.taken_by is not None:
            others = (
                f"; {plural(n, 'other run')} still {'waits' if n == 1 else 'wait'} for it "
                f"({still}): a signal is taken by one wait, send one for each"
                if n
                else ""
            )
            self.say(f"{stored}, delivered to run {short_id(reach.taken_by)}{others}")
        elif n:
            waiting = plural(n, "waiting run")
            self.say(f"{stored}, kept for the first of {waiting} to take it: {still}")
        else:  # a misspelt name or key is stored too: say so, as the CLI does
            self.say(f"{stored}, but {no_signal_waiter(name, key)}", "warning")

    def action_start_flow(self) -> None:
        """Start any registered flow from a form of its declared inputs."""
        engine = self.controller.require_writer()
        if engine is not None and not isinstance(self.screen, ModalScreen):
            self.push_screen(StartFlowScreen(dict(engine.flows)))

    def action_help(self) -> None:
        """Show (or close) every key of the current screen."""
        screen = self.screen
        if isinstance(screen, HelpScreen):
            screen.dismiss(None)
            return
        # what the keys are of: the screen when it names itself, and the
        # database as the header names it
        where = f"database {self.sub_title or header(self.settings)}"
        title = f"Keys — {screen.sub_title} — {where}" if screen.sub_title else f"Keys — {where}"
        self.push_screen(HelpScreen(title, keys_of(screen)))

    def action_settings(self) -> None:
        from desktop_app.app.screens.settings import SettingsScreen  # not on the first paint

        if not isinstance(self.screen, ModalScreen):
            self.push_screen(SettingsScreen())

    def on_branch_requested(self, message: BranchRequested) -> None:
        """Replay or fork a checkpoint as a new run (asked by a screen)."""
        message.stop()
        self.controller.branch(
            message.reply_to, message.checkpoint_id, message.run_id, message.changes
        )

    # -- live updates ----------------------------------------------------

    def _on_engine_event(self, event: Event) -> None:
        """EventBus subscriber: runs on the engine's (worker) thread.

        Cheap on purpose (the run waits for it): no store reads, and at most
        one message per refresh for progress and step events, which are
        buffered until the UI takes them (:meth:`_flush_progress`).
        """
        if isinstance(event, RunStarted):
            self.runs.open_gate()
            self.controller.accepted(event.run_id)  # a run answered from the app goes on
        if isinstance(event, StepFinished | RunFinished) and self.outbox is not None:
            self.outbox.wake()  # the step may have queued outbox intents
        if isinstance(event, RunProgress | StepFinished):
            with self._progress_lock:
                first = not self._progress and not self._changed
                if isinstance(event, RunProgress):
                    self._progress[event.run_id] = (event.done, event.total)
                else:
                    self._changed.add(event.run_id)
            if first:
                self.post_message(ProgressTick())
        elif isinstance(event, RunStarted | RunFinished):
            self.post_message(RunChanged(event.run_id))

    def on_progress_tick(self, _message: ProgressTick) -> None:
        """Show buffered progress now, or once ``REFRESH_S`` passed since the last time."""
        wait = self.throttle.request()
        if wait is None:
            return  # a refresh is scheduled; it shows the latest values
        if wait > 0:
            self.set_timer(wait, self._flush_progress)
        else:
            self._flush_progress()

    def _flush_progress(self) -> None:
        self.throttle.flushed()
        with self._progress_lock:
            progress, self._progress = self._progress, {}
            changed, self._changed = self._changed, set()

        now = self.now()
        for run_id, (done, total) in progress.items():
            self.meter.record(run_id, done, total, now)

        def show(screen: RunsScreen | RunDetailScreen) -> None:
            for run_id, (done, total) in progress.items():
                screen.set_progress(run_id, done, total)
            for run_id in changed:
                screen.refresh_run(run_id)

        self._update_screens(show)

    def on_run_changed(self, message: RunChanged) -> None:
        self._update_screens(lambda screen: screen.refresh_run(message.run_id))

    def _poll(self) -> None:
        """Reload when anyone committed since the last look (``PRAGMA
        data_version``); first, whether the database file is still the one
        at its path (:meth:`_check_file`)."""
        if self.reader is None or not self.is_running:
            return
        self._check_file()
        if self.away is not None:  # not on the UI thread: a worker looks for it
            self._probe()
            return
        version = self.store_version(quiet=False)
        if version is not None and version == self._data_version:
            return
        self._data_version = version
        self._reload_all()

    def store_version(self, *, quiet: bool = True) -> int | None:
        """The store's ``data_version`` (changes whenever anyone commits), or
        ``None`` when the database is not open or cannot be read (or its
        server cannot be reached: not asked again until it is back). Screens
        poll it to reload only after a commit."""
        if self.away is not None:
            return None
        return self.read(lambda store: store.data_version(), quiet=quiet)

    def _reload_all(self) -> None:
        self._update_screens(lambda screen: screen.data_changed())

    def _update_screens(self, update: Callable[[RunsScreen | RunDetailScreen], None]) -> None:
        """Apply ``update`` to every screen that shows runs; nothing once the
        app is shutting down (its screens are losing their widgets while a
        late timer or message may still arrive)."""
        if not self.is_running:
            return
        for screen in self._live_screens():
            update(screen)

    # -- shutdown --------------------------------------------------------

    async def action_quit(self) -> None:
        """``q``. With an agent run's tool call in flight here (a drive,
        :mod:`desktop_app.agent.drives`) or a flow run's step (the engine
        executes it), the app says so, asks them to stop and quits once they
        did, the call's result or the step's checkpoint saved (at most
        :data:`QUIT_WAIT_S`), instead of closing its database under them
        (the call's outcome unknown; the step's lease no longer renewed
        while it runs on) or sitting on a blank terminal while they end;
        ``q`` again quits at once (the call's outcome unknown, the step run
        again at the next launch, as after a crash)."""
        if self._quit_asked:
            self._quit_now = True
        steps = self._steps_in_flight()
        if self._quit_now or (drives.in_flight() == 0 and not steps):
            self.exit()
            return
        self._quit_asked = True
        if steps:
            self.say(
                f"Quitting once the step in flight has ended and its checkpoint is saved (at "
                f"most {QUIT_WAIT_S:g} s; run {', '.join(short_id(r) for r in steps)}); q again "
                "quits now and the step runs again at the next launch.",
                "warning",
            )
        else:
            self.say(
                f"Quitting once the tool call in flight has ended and its result is saved (at "
                f"most {QUIT_WAIT_S:g} s); q again quits now and leaves its outcome unknown.",
                "warning",
            )
        self._quit_after_the_drives()

    def _steps_in_flight(self) -> list[str]:
        """The flow runs whose step this app's engine executes now."""
        return sorted(self.engine.executing()) if self.engine is not None else []

    @work(thread=True, group="quit", name="quit after the tool calls in flight")
    def _quit_after_the_drives(self) -> None:
        deadline = time.monotonic() + QUIT_WAIT_S
        if self.engine is not None:
            self.engine.stop()  # each run stops before its next step, its lease kept till then
        drives.stop_all(QUIT_WAIT_S)
        while self._steps_in_flight() and time.monotonic() < deadline and not self._quit_now:
            time.sleep(0.05)
        with contextlib.suppress(RuntimeError):  # quit meanwhile (q again)
            self.call_from_thread(self.exit)

    def on_unmount(self) -> None:
        # A run still being driven stops at its next checkpoint (the closed
        # store refuses to save it) and is resumed on the next launch; the
        # outbox pump finishes its pass first (an intent it was sending is
        # reconciled by the next dispatcher). A Pydantic AI run an answer
        # drives here stops once its tool call in flight ended and its result
        # is saved, before the store closes (desktop_app.agent.drives).
        self._quitting = True
        self.runs.open_gate()
        if self.timers is not None:
            self.timers.stop()
        if self.outbox is not None:
            self.outbox.stop()
        left = drives.stop_all(0.0 if self._quit_now else QUIT_WAIT_S)
        if left:
            log.warning(
                "quit with %d agent run(s) still in a tool call after %s s", left, QUIT_WAIT_S
            )
        if self.services is not None:
            self.services.close()


def header(settings: Settings) -> str:
    """The header's subtitle: the database (a URL's password never shown)
    and, unless it is ``default``, the scope the app shows and saves runs
    under (``t.db — scope team``)."""
    db = redact(str(settings.db_path))
    return db if settings.scope == "default" else f"{db} — scope {settings.scope}"


def _moved_agent_runs(agents: Any) -> list[Any]:
    """The interrupted top-level agent runs ``flowdesk db copy`` moved away
    (never listed as interrupted: their lease says where they went)."""
    return [
        run
        for run in agents.list(statuses=("running", "rate_limited"))
        if run.parent_run_id is None and moved_to(run.lease_owner) is not None
    ]
