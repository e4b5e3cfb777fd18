"""Group commit: checkpoints of several runs that are ready at the same moment
commit in one transaction, with one fsync for the batch.

Leader/follower, as PostgreSQL's and SQLite-WAL writers' group commit: a
thread whose append arrives while no batch is committing becomes the leader
and commits everything queued so far (its own request included); appends that
arrive while a batch commits queue up and go in the next batch. There is no
wait window, so a single run in flight pays no extra latency.

Each request keeps its own compare-and-append, lease check, domain writes and
outbox intents: the backend's ``append_batch`` runs them in one transaction
with one savepoint per request, so a conflict or a failing domain write in
one run rolls back that run's part only. :meth:`GroupCommitter.append`
returns only once the batch holding the request is durable (committed), and
raises that request's own error if its part was rolled back.

This module never imports apsw: any backend with ``append_batch`` (SQLite,
in-memory, PostgreSQL) fits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from desktop_app.errors import StoreError
from desktop_app.store.protocol import Checkpoint, DomainWrite, Intent, Lease, RunRecord


@dataclass(slots=True)
class AppendRequest:
    """The arguments of one :meth:`CheckpointStore.append`, as one value.
    Not frozen: one is made at every step, and a frozen dataclass costs
    some 3x as much to make (``object.__setattr__`` per field); nothing
    changes a request once made.

    Attributes:
        checkpoint: the checkpoint to append (revision ``latest + 1``).
        writes: domain writes run in the same transaction (savepoint).
        lease: claim the run with this lease (see ``CheckpointStore.append``).
        intents: outbox intents enqueued with the checkpoint.
        consume: ``(signal_id, wait_id)`` pairs marked consumed.
        changed_steps: ids of the step records that differ from the ones
            of revision ``checkpoint.revision - 1`` (the writer knows which it
            touched), so a store need not compare every record; ``None``:
            unknown, the store compares them itself.
        changed_fields: names of the state fields that may differ from
            revision ``checkpoint.revision - 1``'s (the others are equal);
            ``None``: unknown, the store compares every field.
        run: set: this request creates the run (``CheckpointStore.create_run``
            with ``checkpoint`` as its revision 0 and ``writes``) instead of
            appending; ``lease``, ``intents``, ``consume`` and the
            ``changed_*`` hints are not used. Only a store declaring
            ``group_commit`` takes it (a run created alone cost a commit and
            an fsync of its own, under the store's lock, between batches).
        given: the caller gives the checkpoint to the store: neither its
            state nor its step map (nor anything inside them: dicts, lists)
            is changed after the append, so a store may cache it without a
            copy. The engine's saves give theirs (a driver's encoded state
            is rebuilt at every change, never changed in place; its step map
            is an immutable ``LayeredSteps``). ``False``: the store keeps its
            own copy.
    """

    checkpoint: Checkpoint
    writes: Sequence[DomainWrite] = ()
    lease: Lease | None = None
    intents: Sequence[Intent] = ()
    consume: Sequence[tuple[int, str]] = ()
    changed_steps: frozenset[str] | None = None
    changed_fields: frozenset[str] | None = None
    run: RunRecord | None = None
    given: bool = False


@runtime_checkable
class BatchAppender(Protocol):
    """A store that can append several runs' checkpoints in one transaction."""

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        """Append every request in ONE transaction (one durable commit), each
        inside its own savepoint; returns one entry per request, in order:
        ``None`` when it committed, else the exception that rolled back that
        request's part only (``RevisionConflictError``, ``LeaseLostError``,
        ``CheckpointNotFoundError``, a domain write's error, ...). A store
        declaring ``group_commit`` also creates runs in the batch (requests
        with ``run`` set; ``DuplicateFlowKeyError`` or
        ``RevisionConflictError`` in their slot as ``create_run`` raises them).

        Raises:
            StoreError: the transaction itself failed (nothing committed).

        A backend may also offer ``append_one(request) -> BaseException |
        None``, ``append_batch((request,))[0]`` for one request alone: the
        committer calls it when it commits a request alone.
        """


@dataclass(slots=True, eq=False)
class _Slot:
    request: AppendRequest
    done: bool = False
    error: BaseException | None = None
    batch: int = field(default=0)
    #: a lock held for this caller while it waits, made when it queues
    #: behind a commit in progress; released once by whoever wakes it (its
    #: batch is done, or it leads the next one). A bare lock, not a
    #: ``Condition``: waking a caller is one release, and the caller goes on
    #: without taking the committer's lock again
    wakeup: threading.Lock | None = None


