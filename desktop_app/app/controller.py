"""The app's domain actions on runs, in one small object screens call.

:class:`Controller` starts, resumes, cancels, answers, forks and opens runs
for every screen. It trusts the engine: resume, cancel and answer call
``Engine.resume``/``cancel``/``resume_with`` in a thread worker (the UI
never blocks) and show the engine's typed error, as the CLI does, instead
of reading the run first to repeat the engine's guards. The one thing
decided before the engine is called is what the screen already shows: a
run shown ``completed``, ``canceled`` or ``timed_out`` stays so (those are
final), so resuming or canceling it is refused at once, without a read
and without a question.

Outcomes come back as notices (:meth:`Host.say`) and messages:
:class:`~desktop_app.app.messages.RunChanged` to the app,
:class:`~desktop_app.app.messages.AnswerAccepted`/``AnswerRefused`` to the
answer dialog, :class:`~desktop_app.app.messages.BranchFinished` to the
screen that asked for a replay or fork.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import ValidationError
from textual.app import App
from textual.message_pump import MessagePump
from textual.notifications import SeverityLevel

from desktop_app.app.format import app_version_refusal, short_id, skew_notice
from desktop_app.app.host import Host, host
from desktop_app.app.messages import AnswerAccepted, AnswerRefused, BranchFinished, RunChanged
from desktop_app.app.runs import RunController
from desktop_app.app.screens.answer import AnswerScreen, register_advice
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.fork import validation_lines
from desktop_app.app.screens.new_run import NewDigestScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.widgets.run_summary import damaged_in_app
from desktop_app.errors import (
    CheckpointDecodeError,
    CheckpointNotFoundError,
    ConfigError,
    DiskFullError,
    FlowdeskError,
    FlowVersionMismatchError,
    InputError,
    InputPendingError,
    RunLeasedError,
    RunStateError,
    UnknownFlowError,
    WaitAlreadyResolvedError,
)
from desktop_app.flow import Engine, RunResult
from desktop_app.flow.outbox import WITHDRAWN_AFTER_END
from desktop_app.flows import live_twin, single_flight
from desktop_app.flows.digest import DigestInput
from desktop_app.flows.tidy_undo import (
    UndoneElsewhere,
    undo_list_of,
    undo_summary,
    undo_tidy_run,
)
from desktop_app.runs_view import (
    INTENT_NOUNS,
    agent_executor_text,
    agent_status_words,
    display_status,
    ended_withdrawn_text,
    flow_executor_text,
    withdrawn_text,
)
from desktop_app.store.protocol import AGENT_ENDED, RunRecord, RunStatus
from desktop_app.store.records import AgentRun
from desktop_app.words import plural

#: Run statuses ``Engine.recover`` resumes at launch.
INTERRUPTED: tuple[RunStatus, ...] = ("pending", "running")
#: Final run statuses: a run never leaves them (``Engine.cancel`` refuses them).
FINISHED: tuple[RunStatus, ...] = ("completed", "canceled", "timed_out")


class Controller:
    """Start, resume, cancel, answer, fork and open runs (call on the UI
    thread); the :class:`~desktop_app.app.host.Actions` screens use.

    Args:
        app: the running app (``FlowdeskApp``): screens are pushed and
            workers run on it.
        runs: the app's claims and launch-recovery gate (at most one driver
            per run id here).
    """

    def __init__(self, app: App[Any], runs: RunController) -> None:
        self._app = app
        self._host: Host = host(app)
        self.runs = runs
        self._answer_lock = threading.Lock()
        self._answering: dict[str, tuple[MessagePump, str]] = {}
        self._canceled_here: set[str] = set()
        #: per run, the full-disk notice its timer's last try gave (said once)
        self._full_said: dict[str, str] = {}

    def _say(self, message: str, severity: SeverityLevel = "information") -> None:
        self._host.say(message, severity)

    def _worker(self, job: Callable[[], None], *, group: str, name: str) -> None:
        self._app.run_worker(job, thread=True, group=group, name=name)

    def require_engine(self) -> Engine | None:
        """The engine, or ``None`` after saying why there is none yet."""
        engine = self._host.engine
        if engine is not None:
            return engine
        if self._host.startup_error:
            self._say(f"The database is not open: {self._host.startup_error}", "error")
        else:
            self._say("The database is still opening; try again in a moment.", "warning")
        return None

    def require_writer(self) -> Engine | None:
        """The engine for an action that writes into a run (start, resume,
        cancel, answer, undo, replay), or ``None`` after saying why not: not
        open yet, or :meth:`write_refusal`."""
        engine = self.require_engine()
        refused = self.write_refusal()
        if engine is not None and refused is not None:
            self._say(refused, "error")
            return None
        return engine

    def write_refusal(self) -> str | None:
        """Why the app writes nothing now, or ``None``: this computer's clock
        is skewed (the engine would date the write wrong, so it refuses it),
        or the database file is no longer at its path (a write would go into
        a file no one finds there)."""
        skew = self._host.clock_skew
        if skew is not None:
            return skew_notice(skew)
        return self._host.file_gone

    def is_driving(self, run_id: str) -> bool:
        """Whether this app drives ``run_id`` right now."""
        return self.runs.is_driving(run_id)

    def _follow(self, run_id: str) -> None:
        """Have the runs screen select ``run_id`` as soon as its row shows."""
        runs_screen = self._app.screen_stack[0] if self._app.screen_stack else None
        if isinstance(runs_screen, RunsScreen):
            runs_screen.follow(run_id)

    # -- starting runs -----------------------------------------------------

    def new_digest(self) -> None:
        """Ask for a folder, then run ``digest`` on it."""
        if self.require_writer() is not None:
            self._app.push_screen(NewDigestScreen(), self._digest_chosen)

    def _digest_chosen(self, given: DigestInput | None) -> None:
        if given is None:
            return
        try:
            self.start_digest(given)
        except (InputError, ConfigError) as exc:  # the folder changed since the dialog
            self._say(str(exc), "error")  # checked it, or a bad TRACEPARENT

    def start_digest(self, given: DigestInput) -> str | None:
        """Start a ``digest`` run in a worker (:meth:`start_flow`: single
        flight per folder and output, as ``flowdesk run digest``); returns
        its run id.

        Raises:
            InputError: as :meth:`start_flow`."""
        return self.start_flow("digest", {"folder": given.folder, "out": given.out})

    def start_flow(self, flow_name: str, state: dict[str, Any]) -> str | None:
        """Start a run of any registered flow in a worker; returns its run id.

        Built-in flows are single-flight per input by the CLI's own rule
        (:func:`~desktop_app.flows.single_flight`): a run of the same input
        that waits is selected and named, one interrupted or failed is
        resumed, instead of a second run being started.

        Raises:
            InputError: the input is refused (a folder that is missing, or
                that tidy cannot write); nothing was started.
            ConfigError: ``TRACEPARENT`` is not a W3C traceparent
                (:func:`~desktop_app.bootstrap.run_context`); nothing was started.
        """
        from desktop_app.bootstrap import run_context

        engine = self.require_writer()
        if engine is None:
            return None
        context = run_context(self._host.settings)
        given, key = single_flight(flow_name, state)
        twin = self._host.read(lambda s: live_twin(s, flow_name, key)) if key else None
        if twin is not None:
            rid = short_id(twin.run_id)
            self._follow(twin.run_id)
            if twin.status == "waiting":
                self._say(
                    f"{flow_name} run {rid} on this input is waiting already; press a to answer it"
                )
            elif self.runs.is_driving(twin.run_id):
                self._say(f"{flow_name} run {rid} on this input is already running")
            else:
                status = display_status(twin, self._host.now())
                self._say(f"Resuming the {status} {flow_name} run {rid} on this input")
                self.resume(twin.run_id)
            return twin.run_id
        run_id = uuid.uuid4().hex
        self.runs.claim(run_id)
        self._say(f"Started {flow_name} run {run_id}")
        self._follow(run_id)
        self._drive(
            run_id,
            lambda: engine.run(flow_name, given, run_id=run_id, flow_key=key, context=context),
        )
        return run_id

    # -- resuming ------------------------------------------------------------

    def resume(self, run_id: str, shown: RunRecord | None = None) -> None:
        """Resume one run in a worker (``Engine.resume``), unless it is
        driven here already; the engine's refusal is shown as a notice.

        ``shown``: the run as the screen shows it; one shown ``completed``
        is not resumed (nothing would run)."""
        engine = self.require_writer()
        if engine is None:
            return
        if shown is not None and shown.status == "completed":
            self._say(f"Run {short_id(run_id)} is already completed; nothing to resume.")
            return
        if not self.runs.claim(run_id):
            self._say(f"Run {short_id(run_id)} is already running.", "warning")
            return
        self._say(f"Resuming run {short_id(run_id)}…")
        self._drive(run_id, lambda: engine.resume(run_id))

    def _drive(self, run_id: str, job: Callable[[], RunResult]) -> None:
        self._worker(partial(self._drive_now, run_id, job), group="runs", name="drive run")

    def _drive_now(self, run_id: str, job: Callable[[], RunResult]) -> None:
        outcome = self.runs.execute(run_id, job)
        if outcome.result is not None:
            self.announce(outcome.result)
        elif isinstance(outcome.exception, InputPendingError):
            self._say(f"Run {short_id(run_id)} waits for an answer; press a to answer it.")
        elif isinstance(outcome.exception, FlowVersionMismatchError):
            self._say(app_version_refusal(outcome.exception), "error")
        elif isinstance(outcome.exception, UnknownFlowError):
            self._say(unregistered_in_app(run_id, outcome.exception, "resume", "resumed"), "error")
        elif isinstance(outcome.exception, CheckpointDecodeError):
            self._say(damaged_in_app(outcome.exception), "error")
        elif isinstance(outcome.exception, DiskFullError):  # `resume RUN`, not `resume --all`
            said = self._disk_full(outcome.exception, run_id, f"resume {run_id}", executed=True)
            self._say(f"Run {short_id(run_id)}: {said}", "error")
        elif outcome.error is not None:
            self._say(outcome.error, "error")
        self._app.post_message(RunChanged(run_id))

    def _disk_full(self, exc: DiskFullError, run_id: str, then: str, *, executed: bool) -> str:
        """``exc``, met by what the app did to run ``run_id``, worded as the
        CLI words it (:meth:`DiskFullError.for_command`): ``then`` is the
        command that does it once space is free, printed with the app's
        ``--db``/``--scope`` (without, pasted as shown it would act on the
        default database). ``executed``: the app was executing the run (a
        resume, a timer); it is said stopped at its last saved step (shown
        interrupted) only then, and only when it was left so (stored
        ``pending`` or ``running``), not when it still waits (a timer that
        wrote nothing) or has ended. Call on a worker thread."""
        engine = self._host.engine
        assert engine is not None
        if not executed:  # a cancel: it executes no run
            return str(exc.for_command(self._host.hints.cmd(then), paused=False))
        try:
            run = engine.store.get_run(run_id)
        except CheckpointNotFoundError:  # a new run whose first save failed: nothing to resume
            return str(exc.stopping_no_run("start it again"))
        except FlowdeskError:  # unknown: as a run executed (the CLI's resume says it so)
            run = None
        paused = run is None or run.status in INTERRUPTED
        return str(exc.for_command(self._host.hints.cmd(then), paused=paused))

    def fire(self, run_id: str, refuse: Callable[[str, FlowdeskError], None]) -> bool:
        """Wake ``run_id``, a waiting run with a due deadline or an arrived
        signal or event (``Engine.wake``), in a worker unless it is driven
        here already (returns ``False`` then). Call from any thread but the
        UI's (the app's :class:`~desktop_app.app.timers.TimerPump`). How it
        ended is said as for a resumed run; a run still waiting, and one
        another process is waking (``RunLeasedError``) or canceled
        meanwhile, pass silently; one this app cannot go on with
        (:data:`~desktop_app.flow.engine.REFUSALS`) goes to ``refuse``."""
        engine = self._host.engine
        if engine is None or not self.runs.claim(run_id):
            return False
        try:
            self._app.call_from_thread(
                self._worker,
                partial(self._fire_now, engine, run_id, refuse),
                group="timers",
                name="fire a deadline",
            )
        except RuntimeError:  # the app is closing
            self.runs.release(run_id)
            return False
        return True

    def _fire_now(
        self, engine: Engine, run_id: str, refuse: Callable[[str, FlowdeskError], None]
    ) -> None:
        from desktop_app.flow.engine import REFUSALS

        outcome = self.runs.execute(run_id, lambda: engine.wake(run_id))
        exc = outcome.exception
        if outcome.result is not None:
            if outcome.result.status not in ("waiting", "running", "pending"):
                self.announce(outcome.result)
        elif isinstance(exc, REFUSALS):
            refuse(run_id, exc)
        elif isinstance(exc, RunLeasedError | RunStateError):
            pass  # another process wakes it, or it was canceled meanwhile
        elif isinstance(exc, DiskFullError):  # `resume RUN` wakes it, not `resume --all`
            said = self._disk_full(exc, run_id, f"resume {run_id}", executed=True)
            # the timers try again at every pass: said once, not a notice a second
            # (a tryout: a stack of them hid the dialog the person was in)
            if self._full_said.get(run_id) != said:
                self._full_said[run_id] = said
                self._say(f"Run {short_id(run_id)}: {said}", "error")
        elif outcome.error is not None:
            self._say(outcome.error, "error")
        if not isinstance(exc, DiskFullError):
            self._full_said.pop(run_id, None)
        self._app.post_message(RunChanged(run_id))

    def announce(self, result: RunResult) -> None:
        """Say how a run driven here ended (thread-safe)."""
        rid = short_id(result.run_id)
        engine = self._host.engine
        if result.status == "completed":
            report = getattr(result.state, "report_path", None)
            self._say(f"Run {rid} completed" + (f": {report}" if report else ""))
        elif result.status == "failed":
            self._say(f"Run {rid} failed: {result.error}", "error")
        elif result.status == "canceled" and result.run_id in self._canceled_here:
            return  # said when it was canceled
        elif result.status == "waiting":
            self._say(f"Run {rid} is waiting; select it and press a to see what for.", "warning")
        elif result.status in INTERRUPTED and engine is not None and not engine.executes:
            # PostgreSQL without FLOWDESK_WORKER=1: saved, the workers execute it
            self._say(f"Run {rid} {self._saved_for_a_worker()}")
        else:
            self._say(f"Run {rid} is {result.status}", "warning")

    def _saved_for_a_worker(self) -> str:
        """What follows "Run R" for a run saved for the workers to execute
        (PostgreSQL without ``FLOWDESK_WORKER=1``): which worker takes it, and
        how to start one of another scope."""
        scope = self._host.settings.scope
        if scope == "default":
            return "is saved; a worker (flowdesk agent) executes it."
        # only a worker of that scope takes it: say which, and how to start one
        agent = self._host.hints.cmd("agent")
        return f"is saved; a worker of scope {scope!r} executes it (`{agent}` starts one)."

    # -- replay and fork -----------------------------------------------------

    def branch(
        self, reply_to: MessagePump, cid: str, new_id: str, changes: dict[str, Any] | None
    ) -> None:
        """Replay (``changes`` is ``None``) or fork checkpoint ``cid`` as run
        ``new_id`` in a worker; ``reply_to`` gets :class:`BranchFinished`."""
        engine = self.require_writer()
        if engine is None:
            return
        self.runs.claim(new_id)
        verb = "Forking" if changes is not None else "Replaying"
        rev = f"{short_id(cid)}:{cid.rpartition(':')[2]}"
        self._say(f"{verb} checkpoint {rev} as run {short_id(new_id)}…")

        def job() -> RunResult:
            if changes is not None:
                return engine.fork(cid, changes, run_id=new_id)
            return engine.replay(cid, run_id=new_id)

        run = partial(self._branch, reply_to, rev, new_id, job, changes is not None)
        self._worker(run, group="runs", name="fork or replay run")

    def _branch(
        self,
        reply_to: MessagePump,
        rev: str,
        new_id: str,
        job: Callable[[], RunResult],
        fork: bool,
    ) -> None:
        what = "Fork" if fork else "Replay"
        outcome = self.runs.execute(new_id, job, what=what)
        result = outcome.result
        if isinstance(outcome.exception, ValidationError):
            self._say(
                f"{what} of {rev} refused: " + "; ".join(validation_lines(outcome.exception)),
                "error",
            )
        elif result is None:
            exc = outcome.exception
            why = (
                outcome.error if isinstance(exc, FlowdeskError) else f"{type(exc).__name__}: {exc}"
            )
            self._say(f"{what} of {rev} failed: {why}", "error")
        else:
            done = "forked" if fork else "replayed"
            status = result.status + (f": {result.error}" if result.error else "")
            severity: SeverityLevel = "error" if result.status == "failed" else "information"
            engine = self._host.engine
            if result.status == "pending" and engine is not None and not engine.executes:
                status = f"run {short_id(new_id)} {self._saved_for_a_worker()}"
                self._say(f"Checkpoint {rev} {done} as {status}")
            else:
                self._say(f"Checkpoint {rev} {done} as run {short_id(new_id)} ({status})", severity)
        self._app.post_message(RunChanged(new_id))
        reply_to.post_message(BranchFinished(new_id, result is not None))

    # -- opening -------------------------------------------------------------

    def open_run(self, run_id: str) -> None:
        """A flow run's detail screen."""
        if self._host.reader is None:
            self.require_engine()
            return
        self._app.push_screen(RunDetailScreen(run_id))

    def open_thread(self, thread_id: str) -> None:
        """A LangGraph thread's checkpoints, state, diffs and question."""
        if self._host.reader is None:
            self.require_engine()
            return
        from desktop_app.app.screens.langgraph_thread import ThreadScreen

        self._app.push_screen(ThreadScreen(thread_id))

    def open_agent_run(self, run_id: str, *, resume: bool = False) -> None:
        """The agent runs screen with ``run_id``'s conversation open (and,
        with ``resume``, the run resumed there, its answer streamed)."""
        if self._host.reader is None:
            self.require_engine()
            return
        from desktop_app.app.screens.agent_runs import AgentRunsScreen

        self._app.push_screen(AgentRunsScreen(open_run_id=run_id, resume=resume))

    def copy_run_id(self, run_id: str) -> None:
        """Put ``run_id`` on the clipboard (the terminal's, through OSC 52)."""
        self._app.copy_to_clipboard(run_id)
        self._say(f"Copied run id {run_id}.")

    def open_output(self, run_id: str) -> None:
        """Open what run ``run_id`` made (digest: its ``digest.md``) with the
        system opener; say why not when it made nothing yet or no opener is
        installed."""
        from desktop_app.app.opener import open_path, output_of

        latest = self._host.read(lambda s: s.latest(run_id))
        if latest is None:
            return
        path = output_of(latest.state)
        if path is None:
            self._say(f"Run {short_id(run_id)} has no output to open yet.", "warning")
            return
        try:
            open_path(path)
        except OSError as exc:
            self._say(f"Could not open {path}: {exc}", "error")
            return
        self._say(f"Opened {path}.")

    # -- tidy undo -------------------------------------------------------------

    def undo_tidy(self, run_id: str) -> None:
        """Ask, then move a tidy run's files back from its undo list (in a worker)."""
        if self.require_writer() is None:
            return
        rid = short_id(run_id)
        store = self._host.reader
        if store is None:
            return
        try:
            found = undo_list_of(store, run_id)
            undo_list = (
                str(found)
                if found is not None
                else "its moves in the database: it ended before writing an undo list"
            )
        except UndoneElsewhere as exc:
            self._say(self._elsewhere(exc), "warning")
            return
        except FlowdeskError as exc:
            self._say(str(exc), "warning" if isinstance(exc, InputError) else "error")
            return

        def chosen(yes: bool | None) -> None:
            if yes:
                self._worker(
                    partial(self._undo, run_id, undo_list), group="control", name="undo tidy"
                )

        self._app.push_screen(
            ConfirmScreen(
                f"Undo tidy run {rid}?",
                f"Every file it moved goes back where it was (from {undo_list}). "
                "Files moved or replaced since are left alone.",
                yes="Move them back",
                no="Keep",
            ),
            chosen,
        )

    def _elsewhere(self, exc: UndoneElsewhere) -> str:
        """Why a tidy run moved by ``db copy`` is not undone here, and the
        command that undoes it where its moves are made (``--db`` that
        database, as the CLI prints it)."""
        there = self._host.hints.cmd(f"undo {exc.run_id}", db=exc.moved_to)
        return f"{exc}; undo it there: {there}"

    def _undo(self, run_id: str, undo_list: str) -> None:
        rid = short_id(run_id)
        engine = self.require_writer()
        if engine is None:
            return
        try:  # withdraws the moves not made yet first: none is made after the undo
            report = undo_tidy_run(engine.store, run_id)
        except UndoneElsewhere as exc:
            self._say(f"Tidy run {rid} was not undone: {self._elsewhere(exc)}", "error")
            return
        except FlowdeskError as exc:
            self._say(f"Tidy run {rid} was not undone: {exc}", "error")
            return
        text = f"Undid tidy run {rid}: {undo_summary(report, files=True)}"
        left = [*report.in_flight, *report.left]
        if left:
            text += f"; {len(left)} left: " + "; ".join(left[:3])
        self._say(text, "warning" if left else "information")

    # -- canceling -------------------------------------------------------------

    def cancel(self, run: RunRecord) -> None:
        """Ask, then cancel the run ``run`` shows in a worker (``Engine.cancel``).

        ``run``: the run as the screen shows it; one shown finished is
        refused at once, without a question."""
        if self.require_writer() is None:
            return
        run_id, rid = run.run_id, short_id(run.run_id)
        if run.status in FINISHED:
            self._cancel_ended(run)
            return

        def chosen(yes: bool | None) -> None:
            if yes:
                self._worker(partial(self._cancel, run_id), group="control", name="cancel run")

        self._app.push_screen(
            ConfirmScreen(
                f"Cancel run {rid}?",
                f"{run.flow_name} run, {run.status}. A canceled run cannot be resumed; "
                "replay it from a checkpoint to run it again.",
                yes="Cancel run",
                no="Keep it",
            ),
            chosen,
        )

    def _cancel_ended(self, run: RunRecord) -> None:
        """The cancel of run ``run`` shown ended: a ``completed`` or
        ``timed_out`` one whose side effects are still queued (its
        delivering process was killed) offers to withdraw them
        (``Engine.withdraw_after_end``; it stays ``completed``); any other
        is refused at once, without a question."""
        engine = self._host.engine
        assert engine is not None
        run_id, rid = run.run_id, short_id(run.run_id)
        queued = [] if run.status not in WITHDRAWN_AFTER_END else engine.store.open_intents(run_id)
        if not queued:
            self._say(f"Run {rid} is already {run.status}; nothing to cancel.", "error")
            return
        one, many = INTENT_NOUNS.get(run.flow_name, ("side effect", "side effects"))

        def chosen(yes: bool | None) -> None:
            if yes:
                self._worker(partial(self._cancel, run_id), group="control", name="cancel run")

        self._app.push_screen(
            ConfirmScreen(
                f"Withdraw the {plural(len(queued), f'queued {one}', f'queued {many}')} "
                f"of run {rid}?",
                f"{run.flow_name} run, {run.status}, with {plural(len(queued), one, many)} "
                f"not made yet. Withdrawn, {'it is' if len(queued) == 1 else 'they are'} "
                f"never made; the run stays {run.status}.",
                yes="Withdraw",
                no="Keep them",
            ),
            chosen,
        )

    def _cancel(self, run_id: str) -> None:
        engine = self._host.engine
        assert engine is not None
        rid = short_id(run_id)
        try:
            # read before the cancel (its lease goes with it): a step another
            # process has in flight runs to its end, as `cancel` says too
            executing = (
                None
                if run_id in engine.executing()  # driven here: it stops here
                else flow_executor_text(engine.store, run_id, self._host.now())
            )
            try:
                done = engine.cancel_withdrawing(run_id)
            except RunStateError as exc:  # it ended: withdraw what it left queued
                try:
                    ended = engine.withdraw_after_end(run_id)
                except RunStateError:
                    raise exc from None
                said = ended_withdrawn_text(
                    ended.run.flow_name,
                    ended.run.status,
                    len(ended.withdrawn),
                    len(ended.made),
                    len(ended.unknown),
                    len(ended.in_flight),
                )
                if ended.run.flow_name == "tidy":
                    said += "; u on its detail moves back the files it moved"
                self._say(f"Run {rid} {said}.")
                return
        except DiskFullError as exc:  # the cancel again, not `resume --all`
            said = self._disk_full(exc, run_id, f"cancel {run_id}", executed=False)
            self._say(f"Run {rid} was not canceled: {said}", "error")
        except FlowdeskError as exc:
            self._say(f"Run {rid} was not canceled: {exc}", "error")
        except Exception as exc:
            self._say(f"Run {rid} was not canceled: {type(exc).__name__}: {exc}", "error")
        else:
            self._canceled_here.add(run_id)
            run = done.run
            took_back = withdrawn_text(
                run.flow_name, len(done.withdrawn), len(done.made), len(done.unknown)
            )
            parts = [t for t in (took_back, executing if run.status == "canceled" else None) if t]
            self._say(f"Run {rid} is {run.status}" + "".join(f"; {t}" for t in parts) + ".")
        finally:
            self._app.post_message(RunChanged(run_id))

    def cancel_agent(self, run: AgentRun) -> None:
        """Ask, then cancel the agent run ``run`` shows in a worker
        (``Agent.cancel``, what ``flowdesk cancel`` calls).

        ``run``: the agent run as the screen shows it; one shown ended
        (``done``, ``canceled``, ``timeout``, ``expired``) is refused at
        once, saying so in the words the table shows for its status."""
        if self.require_writer() is None:
            return
        rid = short_id(run.run_id)
        if run.status in AGENT_ENDED:
            self._say(
                f"Agent run {rid} is already {agent_status_words(run.status)}; nothing to cancel.",
                "warning",
            )
            return
        status = agent_status_words(display_status(run, self._host.now()))

        def chosen(yes: bool | None) -> None:
            if yes:
                job = partial(self._cancel_agent, run.run_id, run.agent)
                self._worker(job, group="control", name="cancel agent run")

        self._app.push_screen(
            ConfirmScreen(
                f"Cancel agent run {rid}?",
                f"{run.agent} agent run, {status}. A canceled agent run cannot be resumed; "
                "its conversation so far is kept.",
                yes="Cancel run",
                no="Keep it",
            ),
            chosen,
        )

    def _cancel_agent(self, run_id: str, agent: str) -> None:
        services = self._host.services
        assert services is not None
        rid = short_id(run_id)
        try:
            try:
                services.agent(agent, None).cancel(run_id)
            except RunStateError:  # it ended meanwhile: its end stands
                ended = services.agents.get(run_id).status
                self._say(
                    f"Agent run {rid} is already {agent_status_words(ended)}; nothing to cancel.",
                    "warning",
                )
                return
            executing = agent_executor_text(services.agents, run_id, self._host.now())
        except FlowdeskError as exc:
            self._say(f"Agent run {rid} was not canceled: {exc}", "error")
        except Exception as exc:
            self._say(f"Agent run {rid} was not canceled: {type(exc).__name__}: {exc}", "error")
        else:
            self._say(f"Agent run {rid} is canceled" + (f"; {executing}." if executing else "."))
        finally:
            self._app.post_message(RunChanged(run_id))

    # -- answering waiting runs ------------------------------------------------

    def answer(self, run: RunRecord) -> None:
        """Show what the run ``run`` shows waits for, and answer its questions
        (the dialog reads its waits from the engine)."""
        if self.require_writer() is None:
            return
        if run.status != "waiting":
            self._say(
                f"Run {short_id(run.run_id)} is {run.status}, not waiting; nothing to answer.",
                "warning",
            )
            return
        engine = self._host.engine
        refusal = None if engine is None else engine.version_refusal(run)
        if refusal is not None:  # its questions take no answer under the new code
            self._say(app_version_refusal(refusal, again="a"), "warning")
            return
        self._app.push_screen(AnswerScreen(run))

    def send_answer(self, screen: MessagePump, run_id: str, wait_id: str, value: Any) -> str:
        """Answer ``wait_id`` in a worker (``Engine.resume_with``).

        Returns why it could not be sent (``""`` when it is on its way). The
        screen gets :class:`AnswerAccepted` once the answer is saved (the run
        then goes on in the worker) or :class:`AnswerRefused`.
        """
        if self._host.engine is None:
            return "The database is not open."
        if (refused := self.write_refusal()) is not None:
            return refused
        if not self.runs.claim(run_id):
            return f"Run {short_id(run_id)} is running here right now; try again when it stops."
        with self._answer_lock:
            self._answering[run_id] = (screen, wait_id)
        answer = partial(self._answer, run_id, wait_id, value)
        self._worker(answer, group="runs", name="answer run")
        return ""

    def _answer_settled(self, run_id: str) -> tuple[MessagePump, str] | None:
        """The screen waiting for the fate of an answer to ``run_id``, once."""
        with self._answer_lock:
            return self._answering.pop(run_id, None)

    def accepted(self, run_id: str) -> None:
        """The engine started ``run_id`` again: an answer sent to it was saved
        (called by the app's event subscriber, on the engine's thread)."""
        asking = self._answer_settled(run_id)
        if asking is not None:
            screen, wait_id = asking
            self._say(f"Answered {wait_id}; run {short_id(run_id)} goes on.")
            screen.post_message(AnswerAccepted(run_id, wait_id))

    def _answer(self, run_id: str, wait_id: str, value: Any) -> None:
        engine = self._host.engine
        assert engine is not None
        result: RunResult | None = None
        error: str | None = None
        full: DiskFullError | None = None
        try:
            self.runs.wait_for_gate()
            result = engine.resume_with(run_id, value, wait_id=wait_id)
        except DiskFullError as exc:
            error, full = str(exc), exc
        except UnknownFlowError as exc:
            error = unregistered_in_app(run_id, exc, "answer", "answered")
        except FlowVersionMismatchError as exc:  # the Engine's words name its methods
            error = app_version_refusal(exc, again="a")
        except WaitAlreadyResolvedError as exc:
            error = self._resolved_already(engine, run_id, exc)
        except FlowdeskError as exc:
            error = str(exc)
        except Exception as exc:
            error = f"Run {short_id(run_id)} stopped: {type(exc).__name__}: {exc}"
        finally:
            self.runs.release(run_id)
            self._app.post_message(RunChanged(run_id))
        asking = self._answer_settled(run_id)
        if asking is not None and full is not None:  # the run never went on: not saved
            error = str(
                DiskFullError(
                    full.where,
                    full.needed_bytes,
                    unsaved=f"the answer was not saved (run {short_id(run_id)} still waits for it)",
                    again="answer it again",
                )
            )
        if asking is None:  # accepted earlier: the run went on, then stopped
            if full is not None:
                said = self._disk_full(full, run_id, f"resume {run_id}", executed=True)
                error = f"Run {short_id(run_id)}: {said}"
            if error:
                self._say(error, "error")
        elif error:
            screen = asking[0]
            if screen in self._app.screen_stack:
                screen.post_message(AnswerRefused(error))
            else:
                self._say(error, "error")
            return
        else:
            self._say(f"Answered {wait_id}.")
            asking[0].post_message(AnswerAccepted(run_id, wait_id))
        if result is not None:
            self.announce(result)

    def _resolved_already(self, engine: Engine, run_id: str, exc: WaitAlreadyResolvedError) -> str:
        """What an answer the engine refused as given already says: for a run
        that timed out (its deadline resolved the question: nobody may have
        answered it), what ``flowdesk answer`` says, the run's status and that
        nothing was answered; else the engine's words (answered elsewhere,
        the first answer stands)."""
        try:
            run = engine.store.get_run(run_id)
        except FlowdeskError:
            return str(exc)
        if run.status != "timed_out":
            return str(exc)
        return (
            f"Run {short_id(run_id)} is {display_status(run, self._host.now())}, not waiting "
            "for an answer; nothing was answered."
        )


def unregistered_in_app(run_id: str, exc: UnknownFlowError, verb: str, done: str) -> str:
    """What the app says when run ``run_id``'s flow is not registered in it
    (``exc``, from the engine) and ``verb`` (``answer``; ``done``: ``answered``)
    was refused: nothing changed, and how to register the flow."""
    return f"Run {short_id(run_id)} was not {done} here: {exc}. Nothing changed. " + (
        register_advice(verb)
    )
