"""The SQL both built-in backends run, written once and rendered per dialect.

The SQLite and PostgreSQL stores share their tables, so most statements
differ only in three places: the placeholder (``?`` or ``%s``), how a time
parameter is written (SQLite stores UTC epoch seconds as ``REAL``;
PostgreSQL a ``timestamptz``, written ``to_timestamp(%s)`` and read
``extract(epoch from col)::float8``), and how a list parameter is matched
(``IN (?,?,?)`` with one parameter a value, or ``= ANY(%s)`` with one list).
:class:`Dialect` says which; :class:`Statements` holds every shared
statement rendered once for one dialect (at import, so a step builds no SQL
strings it did not build before). What only one backend does (PostgreSQL's
database clock, ``FOR UPDATE SKIP LOCKED``, SQLite's row checksums and
``CROSS JOIN`` planner hints) stays in its own module.

Imports no SQL library.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from desktop_app.errors import ENDED_RUN_STATUSES, MOVED_PREFIX
from desktop_app.store.records import AgentRun


@dataclass(frozen=True)
class Dialect:
    """How one backend writes what differs between the two.

    Attributes:
        name: ``"sqlite"`` or ``"postgres"``.
        p: the positional placeholder (``?`` / ``%s``).
        ts: a time parameter (UTC epoch seconds) as the column stores it.
        text_order: appended to ``ORDER BY run_id`` so ids sort by code
            point whatever the database's collation (PostgreSQL: ``COLLATE "C"``).
    """

    name: Literal["sqlite", "postgres"]
    p: str
    ts: str
    text_order: str = ""

    def epoch(self, column: str) -> str:
        """A time column read as UTC epoch seconds (a float)."""
        return f"extract(epoch from {column})::float8" if self.name == "postgres" else column

    def values(self, n: int) -> str:
        """``n`` placeholders, comma-separated."""
        return ",".join([self.p] * n)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: the SQL and its parameters."""
        if self.name == "postgres":
            return f"{column} = ANY({self.p})", [list(values)]
        return f"{column} IN ({self.values(len(values))})", list(values)


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """``(low, high)``: the strings starting with ``prefix`` are those
    ``>= low`` and ``< high`` in code point order (``high`` is ``None`` when
    no string is above them: ``prefix`` is only U+10FFFF characters).
    Raises ValueError for an empty prefix (every string starts with it)."""
    if not prefix:
        raise ValueError("a run id prefix must not be empty")
    stem = prefix.rstrip(chr(0x10FFFF))
    if not stem:
        return prefix, None
    return prefix, stem[:-1] + chr(ord(stem[-1]) + 1)


SQLITE = Dialect("sqlite", "?", "?")
POSTGRES = Dialect("postgres", "%s", "to_timestamp(%s)", ' COLLATE "C"')


