"""The composite steps' executors: a loop, a condition and a parallel step,
each run by the driver through the narrow :class:`StepRunner` protocol and
dispatched by the step's type (``step.kind``, :data:`COMPOSITES`) instead
of a chain of ``isinstance`` tests. Loop iterations, nested condition steps
and finished parallel branches are checkpointed as they finish, so a crash
re-runs only what was in flight. Imports neither the driver nor the engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Protocol

from desktop_app.errors import FanInConflictError, ParallelBranchesError
from desktop_app.flow.clock import Clock
from desktop_app.flow.context import Interrupt, InterruptRequest, StepContext
from desktop_app.flow.definition import (
    AnyStep,
    CompiledFlow,
    ConditionStep,
    LoopStep,
    ParallelStep,
    Step,
)
from desktop_app.flow.events import EventBus, RunProgress, StepFinished, StepResult
from desktop_app.flow.run import RunMeta, forget_answers
from desktop_app.flow.state import StepRecords, encode_fields
from desktop_app.flow.step_call import Canceled, Outcome, Stopped, call_step
from desktop_app.store.protocol import DomainWrite, Intent, StepRecord, Wait


class StepRunner(Protocol):
    """The driver as a composite step's executor sees it: the run's state,
    records and meta, and the driver's way to attempt, checkpoint and
    cancel. (``RunDriver`` is the one implementation.)"""

    run_id: str
    flow: CompiledFlow[Any]
    state: Any
    meta: RunMeta
    steps: StepRecords
    waits: list[Wait]
    progress: tuple[int, int] | None
    events: EventBus
    clock: Clock
    cancel_event: threading.Event

    def save(
        self,
        step_id: str,
        writes: Iterable[DomainWrite] = (),
        intents: Iterable[Intent] = (),
        consume: Iterable[tuple[int, str]] = (),
    ) -> None: ...

    def attempt(
        self, step: AnyStep | Step, record_id: str, body: Callable[[StepContext], None]
    ) -> tuple[Outcome, StepContext, float]: ...

    def body_of(self, step: AnyStep) -> Callable[[StepContext], None]: ...

    def new_context(self, step_id: str, attempt: int, iteration: int) -> StepContext: ...

    def invoke(
        self, fn: Callable[..., Any], ctx: StepContext, timeout_s: float | None = None
    ) -> None: ...

    def check_cancel(self) -> None: ...


class NestedStopped(Exception):
    """A nested step stopped the run (failed, paused or routed); its failure
    was recorded and saved."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def run_loop(run: StepRunner, step: LoopStep, ctx: StepContext) -> None:
    sid = step.id
    iteration = run.steps[sid].iteration
    while iteration < step.max_iterations and not step.until(run.state):
        ctx.iteration = iteration + 1
        run.invoke(step.body, ctx, step.policy.timeout_s)
        iteration += 1
        if step.on_iteration is not None:
            step.on_iteration(iteration, run.state)
        if step.progress is not None:
            run.progress = step.progress(run.state)
        elif (p := ctx.take_progress()) is not None:
            run.progress = p
        rec = run.steps[sid]
        run.steps[sid] = StepRecord(
            sid,
            "in_progress",
            attempts=rec.attempts,
            started_at=rec.started_at,
            iteration=iteration,
        )
        if step.checkpoint_each_iteration:
            run.save(sid, ctx.take_writes(), ctx.take_intents())
            if run.progress is not None:
                run.events.publish(RunProgress(run.run_id, *run.progress))
        run.check_cancel()


def run_condition(run: StepRunner, step: ConditionStep, ctx: StepContext) -> None:
    decided = dict(run.meta.get("conditions", {}))
    if step.id not in decided:
        decided[step.id] = bool(step.predicate(run.state))
        run.meta["conditions"] = decided
    if not decided[step.id]:
        for n in step.steps:
            run.steps[n.id] = StepRecord(n.id, "skipped")
            run.events.publish(StepFinished(run.run_id, StepResult(n.id, "skipped", None, 0.0)))
        return
    for n in step.steps:
        rec = run.steps.get(n.id)
        if rec is not None and rec.status == "completed":
            continue
        attempts = rec.attempts + 1 if rec is not None and rec.status == "in_progress" else 1
        run.steps[n.id] = StepRecord(
            n.id, "in_progress", attempts=attempts, started_at=run.clock.now()
        )
        outcome, nctx, t0 = run.attempt(n, n.id, run.body_of(n))
        if outcome != "ok":
            raise NestedStopped(outcome)
        ms = (time.perf_counter() - t0) * 1000
        done = run.steps[n.id]
        run.steps[n.id] = StepRecord(
            n.id,
            "completed",
            attempts=done.attempts,
            started_at=done.started_at,
            finished_at=run.clock.now(),
            duration_ms=ms,
        )
        run.save(n.id, nctx.take_writes(), nctx.take_intents())
        run.events.publish(StepFinished(run.run_id, StepResult(n.id, "done", None, ms)))


