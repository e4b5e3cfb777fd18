"""An in-memory :class:`~desktop_app.store.protocol.CheckpointStore` for tests
and throw-away runs. Passes the same conformance suite as the SQLite store
(``tests/contract``). Checkpoints are copied through JSON on the way in, so a
value that the SQLite store could not save is refused here too.

Domain writes and queries need SQL: this store refuses them with
:class:`~desktop_app.errors.StoreError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from desktop_app.errors import (
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
    RunLeasedError,
    StoreError,
)
from desktop_app.store import codec
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointInfo,
    DomainWrite,
    Lease,
    RunRecord,
    RunStatus,
)

T = TypeVar("T")

# Process-wide, so two store objects with different scopes share one "file".
_SHARED: dict[str, tuple[dict[str, RunRecord], dict[str, dict[int, Checkpoint]], list[int]]] = {}


class InMemoryCheckpointStore:
    """Runs and checkpoints in process memory.

    Args:
        scope: runs saved under one scope are invisible from another.
        space: stores built with the same ``space`` name share their data
            (like two connections to one file); ``None`` gives a private space.
    """

    def __init__(self, *, scope: str = "default", space: str | None = None) -> None:
        self.scope = scope
        if space is None:
            self._runs: dict[str, RunRecord] = {}
            self._cps: dict[str, dict[int, Checkpoint]] = {}
            self._version = [0]
        else:
            self._runs, self._cps, self._version = _SHARED.setdefault(space, ({}, {}, [0]))
        self._lock = threading.Lock()

    @staticmethod
    def _frozen(cp: Checkpoint) -> Checkpoint:
        try:
            state = codec.loads(codec.dumps(dict(cp.state)))
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
            raise StoreError("domain writes need the SQLite store")
        if first.revision != 0 or run.run_id != first.run_id:
            raise ValueError("create_run needs the run's revision-0 checkpoint")
        frozen = self._frozen(first)
        with self._lock:
            if run.run_id in self._runs:
                raise RevisionConflictError(f"run {run.run_id} already exists; pick another run id")
            self._runs[run.run_id] = replace(run, scope=self.scope, status=first.status, revision=0)
            self._cps[run.run_id] = {0: frozen}
            self._version[0] += 1

    def append(
        self,
        checkpoint: Checkpoint,
        writes: Sequence[DomainWrite] = (),
        lease: Lease | None = None,
    ) -> None:
        if writes:
            raise StoreError("domain writes need the SQLite store")
        cp = self._frozen(checkpoint)
        with self._lock:
            run = self._run(cp.run_id)
            cps = self._cps[cp.run_id]
            if cp.revision in cps or run.revision != cp.revision - 1:
                raise RevisionConflictError(
                    f"run {cp.run_id}: revision {cp.revision} conflicts with the stored latest "
                    f"revision {run.revision}; another writer got there first."
                )
            if (
                lease is not None
                and run.lease_owner not in (None, lease.owner)
                and (run.lease_expires_at or 0.0) > lease.issued_at
            ):
                raise LeaseLostError(
                    f"run {cp.run_id} was taken over by {run.lease_owner} after this process's "
                    "lease expired; this process stops executing it."
                )
            if cp.status not in ("running", "pending"):
                run = replace(run, lease_owner=None, lease_expires_at=None)
            elif lease is not None:
                run = replace(run, lease_owner=lease.owner, lease_expires_at=lease.expires_at)
            cps[cp.revision] = cp
            self._version[0] += 1
            self._runs[cp.run_id] = replace(
                run,
                status=cp.status,
                revision=cp.revision,
                updated_at=cp.created_at,
                progress=cp.progress if cp.progress is not None else run.progress,
                error=cp.error,
            )

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        with self._lock:
            run = self._run(run_id)
            free = (
                run.lease_owner is None
                or run.lease_owner == lease.owner
                or (run.lease_expires_at or 0.0) <= now
            )
            if not free:
                raise RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at or 0.0)
            run = replace(run, lease_owner=lease.owner, lease_expires_at=lease.expires_at)
            self._runs[run_id] = run
            self._version[0] += 1
            return run

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            run = self._run(run_id)
            if run.lease_owner == owner:
                self._runs[run_id] = replace(run, lease_owner=None, lease_expires_at=None)
                self._version[0] += 1

    def latest(self, run_id: str) -> Checkpoint:
        with self._lock:
            run = self._run(run_id)
            return self._cps[run_id][run.revision]

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        with self._lock:
            self._run(run_id)
            cp = self._cps[run_id].get(revision)
        if cp is None:
            raise CheckpointNotFoundError(
                f"run {run_id} has no checkpoint at revision {revision} (pruned or never saved)"
            )
        return cp

    def history(self, run_id: str) -> list[CheckpointInfo]:
        with self._lock:
            self._run(run_id)
            cps = sorted(self._cps[run_id].values(), key=lambda c: c.revision)
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
    ) -> list[RunRecord]:
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if r.scope == self.scope
                and (statuses is None or r.status in statuses)
                and (flow_name is None or r.flow_name == flow_name)
            ]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=newest_first)
        end = None if limit is None else offset + limit
        return runs[offset:end]

    def delete_run(self, run_id: str) -> None:
        with self._lock:
            self._run(run_id)
            del self._runs[run_id]
            del self._cps[run_id]
            self._version[0] += 1

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
            self._version[0] += 1
        return len(doomed)

    def data_version(self) -> int:
        with self._lock:
            return self._version[0]

    def query(self, op: Callable[[Any], T]) -> T:
        raise StoreError("domain queries need the SQLite store")

    def close(self) -> None:
        return None
