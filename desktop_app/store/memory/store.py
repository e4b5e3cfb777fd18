"""An in-memory :class:`~desktop_app.store.protocol.CheckpointStore` for tests
and throw-away runs. Passes the same conformance suite as the SQLite store
(``tests/contract``). Checkpoints are copied through JSON on the way in, so a
value that the SQLite store could not save is refused here too.

Domain writes and queries need SQL: this store does not declare the
``sql`` capability and refuses them with :class:`~desktop_app.errors.StoreError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from desktop_app.errors import (
    CheckpointNotFoundError,
    DuplicateFlowKeyError,
    FlowdeskError,
    LeaseLostError,
    QueryRefusedError,
    RevisionConflictError,
    RunLeasedError,
    StoreError,
)
from desktop_app.store import codec
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import (
    RUNNABLE_STATUSES,
    Checkpoint,
    CheckpointInfo,
    DomainWrite,
    Event,
    Intent,
    Lease,
    RunHead,
    RunRecord,
    RunStatus,
    Signal,
    SignalId,
    SqlTx,
    Withdrawal,
)
from desktop_app.store.records import claim_time, lease_is_free, lease_lost_message
from desktop_app.store.rows import (
    check_wait_ids,
    claim_is_free,
    detached,
    same_signal_or_refuse,
    withdrawable,
)

LIVE = ("pending", "running", "waiting", "failed")


class _Space:
    """Everything one in-memory "file" holds."""

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.cps: dict[str, dict[int, Checkpoint]] = {}
        self.version = 0
        self.signals: list[dict[str, Any]] = []
        self.events: list[Event] = []
        self.outbox: dict[str, Intent] = {}
        #: intent_id -> (claimed_by, claim_expires_at)
        self.claims: dict[str, tuple[str, float]] = {}
        #: one lock per "file": store objects sharing a space exclude each other
        #: (reentrant: ``update_latest_withdrawing`` holds it across two writes)
        self.lock = threading.RLock()
        self.update_lock = threading.Lock()


T = TypeVar("T")
_NO_SQL = (
    "domain writes and queries need SQL (a store with the 'sql' capability: SQLite or "
    "PostgreSQL); the in-memory store has none"
)

# Process-wide, so two store objects with different scopes share one "file".
_SHARED: dict[str, _Space] = {}


class InMemoryCheckpointStore:
    """Runs and checkpoints in process memory.

    Args:
        scope: runs saved under one scope are invisible from another.
        space: stores built with the same ``space`` name share their data
            (like two connections to one file); ``None`` gives a private space.
    """

    #: no ``sql``: domain writes and queries are refused
    capabilities: frozenset[str] = frozenset({"append_batch", "group_commit"})

    def __init__(
        self,
        *,
        scope: str = "default",
        space: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.scope = scope
        self._clock = clock if clock is not None else time.time
        self._space = _Space() if space is None else _SHARED.setdefault(space, _Space())
        self._runs = self._space.runs
        self._cps = self._space.cps
        self._lock = self._space.lock
        self._update_lock = self._space.update_lock

    @staticmethod
    def _frozen(cp: Checkpoint) -> Checkpoint:
        check_wait_ids(cp)  # as the SQL stores refuse it
        try:
            state = codec.loads(codec.dumps(dict(cp.state)))  # as a stored row reads back
        except (TypeError, ValueError) as exc:
            raise StoreError(f"run {cp.run_id}: state is not JSON-serialisable: {exc}") from exc
        return replace(cp, state=state, steps=dict(cp.steps))

    def _run(self, run_id: str) -> RunRecord:
        run = self._runs.get(run_id)
        if run is None or run.scope != self.scope:
            raise CheckpointNotFoundError(f"no run {run_id} in scope {self.scope!r}")
        return run

    def create_run(
        self, run: RunRecord, first: Checkpoint, writes: Sequence[DomainWrite] = ()
    ) -> None:
        if writes:
            raise StoreError(_NO_SQL)
        if first.revision != 0 or run.run_id != first.run_id:
            raise ValueError("create_run needs the run's revision-0 checkpoint")
        frozen = self._frozen(first)
        with self._lock:
            if run.run_id in self._runs:
                raise RevisionConflictError(f"run {run.run_id} already exists; pick another run id")
            if run.flow_key is not None and any(
                r.flow_key == run.flow_key
                and r.flow_name == run.flow_name
                and r.scope == self.scope
                and r.status in LIVE
                for r in self._runs.values()
            ):
                raise DuplicateFlowKeyError(
                    f"a live run of {run.flow_name!r} with flow key {run.flow_key!r} exists"
                )
            self._runs[run.run_id] = replace(run, scope=self.scope, status=first.status, revision=0)
            self._cps[run.run_id] = {0: frozen}
            self._space.version += 1

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
        if writes:
            raise StoreError(_NO_SQL)
        cp = self._frozen(checkpoint)
        with self._lock:
            for signal_id, _ in consume:
                if self._space.signals[signal_id - 1]["consumed_by"] is not None:
                    raise RevisionConflictError(
                        f"signal {signal_id} was consumed by another wait first"
                    )
            if any(i.intent_id in self._space.outbox for i in intents):
                raise RevisionConflictError("an outbox intent with this id exists already")
            run = self._run(cp.run_id)
            cps = self._cps[cp.run_id]
            moved = cp.revision in cps or run.revision != cp.revision - 1
            if moved and lease is not None and run.lease_owner not in (None, lease.owner):
                raise LeaseLostError(
                    f"run {cp.run_id} is held by a live process ({run.lease_owner}) that took "
                    "it over; this process stops executing it."
                )
            if moved:
                raise RevisionConflictError(
                    f"run {cp.run_id}: revision {cp.revision} conflicts with the stored latest "
                    f"revision {run.revision}; another writer got there first. Reload the run "
                    "and try again."
                )
            if lease is not None and not lease.may_take(
                run.lease_owner, run.lease_expires_at, lease.issued_at
            ):
                raise LeaseLostError(lease_lost_message(cp.run_id, run.lease_owner, lease))
            if cp.status not in ("running", "pending"):
                run = replace(run, lease_owner=None, lease_expires_at=None)
            elif lease is not None:
                run = replace(run, lease_owner=lease.owner, lease_expires_at=lease.expires_at)
            cps[cp.revision] = cp
            for signal_id, wait_id in consume:
                self._space.signals[signal_id - 1]["consumed_by"] = wait_id
            for intent in intents:
                self._space.outbox[intent.intent_id] = intent
            self._space.version += 1
            self._runs[cp.run_id] = replace(
                run,
                status=cp.status,
                revision=cp.revision,
                updated_at=cp.created_at,
                progress=cp.progress if cp.progress is not None else run.progress,
                error=cp.error,
            )

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        """Append each request as :meth:`append` does (or create its run, as
        :meth:`create_run` does); one request's error (returned in its slot)
        leaves the others appended. See
        :class:`~desktop_app.store.group_commit.BatchAppender`."""
        results: list[BaseException | None] = []
        for r in requests:
            try:
                if r.run is not None:
                    self.create_run(r.run, r.checkpoint, r.writes)
                else:
                    self.append(
                        r.checkpoint, r.writes, r.lease, intents=r.intents, consume=r.consume
                    )
            except FlowdeskError as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    def update_latest(self, run_id: str, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        with self._update_lock:
            for _ in range(1000):
                cp = change(self.latest(run_id))
                try:
                    self.append(cp)
                except LeaseLostError:
                    raise
                except RevisionConflictError:
                    continue  # a driver appended in between: read again
                return cp
            raise RevisionConflictError(f"run {run_id} kept changing; try again")

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
        """See :meth:`desktop_app.store.protocol.Outbox.update_latest_withdrawing`
        (both under the store's locks: no other writer appends in between, and
        no reader sees one without the other)."""
        with self._update_lock, self._lock:  # in update_latest's order
            cp = change(self.latest(run_id))
            self.append(cp)
            done = self.withdraw_intents(
                run_id, reason, presumed_dead=presumed_dead, presumed_alive=presumed_alive, now=now
            )
        return cp, done

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        with self._lock:
            run = self._run(run_id)
            if not lease.may_take(run.lease_owner, run.lease_expires_at, claim_time(lease, now)):
                raise RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
            run = replace(run, lease_owner=lease.owner, lease_expires_at=lease.expires_at)
            self._runs[run_id] = run
            self._space.version += 1
            return run

    def now(self) -> float:
        """The process clock, or the clock injected at construction."""
        return self._clock()

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
        at = self.now() if now is None else now
        wake = set(self.wakeable_runs(at, limit=10**9)) if wakeable else set()
        with self._lock:
            candidates = sorted(
                (
                    r
                    for r in self._runs.values()
                    if r.scope == self.scope
                    and (r.status in statuses or r.run_id in wake)
                    and (flows is None or r.flow_name in flows)
                ),
                key=lambda r: (r.status not in statuses, r.created_at, r.run_id),
            )
            claimed: list[RunRecord] = []
            for run in candidates:
                if len(claimed) >= limit:
                    break
                if lease_is_free(run, owner, at, presumed_dead, presumed_alive):
                    run = replace(run, lease_owner=owner, lease_expires_at=at + ttl_s)
                    self._runs[run.run_id] = run
                    claimed.append(run)
            if claimed:
                self._space.version += 1
            return claimed

    def renew(self, run_ids: Sequence[str], lease: Lease) -> set[str]:
        with self._lock:
            renewed: set[str] = set()
            for run_id in run_ids:
                run = self._runs.get(run_id)
                if (
                    run is not None
                    and run.scope == self.scope
                    and run.lease_owner == lease.owner
                    and run.status in ("pending", "running")
                ):
                    self._runs[run_id] = replace(run, lease_expires_at=lease.expires_at)
                    renewed.add(run_id)
            if renewed:
                self._space.version += 1
            return renewed

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            run = self._run(run_id)
            if run.lease_owner == owner:
                self._runs[run_id] = replace(run, lease_owner=None, lease_expires_at=None)
                self._space.version += 1

    def latest(self, run_id: str) -> Checkpoint:
        with self._lock:
            run = self._run(run_id)
            return detached(self._cps[run_id][run.revision])

    def head(self, run_id: str) -> RunHead:
        with self._lock:
            run = self._run(run_id)
            return RunHead(run, detached(self._cps[run_id][run.revision]))

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        with self._lock:
            self._run(run_id)
            cp = self._cps[run_id].get(revision)
        if cp is None:
            raise CheckpointNotFoundError(
                f"run {run_id} has no checkpoint at revision {revision} (pruned or never saved)"
            )
        return detached(cp)

    def history(self, run_id: str) -> list[CheckpointInfo]:
        with self._lock:
            self._run(run_id)
            cps = sorted(self._cps[run_id].values(), key=lambda c: c.revision)
        return [
            CheckpointInfo(c.run_id, c.revision, c.status, c.step_id, c.created_at) for c in cps
        ]

    def history_page(self, run_id: str, *, after: int = -1, limit: int) -> list[CheckpointInfo]:
        with self._lock:
            self._run(run_id)
            cps = sorted(
                (c for c in self._cps[run_id].values() if c.revision > after),
                key=lambda c: c.revision,
            )[:limit]
        return [
            CheckpointInfo(c.run_id, c.revision, c.status, c.step_id, c.created_at) for c in cps
        ]

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            return self._run(run_id)

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
        if run_id_prefix == "":
            raise ValueError("a run id prefix must not be empty")
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if r.scope == self.scope
                and (statuses is None or r.status in statuses)
                and (flow_name is None or r.flow_name == flow_name)
                and (tenant_id is None or r.context.get("tenant_id") == tenant_id)
                and (session_id is None or r.context.get("session_id") == session_id)
                and (flow_key is None or r.flow_key == flow_key)
                and (run_id_prefix is None or r.run_id.startswith(run_id_prefix))
            ]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=newest_first)
        end = None if limit is None else offset + limit
        return runs[offset:end]

    def runs_of_other_versions(self, flow_name: str, version: str) -> list[RunRecord]:
        return [
            r
            for r in self.list_runs(
                statuses=("pending", "running", "waiting", "failed"), flow_name=flow_name
            )
            if r.flow_version != version
        ]

    def delete_run(self, run_id: str) -> None:
        with self._lock:
            self._run(run_id)
            del self._runs[run_id]
            del self._cps[run_id]
            self._space.version += 1

    def prune(self, run_id: str, keep_last_n: int) -> int:
        if keep_last_n < 1:
            raise ValueError(
                "keep_last_n must be at least 1: the latest checkpoint is never pruned"
            )
        with self._lock:
            run = self._run(run_id)
            cps = self._cps[run_id]
            doomed = [r for r in cps if r <= run.revision - keep_last_n]
            for r in doomed:
                del cps[r]
            self._space.version += 1
        return len(doomed)

    def data_version(self) -> int:
        with self._lock:
            return self._space.version

    # -- waits, signals, events ------------------------------------------

    def _pending_waits(self) -> list[tuple[str, Any]]:
        out = []
        for run_id, run in self._runs.items():
            if run.scope != self.scope:
                continue
            for w in self._cps[run_id][run.revision].waits:
                out.append((run_id, w))
        return out

    def send_signal(
        self, name: str, key: str, payload: Any, now: float, dedupe_key: str | None = None
    ) -> SignalId:
        body = codec.dumps(payload)
        with self._lock:
            if dedupe_key is not None and (first := self.signal_by_dedupe_key(dedupe_key)):
                same = same_signal_or_refuse(first, dedupe_key, name, key, body)
                return SignalId(same, stored=False)
            self._space.signals.append(
                {
                    "name": name,
                    "key": key,
                    "payload": codec.loads(body),
                    "sent_at": now,
                    "dedupe_key": dedupe_key,
                    "consumed_by": None,
                    "scope": self.scope,
                }
            )
            self._space.version += 1
            return SignalId(len(self._space.signals))

    def signal_by_dedupe_key(self, dedupe_key: str) -> Signal | None:
        with self._lock:
            for i, s in enumerate(self._space.signals, start=1):
                if (s["scope"], s["dedupe_key"]) == (self.scope, dedupe_key):
                    return Signal(i, s["name"], s["key"], s["payload"], s["sent_at"])
        return None

    def next_signal(self, name: str, key: str) -> Signal | None:
        with self._lock:
            for i, s in enumerate(self._space.signals, start=1):
                if (s["scope"], s["name"], s["key"]) == (self.scope, name, key) and (
                    s["consumed_by"] is None
                ):
                    return Signal(i, name, key, s["payload"], s["sent_at"])
        return None

    def signal_consumer(self, signal_id: int) -> str | None:
        with self._lock:
            if not 0 < signal_id <= len(self._space.signals):
                return None
            s = self._space.signals[signal_id - 1]
            return None if s["scope"] != self.scope else s["consumed_by"]

    def publish_event(self, type_: str, payload: Any, now: float) -> int:
        with self._lock:
            event = Event(
                len(self._space.events) + 1, type_, codec.loads(codec.dumps(payload)), now
            )
            self._space.events.append(event)
            self._space.version += 1
            return event.event_id

    def first_event(self, type_: str, since: float) -> Event | None:
        with self._lock:
            found = [e for e in self._space.events if e.type == type_ and e.published_at >= since]
        return min(found, key=lambda e: (e.published_at, e.event_id)) if found else None

    def due_waits(self, now: float, limit: int = 1000) -> list[tuple[str, str]]:
        with self._lock:
            due = [
                (w.deadline_at, run_id, w.wait_id)
                for run_id, w in self._pending_waits()
                if w.deadline_at is not None and w.deadline_at <= now
            ]
        return [(r, w) for _, r, w in sorted(due)[:limit]]

    def next_deadline(self) -> float | None:
        with self._lock:
            times = [w.deadline_at for _, w in self._pending_waits() if w.deadline_at is not None]
        return min(times) if times else None

    def wakeable_runs(self, now: float, limit: int = 1000) -> list[str]:
        # as the SQL stores: due deadlines first, by deadline, then deliveries
        with self._lock:
            best: dict[str, tuple[int, float]] = {}

            def note(run_id: str, prio: int, due: float) -> None:
                best[run_id] = min(best.get(run_id, (prio, due)), (prio, due))

            for run_id, w in self._pending_waits():
                if w.deadline_at is not None and w.deadline_at <= now:
                    note(run_id, 0, w.deadline_at)
                if w.kind == "signal" and any(
                    s["scope"] == self.scope
                    and (s["name"], s["key"]) == (w.name, w.key)
                    and s["consumed_by"] is None
                    for s in self._space.signals
                ):
                    note(run_id, 1, float("inf"))
                if w.kind == "event" and any(
                    e.type == w.name and e.published_at >= w.created_at for e in self._space.events
                ):
                    note(run_id, 1, float("inf"))
            for run in self._runs.values():
                if (
                    run.scope == self.scope
                    and run.status == "waiting"
                    and run.deadline_at is not None
                    and run.deadline_at <= now
                ):
                    note(run.run_id, 0, run.deadline_at)
        return sorted(best, key=lambda r: (*best[r], r))[:limit]

    def runs_waiting_for(self, kind: str, name: str, key: str | None = None) -> list[str]:
        with self._lock:
            began: dict[str, float] = {}
            for run_id, w in self._pending_waits():
                if w.kind == kind and w.name == name and (key is None or w.key == key):
                    began[run_id] = min(began.get(run_id, w.created_at), w.created_at)
        return sorted(began, key=lambda r: (began[r], r))

    # -- outbox --------------------------------------------------------------

    def intents(
        self, statuses: Sequence[str], limit: int = 100, *, run_id: str | None = None
    ) -> list[Intent]:
        with self._lock:
            out = [
                i
                for i in self._space.outbox.values()
                if i.status in statuses
                and (run_id is None or i.run_id == run_id)
                and i.run_id in self._runs
                and self._runs[i.run_id].scope == self.scope
            ]
        return out[:limit]

    def delivered_runs(self, flow_name: str, limit: int = 100) -> list[str]:
        with self._lock:
            kept = {
                i.run_id
                for i in self._space.outbox.values()
                if i.status in ("pending", "sending", "failed")
            }
            runs = [
                r
                for r in self._runs.values()
                if r.scope == self.scope
                and r.flow_name == flow_name
                and r.status == "completed"
                and r.run_id not in kept
            ]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return [r.run_id for r in runs[:limit]]

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
        at = self.now() if now is None else now
        out: list[Intent] = []
        with self._lock:
            for intent in list(self._space.outbox.values()):
                if len(out) >= limit:
                    break
                run = self._runs.get(intent.run_id)
                if run is None or run.scope != self.scope:
                    continue
                if intent.status not in ("pending", "sending"):
                    continue
                if destinations is not None and intent.destination not in destinations:
                    continue
                holder, until = self._space.claims.get(intent.intent_id, (None, None))
                if not claim_is_free(holder, until, owner, at, presumed_dead, presumed_alive):
                    continue
                self._space.claims[intent.intent_id] = (owner, at + ttl_s)
                out.append(replace(intent, interrupted=intent.status == "sending"))
            if out:
                self._space.version += 1
        return out

    def renew_intent_claim(
        self, intent_id: str, owner: str, ttl_s: float, *, now: float | None = None
    ) -> bool:
        at = self.now() if now is None else now
        with self._lock:
            intent = self._space.outbox.get(intent_id)
            claim = self._space.claims.get(intent_id)
            if intent is None or intent.status != "sending" or claim is None or claim[0] != owner:
                return False
            self._space.claims[intent_id] = (owner, at + ttl_s)
            self._space.version += 1
            return True

    def release_intent(self, intent_id: str, owner: str, error: str) -> bool:
        with self._lock:
            intent = self._space.outbox.get(intent_id)
            claim = self._space.claims.get(intent_id)
            if intent is None or intent.status != "sending" or claim is None or claim[0] != owner:
                return False
            self._space.outbox[intent_id] = replace(intent, last_error=error)
            self._space.claims.pop(intent_id, None)
            self._space.version += 1
            return True

    def mark_intent(
        self,
        intent_id: str,
        status: str,
        now: float,
        *,
        receipt: Any = None,
        error: str | None = None,
        expect: str | None = None,
    ) -> bool:
        with self._lock:
            intent = self._space.outbox.get(intent_id)
            if intent is None or (expect is not None and intent.status != expect):
                return False
            if status == "sending":
                intent = replace(intent, status="sending", attempts=intent.attempts + 1)
            elif status == "delivered":
                intent = replace(intent, status="delivered", receipt=receipt, last_error=None)
            else:
                intent = replace(intent, status=status, last_error=error)  # type: ignore[arg-type]
            self._space.outbox[intent_id] = intent
            if status != "sending":
                self._space.claims.pop(intent_id, None)
            self._space.version += 1
            return True

    def withdraw_intents(
        self,
        run_id: str,
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> Withdrawal:
        at = self.now() if now is None else now
        done = Withdrawal([], [])
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.scope != self.scope:
                return done
            for intent in list(self._space.outbox.values()):
                if intent.run_id != run_id or intent.status not in ("pending", "sending"):
                    continue
                holder, until = self._space.claims.get(intent.intent_id, (None, None))
                if withdrawable(intent.status, holder, until, at, presumed_dead, presumed_alive):
                    self._space.outbox[intent.intent_id] = replace(
                        intent, status="failed", last_error=reason
                    )
                    self._space.claims.pop(intent.intent_id, None)
                    done.withdrawn.append(intent)
                else:
                    done.in_flight.append(intent)
            if done.withdrawn:
                self._space.version += 1
        return done

    def undelivered_intents(self) -> dict[str, int]:
        return self._count_intents(("pending", "sending"))

    def open_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(run_id, ("pending", "sending"))

    def failed_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(run_id, ("failed",))

    def _intents_of(self, run_id: str, statuses: tuple[str, ...]) -> list[Intent]:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.scope != self.scope:
                return []
            return [
                i
                for i in self._space.outbox.values()
                if i.run_id == run_id and i.status in statuses
            ]

    def sending_intents(self) -> dict[str, int]:
        return self._count_intents(("sending",))

    def sending_claims(self, run_id: str) -> dict[str, tuple[str | None, float | None]]:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.scope != self.scope:
                return {}
            return {
                i.intent_id: self._space.claims.get(i.intent_id, (None, None))
                for i in self._space.outbox.values()
                if i.run_id == run_id and i.status == "sending"
            }

    def _count_intents(self, statuses: tuple[str, ...]) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._lock:
            for i in self._space.outbox.values():
                run = self._runs.get(i.run_id)
                if i.status in statuses and run and run.scope == self.scope:
                    counts[i.run_id] = counts.get(i.run_id, 0) + 1
        return counts

    def query(self, op: Callable[[SqlTx], T]) -> T:
        raise QueryRefusedError(_NO_SQL)

    def write(self, op: Callable[[SqlTx], T]) -> T:
        raise StoreError(_NO_SQL)

    def close(self) -> None:
        return None