def run_parallel(run: StepRunner, step: ParallelStep, ctx: StepContext) -> None:
    all_done = dict(run.meta.get("branches", {}))
    done: dict[str, Any] = dict(all_done.get(step.id, {}))
    base = run.state
    answers = run.meta.get("answers", {})
    # a branch whose question is still unanswered keeps waiting, untouched
    still_waiting = [
        w
        for w in run.waits
        if w.kind == "input" and w.step_id.startswith(f"{step.id}/") and w.wait_id not in answers
    ]
    asking = {w.step_id.split("/", 1)[1] for w in still_waiting}
    pending = [(name, fn) for name, fn in step.branches if name not in done and name not in asking]
    requests: list[InterruptRequest] = [
        InterruptRequest(w.wait_id, w.step_id, w.prompt, w.continuation, None)
        for w in still_waiting
    ]

    policy = run.flow.retry
    retries = step.policy.retry if step.policy.retry > 0 else policy.retries

    def run_branch(name: str, fn: Callable[..., Any]) -> tuple[dict[str, Any], list[Any]]:
        """One branch under its own retry policy (S60); every attempt gets
        its own copy of the stored state."""
        attempt = 0
        while True:
            attempt += 1
            # the step's attempt, plus this branch's own retries
            bctx = run.new_context(f"{step.id}/{name}", ctx.attempt + attempt - 1, 0)
            try:
                return branch_attempt(run, step, name, fn, base.model_copy(deep=True), bctx)
            except Interrupt:
                raise
            except Exception as exc:
                if not (policy.is_retryable(exc) and attempt <= retries):
                    raise
                delay = policy.backoff.delay(attempt)
                if delay > 0 and not run.clock.sleep(delay, run.cancel_event):
                    raise Canceled() from None
                run.check_cancel()

    errors: dict[str, BaseException] = {}
    if pending:
        workers = max(1, min(step.max_concurrency, len(pending)))
        with ThreadPoolExecutor(workers, thread_name_prefix=f"branch-{step.id}") as pool:
            futures = {pool.submit(run_branch, name, fn): name for name, fn in pending}
            for fut in as_completed(futures):
                name = futures[fut]
                try:
                    encoded, effects = fut.result()
                except Interrupt as intr:
                    requests.extend(intr.requests)
                    continue
                except (Canceled, Stopped):
                    raise
                except Exception as exc:
                    errors[name] = exc
                    continue
                done[name] = encoded
                all_done[step.id] = dict(done)
                run.meta["branches"] = dict(all_done)
                forget_answers(run.meta, run.run_id, f"{step.id}/{name}", nested=False)
                writes = [e for e in effects if not isinstance(e, Intent)]
                intents = [e for e in effects if isinstance(e, Intent)]
                run.save(step.id, writes, intents)
    if errors:
        # every failed branch named, in declared order; completed ones stay saved
        raise ParallelBranchesError(
            step.id,
            {
                name: f"{type(errors[name]).__name__}: {errors[name]}"
                for name, _ in step.branches
                if name in errors
            },
        )
    if requests:
        # several questions pending at once: each keeps its own stable wait
        # id, and they are listed (waits, the inbox, ``answer``'s refusal)
        # in the branches' declared order, as merged, not in the order the
        # branches happened to ask (a request's step is STEP/BRANCH)
        declared = {name: i for i, (name, _) in enumerate(step.branches)}
        prefix = len(step.id) + 1
        requests.sort(key=lambda r: declared.get(r.step_id[prefix:], 0))
        raise Interrupt(requests)
    run.state = merge_branches(run, step, base, done)


def branch_attempt(
    run: StepRunner,
    step: ParallelStep,
    name: str,
    fn: Callable[..., Any],
    base: Any,
    bctx: StepContext,
) -> tuple[dict[str, Any], list[Any]]:
    """One attempt of one branch: its encoded updates and its effects."""
    out = call_step(fn, base, bctx, step.policy.timeout_s)
    if out is None:
        out = {}
    if not isinstance(out, dict):
        raise TypeError(f"parallel branch {name!r} must return a dict of field updates or None")
    tmp = base.model_copy()
    validator = run.flow.state_type.__pydantic_validator__
    for field_name, value in out.items():
        validator.validate_assignment(tmp, field_name, value)
    encoded = encode_fields(tmp, set(out), f"{step.id}/{name}")
    return encoded, [*bctx.take_writes(), *bctx.take_intents()]


def merge_branches(run: StepRunner, step: ParallelStep, base: Any, done: dict[str, Any]) -> Any:
    """``base`` with the completed branches' updates applied in declared
    order (never completion order), through the step's reducers.

    Raises:
        FanInConflictError: two branches wrote a field that has no reducer.
    """
    validator = run.flow.state_type.__pydantic_validator__
    state = base.model_copy()
    written: set[str] = set()
    for name, _ in step.branches:
        if name not in done:
            continue
        decoded = base.model_copy()
        for field_name, value in done[name].items():
            validator.validate_assignment(decoded, field_name, value)
            update = getattr(decoded, field_name)
            reducer = step.reducers.get(field_name)
            if reducer is not None:
                update = reducer(getattr(state, field_name), update)
            elif field_name in written:
                raise FanInConflictError(
                    f"parallel {step.id!r}: branches both write {field_name!r}; declare a "
                    f"reducer for it"
                )
            written.add(field_name)
            validator.validate_assignment(state, field_name, update)
    return state


#: the executor of each composite step type, by ``step.kind``
COMPOSITES: dict[str, Callable[[StepRunner, Any, StepContext], None]] = {
    "loop": run_loop,
    "condition": run_condition,
    "parallel": run_parallel,
}
