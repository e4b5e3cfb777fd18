"""Durable agent runs in SQLite: the run row, append-only messages, tool results.

Shares the connection (and its lock) of a
:class:`~desktop_app.store.sqlite.store.SqliteCheckpointStore`, so agent runs and
flow runs live in one file and one ``BEGIN IMMEDIATE`` discipline. Every
method is one short transaction: a message append with its run update, a tool
result with its tool message, so a crash never leaves a tool result without
its record (or the reverse).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from desktop_app.errors import (
    AgentRunCanceledError,
    AgentRunLeasedError,
    AgentRunStatusChangedError,
    CheckpointCorruptError,
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
)
from desktop_app.store.records import (
    AGENT_TERMINAL,
    AgentRun,
    AgentStatus,
    Lease,
    ToolResult,
    agent_lease_lost_message,
    check_agent_run_fields,
)
from desktop_app.store.rows import agent_run_from_row, tool_result_from_row
from desktop_app.store.sqlite.store import SqliteCheckpointStore, lease_cond, row_checksum
from desktop_app.store.statements import SQLITE_SQL as SQL
from desktop_app.store.statements import agent_run_values

__all__ = ["AGENT_TERMINAL", "AgentRun", "AgentStatus", "SqliteAgentStore", "ToolResult"]


class SqliteAgentStore:
    """Agent runs over the checkpoint store's connection.

    Messages are stored as JSON objects (see ``desktop_app.agent.messages``);
    this module does not interpret them.
    """

    def __init__(self, checkpoints: SqliteCheckpointStore) -> None:
        self._cp = checkpoints
        self.conn = checkpoints.conn
        self.scope = checkpoints.scope
        self._lock = checkpoints._lock
        self.path = checkpoints.path

    def file_system_now(self) -> float | None:
        """The clock of the file system holding the database (UTC epoch
        seconds), which no process's own clock moves: the checkpoint store's
        (``SqliteCheckpointStore.file_system_now``, ``None`` when it has
        none). What an agent's writes into its runs are checked against
        (:func:`~desktop_app.flow.clock.default_clock`)."""
        return self._cp.file_system_now()

    def create(
        self,
        run: AgentRun,
        messages: Sequence[dict[str, Any]],
        tool: tuple[str, str, str, str | None] | None = None,
    ) -> None:
        """`AgentLog.create` on SQLite (the first messages: system, user)."""

        def exists(exc: Exception) -> Exception:
            return RevisionConflictError(f"agent run {run.run_id} already exists")

        with self._lock, self._cp._write(exists):
            self.conn.execute(SQL.insert_agent_run, agent_run_values(self.scope, run, run.error))
            self._append(run.run_id, messages, run.created_at)
            if tool is not None:
                self._put_tool(run.run_id, tool, run.created_at)

    def _append(self, run_id: str, messages: Sequence[dict[str, Any]], now: float) -> None:
        # max(seq) + 1 is safe here: it runs inside BEGIN IMMEDIATE, which holds
        # SQLite's one write lock (the PostgreSQL store locks the run row first)
        row: Any = self.conn.execute(SQL.last_message_seq, (run_id,)).fetchone()
        seq = int(row[0]) + 1
        for i, m in enumerate(messages):
            row = (run_id, seq + i, m["role"], json.dumps(m, ensure_ascii=False), now)
            self.conn.execute(
                "INSERT INTO agent_messages(run_id, seq, role, body, created_at, checksum) "
                "VALUES (?,?,?,?,?,?)",
                (*row, row_checksum(row)),
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
        """`AgentLog.update` on SQLite: one ``BEGIN IMMEDIATE`` transaction
        (tool results upserted with ``ON CONFLICT``); ``owner`` and
        ``expect_status`` are conditions of its ``UPDATE``."""
        check_agent_run_fields(fields)
        sets = ["updated_at=?"]
        args: list[Any] = [now]
        for name, value in fields.items():
            sets.append(f"{name}=?")
            args.append(
                json.dumps(value) if name == "pending_call" and value is not None else value
            )
        with self._lock, self._cp._write():
            if messages:
                self._append(run_id, messages, now)
            if tool is not None:
                self._put_tool(run_id, tool, now)
            where = "run_id=? AND scope=?"
            wargs: list[Any] = [run_id, self.scope]
            if owner is not None:  # the executing process: fenced by its lease and a cancel
                where += " AND lease_owner=? AND status != 'canceled'"
                wargs.append(owner)
            if expect_status is not None:  # a compare-and-set on the status the caller read
                where += " AND status=?"
                wargs.append(expect_status)
            self.conn.execute(
                f"UPDATE agent_runs SET {', '.join(sets)} WHERE {where}", (*args, *wargs)
            )
            if self.conn.changes() != 1:
                self._missing_or_lost(run_id, owner, expect_status)

    def _put_tool(self, run_id: str, tool: tuple[str, str, str, str | None], now: float) -> None:
        """Upsert one tool-journal row (inside the caller's transaction)."""
        key, name, status, result = tool
        self.conn.execute(
            SQL.put_tool,
            (run_id, key, name, status, result, int(status == "in_progress"), now),
        )

    def _missing_or_lost(self, run_id: str, owner: str | None, expect: str | None) -> None:
        """Why a conditioned ``UPDATE`` changed no row (inside its
        transaction, which the raised error rolls back)."""
        row = self.conn.execute(
            "SELECT lease_owner, status FROM agent_runs WHERE run_id=? AND scope=?",
            (run_id, self.scope),
        ).fetchone()
        if row is None:
            raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
        if owner is not None and row[0] != owner:
            raise LeaseLostError(agent_lease_lost_message(run_id, row[0], owner))
        if owner is not None and row[1] == "canceled":
            raise AgentRunCanceledError(run_id)
        raise AgentRunStatusChangedError(run_id, str(expect), row[1])

    def claim(
        self,
        run_id: str,
        owner: str,
        expires_at: float,
        now: float,
        *,
        takes_over: str | None = None,
    ) -> AgentRun:
        """`AgentLog.claim` on SQLite: one ``BEGIN IMMEDIATE`` transaction,
        the rule of :meth:`Lease.may_take`."""
        cond, cargs = lease_cond(Lease(owner, expires_at, now, takes_over=takes_over), now)
        with self._lock, self._cp._write():
            self.conn.execute(
                "UPDATE agent_runs SET lease_owner=?, lease_expires_at=? WHERE run_id=? "
                f"AND scope=? AND {cond}",
                (owner, expires_at, run_id, self.scope, *cargs),
            )
            claimed = self.conn.changes() == 1
            run = self.get(run_id)
        if not claimed:
            raise AgentRunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        return run

    def release(self, run_id: str, owner: str) -> None:
        """`AgentLog.release` on SQLite."""
        with self._lock, self._cp._write():
            self.conn.execute(SQL.release_agent_run, (run_id, self.scope, owner))

    def mark_reused(self, run_id: str, key: str) -> None:
        with self._lock, self._cp._write():
            self.conn.execute(SQL.mark_reused, (run_id, key))

    def get(self, run_id: str) -> AgentRun:
        with self._lock, self._cp._read():
            row = self.conn.execute(SQL.get_agent_run, (run_id, self.scope)).fetchone()
        if row is None:
            raise CheckpointNotFoundError(f"no agent run {run_id} in scope {self.scope!r}")
        return agent_run_from_row(row)

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """`AgentLog.messages` on SQLite: each row is checked against its
        checksum; CheckpointCorruptError's ``revision`` is the message's
        sequence number."""
        with self._lock, self._cp._read():
            rows: list[Any] = self.conn.execute(
                "SELECT run_id, seq, role, body, created_at, checksum FROM agent_messages "
                "WHERE run_id=? ORDER BY seq",
                (run_id,),
            ).fetchall()
        for r in rows:
            if r[5] is not None and row_checksum(r[:5]) != r[5]:
                raise CheckpointCorruptError(run_id, int(r[1]), what="agent message")
        return [json.loads(r[3]) for r in rows]

    def tool_result(self, run_id: str, key: str) -> ToolResult | None:
        with self._lock, self._cp._read():
            row = self.conn.execute(SQL.tool_result, (run_id, key)).fetchone()
        return None if row is None else tool_result_from_row(row)

    def tool_results(self, run_id: str) -> list[ToolResult]:
        with self._lock, self._cp._read():
            rows = self.conn.execute(SQL.tool_results, (run_id,)).fetchall()
        return [tool_result_from_row(r) for r in rows]

    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> list[AgentRun]:
        sql, args = SQL.list_agent_runs(self.scope, statuses, agent)
        with self._lock, self._cp._read():
            return [agent_run_from_row(r) for r in self.conn.execute(sql, args)]

    def list_page(self, *, offset: int, limit: int) -> builtins.list[AgentRun]:
        with self._lock, self._cp._read():
            return [
                agent_run_from_row(r)
                for r in self.conn.execute(SQL.agent_runs_page, (self.scope, limit, offset))
            ]
