"""``flowdesk db copy --from FILE --to URL``: move a laptop's SQLite database
to PostgreSQL, so its runs continue there.

Every row of every Flowdesk table is copied (``COPY … FROM STDIN``) in one
PostgreSQL transaction: all of it lands, or nothing does. Values are copied
verbatim: the codec's JSON text byte for byte (neither side re-encodes
state), UTC epoch seconds become ``timestamptz`` (µs precision; ``inf``
becomes ``infinity``), so stored deadlines and wait times are unchanged.
What is not copied: the schema ledger (each database has its own, applied
by ``db apply``), and leases and outbox claims (the laptop's processes are
not on the server; the copied runs are free for the first worker, and an
intent left ``sending`` is reconciled by the first dispatcher).

The source is read in one SQLite read transaction (a consistent snapshot,
even while a laptop process still writes to it; stop it first so nothing
it writes afterwards is left behind). The target must have the schema
applied and hold no runs.

A run a live process of this host still executes is never handed over:
when that snapshot holds a lease of a live owner (a flow or agent run), a
LangGraph thread not completed whose owning process lives (running, or
loaded by its program to be resumed: the checkpointer owns a waiting thread
it loads), or an outbox intent a
live dispatcher is sending (liveness as :func:`~desktop_app.flow.owners.holding`
judges it, whatever the clocks say), nothing is copied
(:class:`~desktop_app.errors.CopySourceBusyError` names them). Copying it
with its lease would not do: a worker on another host takes a lease over
once it expires, and the laptop's process renews it in the file only. A run
created after the snapshot is not in the copy; one created with its lease
(``flowdesk run``) is either absent from the snapshot or held in it.

Every copied flow run and agent run that had not ended is marked *moved*
in the source file, in one write transaction that commits right after the
copy commits on PostgreSQL (a failure before that commit writes neither
side): it gets a lease owned by :func:`moved_owner` (``moved to
postgresql://host/db``, no password) that never expires (year 9999). That owner is on
no host, so :func:`~desktop_app.flow.owners.holding` judges it held for
ever and every path that executes a run from the file (``resume``, ``resume
--all``, the app's launch recovery, ``flowdesk agent``, ``answer``, a
signal's wake, ``cancel``) refuses it with
:class:`~desktop_app.errors.RunLeasedError`, whose message says where it
moved. A run whose row changed since the snapshot (a process resumed it
meanwhile) makes the copy refuse (:class:`~desktop_app.errors.CopySourceChangedError`,
nothing copied): its copy would be older than the file.

Every copied outbox intent not delivered yet (``pending``, or ``sending``
by a dispatcher that is gone: a live one makes the copy refuse) is marked
moved in the same write transaction: its claim becomes :func:`moved_owner`'s
until the year 9999, so no dispatcher of the file claims it again (the
server's dispatchers deliver it; before, a completed run's queued side
effect was delivered from both places). An intent whose row changed since
the snapshot (a dispatcher of the file sent it meanwhile) makes the copy
refuse, as a changed run does.

Every copied LangGraph thread that had not completed is marked moved in the
same write transaction: its row's ``owner`` becomes :func:`moved_owner`.
The user's program, not a worker, continues a thread, so the checkpointer
on the file (``FlowdeskSaver``) refuses to load or store a moved thread
and ``flowdesk answer`` on the file refuses to answer it
(:class:`~desktop_app.errors.ThreadMovedError`, naming where it moved and
the ``FlowdeskSaver.open(...)`` line that opens its checkpointer there).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import apsw
import psycopg

from desktop_app.errors import (
    MOVED_EXPIRES_AT,
    MOVED_PREFIX,
    THREAD_NOUN,
    CopySourceBusyError,
    CopySourceChangedError,
    CopySourceMovedError,
    CopyTargetNotEmptyError,
    DatabaseOpenError,
    DiskFullError,
    StoreError,
    moved_to,
)
from desktop_app.flow.owners import holding, liveness
from desktop_app.runs_view import holder_words
from desktop_app.store import migrations
from desktop_app.store.connection import BusyWait, translate
from desktop_app.store.postgres.sql import connect, no_nul, redact
from desktop_app.textsafe import one_line
from desktop_app.words import listing, plural

#: Columns not copied: the laptop's leases and claims mean nothing on the server.
#: seconds the copy's read of the source waits for a lock (a WAL checkpoint of
#: another process), as long as a Flowdesk connection's default busy timeout
SOURCE_BUSY_TIMEOUT_S = 10.0
_DROPPED = frozenset({"lease_owner", "lease_expires_at", "claimed_by", "claim_expires_at"})
#: Tables not copied: each database keeps its own ledger; workers are live sessions.
_SKIPPED = frozenset({migrations.LEDGER, "workers"})


def moved_owner(url: str) -> str:
    """The lease owner a run moved to the database ``url`` holds in the file
    it left: ``moved to URL`` with the password left out. It names no host
    (the text before its first ``:`` is ``moved to postgresql``), so its
    lease, expiring at :data:`~desktop_app.errors.MOVED_EXPIRES_AT`, is held
    for ever."""
    return f"{MOVED_PREFIX}{redact(url, mask=None)}"


@dataclass
class CopyReport:
    """What ``db copy`` moved: rows per table (in copy order); ``moved``, the
    unfinished flow and agent runs marked moved in the source file (run
    ids); ``moved_threads``, the unfinished LangGraph threads marked so
    (thread ids); ``scopes`` and ``moved_scopes``, per table (``runs``,
    ``agent_runs``, ``langgraph_threads``), the scopes its copied rows and
    its rows marked moved are in (sorted, each once): the commands ``db
    copy`` prints name each (a worker, ``runs``, serves one scope)."""

    rows: dict[str, int] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    moved_threads: list[str] = field(default_factory=list)
    #: outbox intents not delivered yet, marked moved in the source file
    #: (intent ids): the server's dispatchers deliver them
    moved_intents: list[str] = field(default_factory=list)
    scopes: dict[str, list[str]] = field(default_factory=dict)
    moved_scopes: dict[str, list[str]] = field(default_factory=dict)

    def scopes_of(self, *tables: str, moved: bool = False) -> list[str]:
        """The scopes the copied (``moved``: marked moved) rows of ``tables``
        are in, sorted, each once."""
        of = self.moved_scopes if moved else self.scopes
        return sorted({s for t in tables for s in of.get(t, ())})

    @property
    def runs(self) -> int:
        """Flow runs copied (rows of ``runs``)."""
        return self.rows.get("runs", 0)

    @property
    def agent_runs(self) -> int:
        """Agent runs copied (rows of ``agent_runs``)."""
        return self.rows.get("agent_runs", 0)

    @property
    def langgraph_threads(self) -> int:
        """LangGraph threads copied (rows of ``langgraph_threads``)."""
        return self.rows.get("langgraph_threads", 0)

    def summary(self) -> str:
        """What was copied by kind: ``1 flow run, 1 agent run and 1 LangGraph
        thread`` (kinds with none left out; ``no runs`` when all are)."""
        parts = [
            plural(n, one)
            for n, one in (
                (self.runs, "flow run"),
                (self.agent_runs, "agent run"),
                (self.langgraph_threads, "LangGraph thread"),
            )
            if n
        ]
        if not parts:
            return "no runs"
        return listing(parts)


def _timestamp(value: Any, table: str, column: str) -> str | None:
    if value is None:
        return None
    x = float(value)
    if math.isnan(x):
        raise StoreError(f"{table}.{column} holds NaN, which is not a time; nothing was copied")
    if math.isinf(x):
        return "infinity" if x > 0 else "-infinity"
    return datetime.fromtimestamp(x, UTC).isoformat()


def _order(conn: psycopg.Connection[Any], tables: list[str]) -> list[str]:
    """``tables`` with every table after the ones its foreign keys reference."""
    deps: dict[str, set[str]] = {t: set() for t in tables}
    rows = conn.execute(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c "
        "JOIN pg_namespace n ON n.oid = c.connamespace WHERE c.contype='f' AND n.nspname=%s",
        (migrations.PG_SCHEMA,),
    ).fetchall()
    for child, parent in rows:
        child, parent = child.split(".")[-1], parent.split(".")[-1]
        if child in deps and parent in deps and child != parent:
            deps[child].add(parent)
    out: list[str] = []
    while deps:
        ready = sorted(t for t, d in deps.items() if not d - set(out))
        if not ready:
            raise StoreError(f"circular foreign keys between {sorted(deps)}")
        for t in ready:
            out.append(t)
            del deps[t]
    return out


def copy_sqlite_to_postgres(source: str | os.PathLike[str], url: str) -> CopyReport:
    """Copy the Flowdesk database file ``source`` into the PostgreSQL
    database at ``url`` (see module doc).

    Raises:
        DatabaseOpenError: ``source`` is not a readable SQLite file, or the
            server cannot be reached.
        SchemaMissingError / SchemaChecksumError / SchemaTooNewError: either
            side's schema is not the one this version applies (run
            ``flowdesk db apply`` on it first).
        CopyTargetNotEmptyError: the target already holds runs.
        CopySourceBusyError: a live process of this host executes runs of
            ``source``; nothing was copied.
        CopySourceChangedError: a run of ``source`` changed while it was
            copied; nothing was copied.
        CopySourceMovedError: an earlier copy moved unfinished runs of
            ``source`` elsewhere; nothing was copied.
        DatabaseCorruptError: a page of ``source`` is damaged; nothing was copied.
        StoreError: a row could not be stored; nothing was copied.
    """
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise DatabaseOpenError(f"{path}: no such database file; nothing was copied")
    try:
        src = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise DatabaseOpenError(f"cannot open {path} for reading: {exc}") from exc
    # a reader of a WAL file meets SQLITE_BUSY for a moment while a process of
    # the file checkpoints or restarts the WAL: waited for, as every Flowdesk
    # connection does (with none, a copy racing a program's write failed with
    # "stayed locked past the busy timeout" at once)
    src.set_busy_handler(BusyWait(SOURCE_BUSY_TIMEOUT_S))
    try:
        # a damaged page is "malformed" (nothing copied), never copied as a page of no rows
        src.execute("PRAGMA cell_size_check=ON")
        migrations.verify(src, db=path)
        try:
            dst = connect(url, autocommit=False)
        except psycopg.Error as exc:
            raise DatabaseOpenError(
                f"cannot connect to PostgreSQL at {redact(url)}: {exc}"
            ) from exc
        with dst:
            dst.autocommit = True
            migrations.verify(dst, db=redact(url))
            dst.autocommit = False
            try:
                report, unfinished, intents = _copy(src, dst, redact(url))
                # the file's write lock taken, its runs and intents checked and
                # marked, then PostgreSQL commits, then the file: a failure
                # before either commit leaves both as they were
                _mark_moved_then_commit(path, unfinished, intents, moved_owner(url), report, dst)
                return report
            except psycopg.Error as exc:
                dst.rollback()
                raise StoreError(
                    f"copying {path} to {redact(url)} failed: {exc}; nothing was copied"
                ) from exc
            except apsw.Error as exc:  # the source cannot be read (a damaged page)
                dst.rollback()
                raise translate(exc, path) from exc
            except BaseException:
                dst.rollback()
                raise
    finally:
        src.close()


#: per table: the columns that tell a row unchanged since the snapshot
_SAME = {
    "runs": ("revision", "updated_at", "status", "lease_owner", "lease_expires_at"),
    "agent_runs": ("updated_at", "turns", "status", "lease_owner", "lease_expires_at"),
    "langgraph_threads": ("updated_at", "status", "owner", "checkpoint_id"),
}
_ENDED = {
    "runs": ("completed", "canceled", "timed_out"),
    "agent_runs": ("done", "canceled", "timeout", "expired"),
    "langgraph_threads": ("completed",),
}
#: per table: the columns that name a row (a thread's id is per scope)
_KEY = {"runs": ("run_id",), "agent_runs": ("run_id",), "langgraph_threads": ("scope", "thread_id")}
#: per table: the column a moved row's mark is written to (a run's lease
#: owner, with an expiry in the year 9999; a thread has no lease, its owner)
_MARK = {"runs": "lease_owner", "agent_runs": "lease_owner", "langgraph_threads": "owner"}

Unfinished = dict[str, list[tuple[Any, ...]]]

#: the snapshot's outbox intents not delivered yet: intent id, then the
#: columns that tell the row unchanged when it is marked moved
_OPEN_INTENTS = (
    "SELECT intent_id, run_id, status, attempts, claimed_by, claim_expires_at FROM outbox "
    "WHERE status IN ('pending', 'sending') ORDER BY intent_id"
)


def _unfinished(src: apsw.Connection) -> Unfinished:
    """The snapshot's flow runs, agent runs and LangGraph threads that have
    not ended: per table, rows of its :data:`_KEY` then its :data:`_SAME`
    columns."""
    out: Unfinished = {}
    for table, same in _SAME.items():
        ended = ", ".join(f"'{s}'" for s in _ENDED[table])
        key = ", ".join(_KEY[table])
        out[table] = list(
            src.execute(
                f"SELECT {key}, {', '.join(same)} FROM {table} "
                f"WHERE status NOT IN ({ended}) ORDER BY {key}"
            )
        )
    return out


def _named(table: str, key: tuple[Any, ...]) -> str:
    """How a row of ``table`` is named in ``db copy``'s lines: ``run R (flow
    run)``, ``run R (agent run)``, ``LangGraph thread T (scope S)`` (the
    user's ids escaped)."""
    if table == "langgraph_threads":
        return f"{THREAD_NOUN} {one_line(str(key[1]))} (scope {one_line(str(key[0]))})"
    return f"run {one_line(str(key[0]))} ({'flow run' if table == 'runs' else 'agent run'})"


def _intent_named(intent_id: Any, run_id: Any) -> str:
    """How an outbox intent is named in ``db copy``'s lines: ``outbox intent
    K (run R)`` (the user's ids escaped)."""
    return f"outbox intent {one_line(str(intent_id))} (run {one_line(str(run_id))})"


def _mark_moved_then_commit(
    path: str,
    unfinished: Unfinished,
    intents: list[tuple[Any, ...]],
    owner: str,
    report: CopyReport,
    dst: psycopg.Connection[Any],
) -> None:
    """In one write transaction on the file ``path``: give each run of
    ``unfinished`` a lease of ``owner`` expiring in the year 9999, each
    LangGraph thread the owner ``owner`` (what its checkpointer on the file
    refuses), and each outbox intent of ``intents`` (rows of
    :data:`_OPEN_INTENTS`) a claim of ``owner`` until then (no dispatcher of
    the file takes it), checking each is still as the snapshot read it;
    then commit ``dst`` (the copy on PostgreSQL), then the file. Fills
    ``report.moved``, ``report.moved_threads`` and ``report.moved_intents``.

    Raises:
        CopySourceChangedError: a run or an intent changed since the
            snapshot; nothing was written to either side.
        StoreError: the file could not be written (nothing was copied), or
            could not commit after PostgreSQL did (the message says so).
    """
    from desktop_app.store.connection import open_connection

    if not any(unfinished.values()) and not intents:  # all ended and delivered: left as is
        dst.commit()
        return
    conn = open_connection(path, create=False)
    try:
        _room_to_mark(conn, path, sum(map(len, unfinished.values())) + len(intents))
    except BaseException:
        conn.close()
        raise
    try:
        changed: list[str] = []
        try:
            with conn:
                for table, rows in unfinished.items():
                    keys = _KEY[table]
                    where = " AND ".join([*(f"{c} = ?" for c in keys),
                                          *(f"{c} IS ?" for c in _SAME[table])])  # fmt: skip
                    marks: tuple[Any, ...] = (owner,)
                    sets = f"{_MARK[table]} = ?"
                    if _MARK[table] == "lease_owner":  # a run's lease: never expires
                        sets, marks = f"{sets}, lease_expires_at = ?", (owner, MOVED_EXPIRES_AT)
                    for row in rows:
                        conn.execute(f"UPDATE {table} SET {sets} WHERE {where}", (*marks, *row))
                        key = tuple(row[: len(keys)])
                        if not conn.changes():
                            changed.append(_named(table, key))
                        elif table == "langgraph_threads":
                            report.moved_threads.append(str(key[1]))
                        else:
                            report.moved.append(str(key[0]))
                for intent_id, run_id, *same in intents:
                    conn.execute(
                        "UPDATE outbox SET claimed_by = ?, claim_expires_at = ? "
                        "WHERE intent_id = ? AND status IS ? AND attempts IS ? "
                        "AND claimed_by IS ? AND claim_expires_at IS ?",
                        (owner, MOVED_EXPIRES_AT, intent_id, *same),
                    )
                    if not conn.changes():  # a dispatcher of the file sent it meanwhile
                        changed.append(_intent_named(intent_id, run_id))
                    else:
                        report.moved_intents.append(str(intent_id))
                if changed:  # the transaction rolls back: nothing marked
                    raise CopySourceChangedError(path, changed)
                dst.commit()  # then the file commits, leaving this block
        except apsw.Error as exc:
            if dst.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:  # committed
                error = translate(exc, path)
                why = "its disk is full" if isinstance(error, DiskFullError) else str(error)
                raise StoreError(
                    f"the copy committed on {moved_to(owner)}, but its runs could not be marked "
                    f"moved in {path} ({why}): both databases hold them now, and they go on "
                    f"from {moved_to(owner)}. Run no Flowdesk process on {path} (not the app, "
                    "`flowdesk agent`, resume, answer or signal): there they are not marked "
                    "moved, and their steps and side effects would be made a second time"
                ) from exc
            raise translate(exc, path) from exc
    finally:
        conn.close()


def _room_to_mark(conn: apsw.Connection, path: str, rows: int) -> None:
    """Refuse, before PostgreSQL commits, a copy whose marks (``rows`` runs,
    threads and intents to mark moved) the disk holding the file ``path``
    may not hold: that write commits after PostgreSQL's, so a full disk then
    left the runs live in both databases (a tryout: a side effect made from
    both). Each mark may touch a few pages (the row's, its indexes'), each
    a WAL frame; generous, as a disk this near full fails soon anyway.

    Raises:
        DiskFullError: too little free space; nothing was copied.
    """
    page = int(str(conn.execute("PRAGMA page_size").fetchall()[0][0]))
    needed = (4 * rows + 16) * (page + 24)
    if shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < needed:
        raise DiskFullError(f"the database {path}", needed_bytes=needed, paused=False)


def held_runs(src: apsw.Connection, now: float) -> list[str]:
    """The runs of the SQLite database ``src`` that a live process holds, read
    in its current transaction, judged at ``now`` (UTC epoch s), one line
    each (:class:`~desktop_app.errors.CopySourceBusyError`): flow and agent
    runs whose lease is ``held``, unfinished LangGraph threads whose owning
    process of this host lives (running, or loaded by a program about to
    resume it: ``FlowdeskSaver`` owns a waiting thread it loads), runs with an outbox intent a live
    dispatcher has claimed (sending it, or about to). Runs an earlier copy moved are not held by a
    process (:func:`moved_runs` names them)."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    queries = (
        (
            "flow",
            "SELECT scope, run_id, flow_name, lease_owner, lease_expires_at FROM runs "
            "WHERE lease_owner IS NOT NULL ORDER BY scope, run_id",
        ),
        (
            "agent",
            "SELECT scope, run_id, agent, lease_owner, lease_expires_at FROM agent_runs "
            "WHERE lease_owner IS NOT NULL ORDER BY scope, run_id",
        ),
        (
            "graph",
            "SELECT scope, thread_id, 'graph', owner, NULL FROM langgraph_threads "
            "WHERE status <> 'completed' AND owner IS NOT NULL ORDER BY scope, thread_id",
        ),
        (
            "outbox",
            "SELECT coalesce(r.scope, a.scope, '?'), o.run_id, "
            "coalesce(r.flow_name, a.agent, '?'), o.claimed_by, o.claim_expires_at FROM outbox o "
            "LEFT JOIN runs r ON r.run_id = o.run_id LEFT JOIN agent_runs a ON a.run_id = o.run_id "
            # claimed, sending or about to: what it sends would go from both sides
            "WHERE o.status IN ('pending', 'sending') AND o.claimed_by IS NOT NULL "
            "ORDER BY o.run_id",
        ),
    )
    for kind, query in queries:
        for scope, run_id, name, owner, expires in src.execute(query):
            # a thread has no lease: only its process's liveness tells (never expires)
            live = (
                liveness(owner) == "alive"
                if kind == "graph"
                else holding(owner, expires, now) == "held"
            )
            if not live or (scope, run_id) in seen or moved_to(owner) is not None:
                continue
            seen.add((scope, run_id))
            # ids, names and scopes are the user's: shown escaped, never raw
            rid, scp = one_line(str(run_id)), one_line(str(scope))
            if kind == "graph":
                said = f"LangGraph thread {rid} (scope {scp})"
            else:
                what = f"{'agent' if kind == 'agent' else 'flow'} {one_line(str(name))}"
                said = f"run {rid} ({what}, scope {scp})"
            doing = " sending its side effects" if kind == "outbox" else ""
            out.append(f"{said}: {holder_words(owner)}{doing}")
    return out


def moved_runs(src: apsw.Connection) -> list[str]:
    """The unfinished flow runs, agent runs and LangGraph threads, and the
    outbox intents not delivered, of the SQLite database ``src`` an earlier
    ``db copy`` moved (read in its current transaction), one line each:
    ``run R (flow run): moved to URL``, ``LangGraph thread T (scope S):
    moved to URL``, ``outbox intent K (run R): moved to URL``."""
    out: list[str] = []
    for table, mark in _MARK.items():
        ended = ", ".join(f"'{s}'" for s in _ENDED[table])
        key = ", ".join(_KEY[table])
        for *ids, owner in src.execute(
            f"SELECT {key}, {mark} FROM {table} WHERE {mark} LIKE ? "
            f"AND status NOT IN ({ended}) ORDER BY {key}",
            (f"{MOVED_PREFIX}%",),
        ):
            out.append(f"{_named(table, tuple(ids))}: moved to {moved_to(owner)}")
    for intent_id, run_id, owner in src.execute(  # queued side effects (a completed run's)
        "SELECT intent_id, run_id, claimed_by FROM outbox WHERE claimed_by LIKE ? "
        "AND status IN ('pending', 'sending') ORDER BY intent_id",
        (f"{MOVED_PREFIX}%",),
    ):
        out.append(f"{_intent_named(intent_id, run_id)}: moved to {moved_to(owner)}")
    return out


def _copy(
    src: apsw.Connection, dst: psycopg.Connection[Any], where: str
) -> tuple[CopyReport, Unfinished, list[tuple[Any, ...]]]:
    src.execute("BEGIN")  # one snapshot of the whole file: the check and the rows copied
    try:
        unfinished = _unfinished(src)  # the snapshot the copy reads: their rows as copied
        intents = list(src.execute(_OPEN_INTENTS))  # likewise
        return _copy_snapshot(src, dst, where), unfinished, intents
    finally:
        src.execute("COMMIT")


def _copy_snapshot(src: apsw.Connection, dst: psycopg.Connection[Any], where: str) -> CopyReport:
    schema = migrations.PG_SCHEMA
    held = held_runs(src, time.time())  # the first read: the snapshot starts here
    if held:
        raise CopySourceBusyError(src.filename, held)
    dst.execute(f"SET LOCAL search_path = {schema}")
    holds = dict.fromkeys(("runs", "agent_runs"), 0)
    scopes: set[str] = set()
    for table in holds:
        for scope, n in dst.execute(f"SELECT scope, count(*) FROM {table} GROUP BY scope"):
            holds[table] += int(n)
            scopes.add(str(scope))
    if holds["runs"] or holds["agent_runs"]:
        raise CopyTargetNotEmptyError(
            where, holds["runs"], holds["agent_runs"], tuple(sorted(scopes))
        )
    gone = moved_runs(src)
    if gone:  # their workers there execute them: a second copy would run them twice
        raise CopySourceMovedError(src.filename, gone)
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    for table, column, dtype, identity in dst.execute(
        "SELECT table_name, column_name, data_type, is_identity FROM information_schema.columns "
        "WHERE table_schema=%s ORDER BY table_name, ordinal_position",
        (schema,),
    ):
        if table not in _SKIPPED:
            columns.setdefault(table, []).append((column, dtype, identity == "YES"))
    report = CopyReport()
    for table in _order(dst, list(columns)):
        have = {r[1] for r in src.execute(f"SELECT * FROM pragma_table_info('{table}')")}
        cols = [c for c in columns[table] if c[0] in have and c[0] not in _DROPPED]
        names = ", ".join(c[0] for c in cols)
        times = [c[1] == "timestamp with time zone" for c in cols]
        count = 0
        with dst.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in src.execute(f"SELECT {names} FROM {table}"):
                out = [
                    _timestamp(v, table, cols[i][0]) if times[i] else v for i, v in enumerate(row)
                ]
                copy.write_row([no_nul(v) if isinstance(v, str) else v for v in out])
                count += 1
        report.rows[table] = count
        if table in _ENDED:  # the same snapshot: the scopes of the rows copied, marked moved
            ended = ", ".join(f"'{s}'" for s in _ENDED[table])
            scoped = f"SELECT DISTINCT scope FROM {table}"
            report.scopes[table] = [str(r[0]) for r in src.execute(f"{scoped} ORDER BY scope")]
            report.moved_scopes[table] = [
                str(r[0])
                for r in src.execute(f"{scoped} WHERE status NOT IN ({ended}) ORDER BY scope")
            ]
        for column, _dtype, identity in cols:
            if identity:  # the next generated id follows the copied ones
                dst.execute(
                    f"SELECT setval(pg_get_serial_sequence(%s, %s), "
                    f"coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)",
                    (f"{schema}.{table}", column),
                )
    return report  # committed by _mark_moved_then_commit
