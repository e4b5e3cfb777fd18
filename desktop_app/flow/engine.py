"""The engine's public API: start, run, resume, cancel, replay, fork, read.

How a run is executed and checkpointed is in :mod:`desktop_app.flow.driver`.

Run statuses: ``pending`` (created, not started), ``running``, ``waiting``,
``completed``, ``failed``, ``canceled``, ``timed_out``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast

from pydantic import BaseModel

from desktop_app.errors import (
    ENDED_RUN_STATUSES,
    CheckpointCorruptError,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    ConfigError,
    DatabaseLockedError,
    DuplicateFlowKeyError,
    EventPayloadError,
    FlowDefinitionError,
    FlowdeskError,
    FlowVersionMismatchError,
    RevisionConflictError,
    RunLeasedError,
    RunStateError,
    SignalPayloadError,
    StoreError,
    UnknownFlowError,
    WaitPayloadError,
    moved_to,
)
from desktop_app.flow import recovery
from desktop_app.flow.answers import give_answer, refuse_while_asking
from desktop_app.flow.children import cancel_children
from desktop_app.flow.clock import Clock, default_clock, trusted_now
from desktop_app.flow.context import STORED, ExecutionContext, StepContext
from desktop_app.flow.definition import CompiledFlow, WaitStep
from desktop_app.flow.driver import RunDriver
from desktop_app.flow.events import EventBus, RunFinished
from desktop_app.flow.outbox import (
    CANCELED,
    CANCELED_AFTER_END,
    WITHDRAWN_AFTER_END,
    claimant_is_alive,
    claimant_is_gone,
    delete_when_sent,
    settle_cancel,
    withdraw_for_cancel,
)
from desktop_app.flow.owners import (
    new_owner,
    owner_is_alive,
    owner_is_dead,
)
from desktop_app.flow.pool import pooled
from desktop_app.flow.replay import Seed, parse_id, replay_seed, upgrade_seed
from desktop_app.flow.replay import incompatible_runs as runs_of_changed_flows
from desktop_app.flow.results import IncompatibleRun as IncompatibleRun
from desktop_app.flow.results import ResumePendingResult as ResumePendingResult
from desktop_app.flow.results import RunResult as RunResult
from desktop_app.flow.run import RunState
from desktop_app.flow.state import (
    check_storable,
    dump_state,
    load_state,
    refuse_unknown_fields,
)
from desktop_app.flow.step_call import Canceled
from desktop_app.flow.waiting import expected_type, fitted_state
from desktop_app.flow.waiting import wake as wake_waiting
from desktop_app.store.group_commit import AppendRequest, BatchAppender, GroupCommitter
from desktop_app.store.leases_log import log_takeovers
from desktop_app.store.protocol import (
    PENDING_STATUSES,
    RUNNABLE_STATUSES,
    Checkpoint,
    CheckpointInfo,
    CheckpointStore,
    Intent,
    Lease,
    RunRecord,
    RunStatus,
    SignalId,
    StepRecord,
    Wait,
    Withdrawal,
)
from desktop_app.store.runids import uuid4_hex

log = logging.getLogger(__name__)


class Made(NamedTuple):
    """What ``Engine._create`` returns, for a driver to start the run from
    without reading it back, validating its context again or copying its
    state."""

    run: RunRecord
    checkpoint: Checkpoint  # its revision 0, as stored
    context: ExecutionContext  # ``run.context`` as the model it was dumped from
    stored_state: dict[str, Any]  # a dump of the state of its own, shared with nothing


class Cancellation(NamedTuple):
    """What :meth:`Engine.cancel_withdrawing` did.

    Attributes:
        run: the run's record, ``canceled`` (of
            :meth:`Engine.withdraw_after_end`: the status it ended with).
        withdrawn: its outbox intents taken back before delivery (never made).
        in_flight: its intents a live dispatcher was sending at that instant,
            left to it.
        made: intents whose process died mid-send, which their destination
            says were made: recorded ``delivered`` (see
            :func:`~desktop_app.flow.outbox.settle_withdrawn`).
        unknown: intents whose process died mid-send and whose outcome no
            destination here could check: said unknown, never sent again.
    """

    run: RunRecord
    withdrawn: list[Intent]
    in_flight: list[Intent]
    made: list[Intent]
    unknown: list[Intent]


#: what refuses a run in this process whatever a later pass does (its flow is
#: not registered here or changed since the run started, the mode it was
#: started in cannot be built here, its checkpoint cannot be decoded)
REFUSALS = (
    UnknownFlowError,
    FlowVersionMismatchError,
    CheckpointDecodeError,
    ConfigError,
    FlowDefinitionError,
)


class Refusals:
    """The runs a serving loop (``Engine.serve``, a ``Worker``) cannot go on
    with (:data:`REFUSALS`), each told once: logged as a warning by
    ``logger`` (``"run <id> cannot go on in <where>: <why>"``) and given to
    ``on_refused(run_id, error)``. Thread-safe. ``ids`` is the set of runs
    refused so far, which the loop does not try again."""

    def __init__(
        self,
        where: str,
        logger: logging.Logger,
        on_refused: Callable[[str, FlowdeskError], None] | None = None,
    ) -> None:
        self.where = where
        self.logger = logger
        self.on_refused = on_refused
        self.ids: set[str] = set()
        self._lock = threading.Lock()

    def refuse(self, run_id: str, exc: FlowdeskError) -> None:
        """Record ``run_id`` refused with ``exc``, and tell it (the first time only)."""
        with self._lock:
            if run_id in self.ids:
                return
            self.ids.add(run_id)
        self.logger.warning("run %s cannot go on in %s: %s", run_id, self.where, exc)
        if self.on_refused is not None:
            self.on_refused(run_id, exc)


class Engine:
    """Runs flows durably over a :class:`CheckpointStore`.

    Args:
        store: where runs and checkpoints live (SQLite or in-memory).
        flows: compiled flows to register (by name).
        events: the bus step/run events are published on.
        clock: the source of time (UTC epoch seconds); inject a ManualClock in tests.
        owner: this process's lease owner id (default ``host:pid:random``).
        lease_ttl_s: seconds a lease lasts without renewal; the engine renews
            it with every checkpoint and from a heartbeat thread every
            ``lease_ttl_s / 3`` while a run executes.
        group_commit: commit checkpoints of runs in flight at the same
            moment in one transaction (see :mod:`desktop_app.store.group_commit`);
            possible when the store declares ``append_batch``. ``None`` (the
            default): on when the store also declares ``group_commit`` (it
            pays there: SQLite, in memory), off on PostgreSQL, where it was
            measured slower than each run committing on its own connection;
            ``True``/``False``: on (if possible) / off. A step counts as done
            (its ``StepFinished`` event, its return, its outbox dispatch)
            only once its batch committed.
        executes: False for a process that only observes, submits, answers
            and signals (an app on a database that workers serve): ``run``
            only creates the run, ``resume``/``resume_with``/``wake`` save
            their change and hand the run back (lease released) instead of
            executing it, ``signal``/``publish`` only store, and
            ``recover``/``tick`` do nothing.
        check_state: after each step, encode every state field the step did
            not replace and compare it with its stored encoding; a
            difference (a list item, a dict entry or a nested model's field
            changed in place, which is never stored) fails the step with
            ``StateMutatedError``. Off (the default) only a list, dict or set
            whose size changed in place is caught: the check costs the whole
            state at every step, so it is meant for a flow's tests.

    One engine may drive different runs from different threads. Two
    processes never execute the same run at once: a run is claimed with a
    lease first (``RunLeasedError`` when another live process holds it), and
    a run whose owner died is taken over once its lease expires.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        flows: Iterable[CompiledFlow[Any]] = (),
        events: EventBus | None = None,
        clock: Clock | None = None,
        owner: str | None = None,
        lease_ttl_s: float = 30.0,
        group_commit: bool | None = None,
        executes: bool = True,
        check_state: bool = False,
    ) -> None:
        self.store = store
        self.executes = executes
        #: after each step, compare the fields it did not replace with their
        #: stored encoding (catches a change made in place; costs the state)
        self.check_state = check_state
        #: batches appends of runs in flight together (None: one commit each)
        caps = store.capabilities
        batching = group_commit if group_commit is not None else "group_commit" in caps
        self.committer: GroupCommitter | None = (
            GroupCommitter(cast("BatchAppender", store))
            if batching and "append_batch" in caps
            else None
        )
        self.owner = owner or new_owner()
        self.lease_ttl_s = lease_ttl_s
        self.shutdown_event = threading.Event()
        #: ends the lease heartbeat when set. The engine never sets it (not
        #: even at :meth:`stop`: a run whose step is in flight keeps its lease
        #: renewed until the step ends); a test does, to renew by hand
        self.heartbeat_stop = threading.Event()
        self.events = events if events is not None else EventBus()
        self.clock: Clock = clock if clock is not None else default_clock(store)
        #: an injected (test) clock also decides lease expiry; else the store's clock does
        self._lease_clock = clock
        self._flows: dict[str, CompiledFlow[Any]] = {}
        #: (name, version) -> how to build that mode of a registered flow
        self._variants: dict[tuple[str, str], Callable[[], CompiledFlow[Any]]] = {}
        #: the modes built so far (``flow_of``)
        self._built: dict[tuple[str, str], CompiledFlow[Any]] = {}
        self._cancel: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        #: ids of the runs this engine is executing right now
        self.active: set[str] = set()
        #: ids of the runs a thread of this engine is about to drive or drives (``_go``)
        self._in_hand: set[str] = set()
        #: runs whose lease another process took over while we executed them
        self.lost: set[str] = set()
        self._heartbeat: threading.Thread | None = None
        #: monotonic time of the last renewal sent that proved each active run's lease
        self._proven: dict[str, float] = {}
        for f in flows:
            self.register(f)

    # -- registry --------------------------------------------------------

    def register(self, flow: CompiledFlow[Any]) -> None:
        """Register (or replace) a flow under its name."""
        self._flows[flow.name] = flow

    def register_variant(
        self, name: str, version: str, build: Callable[[], CompiledFlow[Any]]
    ) -> None:
        """Register another mode of flow ``name`` (one of its
        :attr:`CompiledFlow.variants`, such as ``digest --model``): runs
        recorded under ``version`` resume, wake and take answers with the
        flow ``build()`` returns, while new runs of ``name`` still start
        with the flow :meth:`register` registered.

        ``build`` (no arguments, returns a ``CompiledFlow`` named ``name``
        at ``version``) is called the first time such a run needs it, and
        its flow is kept; it may raise a ``FlowdeskError`` saying what is
        missing (``ConfigError``: no model configured), which refuses that
        run with nothing run and is raised again on the next try.
        """
        self._variants[(name, version)] = build

    def runs_version(self, name: str, version: str) -> bool:
        """Whether runs of flow ``name`` recorded under ``version`` (a
        fingerprinted flow version, str) can go on here: the registered
        flow has that version, or :meth:`register_variant` registered a
        mode of it for that version."""
        flow = self._flows.get(name)
        return (flow is not None and flow.version == version) or (name, version) in self._variants

    def version_refusal(self, run: RunRecord) -> FlowVersionMismatchError | None:
        """The error that refuses ``run`` here because its flow is registered
        at another version than the run started with (neither the flow's
        nor a mode's: :meth:`runs_version`), or ``None``: its version runs
        here, or its flow is not registered at all (``UnknownFlowError``'s
        case). Its status is the caller's to judge."""
        flow = self._flows.get(run.flow_name)
        if flow is None or self.runs_version(run.flow_name, run.flow_version):
            return None
        return FlowVersionMismatchError(run.run_id, run.flow_version, flow.version)

    def versions(self) -> list[tuple[str, str]]:
        """Every ``(flow name, version)`` whose runs can go on here
        (:meth:`runs_version`): each registered flow's, then each mode's
        :meth:`register_variant` registered. What a worker claims."""
        return [(f.name, f.version) for f in self._flows.values()] + list(self._variants)

    def flow_of(self, name: str, version: str) -> CompiledFlow[Any]:
        """The flow that drives a run of ``name`` recorded under ``version``:
        the registered flow, or the mode of it :meth:`register_variant`
        registered for ``version`` (built now if not yet). Another version
        gets the registered flow (whose version check then refuses the run).

        Raises:
            UnknownFlowError: no flow named ``name`` is registered.
            FlowDefinitionError: the variant built is not ``name`` at ``version``.
            FlowdeskError: whatever the variant's ``build`` raised
                (``ConfigError``: what to configure).
        """
        flow = self.flow(name)
        build = self._variants.get((name, version))
        if flow.version == version or build is None:
            return flow
        with self._lock:
            built = self._built.get((name, version))
        if built is None:
            built = build()
            if (built.name, built.version) != (name, version):
                raise FlowDefinitionError(
                    name,
                    [
                        f"the mode registered for version {version} built flow "
                        f"{built.name!r} at version {built.version}"
                    ],
                )
            with self._lock:
                built = self._built.setdefault((name, version), built)
        return built

    @property
    def flows(self) -> Mapping[str, CompiledFlow[Any]]:
        return dict(self._flows)

    def flow(self, name: str) -> CompiledFlow[Any]:
        """Raises UnknownFlowError."""
        try:
            return self._flows[name]
        except KeyError:
            known = ", ".join(sorted(self._flows)) or "none"
            raise UnknownFlowError(
                f"no flow named {name!r} is registered (known: {known})"
            ) from None

    def _resolve(self, flow: CompiledFlow[Any] | str) -> CompiledFlow[Any]:
        if isinstance(flow, str):
            return self.flow(flow)
        if flow.name not in self._flows:
            self.register(flow)
        return flow

    def lease(
        self, takes_over: str | None = None, dead: bool = False, now: float | None = None
    ) -> Lease:
        """A lease for this process from now for ``lease_ttl_s``. It takes a
        free run or renews ours; with ``takes_over`` it also takes the run
        from that owner, as a compare-and-set: only while the run is still
        leased to it, and (unless ``dead``: the owner is a process of this
        host that exited) only once that lease has expired. See
        :class:`~desktop_app.store.records.Lease`. ``now``: a reading of
        :attr:`clock` (UTC epoch seconds) the caller just took, else the
        clock is read."""
        if now is None:
            now = self.clock.now()
        ttl = self.lease_ttl_s
        # positional, in the fields' order: made at every save
        return Lease(self.owner, now + ttl, math.inf if dead else now, ttl, takes_over)

    def commit(self, request: AppendRequest) -> None:
        """Append one checkpoint durably: through the group committer when
        there is one (returns once its batch committed), else ``store.append``.

        Raises:
            the errors of :meth:`CheckpointStore.append`.
        """
        if self.committer is not None:
            self.committer.append(request)
            return
        r = request
        self.store.append(
            r.checkpoint,
            r.writes,
            r.lease,
            intents=r.intents,
            consume=r.consume,
            changed_steps=r.changed_steps,
            changed_fields=r.changed_fields,
        )

    def track(self, run_id: str, executing: bool) -> None:
        """Note that this engine starts or stops executing ``run_id``; while any
        run executes, one heartbeat thread renews their leases every
        ``lease_ttl_s / 3`` seconds."""
        with self._lock:
            if executing:
                self.active.add(run_id)
                self.lost.discard(run_id)
                self._proven[run_id] = time.monotonic()
                if self._heartbeat is None or not self._heartbeat.is_alive():
                    self._heartbeat = threading.Thread(
                        target=self._renew_leases, name="flowdesk-leases", daemon=True
                    )
                    self._heartbeat.start()
            else:
                self.active.discard(run_id)
                self.lost.discard(run_id)
                self._proven.pop(run_id, None)

    def executing(self) -> list[str]:
        """Ids of the runs this engine executes right now (each holds its
        lease until its step has ended), in no particular order. Taken
        without the engine's lock (one C call over the set, which no other
        thread changes meanwhile): a signal handler asks it in the main
        thread, which may hold that lock at the instruction the signal
        landed on."""
        return list(self.active)

    def _renew_leases(self) -> None:
        """The heartbeat thread: :meth:`renew_leases` every ``lease_ttl_s / 3``
        seconds while any run executes here.

        A store's own errors (a busy or closed store, an unreachable server:
        ``FlowdeskError``) put the runs in doubt once ``lease_ttl_s`` passed
        (:meth:`renew_leases`). Any other exception is a defect the heartbeat
        cannot ride out: it logs it at ERROR with its traceback, puts every
        run executing here into :attr:`lost` at once (their leases would
        expire while they went on, and another owner may take them: they
        stop before committing more, resumable) and ends; the next run this
        engine executes starts a new heartbeat."""
        interval = max(0.05, self.lease_ttl_s / 3)
        # not ended by ``shutdown_event``: a run whose step is in flight when
        # the engine stops keeps its lease until that step ends (``stop``)
        while not self.heartbeat_stop.wait(interval):
            with self._lock:
                if not self.active:
                    self._heartbeat = None
                    return
            try:
                self.renew_leases()
            except Exception:
                with self._lock:
                    self._heartbeat = None
                    stranded = sorted(self.active)
                    self.lost.update(stranded)
                log.error(
                    "the lease heartbeat failed; the runs executing here stop before "
                    "committing more (resume them): %s",
                    ", ".join(stranded),
                    exc_info=True,
                )
                return

    def renew_leases(self) -> None:
        """One heartbeat: renew the leases of the runs this engine executes,
        and only those (a run whose checkpoint went waiting or finished, or
        whose lease was released, is not leased again: ``Leases.renew``). A
        run another owner took, or whose lease could not be renewed for
        ``lease_ttl_s`` (measured on the monotonic clock from the last
        renewal sent: the file locked, the server unreachable), goes into
        :attr:`lost`: its driver commits nothing more and raises
        ``LeaseLostError``, and its step sees ``ctx.cancelled``."""
        active = self.executing()
        if not active:
            return
        sent = time.monotonic()
        try:
            renewed = self.store.renew(active, self.lease())
        except FlowdeskError:
            with self._lock:  # a busy or failing store: in doubt once the TTL passed
                doubt = [r for r in active if sent - self._proven.get(r, sent) > self.lease_ttl_s]
                self.lost.update(doubt)
            if doubt:
                log.warning(
                    "leases of %d run(s) could not be renewed for %.1f s; they stop "
                    "before committing more: %s",
                    len(doubt),
                    self.lease_ttl_s,
                    ", ".join(doubt),
                )
            return
        taken = []
        for run_id in active:
            if run_id in renewed:
                self._proven[run_id] = sent
                continue
            with contextlib.suppress(FlowdeskError):
                holder = self.store.get_run(run_id).lease_owner
                if holder not in (None, self.owner):
                    taken.append(run_id)
        if taken:
            with self._lock:
                self.lost.update(r for r in taken if r in self.active)
            log.warning("runs taken over by another process: %s", ", ".join(taken))

    def stop(self) -> None:
        """Stop executing: every run this engine drives stops before its next
        step (or backoff) and stays resumable. For SIGTERM handlers and app
        shutdown; returns at once.

        A step in flight is let finish: no lease is released here. Each run's
        driver gives its lease back once its step has ended and its
        checkpoint is saved, and the heartbeat goes on renewing the leases
        of runs still executing, so no other process takes over a run while
        this one may still execute its step. A run whose step is still
        executing when the process exits keeps its lease: a peer takes it
        over once that lease expires, or at once when its owner is known
        gone (a process of this host that exited, a worker whose liveness
        lock dropped), and runs that step again, as after ``kill -9``."""
        self.shutdown_event.set()

    def forget_cancel(self, run_id: str) -> None:
        """Drop the run's in-memory cancel flag once nothing drives it (a
        long-lived engine must not keep one per run ever driven)."""
        with self._lock:
            self._cancel.pop(run_id, None)

    def cancel_event(self, run_id: str) -> threading.Event:
        with self._lock:
            event = self._cancel.get(run_id)
            if event is None:  # made only when missing (an Event is a lock and a condition)
                event = self._cancel[run_id] = threading.Event()
            return event

    # -- starting --------------------------------------------------------

    def _create(
        self,
        f: CompiledFlow[Any],
        state: BaseModel,
        *,
        run_id: str | None,
        context: ExecutionContext | None,
        flow_key: str | None,
        parent_run_id: str | None,
        running: bool,
        frontier: tuple[str, ...] | None = None,
        steps: Mapping[str, StepRecord] | None = None,
        meta: Mapping[str, Any] | None = None,
        waits: Sequence[Wait] = (),
    ) -> Made:
        """Create a run; returns it, its revision 0 as stored and its
        execution context (for a driver to start from without reading them
        back or validating the context again)."""
        rid = run_id or uuid4_hex()
        if parent_run_id is not None:
            parent = self.store.get_run(parent_run_id)  # CheckpointNotFoundError: no such run
            if context is None:  # a child run inherits every id of its parent but the run id
                context = ExecutionContext.model_validate(dict(parent.context), context=STORED)
        if context is not None:
            ctx = context.for_run(rid)
        else:  # what ExecutionContext().for_run(rid) gives, made once
            ctx = ExecutionContext(run_id=rid, trace_id=uuid4_hex())
        now = self.clock.now()
        front = frontier if frontier is not None else (f.entry,)
        records = dict(steps or {})
        status: RunStatus = "pending"
        if not front:
            status = "completed"
        elif running:
            status = "running"
            records[front[0]] = StepRecord(front[0], "in_progress", attempts=1, started_at=now)
        cp = Checkpoint(
            rid,
            0,
            status,
            dump_state(state),
            records,
            front,
            now,
            meta=dict(meta or {}),
            waits=tuple(waits),
        )
        run = RunRecord(
            run_id=rid,
            flow_name=f.name,
            flow_version=f.version,
            status=status,
            revision=0,
            created_at=now,
            updated_at=now,
            scope=self.store.scope,
            flow_key=flow_key,
            parent_run_id=parent_run_id,
            context=ctx.model_dump(),
            lease_owner=self.owner if running else None,
            lease_expires_at=now + self.lease_ttl_s if running else None,
            deadline_at=now + f.deadline_s if f.deadline_s else None,
        )
        if self.committer is not None and "group_commit" in self.store.capabilities:
            # with the checkpoints of the runs in flight: one commit, one fsync
            self.committer.append(AppendRequest(cp, run=run))
        else:
            self.store.create_run(run, cp)
        log.info("run %s of flow %s created (%s, owner %s)", rid, f.name, status, self.owner)
        # the driver's copy of the state as stored: a second dump (pydantic's
        # serializer in C) costs less than a deep copy of the first
        return Made(run, cp, ctx, dump_state(state))

    def start(
        self,
        flow: CompiledFlow[Any] | str,
        state: BaseModel | Mapping[str, Any],
        *,
        run_id: str | None = None,
        context: ExecutionContext | None = None,
        flow_key: str | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a run (status ``pending``) without executing it; returns its id.

        Raises:
            pydantic.ValidationError: ``state`` does not fit the flow's model.
            RevisionConflictError: ``run_id`` is taken.
            CheckpointNotFoundError: ``parent_run_id`` names no run in this
                scope (also when a ``context`` is given); nothing was created.
            StoreError: the run could not be saved.
        """
        f = self._resolve(flow)
        rid, _made = self._submit(f, state, run_id, context, flow_key, parent_run_id, False)
        return rid

    def _submit(
        self,
        f: CompiledFlow[Any],
        state: BaseModel | Mapping[str, Any],
        run_id: str | None,
        context: ExecutionContext | None,
        flow_key: str | None,
        parent_run_id: str | None,
        running: bool,
    ) -> tuple[str, Made | None]:
        """Create the run, or find the live one with ``flow_key`` (single
        flight, S31); returns its id, and the run and checkpoint made (``None``:
        the live run was found).

        Raises:
            InputError: ``state`` (a mapping) names a field the state model
                does not have (pydantic would drop it without a word).
            pydantic.ValidationError: a value does not fit the model.
        """
        if not isinstance(state, f.state_type):
            refuse_unknown_fields(f.state_type, state)
        model = state if isinstance(state, f.state_type) else f.state_type.model_validate(state)
        try:
            made = self._create(
                f,
                model,
                run_id=run_id,
                context=context,
                flow_key=flow_key,
                parent_run_id=parent_run_id,
                running=running,
            )
        except DuplicateFlowKeyError:
            return self._live_run(f, flow_key).run_id, None
        return made[0].run_id, made

    def run(
        self,
        flow: CompiledFlow[Any] | str,
        state: BaseModel | Mapping[str, Any],
        *,
        run_id: str | None = None,
        context: ExecutionContext | None = None,
        flow_key: str | None = None,
        parent_run_id: str | None = None,
    ) -> RunResult:
        """Start a run and execute it until it completes, fails, waits or is canceled.

        A step that fails after its last attempt gives a result with status
        ``failed`` (not an exception); an await step gives ``waiting``.

        Raises:
            UnknownFlowError: ``flow`` names no registered flow.
            InputError: ``state`` names a field the state model does not
                have (a misspelt input would otherwise be dropped).
            pydantic.ValidationError: ``state`` does not fit the state model.
            CheckpointNotFoundError: ``parent_run_id`` names no run in this
                scope; nothing was created.
            StoreError: a checkpoint could not be saved; no later step ran.
        """
        f = self._resolve(flow)
        if not self.executes:  # created for a worker to execute
            rid, _ = self._submit(f, state, run_id, context, flow_key, parent_run_id, False)
            live, cp = self.store.head(rid)
            current = load_state(f.state_type, cp.state, rid, cp.revision)
            return RunResult(rid, live.status, current, cp.revision, live.error)
        rid, made = self._submit(f, state, run_id, context, flow_key, parent_run_id, True)
        if made is None:  # the live run with this key is the answer
            live, cp = self.store.head(rid)
            current = load_state(f.state_type, cp.state, rid, cp.revision)
            return RunResult(rid, live.status, current, cp.revision, live.error)
        return self._drive(f, *made)

    def _live_run(self, f: CompiledFlow[Any], flow_key: str | None) -> RunRecord:
        for r in self.store.list_runs(flow_name=f.name, flow_key=flow_key, newest_first=True):
            if r.status in ("pending", "running", "waiting", "failed"):
                return r
        raise RunStateError(f"no live run of {f.name!r} with flow key {flow_key!r}; try again")

    def _drive(
        self,
        f: CompiledFlow[Any],
        run: RunRecord,
        cp: Checkpoint,
        context: ExecutionContext,
        stored_state: dict[str, Any],
    ) -> RunResult:
        """Execute a run this call just created, from ``run``, ``cp`` and
        ``context`` as :meth:`_create` stored and made them (not read back: a
        SELECT and a decode for nothing; the store keeps its own copy; the
        context, immutable, not validated again; ``stored_state``, a dump of
        the state no one else holds, not copied again)."""
        return self._go(RunDriver(self, f, run, cp, context, stored_state))

    def _go(self, driver: RunDriver) -> RunResult:
        """Execute the driver's run, or (``executes=False``) hand it back."""
        if self.executes:
            result = driver.drive()
            log.info("run %s stopped here: %s", result.run_id, result.status)
            return result
        with contextlib.suppress(FlowdeskError, Canceled):  # else resumed as interrupted
            driver.hand_back()  # its head step's attempt has not begun
        with contextlib.suppress(FlowdeskError):  # else its lease expires on its own
            driver.release()
        return driver.result()

    def holds(self, run_id: str) -> bool:
        """Whether a thread of this engine executes ``run_id`` or has it in
        hand to (``resume``/``wake``, from reading the run to driving it): a
        sweep does not give such a run's claim back."""
        with self._lock:
            return run_id in self.active or run_id in self._in_hand

    @contextlib.contextmanager
    def _in_hand_here(self, run_id: str) -> Iterator[None]:
        """Take ``run_id`` in hand for this thread, from reading the run to
        the end of driving it. A run's lease is this process's, so another
        thread's claim (``serve``'s recovery sweep beside its deadline pass,
        the app's resume, ``recover`` while ``run`` executes it) succeeds,
        and both threads would otherwise run the current step; a thread that
        saves before it drives (an answer) loses its compare-and-append
        instead.

        Raises:
            RunLeasedError: another thread of this engine executes the run or
                has it in hand; nothing was run here.
        """
        with self._lock:
            busy = run_id in self._in_hand or run_id in self.active
            if not busy:
                self._in_hand.add(run_id)
        if busy:
            row = self.store.get_run(run_id)
            raise RunLeasedError(run_id, self.owner, row.lease_expires_at)
        try:
            yield
        finally:
            with self._lock:
                self._in_hand.discard(run_id)

    def _go_on(self, driver: RunDriver) -> RunResult:
        """Execute the driver's run if it may go on (it is running), else
        its result as it stands."""
        if driver.is_running():
            return self._go(driver)
        return driver.result()

    # -- resuming --------------------------------------------------------

    def _load_driver(self, run: RunState) -> RunDriver:
        """A driver for ``run`` (read with :meth:`RunState.read`), refused
        when the run may not continue here."""
        run.refuse_resume()
        f = self.flow_of(run.run.flow_name, run.run.flow_version)
        run.check_version(f.version)
        driver = RunDriver(self, f, run.run, run.checkpoint)
        # the driver's first checkpoint claims the lease atomically
        driver.takeover = takeover = run.takeover(self.owner, self._lease_now)
        run_id = run.run.run_id
        if takeover is not None:
            holder, dead = takeover
            log_takeovers(self.owner, [(run_id, holder, not dead)])
        log.info("run %s of flow %s resumed (status was %s)", run_id, f.name, run.run.status)
        return driver

    def _lease_now(self) -> float:
        """ "Now" for lease expiry, UTC epoch seconds: the injected clock, else
        the store's (the database's on PostgreSQL)."""
        return self._lease_clock.now() if self._lease_clock is not None else self.store.now()

    def resume(self, run_id: str) -> RunResult:
        """Continue a run from its latest checkpoint.

        Completed runs: nothing runs; the saved result comes back (S1).
        Failed, pending, paused or interrupted runs continue at their head
        step (an ``in_progress`` step runs again, S2). One thread of an
        engine drives a run at a time.

        Raises:
            CheckpointNotFoundError: no such run in this scope.
            RunLeasedError: a live process executes the run (also this one,
                in another thread); nothing was run.
            RunStateError: the run was canceled or timed out.
            InputPendingError: it waits for input (a ``RunStateError``; use
                :meth:`resume_with`).
            FlowVersionMismatchError: the run's flow changed since it started.
            CheckpointDecodeError: its checkpoint cannot be decoded.
            UnknownFlowError: its flow is not registered.
        """
        with self._in_hand_here(run_id):
            return self._resume(run_id)

    def _resume(self, run_id: str) -> RunResult:
        run = RunState.read(self.store, run_id)
        driver = self._load_driver(run)
        if run.done:
            return driver.result()
        self.cancel_event(run_id).clear()
        if run.sleeping:
            self._wake_waiting(driver)  # deliver, time out, or keep waiting
            refuse_while_asking(driver)
            return self._go_on(driver)
        driver.prepare_resume()
        return self._go(driver)

    def resume_with(
        self,
        run_id: str,
        value: Any,
        *,
        wait_id: str | None = None,
        on_saved: Callable[[], None] | None = None,
    ) -> RunResult:
        """Answer a question of a waiting run and continue the same run.

        For an await step, ``value`` becomes the step's output exactly as given
        (validated against its field's type, not merged into earlier state).
        For ``ctx.interrupt()``, the step runs again and the call returns
        ``value``. The answer is saved before anything runs, so a crash never
        asks again (S47).

        Args:
            wait_id: which question, when several are pending (S46); may be
                omitted when only one is.
            on_saved: called once the answer is saved, before the run goes on
                (the CLI's Ctrl-C hint changes from "answer again" to
                "resume" there).

        Raises:
            RunStateError: the run is not waiting for input, the wait timed
                out, or another process canceled the run a moment ago
                (nothing was answered).
            WaitError: several questions are pending and ``wait_id`` is missing,
                or ``wait_id`` is unknown.
            WaitAlreadyResolvedError: that question was answered already (also
                by another process a moment ago: its save won); the first
                answer stands.
            InputError: ``value`` does not fit; nothing changed.
            PayloadNotStorableError: no checkpoint could hold ``value`` (an
                ``InputError``); nothing changed.
        """
        check_storable(value, f"answer for run {run_id}")
        run = RunState.read(self.store, run_id)
        # answered already: said so before the run's lease is looked at (the
        # process that answered first may be running it on: "held by a live
        # process" told the loser to wait, not that the question was taken)
        run.refuse_answered(wait_id)
        driver = self._load_driver(run)
        give_answer(driver, self.store, run.input_wait(wait_id), value, trusted_now(self.clock))
        if on_saved is not None:
            on_saved()
        return self._go_on(driver)

    # -- waits: signals, events, deadlines ------------------------------

    def wake(self, run_id: str) -> RunResult:
        """Act on a waiting run: deliver an arrived signal or event, take the
        timeout outcome of an expired deadline (compared with the injected
        clock), or leave it waiting. Continues the run if it can.

        Raises:
            RunLeasedError: another process is executing the run (also this
                one, in another thread); nothing was delivered.
            RunStateError: the run was canceled or timed out, also by another
                process a moment ago (nothing was delivered; a signal stays
                in the mailbox).
        """
        with self._in_hand_here(run_id):
            run = RunState.read(self.store, run_id)
            driver = self._load_driver(run)
            if not run.sleeping:
                return driver.result()
            self._wake_waiting(driver)
            return self._go_on(driver)

    def _wake_waiting(self, driver: RunDriver) -> None:
        """Deliver, time out, or keep waiting (``waiting.wake``). A wake that
        ended the run (its own deadline, a wait's that has no timeout step,
        or a signal taken by its last wait) publishes :class:`RunFinished`
        and applies the flow's retention (``delete_on_success``,
        ``keep_last_n``) as a driven run's end does: no step loop runs after
        it to do so.

        Raises:
            RunStateError: another process canceled the run between its read
                and this save: nothing was delivered (the save that lost is
                the driver's internal stop signal, which no driver loop is
                here to take).
        """
        try:
            wake_waiting(driver)
        except Canceled:
            raise RunStateError(
                f"run {driver.run_id} was canceled a moment ago by another process; "
                "nothing was delivered"
            ) from None
        if driver.status in ("timed_out", "completed"):
            if self.events.listening:
                self.events.publish(RunFinished(driver.run_id, driver.status, driver.error))
            driver.apply_retention()

    def tick(
        self,
        *,
        skip: Collection[str] = (),
        on_refused: Callable[[str, FlowdeskError], None] | None = None,
    ) -> int:
        """Wake every waiting run with a due deadline or a deliverable signal or
        event; returns how many were acted on. The timer of :meth:`serve`.

        Args:
            skip: ids of runs not to try (refused before).
            on_refused: called with the run id and the error for a run this
                engine cannot go on with (:data:`REFUSALS`: its flow is not
                registered here or changed since the run started, its mode
                cannot be built, its checkpoint cannot be decoded). Other
                errors (leased by another process, canceled meanwhile) pass
                silently: they report themselves.
        """
        count = 0
        if not self.executes:
            return 0
        self.delete_delivered_runs()
        for run_id in self.store.wakeable_runs(self.clock.now()):
            if run_id in skip:
                continue
            try:
                self.wake(run_id)
                count += 1
            except REFUSALS as exc:
                if on_refused is not None:
                    on_refused(run_id, exc)
            except FlowdeskError:
                continue  # leased by another process, or broken: it reports itself
        return count

    def signal(
        self, name: str, key: str, payload: Any = None, *, dedupe_key: str | None = None
    ) -> SignalId:
        """Send a signal: stored first (a durable mailbox), then delivered to a
        run waiting on ``(name, key)`` now if this process may run it, else by
        whichever process wakes that run later (``tick``/``serve``/``recover``).
        A second send with the same ``dedupe_key``, name, key and payload
        is a no-op (duplicate delivery) that returns the first one's id.
        Returns the signal id (an ``int``), whose ``stored`` is False for
        such a duplicate (also one sent at the same instant as the first).

        Raises:
            DedupeKeyReusedError: ``dedupe_key`` was used for a signal of
                another name, key or payload; nothing was stored.
            PayloadNotStorableError: no checkpoint could hold ``payload`` (too
                deeply nested, not JSON data); nothing was stored.
            SignalPayloadError: a run waiting for ``(name, key)`` now, whose
                flow is registered here, cannot take ``payload`` (it does not
                fit the wait step's field); nothing was stored. A signal that
                reaches a wait that cannot take it anyway (sent before the
                run waited, or from a process without its flow) is refused
                by the wait, which goes on waiting.
            StoreError: the database failed while a waiting run took the
                signal (locked, unreachable, a pooler's lost statement): the
                signal was stored, and a note says so and names the run
                (:meth:`_deliver`).
        """
        check_storable(payload, f"signal {name!r} payload")
        unfit, why = self._unfit_runs("signal", name, key, payload)
        if unfit:
            run_id, step_id, expected = unfit[0]
            raise SignalPayloadError(name, key, run_id, step_id, expected, why)
        signal_id = self.store.send_signal(name, key, payload, self.clock.now(), dedupe_key)
        if not self.executes:  # a worker delivers it (the store's commit wakes workers)
            return signal_id
        self._deliver(f"signal {signal_id}", self.store.runs_waiting_for("signal", name, key))
        return signal_id

    def _deliver(self, what: str, run_ids: list[str]) -> None:
        """Wake each run of ``run_ids`` (waiting for ``what``, ``"signal 7"``,
        stored already) so it takes it now. A run that cannot take it for
        its own reason (another process holds it, it ended, its checkpoint
        is damaged) is skipped: it takes it when it is woken later.

        Raises:
            StoreError: the database failed (locked, unreachable, a pooler's
                lost statement): never hidden, with a note that ``what`` was
                stored and which run was taking it."""
        for run_id in run_ids:
            try:
                self.wake(run_id)
            except StoreError as exc:
                exc.add_note(
                    f"{what} was stored; taking it to run {run_id} failed, so the run takes it "
                    "when it is resumed"
                )
                raise
            except FlowdeskError:
                continue

    def _unfit_runs(
        self, kind: str, name: str, key: str | None, payload: Any
    ) -> tuple[list[tuple[str, str, str]], str]:
        """The runs waiting now for the signal ``(name, key)`` or the event
        ``name`` (``kind``) that cannot take ``payload``, as ``(run_id,
        step_id, expected type)``, and why the first cannot (``""`` when
        all can). A run whose flow (at its version) is not registered here,
        or that cannot be read, is not judged: its wait judges the payload
        when it meets it (:func:`~desktop_app.flow.waiting.refuse`)."""
        unfit: list[tuple[str, str, str]] = []
        why = ""
        for run_id in self.store.runs_waiting_for(kind, name, key):
            try:
                head = self.store.head(run_id)
                flow = self.flow_of(head.run.flow_name, head.run.flow_version)
                if flow.version != head.run.flow_version:
                    continue
                state = load_state(
                    flow.state_type, head.checkpoint.state, run_id, head.checkpoint.revision
                )
            except FlowdeskError:
                continue
            for wait in head.checkpoint.waits:
                step = flow.steps.get(wait.step_id)
                if wait.kind != kind or wait.name != name or not isinstance(step, WaitStep):
                    continue
                if key is not None and wait.key != key:
                    continue
                try:
                    fitted_state(flow, state, run_id, step, kind, payload)
                except WaitPayloadError as exc:
                    unfit.append((run_id, step.id, expected_type(flow, step)))
                    why = why or exc.problem
        return unfit, why

    def publish(self, event_type: str, payload: Any = None) -> int:
        """Publish an event to every run waiting on ``event_type``; returns its id.

        Raises:
            PayloadNotStorableError: no checkpoint could hold ``payload``;
                nothing was published.
            EventPayloadError: a run waiting for ``event_type`` now, whose
                flow is registered here, cannot take ``payload`` (it does not
                fit the wait step's field; an event goes to every such run,
                so one any of them cannot take is refused); nothing was
                stored. An event that reaches a wait that cannot take it
                anyway (published from a process without the run's flow)
                is refused by the wait, which goes on waiting for the next.
            StoreError: the database failed while a waiting run took the
                event: it was published, and a note says so (:meth:`_deliver`).
        """
        check_storable(payload, f"event {event_type!r} payload")
        unfit, why = self._unfit_runs("event", event_type, None, payload)
        if unfit:
            raise EventPayloadError(event_type, unfit, why)
        event_id = self.store.publish_event(event_type, payload, self.clock.now())
        if not self.executes:
            return event_id
        self._deliver(f"event {event_id}", self.store.runs_waiting_for("event", event_type))
        return event_id

    def delete_delivered_runs(self) -> None:
        """Delete the completed runs of this engine's ``delete_on_success``
        flows that were kept until their side effects were delivered
        (:func:`~desktop_app.flow.outbox.delete_when_sent`) and whose
        intents are all delivered now (``delivered_runs``: one statement per
        such flow, none without; a run kept for an intent given up on is
        not read again and again, nor hides the others), at most 100 a call.
        Called by :meth:`tick`, a PostgreSQL worker's pass and the app's
        timer pass.

        Raises:
            StoreError: the store failed.
        """
        names = sorted({f.name for f in self._flows.values() if f.delete_on_success})
        for name in names:
            for run_id in self.store.delivered_runs(name, limit=100):
                delete_when_sent(self.store, run_id)

    def serve(
        self,
        stop: threading.Event,
        *,
        poll_s: float = 1.0,
        on_tick: Callable[[], None] | None = None,
        only: Callable[[RunRecord], bool] | None = None,
        on_refused: Callable[[str, FlowdeskError], None] | None = None,
    ) -> None:
        """Run until ``stop`` is set: recover interrupted runs, fire deadlines
        that fell due and deliver signals and events that other processes
        send, on every pass (every ``poll_s`` seconds, sooner when a deadline
        falls due). ``only`` chooses the interrupted runs it recovers (the
        agent's ``recovery`` policy). ``on_tick`` runs after each pass (the
        outbox dispatcher hooks in here).

        Recovery runs on a thread of its own (``flowdesk-recovery``): at
        start, and whenever a pass finds a run another process left behind
        (a ``flowdesk run`` killed or stopped with Ctrl-C:
        :func:`recovery.left_behind`), it resumes those runs while the
        calling thread goes on firing deadlines, so a long run being resumed
        never delays another run's deadline. A run this engine cannot resume
        or wake (:data:`REFUSALS`: its flow is not registered here or
        changed since the run started, its mode cannot be built, its
        checkpoint cannot be decoded) is tried once, not on every pass: the
        refusal is logged once (a warning) and given to ``on_refused(run_id,
        error)`` once per run. Returns once ``stop``
        is set and the run being resumed, if any, has stopped (set
        ``shutdown_event`` to stop it before its next step).

        Raises:
            StoreError: the database failed on a pass (the recovery thread's
                error is raised here too, within ``poll_s``).
        """
        refusals = Refusals("this process", log, on_refused)
        refused, refuse = refusals.ids, refusals.refuse
        failed: list[BaseException] = []
        halt = threading.Event()  # the calling thread stopped: so does the sweeper

        def note(run: RunRecord, out: RunResult | BaseException) -> None:
            # refusals no later pass of this process can change (a busy or
            # full database, a lease held elsewhere: tried again next time)
            if isinstance(out, REFUSALS):
                refuse(run.run_id, out)
            elif isinstance(out, DatabaseLockedError):
                # its lease is still this engine's (giving it back met the lock
                # too): recovery.left_behind counts such a run, the next pass resumes it
                log.warning("run %s: %s; resumed again in %g s", run.run_id, out, poll_s)

        def wanted(run: RunRecord) -> bool:
            return run.run_id not in refused and (only is None or only(run))

        def sweep() -> None:
            try:
                first = True
                while first or not halt.wait(poll_s):
                    try:
                        if first or recovery.left_behind(self, wanted, self._lease_now()):
                            self.recover(note, only=only)
                        first = False
                    except DatabaseLockedError as exc:  # as in the loop below
                        log.warning("%s; recovery tries again in %g s", exc, poll_s)
            except BaseException as exc:  # raised by serve in the calling thread
                failed.append(exc)

        sweeper = threading.Thread(target=sweep, name="flowdesk-recovery", daemon=True)
        sweeper.start()
        try:
            while not stop.is_set() and not failed:
                try:
                    self.tick(skip=refused, on_refused=refuse)
                    if on_tick is not None:
                        on_tick()
                except DatabaseLockedError as exc:
                    # another process held the write lock past the busy
                    # timeout (stopped with Ctrl-Z, a long transaction): a
                    # service waits for it, trying again at the next poll
                    log.warning("%s; trying again in %g s", exc, poll_s)
                    stop.wait(poll_s)
                    continue
                wait = poll_s
                nxt = self.store.next_deadline()
                # a deadline still due after the pass is one this engine may not
                # fire (refused, or leased elsewhere): the next poll, not a spin
                if nxt is not None and nxt > self.clock.now():
                    wait = min(poll_s, nxt - self.clock.now())
                stop.wait(wait)
        finally:
            halt.set()
            sweeper.join()
        if failed:
            raise failed[0]

    def claim_runnable(
        self,
        limit: int = 100,
        *,
        statuses: Sequence[RunStatus] = RUNNABLE_STATUSES,
        wakeable: bool = True,
        flows: Collection[str] | None = None,
    ) -> list[RunRecord]:
        """Claim the next runs this engine may execute (see
        ``CheckpointStore.claim_runnable``): interrupted runs in ``statuses``
        and, with ``wakeable``, waiting runs with something to act on, whose
        lease is free, ours, expired, or held by a dead process on this host;
        leased to :attr:`owner` for ``lease_ttl_s``, oldest first. Expiry is
        decided by the store's clock (the database's, where it has one), or by
        the engine's injected clock when one was given. Release a claimed run
        you do not drive with ``store.release(run_id, engine.owner)``."""
        return self.store.claim_runnable(
            self.owner,
            self.lease_ttl_s,
            limit,
            statuses=statuses,
            wakeable=wakeable,
            flows=flows,
            presumed_dead=owner_is_dead,
            presumed_alive=owner_is_alive,
            now=None if self._lease_clock is None else self._lease_clock.now(),
        )

    def resume_pending(self) -> ResumePendingResult:
        """Resume :meth:`pending` runs oldest first; stop at the first error.

        Runs are claimed (``claim_runnable``), so two processes sweeping at
        once never resume the same run. A run that raises or ends ``failed``
        stops the sweep; its id is in ``failed_run_id``; later runs are
        untouched (go-micro ResumePending).
        """
        return recovery.resume_pending(self)

    def recover(
        self,
        on_result: Callable[[RunRecord, RunResult | BaseException], None] | None = None,
        only: Callable[[RunRecord], bool] | None = None,
        *,
        concurrency: int = 64,
    ) -> list[tuple[RunRecord, RunResult | BaseException]]:
        """Resume every interrupted run (``pending`` or ``running``), oldest
        first, continuing past failures, then wake waiting runs whose stored
        deadline passed (compared with the injected clock) or whose signal or
        event arrived while no process ran: what the app and ``flowdesk
        agent`` do at launch. Runs are claimed first (``claim_runnable``), so
        two processes recovering at once never execute the same run; an
        interrupted run a live process holds is reported with
        ``RunLeasedError`` and left alone. Failed runs and runs still waiting
        for a person are left alone. ``only(run)`` may exclude runs (per-flow
        launch policy).

        Up to ``concurrency`` runs are driven at once (threads of this engine;
        their checkpoints share group commits). ``on_result`` is called
        in the calling thread as each run finishes; the returned report is in
        claim order (oldest first), then the runs live processes hold.
        ``concurrency=1`` drives one run after another; the default lets one
        commit carry up to 64 runs' checkpoints (recovering 1,000 runs took
        ~870 commits, each an fsync, at 16 and ~230 at 64).
        """
        return recovery.recover(self, on_result, only, concurrency)

    def run_many(
        self,
        flow: CompiledFlow[Any] | str,
        states: Iterable[BaseModel | Mapping[str, Any]],
        *,
        max_workers: int = 8,
        on_result: Callable[[int, RunResult | BaseException], None] | None = None,
    ) -> list[RunResult | BaseException]:
        """Start and execute one run per state, up to ``max_workers`` at once
        (a bounded pool of threads sharing this engine and its group commit).

        Returns one entry per state, in order: the run's :class:`RunResult`
        (completed, failed, waiting, ...), or the ``FlowdeskError`` that
        stopped it (e.g. ``StoreError``); one run's error never stops the
        others. ``on_result(index, outcome)`` is called in the calling thread
        as each run finishes.
        """
        f = self._resolve(flow)
        items = list(enumerate(states))

        def one(item: tuple[int, BaseModel | Mapping[str, Any]]) -> RunResult | BaseException:
            try:
                return self.run(f, item[1])
            except FlowdeskError as exc:
                return exc

        report = None
        if on_result is not None:
            cb = on_result

            def report(item: tuple[int, Any], out: RunResult | BaseException) -> None:
                cb(item[0], out)

        return pooled(items, one, max_workers, report, self.shutdown_event)

    def resume_many(
        self, run_ids: Sequence[str], *, max_workers: int = 8
    ) -> list[RunResult | BaseException]:
        """:meth:`resume` each run, up to ``max_workers`` at once; one entry
        per id, in order: its result or the ``FlowdeskError`` it raised."""

        def one(run_id: str) -> RunResult | BaseException:
            try:
                return self.resume(run_id)
            except FlowdeskError as exc:
                return exc

        return pooled(list(run_ids), one, max_workers, None, self.shutdown_event)

    # -- control ---------------------------------------------------------

    def cancel(self, run_id: str, reason: str = "canceled by user") -> RunRecord:
        """Move a pending, running, waiting or failed run to ``canceled``;
        returns its record (:meth:`cancel_withdrawing` also says which of
        its queued side effects were withdrawn).

        A run being driven in this process stops before its next step, also
        during a retry backoff. Right after its terminal checkpoint, its
        outbox intents not delivered yet are withdrawn, so no dispatcher
        ever makes them (:func:`~desktop_app.flow.outbox.withdraw_for_cancel`:
        one a live dispatcher is sending at that instant is left to it, and
        its outcome is recorded as it ends). Its live journaled children
        (flow runs, and agent runs once ``desktop_app.agent.runtime`` is
        imported) are canceled with it, their intents withdrawn the same way.

        Raises:
            RunStateError: the run is completed, canceled or timed out
                (:meth:`withdraw_after_end` withdraws what such a run left
                queued); or a
                child is of a kind no imported module knows how to cancel
                (the run itself is canceled by then).
            RunLeasedError: ``db copy`` moved the run to PostgreSQL (nothing
                was changed here; its message says where).
            StoreError: the store could not be written.
        """
        return self.cancel_withdrawing(run_id, reason).run

    def cancel_withdrawing(self, run_id: str, reason: str = "canceled by user") -> Cancellation:
        """:meth:`cancel`, returning the run's record with its intents
        withdrawn (never delivered now) and those left in flight to a live
        dispatcher (its children's are not counted).

        Raises:
            the errors of :meth:`cancel`.
        """
        run = self.store.get_run(run_id)
        if run.status not in ENDED_RUN_STATUSES and moved_to(run.lease_owner) is not None:
            raise RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        self.cancel_event(run_id).set()
        # the status change and the withdrawal commit together: a cancel
        # killed part-way never leaves a canceled run's effects queued
        withdrawn = self._finish(run_id, "canceled", reason, withdraw=CANCELED)
        run = self.store.get_run(run_id)
        done = settle_cancel(self.store, run_id, self._canceled_flow(run), withdrawn)
        cancel_children(self.store, run_id, self.clock, self.cancel)
        return Cancellation(
            self.store.get_run(run_id), done.withdrawn, done.in_flight, done.made, done.unknown
        )

    def withdraw_after_end(self, run_id: str) -> Cancellation:
        """The cancel of a run that had already ended ``completed`` or
        ``timed_out`` with side effects still queued (a process delivering
        them was killed; a program's own destinations wait for its
        dispatcher): they are withdrawn as :meth:`cancel_withdrawing`
        withdraws a live run's
        (:func:`~desktop_app.flow.outbox.withdraw_for_cancel`: the same
        liveness and claim rules, one a live dispatcher is sending is left
        to it in ``in_flight``, one whose process died mid-send is looked
        up; then the flow's ``on_cancel`` hook), recording
        :data:`~desktop_app.flow.outbox.CANCELED_AFTER_END`. The run keeps
        its status (``Cancellation.run`` says it).

        Raises:
            RunStateError: the run has not ended (cancel it), was
                ``canceled`` (its cancel withdrew its side effects), or has
                none left to withdraw (nothing was changed).
            StoreError: the store could not be written.
        """
        run = self.store.get_run(run_id)
        if run.status not in WITHDRAWN_AFTER_END:
            raise RunStateError(
                f"run {run_id} is {run.status}; nothing to do"
                if run.status in ENDED_RUN_STATUSES
                else f"run {run_id} is {run.status}, not ended: cancel it"
            )
        nothing = RunStateError(f"run {run_id} is already {run.status}; nothing to do")
        if not self.store.open_intents(run_id):
            raise nothing
        done = withdraw_for_cancel(
            self.store, run_id, self._canceled_flow(run), reason=CANCELED_AFTER_END
        )
        if not (done.withdrawn or done.in_flight or done.made or done.unknown):
            raise nothing  # delivered meanwhile
        return Cancellation(run, done.withdrawn, done.in_flight, done.made, done.unknown)

    def _canceled_flow(self, run: RunRecord) -> CompiledFlow[Any] | None:
        """The flow whose :attr:`~CompiledFlow.on_cancel` hook records the
        cancel of ``run``: the mode of it built here for the run's version
        (:meth:`register_variant`), else the flow this engine registered
        under the run's flow name; ``None`` (logged) when it has none, as an
        engine knows only its own flows' hooks. Never builds a mode: a
        cancel does not wait on, or fail for, a mode's configuration."""
        with self._lock:
            built = self._built.get((run.flow_name, run.flow_version))
        flow = built if built is not None else self._flows.get(run.flow_name)
        if flow is None:
            log.warning(
                "run %s of flow %r was canceled by an engine with no flow of that name: "
                "the flow's on_cancel hook, if it has one, did not run",
                run.run_id,
                run.flow_name,
            )
        return flow

    def run_child(
        self,
        ctx: StepContext,
        flow: CompiledFlow[Any] | str,
        state: BaseModel | Mapping[str, Any],
    ) -> RunResult:
        """From inside a step: run a child flow, or reattach to the one this
        step started before (in this run, or in the run it was forked,
        replayed or upgraded from); its id is journaled in the parent first.

        A completed child gives its saved result and runs nothing; an
        unfinished one is resumed (a waiting one is returned as it is).

        Raises:
            the errors of :meth:`run` and :meth:`resume`.
        """
        f = self._resolve(flow)
        child_id = ctx.child_run_id("flow")
        try:
            child = self.store.get_run(child_id)
        except CheckpointNotFoundError:
            return self.run(f, state, run_id=child_id, parent_run_id=ctx.run_id)
        if child.status == "waiting":
            cp = self.store.latest(child_id)
            current = load_state(f.state_type, cp.state, child_id, cp.revision)
            return RunResult(child_id, child.status, current, cp.revision, child.error)
        if child.status in ("canceled", "timed_out"):
            raise RunStateError(
                f"child run {child_id} of step {ctx.step_id!r} is {child.status}; replay or "
                "fork it, or fail the parent"
            )
        return self.resume(child_id)

    def _finish(
        self, run_id: str, status: RunStatus, reason: str, *, withdraw: str | None = None
    ) -> Withdrawal:
        """Append a terminal checkpoint atomically (wins against a busy run).
        With ``withdraw`` (the reason the intents record), the run's intents
        not delivered yet are withdrawn in the same transaction
        (``store.update_latest_withdrawing``) and what was withdrawn is
        returned (without: nothing is withdrawn, an empty one); a run whose
        latest checkpoint is damaged is ended without it, then its intents
        withdrawn."""
        now = self.clock.now()

        def change(cp: Checkpoint) -> Checkpoint:
            if cp.status in ("completed", "canceled", "timed_out"):
                raise RunStateError(f"run {run_id} is already {cp.status}; nothing to do")
            return cp.evolve(
                revision=cp.revision + 1,
                status=status,
                error=reason,
                waits=(),
                created_at=now,
                step_id=cp.frontier[0] if cp.frontier else "",
            )

        try:
            if withdraw is None:
                self.store.update_latest(run_id, change)
                return Withdrawal([], [])
            return self.store.update_latest_withdrawing(
                run_id,
                change,
                withdraw,
                presumed_dead=claimant_is_gone,
                presumed_alive=claimant_is_alive,
            )[1]
        except (CheckpointCorruptError, RevisionConflictError) as exc:
            end = getattr(self.store, "end_unreadable", None)
            if isinstance(exc, CheckpointCorruptError):
                if end is None or exc.run_id != run_id:
                    raise
                # the latest checkpoint cannot be read: end the run without
                # reading it (no checkpoint appended), the damage named
                why = f"{reason}; its checkpoint revision {exc.revision} is damaged"
            else:
                if end is None or type(exc) is not RevisionConflictError:
                    raise  # a lease lost: another process holds the run
                behind = self._record_behind(run_id)
                if behind is None:
                    raise  # another writer saved first: a real conflict
                # its record was set back below its newest checkpoint outside
                # Flowdesk: every append meets that checkpoint; end it as a
                # damaged one, without appending
                why = (
                    f"{reason}; its record was at revision {behind[0]}, below its newest "
                    f"checkpoint {behind[1]} (changed outside Flowdesk)"
                )
            if withdraw is None:
                end(run_id, status, why, now)
                return Withdrawal([], [])
            # the stores that have end_unreadable (SQLite, PostgreSQL) have
            # this too: both in one transaction
            ending = getattr(self.store, "end_unreadable_withdrawing")  # noqa: B009
            done: Withdrawal = ending(
                run_id,
                status,
                why,
                now,
                withdraw,
                presumed_dead=claimant_is_gone,
                presumed_alive=claimant_is_alive,
            )[1]
            return done

    def _record_behind(self, run_id: str) -> tuple[int, int] | None:
        """``(record's revision, newest checkpoint's)`` when run ``run_id``'s
        record is older than its newest checkpoint (set back outside
        Flowdesk, which moves both in one transaction), else ``None``."""
        record = self.store.get_run(run_id).revision
        newest = max((i.revision for i in self.store.history(run_id)), default=record)
        return (record, newest) if newest > record else None

    # -- upgrades ----------------------------------------------------------

    def incompatible_runs(self) -> list[IncompatibleRun]:
        """Live runs (pending, running, waiting, failed) whose flow changed since
        they started: never silent zombies. For each, a person may
        :meth:`fail_run` it, :meth:`fork_onto_current` it, or keep it for a
        process that still has the old flow.

        Not listed: runs of one of the flow's :attr:`CompiledFlow.variants`
        (another mode of the same version, e.g. the CLI's ``digest --model``:
        a process with that mode goes on with them), and runs a live process
        holds at this moment (:func:`~desktop_app.flow.owners.holding` says
        ``held``): that process has their flow and executes them."""
        return runs_of_changed_flows(self.store, self._flows.values(), self._lease_now())

    def fail_run(self, run_id: str, reason: str) -> RunRecord:
        """Mark a live run ``failed`` with ``reason`` (any flow version); its waits end.

        Raises RunStateError for a completed, canceled or timed-out run.
        """
        self._finish(run_id, "failed", reason)
        return self.store.get_run(run_id)

    def fork_onto_current(
        self, run_id: str, on_created: Callable[[str], None] | None = None
    ) -> RunResult:
        """Continue a run of an older flow version as a new run of the current
        one, from its latest state and step; the old run is canceled as
        superseded, and the new one is driven here until it ends or waits
        (as :meth:`run`). ``on_created(new_run_id)`` is called once both are
        stored, before the new run's first step (a caller showing progress
        names the new run then, not only when its steps are done). Its state
        must decode under the current state model and its next step must
        still exist. Its completed steps (those the current flow
        still has, nested ones too), its step count, the decisions of the
        conditions it entered and the visit count of each step carry over. The
        child runs it journaled pass to the new run (its re-executed steps
        reattach to them) and stay live. A wait it is in, where the current
        flow has the same wait at that step, goes on in the new run with its
        stored deadline: a sleep is not slept again, and the step's
        ``on_enter`` does not run again (``replay.carried_waits``). A state
        field the current model added is given its default, one it no longer
        has is left out (``state.upgraded_state``).

        Raises:
            CheckpointDecodeError: the state does not fit the current model
                (a value no longer fits its field, or an added field has no
                default).
            RunStateError: the step it stopped at no longer exists.
        """
        new_id = uuid.uuid4().hex  # the waits it keeps are keyed by it
        seed = upgrade_seed(self.store, self.flow, run_id, new_id)
        made = self._create_from(seed, new_id)
        rid = made[0].run_id
        # its children now belong to the new run: cancel the old run alone
        self.cancel_event(run_id).set()
        version = seed.flow.version
        self._finish(run_id, "canceled", f"superseded by run {rid} on flow version {version}")
        if on_created is not None:
            on_created(rid)
        return self._drive(seed.flow, *made)

    def _create_from(self, seed: Seed, run_id: str | None) -> Made:
        """Create the run ``seed`` describes, leased to this engine and
        running; ``pending`` with no lease on an engine that executes no
        runs (``executes=False``: a worker takes it, as a run it starts; a
        running run handed back at once read as interrupted, "the process
        that ran it stopped")."""
        return self._create(
            seed.flow,
            seed.state,
            run_id=run_id,
            context=seed.context,
            flow_key=None,
            parent_run_id=seed.parent_run_id,
            running=self.executes,
            frontier=seed.frontier,
            steps=seed.steps,
            meta=seed.meta,
            waits=seed.waits,
        )

    # -- time travel -----------------------------------------------------

    def replay(
        self,
        checkpoint_id: str,
        *,
        mutate: Callable[[Any], Any] | Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Continue from a checkpoint under a new run id (Agentium ``replay``).

        The new run starts with the checkpoint's state and frontier, keeps the
        completed step records before it, the step count, the condition
        decisions and each step's visit count (so a re-executed visit keeps its
        keys and reattaches to that visit's child runs), inherits the context
        ids (not the run id) and records ``replayed_from`` in its checkpoint meta. The
        original run and its history are untouched.

        Args:
            checkpoint_id: ``"<run_id>:<revision>"``.
            mutate: for a fork: a dict of field updates, or a function given
                a copy of the state that returns updates or a new state. The
                result is validated against the state model before anything runs.
                A checkpoint whose stored state no longer decodes (a field's
                type changed; the version has the fields' names only) takes a
                dict's updates before it is decoded, so they can mend it.
            run_id: the new run's id (default: a new uuid).

        Raises:
            CheckpointNotFoundError, FlowVersionMismatchError,
            CheckpointDecodeError (the checkpoint's state no longer fits the
            state model), pydantic.ValidationError (a changed value does not
            fit the model), InputError (the changes name fields the model
            does not have, or are neither a dict nor a state; nothing ran),
            ConfigError (a run of a registered mode, :meth:`register_variant`,
            that cannot be built here: what to configure).
        """
        seed = replay_seed(self.store, self.flow_of, checkpoint_id, mutate)
        made = self._create_from(seed, run_id)
        if not seed.frontier:
            run = made[0]
            return RunResult(run.run_id, run.status, seed.state, 0, None)
        return self._drive(seed.flow, *made)

    def fork(
        self,
        checkpoint_id: str,
        mutate: Callable[[Any], Any] | Mapping[str, Any],
        *,
        run_id: str | None = None,
    ) -> RunResult:
        """Replay from a checkpoint after changing its state (Agentium
        ``fork``): :meth:`replay` with ``mutate``, a dict of field updates or
        a function given a copy of the state that returns updates or a new
        state. Raises what :meth:`replay` raises (``InputError`` for a field
        the state model does not have)."""
        return self.replay(checkpoint_id, mutate=mutate, run_id=run_id)

    # -- reading (never runs anything) -----------------------------------

    def get(self, run_id: str) -> Any:
        """The latest state, decoded into the flow's model. Runs nothing."""
        run, cp = self.store.head(run_id)
        return load_state(self.flow(run.flow_name).state_type, cp.state, run_id, cp.revision)

    def status(self, run_id: str) -> RunRecord:
        """Run metadata only; decodes no state."""
        return self.store.get_run(run_id)

    def pending(self) -> list[RunRecord]:
        """Runs not completed and not waiting: pending, running, failed; oldest first."""
        return self.store.list_runs(statuses=PENDING_STATUSES)

    def waiting(self) -> list[RunRecord]:
        """Runs waiting for input, a signal, an event, a timer or an operator, oldest first."""
        return self.store.list_runs(statuses=("waiting",))

    def waits(self, run_id: str) -> list[Wait]:
        """What a run waits for: its pending waits (ids, kinds, prompts, deadlines)."""
        return list(self.store.latest(run_id).waits)

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every retained checkpoint of the run, oldest first, with stable ids."""
        return self.store.history(run_id)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """A checkpoint by its stable id ``"<run_id>:<revision>"``."""
        return self.store.get_checkpoint(*parse_id(checkpoint_id))
