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
        """
        ...

    def append(
        self,
        checkpoint: Checkpoint,
        writes: Sequence[DomainWrite] = (),
        lease: Lease | None = None,
    ) -> None:
        """Append ``checkpoint`` (revision ``latest + 1``) and run ``writes`` in
        the same transaction; update the run's status, progress and error.
        With ``lease``, the append also claims the run: it requires that the
        run's lease is free, held by ``lease.owner`` or expired at
        ``lease.issued_at``, and sets it to ``lease``. An append whose status
        is not ``running``/``pending`` clears the lease (nobody executes a
        finished or waiting run).

        Raises:
            CheckpointNotFoundError: the run does not exist in this scope.
            RevisionConflictError: the revision is taken or not ``latest + 1``.
            LeaseLostError: another owner took the run over.
        """
        ...

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        """Take or renew the run's lease when it is free, ours, or expired at ``now``.

        Raises:
            RunLeasedError: another owner holds a live lease.
            CheckpointNotFoundError: no such run.
        """
        ...

    def release(self, run_id: str, owner: str) -> None:
        """Drop ``owner``'s lease on the run (no-op when someone else holds it)."""
        ...

    def latest(self, run_id: str) -> Checkpoint:
        """The highest revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""
        ...

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        """One revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""
        ...

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every retained checkpoint of the run, oldest first. Raises CheckpointNotFoundError."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """Run metadata only. Raises CheckpointNotFoundError."""
        ...

    def list_runs(
        self,
        statuses: Sequence[RunStatus] | None = None,
        flow_name: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[RunRecord]:
        """Runs of this scope, oldest first (``created_at`` then ``run_id``), or
        newest first; ``limit``/``offset`` page through them."""
        ...

    def data_version(self) -> int:
        """A number that changes whenever anyone (any connection, any process)
        committed to the store since the last call; cheap to poll."""
        ...

    def delete_run(self, run_id: str) -> None:
        """Delete a run and all its checkpoints. Raises CheckpointNotFoundError."""
        ...

    def prune(self, run_id: str, keep_last_n: int) -> int:
        """Delete all but the newest ``keep_last_n`` (>= 1) checkpoints; returns
        how many were deleted. The latest is never deleted."""
        ...

    def query(self, op: Callable[[Any], T]) -> T:
        """Run a read-only domain query ``op(connection)`` and return its result."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...
