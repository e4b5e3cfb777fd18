"""Records and the :class:`CheckpointStore` protocol the engine speaks to.

Shapes (all times are UTC seconds since the epoch, as ``float``):

* :class:`RunRecord` — one row per run: identity, flow name and version,
  status, latest revision, execution context.
* :class:`Checkpoint` — the run after a step: revision ``0..n``, status,
  JSON-mode state (``dict[str, JSON]``), step records, frontier (ids of the
  steps still to run), progress.
* :class:`StepRecord` — ``in_progress -> completed | failed`` (or
  ``skipped``), attempts, timings, error.

Checkpoints are append-only and saved by compare-and-append on
``(run_id, revision)`` (as looprig flow's ``RevisionConflictError``): the
first writer of a revision wins, the second gets
:class:`~desktop_app.errors.RevisionConflictError`. Both sides treat a
:class:`Checkpoint` handed to or returned by a store as immutable.

This module never imports apsw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

RunStatus = Literal["pending", "running", "waiting", "completed", "failed", "canceled", "timed_out"]
StepStatus = Literal["in_progress", "completed", "failed", "skipped", "waiting"]

RUN_STATUSES: tuple[RunStatus, ...] = (
    "pending",
    "running",
    "waiting",
    "completed",
    "failed",
    "canceled",
    "timed_out",
)
#: Runs that ``pending()`` lists and ``resume_pending()`` resumes: not finished
#: and not waiting for input (go-micro ``Pending`` semantics).
PENDING_STATUSES: tuple[RunStatus, ...] = ("pending", "running", "failed")
#: Runs that can never run again.
TERMINAL_STATUSES: tuple[RunStatus, ...] = ("completed", "canceled", "timed_out")

JSON = Any
T = TypeVar("T")

#: A domain write: called with the store's open connection inside the same
#: transaction that appends the checkpoint (apsw ``Connection`` for the SQLite
#: store). Raising aborts the whole transaction.
DomainWrite = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What happened to one step of a run.

    Attributes:
        step_id: the step's id in its flow.
        status: ``in_progress``, ``completed``, ``failed``, ``skipped`` or ``waiting``.
        attempts: attempts started so far (survives restarts).
        started_at / finished_at: UTC epoch seconds, ``None`` until known.
        error / error_type: message and exception class name of the last failure.
        iteration: for loop steps, iterations completed and checkpointed.
        duration_ms: wall time of the last attempt in milliseconds.
        next_retry_at: UTC epoch seconds before which the next attempt must
            not start (a durable backoff), or ``None``.
    """

    step_id: str
    status: StepStatus
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    error_type: str | None = None
    iteration: int = 0
    duration_ms: float | None = None
    next_retry_at: float | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "step_id": self.step_id,
            "status": self.status,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "error_type": self.error_type,
            "iteration": self.iteration,
            "duration_ms": self.duration_ms,
            "next_retry_at": self.next_retry_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> StepRecord:
        return cls(
            step_id=str(data["step_id"]),
            status=data["status"],
            attempts=int(data.get("attempts", 0)),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            error=data.get("error"),
            error_type=data.get("error_type"),
            iteration=int(data.get("iteration", 0)),
            duration_ms=data.get("duration_ms"),
            next_retry_at=data.get("next_retry_at"),
        )


WaitKind = Literal["input", "signal", "event", "timer"]


@dataclass(frozen=True, slots=True)
class Wait:
    """A durable pause of a run, part of its checkpoint.

    Attributes:
        wait_id: stable id ``"<run_id>:<step_id>:<n>"``; survives restarts.
        step_id: the step (or ``"<parallel>/<branch>"``) that waits.
        kind: ``input`` (a person), ``signal`` (name + key), ``event`` (type),
            ``timer`` (only a deadline).
        name / key: signal name and key, or event type (``key`` unused).
        prompt: what the person is asked (JSON), for input waits.
        deadline_at: UTC epoch seconds when the wait times out, or ``None``;
            stored when the wait begins and never recomputed.
        created_at: UTC epoch seconds when the wait began.
        continuation: a JSON value kept for the step (stateful interrupt).
    """

    wait_id: str
    step_id: str
    kind: WaitKind
    created_at: float
    name: str | None = None
    key: str | None = None
    prompt: JSON = None
    deadline_at: float | None = None
    continuation: JSON = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "wait_id": self.wait_id,
            "step_id": self.step_id,
            "kind": self.kind,
            "created_at": self.created_at,
            "name": self.name,
            "key": self.key,
            "prompt": self.prompt,
            "deadline_at": self.deadline_at,
            "continuation": self.continuation,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Wait:
        return cls(
            wait_id=str(data["wait_id"]),
            step_id=str(data["step_id"]),
            kind=data["kind"],
            created_at=float(data["created_at"]),
            name=data.get("name"),
            key=data.get("key"),
            prompt=data.get("prompt"),
            deadline_at=data.get("deadline_at"),
            continuation=data.get("continuation"),
        )


@dataclass(frozen=True, slots=True)
class Signal:
    """A stored signal (durable mailbox row)."""

    signal_id: int
    name: str
    key: str
    payload: JSON
    sent_at: float