class GroupCommitter:
    """Commits appends from many threads in batches (leader/follower).

    Args:
        backend: the store doing one transaction per batch.

    Attributes:
        batches: batches committed so far (for measurements).
        appends: requests handled so far.
        wakeups: times a waiting caller was woken (one per caller whose batch
            is done, plus one per leader chosen from the queue).
    """

    def __init__(self, backend: BatchAppender) -> None:
        self.backend = backend
        #: the backend's ``append_one`` (``append_batch((request,))[0]``
        #: without a batch's bookkeeping: SQLite's), for a lone request
        self._one: Callable[[AppendRequest], BaseException | None] | None = getattr(
            backend, "append_one", None
        )
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # held to read the queue (tests)
        self._queue: list[_Slot] = []
        self._committing = False
        self.batches = 0
        self.appends = 0
        self.wakeups = 0

    def append(self, request: AppendRequest) -> None:
        """Append ``request`` and return once its batch is durable.

        Raises:
            whatever error rolled back this request's part of its batch
            (``RevisionConflictError``, ``LeaseLostError``, ``StoreError``, a
            domain write's error); the other requests of the batch are
            unaffected, except when the whole transaction failed (then every
            request of the batch gets that ``StoreError``).
        """
        with self._lock:
            queued = self._committing
            if queued:
                wakeup = threading.Lock()
                wakeup.acquire()
                slot = _Slot(request, wakeup=wakeup)
                self._queue.append(slot)
            else:
                self._committing = True
        if not queued:
            # nothing commits, so nothing is queued: this caller leads a
            # batch of its own request, with no slot and without queueing it
            # (what arrives meanwhile queues for the next batch); what
            # :meth:`_commit` does, without its slots (the common case of
            # one run in flight)
            error: BaseException | None
            try:
                one = self._one
                if one is not None:  # the backend's own path for one request
                    error = one(request)
                else:
                    results = self.backend.append_batch((request,))
                    if len(results) != 1:
                        raise StoreError(
                            f"append_batch returned {len(results)} results for 1 requests"
                        )
                    error = results[0]
            except BaseException as exc:  # the transaction failed
                error = exc
            with self._lock:
                self.batches += 1
                self.appends += 1
                if self._queue:  # queued meanwhile: the oldest leads the next batch
                    nxt = self._queue[0].wakeup
                    assert nxt is not None
                    self.wakeups += 1
                else:
                    nxt = None
                    self._committing = False
            if nxt is not None:
                nxt.release()
            if error is not None:
                raise error
            return
        wakeup.acquire()  # until its batch is done, or it leads the next
        slot.wakeup = None
        if not slot.done:
            # leader: commit everything queued so far, own request included
            with self._lock:
                batch, self._queue = self._queue, []
            self._commit([s.request for s in batch], batch)
        if slot.error is not None:
            raise slot.error

    def _commit(
        self, requests: list[AppendRequest], slots: Sequence[_Slot]
    ) -> Sequence[BaseException | None]:
        """Commit ``requests`` as one batch; hand each of ``slots`` (the
        queued callers they came from, in order; none for a leader alone)
        its result and wake it, and wake the next leader; returns the
        results."""
        results: Sequence[BaseException | None]
        try:
            results = self.backend.append_batch(requests)
            if len(results) != len(requests):
                raise StoreError(
                    f"append_batch returned {len(results)} results for {len(requests)} requests"
                )
        except BaseException as exc:  # the whole transaction failed: every request fails
            results = [exc] * len(requests)
        with self._lock:
            self.batches += 1
            self.appends += len(requests)
            woken = [s.wakeup for s in slots if s.wakeup is not None]
            for s, err in zip(slots, results, strict=False):
                s.error = err
                s.batch = self.batches
                s.done = True
            # the next leader: the oldest caller queued meanwhile (it takes
            # the whole queue when it wakes); the others sleep until their
            # batch is done
            if self._queue:
                nxt = self._queue[0].wakeup
                assert nxt is not None  # queued while this batch committed
                woken.append(nxt)
            else:
                self._committing = False
            self.wakeups += len(woken)
        for wakeup in woken:
            wakeup.release()
        return results
