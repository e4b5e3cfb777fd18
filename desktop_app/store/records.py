"""Every record the store keeps, in one place (no behaviour, no apsw).

Shapes (all times are UTC seconds since the epoch, as ``float``):

* :class:`RunRecord` — one row per run: identity, flow name and version,
  status, latest revision, execution context, lease.
* :class:`Checkpoint` — the run after a step: revision ``0..n``, status,
  JSON-mode state (``dict[str, JSON]``), step records, frontier (ids of the
  steps still to run), progress.
* :class:`StepRecord` — ``in_progress -> completed | failed`` (or
  ``skipped``), attempts, timings, error.
* :class:`Wait`, :class:`Signal`, :class:`Event` — the mailbox.
* :class:`Intent` — an outbox row.
* :class:`Lease` — a claim on a run, with its TTL.
* :class:`AgentRun`, :class:`ToolResult` — agent runs (messages are plain JSON
  objects, see ``desktop_app.agent.messages``).

Two status vocabularies exist: flow runs (:data:`RunStatus`) and agent runs
(:data:`AgentStatus`, older and richer). They are mapped in exactly one place,
:data:`AGENT_RUN_STATUS` / :func:`run_status_of_agent`, for lists that show both.

Both sides treat a record handed to or returned by a store as immutable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

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


def _quick_init(cls: type[Any]) -> None:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that sets
    each field through its slot's descriptor instead of the one dataclasses
    writes (``object.__setattr__`` per field, the way round its frozen
    ``__setattr__``): the same signature, defaults and default factories,
    the same instances (still frozen: assigning a field raises
    ``FrozenInstanceError``), about half the cost to make. For the records
    the step path makes at every step (two ``StepRecord``, a ``Checkpoint``,
    a ``Lease``) and every run's ``RunRecord``.
    """
    if hasattr(cls, "__post_init__"):  # dataclasses' __init__ calls it: keep theirs
        return
    params: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {"MISSING": dataclasses.MISSING}
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:  # not in the signature dataclasses writes: keep theirs
            return
        env[f"set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            env[f"default_{f.name}"] = f.default
            params.append(f"{f.name}=default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            body.append(f"    if {f.name} is MISSING:\n        {f.name} = factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"    set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(source, env)  # the source is made above from the field names only
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init


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
        wait_id: stable id ``"<run_id>:<step_id>:<n>"`` (``<step_id>@<k>`` on
            the step's k-th visit, k >= 2); survives restarts.
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


class SignalId(int):
    """A signal's id as ``send_signal`` answers it: an ``int`` that also
    says whether this send stored the signal (``stored``), or found the one
    sent before with its dedupe key (a duplicate, which stores nothing:
    two senders of one key at the same instant both pass a check made
    before the insert, and only the store's insert tells them apart)."""

    stored: bool

    def __new__(cls, value: int, stored: bool = True) -> SignalId:
        made = super().__new__(cls, value)
        made.stored = stored
        return made


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
    attempt (``"<run_id>:<step_id>:<iteration>:<n>"``, with ``<step_id>@<k>``
    on the step's k-th visit, k >= 2, unless the step gives one).
    ``interrupted`` is set on an intent ``claim_intents`` handed out because
    the dispatcher that was sending it died: reconcile before sending again.
    ``moved_to``: where ``db copy`` moved it (the database URL, password left
    out), read from a file it left: that database's dispatchers deliver it,
    none of the file's.
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
    interrupted: bool = False
    moved_to: str | None = None


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """What :meth:`~desktop_app.store.protocol.Outbox.withdraw_intents` did
    to one run's undelivered intents.

    Attributes:
        withdrawn: intents now ``failed`` with the withdrawal's reason, as
            they were before (``pending``, or ``sending`` by a dispatcher that
            is gone): no dispatcher sends them again.
        in_flight: ``sending`` intents a live dispatcher holds: the send may
            be happening now; they were left alone.
        made: withdrawn ``sending`` intents whose destination says the
            effect was made before its dispatcher stopped: marked
            ``delivered`` instead (filled by
            :func:`desktop_app.flow.outbox.settle_withdrawn`; a store leaves
            it empty).
        unknown: withdrawn ``sending`` intents whose outcome no destination
            here could check: they stay ``failed``, with a reason that says
            the outcome is unknown (filled the same way).
    """

    withdrawn: list[Intent]
    in_flight: list[Intent]
    made: list[Intent] = field(default_factory=list)
    unknown: list[Intent] = field(default_factory=list)


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


class RunHead(NamedTuple):
    """A run row and its latest checkpoint, read together (what
    ``RunLog.head`` returns): ``checkpoint.revision == run.revision``."""

    run: RunRecord
    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on a run: ``owner`` executes it until ``expires_at`` (UTC epoch s).

    A lease takes a run that no one holds, or renews ``owner``'s own. It takes
    a run held by another owner only as a compare-and-set on the holder the
    claimant judged gone: ``takes_over`` names that very owner, and the row
    must still hold it with an expiry at or before ``issued_at`` (the
    claimant's "now", UTC epoch s; ``math.inf`` when the holder is known dead:
    a process of this host that exited). Two claimants that judged the same
    holder gone cannot both win: the first replaces the holder, so the
    second's compare fails. A clock alone never takes a lease from an owner
    the claimant did not name.
    """

    owner: str
    expires_at: float
    issued_at: float = 0.0
    ttl_s: float | None = None
    #: the owner this lease takes the run from (``None``: free or our own only)
    takes_over: str | None = None

    def may_take(self, holder: str | None, holder_expires_at: float | None, at: float) -> bool:
        """Whether this lease may take a run whose lease is ``holder`` until
        ``holder_expires_at``, judged at ``at`` (UTC epoch s): free, ours, or
        the named holder expired at or before ``at``. The SQL stores write
        the same rule as a ``WHERE`` clause."""
        return (
            holder is None
            or holder == self.owner
            or (
                self.takes_over is not None
                and holder == self.takes_over
                and (holder_expires_at or 0.0) <= at
            )
        )

    @property
    def ttl(self) -> float:
        """How long the lease lasts in seconds: ``ttl_s`` when set, else
        ``expires_at - issued_at`` (``math.inf`` when ``issued_at`` is ``inf``
        and no ``ttl_s`` was given)."""
        if self.ttl_s is not None:
            return self.ttl_s
        if math.isinf(self.issued_at):
            return math.inf
        return self.expires_at - self.issued_at


def lease_is_free(
    run: RunRecord,
    owner: str,
    at: float,
    presumed_dead: Callable[[str], bool] | None,
    presumed_alive: Callable[[str], bool] | None,
) -> bool:
    """Whether ``claim_runnable`` may hand ``run`` to ``owner`` at ``at`` (UTC
    epoch s): no lease, ``owner``'s own, an owner ``presumed_dead`` says is
    gone, or a lease expired at ``at`` whose owner ``presumed_alive`` does not
    say still runs."""
    holder = run.lease_owner
    if holder is None or holder == owner:
        return True
    if presumed_dead is not None and presumed_dead(holder):
        return True
    expired = run.lease_expires_at is not None and run.lease_expires_at <= at
    return expired and not (presumed_alive is not None and presumed_alive(holder))


def claim_time(lease: Lease, now: float) -> float:
    """The time a claim of ``lease`` is judged at: ``now`` (UTC epoch s), or
    ``math.inf`` for a lease that takes over an owner known dead."""
    return math.inf if math.isinf(lease.issued_at) else now


def lease_lost_message(run_id: str, holder: str | None, lease: Lease) -> str:
    """What an owner whose append was refused is told: who holds the run now
    (a claimant that took it over, or that won a takeover race)."""
    if lease.takes_over is not None:
        return (
            f"run {run_id} is held by {holder or 'another process'}: another process took it "
            f"over from {lease.takes_over} first; this process runs nothing of it."
        )
    return (
        f"run {run_id} is held by {holder or 'another process'}, not by this process "
        f"({lease.owner}): it took the run over; this process stops executing it."
    )


def agent_lease_lost_message(run_id: str, holder: str | None, owner: str | None) -> str:
    """What an agent-run owner whose write was refused is told: who holds the
    run now. (Not that its lease "expired": a takeover of an owner known dead
    needs no expiry.)"""
    return (
        f"agent run {run_id} is held by {holder or 'no process'}, not by {owner}: another "
        "process took it over; this process stops executing it."
    )


def checkpoint_id(run_id: str, revision: int) -> str:
    """The stable id of a checkpoint: ``"<run_id>:<revision>"``."""
    return f"{run_id}:{revision}"


def parse_checkpoint_id(cid: str) -> tuple[str, int]:
    """Split a checkpoint id into ``(run_id, revision)``; raises ``ValueError``."""
    run_id, _, rev = cid.rpartition(":")
    if not run_id or not rev.isdigit():
        raise ValueError(f"not a checkpoint id: {cid!r} (expected '<run_id>:<revision>')")
    return run_id, int(rev)


AgentStatus = Literal[
    "running",
    "paused",
    "input_required",
    "done",
    "failed",
    "canceled",
    "timeout",
    "rate_limited",
    "expired",
]
#: Statuses an agent run never leaves: what cancel, pause and the app refuse.
AGENT_ENDED: tuple[AgentStatus, ...] = ("done", "canceled", "timeout", "expired")
#: Statuses ``pending()`` leaves out (go-micro's terminal set, plus ``done``;
#: S39): the ended ones and ``rate_limited``, which is not over: it goes on
#: once the provider's ``Retry-After`` has come (``resume_due``).
AGENT_TERMINAL: tuple[AgentStatus, ...] = (*AGENT_ENDED, "rate_limited")


@dataclass(frozen=True)
class AgentRun:
    """An agent run's row (times are UTC epoch seconds)."""

    run_id: str
    agent: str
    status: AgentStatus
    input: str
    created_at: float
    updated_at: float
    parent_run_id: str | None = None
    response: str | None = None
    error: str | None = None
    error_type: str | None = None
    turns: int = 0
    pending_call: dict[str, Any] | None = None
    deadline_at: float | None = None
    expires_at: float | None = None
    retry_at: float | None = None
    context: dict[str, Any] = field(default_factory=dict)
    lease_owner: str | None = None
    lease_expires_at: float | None = None


#: The agent-run fields ``AgentLog.update(**fields)`` may set (the others are
#: fixed at creation).
AGENT_RUN_FIELDS = frozenset(AgentRun.__dataclass_fields__) - {
    "run_id",
    "agent",
    "created_at",
    "input",
}


def check_agent_run_fields(fields: Mapping[str, Any]) -> None:
    """Refuse ``AgentLog.update`` fields that are not in :data:`AGENT_RUN_FIELDS`
    (SQL stores put these names into the statement, so this is also what keeps
    a caller's key out of the SQL).

    Raises:
        ValueError: ``not agent-run fields: a, b`` (sorted), before anything is written.
    """
    unknown = set(fields) - AGENT_RUN_FIELDS
    if unknown:
        raise ValueError(f"not agent-run fields: {', '.join(sorted(unknown))}")


@dataclass(frozen=True)
class ToolResult:
    """A tool call's durable record, keyed by tool name + canonical JSON input."""

    tool_key: str
    tool: str
    status: Literal["in_progress", "completed", "failed"]
    result: str | None
    attempts: int
    reused: int


#: Agent-run status -> the flow-run status that means the same thing, for
#: lists that show both kinds of run (``flowdesk runs``, the app's runs table).
#: ``input_required`` is a wait for a person; ``paused``/``rate_limited`` are
#: waits on time; ``expired`` ran past its TTL.
AGENT_RUN_STATUS: Mapping[str, RunStatus] = {
    "running": "running",
    "paused": "waiting",
    "input_required": "waiting",
    "rate_limited": "waiting",
    "done": "completed",
    "failed": "failed",
    "canceled": "canceled",
    "timeout": "timed_out",
    "expired": "timed_out",
}


def run_status_of_agent(status: str) -> RunStatus:
    """The flow-run status for an agent-run status (see :data:`AGENT_RUN_STATUS`).

    Raises:
        ValueError: ``status`` is not an agent-run status.
    """
    try:
        return AGENT_RUN_STATUS[status]
    except KeyError:
        raise ValueError(f"not an agent-run status: {status!r}") from None


for _record in (StepRecord, Checkpoint, Lease, RunRecord):
    _quick_init(_record)
