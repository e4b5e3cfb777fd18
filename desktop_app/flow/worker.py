"""A worker: one of several processes (on one or several machines) that
execute runs from a shared store.

Each pass of :meth:`Worker.serve`:

1. claims runnable runs with ``store.claim_for_worker(owner, ttl_s, limit)``
   (PostgreSQL; ``claim_runnable`` elsewhere)
   (pending and interrupted runs; those of a dead worker too) and resumes
   them on its threads, up to ``concurrency`` at once;
2. wakes waiting runs whose deadline fell due or whose signal or event
   arrived (``store.wakeable_runs``), on the same threads;
3. then blocks until a wake-up: a notification from the store's listener
   (PostgreSQL LISTEN/NOTIFY: a run was created or released, a signal was
   sent, a deadline was stored), the next stored deadline, or ``poll_s``
   seconds (the fallback when notifications are lost or unavailable).

A run it cannot go on with (``REFUSALS``: its flow is not registered here
or changed since the run started, its checkpoint cannot be decoded) is
tried once, as ``Engine.serve`` does: the refusal is logged once (a
warning) and given to ``on_refused`` once per run, and a deadline of such a
run that stays due does not make the worker's passes run back to back.

A database that cannot be reached (``DatabaseUnreachableError``: a server
outage of any length) never ends :meth:`Worker.serve`: the worker logs that
the database is away, retries its passes with backoff (capped at
``retry_max_s``), logs when it is back and goes on: runs interrupted
meanwhile are claimed under the usual ownership rules (its own once their
lease expired). Only an error that cannot heal (``FATAL_STORE_ERRORS``)
ends it.

Liveness and self-fencing come from the listener (``session``): while it is
down the worker claims nothing and every run it executes stops before its
next step (``engine.lost``); a peer takes them over. Safety never depends on
it: the compare-and-append with the lease check fences a stale owner.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, cast

from desktop_app.errors import (
    DatabaseOpenError,
    DatabaseUnreachableError,
    FlowdeskError,
    SchemaError,
    UnknownFlowError,
)
from desktop_app.flow import recovery
from desktop_app.flow.engine import REFUSALS, Engine, Refusals
from desktop_app.flow.owners import lease_abandoned, owner_is_alive, owner_is_dead
from desktop_app.flow.retry import Backoff
from desktop_app.store.protocol import PENDING_STATUSES, WorkerClaims
from desktop_app.store.records import RunRecord

log = logging.getLogger(__name__)

#: Store errors a worker cannot ride out (they do not heal by waiting): the
#: schema is missing, edited or newer; the database or role is refused.
FATAL_STORE_ERRORS: tuple[type[FlowdeskError], ...] = (SchemaError, DatabaseOpenError)
#: What :meth:`Worker.serve` handles itself rather than as a failed pass:
#: an unreachable database (waited out) and the errors that cannot heal.
_NOT_A_PASS_FAILURE: tuple[type[FlowdeskError], ...] = (
    DatabaseUnreachableError,
    *FATAL_STORE_ERRORS,
)
#: The statuses of the runs a worker claims (and says it cannot go on with
#: when their flow's code changed since they started).
CLAIMED_STATUSES = ("pending", "running")
#: While the database is unreachable, the first wait between passes (seconds).
AWAY_FIRST_S = 0.5
#: While the database stays unreachable, a worker says so this often (seconds).
AWAY_LOG_EVERY_S = 60.0


class WakeSource(Protocol):
    """What :class:`Worker` blocks on between passes (a store listener)."""

    @property
    def alive(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...

    def poke(self) -> None: ...


class ServerClock:
    """A :class:`~desktop_app.flow.clock.Clock` that follows the database's
    clock: local time plus an offset estimated NTP-style (the server's time
    against the midpoint of the round trip in which it was read), refreshed
    every ``refresh_s`` seconds.

    Args:
        probe: returns ``(server time, local time sent, local time
            answered)``, UTC epoch seconds (the PostgreSQL store's
            ``server_time``, which reads the local clock right around its
            query, not around its wait for a pooled connection).
        refresh_s: seconds between two measurements.
        max_rtt_s: a sample whose round trip took longer than this many
            seconds (a stalled connection) is not taken: the offset stays
            what it was and the next :meth:`now` measures again. The offset
            is then right within ``max_rtt_s / 2``.
        retry_s: after a probe that failed (the database cannot be
            reached), seconds before one is tried again (at most
            ``refresh_s``); the last offset is used meanwhile, so a server's
            outage does not make every reading of the clock wait for it.

    A refresh another thread is making is not waited for: :meth:`now`
    gives the last offset meanwhile (only the first measurement, with no
    offset yet, is waited for).

    Deadlines and wait times that processes on different machines compare
    are then measured on one clock, within about half a round trip.
    """

    def __init__(
        self,
        probe: Callable[[], tuple[float, float, float]],
        refresh_s: float = 60.0,
        max_rtt_s: float = 1.0,
        retry_s: float = 5.0,
    ) -> None:
        self.probe = probe
        self.refresh_s = refresh_s
        self.max_rtt_s = max_rtt_s
        self.retry_s = retry_s
        self.offset = 0.0
        self._at = -float("inf")
        self._measured = False
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        server, sent, answered = self.probe()
        rtt = answered - sent
        if not 0.0 <= rtt <= self.max_rtt_s:
            log.info(
                "database clock sample not taken: its round trip took %.3f s (over %.3f s); "
                "the clock offset stays %+.3f s",
                rtt, self.max_rtt_s, self.offset,
            )  # fmt: skip
            return
        self.offset = server - (sent + answered) / 2
        self._at = time.monotonic()
        self._measured = True

    def now(self) -> float:
        # the first measurement is waited for; a later one being made by
        # another thread is not: the last offset serves meanwhile
        due = time.monotonic() - self._at > self.refresh_s
        if due and self._lock.acquire(blocking=not self._measured):
            try:
                if time.monotonic() - self._at > self.refresh_s:
                    self._refresh_or_back_off()
            finally:
                self._lock.release()
        return time.time() + self.offset

    def _refresh_or_back_off(self) -> None:
        try:
            self._refresh()
        except FlowdeskError:  # keep the last offset; try again in retry_s
            self._at = time.monotonic() - self.refresh_s + min(self.retry_s, self.refresh_s)

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        if cancel is None:
            time.sleep(max(0.0, seconds))
            return True
        return not cancel.wait(max(0.0, seconds))


class Worker:
    """Executes runs of ``engine``'s registered flows from a shared store.

    Args:
        engine: its ``owner`` is this worker's lease owner id and its store
            must implement ``claim_runnable``.
        session: the store's listener holding this worker's liveness (None:
            poll only, no liveness).
        concurrency: runs executed at once (threads).
        poll_s: the fallback interval between passes, seconds.
        on_tick: called after each pass (the outbox dispatcher hooks in).
        on_refused: called once per run with the run id and the error for a
            run this worker cannot go on with (``REFUSALS``).
        fence_cooldown_s: after its liveness dropped, the worker claims
            nothing for this many seconds once it is back, so the peers that
            noticed first take the runs it handed back.
        retry_max_s: while the database cannot be reached
            (DatabaseUnreachableError), the longest wait between two passes,
            seconds; the waits grow from :data:`AWAY_FIRST_S` exponentially
            with jitter (tenacity, through :class:`~desktop_app.flow.retry.Backoff`)
            and the worker keeps trying for as long as it serves.
        on_unreachable: called once when the database is first found
            unreachable (by a failed pass, or earlier through
            :meth:`unreachable_met`, which the store calls while a pass still
            waits for the server), with the error.
        on_reachable: called once when a pass goes through again after
            that, with the seconds since the database was first found
            unreachable.

    A store error that cannot heal (:data:`FATAL_STORE_ERRORS`: the schema
    is missing, edited or newer, the role or its password is refused) ends
    :meth:`serve` with that error.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        session: WakeSource | None = None,
        concurrency: int = 4,
        poll_s: float = 1.0,
        on_tick: Callable[[], None] | None = None,
        on_refused: Callable[[str, FlowdeskError], None] | None = None,
        fence_cooldown_s: float = 1.0,
        retry_max_s: float = 5.0,
        on_unreachable: Callable[[DatabaseUnreachableError], None] | None = None,
        on_reachable: Callable[[float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.retry_max_s = retry_max_s
        self.on_unreachable = on_unreachable
        self.on_reachable = on_reachable
        self._backoff = Backoff(initial_s=AWAY_FIRST_S, max_s=retry_max_s, jitter_s=AWAY_FIRST_S)
        self._away_since: float | None = None
        self._away_said = 0.0
        self._away_lock = threading.Lock()
        self._away_tries = 0
        self._refusals = Refusals(f"worker {engine.owner}", log, on_refused)
        #: runs refused once (``REFUSALS``): not tried again by this worker
        self.refused = self._refusals.ids
        self.fence_cooldown_s = fence_cooldown_s
        self._fenced_at = -float("inf")
        self.session = session
        self.concurrency = max(1, concurrency)
        self.poll_s = poll_s
        self.on_tick = on_tick
        self._inflight: dict[str, Future[Any]] = {}
        #: seconds between two looks for runs of flows not registered here
        self.unknown_every_s = 5.0
        self._unknown_at = -float("inf")
        #: run id -> updated_at of the runs of such flows seen at the last look
        self._unknown_seen: dict[str, float] = {}
        self._lock = threading.Lock()
        #: passes that a notification started (rather than the poll timer)
        self.notified_passes = 0
        self.passes = 0

    def fence(self) -> None:
        """Stop every run this worker executes before its next step (its
        liveness dropped: a peer may be taking them over)."""
        self._fenced_at = time.monotonic()
        with self.engine._lock:
            self.engine.lost.update(self.engine.active)

    def _free(self) -> int:
        with self._lock:
            for run_id in [r for r, f in self._inflight.items() if f.done()]:
                del self._inflight[run_id]
            return self.concurrency - len(self._inflight)

    def _submit(self, pool: ThreadPoolExecutor, run_id: str, fn: Callable[[str], Any]) -> None:
        def body() -> None:
            try:
                fn(run_id)
            except REFUSALS as exc:
                self._refusals.refuse(run_id, exc)
            except FlowdeskError as exc:
                log.info("flowdesk worker %s: run %s: %s", self.engine.owner, run_id, exc)
            except Exception:
                log.exception("flowdesk worker %s: run %s failed", self.engine.owner, run_id)
            finally:
                if self.session is not None:
                    self.session.poke()  # a slot is free: claim again now

        with self._lock:
            self._inflight[run_id] = pool.submit(body)

    def _busy(self, run_id: str) -> bool:
        with self._lock:
            fut = self._inflight.get(run_id)
            return fut is not None and not fut.done()

    def run_pass(self, pool: ThreadPoolExecutor) -> None:
        """Claim and start what can start now (see module doc)."""
        engine, store = self.engine, self.engine.store
        if self.session is not None and not self.session.alive:
            return  # fenced: claim nothing until liveness is back
        if time.monotonic() - self._fenced_at < self.fence_cooldown_s:
            return
        free = self._free()
        if free > 0:
            for run in self._claim(free):
                self._submit(pool, run.run_id, engine.resume)
        for run_id in store.wakeable_runs(engine.clock.now(), limit=50):
            if self._free() <= 0:
                break
            if not self._busy(run_id) and run_id not in self.refused:
                self._submit(pool, run_id, engine.wake)
        self._tell_unknown_flows()
        # as Engine.tick: the delete_on_success runs whose side effects are delivered
        engine.delete_delivered_runs()

    def _tell_unknown_flows(self) -> None:
        """Refuse (once per run: logged and given to ``on_refused``) each
        pending or interrupted run no live process holds whose flow is not
        registered here (``UnknownFlowError``), or is registered at another
        version than the run was started with (``FlowVersionMismatchError``:
        its code changed since; a ``pending`` or ``running`` run, what a
        worker would claim): the claims pass over such runs, so without this
        a worker missing a flow or having its new code said nothing and the
        run stayed ``pending`` or ``interrupted``. At most one look every
        :attr:`unknown_every_s` seconds; a run is refused at the second look
        that finds it unchanged, so a worker of a team whose workers run
        different flows (or, during a rolling upgrade, a flow's old and new
        code) says nothing of the runs its peers take in between."""
        if time.monotonic() - self._unknown_at < self.unknown_every_s:
            return
        self._unknown_at = time.monotonic()
        engine, store = self.engine, self.engine.store
        names = sorted({name for name, _ in engine.versions()})
        now = store.now()
        seen, self._unknown_seen = self._unknown_seen, {}
        for run in store.list_runs(statuses=PENDING_STATUSES):
            if run.run_id in self.refused:
                continue
            refusal: FlowdeskError | None = None
            if run.flow_name not in names:
                refusal = unknown_flow(run.flow_name, names)
            elif run.status in CLAIMED_STATUSES:  # its code changed since it started
                refusal = engine.version_refusal(run)
            if refusal is None:
                continue
            if lease_abandoned(run.lease_owner, run.lease_expires_at, now):
                # said only when the run is still there, unchanged, at the next
                # look: a team's worker that has the flow claims it before that
                if seen.get(run.run_id) == run.updated_at:
                    self._refusals.refuse(run.run_id, refusal)
                else:
                    self._unknown_seen[run.run_id] = run.updated_at

    def _claim(self, free: int) -> list[RunRecord]:
        """Up to ``free`` runs just leased to this worker that it can start
        now: of a registered flow at a version it runs (its own, or a mode's
        such as ``digest --model``: :meth:`Engine.versions`), none it
        executes already."""
        engine, store = self.engine, self.engine.store
        versions = engine.versions()
        names = list(dict.fromkeys(name for name, _ in versions))
        taken: list[RunRecord] = []
        # PostgreSQL's claim also frees runs of workers whose liveness lock is gone
        if "worker_claims" in store.capabilities:
            got = cast("WorkerClaims", store).claim_for_worker(
                engine.owner, engine.lease_ttl_s, free, flows=versions
            )  # ours come back only once their lease expired
            taken = [r for r in got if not self._busy(r.run_id)]
            free -= len(taken)
            # a process of this host that held a run without a liveness lock (a
            # `flowdesk run`, the app) and died keeps its lease until it expires
            # for claim_for_worker; claim_runnable below takes it over at once
            if free <= 0 or not recovery.left_behind(
                engine,
                lambda r: (
                    engine.runs_version(r.flow_name, r.flow_version) and not self._busy(r.run_id)
                ),
                store.now(),
            ):
                return taken
        # claim_runnable also returns the runs this worker executes (leased to
        # it, the oldest) and matches flows by name only, so those would use up
        # the free slots: claim more in their place (twice as many each round)
        # until no new one turns up, start up to ``free`` of the rest and hand
        # back the runs it does not start. Leases expire by the store's clock
        # (the database's), never a worker's own; one of a process of this
        # host that died is taken over at once.
        mine = {r.run_id for r in taken}  # claimed above: claim_runnable returns them again
        skip = set(mine)
        while True:
            limit = free + 2 * len(skip)
            claimed = store.claim_runnable(
                engine.owner,
                engine.lease_ttl_s,
                limit,
                flows=names,
                wakeable=False,
                presumed_dead=owner_is_dead,
                presumed_alive=owner_is_alive,
            )
            fresh = {
                r.run_id
                for r in claimed
                if r.run_id not in skip
                and (self._busy(r.run_id) or not engine.runs_version(r.flow_name, r.flow_version))
            }
            skip |= fresh
            if not fresh or len(claimed) < limit:
                break
        start = [r for r in claimed if r.run_id not in skip][:free]
        started = {r.run_id for r in start}
        for run in claimed:
            if run.run_id not in started | mine and not self._busy(run.run_id):
                with contextlib.suppress(FlowdeskError):  # else it expires after lease_ttl_s
                    store.release(run.run_id, engine.owner)
        return taken + start

    def serve(self, stop: threading.Event) -> None:
        """Run passes until ``stop`` is set; then stop the runs before their
        next step and wait for the threads: a step in flight finishes, and
        each run's lease is released once its step has ended (never while
        its step may still execute here: :meth:`Engine.stop`)."""
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="flowdesk-run")
        stopper = threading.Thread(target=self._stop_on, args=(stop,), daemon=True)
        stopper.start()
        try:
            while not stop.is_set():
                try:
                    wait = self._serve_pass(pool, stop)
                except FATAL_STORE_ERRORS:
                    raise  # cannot heal: the caller reports it (a typed error)
                except DatabaseUnreachableError as exc:
                    wait = self._away(exc)
                except FlowdeskError as exc:  # retried at the next pass
                    log.warning("flowdesk worker %s: pass failed: %s", self.engine.owner, exc)
                    wait = self.poll_s
                else:
                    self._back()
                if wait is None or stop.is_set():
                    break
                if self.session is not None:
                    if self.session.wait(wait):
                        self.notified_passes += 1
                else:
                    stop.wait(wait)
        finally:
            self.engine.stop()
            pool.shutdown(wait=True)

    def _serve_pass(self, pool: ThreadPoolExecutor, stop: threading.Event) -> float | None:
        """One pass of :meth:`serve` and its delivery tick; returns the
        seconds to wait before the next (None: stopping). A database that
        cannot be reached raises DatabaseUnreachableError, from any of it;
        another failure of the pass is logged and the next pass tries again."""
        try:
            self.run_pass(pool)
        except _NOT_A_PASS_FAILURE:
            raise
        except FlowdeskError as exc:  # retried at the next pass
            log.warning("flowdesk worker %s: pass failed: %s", self.engine.owner, exc)
        if stop.is_set():  # stopping: no delivery pass, no wait (each a database call)
            return None
        if self.on_tick is not None:
            self.on_tick()
        self.passes += 1
        wait = self.poll_s
        try:
            nxt = self.engine.store.next_deadline()
        except _NOT_A_PASS_FAILURE:
            raise
        except FlowdeskError:  # the poll interval, then
            nxt = None
        # a deadline still due after the pass is one this worker may not
        # fire (refused, or leased elsewhere): the next poll, not a spin
        if nxt is not None and nxt > self.engine.clock.now():
            wait = min(wait, nxt - self.engine.clock.now())
        return None if stop.is_set() else wait

    def unreachable_met(self, exc: DatabaseUnreachableError) -> None:
        """The store found the database unreachable (in any thread: a pass
        that goes on waiting for the server, a run's step): say so now, once
        per outage, and count the outage from now (see :meth:`_back`)."""
        self._begin_away(exc)

    def _begin_away(self, exc: DatabaseUnreachableError) -> bool:
        """Note the outage's start and say so, unless already noted; returns
        whether it was already noted."""
        with self._away_lock:
            if self._away_since is not None:
                return True
            self._away_since = self._away_said = time.monotonic()
        log.warning(
            "flowdesk worker %s: the database is unreachable (%s); retrying every %g s "
            "at most until it is back",
            self.engine.owner,
            exc,
            self.retry_max_s,
        )
        if self.on_unreachable is not None:
            self.on_unreachable(exc)
        return False

    def _away(self, exc: DatabaseUnreachableError) -> float:
        """A pass found the database unreachable: say so (at the first
        failure, unless :meth:`unreachable_met` said it, then about once a
        minute) and return the wait before the next try (exponential with
        jitter, capped at :attr:`retry_max_s`)."""
        self._away_tries += 1
        if self._begin_away(exc):
            now = time.monotonic()
            with self._away_lock:
                since, said = self._away_since, self._away_said
                due = since is not None and now - said >= AWAY_LOG_EVERY_S
                if due:
                    self._away_said = now
            if due and since is not None:
                log.warning(
                    "flowdesk worker %s: the database is still unreachable after %.0f s (%s)",
                    self.engine.owner,
                    now - since,
                    exc,
                )
        return self._backoff.delay(self._away_tries)

    def _back(self) -> None:
        """A pass went through: when the database was unreachable before,
        say it is back (after how long since it was first found
        unreachable) and reset the backoff."""
        with self._away_lock:
            since, self._away_since = self._away_since, None
        if since is None:
            return
        away_s = time.monotonic() - since
        self._away_tries = 0
        log.warning(
            "flowdesk worker %s: the database is back after %.1f s; resuming",
            self.engine.owner,
            away_s,
        )
        if self.on_reachable is not None:
            self.on_reachable(away_s)

    def _stop_on(self, stop: threading.Event) -> None:
        stop.wait()
        if self.session is not None:
            self.session.poke()


def unknown_flow(name: str, registered: list[str]) -> UnknownFlowError:
    """What a worker says of a run of flow ``name``, which it does not have
    (``registered``: the flow names it has)."""
    has = ", ".join(registered) or "none"
    return UnknownFlowError(
        f"its flow {name!r} is not registered in this worker (its flows: {has}). Set "
        "FLOWDESK_FLOWS (the flows setting) on this worker to the module attribute that "
        """defines it, as where the run was started (FLOWDESK_FLOWS='["package.module:"""
        """attribute"]'), and restart it; a worker that has the flow resumes the run"""
    )
