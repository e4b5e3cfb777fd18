"""Saving a run: the one checkpoint a step (or an attempt, a wait, an
answer) commits, assembled from the driver's run as it stands: only the
changed state fields and step records travel (``StateTracker``,
``StepRecords``), with the step's domain writes, outbox intents and the
signals it consumes, in one transaction under the run's lease. How a refused
save reads (taken over, leased elsewhere, canceled) is decided here too.

The driver calls :func:`commit_checkpoint` on itself, seen through
:class:`Saver`; this module imports neither the driver nor the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from desktop_app.errors import LeaseLostError, RevisionConflictError, RunLeasedError
from desktop_app.flow.clock import Clock
from desktop_app.flow.definition import CompiledFlow
from desktop_app.flow.host import DriverHost
from desktop_app.flow.run import RunMeta
from desktop_app.flow.state import StateTracker, StepRecords
from desktop_app.flow.step_call import Canceled
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointStore,
    DomainWrite,
    Intent,
    RunStatus,
    StepRecord,
    Wait,
)


class Saver(Protocol):
    """The driver as a save sees it: its run as it stands, what was last
    stored, and the host that commits."""

    run_id: str
    host: DriverHost
    store: CheckpointStore
    flow: CompiledFlow[Any]
    state: Any
    tracker: StateTracker
    steps: StepRecords
    status: RunStatus
    frontier: list[str]
    progress: tuple[int, int] | None
    error: str | None
    meta: RunMeta
    waits: list[Wait]
    revision: int
    #: when the run's latest checkpoint was saved (UTC epoch seconds)
    saved_at: float
    stored_state: Mapping[str, Any]
    stored_steps: Mapping[str, StepRecord]
    saves: int
    takeover: tuple[str, bool] | None

    @property
    def clock(self) -> Clock: ...

    def lease_lost(self) -> LeaseLostError: ...


def commit_checkpoint(
    run: Saver,
    step_id: str,
    writes: Iterable[DomainWrite],
    intents: Iterable[Intent],
    consume: Iterable[tuple[int, str]],
    now: float | None = None,
    encoded: bool = False,
) -> None:
    """Append the driver's run as it stands as one checkpoint (revision + 1),
    saved for ``step_id``, with the step's domain ``writes``, outbox
    ``intents`` and the signals it ``consume``s, under this process's lease
    (taking the run over from ``run.takeover``'s holder on the first save);
    then the driver's stored state, records and revision follow it, and
    every ``keep_last_n`` revisions older checkpoints are pruned. Call it
    holding the driver's ``save_lock``. Lists given as ``writes``, ``intents``
    and ``consume`` belong to the append from then on (not copied). ``now``:
    a reading of ``run.clock`` the caller just took (the checkpoint's time
    and its lease's start), else the clock is read; ``encoded``: the run's
    tracker encoded ``run.state`` as it stands (nothing changed it since),
    so it is not encoded again.

    Raises:
        LeaseLostError: this process can no longer prove it holds the lease
            (or another process took the run over after it began).
        RunLeasedError: another process holds the run; nothing ran here yet.
        Canceled: the run was canceled meanwhile.
        RevisionConflictError: another writer saved first.
        StoreError: the save failed; no later step runs.
    """
    if run.run_id in run.host.lost:
        raise run.lease_lost()
    steps, changed = run.steps.snapshot()
    tracker = run.tracker
    state = tracker.dumped if encoded else tracker.encode(run.state)
    fields = frozenset(tracker.dirty)
    if now is None:
        now = run.clock.now()
    # positional, in the fields' order (keywords cost ~0.5 us a step here)
    cp = Checkpoint(
        run.run_id,
        run.revision + 1,
        run.status,
        state,
        steps,
        tuple(run.frontier),
        # created_at: never before the run's latest checkpoint (a clock set
        # back, within the skew the engine's clock lets pass)
        max(now, run.saved_at),
        step_id,
        run.progress,
        run.error,
        dict(run.meta),
        tuple(run.waits),
    )
    host = run.host
    try:
        host.commit(
            AppendRequest(
                cp,
                # the callers' lists are theirs no more (fresh from a step's
                # context): not copied again
                writes if type(writes) is list else list(writes),
                host.lease(*run.takeover, now) if run.takeover else host.lease(None, False, now),
                intents if type(intents) is list else list(intents),
                consume if type(consume) is list else list(consume),
                changed,  # changed_steps
                fields,  # changed_fields
                None,  # run: an append, not a creation
                True,  # given: never changed after (see StateTracker, LayeredSteps)
            )
        )
    except LeaseLostError:
        if run.saves == 0:  # nothing ran yet: another process holds the run
            row = run.store.get_run(run.run_id)
            raise RunLeasedError(
                run.run_id, row.lease_owner or "?", row.lease_expires_at, row.status
            ) from None
        raise  # another process holds the run now: this one stops, and says so
    except RevisionConflictError:
        row = run.store.get_run(run.run_id)
        if row.status == "canceled":
            raise Canceled() from None
        if run.saves == 0 and run.takeover:
            # two processes took a dead owner's run over at once and the
            # other one saved first (and may have finished and released it)
            raise RunLeasedError(
                run.run_id,
                row.lease_owner or "another process",
                row.lease_expires_at,
                row.status,
            ) from None
        if run.saves > 0 and row.revision >= cp.revision:
            # revisions this process never wrote, while it held the lease: its
            # lease lapsed (the database unreachable for longer than its TTL)
            # and another process took the run over and went on with it (and
            # may have ended it, releasing the lease)
            raise LeaseLostError(
                f"run {run.run_id} was taken over by "
                f"{row.lease_owner or 'another process'} (its stored revision {row.revision} "
                f"was written by another process; this process's {cp.revision} was not saved)"
            ) from None
        raise
    run.revision = cp.revision
    run.saved_at = cp.created_at
    run.stored_state = cp.state
    run.stored_steps = cp.steps
    run.steps.dirty -= changed  # what steps.stored(changed) and tracker.stored(fields)
    tracker.dirty -= fields  # do, without two calls at every step
    run.saves += 1
    run.takeover = None
    keep = run.flow.keep_last_n
    if keep is not None and cp.revision >= 2 * keep and cp.revision % keep == 0:
        run.store.prune(run.run_id, keep)