class Statements:
    """Every statement the two stores share, rendered for ``d``."""

    def __init__(self, d: Dialect) -> None:
        p, t, e = d.p, d.ts, d.epoch
        self.dialect = d
        # -- runs ----------------------------------------------------------
        self.run_columns = (
            "run_id, flow_name, flow_version, status, revision, "
            f"{e('created_at')}, {e('updated_at')}, scope, flow_key, parent_run_id, context, "
            f"progress_done, progress_total, error, lease_owner, {e('lease_expires_at')}, "
            f"tenant_id, session_id, {e('deadline_at')}"
        )
        self.get_run = f"SELECT {self.run_columns} FROM runs WHERE run_id={p} AND scope={p}"
        self.runs_of_scope = f"SELECT {self.run_columns} FROM runs WHERE scope={p}"
        self.run_revision_owner = (
            f"SELECT revision, lease_owner FROM runs WHERE run_id={p} AND scope={p}"
        )
        #: the compare-and-append's first columns (the backend adds status and lease)
        self.append_run = (
            f"UPDATE runs SET revision={p}, updated_at={t}, progress_done="
            f"coalesce({p}, progress_done), progress_total=coalesce({p}, progress_total), "
            f"error={p}"
        )
        self.append_run_where = f" WHERE run_id={p} AND scope={p} AND revision={p}"
        self.release_run = (
            "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL "
            f"WHERE run_id={p} AND lease_owner={p}"
        )
        self.runs_of_other_versions = (
            f"SELECT {self.run_columns} FROM runs WHERE scope={p} AND flow_name={p} "
            "AND flow_version<>" + p + " AND status IN ('pending','running','waiting','failed') "
            f"ORDER BY created_at, run_id{d.text_order}"
        )
        # -- checkpoints -----------------------------------------------------
        # keyed by (run_id, revision): PostgreSQL's; SQLite keys its rows by
        # ckey and has its own (store/sqlite/checkpoint_keys.py), sharing
        # checkpoint_columns
        #: a checkpoint row's columns after run_id, as :func:`rows.checkpoint_from_rows` reads them
        self.checkpoint_columns = (
            f"revision, kind, status, step_id, {e('created_at')}, state, steps, frontier, "
            "progress, error, meta, waits"
        )
        self.insert_checkpoint = (
            "INSERT INTO checkpoints(run_id, revision, kind, status, step_id, created_at, "
            "state, steps, frontier, progress, error, meta, waits"
        )
        self.checkpoint_values = f"{p},{p},{p},{p},{p},{t},{p},{p},{p},{p},{p},{p},{p}"
        #: the rows to fold for one revision: the nearest snapshot at or below it, then deltas
        self.fold_rows = (
            f"FROM checkpoints WHERE run_id={p} AND revision<={p} AND revision>="
            f"(SELECT max(revision) FROM checkpoints WHERE run_id={p} AND revision<={p} "
            "AND kind='snapshot') ORDER BY revision"
        )
        self.history = (
            f"SELECT revision, status, step_id, {e('created_at')} FROM checkpoints "
            f"WHERE run_id={p} ORDER BY revision"
        )
        self.history_page = (
            f"SELECT revision, status, step_id, {e('created_at')} FROM checkpoints "
            f"WHERE run_id={p} AND revision>{p} ORDER BY revision LIMIT {p}"
        )
        self.oldest_revision = f"SELECT min(revision) FROM checkpoints WHERE run_id={p}"
        self.delete_checkpoints_to = f"DELETE FROM checkpoints WHERE run_id={p} AND revision<={p}"
        # -- waits, signals, events --------------------------------------------
        self.delete_waits = f"DELETE FROM waits WHERE run_id={p}"
        ended = ",".join(f"'{s}'" for s in sorted(ENDED_RUN_STATUSES))
        #: a live run whose latest checkpoint cannot be read, ended without
        #: reading it (status, error, updated_at, run_id, scope)
        self.end_unreadable = (
            f"UPDATE runs SET status={p}, error={p}, updated_at={t}, lease_owner=NULL, "
            f"lease_expires_at=NULL WHERE run_id={p} AND scope={p} AND status NOT IN ({ended})"
        )
        self.insert_wait = (
            "INSERT INTO waits(wait_id, run_id, step_id, kind, name, key, deadline_at, "
            f"created_at) VALUES ({p},{p},{p},{p},{p},{p},{t},{t})"
        )
        self.consume_signal = (
            f"UPDATE signals SET consumed_by={p}, consumed_at={t} "
            f"WHERE signal_id={p} AND consumed_by IS NULL"
        )
        self.insert_signal = (
            "INSERT INTO signals(scope, name, key, payload, dedupe_key, sent_at) "
            f"VALUES ({p},{p},{p},{p},{p},{t})"
        )
        self.signal_by_dedupe_key = (
            f"SELECT signal_id, name, key, payload, {e('sent_at')} FROM signals "
            f"WHERE scope={p} AND dedupe_key={p}"
        )
        self.next_signal = (
            f"SELECT signal_id, payload, {e('sent_at')} FROM signals WHERE scope={p} "
            f"AND name={p} AND key={p} AND consumed_by IS NULL ORDER BY signal_id LIMIT 1"
        )
        self.signal_consumer = f"SELECT consumed_by FROM signals WHERE scope={p} AND signal_id={p}"
        self.publish_event = (
            "INSERT INTO events(scope, type, payload, published_at) "
            f"VALUES ({p},{p},{p},{t}) RETURNING event_id"
        )
        self.first_event = (
            f"SELECT event_id, payload, {e('published_at')} FROM events WHERE scope={p} "
            f"AND type={p} AND published_at>={t} ORDER BY published_at, event_id LIMIT 1"
        )
        self.runs_waiting_for = (
            "SELECT w.run_id FROM waits w JOIN runs r ON r.run_id=w.run_id "
            f"WHERE r.scope={p} AND w.kind={p} AND w.name={p}"
        )
        self.and_wait_key = f" AND w.key={p}"
        # after the conditions: the run waiting longest first (one signal
        # goes to one wait: the oldest), ties by run id
        self.waiting_longest_first = " GROUP BY w.run_id ORDER BY min(w.created_at), w.run_id"
        # -- outbox ------------------------------------------------------------
        self.insert_intent = (
            "INSERT INTO outbox(intent_id, run_id, step_id, destination, payload, "
            f"status, created_at) VALUES ({p},{p},{p},{p},{p},'pending',{t})"
        )
        self.intent_columns = (
            "o.intent_id, o.run_id, o.step_id, o.destination, o.payload, o.status, "
            "o.attempts, o.receipt, o.last_error"
        )
        self.intents_of_scope = (
            f"SELECT {self.intent_columns}, o.claimed_by FROM outbox o JOIN runs r "
            f"ON r.run_id=o.run_id WHERE r.scope={p}"
        )
        self.intents_order = f" ORDER BY o.created_at, o.intent_id LIMIT {p}"
        self.mark_sending = (
            f"UPDATE outbox SET status='sending', attempts=attempts+1, sent_at={t} "
            f"WHERE intent_id={p}"
        )
        self.mark_delivered = (
            f"UPDATE outbox SET status='delivered', delivered_at={t}, receipt={p}, "
            f"last_error=NULL, claimed_by=NULL, claim_expires_at=NULL WHERE intent_id={p}"
        )
        self.mark_other = (
            f"UPDATE outbox SET status={p}, last_error={p}, claimed_by=NULL, "
            f"claim_expires_at=NULL WHERE intent_id={p}"
        )
        self.intent_status_is = f" AND status={p}"
        # a run's intents not delivered yet, with their claim (withdraw_intents)
        self.open_intents_of_run = (
            f"SELECT {self.intent_columns}, o.claimed_by, {e('o.claim_expires_at')} "
            f"FROM outbox o JOIN runs r ON r.run_id=o.run_id WHERE o.run_id={p} "
            f"AND r.scope={p} AND o.status IN ('pending','sending') "
            "ORDER BY o.created_at, o.intent_id"
        )
        self.failed_intents_of_run = self.open_intents_of_run.replace(
            "o.status IN ('pending','sending')", "o.status='failed'"
        )
        self.withdraw_intent = (
            f"UPDATE outbox SET status='failed', last_error={p}, claimed_by=NULL, "
            f"claim_expires_at=NULL WHERE intent_id={p} AND status={p}"
        )
        # a dispatcher whose lookup failed lets go of an interrupted intent,
        # keeping it `sending` (outcome unknown: the next one looks it up)
        self.release_intent = (
            f"UPDATE outbox SET last_error={p}, claimed_by=NULL, claim_expires_at=NULL "
            f"WHERE intent_id={p} AND claimed_by={p} AND status='sending'"
        )
        # none of these counts those db copy moved (claimed for ever by
        # "moved to URL", also one `sending` whose process had died): the
        # database they moved to delivers them, and no process of this one
        # makes them (a file's runs list and show no longer count them queued,
        # being made or unknown there)
        not_moved = (
            f"(o.claimed_by IS NULL OR substr(o.claimed_by, 1, {len(MOVED_PREFIX)}) <> "
            f"'{MOVED_PREFIX}')"
        )
        self.sending_by_run = (
            "SELECT o.run_id, count(*) FROM outbox o JOIN runs r ON r.run_id=o.run_id "
            f"WHERE o.status='sending' AND r.scope={p} AND {not_moved} GROUP BY o.run_id"
        )
        # a run's intents `sending`, with who claims each (show: being made, or unknown)
        self.sending_claims_of_run = (
            f"SELECT o.intent_id, o.claimed_by, {e('o.claim_expires_at')} FROM outbox o "
            f"JOIN runs r ON r.run_id=o.run_id WHERE o.run_id={p} AND r.scope={p} "
            f"AND o.status='sending' AND {not_moved} ORDER BY o.created_at, o.intent_id"
        )
        self.undelivered_by_run = (
            "SELECT o.run_id, count(*) FROM outbox o JOIN runs r ON r.run_id=o.run_id "
            f"WHERE o.status IN ('pending','sending') AND r.scope={p} "
            f"AND {not_moved} GROUP BY o.run_id"
        )
        # -- agent runs ----------------------------------------------------------
        self.agent_columns = (
            "run_id, agent, status, parent_run_id, input, response, error, error_type, turns, "
            f"pending_call, {e('created_at')}, {e('updated_at')}, {e('deadline_at')}, "
            f"{e('expires_at')}, {e('retry_at')}, context, lease_owner, {e('lease_expires_at')}"
        )
        self.insert_agent_run = (
            "INSERT INTO agent_runs(scope, run_id, agent, status, parent_run_id, input, "
            "response, error, error_type, turns, pending_call, created_at, updated_at, "
            "deadline_at, expires_at, retry_at, context, lease_owner, lease_expires_at) "
            f"VALUES ({p},{p},{p},{p},{p},{p},{p},{p},{p},{p},{p},"
            f"{t},{t},{t},{t},{t},{p},{p},{t})"
        )
        self.get_agent_run = (
            f"SELECT {self.agent_columns} FROM agent_runs WHERE run_id={p} AND scope={p}"
        )
        self.agent_runs_of_scope = f"SELECT {self.agent_columns} FROM agent_runs WHERE scope={p}"
        self.agent_runs_page = (
            f"{self.agent_runs_of_scope} ORDER BY created_at DESC, run_id DESC LIMIT {p} OFFSET {p}"
        )
        self.last_message_seq = (
            f"SELECT coalesce(max(seq), -1) FROM agent_messages WHERE run_id={p}"
        )
        self.release_agent_run = (
            "UPDATE agent_runs SET lease_owner=NULL, lease_expires_at=NULL "
            f"WHERE run_id={p} AND scope={p} AND lease_owner={p}"
        )
        self.mark_reused = (
            f"UPDATE agent_tool_results SET reused=reused+1 WHERE run_id={p} AND tool_key={p}"
        )
        tool_columns = "tool_key, tool, status, result, attempts, reused"
        self.tool_result = (
            f"SELECT {tool_columns} FROM agent_tool_results WHERE run_id={p} AND tool_key={p}"
        )
        self.tool_results = (
            f"SELECT {tool_columns} FROM agent_tool_results WHERE run_id={p} ORDER BY updated_at"
        )
        #: the tool journal's upsert (qualified columns: PostgreSQL needs them)
        self.put_tool = (
            "INSERT INTO agent_tool_results(run_id, tool_key, tool, status, result, "
            f"attempts, updated_at) VALUES ({p},{p},{p},{p},{p},{p},{t}) "
            "ON CONFLICT (run_id, tool_key) DO UPDATE SET status=excluded.status, "
            "result=coalesce(excluded.result, agent_tool_results.result), "
            "attempts=agent_tool_results.attempts+excluded.attempts, "
            "updated_at=excluded.updated_at"
        )

    def list_runs(
        self,
        scope: str,
        statuses: Sequence[str] | None,
        flow_name: str | None,
        newest_first: bool,
        *,
        tenant_id: str | None,
        session_id: str | None,
        flow_key: str | None,
        run_id_prefix: str | None = None,
    ) -> tuple[str, list[Any]]:
        """``RunLog.list_runs``'s statement up to its ORDER BY (inclusive),
        and its parameters; the backend adds LIMIT/OFFSET.

        ``run_id_prefix`` reads through the index on ``run_id`` as a range
        (``run_id >= p AND run_id < p_next``, see :func:`prefix_range`), and
        keeps the ids that start with it (a database collation other than
        code point order may put other ids in the range). SQLite, with no
        statistics, would rather walk every run of the scope through
        ``runs_scope_created`` (no sort): ``+scope`` keeps it off the indexes
        that start with the scope."""
        d = self.dialect
        sql = self.runs_of_scope
        args: list[Any] = [scope]
        if run_id_prefix is not None:
            if d.name == "sqlite":
                sql = sql.replace(f"WHERE scope={d.p}", f"WHERE +scope={d.p}")
            low, high = prefix_range(run_id_prefix)
            sql += f" AND run_id >= {d.p} AND substr(run_id, 1, {d.p}) = {d.p}"
            args += [low, len(run_id_prefix), run_id_prefix]
            if high is not None:
                sql += f" AND run_id < {d.p}"
                args.append(high)
        for column, value in (
            ("tenant_id", tenant_id),
            ("session_id", session_id),
            ("flow_key", flow_key),
        ):
            if value is not None:
                sql += f" AND {column}={d.p}"
                args.append(value)
        if statuses is not None:
            cond, cargs = d.in_list("status", statuses)
            sql += f" AND {cond}"
            args += cargs
        if flow_name is not None:
            sql += f" AND flow_name={d.p}"
            args.append(flow_name)
        order = "DESC" if newest_first else "ASC"
        return f"{sql} ORDER BY created_at {order}, run_id{d.text_order} {order}", args

    def list_agent_runs(
        self, scope: str, statuses: Sequence[str] | None, agent: str | None
    ) -> tuple[str, list[Any]]:
        """``AgentLog.list``'s statement and its parameters."""
        d = self.dialect
        sql = self.agent_runs_of_scope
        args: list[Any] = [scope]
        if statuses is not None:
            cond, cargs = d.in_list("status", statuses)
            sql += f" AND {cond}"
            args += cargs
        if agent is not None:
            sql += f" AND agent={d.p}"
            args.append(agent)
        return sql + " ORDER BY created_at, run_id", args

    def delivered_runs(self, scope: str, flow_name: str, limit: int) -> tuple[str, list[Any]]:
        """``Outbox.delivered_runs``' statement and its parameters."""
        p = self.dialect.p
        return (
            f"SELECT run_id FROM runs WHERE scope={p} AND flow_name={p} AND status='completed' "
            "AND run_id NOT IN (SELECT run_id FROM outbox "
            "WHERE status IN ('pending', 'sending', 'failed')) "
            f"ORDER BY created_at DESC, run_id DESC LIMIT {p}",
            [scope, flow_name, limit],
        )

    def intents(
        self, scope: str, statuses: Sequence[str], limit: int, run_id: str | None = None
    ) -> tuple[str, list[Any]]:
        """``Outbox.intents``' statement and its parameters."""
        cond, args = self.dialect.in_list("o.status", statuses)
        if run_id is not None:
            cond += f" AND o.run_id={self.dialect.p}"
            args.append(run_id)
        return f"{self.intents_of_scope} AND {cond}{self.intents_order}", [scope, *args, limit]


def agent_run_values(scope: str, run: AgentRun, error: str | None) -> tuple[Any, ...]:
    """:attr:`Statements.insert_agent_run`'s parameters for ``run`` (``error``:
    ``run.error`` as the backend stores it; no pending call yet)."""
    return (
        scope,
        run.run_id,
        run.agent,
        run.status,
        run.parent_run_id,
        run.input,
        run.response,
        error,
        run.error_type,
        run.turns,
        None,
        run.created_at,
        run.updated_at,
        run.deadline_at,
        run.expires_at,
        run.retry_at,
        json.dumps(run.context),
        run.lease_owner,
        run.lease_expires_at,
    )


SQLITE_SQL = Statements(SQLITE)
POSTGRES_SQL = Statements(POSTGRES)
