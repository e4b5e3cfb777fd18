"""Waits while a run is driven: a wait step (await, signal, event, timer)
begins its wait once, then each time the run is driven or woken delivers
what arrived, takes the timeout outcome of a passed deadline, or keeps
waiting; a person's answer to an await step completes it (:func:`give_input`).
How each kind begins and polls is in :mod:`desktop_app.flow.wait_kinds`.

The driver runs these on itself, seen through :class:`WaitRunner`; this
module imports neither the driver nor the engine.
"""

from __future__ import annotations

import time
from typing import Any, Literal, Protocol, cast

from desktop_app.errors import RouteError, StateNotStorableError, WaitPayloadError
from desktop_app.flow.composite import StepRunner
from desktop_app.flow.context import StepContext
from desktop_app.flow.definition import AnyStep, AwaitStep, CompiledFlow, Step, WaitStep
from desktop_app.flow.run import remember_resolved
from desktop_app.flow.state import encode_fields
from desktop_app.flow.step_call import Outcome
from desktop_app.flow.wait_kinds import WAIT_KINDS, Arrival, wait_kind_of
from desktop_app.store import codec
from desktop_app.store.protocol import (
    CheckpointStore,
    DomainWrite,
    RunRecord,
    RunStatus,
    StepRecord,
    Wait,
)
from desktop_app.words import local_and_utc


def timed_out_writes(flow: CompiledFlow[Any], run_id: str) -> list[DomainWrite]:
    """The domain writes ``flow``'s :attr:`~CompiledFlow.on_timed_out` hook
    gives for run ``run_id``, which ends ``timed_out`` (none without a hook)."""
    hook = flow.on_timed_out
    return [] if hook is None else list(hook(run_id))


class WaitRunner(StepRunner, Protocol):
    """The driver as a wait sees it: a :class:`StepRunner` with the run's
    status, frontier and row, and the loop's moves a wait ends in."""

    store: CheckpointStore
    run: RunRecord
    status: RunStatus
    error: str | None
    frontier: list[str]
    pending_consume: list[tuple[int, str]]

    def enter(self, step_id: str, now: float) -> None: ...

    def complete(
        self, step: AnyStep, ctx: StepContext | None, t0: float, nxt: tuple[str, ...]
    ) -> None: ...

    def after_failure(
        self, step: AnyStep | Step, record_id: str, exc: Exception, t0: float
    ) -> Outcome | Literal["retry"]: ...

    def route_from(self, step_id: str, state: Any) -> tuple[str, ...]: ...

    def run_deadline_passed(self) -> bool: ...

    def time_out_run(self) -> None: ...


def wait_for(run: WaitRunner, step_id: str) -> Wait | None:
    return next((w for w in run.waits if w.step_id == step_id), None)


def run_wait(run: WaitRunner, step: AwaitStep | WaitStep) -> None:
    """Begin the step's wait (once) or check it: deliver, time out or keep waiting."""
    kind = wait_kind_of(step)
    wait = wait_for(run, step.id)
    t0 = time.perf_counter()
    ctx = run.new_context(step.id, 1, 0)
    began = wait is None
    if wait is None:
        begun: list[Wait] = []

        def begin(c: StepContext) -> None:
            """The step's own code (its key function, its on_enter) runs
            as an attempt: a failure retries or fails the step."""
            begun[:] = [kind.begin(step, run.run_id, run.state, run.meta, run.clock.now())]
            if isinstance(step, WaitStep) and step.on_enter is not None:
                # a one-shot effect: it commits with the wait and never runs again
                run.invoke(step.on_enter, c)

        outcome, ctx, t0 = run.attempt(step, step.id, begin)
        if outcome != "ok":
            return  # failed, paused or routed, and saved
        wait = begun[0]
        seq = dict(run.meta.get("wait_seq", {}))
        seq[step.id] = int(seq.get(step.id, 0)) + 1  # the number begin gave it, + 1
        run.meta["wait_seq"] = seq
        if step.id in run.meta.get("event_since", {}):
            since = {k: v for k, v in run.meta.pop("event_since").items() if k != step.id}
            if since:
                run.meta["event_since"] = since
        run.waits.append(wait)
        run.steps[step.id] = StepRecord(
            step.id,
            "waiting",
            attempts=run.steps[step.id].attempts,
            started_at=wait.created_at,
        )
    now = run.clock.now()
    arrived = kind.poll(run.store, wait)
    while arrived is not None and not _too_late(arrived, wait, now):
        refused = _unfit(run, step, wait, arrived)
        if refused is None:
            resolve_wait(run, step, wait, arrived.payload, ctx, t0, consume=arrived.consume)
            return
        wait = refuse(run, step, wait, arrived, refused, ctx)
        began = False  # saved with the refusal
        now = run.clock.now()
        arrived = kind.poll(run.store, wait)
    if wait.deadline_at is not None and now >= wait.deadline_at:
        if kind.completes_at_deadline:
            resolve_wait(run, step, wait, None, ctx, t0)
        else:
            time_out(run, step, wait)
        return
    if not began and run.status == "waiting":
        return  # still waiting, nothing new: no checkpoint
    run.status = "waiting"
    run.error = None
    if isinstance(step, AwaitStep):
        run.meta["await"] = {"step": step.id, "into": step.into, "prompt": step.prompt}
    run.save(step.id, ctx.take_writes(), ctx.take_intents())


