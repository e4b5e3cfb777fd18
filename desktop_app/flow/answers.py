"""A person's answers to a waiting run: which question an answer goes to and
how it is given (an await step's field, or the value ``ctx.interrupt``
returns), the choices an interrupt takes, and what a second answer to an
answered question hears.

``Engine.resume_with`` and ``Engine.resume`` call these on the run's driver,
seen through :class:`WaitRunner`; this module imports neither the driver nor
the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from desktop_app.errors import (
    InputError,
    InputPendingError,
    RevisionConflictError,
    RunStateError,
    WaitAlreadyResolvedError,
    iso_utc,
)
from desktop_app.flow.context import InterruptRequest, asked_digest
from desktop_app.flow.definition import AwaitStep
from desktop_app.flow.run import RunState, input_waits
from desktop_app.flow.step_call import Canceled
from desktop_app.flow.waiting import WaitRunner, end_wait, give_input, wake
from desktop_app.store.protocol import RunLog, StepRecord, Wait


def give_answer(driver: WaitRunner, store: RunLog, wait: Wait, value: Any, now: float) -> None:
    """Give ``value`` to ``wait`` (a question of the driver's run, see
    ``RunState.input_wait``) and save it; the driver's run is then
    ``running`` unless the answer completed an await step whose route ends
    the run. ``now``: the engine's time (a wait past its deadline times out).

    Raises:
        RunStateError: the wait timed out before the answer came (the run
            has taken its timeout outcome).
        InputError: ``value`` does not fit, is not JSON data, or is none of
            the question's choices; nothing changed.
        WaitAlreadyResolvedError: another process answered it a moment ago.
        RunStateError: another process canceled the run a moment ago;
            nothing was answered.
        RevisionConflictError: another process changed the run otherwise.
    """
    run_id = driver.run_id
    run_deadline = driver.run.deadline_at
    late = wait.deadline_at is not None and now >= wait.deadline_at
    if late or (run_deadline is not None and now >= run_deadline):
        try:
            wake(driver)  # the run's own deadline first, then the wait's
        except Canceled:
            raise RunStateError(
                f"run {run_id} was canceled a moment ago by another process; nothing was answered"
            ) from None
        what = f"wait {wait.wait_id} timed out" if late else "its own deadline passed"
        deadline = wait.deadline_at if late else run_deadline
        assert deadline is not None  # one of the two is set and passed
        raise RunStateError(
            f"run {run_id}: {what} before the answer came (its "
            f"deadline {iso_utc(deadline, 'milliseconds')}, the answer at "
            f"{iso_utc(now, 'milliseconds')} by the later of this process's clock and the "
            f"database's); the run is now {driver.status}; nothing was answered"
        )
    step = driver.flow.steps.get(wait.step_id)
    try:
        if isinstance(step, AwaitStep):
            give_input(driver, step, value)
        else:
            json.dumps(value)
            record_answer(driver, wait.wait_id, chosen(run_id, value, driver.meta, wait.wait_id))
    except ValidationError as exc:
        raise InputError(
            f"run {run_id}: the answer does not fit field "
            f"{getattr(step, 'into', '?')!r}: {exc.errors()[0]['msg']}; nothing was answered, "
            "the run still waits"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"run {run_id}: the answer must be JSON data: {exc}; nothing was answered, "
            "the run still waits"
        ) from exc
    except Canceled:
        # the save lost to a cancel: the driver's signal to stop its loop,
        # which no driver loop is here to take
        raise RunStateError(
            f"run {run_id} was canceled a moment ago by another process; nothing was answered"
        ) from None
    except RevisionConflictError as exc:
        # another process (the app, the CLI) saved first: say what it
        # did to this question rather than "reload and try again"
        if RunState.read(store, run_id).answered(wait.wait_id):
            raise WaitAlreadyResolvedError(
                f"run {run_id}: wait {wait.wait_id} was answered a moment ago by another "
                "process; the first answer stands and nothing ran here"
            ) from exc
        raise


def refuse_while_asking(driver: WaitRunner) -> None:
    """After a wake-up: refuse to resume a run still waiting for a person.

    Raises:
        InputPendingError: the run waits for input (answer it with
            ``resume_with``).
    """
    inputs = input_waits(driver.waits)
    if driver.status == "waiting" and inputs:
        raise InputPendingError(driver.run_id, [w.wait_id for w in inputs])


def chosen(run_id: str, value: Any, meta: Mapping[str, Any], wait_id: str) -> Any:
    """``value`` as the answer to interrupt ``wait_id``: when the question
    named its ``choices`` (``StepContext.interrupt``), the chosen word
    trimmed and lower-cased.

    Raises:
        InputError: ``value`` is none of the choices; nothing changed.
    """
    choices = (meta.get("choices") or {}).get(wait_id)
    if not choices:
        return value
    word = value.strip().casefold() if isinstance(value, str) else None
    if word not in choices:
        raise InputError(
            f"run {run_id}: {value!r} is not an answer to this question; "
            f"answer {' or '.join(choices)} (the run is still waiting)"
        )
    return word


def suspend_for_answers(run: WaitRunner, requests: list[InterruptRequest]) -> None:
    """Save the run ``waiting`` on one input wait per request (stable ids)."""
    now = run.clock.now()
    known = {w.wait_id: w for w in run.waits}
    for r in requests:
        if r.wait_id in known:
            continue  # recreated from the checkpoint: keep its deadline
        deadline = now + r.timeout_s if r.timeout_s else None
        wait = Wait(
            r.wait_id,
            r.step_id,
            "input",
            now,
            prompt=r.prompt,
            deadline_at=deadline,
            continuation=r.continuation,
        )
        run.waits.append(wait)
        known[r.wait_id] = wait
        if r.choices:  # the only answers resume_with takes (StepContext.interrupt)
            run.meta["choices"] = {**run.meta.get("choices", {}), r.wait_id: list(r.choices)}
    head = run.frontier[0]
    rec = run.steps[head]
    run.steps[head] = StepRecord(
        head,
        "waiting",
        attempts=rec.attempts,
        started_at=rec.started_at,
        iteration=rec.iteration,
    )
    run.status = "waiting"
    run.error = None
    run.save(head)


def record_answer(run: WaitRunner, wait_id: str, value: Any) -> None:
    """Record a person's answer to an interrupt (durably, before anything runs)."""
    wait = next(w for w in run.waits if w.wait_id == wait_id)
    answers = dict(run.meta.get("answers", {}))
    answers[wait_id] = value
    run.meta["answers"] = answers
    # bound to what the person saw: the step gets it back only for this question
    asked = dict(run.meta.get("asked", {}))
    asked[wait_id] = asked_digest(wait.prompt)
    run.meta["asked"] = asked
    if wait.continuation is not None:
        conts = dict(run.meta.get("continuations", {}))
        conts[wait.step_id] = wait.continuation
        run.meta["continuations"] = conts
    end_wait(run, wait_id)
    head = run.frontier[0]
    rec = run.steps[head]
    run.steps[head] = StepRecord(
        head,
        "in_progress",
        attempts=rec.attempts,
        started_at=run.clock.now(),
        iteration=rec.iteration,
    )
    run.status = "running"
    run.save(head)