@dataclass(frozen=True, slots=True)
class Event:
    """A published event (broadcast to every wait on its type)."""

    event_id: int
    type: str
    payload: JSON
    published_at: float


@dataclass(frozen=True, slots=True)
class Intent:
    """An outbox intent: a side effect to deliver after its checkpoint commits.

    ``intent_id`` is the stable idempotency key the destination sees on every
    attempt (``"<run_id>:<step_id>:<iteration>:<n>"`` unless the step gives one).
    """

    intent_id: str
    run_id: str
    step_id: str
    destination: str
    payload: JSON
    status: Literal["pending", "sending", "delivered", "failed"] = "pending"
    attempts: int = 0
    receipt: JSON = None
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The durable record of a run after one step.

    Attributes:
        run_id: the run.
        revision: 0 for the first checkpoint, +1 for each one after.
        status: the run status at this revision.
        state: the flow state dumped in pydantic JSON mode, one key per field.
        steps: step records by step id.
        frontier: ids of the steps that run next, in order (empty when done).
        created_at: UTC epoch seconds.
        step_id: the step that produced this checkpoint (``""`` for the first).
        progress: ``(done, total)`` units of work, or ``None``.
        error: why the run failed or halted, if it did.
        meta: engine bookkeeping as a small JSON object (steps taken, halt
            reason, ...); stored whole with every revision.
        waits: the run's pending waits at this revision.
    """

    run_id: str
    revision: int
    status: RunStatus
    state: Mapping[str, JSON]
    steps: Mapping[str, StepRecord]
    frontier: tuple[str, ...]
    created_at: float
    step_id: str = ""
    progress: tuple[int, int] | None = None
    error: str | None = None
    meta: Mapping[str, JSON] = field(default_factory=dict)
    waits: tuple[Wait, ...] = ()

    @property
    def id(self) -> str:
        """Stable checkpoint id, ``"<run_id>:<revision>"``."""
        return checkpoint_id(self.run_id, self.revision)

    def evolve(self, **changes: Any) -> Checkpoint:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A checkpoint's metadata without its state (what ``history`` returns)."""

    run_id: str
    revision: int
    status: RunStatus
    step_id: str
    created_at: float

    @property
    def id(self) -> str:
        return checkpoint_id(self.run_id, self.revision)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Run metadata; reading it never decodes state.

    Attributes:
        run_id: unique id (uuid4 hex).
        flow_name: the flow's name.
        flow_version: fingerprint of the flow the run started under.
        status: latest status.
        revision: latest checkpoint revision.
        created_at / updated_at: UTC epoch seconds.
        scope: the store scope the run belongs to.
        flow_key: optional business key (single-flight submission).
        parent_run_id: the run that started this one, if any.
        context: execution context ids (tenant, user, session, run, trace,
            correlation), as a JSON object.
        progress: ``(done, total)`` or ``None``.
        error: last error or halt reason.
        lease_owner / lease_expires_at: the process executing the run and
            until when (UTC epoch seconds), or ``None``.
        deadline_at: run-level deadline (UTC epoch seconds), or ``None``.
    """

    run_id: str
    flow_name: str
    flow_version: str
    status: RunStatus
    revision: int
    created_at: float
    updated_at: float
    scope: str = "default"
    flow_key: str | None = None
    parent_run_id: str | None = None
    context: Mapping[str, JSON] = field(default_factory=dict)
    progress: tuple[int, int] | None = None
    error: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    deadline_at: float | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on a run: ``owner`` executes it until ``expires_at`` (UTC epoch s).

    ``issued_at`` is the claimant's "now": a lease held by another owner that
    expired at or before it may be taken over (``math.inf`` takes over any
    lease: the engine uses it for owners it knows are dead).
    """

    owner: str
    expires_at: float
    issued_at: float = 0.0


def checkpoint_id(run_id: str, revision: int) -> str:
    """The stable id of a checkpoint: ``"<run_id>:<revision>"``."""
    return f"{run_id}:{revision}"


def parse_checkpoint_id(cid: str) -> tuple[str, int]:
    """Split a checkpoint id into ``(run_id, revision)``; raises ``ValueError``."""
    run_id, _, rev = cid.rpartition(":")
    if not run_id or not rev.isdigit():
        raise ValueError(f"not a checkpoint id: {cid!r} (expected '<run_id>:<revision>')")
    return run_id, int(rev)