def _too_late(arrived: Arrival, wait: Wait, now: float) -> bool:
    """Whether ``arrived`` came after ``wait``'s deadline, which has passed:
    a signal or event sent after it does not complete the wait (the wait
    times out, as a late answer does; a signal stays unconsumed), while
    one sent in time completes it even when no process ran until after
    the deadline. While the deadline has not passed here, whatever arrived
    counts (a sender's clock ahead of this one's loses nothing)."""
    deadline, sent = wait.deadline_at, arrived.at
    return deadline is not None and now >= deadline and sent is not None and sent > deadline


def expected_type(flow: CompiledFlow[Any], step: AwaitStep | WaitStep) -> str:
    """What ``step``'s payload must be, as its ``into`` field declares it
    (``dict[str, Any] | None``), or ``"anything"`` for a step that keeps
    no payload."""
    if step.into is None:
        return "anything"
    field = flow.state_type.model_fields.get(step.into)
    if field is None or field.annotation is None:
        return "anything"
    text = getattr(field.annotation, "__name__", None)
    if text is None or "[" in repr(field.annotation) or "|" in repr(field.annotation):
        text = repr(field.annotation)
    return text.replace("typing.", "")


def fitted_state(
    flow: CompiledFlow[Any],
    state: Any,
    run_id: str,
    step: AwaitStep | WaitStep,
    kind: str,
    payload: Any,
) -> Any:
    """The state ``payload`` makes when it completes ``step`` of ``flow``
    (put in the step's ``into`` field; ``state`` itself when the step keeps
    no payload, or a signal, event or timer brought ``None``). ``state`` is
    not changed; ``kind`` (``"signal"``, ``"event"``, ...) names the payload
    in the error.

    Raises:
        WaitPayloadError: ``payload`` does not fit the field's type, or no
            checkpoint could store it there.
    """
    into = step.into
    if into is None or (payload is None and not isinstance(step, AwaitStep)):
        return state
    new = state.model_copy()
    try:
        flow.state_type.__pydantic_validator__.validate_assignment(new, into, payload)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        problem = f"{_payload_text(payload)} does not fit: {_first_errors(exc)}"
        raise WaitPayloadError(
            f"run {run_id}: the {kind} payload for step {step.id!r} does not fit field "
            f"{into!r} ({expected_type(flow, step)}): {problem}",
            problem,
        ) from exc
    try:  # stored before this check existed, or sent by another writer
        encode_fields(new, {into}, step.id)
    except StateNotStorableError as exc:
        raise WaitPayloadError(
            f"run {run_id}: the {kind} payload for step {step.id!r} cannot be stored in "
            f"field {into!r}: {exc.reason}",
            f"it cannot be stored: {exc.reason}",
        ) from exc
    return new


def _payload_text(payload: Any) -> str:
    """``payload`` as compact JSON, cut at 80 characters (``[1,2]``)."""
    try:
        text = codec.dumps(payload)
    except (TypeError, ValueError, RecursionError):
        text = repr(payload)
    return text if len(text) <= 80 else text[:79] + "…"


