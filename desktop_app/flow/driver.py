"""Driving one run: executing steps and checkpointing after each.

Durability protocol (one commit per step):

* A run is created with revision 0 holding the input state and the entry
  step recorded ``in_progress`` (attempt 1).
* When a step completes, ONE checkpoint saves its ``completed`` record, the
  new state (only changed fields, see ``StateTracker``), the step's domain
  writes, the new frontier and the next step's ``in_progress`` record. A
  crash before that commit leaves the step ``in_progress``: it runs again on
  resume (at-least-once, go-micro semantics). A crash after it never runs the
  step again.
* Loop iterations, finished parallel branches and nested condition steps
  are checkpointed as they finish, so a crash re-runs only what was in flight.
* A failed attempt with retries left saves the next attempt number and the
  time before which it must not start (``next_retry_at``); a restart during
  the backoff waits for the stored time, then runs that attempt.
* A failed save raises ``StoreError`` out of the driver; no later step runs.
* Every attempt starts from the state as last stored (a failed attempt's
  in-place mutations are forgotten); a timed-out attempt commits nothing and
  its retry starts only once it returned (see :func:`call_step`).
* A child run a step starts is journaled in ``meta["children"]`` in its own
  checkpoint before it starts (:meth:`RunDriver.journal_child`).

This module keeps the loop: a step's attempts under its retry policy, its
completion and the frontier. The rest runs on the driver through narrow
protocols: how one checkpoint is assembled and committed
(:mod:`~desktop_app.flow.saving`), waits (:mod:`~desktop_app.flow.waiting`),
questions and answers (:mod:`~desktop_app.flow.answers`) and composite steps
(:mod:`~desktop_app.flow.composite`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from desktop_app.errors import (
    DiskFullError,
    DomainWriteError,
    FlowdeskError,
    LeaseLostError,
    RevisionConflictError,
    RouteError,
    StateNotStorableError,
    StepFailedError,
    StoreError,
)
from desktop_app.flow.answers import suspend_for_answers
from desktop_app.flow.composite import COMPOSITES, NestedStopped, merge_branches
from desktop_app.flow.context import (
    STORED,
    ExecutionContext,
    Interrupt,
    StepContext,
)
from desktop_app.flow.definition import (
    AnyStep,
    AwaitStep,
    CompiledFlow,
    ConditionStep,
    ParallelStep,
    Step,
    WaitStep,
)
from desktop_app.flow.events import (
    RunFinished,
    RunProgress,
    RunStarted,
    StepFinished,
    StepResult,
    StepStarted,
)
from desktop_app.flow.host import DriverHost
from desktop_app.flow.outbox import delete_when_sent
from desktop_app.flow.results import RunResult
from desktop_app.flow.run import RunMeta, forget_answers, run_meta
from desktop_app.flow.saving import commit_checkpoint
from desktop_app.flow.state import (
    StateTracker,
    StepRecords,
    apply_output,
    load_state,
)
from desktop_app.flow.step_call import Canceled, Outcome, Stopped, call_step, settle
from desktop_app.flow.waiting import run_wait, timed_out_writes
from desktop_app.store import codec
from desktop_app.store.protocol import (
    Checkpoint,
    DomainWrite,
    Intent,
    RunRecord,
    RunStatus,
    StepRecord,
    Wait,
)
from desktop_app.words import local_and_utc

#: what a step's checkpoint commit raises when the store refuses what the
#: step did (its domain writes, a value it cannot encode): the attempt
#: failed, not the store; never a reason to leave the run ``running``
STEP_COMMIT_ERRORS = (DomainWriteError, StateNotStorableError)


class RunDriver:
    """Drives one run from a checkpoint until it finishes, fails, waits or is canceled."""

    def __init__(
        self,
        host: DriverHost,
        flow: CompiledFlow[Any],
        run: RunRecord,
        cp: Checkpoint,
        context: ExecutionContext | None = None,
        stored_state: dict[str, Any] | None = None,
    ) -> None:
        """Args: host: the engine; flow: the run's flow; run, cp: the run
        and the checkpoint to start from; context: the run's context when
        the caller made it (``run.context`` as a model: a run just created),
        else validated from ``run.context``; stored_state: a copy of
        ``cp.state`` that nothing else holds (a run just created: a second
        dump of its state), else ``cp.state`` is deep-copied.

        Raises:
            CheckpointDecodeError: ``cp``'s state does not fit the flow's model.
            pydantic.ValidationError: ``run.context`` is not an execution context.
        """
        self.host = host
        self.store = host.store
        self.clock = host.clock
        self.events = host.events
        self.flow = flow
        self.run = run
        self.run_id = run.run_id
        #: saves come from the driver's thread and from steps journaling children
        self.save_lock = threading.RLock()
        self.load(cp, stored_state)
        self.context = (
            context
            if context is not None
            else ExecutionContext.model_validate(dict(run.context), context=STORED)
        )
        self.cancel_event = host.cancel_event(run.run_id)
        self.saves = 0
        #: ``(holder, dead)``: the first save takes the run from that holder,
        #: as a compare-and-set on it (see ``RunState.takeover``)
        self.takeover: tuple[str, bool] | None = None
        self.recovering: str | None = None

    def load(self, cp: Checkpoint, stored_state: dict[str, Any] | None = None) -> None:
        """Take the run as ``cp`` stored it: state, step records, frontier,
        meta, waits, progress, status and error (``stored_state``: a copy of
        ``cp.state`` no one else holds, taken as the stored state as it is).

        Raises:
            CheckpointDecodeError: ``cp``'s state does not fit the flow's model.
        """
        self.revision = cp.revision
        self.saved_at = cp.created_at
        self.status: RunStatus = cp.status
        self.state = load_state(self.flow.state_type, cp.state, self.run_id, cp.revision)
        self.tracker = StateTracker(self.state, strict=self.host.check_state)
        #: the state as last stored; every retry starts from a copy of it
        #: (S62, S83): never shared with ``self.state``, whose nested values
        #: (``Any`` fields keep the decoded objects) a step may change in place
        self.stored_state: Mapping[str, Any] = (
            codec.copy(dict(cp.state)) if stored_state is None else stored_state
        )
        self.stored_steps: Mapping[str, StepRecord] = dict(cp.steps)
        self.steps = StepRecords(cp.steps)
        self.frontier: list[str] = list(cp.frontier)
        self.meta: RunMeta = run_meta(cp.meta)
        self.waits: list[Wait] = list(cp.waits)
        self.pending_consume: list[tuple[int, str]] = []
        self.progress = cp.progress
        self.error = cp.error

    # -- persistence -----------------------------------------------------

    def save(
        self,
        step_id: str,
        writes: Iterable[DomainWrite] = (),
        intents: Iterable[Intent] = (),
        consume: Iterable[tuple[int, str]] = (),
    ) -> None:
        with self.save_lock:
            commit_checkpoint(self, step_id, writes, intents, consume)

    def new_context(self, step_id: str, attempt: int, iteration: int) -> StepContext:
        return StepContext(
            self.run_id,
            step_id,
            attempt,
            self.context,
            iteration,
            self.store.query,
            answers=self.meta.get("answers", {}),
            answered=self.meta.get("asked", {}),
            continuations=self.meta.get("continuations", {}),
            journal=self.journal_child,
            visit=int(self.meta.get("visits", {}).get(self.frontier[0], 0)) if self.frontier else 0,
            lease_lost=self.lease_in_doubt,
        )

    def lease_in_doubt(self) -> bool:
        """True once this process can no longer prove it holds the run's lease."""
        return self.run_id in self.host.lost

    def enter(self, step_id: str, now: float) -> None:
        """Put ``step_id`` in progress: the run moves on to it.

        A step that already ran in this run (a route, an error route or a
        timeout route back to it) starts a new visit. ``meta["visits"]``
        counts the earlier visits of each step, and saves the count with this
        checkpoint, so the visit's keys (``StepContext.visit_key``: wait ids,
        idempotency key, child runs) are new and stay the same across its
        retries and restarts. A condition entered again decides again: its
        decision is dropped and its nested steps are marked skipped until it
        runs them.
        """
        if step_id in self.steps:
            visits = dict(self.meta.get("visits", {}))
            visits[step_id] = int(visits.get(step_id, 0)) + 1
            self.meta["visits"] = visits
            step = self.flow.steps.get(step_id)
            if isinstance(step, ConditionStep):
                decided = self.meta.get("conditions", {})
                self.meta["conditions"] = {k: v for k, v in decided.items() if k != step_id}
                for inner in step.steps:
                    if inner.id in self.steps:
                        self.steps[inner.id] = StepRecord(inner.id, "skipped")
        self.steps[step_id] = StepRecord(step_id, "in_progress", 1, now)  # attempts, started_at

    def journal_child(self, key: str, seq: int, kind: str, proposed: str) -> str:
        """The child recorded for ``(key, seq)``, else record ``proposed`` now
        (one checkpoint, before the child starts) and return it."""
        with self.save_lock:
            children: dict[str, Any] = dict(self.meta.get("children", {}))
            slots = list(children.get(key, []))
            if seq < len(slots):
                return str(slots[seq]["id"])
            slots.append({"id": proposed, "kind": kind})
            children[key] = slots
            self.meta["children"] = children
            self.save(self.frontier[0] if self.frontier else key)
            return proposed

    def restore_stored_state(self, record_id: str) -> None:
        """Forget what a failed attempt did in memory: the state (also when
        mutated in place, nested values too) and the loop position go back to
        the last checkpoint."""
        data = codec.copy(dict(self.stored_state))  # the next attempt may mutate it too
        self.state = load_state(self.flow.state_type, data, self.run_id, self.revision)
        self.tracker = StateTracker(self.state, strict=self.host.check_state)
        stored = self.stored_steps.get(record_id)
        rec = self.steps.get(record_id)
        if stored is not None and rec is not None and stored.iteration != rec.iteration:
            self.steps[record_id] = StepRecord(
                record_id,
                rec.status,
                attempts=rec.attempts,
                started_at=rec.started_at,
                iteration=stored.iteration,
                error=rec.error,
                error_type=rec.error_type,
            )

    def is_running(self) -> bool:
        return self.status == "running"

    def result(self) -> RunResult:
        return RunResult(self.run_id, self.status, self.state, self.revision, self.error)

    def check_cancel(self) -> None:
        if self.cancel_event.is_set():
            raise Canceled()
        if self.run_id in self.host.lost:
            raise self.lease_lost()
        if self.host.shutdown_event.is_set():
            raise Stopped()

    def lease_lost(self) -> LeaseLostError:
        """The error of a driver whose lease another process took, or could
        not be renewed for its TTL: it commits nothing more."""
        return LeaseLostError(
            f"run {self.run_id}: this process ({self.host.owner}) can no longer prove it "
            "holds the run's lease (another process took it over, or the lease could not "
            "be renewed in time); it stops before committing anything more. The run stays "
            "resumable: its current step runs again wherever it is resumed."
        )

    def release(self) -> None:
        """Give up this process's lease on the run."""
        self.store.release(self.run_id, self.host.owner)

    def hand_back(self) -> None:
        """Before the run is given back between steps (the engine stops, or
        it does not execute runs: ``Engine(executes=False)`` after an answer),
        save its head function step's attempt as not begun (``next_retry_at``
        now, what a retry's backoff records), so whoever resumes it runs that
        attempt as it stands: not counted again, and a ``resume_only`` step
        runs its function, not ``on_recover``, which is for an attempt a
        crash may have cut. Nothing is saved for a step whose recovery is
        still due (``recovering``), one already marked, or a composite step.

        Raises:
            StoreError / LeaseLostError: the save failed (the run is then
                resumed as interrupted: the safe reading).
            Canceled: another process canceled the run meanwhile.
        """
        if self.status != "running" or not self.frontier:
            return
        head = self.frontier[0]
        rec = self.steps.get(head)
        if (
            rec is None
            or rec.status != "in_progress"
            or rec.next_retry_at is not None
            or self.recovering == head
            or not isinstance(self.flow.steps.get(head), Step)
        ):
            return
        self.steps[head] = dataclasses.replace(rec, next_retry_at=self.clock.now())
        self.save(head)

    def hand_back_between_steps(self) -> None:
        """:meth:`hand_back` for a driver stopping before its head step's
        body ran; a failed save is left as it is (the run is then resumed
        as interrupted: the safe reading), a cancel meanwhile propagates."""
        with contextlib.suppress(FlowdeskError):
            self.hand_back()

    # -- entry points ----------------------------------------------------

    def prepare_resume(self) -> None:
        """Record that the head step is attempted again, and mark the run running.

        * in progress, no pending backoff: the process died mid-attempt, so
          this is a new attempt (count + 1); ``resume_only`` steps recover.
        * in progress with ``next_retry_at``: that attempt never started.
        * failed or paused by an operator: a fresh attempt budget (saved as
          not begun, ``next_retry_at`` now, by an engine that does not
          execute: it hands the run to a worker, see :meth:`hand_back`).

        A run stopped while ``running`` (its process died or let go) or
        ``failed`` adds ``[revision, status]`` to ``meta["resumed"]``: the
        revision this resume saves and what the run was before it, so a
        timeline shows the stop and counts only time spent running.
        """
        now = self.clock.now()
        head = self.frontier[0]
        rec = self.steps.get(head)
        if "pause" in self.meta or self.status in ("running", "failed"):
            was = "paused" if "pause" in self.meta else self.status
            self.meta["resumed"] = [*self.meta.get("resumed", []), [self.revision + 1, was]]
        self.meta.pop("pause", None)
        if rec is not None and rec.status == "in_progress" and rec.next_retry_at is not None:
            pass
        elif rec is not None and rec.status == "in_progress":
            self.steps[head] = StepRecord(
                head,
                "in_progress",
                attempts=rec.attempts + 1,
                started_at=now,
                iteration=rec.iteration,
                error=rec.error,
                error_type=rec.error_type,
            )
            self.recovering = head
        else:
            iteration = rec.iteration if rec is not None else 0
            self.steps[head] = StepRecord(
                head,
                "in_progress",
                attempts=1,
                started_at=now,
                iteration=iteration,
                # an engine that does not execute hands the run to a worker:
                # the attempt has not begun (see hand_back), said in this save
                next_retry_at=(
                    now
                    if not self.host.executes and isinstance(self.flow.steps.get(head), Step)
                    else None
                ),
            )
        self.status = "running"
        self.error = None
        self.save(head)

    def drive(self) -> RunResult:
        if self.events.listening:
            self.events.publish(RunStarted(self.run_id, self.flow.name))
        self.host.track(self.run_id, True)
        try:
            if self.host.shutdown_event.is_set():
                self.hand_back_between_steps()  # stopped before its first step here
                return self.result()
            return self._drive()
        finally:
            self.host.track(self.run_id, False)
            self.host.forget_cancel(self.run_id)
            if self.status in ("running", "pending"):
                # stopped early: hand the run back (finished runs cleared it on save)
                with contextlib.suppress(FlowdeskError):  # else it expires on its own
                    self.release()

    def _drive(self) -> RunResult:
        try:
            flow = self.flow
            cancel, shutdown, lost = self.cancel_event, self.host.shutdown_event, self.host.lost
            while self.frontier and self.status == "running":
                if cancel.is_set() or self.run_id in lost or shutdown.is_set():
                    try:
                        self.check_cancel()  # raises what stops the run
                    except Stopped:  # between steps: the head step's attempt never began
                        self.hand_back_between_steps()
                        raise
                if self.run.deadline_at is not None and self.run_deadline_passed():
                    self.time_out_run()
                    break
                sid = self.frontier[0]
                taken = int(self.meta.get("steps_taken", 0))
                if taken >= flow.max_steps:
                    self.status = "failed"
                    self.error = f"halted: max_steps {flow.max_steps} reached at step {sid!r}"
                    self.meta["halt_reason"] = "max_steps"
                    self.save(sid)
                    break
                step = flow.steps[sid]
                if sid in flow.lean:
                    self.run_lean(step)  # type: ignore[arg-type]  # lean: a plain Step
                else:
                    self.run_head(step)
        except Canceled:
            latest = self.store.latest(self.run_id)
            if latest.status != "canceled":
                raise
            self.status = "canceled"
            self.revision = latest.revision
            self.error = latest.error
        except Stopped:
            return self.result()  # still running; resumable by whoever holds it next
        if self.events.listening:
            self.events.publish(RunFinished(self.run_id, self.status, self.error))
        self.apply_retention()
        return self.result()

    def apply_retention(self) -> None:
        """What the flow keeps of a run that stopped: a completed run of a
        ``delete_on_success`` flow is deleted once its side effects are
        delivered (:func:`~desktop_app.flow.outbox.delete_when_sent`); a
        ``keep_last_n`` flow's run keeps its last ``n`` checkpoints. Called
        when the step loop ends, and when a wake ended the run (a signal
        taken by its last wait) with no step loop after it."""
        if self.status == "completed" and self.flow.delete_on_success:
            delete_when_sent(self.store, self.run_id)
        elif self.flow.keep_last_n is not None and self.status != "running":
            self.store.prune(self.run_id, self.flow.keep_last_n)

    # -- one step --------------------------------------------------------

    def run_head(self, step: AnyStep) -> None:
        if isinstance(step, (AwaitStep, WaitStep)):
            run_wait(self, step)
            return
        body = self.body_of(step)
        self.recovering = None
        routed: list[tuple[str, ...]] = []

        def body_then_route(ctx: StepContext) -> None:
            """The step, then its route on the state it left: a route that
            raises fails this attempt (RouteError, not retried)."""
            body(ctx)
            routed[:] = [self.route_from(step.id, self.state)]

        while True:
            try:
                outcome, ctx, t0 = self.attempt(step, step.id, body_then_route)
            except NestedStopped:
                return  # the nested step's failure was recorded and saved
            if outcome != "ok":
                return
            try:
                self.complete(step, ctx, t0, routed[0])
                return
            except STEP_COMMIT_ERRORS as exc:
                # the store refused what the step did (S84): nothing of it was
                # saved, so go back to the run as stored and fail the attempt
                self.load(self.store.latest(self.run_id))
                if self.after_failure(step, step.id, exc, t0) != "retry":
                    return

    def run_lean(self, step: Step) -> None:
        """:meth:`run_head` for a step of ``flow.lean`` (a plain synchronous
        function step, no timeout, idempotent recovery): one attempt as
        :meth:`attempt` runs it, then :meth:`complete`, without what such a
        step never needs (the closures of a body, a recovery branch, a
        thread for a timeout, events nobody receives, a context for a
        function that takes none, a route function's call when the step has
        none, a second encoding of a state nothing changed since). A record
        with a backoff pending, and whatever follows a failed attempt (its
        retries), take the general path.
        """
        sid = step.id
        rec = self.steps[sid]
        if rec.next_retry_at is not None:
            self.run_head(step)
            return
        self.recovering = None
        flow = self.flow
        if self.events.listening:
            self.events.publish(StepStarted(self.run_id, sid, rec.attempts))
        t0 = time.perf_counter()
        arity = flow.lean[sid]
        # a function that takes no context gets none, nor needs one made
        ctx = self.new_context(sid, rec.attempts, rec.iteration) if arity == 2 else None
        nxt = flow.lean_next.get(sid)
        try:
            fn, state = step.fn, self.state
            out = fn(state) if arity == 1 else fn(state, ctx) if arity == 2 else fn()
            if out is not None and type(out) is not dict and inspect.isawaitable(out):
                out = settle(out)
            self.take_output(out, sid)
            if nxt is None:  # a route function reads the state (and may change it)
                nxt = self.route_from(sid, self.state)
                encoded = False
            else:
                encoded = True  # nothing ran since take_output encoded it
        except (Interrupt, Exception) as exc:
            if self.attempt_failed(step, sid, exc, t0) == "retry":
                self.run_head(step)
            return
        try:
            self.complete(step, ctx, t0, nxt, encoded)
        except STEP_COMMIT_ERRORS as exc:
            self.load(self.store.latest(self.run_id))  # as run_head: nothing was saved
            if self.after_failure(step, sid, exc, t0) == "retry":
                self.run_head(step)

    def route_from(self, step_id: str, state: Any) -> tuple[str, ...]:
        """The steps after ``step_id`` on ``state`` (its route, edges or finish).

        Raises:
            RouteError: the route function raised, or picked a target it did
                not declare.
        """
        try:
            return self.flow.next_steps(step_id, state)
        except Exception as exc:
            raise RouteError(self.flow.name, step_id, exc) from exc

    def body_of(self, step: AnyStep) -> Callable[[StepContext], None]:
        """What one attempt of ``step`` does."""

        def body(ctx: StepContext) -> None:
            if composite is not None:
                composite(self, step, ctx)
            elif isinstance(step, Step):
                if recovering and step.policy.recovery == "resume_only":
                    if step.policy.on_recover is not None:
                        self.invoke(step.policy.on_recover, ctx)
                else:
                    self.invoke(step.fn, ctx, step.policy.timeout_s)

        composite = COMPOSITES.get(step.kind)
        recovering = self.recovering == step.id
        return body

    def attempt(
        self, step: AnyStep | Step, record_id: str, body: Callable[[StepContext], None]
    ) -> tuple[Outcome, StepContext, float]:
        """Run ``body`` under the step's retry policy; returns how it ended."""
        while True:
            rec = self.steps[record_id]
            if rec.next_retry_at is not None:
                wait = rec.next_retry_at - self.clock.now()
                if wait > 0 and not self.clock.sleep(wait, self.cancel_event):
                    raise Canceled()
                self.check_cancel()
                # the attempt begins: saved before its body runs, so that a
                # crash inside it is resumed as one (counted, and a
                # ``resume_only`` step recovers), not as an attempt that never
                # began (its function again: a second side effect)
                rec = dataclasses.replace(rec, next_retry_at=None)
                self.steps[record_id] = rec
                self.save(record_id)
            if self.events.listening:
                self.events.publish(StepStarted(self.run_id, record_id, rec.attempts))
            t0 = time.perf_counter()
            ctx = self.new_context(record_id, rec.attempts, rec.iteration)
            try:
                body(ctx)
            except (Interrupt, Exception) as exc:
                outcome = self.attempt_failed(step, record_id, exc, t0)
                if outcome == "retry":
                    continue
                return outcome, ctx, t0
            return "ok", ctx, t0

    def attempt_failed(
        self, step: AnyStep | Step, record_id: str, exc: BaseException, t0: float
    ) -> Outcome | Literal["retry"]:
        """What follows an attempt of ``record_id`` that raised ``exc``: a
        question suspends the run (``"stop"``); a step's own error restores
        the state as last stored and goes to :meth:`after_failure`.

        Raises:
            exc: storage failed, the run was canceled or stopped, or a
                nested step decided (``NestedStopped``).
            DiskFullError: the step met a full disk: the run pauses,
                resumable once space is free (not failed).
        """
        if isinstance(exc, Interrupt):
            suspend_for_answers(self, exc.requests)
            return "stop"
        if not isinstance(exc, Exception) or isinstance(
            exc, (Canceled, Stopped, StoreError, RevisionConflictError, NestedStopped)
        ):
            raise exc
        if (full := DiskFullError.of_step(exc, self.run_id, record_id)) is not None:
            raise full from exc
        self.restore_stored_state(record_id)
        return self.after_failure(step, record_id, exc, t0)

    def after_failure(
        self, step: AnyStep | Step, record_id: str, exc: Exception, t0: float
    ) -> Outcome | Literal["retry"]:
        rec = self.steps[record_id]
        ms = (time.perf_counter() - t0) * 1000
        kind = type(exc).__name__
        message = f"{kind}: {exc}"
        self.events.publish(
            StepFinished(self.run_id, StepResult(record_id, "error", message, ms, kind))
        )
        now = self.clock.now()
        policy = self.flow.retry
        retries = step.policy.retry if step.policy.retry > 0 else policy.retries
        if policy.is_retryable(exc) and rec.attempts <= retries:
            delay = policy.backoff.delay(rec.attempts)
            self.steps[record_id] = StepRecord(
                record_id,
                "in_progress",
                attempts=rec.attempts + 1,
                started_at=rec.started_at,
                error=message,
                error_type=type(exc).__name__,
                iteration=rec.iteration,
                duration_ms=ms,
                next_retry_at=now + delay if delay > 0 else None,
            )
            self.save(record_id)
            return "retry"
        failed = StepRecord(
            record_id,
            "failed",
            attempts=rec.attempts,
            started_at=rec.started_at,
            finished_at=now,
            error=message,
            error_type=type(exc).__name__,
            iteration=rec.iteration,
            duration_ms=ms,
        )
        self.steps[record_id] = failed
        head = self.frontier[0]
        if step.policy.on_error == "route" and step.policy.error_route is not None:
            new = self.state.model_copy()
            if isinstance(step, ParallelStep):  # completed branches keep their output
                branches = dict(self.meta.get("branches", {}))
                new = merge_branches(self, step, new, branches.pop(record_id, {}))
                self.meta["branches"] = branches
                # the other branches' unanswered questions leave with the step
                self.waits = [w for w in self.waits if not w.step_id.startswith(f"{record_id}/")]
            self.flow.state_type.__pydantic_validator__.validate_assignment(
                new, step.policy.error_field, message
            )
            self.state = new
            target = step.policy.error_route
            if head != record_id:  # a nested step failed: its parent is done too
                self.steps[head] = StepRecord(
                    head,
                    "failed",
                    attempts=self.steps[head].attempts,
                    finished_at=now,
                    error=message,
                    error_type=type(exc).__name__,
                )
            self.frontier = [target, *[f for f in self.frontier[1:] if f != target]]
            self.enter(target, now)
            self.meta["steps_taken"] = int(self.meta.get("steps_taken", 0)) + 1
            self.save(record_id)
            return "routed"
        if step.policy.on_error == "pause":
            self.status = "waiting"
            self.error = f"paused after step {record_id!r} failed: {message}"
            self.meta["pause"] = {"step": record_id, "error": message}
        else:
            self.status = "failed"
            self.error = str(StepFailedError(self.run_id, record_id, rec.attempts, message))
        self.save(record_id)
        return "stop"

    def invoke(
        self, fn: Callable[..., Any], ctx: StepContext, timeout_s: float | None = None
    ) -> None:
        """Call a step function and apply what it returned to the state."""
        self.take_output(call_step(fn, self.state, ctx, timeout_s), ctx.step_id)

    def take_output(self, out: Any, step_id: str) -> None:
        """Make what step ``step_id`` returned (see ``apply_output``) the state.

        Raises:
            StateMutatedError: the step changed a state container in place.
            pydantic.ValidationError / TypeError: ``out`` does not fit the state.
            StateNotStorableError: a changed field cannot be stored.
        """
        returned = out if type(out) is dict else ()  # its keys: the fields it replaced
        self.tracker.check_unmutated(self.state, step_id, returned)
        new = apply_output(self.flow.state_type, self.state, out)
        self.tracker.encode(new, step_id, returned)  # unstorable: fail this attempt (S58)
        self.state = new

    def complete(
        self,
        step: AnyStep,
        ctx: StepContext | None,
        t0: float,
        nxt: tuple[str, ...],
        encoded: bool = False,
    ) -> None:
        """Record ``step`` completed and move the frontier on to ``nxt``.
        ``encoded``: the state's encoding is current (nothing ran since the
        step's output was encoded), so the save does not encode it again."""
        sid = step.id
        steps = self.steps
        rec = steps[sid]
        ms = (time.perf_counter() - t0) * 1000
        now = self.clock.now()
        # positional, in the fields' order (step_id, status, attempts,
        # started_at, finished_at, error, error_type, iteration, duration_ms):
        # made at every step
        steps[sid] = StepRecord(
            sid, "completed", rec.attempts, rec.started_at, now, None, None, rec.iteration, ms
        )
        meta = self.meta
        meta["steps_taken"] = int(meta.get("steps_taken", 0)) + 1
        branches = meta.get("branches")
        if isinstance(branches, dict) and sid in branches:
            meta["branches"] = {k: v for k, v in branches.items() if k != sid}
        frontier = self.frontier[1:]
        if frontier:  # parallel heads: the next steps join behind them, once
            frontier += [n for n in nxt if n not in frontier]
        else:  # the common case: nothing else in flight
            frontier = list(nxt)
        self.frontier = frontier
        if frontier:
            head = frontier[0]
            if head in steps:  # a visit again: counted
                self.enter(head, now)
            else:  # what enter() does for a step's first visit
                steps[head] = StepRecord(head, "in_progress", 1, now)
            self.status = "running"
        else:
            self.status = "completed"
        writes: list[DomainWrite] = []
        intents: list[Intent] = []
        if ctx is not None:
            progress = ctx.take_progress()
            if progress is not None:
                self.progress = progress
            writes = ctx.take_writes()
            intents = ctx.take_intents()
        if "answers" in meta or "choices" in meta or "asked" in meta or "continuations" in meta:
            forget_answers(meta, self.run_id, sid)  # else nothing was asked: nothing to forget
        if isinstance(step, ConditionStep):  # its nested steps completed with it
            for inner in step.steps:
                forget_answers(meta, self.run_id, inner.id)
        consume, self.pending_consume = self.pending_consume, []
        with self.save_lock:
            commit_checkpoint(self, sid, writes, intents, consume, now, encoded)
        if self.events.listening:
            self.events.publish(StepFinished(self.run_id, StepResult(sid, "done", None, ms)))
            if self.progress is not None:
                self.events.publish(RunProgress(self.run_id, *self.progress))

    # -- step kinds ------------------------------------------------------

    # -- waits -------------------------------------------------------------

    def run_deadline_passed(self) -> bool:
        deadline = self.run.deadline_at
        return deadline is not None and self.clock.now() >= deadline

    def time_out_run(self) -> None:
        """The run-level deadline (stored at creation) passed: end ``timed_out``."""
        self.status = "timed_out"
        deadline = self.run.deadline_at
        shown = "none" if deadline is None else local_and_utc(deadline)
        self.error = f"run deadline passed ({shown})"
        self.waits = []
        self.meta.pop("await", None)
        self.save(
            self.frontier[0] if self.frontier else "",
            timed_out_writes(self.flow, self.run_id),
        )
