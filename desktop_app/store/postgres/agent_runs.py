"""Durable agent runs in PostgreSQL: the same methods and records as
:class:`desktop_app.store.sqlite.agent_runs.SqliteAgentStore`, over the pool of a
:class:`~desktop_app.store.postgres.store.PostgresCheckpointStore` (same database,
same transaction discipline: one short transaction per method, retried and
commit-resolved by the checkpoint store).

PostgreSQL differences: the next message ``seq`` is taken after locking the
agent run's row (``FOR UPDATE``), since two connections may append at once;
the tool-result upsert qualifies the existing row's columns and adds an
integer, not a boolean.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

import psycopg.errors

from desktop_app.errors import (
    AgentRunCanceledError,
    AgentRunLeasedError,
    AgentRunStatusChangedError,
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
    StoreError,
)
from desktop_app.store.postgres.sql import no_nul, ts
from desktop_app.store.postgres.store import Conn, PostgresCheckpointStore
from desktop_app.store.records import (
    AgentRun,
    AgentStatus,
    ToolResult,
    agent_lease_lost_message,
    check_agent_run_fields,
)
from desktop_app.store.rows import agent_run_from_row, tool_result_from_row
from desktop_app.store.statements import POSTGRES_SQL as SQL
from desktop_app.store.statements import agent_run_values

_TIME_FIELDS = frozenset(
    {"created_at", "updated_at", "deadline_at", "expires_at", "retry_at", "lease_expires_at"}
)


class PostgresAgentStore:
    """Agent runs over the checkpoint store's pool (see module docstring)."""

    def __init__(self, checkpoints: PostgresCheckpointStore) -> None:
        self.checkpoints = checkpoints
        self.scope = checkpoints.scope

    def create(
        self,
        run: AgentRun,
        messages: Sequence[dict[str, Any]],
        tool: tuple[str, str, str, str | None] | None = None,
    ) -> None:
        """`AgentLog.create` on PostgreSQL (the first messages: system, user)."""

        def body(conn: Conn) -> None:
            conn.execute(SQL.insert_agent_run, agent_run_values(self.scope, run, no_nul(run.error)))
            self._append(conn, run.run_id, messages, run.created_at)
            if tool is not None:
                self._put_tool(conn, run.run_id, tool, run.created_at)

        try:
            self.checkpoints._tx(body)
        except StoreError as exc:  # by SQLSTATE class, never by message text
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise RevisionConflictError(f"agent run {run.run_id} already exists") from exc
            raise

    @staticmethod
    def _append(conn: Conn, run_id: str, messages: Sequence[dict[str, Any]], now: float) -> None:
        if not messages:
            return
        row = conn.execute(SQL.last_message_seq, (run_id,)).fetchone()
        seq = int(row[0]) + 1 if row is not None else 0
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO agent_messages(run_id, seq, role, body, created_at) "
                f"VALUES (%s,%s,%s,%s,{ts()})",
                [
                    (run_id, seq + i, m["role"], json.dumps(m, ensure_ascii=False), now)
                    for i, m in enumerate(messages)
                ],
            )

    @staticmethod
    def _put_tool(
        conn: Conn, run_id: str, tool: tuple[str, str, str, str | None], now: float
    ) -> None:
        """Upsert one tool-journal row (inside the caller's transaction)."""
        key, name, status, result = tool
        conn.execute(
            SQL.put_tool,
            (run_id, key, name, status, result, int(status == "in_progress"), now),
        )

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
        """`AgentLog.update` on PostgreSQL: one transaction that locks the run
        row ``FOR UPDATE`` first (message sequence numbers are taken under
        it; ``owner`` and ``expect_status`` are checked on the locked row);
        time fields are stored as ``timestamptz``, NULs in ``error`` become
        U+FFFD."""
        check_agent_run_fields(fields)
        sets = [f"updated_at={ts()}"]
        args: list[Any] = [now]
        for name, value in fields.items():
            if name in _TIME_FIELDS:
                sets.append(f"{name}={ts()}")
            else:
                sets.append(f"{name}=%s")
            if name == "pending_call" and value is not None:
                value = json.dumps(value)
            elif name == "error":
                value = no_nul(value)
            args.append(value)

        def body(conn: Conn) -> None:
            # lock the run first: message seq numbers are taken under it
            locked = conn.execute(
                "SELECT lease_owner, status FROM agent_runs WHERE run_id=%s AND scope=%s "
                "FOR UPDATE",
                (run_id, self.scope),
            ).fetchone()
            if locked is None:
                raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
            if owner is not None and locked[0] != owner:
                raise LeaseLostError(agent_lease_lost_message(run_id, locked[0], owner))
            if owner is not None and locked[1] == "canceled":  # fenced by a cancel
                raise AgentRunCanceledError(run_id)
            if expect_status is not None and locked[1] != expect_status:  # compare-and-set
                raise AgentRunStatusChangedError(run_id, expect_status, locked[1])
            self._append(conn, run_id, messages, now)
            if tool is not None:
                self._put_tool(conn, run_id, tool, now)
            conn.execute(
                f"UPDATE agent_runs SET {', '.join(sets)} WHERE run_id=%s AND scope=%s",
                (*args, run_id, self.scope),
            )

        self.checkpoints._tx(body)

    def claim(
        self,
        run_id: str,
        owner: str,
        expires_at: float,
        now: float,
        *,
        takes_over: str | None = None,
    ) -> AgentRun:
        """`AgentLog.claim` on PostgreSQL, the rule of :meth:`Lease.may_take`.
        Times are the caller's (the agent runtime's clock), as in the SQLite
        store."""
        free = " AND (lease_owner IS NULL OR lease_owner=%s"
        args: tuple[Any, ...] = (owner, expires_at, run_id, self.scope, owner)
        if takes_over is not None:
            # now = inf (the holder is known dead): to_timestamp('Infinity') is infinity
            free += f" OR (lease_owner=%s AND coalesce(lease_expires_at <= {ts()}, true))"
            args += (takes_over, now)
        free += ")"

        def body(conn: Conn) -> tuple[int, Any]:
            cur = conn.execute(
                f"UPDATE agent_runs SET lease_owner=%s, lease_expires_at={ts()} "
                f"WHERE run_id=%s AND scope=%s{free}",
                args,
            )
            row = conn.execute(SQL.get_agent_run, (run_id, self.scope)).fetchone()
            return cur.rowcount, row

        changed, row = self.checkpoints._tx(body)
        if row is None:
            raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
        run = agent_run_from_row(row)
        if changed != 1:
            raise AgentRunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        return run

    def release(self, run_id: str, owner: str) -> None:
        """`AgentLog.release` on PostgreSQL; wakes the workers (a run handed
        to them, or left ``running``, is theirs to resume now)."""
        self.checkpoints._tx(
            lambda conn: conn.execute(SQL.release_agent_run, (run_id, self.scope, owner))
        )
        self.checkpoints._changed(run_id, wake=True)

    def mark_reused(self, run_id: str, key: str) -> None:
        self.checkpoints._tx(lambda conn: conn.execute(SQL.mark_reused, (run_id, key)))

    def get(self, run_id: str) -> AgentRun:
        row = self.checkpoints._read(
            lambda conn: conn.execute(SQL.get_agent_run, (run_id, self.scope)).fetchone()
        )
        if row is None:
            raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
        return agent_run_from_row(row)

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.checkpoints._read(
            lambda conn: conn.execute(
                "SELECT body FROM agent_messages WHERE run_id=%s ORDER BY seq", (run_id,)
            ).fetchall()
        )
        return [json.loads(r[0]) for r in rows]

    def tool_result(self, run_id: str, key: str) -> ToolResult | None:
        row = self.checkpoints._read(
            lambda conn: conn.execute(SQL.tool_result, (run_id, key)).fetchone()
        )
        return None if row is None else tool_result_from_row(row)

    def tool_results(self, run_id: str) -> list[ToolResult]:
        rows = self.checkpoints._read(
            lambda conn: conn.execute(SQL.tool_results, (run_id,)).fetchall()
        )
        return [tool_result_from_row(r) for r in rows]

    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> list[AgentRun]:
        sql, args = SQL.list_agent_runs(self.scope, statuses, agent)
        return self.checkpoints._read(
            lambda conn: [agent_run_from_row(r) for r in conn.execute(sql, args)]
        )

    def list_page(self, *, offset: int, limit: int) -> builtins.list[AgentRun]:
        args = (self.scope, limit, offset)
        return self.checkpoints._read(
            lambda conn: [agent_run_from_row(r) for r in conn.execute(SQL.agent_runs_page, args)]
        )
