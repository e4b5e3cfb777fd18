"""The store contract, split by role: small protocols a backend implements.

A backend is one object implementing every role (:class:`CheckpointStore` is
their union), because a step's signals, outbox intents and domain writes must
commit in the same transaction as its checkpoint. The roles give each part of
that contract a name, a docstring and its own conformance checks
(:mod:`desktop_app.store.conformance`):

* :class:`RunLog` — runs and their checkpoints: create, compare-and-append,
  latest, history, list, delete, prune (as LangGraph's checkpoint saver).
* :class:`Leases` — who executes a run: claim, release, claim the next
  runnable runs, the store's clock.
* :class:`Mailbox` — signals, events, waits and deadlines.
* :class:`Outbox` — side effects queued by steps, claimed by dispatchers.
* :class:`ChangeFeed` — a cheap "did anything change" number for the UI.
* :class:`DomainStore` — the flows' own tables, through :class:`SqlTx`.
* :class:`AgentLog` — agent runs: the run row, messages, tool results.

Optional parts are declared in ``capabilities`` (:data:`CAPABILITIES`), never
discovered with ``isinstance`` (as LangGraph's and Harlequin's adapters do).

Checkpoints are saved by compare-and-append on ``(run_id, revision)``: the
first writer of a revision wins, the second gets
:class:`~desktop_app.errors.RevisionConflictError`.

Every method raises :class:`~desktop_app.errors.StoreError` when the storage
itself fails; nothing is half-written in that case. The records live in
:mod:`desktop_app.store.records` and are re-exported here. This module never
imports apsw.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from desktop_app.errors import DatabaseUnreachableError
from desktop_app.store.records import (
    AGENT_ENDED,
    AGENT_RUN_STATUS,
    AGENT_TERMINAL,
    JSON,
    PENDING_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    AgentRun,
    AgentStatus,
    Checkpoint,
    CheckpointInfo,
    Event,
    Intent,
    Lease,
    RunHead,
    RunRecord,
    RunStatus,
    Signal,
    SignalId,
    StepRecord,
    StepStatus,
    ToolResult,
    Wait,
    WaitKind,
    Withdrawal,
    checkpoint_id,
    parse_checkpoint_id,
    run_status_of_agent,
)

__all__ = [
    "AGENT_ENDED",
    "AGENT_RUN_STATUS",
    "AGENT_TERMINAL",
    "CAPABILITIES",
    "CAPABILITY_METHODS",
    "JSON",
    "PENDING_STATUSES",
    "RUNNABLE_STATUSES",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "AgentLog",
    "AgentRun",
    "AgentStatus",
    "ChangeFeed",
    "ChangePush",
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointStore",
    "DomainQuery",
    "DomainStore",
    "DomainWrite",
    "Event",
    "Intent",
    "Lease",
    "Leases",
    "Mailbox",
    "Outbox",
    "RunHead",
    "RunLog",
    "RunRecord",
    "RunStatus",
    "ServerOutages",
    "ServerTime",
    "Signal",
    "SignalId",
    "SqlResult",
    "SqlTx",
    "StepRecord",
    "StepStatus",
    "ToolResult",
    "Wait",
    "WaitKind",
    "Withdrawal",
    "WorkerClaims",
    "checkpoint_id",
    "parse_checkpoint_id",
    "run_status_of_agent",
]

T = TypeVar("T")

#: Optional capabilities a store may declare in ``capabilities``:
#:
#: * ``"sql"`` — :class:`DomainStore` works (domain writes, ``query``,
#:   ``write``); without it they raise ``StoreError``.
#: * ``"processes"`` — two store objects in different processes see each
#:   other's writes (a file or a server; the in-memory store lacks it).
#: * ``"database_clock"`` — :meth:`Leases.now` is the database server's clock.
#: * ``"vacuum"`` — ``vacuum(min_free_pages)`` gives free pages back.
#: * ``"push"`` — :class:`ChangePush` works: changes made by other processes
#:   are pushed (PostgreSQL LISTEN/NOTIFY), so a UI need not wait for its poll.
#: * ``"append_batch"`` — ``append_batch(requests)`` appends several runs'
#:   checkpoints in one transaction
#:   (:class:`~desktop_app.store.group_commit.BatchAppender`), so an engine
#:   may group-commit on this store.
#: * ``"group_commit"`` — batching pays here (a commit's fsync is the cost,
#:   as on SQLite): the engine turns group commit on by default, and creates
#:   runs through it too (``AppendRequest.run``: ``append_batch`` creates
#:   them). Needs ``append_batch``. PostgreSQL declares ``append_batch`` but not this:
#:   the server already merges concurrent commits' WAL flushes, and one
#:   transaction sending N runs' statements one round trip after another was
#:   measured at 0.37-0.51x the steps/s of N connections committing on their own.
#: * ``"worker_claims"`` — ``claim_for_worker(owner, ttl_s, limit, *, flows)``
#:   leases runnable runs to one of several workers, freeing the runs of
#:   workers whose session ended (PostgreSQL's liveness locks).
#: * ``"worker_sessions"`` — ``listener(channels, *, owner, on_lost)`` opens
#:   a session of its own that holds a worker's liveness lock and hears wake-ups.
#: * ``"server_outages"`` — the store rides out a database server's outages
#:   (:class:`ServerOutages`): ``on_unreachable(handler)`` says at the first
#:   try that finds the server unreachable, while the transaction goes on
#:   trying, so a process can say it waits; ``stop_waiting(wait_s)`` gives up
#:   sooner from then on, for a process that is stopping (a file is never
#:   away: SQLite declares neither).
#:
#: Callers read these names; they never probe a store with ``hasattr`` or
#: ``isinstance``. The conformance check ``declared_capabilities_are_implemented``
#: fails a store that declares a name without its method, or has one of these
#: methods without declaring it.
CAPABILITIES = frozenset(
    {
        "sql",
        "processes",
        "database_clock",
        "vacuum",
        "push",
        "append_batch",
        "group_commit",
        "worker_claims",
        "worker_sessions",
        "server_outages",
    }
)

#: The optional methods behind a capability, by capability name.
CAPABILITY_METHODS: dict[str, tuple[str, ...]] = {
    "append_batch": ("append_batch",),
    "worker_claims": ("claim_for_worker",),
    "worker_sessions": ("listener",),
    "push": ("watch_changes",),
    "vacuum": ("vacuum",),
    "database_clock": ("server_time",),
    "server_outages": ("on_unreachable", "stop_waiting"),
}

#: Statuses :meth:`Leases.claim_runnable` hands out by default: interrupted runs.
RUNNABLE_STATUSES: tuple[RunStatus, ...] = ("pending", "running")


class SqlResult:
    """What :meth:`SqlTx.execute` returns: the statement's rows (read at once)
    and ``rowcount``, the rows an INSERT/UPDATE/DELETE changed."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: Sequence[Sequence[Any]], rowcount: int) -> None:
        self._rows = [tuple(r) for r in rows]
        self.rowcount = rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or ``None``."""
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row."""
        return list(self._rows)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