@runtime_checkable
class CheckpointStore(Protocol):
    """Where runs and their checkpoints live.

    Every method raises :class:`~desktop_app.errors.StoreError` when the
    storage itself fails; nothing is half-written in that case.
    """

    scope: str

    def create_run(
        self, run: RunRecord, first: Checkpoint, writes: Sequence[DomainWrite] = ()
    ) -> None:
        """Insert a run with its revision-0 checkpoint (and ``run.lease_*``, if set).

        Raises:
            RevisionConflictError: a run with this id already exists.
            DuplicateFlowKeyError: a live run of the flow has ``run.flow_key``.
        """

    def append(
        self,
        checkpoint: Checkpoint,
        writes: Sequence[DomainWrite] = (),
        lease: Lease | None = None,
        *,
        intents: Sequence[Intent] = (),
        consume: Sequence[tuple[int, str]] = (),
    ) -> None:
        """Append ``checkpoint`` (revision ``latest + 1``) and, in the same
        transaction, run ``writes``, enqueue ``intents`` in the outbox, mark
        signals consumed (``(signal_id, wait_id)`` pairs) and mirror the
        checkpoint's pending waits; update the run's status, progress, error.
        With ``lease``, the append also claims the run: it requires that the
        run's lease is free, held by ``lease.owner`` or expired at
        ``lease.issued_at``, and sets it to ``lease``. An append whose status
        is not ``running``/``pending`` clears the lease (nobody executes a
        finished or waiting run).

        Raises:
            CheckpointNotFoundError: the run does not exist in this scope.
            RevisionConflictError: the revision is taken or not ``latest + 1``.
            LeaseLostError: another owner took the run over.
            RevisionConflictError: a signal in ``consume`` was consumed already.
            RevisionConflictError: an intent id is already in the outbox.
        """

    # -- waits, signals, events -----------------------------------------

    def send_signal(
        self, name: str, key: str, payload: JSON, now: float, dedupe_key: str | None = None
    ) -> int:
        """Store a signal; returns its id. A second send with the same
        ``dedupe_key`` stores nothing and returns the first one's id."""

    def next_signal(self, name: str, key: str) -> Signal | None:
        """The oldest unconsumed signal for ``(name, key)``, or ``None``."""

    def publish_event(self, type_: str, payload: JSON, now: float) -> int:
        """Store an event; returns its id."""

    def first_event(self, type_: str, since: float) -> Event | None:
        """The first event of ``type_`` published at or after ``since``."""

    def due_waits(self, now: float, limit: int = 1000) -> list[tuple[str, str]]:
        """``(run_id, wait_id)`` of pending waits whose deadline is at or before ``now``."""

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or ``None``."""

    def wakeable_runs(self, now: float, limit: int = 1000) -> list[str]:
        """Waiting runs that have something to act on at ``now``: a wait whose
        deadline passed, a deliverable signal or event, or a passed run deadline."""

    def runs_waiting_for(self, kind: str, name: str, key: str | None = None) -> list[str]:
        """Ids of runs with a pending wait of ``kind`` on ``name`` (and ``key``)."""

    # -- outbox ------------------------------------------------------------

    def intents(self, statuses: Sequence[str], limit: int = 100) -> list[Intent]:
        """Outbox intents with these statuses, oldest first."""

    def mark_intent(
        self,
        intent_id: str,
        status: str,
        now: float,
        *,
        receipt: JSON = None,
        error: str | None = None,
        expect: str | None = None,
    ) -> bool:
        """Record an intent's delivery progress (``sending`` bumps attempts).

        With ``expect``, only an intent whose status is still ``expect`` moves
        (a claim: of two dispatchers that read it, one wins). Returns whether
        the intent moved."""

    def update_latest(self, run_id: str, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        """Append ``change(latest)`` atomically: no other writer can append in
        between (a write transaction spans the read and the append). For
        control operations (cancel, fail) that must win against a busy run.
        Returns the appended checkpoint."""

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        """Take or renew the run's lease when it is free, ours, or expired at ``now``.

        Raises:
            RunLeasedError: another owner holds a live lease.
            CheckpointNotFoundError: no such run.
        """

    def release(self, run_id: str, owner: str) -> None:
        """Drop ``owner``'s lease on the run (no-op when someone else holds it)."""

    def latest(self, run_id: str) -> Checkpoint:
        """The highest revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        """One revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every retained checkpoint of the run, oldest first. Raises CheckpointNotFoundError."""

    def get_run(self, run_id: str) -> RunRecord:
        """Run metadata only. Raises CheckpointNotFoundError."""

    def list_runs(
        self,
        statuses: Sequence[RunStatus] | None = None,
        flow_name: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
        *,
        tenant_id: str | None = None,
        session_id: str | None = None,
        flow_key: str | None = None,
    ) -> list[RunRecord]:
        """Runs of this scope, oldest first (``created_at`` then ``run_id``), or
        newest first; ``limit``/``offset`` page through them; optionally only
        those of a tenant, a session or a flow key."""

    def runs_of_other_versions(self, flow_name: str, version: str) -> list[RunRecord]:
        """Live runs (pending, running, waiting, failed) of ``flow_name`` whose
        ``flow_version`` is not ``version``, oldest first (an indexed query)."""

    def data_version(self) -> int:
        """A number that changes whenever anyone (any connection, any process)
        committed to the store since the last call; cheap to poll."""

    def delete_run(self, run_id: str) -> None:
        """Delete a run and all its checkpoints. Raises CheckpointNotFoundError."""

    def prune(self, run_id: str, keep_last_n: int) -> int:
        """Delete all but the newest ``keep_last_n`` (>= 1) checkpoints; returns
        how many were deleted. The latest is never deleted."""

    def query(self, op: Callable[[Any], T]) -> T:
        """Run a read-only domain query ``op(connection)`` and return its result."""

    def close(self) -> None:
        """Release the store's resources."""
