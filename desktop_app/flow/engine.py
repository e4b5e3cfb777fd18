"""The engine: runs compiled flows step by step and checkpoints each step.

Durability protocol (one commit per step):

* A run is created with revision 0 holding the input state and the entry
  step recorded ``in_progress`` (attempt 1).
* When a step completes, ONE checkpoint saves its ``completed`` record, the
  new state, the step's domain writes, the new frontier and the next step's
  ``in_progress`` record. A crash before that commit leaves the step
  ``in_progress``; it runs again on resume (at-least-once, go-micro
  semantics). A crash after it never runs the step again.
* A loop step saves one checkpoint per iteration (with that iteration's
  domain writes), so it resumes at the next iteration.
* Resuming first saves a checkpoint that bumps the head step's attempt
  count, so attempts survive restarts.
* A failed save raises :class:`~desktop_app.errors.StoreError` out of
  ``run``/``resume``; no later step runs (go-micro
  ``TestFlowCheckpointSaveFailureStopsRun``).

Run statuses: ``pending`` (created, not started), ``running``, ``waiting``,
``completed``, ``failed``, ``canceled``, ``timed_out``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from desktop_app.errors import (
    CheckpointNotFoundError,
    FlowdeskError,
    FlowVersionMismatchError,
    RevisionConflictError,
    RunStateError,
    StepFailedError,
    StoreError,
    UnknownFlowError,
)
from desktop_app.flow.clock import Clock, SystemClock
from desktop_app.flow.context import ExecutionContext, StepContext
from desktop_app.flow.definition import AnyStep, CompiledFlow, LoopStep
from desktop_app.flow.events import (
    EventBus,
    RunFinished,
    RunProgress,
    RunStarted,
    StepFinished,
    StepResult,
    StepStarted,
)
from desktop_app.flow.state import StateTracker, apply_output, dump_state, load_state
from desktop_app.store.protocol import (
    PENDING_STATUSES,
    Checkpoint,
    CheckpointInfo,
    CheckpointStore,
    DomainWrite,
    RunRecord,
    RunStatus,
    StepRecord,
    parse_checkpoint_id,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """Where a run stands after ``run``/``resume`` returned.

    Attributes:
        run_id: the run.
        status: the run status (``completed``, ``failed``, ``waiting``, ...).
        state: the latest state (the flow's pydantic model).
        revision: the latest checkpoint revision.
        error: why the run failed or halted, else ``None``.
    """

    run_id: str
    status: RunStatus
    state: Any
    revision: int
    error: str | None = None


@dataclass
class ResumePendingResult:
    """What :meth:`Engine.resume_pending` did.

    Attributes:
        resumed: results of the runs resumed, in order.
        failed_run_id: the run that stopped the sweep, or ``None``.
        error: that run's error, or ``None``.
    """

    resumed: list[RunResult] = field(default_factory=list)
    failed_run_id: str | None = None
    error: BaseException | None = None


class _Canceled(Exception):
    """Internal: the run was canceled by another writer."""


def _call(fn: Callable[..., Any], arity: int, state: Any, ctx: StepContext) -> Any:
    out = fn(state, ctx) if arity >= 2 else fn(state) if arity == 1 else fn()
    if inspect.isawaitable(out):

        async def _await() -> Any:
            return await out

        out = asyncio.run(_await())
    return out


class _RunDriver:
    """Drives one run from a checkpoint until it finishes, fails or stops."""

    def __init__(self, engine: Engine, flow: CompiledFlow[Any], run: RunRecord, cp: Checkpoint):
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.events = engine.events
        self.flow = flow
        self.run = run
        self.run_id = run.run_id
        self.revision = cp.revision
        self.status: RunStatus = cp.status
        self.state = load_state(flow.state_type, cp.state, run.run_id, cp.revision)
        self.tracker = StateTracker(self.state)
        self.steps: dict[str, StepRecord] = dict(cp.steps)
        self.frontier: list[str] = list(cp.frontier)
        self.meta: dict[str, Any] = dict(cp.meta)
        self.progress = cp.progress
        self.error = cp.error
        self.context = ExecutionContext.model_validate(dict(run.context))

    # -- persistence -----------------------------------------------------

    def save(self, step_id: str, writes: Iterable[DomainWrite] = ()) -> None:
        cp = Checkpoint(
            run_id=self.run_id,
            revision=self.revision + 1,
            status=self.status,
            state=self.tracker.encode(self.state),
            steps=dict(self.steps),
            frontier=tuple(self.frontier),
            created_at=self.clock.now(),
            step_id=step_id,
            progress=self.progress,
            error=self.error,
            meta=dict(self.meta),
        )
        try:
            self.store.append(cp, list(writes))
        except RevisionConflictError:
            latest = self.store.get_run(self.run_id)
            if latest.status == "canceled":
                raise _Canceled() from None
            raise
        self.revision = cp.revision

    def result(self) -> RunResult:
        return RunResult(self.run_id, self.status, self.state, self.revision, self.error)

    # -- execution -------------------------------------------------------

    def mark_resumed(self) -> None:
        """Bump the head step's attempt (or start it) and mark the run running."""
        now = self.clock.now()
        head = self.frontier[0]
        rec = self.steps.get(head)
        attempts = rec.attempts + 1 if rec is not None and rec.status == "in_progress" else 1
        iteration = rec.iteration if rec is not None and rec.status == "in_progress" else 0
        self.steps[head] = StepRecord(
            head,
            "in_progress",
            attempts=attempts,
            started_at=now,
            iteration=iteration,
            error=rec.error if rec is not None else None,
            error_type=rec.error_type if rec is not None else None,
        )
        self.status = "running"
        self.error = None
        self.save(head)

    def drive(self, recovered: bool) -> RunResult:
        self.events.publish(RunStarted(self.run_id, self.flow.name))
        try:
            while self.frontier:
                sid = self.frontier[0]
                if self.engine.is_cancel_requested(self.run_id):
                    raise _Canceled()
                taken = int(self.meta.get("steps_taken", 0))
                if taken >= self.flow.max_steps:
                    self.status = "failed"
                    self.error = f"halted: max_steps {self.flow.max_steps} reached at step {sid!r}"
                    self.meta["halt_reason"] = "max_steps"
                    self.save(sid)
                    break
                if not self.run_step(self.flow.step(sid), recovered):
                    break
                recovered = False
        except _Canceled:
            self.status = "canceled"
            latest = self.store.latest(self.run_id)
            self.revision = latest.revision
            self.error = latest.error
        self.events.publish(RunFinished(self.run_id, self.status, self.error))
        return self.result()

    def run_step(self, step: AnyStep, recovered: bool) -> bool:
        """Run the head step to completion or final failure; False stops the run."""
        sid = step.id
        rec = self.steps[sid]
        retries = step.retry if step.retry > 0 else self.flow.retry
        while True:
            self.events.publish(StepStarted(self.run_id, sid, rec.attempts))
            t0 = time.perf_counter()
            ctx = StepContext(
                self.run_id, sid, rec.attempts, self.context, rec.iteration, self.store.query
            )
            try:
                if isinstance(step, LoopStep):
                    self.run_loop(step, ctx)
                elif recovered and step.recovery == "resume_only" and rec.attempts > 1:
                    if step.on_recover is not None:
                        self.invoke(step.on_recover, ctx)
                else:
                    self.invoke(step.fn, ctx)
            except (_Canceled, StoreError, RevisionConflictError):
                # storage failed or another writer won: stop, never retry blindly
                raise
            except Exception as exc:
                if self.fail_attempt(step, exc, t0, retries):
                    return False
                rec = self.steps[sid]
                recovered = False
                continue
            self.complete(step, ctx, t0)
            return self.status == "running"

    def invoke(self, fn: Callable[..., Any], ctx: StepContext) -> None:
        """Call a step function and apply what it returned to the state."""
        from desktop_app.flow.definition import _arity

        out = _call(fn, _arity(fn), self.state, ctx)
        self.tracker.check_unmutated(self.state, ctx.step_id)
        self.state = apply_output(self.flow.state_type, self.state, out)

    def fail_attempt(self, step: AnyStep, exc: BaseException, t0: float, retries: int) -> bool:
        """Record a failed attempt; True when the run has failed for good."""
        sid = step.id
        rec = self.steps[sid]
        ms = (time.perf_counter() - t0) * 1000
        message = f"{type(exc).__name__}: {exc}"
        self.events.publish(StepFinished(self.run_id, StepResult(sid, "error", message, ms)))
        now = self.clock.now()
        if rec.attempts <= retries:
            self.steps[sid] = StepRecord(
                sid,
                "in_progress",
                attempts=rec.attempts + 1,
                started_at=now,
                error=message,
                error_type=type(exc).__name__,
                iteration=rec.iteration,
                duration_ms=ms,
            )
            self.save(sid)
            return False
        self.steps[sid] = StepRecord(
            sid,
            "failed",
            attempts=rec.attempts,
            started_at=rec.started_at,
            finished_at=now,
            error=message,
            error_type=type(exc).__name__,
            iteration=rec.iteration,
            duration_ms=ms,
        )
        self.status = "failed"
        self.error = str(StepFailedError(self.run_id, sid, rec.attempts, message))
        self.save(sid)
        return True

    def complete(self, step: AnyStep, ctx: StepContext, t0: float) -> None:
        sid = step.id
        rec = self.steps[sid]
        ms = (time.perf_counter() - t0) * 1000
        now = self.clock.now()
        self.steps[sid] = StepRecord(
            sid,
            "completed",
            attempts=rec.attempts,
            started_at=rec.started_at,
            finished_at=now,
            iteration=rec.iteration,
            duration_ms=ms,
        )
        self.meta["steps_taken"] = int(self.meta.get("steps_taken", 0)) + 1
        nxt = self.flow.next_steps(sid, self.state)
        self.frontier = self.frontier[1:] + [n for n in nxt if n not in self.frontier[1:]]
        if self.frontier:
            head = self.frontier[0]
            self.steps[head] = StepRecord(head, "in_progress", attempts=1, started_at=now)
            self.status = "running"
        else:
            self.status = "completed"
        progress = ctx.take_progress()
        if progress is not None:
            self.progress = progress
        self.save(sid, ctx.take_writes())
        self.events.publish(StepFinished(self.run_id, StepResult(sid, "done", None, ms)))

    def run_loop(self, step: LoopStep, ctx: StepContext) -> None:
        sid = step.id
        iteration = self.steps[sid].iteration
        while iteration < step.max_iterations and not step.until(self.state):
            ctx.iteration = iteration + 1
            self.invoke(step.body, ctx)
            iteration += 1
            if step.on_iteration is not None:
                step.on_iteration(iteration, self.state)
            if step.progress is not None:
                self.progress = step.progress(self.state)
            elif (p := ctx.take_progress()) is not None:
                self.progress = p
            if step.checkpoint_each_iteration:
                rec = self.steps[sid]
                self.steps[sid] = StepRecord(
                    sid,
                    "in_progress",
                    attempts=rec.attempts,
                    started_at=rec.started_at,
                    iteration=iteration,
                )
                self.save(sid, ctx.take_writes())
                if self.progress is not None:
                    self.events.publish(RunProgress(self.run_id, *self.progress))
                if self.engine.is_cancel_requested(self.run_id):
                    raise _Canceled()


class Engine:
    """Runs flows durably over a :class:`CheckpointStore`.

    Args:
        store: where runs and checkpoints live (SQLite or in-memory).
        flows: compiled flows to register (by name).
        events: the bus step/run events are published on.
        clock: the source of time (UTC epoch seconds); inject a ManualClock in tests.

    Thread-safety: one engine may drive different runs from different
    threads; a run driven twice at once loses with ``RevisionConflictError``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        flows: Iterable[CompiledFlow[Any]] = (),
        events: EventBus | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.events = events if events is not None else EventBus()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._flows: dict[str, CompiledFlow[Any]] = {}
        self._cancel: set[str] = set()
        self._lock = threading.Lock()
        for f in flows:
            self.register(f)

    # -- registry --------------------------------------------------------

    def register(self, flow: CompiledFlow[Any]) -> None:
        """Register (or replace) a flow under its name."""
        self._flows[flow.name] = flow

    @property
    def flows(self) -> Mapping[str, CompiledFlow[Any]]:
        return dict(self._flows)

    def flow(self, name: str) -> CompiledFlow[Any]:
        """Raises UnknownFlowError."""
        try:
            return self._flows[name]
        except KeyError:
            known = ", ".join(sorted(self._flows)) or "none"
            raise UnknownFlowError(
                f"no flow named {name!r} is registered (known: {known})"
            ) from None

    def _resolve(self, flow: CompiledFlow[Any] | str) -> CompiledFlow[Any]:
        if isinstance(flow, str):
            return self.flow(flow)
        if flow.name not in self._flows:
            self.register(flow)
        return flow

    # -- starting and resuming ------------------------------------------

    def start(
        self,
        flow: CompiledFlow[Any] | str,
        state: BaseModel | Mapping[str, Any],
        *,
        run_id: str | None = None,
        context: ExecutionContext | None = None,
        flow_key: str | None = None,
        parent_run_id: str | None = None,
        _running: bool = False,
    ) -> str:
        """Create a run (status ``pending``) without executing it; returns its id.

        Raises:
            pydantic.ValidationError: ``state`` does not fit the flow's model.
            RevisionConflictError: ``run_id`` is taken.
            StoreError: the run could not be saved.
        """
        f = self._resolve(flow)
        model = state if isinstance(state, f.state_type) else f.state_type.model_validate(state)
        rid = run_id or uuid.uuid4().hex
        ctx = (context or ExecutionContext()).model_copy(update={"run_id": rid})
        now = self.clock.now()
        steps = (
            {f.entry: StepRecord(f.entry, "in_progress", attempts=1, started_at=now)}
            if _running
            else {}
        )
        status: RunStatus = "running" if _running else "pending"
        cp = Checkpoint(rid, 0, status, dump_state(model), steps, (f.entry,), now)
        run = RunRecord(
            run_id=rid,
            flow_name=f.name,
            flow_version=f.version,
            status=status,
            revision=0,
            created_at=now,
            updated_at=now,
            scope=self.store.scope,
            flow_key=flow_key,
            parent_run_id=parent_run_id,
            context=ctx.model_dump(),
        )
        self.store.create_run(run, cp)
        return rid

    def run(
        self,
        flow: CompiledFlow[Any] | str,
        state: BaseModel | Mapping[str, Any],
        *,
        run_id: str | None = None,
        context: ExecutionContext | None = None,
        flow_key: str | None = None,
        parent_run_id: str | None = None,
    ) -> RunResult:
        """Start a run and execute it until it completes, fails or waits.

        A step that fails after its last attempt gives a result with status
        ``failed`` (not an exception). Raises StoreError when a checkpoint
        cannot be saved; no later step runs.
        """
        f = self._resolve(flow)
        rid = self.start(
            f,
            state,
            run_id=run_id,
            context=context,
            flow_key=flow_key,
            parent_run_id=parent_run_id,
            _running=True,
        )
        run = self.store.get_run(rid)
        driver = _RunDriver(self, f, run, self.store.latest(rid))
        return driver.drive(recovered=False)

    def resume(self, run_id: str) -> RunResult:
        """Continue a run from its latest checkpoint.

        Completed runs: no step runs; the saved result comes back. Failed,
        pending or interrupted runs continue at their head step (an
        ``in_progress`` step runs again).

        Raises:
            CheckpointNotFoundError: no such run in this scope.
            RunStateError: the run was canceled or timed out.
            FlowVersionMismatchError: the run's flow changed since it started.
            CheckpointDecodeError: its checkpoint cannot be decoded.
            UnknownFlowError: its flow is not registered.
        """
        run = self.store.get_run(run_id)
        if run.status in ("canceled", "timed_out"):
            raise RunStateError(
                f"run {run_id} is {run.status}; it cannot be resumed. Replay or fork it "
                "from a checkpoint to run it again."
            )
        f = self.flow(run.flow_name)
        if run.flow_version != f.version:
            raise FlowVersionMismatchError(run_id, run.flow_version, f.version)
        cp = self.store.latest(run_id)
        driver = _RunDriver(self, f, run, cp)
        if run.status == "completed" or not driver.frontier:
            return driver.result()
        self._cancel.discard(run_id)
        driver.mark_resumed()
        return driver.drive(recovered=True)

    def resume_pending(self) -> ResumePendingResult:
        """Resume :meth:`pending` runs oldest first; stop at the first error.

        A run that raises or ends ``failed`` stops the sweep; its id is in
        ``failed_run_id``; later runs are untouched (go-micro ResumePending).
        """
        out = ResumePendingResult()
        for run in self.pending():
            try:
                res = self.resume(run.run_id)
            except FlowdeskError as exc:
                out.failed_run_id, out.error = run.run_id, exc
                return out
            out.resumed.append(res)
            if res.status == "failed":
                out.failed_run_id = run.run_id
                out.error = StepFailedError(run.run_id, "", 0, res.error or "failed")
                return out
        return out

    def recover(
        self, on_result: Callable[[RunRecord, RunResult | BaseException], None] | None = None
    ) -> list[tuple[RunRecord, RunResult | BaseException]]:
        """Resume every interrupted run (``pending`` or ``running``), oldest
        first, continuing past failures; what the app and ``flowdesk agent``
        do at launch. Failed runs are left for a person to resume."""
        report: list[tuple[RunRecord, RunResult | BaseException]] = []
        for run in self.store.list_runs(statuses=("pending", "running")):
            outcome: RunResult | BaseException
            try:
                outcome = self.resume(run.run_id)
            except FlowdeskError as exc:
                outcome = exc
            report.append((run, outcome))
            if on_result is not None:
                on_result(run, outcome)
        return report

    # -- control ---------------------------------------------------------

    def cancel(self, run_id: str, reason: str = "canceled by user") -> RunRecord:
        """Move a pending, running, waiting or failed run to ``canceled``.

        A run being driven in this process stops before its next step.
        Raises RunStateError for a completed, canceled or timed-out run.
        """
        with self._lock:
            self._cancel.add(run_id)
        for _ in range(10):
            run = self.store.get_run(run_id)
            if run.status in ("completed", "canceled", "timed_out"):
                raise RunStateError(f"run {run_id} is already {run.status}; nothing to cancel")
            cp = self.store.latest(run_id)
            try:
                self.store.append(
                    cp.evolve(
                        revision=cp.revision + 1,
                        status="canceled",
                        error=reason,
                        created_at=self.clock.now(),
                        step_id=cp.frontier[0] if cp.frontier else "",
                    )
                )
            except RevisionConflictError:
                continue
            return self.store.get_run(run_id)
        raise RunStateError(f"run {run_id} kept changing; cancel did not take effect, try again")

    def is_cancel_requested(self, run_id: str) -> bool:
        return run_id in self._cancel

    # -- reading (never runs anything) -----------------------------------

    def get(self, run_id: str) -> Any:
        """The latest state, decoded into the flow's model. Runs nothing."""
        run = self.store.get_run(run_id)
        cp = self.store.latest(run_id)
        return load_state(self.flow(run.flow_name).state_type, cp.state, run_id, cp.revision)

    def status(self, run_id: str) -> RunRecord:
        """Run metadata only; decodes no state."""
        return self.store.get_run(run_id)

    def pending(self) -> list[RunRecord]:
        """Runs not completed and not waiting: pending, running, failed; oldest first."""
        return self.store.list_runs(statuses=PENDING_STATUSES)

    def waiting(self) -> list[RunRecord]:
        return self.store.list_runs(statuses=("waiting",))

    def history(self, run_id: str) -> list[CheckpointInfo]:
        return self.store.history(run_id)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """A checkpoint by its stable id ``"<run_id>:<revision>"``."""
        try:
            run_id, revision = parse_checkpoint_id(checkpoint_id)
        except ValueError as exc:
            raise CheckpointNotFoundError(str(exc)) from exc
        return self.store.get_checkpoint(run_id, revision)
