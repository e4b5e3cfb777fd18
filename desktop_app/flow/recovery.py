"""Sweeps over claimed runs: resuming the pending ones (``resume_pending``,
go-micro's ResumePending) and recovering every interrupted or wakeable run at
launch (``recover``). Runs are claimed first (``claim_runnable``), so two
processes sweeping at once never drive the same run; a claim of a run not
driven is released.

The engine calls these with itself as the :class:`Sweeper`; this module
imports neither the driver nor the engine.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Generator, Sequence
from typing import Protocol

from desktop_app.errors import FlowdeskError, RunLeasedError, StepFailedError
from desktop_app.flow.owners import lease_abandoned
from desktop_app.flow.pool import Outcome, pooled
from desktop_app.flow.results import ResumePendingResult, RunResult
from desktop_app.store.protocol import (
    PENDING_STATUSES,
    RUNNABLE_STATUSES,
    CheckpointStore,
    RunRecord,
    RunStatus,
)

#: the ``limit`` of a claim meant to take every claimable run (recovery): far
#: above any number of runs, and 4x it still fits a signed 64-bit SQL integer
EVERY_RUN = 2**31 - 1


class Sweeper(Protocol):
    """The engine as a sweep sees it: where runs live, who claims them, and
    how one run is resumed or woken."""

    @property
    def store(self) -> CheckpointStore: ...

    @property
    def owner(self) -> str: ...

    @property
    def executes(self) -> bool: ...

    def holds(self, run_id: str) -> bool:
        """Whether a thread of this engine executes ``run_id`` or has it in
        hand to (its claim must not be given back)."""

    @property
    def shutdown_event(self) -> threading.Event:
        """Set when the engine stops: a sweep claims nothing more."""

    def claim_runnable(
        self,
        limit: int = 100,
        *,
        statuses: Sequence[RunStatus] = RUNNABLE_STATUSES,
        wakeable: bool = True,
        flows: Collection[str] | None = None,
    ) -> list[RunRecord]: ...

    def resume(self, run_id: str) -> RunResult: ...

    def wake(self, run_id: str) -> RunResult: ...


def left_behind(engine: Sweeper, wanted: Callable[[RunRecord], bool], now: float) -> bool:
    """True when a ``pending`` or ``running`` run this engine does not
    execute has a lease no live process holds
    (:func:`~desktop_app.flow.owners.lease_abandoned` at ``now``, UTC epoch
    seconds of the lease clock: unleased, its owner on this host exited, or
    expired) or this engine's own lease (a run whose save or release met a
    locked database), and ``wanted`` takes: a run a killed or stopped
    process left behind, which :meth:`Engine.serve` recovers on its next
    pass. One read and no claim, so a pass with nothing to recover takes no
    write lock."""
    owner = engine.owner
    return any(
        not engine.holds(run.run_id)
        and (
            # this engine's own lease on a run none of its threads executes: a
            # run whose resume met a locked database, or whose lease could not
            # be given back, stranded (no other process may take a live lease)
            run.lease_owner == owner or lease_abandoned(run.lease_owner, run.lease_expires_at, now)
        )
        and wanted(run)
        for run in engine.store.list_runs(statuses=PENDING_STATUSES)
    )


def release_claim(engine: Sweeper, run_id: str) -> None:
    """Give a claimed run back (else its lease expires after ``lease_ttl_s``)."""
    with contextlib.suppress(FlowdeskError):
        engine.store.release(run_id, engine.owner)


def claimed(
    engine: Sweeper, statuses: Sequence[RunStatus], wakeable: bool, batch: int = 32
) -> Generator[RunRecord, None, None]:
    """Claimed runs one at a time, in batches, each at most once; the
    claims of runs not yet handed out are released when the caller stops.

    Each claim asks for ``batch`` runs plus the runs already handed out
    that the last claim returned again (still claimable: ours, and still
    in ``statuses``), so the cost of a claim does not grow with the
    number of runs handed out so far (asking for ``handed out + batch``
    every time made a sweep of N runs cost N**2 / batch rows). A claim
    that comes back full of runs already handed out is retried with room
    for them; the sweep ends at the first claim with nothing new that
    was not full."""
    seen: set[str] = set()
    again = 0  # runs already handed out that the last claim returned
    while not engine.shutdown_event.is_set():
        limit = batch + again
        got = engine.claim_runnable(limit, statuses=statuses, wakeable=wakeable)
        fresh = [r for r in got if r.run_id not in seen]
        back = len(got) - len(fresh)
        for run in got:
            if run.run_id in seen:
                release_claim(engine, run.run_id)
        if not fresh:
            if len(got) < limit or back <= again:
                return
            again = back  # full of runs handed out before: make room for them
            continue
        again = back
        for i, run in enumerate(fresh):
            seen.add(run.run_id)
            try:
                yield run
            except GeneratorExit:
                for rest in fresh[i + 1 :]:
                    release_claim(engine, rest.run_id)
                raise
            finally:
                if not engine.holds(run.run_id):
                    release_claim(engine, run.run_id)


def resume_pending(engine: Sweeper) -> ResumePendingResult:
    """See ``Engine.resume_pending``."""
    out = ResumePendingResult()
    runs = claimed(engine, PENDING_STATUSES, wakeable=False)
    try:
        for run in runs:
            try:
                res = engine.resume(run.run_id)
            except FlowdeskError as exc:
                out.failed_run_id, out.error = run.run_id, exc
                return out
            out.resumed.append(res)
            if res.status == "failed":
                out.failed_run_id = run.run_id
                out.error = failed_step(engine.store, run.run_id, res.error or "failed")
                return out
    finally:
        runs.close()
    return out


def failed_step(store: CheckpointStore, run_id: str, error: str) -> StepFailedError:
    """The step a failed run stopped at, as an error: the step its latest
    checkpoint was saved for, with that step's attempts and error. A run
    no step failed (halted at ``max_steps``) names the step it stopped
    at, with no failed attempt and the run's ``error``."""
    cp = store.latest(run_id)
    rec = cp.steps.get(cp.step_id)
    if rec is None or rec.status != "failed":
        return StepFailedError(run_id, cp.step_id, 0, error)
    return StepFailedError(run_id, rec.step_id, rec.attempts, rec.error or error)