def _first_errors(exc: ValueError) -> str:
    """pydantic's first three messages of ``exc`` in one line (``Input
    should be a valid dictionary``), else ``exc``'s text on one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(str(e.get("msg", "")) for e in errors()[:3])
    return " ".join(str(exc).split())


#: how many refused signals (events) a run's meta keeps
#: (``meta["refused_signals"]``, ``meta["refused_events"]``)
REFUSED_KEPT = 20


def _unfit(
    run: WaitRunner, step: AwaitStep | WaitStep, wait: Wait, arrived: Arrival
) -> WaitPayloadError | None:
    """Why the signal or event that ``arrived`` for ``wait`` cannot complete
    ``step`` (its payload does not fit the step's field), or ``None``: it
    fits, or it is neither (a timer is judged by :func:`resolve_wait`)."""
    if arrived.ref is None:
        return None
    try:
        fitted_state(run.flow, run.state, run.run_id, step, wait.kind, arrived.payload)
    except WaitPayloadError as exc:
        return exc
    return None


def refuse(
    run: WaitRunner,
    step: AwaitStep | WaitStep,
    wait: Wait,
    arrived: Arrival,
    why: WaitPayloadError,
    ctx: StepContext,
) -> Wait:
    """The wait takes no signal or event whose payload does not fit its
    field: it refuses it and goes on waiting, as Temporal's SDKs drop a
    signal they cannot decode instead of failing the workflow. Refused, not
    lost: a signal is marked consumed by ``wait`` in the checkpoint that
    records the refusal, so no wait meets it again, and its row keeps the
    payload; an event (a broadcast, never consumed) stays published for
    other runs, and this wait looks on from just after it
    (:meth:`~desktop_app.flow.wait_kinds.WaitKind.after_refusal`). The
    refusal is kept in ``meta["refused_signals"]`` (``meta["refused_events"]``):
    the signal's (event's) id, the wait and the reason, the last
    :data:`REFUSED_KEPT`. The run stays ``waiting`` for the next one;
    ``show`` says why the last ones were refused (the on-enter writes and
    intents of a wait that began now commit with the refusal). Returns the
    wait that goes on waiting.

    Raises:
        RevisionConflictError: another wait took or refused the signal first.
        LeaseLostError, RunLeasedError, Canceled, StoreError: as any save.
    """
    kind = WAIT_KINDS[wait.kind]
    key = f"refused_{kind.noun}s"
    meta = cast(dict[str, Any], run.meta)  # its refused_signals or refused_events
    kept = [r for r in meta.get(key, []) if r[kind.noun] != arrived.ref]
    reason = f"field {step.into!r} ({expected_type(run.flow, step)}): {why.problem}"
    meta[key] = [*kept, {kind.noun: arrived.ref, "wait": wait.wait_id, "reason": reason}][
        -REFUSED_KEPT:
    ]
    going_on = kind.after_refusal(wait, arrived)
    run.waits = [going_on if w.wait_id == wait.wait_id else w for w in run.waits]
    run.status = "waiting"
    run.error = None
    run.save(step.id, ctx.take_writes(), ctx.take_intents(), arrived.consume or ())
    return going_on


def resolve_wait(
    run: WaitRunner,
    step: AwaitStep | WaitStep,
    wait: Wait,
    payload: Any,
    ctx: StepContext,
    t0: float,
    consume: list[tuple[int, str]] | None = None,
    *,
    given: bool = False,
) -> None:
    """Complete the wait step with ``payload`` (``None`` for a timer).

    ``given``: a person's answer (:func:`give_input`, validated already),
    for which a failing route raises :class:`RouteError` with nothing
    changed. Otherwise (a signal, an event, a timer, found while driving)
    a failing route (or a payload that does not fit ``into`` that the
    wait did not refuse: :func:`refuse`) fails the step under its
    ``on_error`` policy, not retried, and the signal is not consumed:
    nothing sent is lost.
    """
    try:
        new = fitted_state(run.flow, run.state, run.run_id, step, wait.kind, payload)
        nxt = run.route_from(step.id, new)
    except (RouteError, WaitPayloadError) as exc:
        if given:
            raise
        fail_resolution(run, step, wait, exc, t0)
        return
    run.state = new
    end_wait(run, wait.wait_id)
    run.meta.pop("await", None)
    run.status = "running"
    run.steps[step.id] = StepRecord(step.id, "in_progress", attempts=1, started_at=wait.created_at)
    run.pending_consume = consume or []
    run.complete(step, ctx, t0, nxt)


def fail_resolution(
    run: WaitRunner, step: AwaitStep | WaitStep, wait: Wait, exc: Exception, t0: float
) -> None:
    """What arrived for ``wait`` cannot complete ``step`` (a signal, an
    event or a timer: an await step's answer is refused instead): the wait
    ends, what arrived stays unconsumed, and the step fails under its
    ``on_error`` policy (``exc`` is not retryable). Resuming the run
    begins a new wait, which receives the same signal (still queued) or
    event (``meta["event_since"]``: it looks from the failed wait's
    start, so a run an older version failed on a payload that did not
    fit waits again: its new wait refuses it); a timer starts over."""
    end_wait(run, wait.wait_id)
    if WAIT_KINDS[wait.kind].looks_again_from_start:  # an event stays published
        since = {**run.meta.get("event_since", {}), step.id: wait.created_at}
        run.meta["event_since"] = since
    run.status = "running"  # after_failure decides: failed, paused or routed
    run.steps[step.id] = StepRecord(step.id, "in_progress", attempts=1, started_at=wait.created_at)
    run.after_failure(step, step.id, exc, t0)


def timed_out_message(wait: Wait) -> str:
    """What a run (and its step) records when ``wait`` timed out: ``wait
    RUN:approve:0 timed out (deadline 2026-12-05 11:25:43 CET (local),
    2026-12-05T10:25:43.120Z (UTC))``, the deadline as every deadline reads
    (:func:`~desktop_app.words.local_and_utc`, the local time of the process
    that timed it out)."""
    deadline = "none" if wait.deadline_at is None else local_and_utc(wait.deadline_at)
    return f"wait {wait.wait_id} timed out (deadline {deadline})"


def time_out(run: WaitRunner, step: AwaitStep | WaitStep, wait: Wait) -> None:
    """The wait's stored deadline passed: take its timeout outcome."""
    now = run.clock.now()
    message = timed_out_message(wait)
    end_wait(run, wait.wait_id)
    run.meta.pop("await", None)
    if step.on_timeout is not None:
        run.steps[step.id] = StepRecord(
            step.id,
            "completed",
            attempts=1,
            started_at=wait.created_at,
            finished_at=now,
            error=message,
            error_type="WaitTimeout",
        )
        target = step.on_timeout
        run.frontier = [target, *[f for f in run.frontier[1:] if f != target]]
        run.enter(target, now)
        run.status = "running"
        run.save(step.id)
        return
    run.steps[step.id] = StepRecord(
        step.id,
        "failed",
        attempts=1,
        started_at=wait.created_at,
        finished_at=now,
        error=message,
        error_type="WaitTimeout",
    )
    run.status = "timed_out"
    run.error = message
    run.waits = []
    run.save(step.id, timed_out_writes(run.flow, run.run_id))


def wake(run: WaitRunner) -> None:
    """A waiting run: deliver what arrived, time out what expired, else nothing."""
    if run.run_deadline_passed():
        run.time_out_run()
        return
    head = run.flow.step(run.frontier[0])
    if isinstance(head, (AwaitStep, WaitStep)):
        run_wait(run, head)
        return
    now = run.clock.now()
    expired = [w for w in run.waits if w.deadline_at is not None and now >= w.deadline_at]
    if expired:
        first = expired[0]
        run.steps[first.step_id.split("/", 1)[0]] = StepRecord(
            first.step_id.split("/", 1)[0],
            "failed",
            attempts=1,
            started_at=first.created_at,
            finished_at=now,
            error=f"wait {first.wait_id} timed out",
            error_type="WaitTimeout",
        )
        for w in expired:
            remember_resolved(run.meta, w.wait_id)
        run.status = "timed_out"
        run.error = timed_out_message(first)
        run.waits = []
        run.save(first.step_id, timed_out_writes(run.flow, run.run_id))


def give_input(run: WaitRunner, step: AwaitStep, value: Any) -> None:
    """Complete a waiting await step with ``value`` (validated, as given).

    Raises:
        pydantic.ValidationError: ``value`` does not fit the field; nothing changed.
        RouteError: the step's route failed on the state ``value`` makes;
            nothing changed (the run still waits for its answer).
    """
    wait = wait_for(run, step.id)
    assert wait is not None
    check = run.state.model_copy()
    run.flow.state_type.__pydantic_validator__.validate_assignment(check, step.into, value)
    resolve_wait(
        run, step, wait, value, run.new_context(step.id, 1, 0), time.perf_counter(), given=True
    )


def end_wait(run: WaitRunner, wait_id: str) -> None:
    """The wait is over (answered, delivered, timed out or failed): drop it
    and remember its id, so a second answer to it is refused."""
    run.waits = [w for w in run.waits if w.wait_id != wait_id]
    remember_resolved(run.meta, wait_id)