# The protocols below are signatures only; "no mutate block" keeps mutmut from
# adding its trampolines to them as members, which isinstance() against a
# runtime-checkable protocol would then require of every store (docs/mutation.md).
@runtime_checkable
class SqlTx(Protocol):  # pragma: no mutate block
    """The open transaction a domain write or query receives.

    SQL uses ``?`` placeholders; the store translates them for its dialect.
    Portable SQL only (SQLite and PostgreSQL): qualify existing-row columns in
    ``ON CONFLICT DO UPDATE``, no boolean arithmetic, no ``LIMIT -1``, no
    ``last_insert_rowid()`` (use ``RETURNING``). ``dialect`` names the
    database for the rare statement that must differ.
    """

    dialect: Literal["sqlite", "postgres"]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> SqlResult:
        """Run one statement; its rows (if any) and the rows it changed."""

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per parameter row."""

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of a query (or of ``… RETURNING``), or ``None``."""

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of a query (or of ``… RETURNING``)."""


#: A domain write: called with the store's :class:`SqlTx` inside the same
#: transaction that appends the checkpoint. Raising aborts the whole transaction.
DomainWrite = Callable[[SqlTx], None]
#: A domain query (or standalone write) op: ``op(tx) -> result``.
DomainQuery = Callable[[SqlTx], T]


@runtime_checkable
class RunLog(Protocol):  # pragma: no mutate block
    """Runs and their append-only checkpoints (compare-and-append)."""

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
        changed_steps: frozenset[str] | None = None,
        changed_fields: frozenset[str] | None = None,
    ) -> None:
        """Append ``checkpoint`` (revision ``latest + 1``) and, in the same
        transaction, run ``writes``, enqueue ``intents`` in the outbox, mark
        signals consumed (``(signal_id, wait_id)`` pairs) and mirror the
        checkpoint's pending waits; update the run's status, progress, error.
        With ``lease``, the append also claims the run: it requires that the
        run's lease is free, held by ``lease.owner`` or expired at
        ``lease.issued_at``, and sets it to ``lease``. An append whose status
        is not ``running``/``pending`` clears the lease (nobody executes a
        finished or waiting run). ``changed_steps``: the ids of the step
        records that differ from the previous revision's, when the writer
        knows them (the store then stores those without comparing every
        record, so an append costs what the step changed); ``None``: the store
        compares them. ``changed_fields``: likewise, the state fields that
        may differ from the previous revision's (every other field is the
        same value: the store does not compare it, however large);
        ``None``: the store compares every field.

        Raises:
            CheckpointNotFoundError: the run does not exist in this scope.
            RevisionConflictError: the revision is taken or not ``latest + 1``.
            LeaseLostError: another owner took the run over.
            RevisionConflictError: a signal in ``consume`` was consumed already.
            RevisionConflictError: an intent id is already in the outbox.
        """

    def update_latest(self, run_id: str, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        """Append ``change(latest)`` atomically: no other writer can append in
        between. For control operations (cancel, fail) that must win against a
        busy run. Returns the appended checkpoint."""

    def latest(self, run_id: str) -> Checkpoint:
        """The highest revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""

    def head(self, run_id: str) -> RunHead:
        """The run row and its latest checkpoint in one read (the checkpoint
        is the row's revision: never an older or newer one); what the engine
        reads before it drives a run. Raises CheckpointNotFoundError,
        CheckpointDecodeError."""

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        """One revision. Raises CheckpointNotFoundError, CheckpointDecodeError."""

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every retained checkpoint of the run, oldest first. Raises CheckpointNotFoundError."""

    def history_page(self, run_id: str, *, after: int = -1, limit: int) -> list[CheckpointInfo]:
        """At most ``limit`` retained checkpoints with ``revision > after``,
        oldest first (one indexed range read: page a long history by passing
        the last revision seen). Raises CheckpointNotFoundError."""

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
        run_id_prefix: str | None = None,
    ) -> list[RunRecord]:
        """Runs of this scope, oldest first (``created_at`` then ``run_id``), or
        newest first; ``limit``/``offset`` page through them; optionally only
        those of a tenant, a session or a flow key, or whose id starts with
        ``run_id_prefix`` (read as a range of the index on ``run_id``: its
        cost grows with the runs matching, not with the runs stored).
        Raises ValueError for an empty ``run_id_prefix``."""

    def runs_of_other_versions(self, flow_name: str, version: str) -> list[RunRecord]:
        """Live runs (pending, running, waiting, failed) of ``flow_name`` whose
        ``flow_version`` is not ``version``, oldest first (an indexed query)."""

    def delete_run(self, run_id: str) -> None:
        """Delete a run and all its checkpoints. Raises CheckpointNotFoundError."""

    def prune(self, run_id: str, keep_last_n: int) -> int:
        """Delete all but the newest ``keep_last_n`` (>= 1) checkpoints; returns
        how many were deleted. The latest is never deleted. Raises ValueError
        for ``keep_last_n < 1``."""


@runtime_checkable
class Leases(Protocol):  # pragma: no mutate block
    """Who executes a run, and until when (a lease with a TTL).

    "Now" for a lease decision is :meth:`now`: the database's clock where it
    has one (``database_clock`` capability), else the process clock, unless a
    test clock was injected into the store."""

    def now(self) -> float:
        """The store's current time, UTC epoch seconds."""

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        """Take or renew the run's lease when it is free or ours, or take it
        from ``lease.takes_over`` when that owner still holds it with an expiry
        at or before ``now`` (any expiry when ``lease.issued_at`` is
        ``math.inf``: the owner is known dead); see :class:`Lease`.

        Raises:
            RunLeasedError: another owner holds a live lease.
            CheckpointNotFoundError: no such run.
        """

    def renew(self, run_ids: Sequence[str], lease: Lease) -> set[str]:
        """The heartbeat: extend ``lease.owner``'s lease to ``lease.expires_at``
        (PostgreSQL: the database clock plus ``lease.ttl``) on each run of
        ``run_ids`` that it still holds and that is still ``pending`` or
        ``running``, in one transaction; returns the ids renewed. A run whose
        lease was released, taken over, or cleared by its checkpoint (it went
        waiting or finished) is left as it is: a heartbeat never leases a run
        again."""

    def release(self, run_id: str, owner: str) -> None:
        """Drop ``owner``'s lease on the run (no-op when someone else holds it)."""

    def claim_runnable(
        self,
        owner: str,
        ttl_s: float,
        limit: int = 100,
        *,
        statuses: Sequence[RunStatus] = RUNNABLE_STATUSES,
        wakeable: bool = True,
        flows: Collection[str] | None = None,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> list[RunRecord]:
        """Hand ``owner`` the next runs it may execute, leased to it for
        ``ttl_s`` seconds, oldest first, at most ``limit``; each run is handed
        to one claimant only (two processes never get the same run).

        Claimable: runs in ``statuses`` (interrupted ``pending``/``running``
        by default) and, with ``wakeable``, waiting runs with something to act
        on (see :meth:`Mailbox.wakeable_runs`), whose lease is free, already
        ``owner``'s, expired at ``now`` (default :meth:`now`), or held by an
        owner ``presumed_dead(owner)`` says is gone; an expired lease whose
        owner ``presumed_alive(owner)`` says still runs is not taken (liveness
        beats clocks: a process whose clock runs ahead, or an owner whose
        heartbeat could not renew, never loses a run to a claimant on its
        host). ``flows`` restricts the claim to these flow names. Selecting
        and leasing are one atomic step. Returns the claimed runs (lease set)."""


@runtime_checkable
class Mailbox(Protocol):  # pragma: no mutate block
    """Signals (addressed, consumed once), events (broadcast), waits and deadlines."""

    def send_signal(
        self, name: str, key: str, payload: JSON, now: float, dedupe_key: str | None = None
    ) -> SignalId:
        """Store a signal; returns its id. A second send with the same
        ``dedupe_key`` (from any connection) and the same name, key and
        payload stores nothing and returns the first one's id, its
        ``stored`` False (also when the two were sent at the same instant).

        Raises:
            DedupeKeyReusedError: ``dedupe_key`` was used for a signal of
                another name, key or payload; nothing is stored.
        """

    def signal_by_dedupe_key(self, dedupe_key: str) -> Signal | None:
        """The signal stored with ``dedupe_key`` in this scope, or ``None``."""

    def next_signal(self, name: str, key: str) -> Signal | None:
        """The oldest unconsumed signal for ``(name, key)``, or ``None``."""

    def signal_consumer(self, signal_id: int) -> str | None:
        """The id of the wait that consumed signal ``signal_id`` (took it, or
        refused a payload it could not take), or ``None`` while it waits in
        the mailbox (also for an id not stored in this scope)."""

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
        """Ids of runs with a pending wait of ``kind`` on ``name`` (and
        ``key``), the run waiting longest first (its wait's ``created_at``;
        ties by run id): a signal goes to one wait, the oldest."""


@runtime_checkable
class Outbox(Protocol):  # pragma: no mutate block
    """Side effects a step queued (committed with its checkpoint), delivered
    after commit by dispatchers that claim them."""

    def intents(
        self, statuses: Sequence[str], limit: int = 100, *, run_id: str | None = None
    ) -> list[Intent]:
        """Outbox intents with these statuses, oldest first (for display), at
        most ``limit``; with ``run_id``, only that run's. An intent ``db
        copy`` moved has its ``moved_to`` set (it is delivered there)."""

    def delivered_runs(self, flow_name: str, limit: int = 100) -> list[str]:
        """Ids of this scope's ``completed`` runs of ``flow_name`` none of
        whose outbox intents is ``pending``, ``sending`` or ``failed``,
        newest first, at most ``limit``: the ``delete_on_success`` runs a
        caller may delete now (:func:`desktop_app.flow.outbox.delete_when_sent`).
        One statement; the intents read through the index on their status."""

    def claim_intents(
        self,
        owner: str,
        ttl_s: float,
        limit: int = 100,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
        destinations: Collection[str] | None = None,
    ) -> list[Intent]:
        """Claim up to ``limit`` intents for delivery by ``owner`` for ``ttl_s``
        seconds, oldest first: ``pending`` and ``sending`` ones nobody else
        holds a live claim on (``presumed_dead(claimant)``, or the claim
        expired at ``now``, default :meth:`Leases.now`, and its claimant is
        not ``presumed_alive``: liveness beats clocks, as for run leases, so
        a live dispatcher of this host keeps a slow send whatever the clocks
        say). Status and
        attempts are unchanged: the dispatcher marks each ``sending`` as it
        sends it. A ``sending`` intent comes back with ``interrupted=True``
        (its dispatcher died mid-send: reconcile before sending). An intent a
        live dispatcher holds is never handed out. With ``destinations``, only
        intents for those destinations are claimed: an intent for a
        destination the dispatcher cannot deliver to stays pending for one
        that can (never failed for it, never taking a claim slot)."""

    def renew_intent_claim(
        self, intent_id: str, owner: str, ttl_s: float, *, now: float | None = None
    ) -> bool:
        """Extend ``owner``'s claim on a ``sending`` intent to ``ttl_s``
        seconds after ``now`` (default :meth:`Leases.now`), as a dispatcher
        does while a slow send runs, so that no one takes it over. Returns
        ``False`` (nothing changed) when the intent is not ``sending`` or
        ``owner`` no longer holds it."""

    def release_intent(self, intent_id: str, owner: str, error: str) -> bool:
        """Let go of ``owner``'s claim on a ``sending`` intent whose outcome
        it could not learn (its destination's lookup failed), recording
        ``error``: it stays ``sending``, so the next dispatcher that claims it
        gets it ``interrupted`` and looks it up again instead of sending it
        blindly. Returns ``False`` when the intent is not ``sending`` or
        ``owner`` no longer holds it."""

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
        """Record an intent's delivery progress (``sending`` bumps attempts;
        any other status ends the claim). With ``expect``, only an intent
        whose status is still ``expect`` moves (of two dispatchers that read
        it, one wins). Returns whether the intent moved."""

    def withdraw_intents(
        self,
        run_id: str,
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> Withdrawal:
        """Take back run ``run_id``'s intents that were not delivered, in one
        transaction: each ``pending`` intent, and each ``sending`` one whose
        claim expired at ``now`` (default :meth:`Leases.now`) and whose
        claimant is not ``presumed_alive``, or whose claimant is
        ``presumed_dead``, becomes ``failed`` with ``reason``,
        compared and set on the status read (a dispatcher that claimed one
        then loses its ``mark_intent(..., "sending", expect="pending")``).
        A ``sending`` intent a live dispatcher holds is returned in
        ``in_flight``, untouched (wait for it, then call again)."""

    def update_latest_withdrawing(
        self,
        run_id: str,
        change: Callable[[Checkpoint], Checkpoint],
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> tuple[Checkpoint, Withdrawal]:
        """:meth:`RunLog.update_latest` and :meth:`withdraw_intents` in one
        transaction: a run's terminal checkpoint (a cancel) and the
        withdrawal of its undelivered intents commit together or not at
        all, so a process killed between them never leaves an ended run's
        side effects queued for a dispatcher to make. Returns the appended
        checkpoint and what was withdrawn.

        Raises:
            the errors of :meth:`RunLog.update_latest` (nothing is
            withdrawn then), and whatever ``change`` raises (likewise)."""

    def open_intents(self, run_id: str) -> list[Intent]:
        """Run ``run_id``'s intents not delivered yet (``pending`` or
        ``sending``), oldest first; ``[]`` for a run of another scope."""

    def failed_intents(self, run_id: str) -> list[Intent]:
        """Run ``run_id``'s intents that ended ``failed`` (failed for good,
        withdrawn by a cancel, or withdrawn mid-send with their outcome
        unknown: ``last_error`` says which), oldest first; ``[]`` for a run
        of another scope."""

    def sending_intents(self) -> dict[str, int]:
        """Run id -> how many of its intents are ``sending``: their send
        began and its end was not recorded, so each may have been made (its
        outcome is known once it is delivered or looked up)."""

    def sending_claims(self, run_id: str) -> dict[str, tuple[str | None, float | None]]:
        """Run ``run_id``'s intents ``sending``: intent id -> ``(claimed_by,
        claim_expires_at)``, the dispatcher (``host:pid:nonce``) whose claim
        it is and when that claim runs out (UTC epoch s), each ``None`` once
        the claim was let go; ``{}`` for a run of another scope. Whether that
        dispatcher still makes it is :func:`~desktop_app.flow.owners.holding`'s
        judgement (``show`` says a move being made, not one that may have been)."""

    def undelivered_intents(self) -> dict[str, int]:
        """Run id -> how many of its intents are ``pending`` or ``sending``
        (runs with none are left out)."""


@runtime_checkable
class ChangeFeed(Protocol):  # pragma: no mutate block
    """Change notification for the UI."""

    def data_version(self) -> int:
        """A number that changes whenever anyone (any connection, any process)
        committed to the store since the last call; cheap to poll."""


@runtime_checkable
class ChangePush(Protocol):  # pragma: no mutate block
    """Pushed change notices (the ``push`` capability). Not part of
    :class:`CheckpointStore`: only a store that declares ``push`` has it."""

    def watch_changes(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_change()`` (from a thread of the store's, so it must only
        hand the work on) soon after any process committed a change a list of
        runs shows: a run created, its status changed, a run released, a
        signal, event or timed wait stored. Notices of many commits may come
        as one call, and one may be lost when a writer dies right after its
        commit: keep polling :meth:`ChangeFeed.data_version` as the fallback,
        and for per-step progress, which is not pushed.

        Returns a function that stops watching (idempotent).

        Raises:
            StoreError: the store cannot open a listening session.
        """


@runtime_checkable
class DomainStore(Protocol):  # pragma: no mutate block
    """The flows' own tables (``schema/domain``), reached through :class:`SqlTx`.
    Needs the ``sql`` capability; without it these raise ``StoreError``."""

    def query(self, op: Callable[[SqlTx], T]) -> T:
        """Run a read-only op ``op(tx)`` and return its result; a write in it
        fails with ``StoreError`` (use :meth:`write`)."""

    def write(self, op: Callable[[SqlTx], T]) -> T:
        """Run ``op(tx)`` in its own write transaction (outside any
        checkpoint), commit, and return its result; raising rolls it back."""


@runtime_checkable
class CheckpointStore(
    RunLog, Leases, Mailbox, Outbox, ChangeFeed, DomainStore, Protocol
):  # pragma: no mutate block
    """Everything the engine needs, implemented by one backend object (so a
    step's checkpoint, signals, intents and domain writes share a transaction).

    ``capabilities`` lists the optional parts it has (:data:`CAPABILITIES`)."""

    scope: str
    capabilities: frozenset[str]

    def close(self) -> None:
        """Release the store's resources."""


@runtime_checkable
class WorkerClaims(Protocol):  # pragma: no mutate block
    """Claims for one of several workers (the ``worker_claims`` capability;
    not part of :class:`CheckpointStore`: read the capability, then cast)."""

    def claim_for_worker(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        *,
        flows: Mapping[str, str] | Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runnable runs (``pending``/``running``) to
        ``owner`` for ``ttl_s`` seconds, oldest first: runs with no lease, an
        expired one, or one held by a worker whose session ended. ``flows``
        (name -> version, or ``(name, version)`` pairs: a flow may run at
        several versions, e.g. ``digest`` and ``digest --model``) limits them
        to what the caller runs. Concurrent callers never get the same run.
        Raises StoreError."""
        ...


class ServerTime(Protocol):  # pragma: no mutate block
    """The database's clock (the ``database_clock`` capability; not part of
    :class:`CheckpointStore`: read the capability, then cast)."""

    def server_time(self) -> tuple[float, float, float]:
        """``(database clock, local time sent, local time answered)``: UTC
        epoch seconds, the local ones read right around the query. Raises
        StoreError."""
        ...


class ServerOutages(Protocol):  # pragma: no mutate block
    """A store on a database server that rides out its outages (the
    ``server_outages`` capability; read the capability, then cast)."""

    def on_unreachable(
        self,
        handler: Callable[[DatabaseUnreachableError], None] | None,
        *,
        give_up_once: bool = False,
    ) -> None:
        """Call ``handler`` once per outage, with the error of the first try
        that found the server unreachable, while that transaction goes on
        trying (from that try's thread); ``None`` removes it.
        ``give_up_once``: once a transaction gave up on the unreachable
        server (its tries spent), :meth:`stop_waiting` (a command that ends
        at that error: what it records as it stops does not wait through
        the outage again); a worker keeps waiting (``False``)."""
        ...

    def stop_waiting(self, wait_s: float = 2.0) -> None:
        """From now on, fail a transaction that waits more than ``wait_s``
        seconds (or one try's usual wait, if shorter) for a connection, and
        try it once (a process that is stopping)."""
        ...


class AgentLog(Protocol):  # pragma: no mutate block
    """Durable agent runs: the run row (with a lease, like flow runs),
    append-only messages (JSON objects) and tool results keyed by tool name +
    canonical input. Every method is one short transaction."""

    scope: str

    def create(
        self,
        run: AgentRun,
        messages: Sequence[dict[str, Any]],
        tool: tuple[str, str, str, str | None] | None = None,
    ) -> None:
        """Insert a run and its first messages and, in the same transaction,
        the tool-journal row ``tool`` ``(key, tool, status, result)`` (as
        :meth:`update` writes one). Raises RevisionConflictError when the run
        id exists."""

    def update(
        self,
        run_id: str,
        now: float,
        *,
        messages: Sequence[dict[str, Any]] = (),
        tool: tuple[str, str, str, str | None] | None = None,
        owner: str | None = None,
        expect_status: AgentStatus | None = None,
        **fields: Any,
    ) -> None:
        """In one transaction: append ``messages``, upsert a tool result
        ``(key, tool, status, result)`` (attempts + 1 when it starts), and set
        run ``fields`` (status, response, error, turns, pending_call, retry_at...).
        With ``owner``, nothing is written unless ``owner`` holds the lease
        and the run is not ``canceled`` (a cancel from another process
        fences the executing one, as a lost lease does).

        ``expect_status``: a compare-and-set on the run's status: nothing is
        written unless the run still has this status when the write commits
        (checked in its transaction). A cancel or pause passes the status it
        read, so the executing process finishing the run (``done``) between
        that read and this write is never overwritten.

        Raises:
            CheckpointNotFoundError: no such run.
            LeaseLostError: ``owner`` no longer holds the lease (nothing written).
            AgentRunCanceledError: with ``owner``, the run is canceled
                (nothing written).
            AgentRunStatusChangedError: with ``expect_status``, the run has
                another status (nothing written; its ``actual`` says which).
        """

    def claim(
        self,
        run_id: str,
        owner: str,
        expires_at: float,
        now: float,
        *,
        takes_over: str | None = None,
    ) -> AgentRun:
        """Take or renew the lease for ``owner`` until ``expires_at`` (UTC epoch
        s) when it is free or ours, or take it from ``takes_over`` as a
        compare-and-set: only while that owner still holds it with an expiry
        at or before ``now`` (``math.inf``: the owner is known dead). The rule
        of :meth:`Lease.may_take`; a clock alone never takes a lease.

        Raises:
            AgentRunLeasedError: another live process holds the lease.
            CheckpointNotFoundError: no such run.
        """

    def release(self, run_id: str, owner: str) -> None:
        """Give up ``owner``'s lease on the run (no-op when it holds none)."""

    def mark_reused(self, run_id: str, key: str) -> None:
        """Count one reuse of a stored tool result (a resumed run did not rerun it)."""

    def get(self, run_id: str) -> AgentRun:
        """The run's row. Raises CheckpointNotFoundError."""

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's messages in order. Raises CheckpointCorruptError."""

    def tool_result(self, run_id: str, key: str) -> ToolResult | None:
        """The stored result of one tool call, or ``None``."""

    def tool_results(self, run_id: str) -> list[ToolResult]:
        """Every tool result of the run, oldest update first."""

    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> list[AgentRun]:
        """Agent runs of this scope (optionally of these statuses / this
        agent), oldest first."""

    def list_page(self, *, offset: int, limit: int) -> builtins.list[AgentRun]:
        """Rows ``offset`` to ``offset + limit`` of this scope's agent runs,
        newest first (``created_at``, then run id, descending): one bounded
        read, so a list of thousands is read in pages."""