def recover(
    engine: Sweeper,
    on_result: Callable[[RunRecord, Outcome], None] | None,
    only: Callable[[RunRecord], bool] | None,
    concurrency: int,
) -> list[tuple[RunRecord, Outcome]]:
    """See ``Engine.recover``."""
    if not engine.executes:
        return []
    chosen: list[RunRecord] = []
    for r in claim_all(engine, RUNNABLE_STATUSES, wakeable=True):
        if only is None or only(r):
            chosen.append(r)
        elif not engine.holds(r.run_id):
            release_claim(engine, r.run_id)
    handled = {r.run_id for r in chosen}

    def one(run: RunRecord) -> Outcome:
        out: Outcome | None = None
        try:
            waiting = run.status == "waiting"
            out = engine.wake(run.run_id) if waiting else engine.resume(run.run_id)
            return out
        except FlowdeskError as exc:
            return exc
        finally:
            if not engine.holds(run.run_id) and not lease_cleared(out):
                release_claim(engine, run.run_id)

    outcome: dict[str, Outcome] = {}
    try:
        for batch in parents_first(chosen):
            done = pooled(batch, one, concurrency, on_result, engine.shutdown_event)
            for r, out in zip(batch, done, strict=True):
                outcome[r.run_id] = out
    except BaseException:
        # Ctrl-C: the runs claimed and never started are given back at once
        # (those that started gave theirs back as they stopped)
        for r in chosen:
            if not engine.holds(r.run_id):
                release_claim(engine, r.run_id)
        raise
    report: list[tuple[RunRecord, Outcome]] = [(r, outcome[r.run_id]) for r in chosen]
    for run in engine.store.list_runs(statuses=RUNNABLE_STATUSES):
        held = run.lease_owner not in (None, engine.owner) and run.run_id not in handled
        if held and (only is None or only(run)):
            leased = RunLeasedError(run.run_id, run.lease_owner or "?", run.lease_expires_at)
            report.append((run, leased))
            if on_result is not None:
                on_result(run, leased)
    return report


#: statuses whose checkpoint clears the run's lease in the transaction that
#: saves it (every store's ``append``: a run neither running nor pending has
#: no lease)
SETTLED: frozenset[RunStatus] = frozenset({"completed", "failed", "canceled", "timed_out"})


def lease_cleared(out: Outcome | None) -> bool:
    """Whether the run's lease is already gone once ``out`` came back: it
    ended completed, failed, canceled or timed out, which only a checkpoint
    saved after the claim can do (a claim takes runs that are pending,
    running or waiting), and that checkpoint cleared the lease. Releasing it
    again was one more write transaction per recovered run. A run still
    waiting may keep the claim's lease (nothing was saved), and an error
    says nothing: those are released."""
    return isinstance(out, RunResult) and out.status in SETTLED


def parents_first(chosen: list[RunRecord]) -> list[list[RunRecord]]:
    """``chosen`` in levels, parents before their children, each level in
    ``chosen``'s order: a parent reattaches to its children when it resumes,
    so driving one level at a time never drives a run twice at once here."""
    by_id = {r.run_id: r for r in chosen}
    depth: dict[str, int] = {}
    for r in chosen:
        d, parent, hops = 0, r.parent_run_id, 0
        while parent in by_id and hops < len(by_id):
            d, parent, hops = d + 1, by_id[parent].parent_run_id, hops + 1
        depth[r.run_id] = d
    return [
        [r for r in chosen if depth[r.run_id] == level] for level in sorted(set(depth.values()))
    ]


def claim_all(engine: Sweeper, statuses: Sequence[RunStatus], wakeable: bool) -> list[RunRecord]:
    """Every run ``claim_runnable`` hands out now, in one claim (one
    transaction, each candidate read and judged once): claiming in growing
    batches re-read and re-claimed every run already claimed, a cost in
    proportion to the number of runs squared."""
    if engine.shutdown_event.is_set():
        return []
    return engine.claim_runnable(EVERY_RUN, statuses=statuses, wakeable=wakeable)
