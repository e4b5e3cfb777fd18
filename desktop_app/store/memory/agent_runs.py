"""An in-memory :class:`~desktop_app.store.protocol.AgentLog` for tests and
throw-away agents. Same contract as the SQLite agent store (the conformance
suite runs on both): leases, append-only messages, tool results keyed by
tool name + canonical input. Messages are copied through JSON on the way in
and out, as a database would."""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from desktop_app.errors import (
    AgentRunCanceledError,
    AgentRunLeasedError,
    AgentRunStatusChangedError,
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
)
from desktop_app.store.records import (
    AgentRun,
    AgentStatus,
    Lease,
    ToolResult,
    agent_lease_lost_message,
    check_agent_run_fields,
)


class InMemoryAgentLog:
    """Agent runs in process memory.

    Args:
        scope: runs of one scope are invisible from another.
    """

    def __init__(self, *, scope: str = "default") -> None:
        self.scope = scope
        self._lock = threading.Lock()
        self._runs: dict[str, AgentRun] = {}
        self._messages: dict[str, list[str]] = {}
        self._tools: dict[str, dict[str, tuple[ToolResult, float]]] = {}

    def _get(self, run_id: str) -> AgentRun:
        run = self._runs.get(run_id)
        if run is None:
            raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
        return run

    def create(
        self,
        run: AgentRun,
        messages: Sequence[dict[str, Any]],
        tool: tuple[str, str, str, str | None] | None = None,
    ) -> None:
        with self._lock:
            if run.run_id in self._runs:
                raise RevisionConflictError(f"agent run {run.run_id} already exists")
            self._runs[run.run_id] = replace(run, pending_call=None)
            self._messages[run.run_id] = [json.dumps(m, ensure_ascii=False) for m in messages]
            self._tools[run.run_id] = {}
            if tool is not None:
                self._put_tool(run.run_id, tool, run.created_at)

    def _put_tool(self, run_id: str, tool: tuple[str, str, str, str | None], now: float) -> None:
        """Upsert one tool-journal row (the caller holds the lock)."""
        key, name, status, result = tool
        old = self._tools[run_id].get(key)
        starts = int(status == "in_progress")
        if old is None:
            rec = ToolResult(key, name, status, result, starts, 0)  # type: ignore[arg-type]
        else:
            rec = replace(
                old[0],
                status=status,  # type: ignore[arg-type]
                result=result if result is not None else old[0].result,
                attempts=old[0].attempts + starts,
            )
        self._tools[run_id][key] = (rec, now)

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
        check_agent_run_fields(fields)
        with self._lock:
            run = self._get(run_id)
            if owner is not None and run.lease_owner != owner:
                raise LeaseLostError(agent_lease_lost_message(run_id, run.lease_owner, owner))
            if owner is not None and run.status == "canceled":  # fenced by a cancel
                raise AgentRunCanceledError(run_id)
            if expect_status is not None and run.status != expect_status:  # compare-and-set
                raise AgentRunStatusChangedError(run_id, expect_status, run.status)
            if "pending_call" in fields and fields["pending_call"] is not None:
                fields["pending_call"] = json.loads(json.dumps(fields["pending_call"]))
            self._messages[run_id].extend(json.dumps(m, ensure_ascii=False) for m in messages)
            if tool is not None:
                self._put_tool(run_id, tool, now)
            self._runs[run_id] = replace(run, updated_at=now, **fields)

    def claim(
        self,
        run_id: str,
        owner: str,
        expires_at: float,
        now: float,
        *,
        takes_over: str | None = None,
    ) -> AgentRun:
        lease = Lease(owner, expires_at, now, takes_over=takes_over)
        with self._lock:
            run = self._get(run_id)
            if not lease.may_take(run.lease_owner, run.lease_expires_at, now):
                raise AgentRunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
            run = replace(run, lease_owner=owner, lease_expires_at=expires_at)
            self._runs[run_id] = run
            return run

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.lease_owner == owner:
                self._runs[run_id] = replace(run, lease_owner=None, lease_expires_at=None)

    def mark_reused(self, run_id: str, key: str) -> None:
        with self._lock:
            old = self._tools.get(run_id, {}).get(key)
            if old is not None:
                self._tools[run_id][key] = (replace(old[0], reused=old[0].reused + 1), old[1])

    def get(self, run_id: str) -> AgentRun:
        with self._lock:
            return self._get(run_id)

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(m) for m in self._messages.get(run_id, [])]

    def tool_result(self, run_id: str, key: str) -> ToolResult | None:
        with self._lock:
            got = self._tools.get(run_id, {}).get(key)
        return None if got is None else got[0]

    def tool_results(self, run_id: str) -> list[ToolResult]:
        with self._lock:
            items = list(self._tools.get(run_id, {}).values())
        return [rec for rec, _ in sorted(items, key=lambda item: item[1])]

    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> list[AgentRun]:
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if (statuses is None or r.status in statuses)
                and (agent is None or r.agent == agent)
            ]
        return sorted(runs, key=lambda r: (r.created_at, r.run_id))

    def list_page(self, *, offset: int, limit: int) -> builtins.list[AgentRun]:
        newest = sorted(self.list(), key=lambda r: (r.created_at, r.run_id), reverse=True)
        return newest[offset : offset + limit]
