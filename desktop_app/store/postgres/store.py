"""The PostgreSQL :class:`~desktop_app.store.protocol.CheckpointStore`
(psycopg 3 + psycopg_pool), for ``postgresql://`` URLs.

Same semantics as :mod:`desktop_app.store.sqlite.store`, transaction by
transaction, with these PostgreSQL-specific rules:

* Isolation is READ COMMITTED; every multi-writer decision is carried by a
  row lock: the compare-and-append ``UPDATE runs … WHERE revision = n-1``
  (the loser re-evaluates the WHERE and updates 0 rows ->
  ``RevisionConflictError``), ``FOR UPDATE`` on the run in ``update_latest``
  and ``prune``, ``consumed_by IS NULL`` for signals, ``ON CONFLICT`` for
  signal dedupe.
* Leases are decided by the database's clock (``flowdesk_now()``): a lease
  is set to ``flowdesk_now() + ttl`` where ``ttl`` is the caller's
  ``expires_at - issued_at`` (or ``expires_at - now`` in :meth:`claim`), and
  another owner's lease counts as expired when ``lease_expires_at <=
  flowdesk_now()``. A worker's own clock never decides who may execute a run.
  Another owner's lease is taken only by a lease naming it
  (``Lease.takes_over``), as a compare-and-set on that owner; with
  ``Lease.issued_at = inf`` (owner known dead) whatever its expiry.
* Whole-transaction retry (at most :data:`MAX_ATTEMPTS`) on
  serialization_failure / deadlock_detected and on a connection lost before
  COMMIT (nothing was written). Domain writes and ``update_latest``'s change
  are called again on a retry, so they must be pure SQL closures.
* A connection lost *during* COMMIT leaves the outcome unknown. Before
  committing, the store notes the transaction id (``pg_current_xact_id()``,
  the commit token the server itself keeps) and the backend pid; after a
  lost COMMIT it asks a new connection ``pg_xact_status(xid)``, reconnecting
  while the server cannot be reached (up to ``RESOLVE_TIMEOUT_S``):
  ``committed`` is success, ``aborted`` is retried, ``in progress`` (the old
  backend has not noticed yet) terminates that backend and asks again; an
  outcome it cannot learn is a ``CommitUnknownError`` (nothing assumed).
  A server that crashed hands the ids of transactions it lost (none of
  their WAL on disk) out again once recovered, so ``pg_xact_status`` may
  answer for another transaction: an id not handed out yet is ``aborted``,
  an append's ``committed`` counts only with its ``checkpoints`` row
  stored, any other transaction's only if the server has not restarted
  since (``pg_postmaster_start_time()``), else it is unknown.
* An append with nothing after its one statement (no domain writes,
  intents, consumed signals or changed waits) is sent on a direct
  connection with no ``BEGIN``: the autocommit connection makes it a
  transaction of its own, committed before the server replies, so a step is
  one round trip. Its transaction id is never heard before a loss, so a
  connection lost while it is out is settled by the row itself: on a new
  connection the old backend is ended if it still runs the statement, then
  the ``checkpoints`` row equal in every column to the one sent is looked
  for (found: it landed; not found: it is run again).
* Times are ``timestamptz`` in the database, UTC epoch seconds (µs
  precision) in the records. State and step JSON is stored as ``text``, the
  codec's exact bytes (``jsonb`` refuses ``\\u0000`` and NaN).
* NUL characters in free text (error messages) become U+FFFD; in any other
  text value they are refused with a StoreError.
* ``search_path`` is never a startup parameter. On a direct connection
  (``pooler="none"``) it is set once per connection; behind a
  transaction-mode pooler (``pooler="transaction"``, PgBouncer) every
  transaction begins with ``SET LOCAL search_path`` and no statement is
  prepared, so nothing relies on a session surviving the transaction; LISTEN
  and a worker's liveness lock then need a direct ``listen_url`` (see
  :func:`open_postgres_store`).
* ``data_version`` is a hash of ``pg_current_snapshot()`` (changes whenever
  any transaction of the server commits; false positives only cause a
  reload) combined with this store's own commit count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from desktop_app.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    CommitUnknownError,
    DatabaseOpenError,
    DatabaseUnreachableError,
    DuplicateFlowKeyError,
    FlowdeskError,
    LeaseLostError,
    NoSessionError,
    QueryRefusedError,
    RevisionConflictError,
    RunLeasedError,
    RunStateError,
    SchemaObjectMissingError,
    ServerUnreachableAtOpenError,
    StoreError,
)
from desktop_app.store import codec, migrations
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.leases_log import log_takeovers
from desktop_app.store.postgres.notify import CHANGES, WAKE, Listener, Notifier
from desktop_app.store.postgres.sql import (
    BEGIN_SQL,
    RETRY_SQLSTATES,
    SqlTx,
    connect,
    connection_kwargs,
    domain_write_error,
    epoch,
    is_connection_lost,
    is_unreachable_at_connect,
    no_nul,
    redact,
    translate,
    ts,
)
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
    Withdrawal,
)
from desktop_app.store.protocol import (
    SqlTx as SqlTxProtocol,
)
from desktop_app.store.records import lease_lost_message
from desktop_app.store.rows import (
    CheckpointRow,
    checkpoint_from_rows,
    checkpoint_infos,
    checkpoint_values,
    deduped_signal,
    detached,
    event_from_row,
    intent_from_row,
    remembered,
    run_from_row,
    same_signal_or_refuse,
    signal_from_row,
    unstorable,
    wait_values,
    withdrawable,
)
from desktop_app.store.statements import POSTGRES_SQL as SQL

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
Conn = psycopg.Connection[Any]
MAX_ATTEMPTS = 4
#: Default longest wait between two reconnect tries after an outage (seconds):
#: the ``postgres.reconnect_max_s`` setting.
RECONNECT_MAX_S = 5.0
#: Default wait of one transaction try for a pooled connection (seconds):
#: the ``postgres.connect_wait_s`` setting.
CONNECT_WAIT_S = 30.0
_CACHE_RUNS = 256
#: How long to wait for the server to settle a transaction whose COMMIT reply was lost.
RESOLVE_TIMEOUT_S = 30.0

_RUN_COLUMNS = SQL.run_columns
_INSERT_CHECKPOINT = f"{SQL.insert_checkpoint}) VALUES ({SQL.checkpoint_values})"
_FOLD_ROWS = f"SELECT {SQL.checkpoint_columns} {SQL.fold_rows}"
#: a stored checkpoints row equal in every column to the given values (see ``_landed``)
_LANDED = (
    "SELECT 1 FROM flowdesk.checkpoints WHERE run_id=%s AND revision=%s AND (run_id, revision, "
    "kind, status, step_id, created_at, state, steps, frontier, progress, error, meta, waits) "
    f"IS NOT DISTINCT FROM ({SQL.checkpoint_values})"
)
#: a run and its revision-0 checkpoint in one statement (see :meth:`create_run`)
_CREATE_RUN = (
    "WITH r AS (INSERT INTO runs(run_id, flow_name, flow_version, status, revision, created_at, "
    "updated_at, scope, flow_key, parent_run_id, context, progress_done, progress_total, error, "
    "lease_owner, lease_expires_at, tenant_id, session_id, deadline_at) VALUES "
    f"(%s,%s,%s,%s,0,{ts()},{ts()},%s,%s,%s,%s,%s,%s,%s,%s,"
    f"flowdesk_now() + %s * interval '1 second',%s,%s,{ts()}) RETURNING 1), "
    f"c AS ({SQL.insert_checkpoint}) SELECT {SQL.checkpoint_values} FROM r) "
    "SELECT pg_current_xact_id()::text, pg_backend_pid()"
)


#: A lease is free for ``%s`` (owner) when unset, ours, or expired by the database clock.
def _ttl(lease: Lease, now: float | None = None) -> float:
    """The lease's length in seconds: ``lease.ttl_s`` when given, else from
    the caller's own clock difference (``time.time()`` for a lease issued at
    ``math.inf``)."""
    if lease.ttl_s is not None:
        return max(0.0, lease.ttl_s)
    base = lease.issued_at if now is None else now
    if math.isfinite(base):
        return max(0.0, lease.expires_at - base)
    return max(0.0, lease.expires_at - time.time())


def _lease_cond(lease: Lease) -> tuple[str, list[Any]]:
    """WHERE fragment: ``lease`` may take the run, the rule of
    :meth:`Lease.may_take` with expiry judged by the database clock
    (``issued_at=inf``: the named owner is known dead, any expiry)."""
    if lease.takes_over is None:
        return "(lease_owner IS NULL OR lease_owner=%s)", [lease.owner]
    expired = "" if math.isinf(lease.issued_at) else " AND lease_expires_at<=flowdesk_now()"
    return (
        f"(lease_owner IS NULL OR lease_owner=%s OR (lease_owner=%s{expired}))",
        [lease.owner, lease.takes_over],
    )


@functools.lru_cache(maxsize=16)
def _append_sql(terminal: bool, leased: bool, lease_cond: str) -> str:
    """One append's compare-and-set on ``runs`` and its checkpoint insert as
    ONE statement (a data-modifying CTE: the insert runs only when the update
    took the row), which returns ``(rows updated, pg_current_xact_id(),
    pg_backend_pid())``. Parameters: :attr:`Statements.append_run`'s, the
    status, the new lease's owner and ttl (``leased`` and not ``terminal``),
    :attr:`Statements.append_run_where`'s, ``lease_cond``'s, then the
    checkpoint row (:func:`rows.checkpoint_values`)."""
    sql = SQL.append_run + ", status=%s"
    if terminal:
        sql += ", lease_owner=NULL, lease_expires_at=NULL"
    elif leased:
        sql += ", lease_owner=%s, lease_expires_at=flowdesk_now() + %s * interval '1 second'"
    sql += SQL.append_run_where
    if lease_cond:
        sql += f" AND {lease_cond}"
    return (
        f"WITH u AS ({sql} RETURNING 1), "
        f"c AS ({SQL.insert_checkpoint}) SELECT {SQL.checkpoint_values} FROM u) "
        "SELECT (SELECT count(*) FROM u), pg_current_xact_id()::text, pg_backend_pid()"
    )


@functools.lru_cache(maxsize=32)
def _named(sql: str, nargs: int) -> tuple[str, str, str]:
    """``sql`` (one statement, ``%s`` placeholders, no other ``%``) as a
    named prepared statement: ``(name, "PREPARE name AS <sql with $1..$n>;
    ", "EXECUTE name(%s, ...)")``. The name is a hash of the text, so a
    connection never holds two statements under one name."""
    parts = sql.split("%s")
    if len(parts) - 1 != nargs or any("%" in part for part in parts):
        raise RuntimeError(f"{nargs} parameters and only %s placeholders expected: {sql[:80]}")
    if ";" in sql:
        raise RuntimeError(f"one statement expected: {sql[:80]}")
    name = "flowdesk_" + hashlib.blake2b(sql.encode(), digest_size=8).hexdigest()
    body = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], start=1))
    execute = f"EXECUTE {name}({', '.join(['%s'] * nargs)})"
    return name, f"PREPARE {name} AS {body}; ", execute


def _query_refused(exc: psycopg.Error) -> bool:
    """Whether a domain query failed of its own making (running it again
    fails the same way): SQL or a name the server refuses (SQLSTATE class
    42: a missing table, column or function), data it cannot take (22),
    a constraint (23), or parameters psycopg refused before sending (no
    SQLSTATE: a wrong count, a type it cannot adapt)."""
    code = exc.sqlstate
    if code is None:
        return isinstance(exc, psycopg.ProgrammingError | psycopg.DataError)
    return code[:2] in ("42", "22", "23")


class _CommitLost(Exception):
    """Internal: the COMMIT's reply was lost and the server says it aborted."""


class _Landed(Exception):
    """Internal: a statement that commits by itself lost its reply, and the
    server holds what it wrote: the transaction's ``result`` stands."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


class _Xact:
    """The open transaction's id (``pg_current_xact_id()`` as text, ``None``
    until known), its server backend's pid and either, for an append (or a
    run's creation), the ``checkpoints`` row it writes, or, for any other
    write, when the server last started (``pg_postmaster_start_time()`` as
    epoch seconds, text): what :meth:`_resolve
    <PostgresCheckpointStore._resolve>` asks about when COMMIT's reply is lost."""

    __slots__ = ("pid", "row", "started", "xid")

    def __init__(self) -> None:
        self.xid: str | None = None
        self.pid = 0
        self.row: tuple[Any, ...] | None = None
        self.started: str | None = None

    def note(self, xid: Any, pid: Any, row: Sequence[Any] | None = None) -> None:
        self.xid, self.pid = str(xid), int(pid)
        self.row = None if row is None else tuple(row)


class PostgresCheckpointStore:
    """Runs and checkpoints in PostgreSQL schema ``flowdesk``.

    Args:
        pool: an open :class:`psycopg_pool.ConnectionPool` whose connections
            have ``autocommit=True`` (the store opens its transactions
            itself) and, unless ``pooler="transaction"``,
            ``search_path=flowdesk`` (:func:`open_postgres_store` builds one).
        scope: runs saved under one scope are invisible from another.
        where: shown in error messages (the URL with its password masked).
        db: the URL with its password left out, for the commands errors
            print (a missing schema's ``db apply``).
        pooler: ``"transaction"``: the pool goes through a transaction-mode
            pooler, so each transaction sets its own ``search_path`` first
            (:data:`~desktop_app.store.postgres.sql.BEGIN_SQL`, sent with the
            ``BEGIN``; a read then needs a transaction too) and
            :meth:`listener` never uses the pool's URL.
        listen_url: the URL :meth:`listener` connects to (LISTEN and a
            worker's liveness lock need a session of their own); default the
            pool's own URL, or none behind a transaction pooler (then
            :meth:`listener` raises NoSessionError).
        reconnect_max_s: the longest wait between two reconnect tries of a
            :meth:`listener` whose session dropped, seconds.

    The schema must have been applied (``flowdesk db apply``); the
    constructor verifies it (SchemaMissingError / SchemaChecksumError /
    SchemaTooNewError). Thread-safe: each call borrows a pool connection.
    """

    #: see :data:`desktop_app.store.protocol.CAPABILITIES`
    capabilities = frozenset(
        {
            "sql",
            "processes",
            "database_clock",
            "push",
            "append_batch",
            "worker_claims",
            "worker_sessions",
            "server_outages",
        }
    )

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        scope: str = "default",
        where: str = "",
        db: str = "",
        pooler: Literal["none", "transaction"] = "none",
        listen_url: str | None = None,
        reconnect_max_s: float = RECONNECT_MAX_S,
    ) -> None:
        self.pool = pool
        #: the longest wait between two reconnect tries of :meth:`listener`, seconds
        self.reconnect_max_s = reconnect_max_s
        self.scope = scope
        self.where = where
        #: the database as a printed command names it (no password): see ``translate``
        self.db = db
        self._begin = BEGIN_SQL if pooler == "transaction" else None
        if listen_url is None and pooler == "none":
            conninfo = pool.conninfo
            listen_url = conninfo() if callable(conninfo) else conninfo
        #: where :meth:`listener` connects; ``None``: nowhere (see NoSessionError)
        self.session_url: str | None = listen_url
        #: what opens a transaction of :meth:`_tx` (one simple query, one round trip)
        self._start = "BEGIN" if self._begin is None else f"BEGIN; {self._begin}"
        #: statement names prepared on each pooled connection (direct only: see _execute_opening)
        self._prepared: weakref.WeakKeyDictionary[Conn, set[str]] | None = (
            weakref.WeakKeyDictionary() if pooler == "none" else None
        )
        self._prepared_lock = threading.Lock()
        with pool.connection() as conn:
            migrations.verify(conn, db=where)
        self._last: OrderedDict[str, Checkpoint] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._own_commits = 0
        #: after-commit NOTIFY (coalesced); ``notifier.enabled = False`` leaves polling only
        self.notifier = Notifier(pool)
        #: seconds a transaction waits for a pooled connection (None: the
        #: pool's own 30 s), and tries: :meth:`stop_waiting` shortens both
        self._wait_s: float | None = None
        self._attempts = MAX_ATTEMPTS
        #: called once per outage, in the thread whose transaction try first
        #: found the server unreachable (its connection lost, or no pooled
        #: connection within ``connect_wait_s``), with that error, while the
        #: transaction goes on trying: so a process says so at once rather
        #: than when the transaction finally gives up (or goes through)
        self._on_unreachable: Callable[[DatabaseUnreachableError], None] | None = None
        #: stop waiting once a transaction gave up on the server (see on_unreachable)
        self._give_up_once = False
        #: a try found the server unreachable since the last transaction
        #: that went through (the handler was called for it)
        self._unreachable = False

    def on_unreachable(
        self,
        handler: Callable[[DatabaseUnreachableError], None] | None,
        *,
        give_up_once: bool = False,
    ) -> None:
        """The ``server_outages`` capability: ``handler`` is called once
        per outage, in the thread whose transaction try first found the
        server unreachable (its connection lost, or no pooled connection
        within ``postgres.connect_wait_s`` seconds), with that error, while
        the transaction goes on trying; ``None`` removes it. Replaces the
        handler (and ``give_up_once``) set before.

        ``give_up_once``: for a command that ends when a transaction gives
        up on the unreachable server (``flowdesk run``, ``answer``...):
        from then on every transaction tries once, as after
        :meth:`stop_waiting`, so the statements that record where its run
        stopped do not wait out four tries each again (a ``run`` took 212 s
        to give up at the default 30 s). A worker leaves it ``False``: it
        waits for the server however long it is away."""
        self._on_unreachable = handler
        self._give_up_once = give_up_once

    def stop_waiting(self, wait_s: float = 2.0) -> None:
        """From now on, fail a transaction that waits more than ``wait_s``
        seconds (or ``postgres.connect_wait_s``, if shorter) for a
        connection, and try it once: for a process that is stopping
        (``flowdesk agent`` on SIGTERM), so a database that went away does
        not hold the stop for the pool's 30 s per statement, over several
        statements and retries. What could not be written stays unwritten;
        its run resumes from its last checkpoint."""
        self._wait_s = min(wait_s, self.pool.timeout)
        self._attempts = 1

    def _changed(self, run_id: str, *, wake: bool = False, shown: bool = False) -> None:
        """Queue the after-commit notifications for a committed write.

        ``wake``: something a worker may act on (:data:`WAKE`, which an app
        watching changes hears too). ``shown``: a change a list of runs shows,
        such as a new status (:data:`CHANGES`). A step that changes neither
        sends nothing: per-step progress is polled through
        :meth:`data_version`, since a NOTIFY per step would only cost round trips.
        """
        if wake:
            self.notifier.send(WAKE, f"{self.scope}:{run_id}")
        elif shown:
            self.notifier.send(CHANGES, f"{self.scope}:{run_id}")

    # -- transactions ------------------------------------------------------

    def _tx(self, body: Callable[[Conn], T], *, write: bool = True) -> T:
        """Run ``body(conn)`` in one transaction and commit it (see module doc).

        Domain errors raised by ``body`` roll back and propagate; psycopg
        errors are retried when transient, else translated to StoreError.
        """
        return self._transaction(lambda conn, _xact: body(conn), write, opens=False)

    def _read(self, body: Callable[[Conn], T]) -> T:
        """:meth:`_tx` for a read: on a direct connection in no transaction
        (each statement its own, see :meth:`_attempt_on`), behind a
        transaction pooler in one (its ``SET LOCAL search_path``)."""
        return self._transaction(lambda conn, _xact: body(conn), False, opens=False, tx=False)

    def _tx_opened(self, body: Callable[[Conn, _Xact], T]) -> T:
        """:meth:`_tx` for a write ``body(conn, xact)`` that opens the
        transaction itself: its first statements go out in one pipeline with
        the transaction's ``BEGIN`` (and :attr:`_begin`, which the body must
        send first), and one of them reads ``pg_current_xact_id()`` and
        ``pg_backend_pid()`` into ``xact``. Saves the two round trips
        :meth:`_tx` spends on its own ``BEGIN`` and on asking for the
        transaction id before COMMIT. A body whose statement went alone
        (:meth:`_append_alone`) leaves no transaction open: nothing to
        commit."""
        return self._transaction(body, True, opens=True)

    def _transaction(
        self, body: Callable[[Conn, _Xact], T], write: bool, *, opens: bool, tx: bool = True
    ) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                result = self._attempt(body, write, opens, tx)
            except _CommitLost:
                if attempt < self._attempts:
                    continue
                raise StoreError(
                    f"the connection to PostgreSQL ({self.where}) dropped during COMMIT "
                    f"{attempt} times; the server rolled the last one back, nothing was "
                    "written. Retry."
                ) from None
            except psycopg.Error as exc:
                lost = is_connection_lost(exc)
                if lost:
                    self._met_outage(exc)
                if (lost or exc.sqlstate in RETRY_SQLSTATES) and attempt < self._attempts:
                    if lost:  # e.g. a server restart: drop every dead pooled connection
                        self.pool.check()
                    continue
                if lost and self._give_up_once:
                    self.stop_waiting()
                raise self._translated(exc) from exc
            if write:
                self._own_commits += 1
            self._unreachable = False
            return result

    def _translated(self, exc: psycopg.Error) -> StoreError:
        """:func:`translate` of ``exc``; a Flowdesk table that does not exist
        is said to be dropped alone only while the schema's records are
        still in the database (asked on a pooled connection): with them gone
        too (``DROP SCHEMA``), ``db apply`` is the advice."""
        error = translate(exc, self.where, self.db)
        if not isinstance(error, SchemaObjectMissingError):
            return error
        ledger = f"{migrations.PG_SCHEMA}.{migrations.LEDGER}"
        try:
            conn = self._getconn()
            try:
                row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (ledger,)).fetchone()
            finally:
                self.pool.putconn(conn)
        except (psycopg.Error, PoolTimeout):  # cannot tell: the advice that was given before
            row = None
        if row is not None and row[0]:
            return error
        return translate(exc, self.where, self.db, records_kept=False)

    def _met_outage(self, exc: psycopg.Error) -> None:
        """A try found the server unreachable: the first time since the last
        transaction went through, call the :meth:`on_unreachable` handler."""
        if self._unreachable:
            return
        self._unreachable = True
        error = translate(exc, self.where, self.db)
        if self._on_unreachable is not None and isinstance(error, DatabaseUnreachableError):
            self._on_unreachable(error)

    def _attempt(self, body: Callable[[Conn, _Xact], T], write: bool, opens: bool, tx: bool) -> T:
        # getconn/putconn, not pool.connection(): its ``with conn`` calls
        # commit() again once _attempt_on has ended the transaction (nothing
        # to send, but a lock and a wait on psycopg's side at every step)
        conn = self._getconn()
        try:
            return self._attempt_on(conn, body, write, opens, tx)
        finally:
            self.pool.putconn(conn)

    def _getconn(self) -> Conn:
        """A pooled connection within one try's wait (``postgres.connect_wait_s``,
        or :meth:`stop_waiting`'s), asked for again every
        ``reconnect_max_s`` seconds: psycopg_pool gives up reconnecting after
        its ``reconnect_timeout`` and tries again only for a new request, so
        one request waited out its whole timeout (30 s) even when the server
        came back a moment later. A wait under way when :meth:`stop_waiting`
        is called is shortened too, at its next ask. Raises PoolTimeout when
        the wait is over."""
        started = time.monotonic()
        while True:
            wait_s = self.pool.timeout if self._wait_s is None else self._wait_s
            left = started + wait_s - time.monotonic()
            try:
                conn: Conn = self.pool.getconn(timeout=max(0.0, min(left, self.reconnect_max_s)))
                return conn
            except PoolTimeout:
                if left <= self.reconnect_max_s:
                    raise

    def _attempt_on(
        self, conn: Conn, body: Callable[[Conn, _Xact], T], write: bool, opens: bool, tx: bool
    ) -> T:
        """One try of a transaction on ``conn`` (autocommit: psycopg sends no
        BEGIN of its own, which it would wait for even in a pipeline). A
        write, or anything behind a transaction pooler, opens the transaction
        with :attr:`_start` (one round trip), unless the body opens it
        itself (``opens``). A read on a direct connection opens none: each of
        its statements is a transaction of its own, which sees what a
        statement of a READ COMMITTED transaction sees (a fresh snapshot per
        statement), without the BEGIN and COMMIT round trips."""
        xact = _Xact()
        try:
            if not opens and (tx or self._begin is not None):
                conn.execute(self._start)
            try:
                result = body(conn, xact)
            except _Landed as landed:
                return landed.result  # type: ignore[no-any-return]
            if write and not opens:
                # the server's own pid: a pooler's client connection reports another
                row = conn.execute(
                    "SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid(), "
                    "extract(epoch FROM pg_postmaster_start_time())::text"
                ).fetchone()
                if row is not None:
                    xact.xid, xact.pid, xact.started = row[0], int(row[1]), row[2]
        except BaseException:
            if not conn.broken:
                conn.rollback()
            raise
        if conn.pgconn.transaction_status == TransactionStatus.IDLE:
            return result  # a read outside a transaction: nothing to commit
        try:
            self._commit(conn)
        except psycopg.Error as exc:
            if xact.xid is None or not is_connection_lost(exc):
                raise
            xid, pid, written, started = xact.xid, xact.pid, xact.row, xact.started
            if not self._resolve(lambda: self._xact_status(xid, pid, written, started), xid):
                raise _CommitLost() from exc
        return result

    def _open(self, conn: Conn) -> psycopg.Cursor[Any]:
        """Queue the ``BEGIN`` (and :attr:`_begin`) of a :meth:`_tx_opened` body
        (call inside the body's pipeline, before its first statement) on a
        new cursor, and return it: the body's statement goes on the same
        cursor (whose results are then that statement's), which spares
        psycopg a cursor per statement."""
        cur = conn.cursor()
        cur.execute("BEGIN", prepare=False)
        if self._begin is not None:
            cur.execute(self._begin, prepare=False)
        return cur

    def _execute_opening(
        self, conn: Conn, sql: str, args: Sequence[Any], *, begin: bool = True
    ) -> Any:
        """Open the transaction and run ``sql`` in it in one round trip, on a
        direct connection: ``BEGIN`` and ``EXECUTE`` of ``sql`` prepared on
        this connection under a name (:func:`_named`; the first time the
        ``PREPARE`` goes in the same query) as one simple query, the
        parameters bound on the client (psycopg's
        :class:`~psycopg.ClientCursor`). Returns a cursor on the statement's
        result. Costs the client a third less Python than a pipeline of the
        same statements (psycopg's pipeline machinery), and the server no
        parsing or planning. A prepared statement outlives a rolled-back
        transaction, so one whose first query failed is deallocated (it may
        or may not exist) rather than assumed either way.

        ``begin=False``: no ``BEGIN``, so on the autocommit connection the
        statement is a transaction of its own that commits before the server
        replies (:meth:`_append_alone`)."""
        assert self._prepared is not None
        name, prepare, execute = _named(sql, len(args))
        if begin:
            execute = "BEGIN; " + execute
        with self._prepared_lock:
            known = self._prepared.setdefault(conn, set())
        first = name not in known
        cur = psycopg.ClientCursor(conn)
        try:
            cur.execute(prepare + execute if first else execute, args)
        except psycopg.Error as exc:
            if conn.broken:
                raise
            if first:  # PREPARE may or may not have run: make sure it did not
                conn.rollback()
                with contextlib.suppress(psycopg.Error):  # it did not exist
                    conn.execute(f"DEALLOCATE {name}")
            elif exc.sqlstate == "26000":  # the session lost it (DISCARD ALL): once more
                known.clear()
                conn.rollback()
                return self._execute_opening(conn, sql, args, begin=begin)
            raise
        known.add(name)
        while cur.nextset():
            pass  # to the statement's own result, past BEGIN's (and PREPARE's)
        return cur

    def _append_alone(self, conn: Conn, sql: str, args: Sequence[Any], row: CheckpointRow) -> Any:
        """Send an append's one statement (or :meth:`create_run`'s) with no ``BEGIN`` (see
        :meth:`_execute_opening`): on the autocommit connection it is a
        transaction of its own, which the server commits before it replies,
        so the append is one round trip and there is no COMMIT to send. A
        compare-and-set that does not hold writes nothing (the insert runs
        only when the update took the row).

        The connection lost while the statement was out leaves its outcome
        unknown, and no transaction id was heard: :meth:`_landed` ends the
        old backend if it still runs the statement, then looks for the very
        row the statement writes. Found: the append landed and returns
        (:class:`_Landed`); not found: :class:`_CommitLost` (the append is
        tried again, as after a COMMIT the server never saw)."""
        pid = conn.pgconn.backend_pid
        try:
            return self._execute_opening(conn, sql, args, begin=False)
        except psycopg.Error as exc:
            if not is_connection_lost(exc):
                raise
            values = tuple(row)
            what = (
                f"the creation of run {values[0]}"
                if values[1] == 0
                else f"the append of revision {values[1]} of run {values[0]}"
            )
            name = _named(sql, len(args))[0]
            if self._resolve(lambda: self._landed(pid, name, values), None, what=what):
                raise _Landed(row) from exc
            raise _CommitLost() from exc

    def _landed(self, pid: int, name: str, values: Sequence[Any]) -> str | None:
        """``"committed"`` when the ``checkpoints`` row ``values`` (every
        column equal) is stored, else ``"aborted"``, asked on a new
        connection once backend ``pid`` no longer runs prepared statement
        ``name`` (it is ended if it does: a statement still waiting for a
        lock has not committed, and ending it settles that it never will);
        ``"in progress"`` if it could not be ended."""
        conninfo = self.pool.conninfo
        if callable(conninfo):
            conninfo = conninfo()
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            running = (
                "FROM pg_stat_activity WHERE pid=%s AND state<>'idle' "
                "AND strpos(query, 'EXECUTE ' || %s || '(') > 0"
            )
            conn.execute(f"SELECT pg_terminate_backend(pid, 1000) {running}", (pid, name))
            if conn.execute(f"SELECT 1 {running}", (pid, name)).fetchone() is not None:
                return "in progress"
            got = conn.execute(_LANDED, (*values[:2], *values)).fetchone()
            return "committed" if got is not None else "aborted"

    def _commit(self, conn: Conn) -> None:
        """COMMIT (a seam the commit-loss tests fault)."""
        conn.commit()

    def _resolve(self, probe: Callable[[], str | None], xid: str | None, *, what: str = "") -> bool:
        """Whether transaction ``xid`` (or, with no id heard, ``what``)
        committed (True) or aborted (False: the caller runs it again), asked
        by ``probe`` on a new connection (:meth:`_xact_status`, whose
        ``pg_xact_status`` the server keeps after the session is gone, or
        :meth:`_landed`): ``"committed"``, ``"aborted"``, ``"in progress"``,
        ``"restarted"`` (committed by the commit log of a server restarted
        since, which may be another transaction's) or ``None`` (no longer
        known). A server that cannot be reached is
        asked again on a new connection (back-off 50 ms to 1 s) until
        :data:`RESOLVE_TIMEOUT_S` (a last try at that deadline); the error
        then states how long it did try (a try can outlast the deadline),
        and the :meth:`on_unreachable` handler is called at the first failed try.

        Raises:
            CommitUnknownError: the server stayed unreachable, still holds the
                transaction open, no longer knows it, or restarted since and
                cannot tell it from another; nothing is assumed.
        """
        began = time.monotonic()
        deadline = began + RESOLVE_TIMEOUT_S
        pause = 0.05
        unreachable = False
        while True:
            try:
                state = probe()
            except psycopg.Error as exc:
                unreachable = is_connection_lost(exc)
                if unreachable:
                    self._met_outage(exc)
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                # the time it did try (a try can outlast the deadline: its connect timeout)
                reason = (
                    "the server could not be reached to ask for "
                    f"{time.monotonic() - began:.1f} s ({first})"
                )
            else:
                if state in ("committed", "aborted"):
                    log.info(
                        "a lost COMMIT (%s) was settled: %s",
                        f"transaction {xid}" if xid is not None else what, state,
                    )  # fmt: skip
                    return state == "committed"
                if state is None:  # too old for the server's commit log
                    reason = "the server no longer knows that transaction"
                    break
                if state == "restarted":
                    reason = (
                        "the server restarted since, and its commit log says committed, but "
                        "a restarted server gives the id of a transaction it lost to another "
                        "one, so that may be another transaction's"
                    )
                    break
                reason = f"the server still holds it open after {RESOLVE_TIMEOUT_S:g} s"
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))  # the last try at the deadline
            pause = min(pause * 2, 1.0)
        if unreachable and self._give_up_once:  # gave up on the server (see on_unreachable)
            self.stop_waiting()
        raise CommitUnknownError(self.where, xid, reason, what=what)

    def _xact_status(
        self,
        xid: str,
        pid: int,
        written: Sequence[Any] | None = None,
        started: str | None = None,
    ) -> str | None:
        """``pg_xact_status(xid)`` on a new connection (not the pool's: its
        connections may all have dropped with the one that sent COMMIT). While
        the old backend still holds the transaction open (it has not seen the
        client go) it is ended and the server asked again.

        A server that crashed (``pg_ctl -m immediate stop``, a backend
        killed, a power cut) forgets the ids of transactions none of whose
        WAL reached its disk, and hands them out again after its recovery:
        ``pg_xact_status`` of such an id then answers for whichever new
        transaction got it. So an id the server has not handed out yet
        (``pg_xact_status`` refuses it as "in the future") is ``"aborted"`` (had it committed, its
        commit record would have moved the server past it), and a
        ``"committed"`` for a transaction that wrote checkpoints row
        ``written`` (an append, a run's creation) stands only when that very
        row (every column equal, :data:`_LANDED`) is stored; else the id was
        another transaction's and this one is ``"aborted"`` (run again: its
        compare-and-set refuses it if it had landed after all and its row
        was pruned since). Any other transaction's ``"committed"`` stands
        only if the server has not restarted since ``started`` (the
        ``pg_postmaster_start_time()`` it noted); else it is ``"restarted"``
        (unknown: :meth:`_resolve` raises CommitUnknownError). A server that
        crashed and recovered without restarting (a backend killed) is not
        told apart that way: there only the not-handed-out-yet rule holds."""
        conninfo = self.pool.conninfo
        if callable(conninfo):  # psycopg_pool also takes a function returning it
            conninfo = conninfo()
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            state, now_started = _xact_status_on(conn, xid)
            if state == "in progress":
                conn.execute(
                    "SELECT pg_terminate_backend(pid, 1000) FROM pg_stat_activity "
                    "WHERE pid=%s AND backend_xid::text=%s",
                    (pid, str(int(xid) & 0xFFFFFFFF)),
                )
                state, now_started = _xact_status_on(conn, xid)
            if state != "committed":
                return state
            if written is None:
                return "restarted" if started not in (None, now_started) else "committed"
            if conn.execute(_LANDED, (*written[:2], *written)).fetchone() is None:
                log.warning(
                    "transaction %s committed by the server's commit log, but the "
                    "checkpoints row of run %s revision %s it wrote is not stored: the "
                    "server crashed and gave that id to another transaction; this one "
                    "did not commit and is run again",
                    xid, written[0], written[1],
                )  # fmt: skip
                return "aborted"
            return "committed"

    # -- helpers -------------------------------------------------------------

    def _no_run(self, run_id: str) -> CheckpointNotFoundError:
        return CheckpointNotFoundError(f"no run {run_id} in scope {self.scope!r}")

    def _remember(
        self, cp: Checkpoint, previous: Checkpoint | None = None, row: CheckpointRow | None = None
    ) -> None:
        """Cache the store's own copy of ``cp``: :func:`rows.remembered` from
        ``previous`` when ``row`` is the delta row just written against it,
        else a whole :func:`rows.detached` copy. Under the cache lock, as
        ``remembered`` updates ``previous``'s step map in place."""
        with self._cache_lock:
            own = remembered(cp, previous, row) if row is not None else detached(cp)
            self._last[cp.run_id] = own
            self._last.move_to_end(cp.run_id)
            while len(self._last) > _CACHE_RUNS:
                self._last.popitem(last=False)

    def _cached(self, run_id: str) -> Checkpoint | None:
        """The cached checkpoint of ``run_id``: read it, never change or hand it out."""
        with self._cache_lock:
            return self._last.get(run_id)

    def _cached_copy(self, run_id: str, revision: int) -> Checkpoint | None:
        """A copy of the cached checkpoint of ``run_id`` if it is at ``revision``."""
        with self._cache_lock:
            cached = self._last.get(run_id)
            return detached(cached) if cached is not None and cached.revision == revision else None

    def _forget(self, run_id: str) -> None:
        with self._cache_lock:
            self._last.pop(run_id, None)

    @staticmethod
    def _write_waits(conn: Conn, cp: Checkpoint, *, replace: bool) -> None:
        """Mirror ``cp.waits`` into ``waits`` (``replace``: drop the run's old ones first)."""
        if replace:
            conn.execute(SQL.delete_waits, (cp.run_id,))
        if cp.waits:
            with conn.cursor() as cur:
                cur.executemany(SQL.insert_wait, wait_values(cp))

    @staticmethod
    def _run_domain(conn: Conn, writes: Sequence[DomainWrite]) -> None:
        """Run a step's domain writes in the open transaction.

        Raises:
            DomainWriteError: a write broke a constraint, met a missing table
                or column, or raised (see ``postgres_sql.domain_write_error``);
                the transaction rolls back. A failure of the server or the
                connection stays a psycopg error (retried or translated).
        """
        if writes:
            tx = SqlTx(conn)
            for write in writes:
                try:
                    write(tx)
                except Exception as exc:
                    mapped = domain_write_error(exc, tx.last_sql)
                    if mapped is None:
                        raise
                    raise mapped from exc

    # -- writes ----------------------------------------------------------------

    def create_run(
        self, run: RunRecord, first: Checkpoint, writes: Sequence[DomainWrite] = ()
    ) -> None:
        if first.revision != 0 or run.run_id != first.run_id:
            raise ValueError("create_run needs the run's revision-0 checkpoint")
        progress = run.progress or (None, None)
        lease_ttl = (
            None
            if run.lease_owner is None or run.lease_expires_at is None
            else max(0.0, run.lease_expires_at - run.created_at)
        )

        args = (
            run.run_id,
            run.flow_name,
            run.flow_version,
            first.status,
            run.created_at,
            run.updated_at,
            self.scope,
            run.flow_key,
            run.parent_run_id,
            codec.dumps(dict(run.context)),
            progress[0],
            progress[1],
            no_nul(run.error),
            run.lease_owner if lease_ttl is not None else None,
            lease_ttl,
            run.context.get("tenant_id"),
            run.context.get("session_id"),
            run.deadline_at,
        )

        def body(conn: Conn, xact: _Xact) -> None:
            # the statement's execution too: psycopg encodes the text (a lone
            # surrogate in the input state is a UnicodeEncodeError there)
            try:
                row = checkpoint_values(first, None, error=no_nul(first.error))
                if (
                    self._prepared is not None
                    and conn.autocommit
                    and not first.waits
                    and not writes
                ):
                    cur = self._append_alone(conn, _CREATE_RUN, (*args, *row), row)
                elif self._prepared is not None:
                    cur = self._execute_opening(conn, _CREATE_RUN, (*args, *row))
                else:
                    with conn.pipeline():
                        cur = self._open(conn)
                        cur.execute(_CREATE_RUN, (*args, *row))
            except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
                if isinstance(exc, psycopg.Error):
                    raise
                raise unstorable(first, exc) from exc
            got = cur.fetchone()
            assert got is not None
            xact.note(got[0], got[1], row)
            if first.waits:
                self._write_waits(conn, first, replace=False)
            self._run_domain(conn, writes)

        self._tx_opened(self._unique(body, run=run))
        self._remember(first)
        self._changed(run.run_id, wake=True)

    def _unique(self, body: Callable[P, T], *, run: RunRecord | None = None,
                cp: Checkpoint | None = None) -> Callable[P, T]:  # fmt: skip
        """``body`` with unique violations turned into conflicts (by constraint name)."""

        def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return body(*args, **kwargs)
            except psycopg.errors.UniqueViolation as exc:
                name = exc.diag.constraint_name or ""
                if run is not None and name == "runs_live_flow_key":
                    raise DuplicateFlowKeyError(
                        f"a live run of {run.flow_name!r} with flow key {run.flow_key!r} exists"
                    ) from exc
                if run is not None and name == "runs_pkey":
                    raise RevisionConflictError(
                        f"run {run.run_id} already exists; pick another run id"
                    ) from exc
                if cp is not None and name in ("checkpoints_pkey", "outbox_pkey"):
                    raise RevisionConflictError(
                        f"run {cp.run_id}: revision {cp.revision} (or one of its outbox "
                        "intents) was already saved by another writer"
                    ) from exc
                raise

        return wrapped

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
        cp = checkpoint
        previous = self._cached(cp.run_id)
        if previous is None or previous.revision != cp.revision - 1:
            previous = self._load_or_none(cp.run_id, cp.revision - 1)

        def body(conn: Conn, xact: _Xact) -> CheckpointRow:
            return self._append(
                conn, cp, previous, writes, lease, intents, consume, changed_steps,
                changed_fields, xact,
            )  # fmt: skip

        row = self._tx_opened(self._unique(body, cp=cp))
        self._remember(cp, previous, row)
        # wake workers: new waits (a deadline to schedule), outbox work, a run handed back
        wake = (
            bool(intents)
            or cp.status == "pending"
            or (bool(cp.waits) and (previous is None or previous.waits != cp.waits))
        )
        shown = previous is None or previous.status != cp.status
        self._changed(cp.run_id, wake=wake, shown=shown)

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        """Append every request in ONE transaction (one commit: one WAL flush
        on the server), each inside its own SAVEPOINT: a conflict, lost lease
        or failing domain write rolls back that request's part only and is
        returned in its slot (as :meth:`SqliteCheckpointStore.append_batch
        <desktop_app.store.sqlite.store.SqliteCheckpointStore.append_batch>`; see
        :class:`~desktop_app.store.group_commit.BatchAppender`). A single
        request takes no savepoint. Between requests one round trip both
        releases the last savepoint and opens the next.

        Returns:
            one entry per request, in order: ``None`` when it committed, else
            the exception that rolled back its part
            (``RevisionConflictError``, ``LeaseLostError``,
            ``CheckpointNotFoundError``, ``DomainWriteError``, ``StoreError``).

        Raises:
            StoreError: the transaction itself failed (the connection dropped,
                or a serialization failure or deadlock outlived the retries):
                nothing of the batch committed. A transient failure retries
                the whole batch, as :meth:`append` retries its transaction.
        """
        if not requests:
            return []
        if len(requests) == 1:  # no savepoint needed: the transaction is the request
            r = requests[0]
            try:
                self.append(
                    r.checkpoint, r.writes, r.lease, intents=r.intents, consume=r.consume,
                    changed_steps=r.changed_steps, changed_fields=r.changed_fields,
                )  # fmt: skip
            except Exception as exc:  # a domain write may raise anything
                return [exc]
            return [None]
        # the stored revision each request builds on: the cache, else a read (as append)
        stored: list[Checkpoint | None] = []
        earlier: set[tuple[str, int]] = set()
        for r in requests:
            cp = r.checkpoint
            prev: Checkpoint | None = None
            if (cp.run_id, cp.revision - 1) not in earlier:  # else: an earlier request's
                prev = self._cached(cp.run_id)
                if prev is None or prev.revision != cp.revision - 1:
                    prev = self._load_or_none(cp.run_id, cp.revision - 1)
            stored.append(prev)
            earlier.add((cp.run_id, cp.revision))

        def body(conn: Conn) -> list[tuple[BaseException | None, CheckpointRow | None]]:
            out: list[tuple[BaseException | None, CheckpointRow | None]] = []
            written: dict[str, Checkpoint] = {}  # run -> checkpoint appended in this batch
            savepoint = False  # one named savepoint, released and taken again
            for r, prev in zip(requests, stored, strict=True):
                cp = r.checkpoint
                before = written.get(cp.run_id)
                if before is not None and before.revision == cp.revision - 1:
                    prev = before
                conn.execute(
                    "RELEASE SAVEPOINT flowdesk_batch; SAVEPOINT flowdesk_batch"
                    if savepoint
                    else "SAVEPOINT flowdesk_batch"
                )
                savepoint = True
                try:
                    row = self._append_request(conn, r, prev)
                except Exception as exc:
                    if _fails_the_batch(exc):
                        raise  # _tx retries the whole batch, or reports it failed
                    conn.execute("ROLLBACK TO SAVEPOINT flowdesk_batch")
                    out.append((_slot_error(exc, self.where), None))
                else:
                    written[cp.run_id] = cp
                    out.append((None, row))
            return out

        results = self._tx(body)
        remembered_runs: set[str] = set()
        for r, prev, (err, row) in zip(requests, stored, results, strict=True):
            if err is not None or row is None:
                continue
            cp = r.checkpoint
            if cp.run_id in remembered_runs or prev is None:
                self._remember(cp)  # built on an earlier request: a whole copy
            else:
                self._remember(cp, prev, row)
            remembered_runs.add(cp.run_id)
            wake = (
                bool(r.intents)
                or cp.status == "pending"
                or (bool(cp.waits) and (prev is None or prev.waits != cp.waits))
            )
            shown = prev is None or prev.status != cp.status
            self._changed(cp.run_id, wake=wake, shown=shown)
        return [err for err, _ in results]

    def _append_request(
        self, conn: Conn, r: AppendRequest, previous: Checkpoint | None
    ) -> CheckpointRow:
        """One request of :meth:`append_batch` in ``conn``'s transaction."""
        cp = r.checkpoint

        def body(c: Conn) -> CheckpointRow:
            return self._append(
                c, cp, previous, r.writes, r.lease, r.intents, r.consume,
                r.changed_steps, r.changed_fields,
            )  # fmt: skip

        return self._unique(body, cp=cp)(conn)

    def _append(
        self,
        conn: Conn,
        cp: Checkpoint,
        previous: Checkpoint | None,
        writes: Sequence[DomainWrite],
        lease: Lease | None,
        intents: Sequence[Intent],
        consume: Sequence[tuple[int, str]],
        changed_steps: frozenset[str] | None = None,
        changed_fields: frozenset[str] | None = None,
        xact: _Xact | None = None,
    ) -> CheckpointRow:
        """One append in ``conn``'s transaction; returns the checkpoint row written.

        The compare-and-set on ``runs`` and the checkpoint's insert are one
        statement (:func:`_append_sql`), sent in one pipeline after
        :attr:`_begin` when ``xact`` is given (the transaction is not open
        yet: :meth:`_tx_opened`); that statement's ``pg_current_xact_id()``
        goes into ``xact``. Waits, signals consumed, intents and domain writes
        follow, once the compare-and-set is known to have held. With none of
        those to follow, on a direct autocommit connection, the statement
        goes alone with no ``BEGIN`` and commits by itself
        (:meth:`_append_alone`)."""
        if previous is None:  # nothing to write a delta against: the revision is gone
            if xact is not None:
                self._open(conn)
            raise self._conflict(conn, cp, lease)
        done, total = cp.progress if cp.progress is not None else (None, None)
        args: list[Any] = [cp.revision, cp.created_at, done, total, no_nul(cp.error), cp.status]
        terminal = cp.status not in ("running", "pending")
        if lease is not None and not terminal:
            args += [lease.owner, _ttl(lease)]
        args += [cp.run_id, self.scope, cp.revision - 1]
        cond = ""
        if lease is not None:
            cond, cargs = _lease_cond(lease)
            args += cargs
        sql = _append_sql(terminal, lease is not None, cond)
        try:
            row = checkpoint_values(
                cp, previous, changed_steps, changed_fields, error=no_nul(cp.error)
            )
            args += row
            if (
                xact is not None
                and self._prepared is not None
                and conn.autocommit
                and not writes
                and not intents
                and not consume
                and previous.waits == cp.waits
            ):  # nothing follows the statement: it commits by itself, one round trip
                cur = self._append_alone(conn, sql, args, row)
            elif xact is not None and self._prepared is not None:
                cur = self._execute_opening(conn, sql, args)
            else:
                with conn.pipeline():
                    cur = self._open(conn) if xact is not None else conn.cursor()
                    cur.execute(sql, args)
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            if isinstance(exc, psycopg.Error):
                raise
            raise unstorable(cp, exc) from exc
        got = cur.fetchone()
        assert got is not None
        if xact is not None:
            xact.note(got[1], got[2], row)
        if got[0] != 1:
            raise self._conflict(conn, cp, lease)
        if previous.waits != cp.waits:
            self._write_waits(conn, cp, replace=True)
        for signal_id, wait_id in consume:
            cur = conn.execute(SQL.consume_signal, (wait_id, cp.created_at, signal_id))
            if cur.rowcount != 1:
                raise RevisionConflictError(
                    f"signal {signal_id} was consumed by another wait first"
                )
        if intents:
            with conn.cursor() as c:
                c.executemany(
                    SQL.insert_intent,
                    [
                        (
                            i.intent_id,
                            i.run_id,
                            i.step_id,
                            i.destination,
                            codec.dumps(i.payload),
                            cp.created_at,
                        )
                        for i in intents
                    ],
                )
        self._run_domain(conn, writes)
        return row

    def _conflict(self, conn: Conn, cp: Checkpoint, lease: Lease | None) -> FlowdeskError:
        """Why appending ``cp`` did not take, read in a statement of its own
        (its own snapshot: the winner's revision): the run is gone, the lease
        was lost, or another writer's revision is stored."""
        row = conn.execute(SQL.run_revision_owner, (cp.run_id, self.scope)).fetchone()
        if row is None:
            return self._no_run(cp.run_id)
        stored, holder = row[0], row[1]
        if lease is not None and (
            holder not in (None, lease.owner)
            or (holder != lease.owner and stored == cp.revision - 1)
        ):
            # another process holds the lease: it took the run over (or won a
            # takeover race) and may have saved revisions since (as on SQLite)
            return LeaseLostError(lease_lost_message(cp.run_id, holder, lease))
        return RevisionConflictError(
            f"run {cp.run_id}: revision {cp.revision} conflicts with the stored "
            f"latest revision {stored}; another writer got there first. Reload "
            "the run and try again."
        )

    def update_latest(self, run_id: str, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        self._forget(run_id)
        cp = self._tx(lambda conn: self._update_latest_in(conn, run_id, change))
        self._remember(cp)
        self._changed(run_id, wake=True)
        return cp

    def _update_latest_in(
        self, conn: Conn, run_id: str, change: Callable[[Checkpoint], Checkpoint]
    ) -> Checkpoint:
        """The body of :meth:`update_latest`, in transaction ``conn``."""
        # FOR UPDATE: no other writer can append between the read and ours.
        row = conn.execute(
            "SELECT revision FROM runs WHERE run_id=%s AND scope=%s FOR UPDATE",
            (run_id, self.scope),
        ).fetchone()
        if row is None:
            raise self._no_run(run_id)
        latest = self._load(conn, run_id, int(row[0]), latest=True)
        cp = change(latest)
        self._append(conn, cp, latest, (), None, (), ())
        return cp

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
        (one transaction: the run row, then its open intents, ``FOR UPDATE``)."""

        def body(conn: Conn) -> tuple[Checkpoint, Withdrawal]:
            cp = self._update_latest_in(conn, run_id, change)
            done = self._withdraw_in(conn, run_id, reason, presumed_dead, presumed_alive, now)
            return cp, done

        self._forget(run_id)
        cp, done = self._tx(body)
        self._remember(cp)
        self._changed(run_id, wake=True)
        return cp, done

    def end_unreadable(self, run_id: str, status: RunStatus, error: str, now: float) -> RunRecord:
        """End a live run whose latest checkpoint cannot be read back (a
        :class:`CheckpointCorruptError`: a row deleted outside Flowdesk)
        without reading it, as the SQLite store's method of that name: its
        ``runs`` row becomes ``status`` with ``error``, its lease and
        pending waits go, no checkpoint is appended; its history stays.

        Args:
            run_id: the run; status: its new status; error: why (names the
                damage); now: UTC epoch seconds, its ``updated_at``.

        Raises:
            CheckpointNotFoundError: no such run in this scope.
            RunStateError: the run had ended already (nothing was changed).
            StoreError: the database could not be written.
        """
        run = self._tx(lambda conn: self._end_unreadable_in(conn, run_id, status, error, now))
        self._changed(run_id, wake=True)
        return run

    def _end_unreadable_in(
        self, conn: Conn, run_id: str, status: RunStatus, error: str, now: float
    ) -> RunRecord:
        cur = conn.execute(SQL.end_unreadable, (status, no_nul(error), now, run_id, self.scope))
        changed = cur.rowcount == 1
        if changed:
            conn.execute(SQL.delete_waits, (run_id,))
        run = self._get_run(conn, run_id)
        self._forget(run_id)
        if run is None:
            raise self._no_run(run_id)
        if not changed:
            raise RunStateError(f"run {run_id} is already {run.status}; nothing to do")
        return run

    def end_unreadable_withdrawing(
        self,
        run_id: str,
        status: RunStatus,
        error: str,
        now: float,
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
    ) -> tuple[RunRecord, Withdrawal]:
        """:meth:`end_unreadable` and the withdrawal of the run's open
        intents (``reason``) in one transaction, as
        :meth:`update_latest_withdrawing` for a run whose latest checkpoint
        cannot be read. Raises what :meth:`end_unreadable` raises (nothing
        is withdrawn then)."""

        def body(conn: Conn) -> tuple[RunRecord, Withdrawal]:
            run = self._end_unreadable_in(conn, run_id, status, error, now)
            return run, self._withdraw_in(conn, run_id, reason, presumed_dead, presumed_alive, None)

        done = self._tx(body)
        self._changed(run_id, wake=True)
        return done

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        cond, cargs = _lease_cond(lease)

        def body(conn: Conn) -> tuple[bool, RunRecord | None]:
            cur = conn.execute(
                "UPDATE runs SET lease_owner=%s, lease_expires_at=flowdesk_now() + "
                f"%s * interval '1 second' WHERE run_id=%s AND scope=%s AND {cond}",
                (lease.owner, _ttl(lease, now), run_id, self.scope, *cargs),
            )
            return cur.rowcount == 1, self._get_run(conn, run_id)

        claimed, run = self._tx(body)
        if run is None:
            raise self._no_run(run_id)
        if not claimed:
            raise RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        return run

    def now(self) -> float:
        """The database clock (``flowdesk_now()``), UTC epoch seconds."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT extract(epoch from flowdesk_now())::float8"
            ).fetchone()
        )
        return float(row[0]) if row is not None else time.time()

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
        """See :meth:`desktop_app.store.protocol.Leases.claim_runnable`: one
        transaction, candidates locked with ``FOR UPDATE SKIP LOCKED`` (a row
        another claimant is taking is skipped, not waited for); lease times
        from the database clock unless ``now`` is given."""
        if limit <= 0:
            return []
        woken_at = self.now() if now is None else now
        at = "flowdesk_now()" if now is None else "to_timestamp(%(at)s)"
        params: dict[str, Any] = {
            "scope": self.scope,
            "statuses": list(statuses),
            "wake": [],
            "have": [],
            "flows": None if flows is None else list(flows),
            "owner": owner,
            "at": now,
            "ttl": ttl_s,
            "limit": limit,
        }
        sql = (
            f"SELECT run_id, lease_owner, coalesce(lease_expires_at <= {at}, false) FROM runs "
            "WHERE scope=%(scope)s AND (status = ANY(%(statuses)s) OR run_id = ANY(%(wake)s))"
            " AND NOT run_id = ANY(%(have)s)"
        )
        if flows is not None:
            sql += " AND flow_name = ANY(%(flows)s)"
        judged = presumed_dead is not None or presumed_alive is not None
        if not judged:
            sql += f" AND (lease_owner IS NULL OR lease_owner=%(owner)s OR lease_expires_at<={at})"
        sql += " ORDER BY status <> ALL(%(statuses)s), created_at, run_id"
        if not judged:
            sql += " LIMIT %(limit)s"
        sql += " FOR UPDATE SKIP LOCKED"

        #: (run, owner taken from, its lease expired) of the last attempt, for the log
        taken: list[tuple[str, str, bool]] = []

        def body(conn: Conn) -> list[RunRecord]:
            ids: list[str] = []
            taken.clear()
            for run_id, holder, expired in conn.execute(sql, params).fetchall():
                if len(ids) >= params["limit"]:
                    break
                if (
                    holder is None
                    or holder == owner
                    or (presumed_dead is not None and presumed_dead(holder))
                    or (expired and not (presumed_alive is not None and presumed_alive(holder)))
                ):
                    ids.append(run_id)
                    if holder is not None and holder != owner:
                        taken.append((run_id, holder, bool(expired)))
            if not ids:
                return []
            conn.execute(
                f"UPDATE runs SET lease_owner=%(owner)s, lease_expires_at={at} + "
                "%(ttl)s * interval '1 second' WHERE run_id = ANY(%(ids)s)",
                {**params, "ids": ids},
            )
            return [run for i in ids if (run := self._get_run(conn, i)) is not None]

        # waiting runs to wake, read a window at a time (4x larger each time)
        # until the limit is claimed or none is left: the due runs a window
        # holds that this claim cannot take (other flows', live holders')
        # must not hide the ones behind them from it forever. Each round
        # commits its claims and the next leaves them out.
        claimed: list[RunRecord] = []
        took: list[tuple[str, str, bool]] = []
        window = max(limit * 4, 100)
        while True:
            wake = self.wakeable_runs(woken_at, window) if wakeable else []
            params.update(wake=wake, have=[r.run_id for r in claimed], limit=limit - len(claimed))
            claimed += self._tx(body)
            took += taken
            if len(claimed) >= limit or len(wake) < window:
                break
            window *= 4
        log_takeovers(owner, took)
        return claimed

    def renew(self, run_ids: Sequence[str], lease: Lease) -> set[str]:
        if not run_ids:
            return set()

        def body(conn: Conn) -> set[str]:
            rows = conn.execute(
                "UPDATE runs SET lease_expires_at=flowdesk_now() + %s * interval '1 second' "
                "WHERE run_id = ANY(%s) AND scope=%s AND lease_owner=%s "
                "AND status IN ('pending','running') RETURNING run_id",
                (_ttl(lease), list(run_ids), self.scope, lease.owner),
            ).fetchall()
            return {r[0] for r in rows}

        return self._tx(body)

    def release(self, run_id: str, owner: str) -> None:
        self._tx(lambda conn: conn.execute(SQL.release_run, (run_id, owner)))
        self._changed(run_id, wake=True)  # another worker may pick it up now

    def delete_run(self, run_id: str) -> None:
        def body(conn: Conn) -> int:
            return conn.execute(
                "DELETE FROM runs WHERE run_id=%s AND scope=%s", (run_id, self.scope)
            ).rowcount

        if self._tx(body) != 1:
            raise self._no_run(run_id)
        self._forget(run_id)

    def prune(self, run_id: str, keep_last_n: int) -> int:
        if keep_last_n < 1:
            raise ValueError(
                "keep_last_n must be at least 1: the latest checkpoint is never pruned"
            )

        def body(conn: Conn) -> int:
            row = conn.execute(
                "SELECT revision FROM runs WHERE run_id=%s AND scope=%s FOR UPDATE",
                (run_id, self.scope),
            ).fetchone()
            if row is None:
                raise self._no_run(run_id)
            oldest_kept = int(row[0]) - keep_last_n + 1
            first = conn.execute(SQL.oldest_revision, (run_id,)).fetchone()
            if first is None or first[0] is None or first[0] >= oldest_kept:
                return 0
            base = self._load(conn, run_id, oldest_kept)
            deleted = conn.execute(SQL.delete_checkpoints_to, (run_id, oldest_kept)).rowcount
            # the oldest kept revision again, as a snapshot; the run's waits
            # mirror its latest revision, which stays, so they stay as they are
            row = checkpoint_values(base, None, error=no_nul(base.error))
            conn.execute(_INSERT_CHECKPOINT, row)
            return int(deleted) - 1

        return self._tx(body)

    # -- workers on several machines -----------------------------------------

    def claim_for_worker(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        *,
        flows: Mapping[str, str] | Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """What a worker on one of several machines claims (its twin of
        :meth:`claim_runnable`): lease up to ``limit`` runnable runs
        (``pending``/``running``) to ``owner`` for ``ttl_s`` seconds of
        database time, oldest first, in one statement.

        A run is runnable when its lease is unset, expired by the database's
        clock (``flowdesk_now()``), or held by a worker whose liveness lock is
        free (its session ended: SIGKILL, machine loss; see
        :class:`~desktop_app.store.postgres.notify.Listener`). Rows are taken
        with ``FOR UPDATE SKIP LOCKED``, so concurrent claimers never receive
        the same run. ``flows`` (name -> version, or ``(name, version)``
        pairs: a flow may run at several versions) restricts claims to flows
        the caller can execute. Returns the claimed runs (leased to
        ``owner``). Raises StoreError."""
        if limit <= 0:
            return []
        pairs = (
            None if flows is None else list(flows.items() if isinstance(flows, Mapping) else flows)
        )
        names = None if pairs is None else [n for n, _ in pairs]
        versions = None if pairs is None else [v for _, v in pairs]
        flow_cond = ""
        params: dict[str, Any] = {
            "scope": self.scope,
            "owner": owner,
            "ttl": max(0.0, float(ttl_s)),
            "limit": int(limit),
        }
        if names is not None:
            flow_cond = (
                " AND (flow_name, flow_version) IN "
                "(SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
            )
            params.update(names=names, versions=versions)
        sql = (
            # Owners whose liveness lock nobody holds are dead (the xact lock is
            # released at commit; a live worker's session lock makes it fail).
            "WITH dead AS MATERIALIZED (SELECT w.owner FROM workers w WHERE w.owner IN ("
            " SELECT lease_owner FROM runs WHERE scope=%(scope)s"
            "  AND status IN ('pending','running') AND lease_owner IS NOT NULL"
            "  AND lease_owner<>%(owner)s AND lease_expires_at>flowdesk_now())"
            " AND pg_try_advisory_xact_lock(w.lock_key)),"
            # the owner each run is taken from (and whether its lease had lapsed), for the log
            " picked AS (SELECT run_id AS picked_id, lease_owner AS was,"
            "  coalesce(lease_expires_at<=flowdesk_now(), true) AS lapsed"
            "  FROM runs WHERE scope=%(scope)s"
            "  AND status IN ('pending','running')"
            "  AND (lease_owner IS NULL OR lease_expires_at<=flowdesk_now()"
            "   OR lease_owner IN (SELECT owner FROM dead))"
            f"{flow_cond}"
            "  ORDER BY created_at, run_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
            " UPDATE runs SET lease_owner=%(owner)s,"
            " lease_expires_at=flowdesk_now() + %(ttl)s * interval '1 second'"
            " FROM picked WHERE run_id=picked_id AND scope=%(scope)s"
            f" RETURNING {_RUN_COLUMNS}, was, lapsed"
        )
        rows = self._tx(lambda conn: conn.execute(sql, params).fetchall())
        log_takeovers(
            owner, [(r[0], r[-2], bool(r[-1])) for r in rows if r[-2] not in (None, owner)]
        )
        runs = sorted((run_from_row(r[:-2]) for r in rows), key=lambda r: (r.created_at, r.run_id))
        return runs

    def listener(
        self,
        channels: Sequence[str] = (WAKE,),
        *,
        owner: str | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> Listener:
        """A started :class:`~desktop_app.store.postgres.notify.Listener` on
        this store's server (a dedicated session on :attr:`session_url`,
        outside the pool); with ``owner`` it is that worker's liveness.

        Raises:
            NoSessionError: :attr:`session_url` is ``None`` (the pool goes
                through a transaction-mode pooler and no direct URL is set).
            psycopg.Error: the first connection failed.
        """
        if self.session_url is None:
            raise NoSessionError(
                f"{self.where or 'the database'} goes through a transaction-mode pooler "
                '(postgres.pooler = "transaction") and no postgres.listen_url is set: '
                "LISTEN and a worker's liveness lock need a session of their own. Set "
                "postgres.listen_url (FLOWDESK_POSTGRES__LISTEN_URL) to a direct "
                "connection to the same server."
            )
        return Listener(
            self.session_url,
            channels,
            owner=owner,
            on_lost=on_lost,
            connect_kwargs=connection_kwargs("flowdesk listener"),
            reconnect_max_s=self.reconnect_max_s,
        ).start()

    def watch_changes(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """``ChangePush.watch_changes``: a :class:`Listener` on :data:`WAKE`
        and :data:`CHANGES` (a session of its own) and a thread that calls
        ``on_change()`` after each notification, coalesced: notices that
        arrive while ``on_change`` runs make one more call. Notices of every
        scope on the server count (a spare refresh, never a missed one)."""
        try:
            listener = self.listener((WAKE, CHANGES))
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot listen for changes on {self.where or 'the server'}: {exc}"
            ) from exc
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                if listener.wait(1.0) and not stop.is_set():
                    try:
                        on_change()
                    except Exception:  # the watcher outlives a failing callback
                        log.exception("flowdesk: change callback failed")

        thread = threading.Thread(target=watch, name="flowdesk-watch", daemon=True)
        thread.start()

        def close() -> None:
            if stop.is_set():
                return
            stop.set()
            listener.poke()
            thread.join(timeout=2)
            listener.close()

        return close

    def server_time(self) -> tuple[float, float, float]:
        """``(database clock_timestamp(), local time sent, local time answered)``,
        UTC epoch seconds: the clock every lease decision uses, with the local
        clock read right around the query on a connection already in hand (a
        wait for a pooled connection is outside the round trip). Raises
        StoreError."""

        def body(conn: Conn) -> tuple[float, float, float]:
            sent = time.time()
            row = conn.execute("SELECT extract(epoch from clock_timestamp())::float8").fetchone()
            answered = time.time()
            assert row is not None
            return float(row[0]), sent, answered

        return self._read(body)

    # -- reads ---------------------------------------------------------------

    def _get_run(self, conn: Conn, run_id: str) -> RunRecord | None:
        row = conn.execute(SQL.get_run, (run_id, self.scope)).fetchone()
        return None if row is None else run_from_row(row)

    def get_run(self, run_id: str) -> RunRecord:
        run = self._read(lambda conn: self._get_run(conn, run_id))
        if run is None:
            raise self._no_run(run_id)
        return run

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
        # run ids in code point order, as on SQLite, whatever the database's collation
        sql, args = SQL.list_runs(
            self.scope, statuses, flow_name, newest_first,
            tenant_id=tenant_id, session_id=session_id, flow_key=flow_key,
            run_id_prefix=run_id_prefix,
        )  # fmt: skip
        sql += " LIMIT %s OFFSET %s"
        args.extend([limit, offset])  # LIMIT NULL = no limit
        return self._read(lambda conn: [run_from_row(r) for r in conn.execute(sql, args)])

    def runs_of_other_versions(self, flow_name: str, version: str) -> list[RunRecord]:
        return self._read(
            lambda conn: [
                run_from_row(r)
                for r in conn.execute(SQL.runs_of_other_versions, (self.scope, flow_name, version))
            ]
        )

    def history(self, run_id: str) -> list[CheckpointInfo]:
        def body(conn: Conn) -> list[Any] | None:
            if self._get_run(conn, run_id) is None:
                return None
            return conn.execute(SQL.history, (run_id,)).fetchall()

        rows = self._read(body)
        if rows is None:
            raise self._no_run(run_id)
        return checkpoint_infos(run_id, rows)

    def history_page(self, run_id: str, *, after: int = -1, limit: int) -> list[CheckpointInfo]:
        def body(conn: Conn) -> list[Any] | None:
            if self._get_run(conn, run_id) is None:
                return None
            return conn.execute(SQL.history_page, (run_id, after, limit)).fetchall()

        rows = self._read(body)
        if rows is None:
            raise self._no_run(run_id)
        return checkpoint_infos(run_id, rows)

    def latest(self, run_id: str) -> Checkpoint:
        return self.head(run_id).checkpoint

    def head(self, run_id: str) -> RunHead:
        def body(conn: Conn) -> tuple[RunRecord, Checkpoint, bool]:
            """The run, its latest checkpoint, and whether that was loaded (not cached)."""
            run = self._get_run(conn, run_id)
            if run is None:
                raise self._no_run(run_id)
            copy = self._cached_copy(run_id, run.revision)
            if copy is not None:
                return run, copy, False
            return run, self._load(conn, run_id, run.revision, latest=True, run=run), True

        run, cp, loaded = self._read(body)
        if loaded:
            self._remember(cp)
        return RunHead(run, cp)

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        def body(conn: Conn) -> Checkpoint:
            if self._get_run(conn, run_id) is None:
                raise self._no_run(run_id)
            return self._load(conn, run_id, revision)

        return self._read(body)

    def _load_or_none(self, run_id: str, revision: int) -> Checkpoint | None:
        try:
            return self._read(lambda conn: self._load(conn, run_id, revision))
        except CheckpointNotFoundError:
            return None

    def _load(
        self,
        conn: Conn,
        run_id: str,
        revision: int,
        *,
        latest: bool = False,
        run: RunRecord | None = None,
    ) -> Checkpoint:
        """Fold deltas onto the nearest snapshot at or below ``revision``.
        ``latest``: ``revision`` is the run's own (its record names it), so
        a missing row is damage, not a pruned or unsaved revision; ``run``:
        that record, when read already (its status is named).

        Raises:
            CheckpointCorruptError: a row the fold needs was deleted outside
                Flowdesk (``missing``; pruning deletes from the oldest row
                up, never between two kept ones), naming the newest
                revision below it that folds.
            CheckpointNotFoundError: ``revision`` was pruned or never saved.
            CheckpointDecodeError: a row's JSON is malformed.
        """
        rows: list[Any] = conn.execute(_FOLD_ROWS, (run_id, revision, run_id, revision)).fetchall()
        try:
            return checkpoint_from_rows(run_id, revision, rows)
        except CheckpointCorruptError as exc:  # a row between two others is missing
            # (the rows before it, from the snapshot on, follow one another)
            raise self._missing(conn, run_id, exc.revision, exc.revision - 1, run) from None
        except CheckpointNotFoundError:
            if rows:  # those below it follow one another (else the gap was named)
                if not latest:
                    raise  # pruned, or never saved
                raise self._missing(conn, run_id, revision, int(rows[-1][0]), run) from None
            # no snapshot at or below it: if the row is there (or is the run's
            # own latest), the snapshot the oldest kept row builds on is gone
            found: Any = conn.execute(  # an aggregate: always one row
                "SELECT min(revision), count(*) FILTER (WHERE revision=%s) FROM checkpoints "
                "WHERE run_id=%s AND revision<=%s",
                (revision, run_id, revision),
            ).fetchone()
            low, there = found
            if not (latest or there):
                raise  # pruned, or never saved
            gone = revision if low is None else int(low) - 1
            raise self._missing(conn, run_id, gone, None, run) from None

    def _missing(
        self, conn: Conn, run_id: str, revision: int, readable: int | None, run: RunRecord | None
    ) -> CheckpointCorruptError:
        """The error of run ``run_id``'s checkpoint row at ``revision``
        deleted outside Flowdesk, naming ``readable`` (the newest revision
        below it that folds) and the run's status."""
        if run is None:
            run = self._get_run(conn, run_id)
        return CheckpointCorruptError(
            run_id,
            revision,
            readable=readable,
            run_status=None if run is None else run.status,
            missing=True,
            backup="the database",
        )

    def query(self, op: Callable[[SqlTxProtocol], T]) -> T:
        """Run ``op(SqlTx)`` in a ``READ ONLY`` transaction (domain SQL with
        ``?`` placeholders runs unchanged; see :class:`SqlTx`); a write in it
        raises StoreError naming :meth:`write`."""

        def body(conn: Conn) -> T:
            conn.execute("SET TRANSACTION READ ONLY")
            return op(SqlTx(conn))

        try:
            return self._tx(body, write=False)
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, psycopg.errors.ReadOnlySqlTransaction):
                raise QueryRefusedError(
                    "a domain query tried to write; query() is read-only. Run writes "
                    "through store.write(op) (their own transaction) or as a step's "
                    "ctx.write (with its checkpoint)."
                ) from cause
            if isinstance(cause, psycopg.Error) and _query_refused(cause):
                detail = (cause.diag.message_primary or str(cause)).strip()
                code = f" (SQLSTATE {cause.sqlstate})" if cause.sqlstate else ""
                raise QueryRefusedError(f"PostgreSQL refused the query{code}: {detail}") from cause
            raise

    def write(self, op: Callable[[SqlTxProtocol], T]) -> T:
        """Run ``op(SqlTx)`` in its own write transaction and commit (retried
        whole on a serialization failure or deadlock)."""
        return self._tx(lambda conn: op(SqlTx(conn)))

    # -- waits, signals, events ----------------------------------------------

    def send_signal(
        self, name: str, key: str, payload: Any, now: float, dedupe_key: str | None = None
    ) -> SignalId:
        body_json = codec.dumps(payload)

        def body(conn: Conn) -> SignalId:
            row = conn.execute(
                SQL.insert_signal + " ON CONFLICT (scope, dedupe_key) WHERE dedupe_key IS NOT "
                "NULL DO NOTHING RETURNING signal_id",
                (self.scope, name, key, body_json, dedupe_key, now),
            ).fetchone()
            if row is not None:
                return SignalId(int(row[0]))
            first = conn.execute(SQL.signal_by_dedupe_key, (self.scope, dedupe_key)).fetchone()
            if first is None:  # the conflicting sender rolled back; try again
                raise psycopg.errors.SerializationFailure("dedupe winner vanished")
            assert dedupe_key is not None  # a conflict needs one
            same = same_signal_or_refuse(deduped_signal(first), dedupe_key, name, key, body_json)
            return SignalId(same, stored=False)

        signal_id = self._tx(body)
        self._changed("*", wake=True)
        return signal_id

    def signal_by_dedupe_key(self, dedupe_key: str) -> Signal | None:
        row = self._read(
            lambda conn: conn.execute(SQL.signal_by_dedupe_key, (self.scope, dedupe_key)).fetchone()
        )
        return None if row is None else deduped_signal(row)

    def next_signal(self, name: str, key: str) -> Signal | None:
        row = self._read(
            lambda conn: conn.execute(SQL.next_signal, (self.scope, name, key)).fetchone()
        )
        return None if row is None else signal_from_row(name, key, row)

    def signal_consumer(self, signal_id: int) -> str | None:
        row = self._read(
            lambda conn: conn.execute(SQL.signal_consumer, (self.scope, signal_id)).fetchone()
        )
        return None if row is None or row[0] is None else str(row[0])

    def publish_event(self, type_: str, payload: Any, now: float) -> int:
        body_json = codec.dumps(payload)

        def body(conn: Conn) -> int:
            row = conn.execute(SQL.publish_event, (self.scope, type_, body_json, now)).fetchone()
            assert row is not None
            return int(row[0])

        event_id = self._tx(body)
        self._changed("*", wake=True)
        return event_id

    def first_event(self, type_: str, since: float) -> Event | None:
        row = self._read(
            lambda conn: conn.execute(SQL.first_event, (self.scope, type_, since)).fetchone()
        )
        return None if row is None else event_from_row(type_, row)

    def due_waits(self, now: float, limit: int = 1000) -> list[tuple[str, str]]:
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT w.run_id, w.wait_id FROM waits w JOIN runs r ON r.run_id=w.run_id "
                f"WHERE w.deadline_at IS NOT NULL AND w.deadline_at<={ts()} AND r.scope=%s "
                "ORDER BY w.deadline_at LIMIT %s",
                (now, self.scope, limit),
            ).fetchall()
        )
        return [(str(a), str(b)) for a, b in rows]

    def next_deadline(self) -> float | None:
        row = self._read(
            lambda conn: conn.execute(
                f"SELECT {epoch('w.deadline_at')} FROM waits w JOIN runs r ON r.run_id=w.run_id "
                "WHERE w.deadline_at IS NOT NULL AND r.scope=%s ORDER BY w.deadline_at LIMIT 1",
                (self.scope,),
            ).fetchone()
        )
        return None if row is None or row[0] is None else float(row[0])

    def wakeable_runs(self, now: float, limit: int = 1000) -> list[str]:
        # Due deadlines first, by deadline, so a burst of signals never delays one.
        sql = (
            "SELECT run_id FROM ("
            " SELECT w.run_id, 0 AS prio, w.deadline_at AS due FROM waits w"
            " JOIN runs r ON r.run_id=w.run_id"
            " WHERE w.deadline_at IS NOT NULL AND w.deadline_at<=to_timestamp(%(now)s)"
            "  AND r.scope=%(scope)s"
            " UNION ALL SELECT run_id, 0, deadline_at FROM runs"
            " WHERE scope=%(scope)s AND status='waiting' AND deadline_at IS NOT NULL"
            "  AND deadline_at<=to_timestamp(%(now)s)"
            " UNION ALL SELECT w.run_id, 1, NULL FROM waits w JOIN runs r ON r.run_id=w.run_id"
            " WHERE w.kind='signal' AND r.scope=%(scope)s AND EXISTS (SELECT 1 FROM signals s"
            "  WHERE s.scope=%(scope)s AND s.name=w.name AND s.key=w.key"
            "  AND s.consumed_by IS NULL)"
            " UNION ALL SELECT w.run_id, 1, NULL FROM waits w JOIN runs r ON r.run_id=w.run_id"
            " WHERE w.kind='event' AND r.scope=%(scope)s AND EXISTS (SELECT 1 FROM events e"
            "  WHERE e.scope=%(scope)s AND e.type=w.name AND e.published_at>=w.created_at)"
            ") AS due GROUP BY run_id ORDER BY min(prio), min(due) NULLS LAST LIMIT %(limit)s"
        )
        params = {"scope": self.scope, "now": now, "limit": limit}
        rows = self._read(lambda conn: conn.execute(sql, params).fetchall())
        return [str(r[0]) for r in rows]

    def runs_waiting_for(self, kind: str, name: str, key: str | None = None) -> list[str]:
        sql = SQL.runs_waiting_for
        args: list[Any] = [self.scope, kind, name]
        if key is not None:
            sql += SQL.and_wait_key
            args.append(key)
        sql += SQL.waiting_longest_first
        return self._read(lambda conn: [str(r[0]) for r in conn.execute(sql, args)])

    # -- outbox ----------------------------------------------------------------

    def intents(
        self, statuses: Sequence[str], limit: int = 100, *, run_id: str | None = None
    ) -> list[Intent]:
        sql, args = SQL.intents(self.scope, statuses, limit, run_id)
        rows: list[Any] = self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [intent_from_row(r) for r in rows]

    def delivered_runs(self, flow_name: str, limit: int = 100) -> list[str]:
        sql, args = SQL.delivered_runs(self.scope, flow_name, limit)
        rows: list[Any] = self._read(lambda conn: conn.execute(sql, args).fetchall())
        return [str(r[0]) for r in rows]

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
        """See :meth:`desktop_app.store.protocol.Outbox.claim_intents`
        (``FOR UPDATE SKIP LOCKED``: a row another dispatcher is claiming is
        skipped; claim times from the database clock unless ``now`` is given)."""
        at = "flowdesk_now()" if now is None else "to_timestamp(%(at)s)"
        params: dict[str, Any] = {"scope": self.scope, "at": now, "owner": owner, "ttl": ttl_s}
        only = ""
        if destinations is not None:
            only = " AND o.destination = ANY(%(destinations)s)"
            params["destinations"] = list(destinations)

        def body(conn: Conn) -> list[Any]:
            found = conn.execute(
                "SELECT o.intent_id, o.run_id, o.step_id, o.destination, o.payload, o.status, "
                "o.attempts, o.receipt, o.last_error, o.claimed_by, "
                f"(o.claim_expires_at IS NULL OR o.claim_expires_at<={at}) "
                "FROM outbox o JOIN runs r ON r.run_id=o.run_id "
                f"WHERE r.scope=%(scope)s AND o.status IN ('pending','sending'){only} "
                "ORDER BY o.created_at, o.intent_id FOR UPDATE OF o SKIP LOCKED",
                params,
            ).fetchall()
            rows = [
                r
                for r in found
                if r[9] is None
                or r[9] == owner
                or (presumed_dead is not None and presumed_dead(r[9]))
                or (r[10] and not (presumed_alive is not None and presumed_alive(r[9])))
            ][:limit]
            if rows:
                conn.execute(
                    f"UPDATE outbox SET claimed_by=%(owner)s, claim_expires_at={at} + "
                    "%(ttl)s * interval '1 second' WHERE intent_id = ANY(%(ids)s)",
                    {**params, "ids": [r[0] for r in rows]},
                )
            return rows

        return [intent_from_row(r, interrupted=r[5] == "sending") for r in self._tx(body)]

    def renew_intent_claim(
        self, intent_id: str, owner: str, ttl_s: float, *, now: float | None = None
    ) -> bool:
        """See :meth:`desktop_app.store.protocol.Outbox.renew_intent_claim`
        (from the database clock unless ``now`` is given)."""
        at = "flowdesk_now()" if now is None else "to_timestamp(%(at)s)"
        sql = (
            f"UPDATE outbox SET claim_expires_at={at} + %(ttl)s * interval '1 second' "
            "WHERE intent_id=%(id)s AND claimed_by=%(owner)s AND status='sending'"
        )
        args = {"at": now, "ttl": ttl_s, "id": intent_id, "owner": owner}
        return bool(self._tx(lambda conn: conn.execute(sql, args).rowcount == 1))

    def release_intent(self, intent_id: str, owner: str, error: str) -> bool:
        """See :meth:`desktop_app.store.protocol.Outbox.release_intent`."""
        args = (no_nul(error), intent_id, owner)
        return bool(self._tx(lambda conn: conn.execute(SQL.release_intent, args).rowcount == 1))

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
        guard, guard_args = (SQL.intent_status_is, (expect,)) if expect is not None else ("", ())
        if status == "sending":
            sql = SQL.mark_sending + guard
            args: tuple[Any, ...] = (now, intent_id, *guard_args)
        elif status == "delivered":
            sql = SQL.mark_delivered + guard
            args = (now, codec.dumps(receipt), intent_id, *guard_args)
        else:
            sql = SQL.mark_other + guard
            args = (status, no_nul(error), intent_id, *guard_args)
        return bool(self._tx(lambda conn: conn.execute(sql, args).rowcount == 1))

    def withdraw_intents(
        self,
        run_id: str,
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> Withdrawal:
        """See :meth:`desktop_app.store.protocol.Outbox.withdraw_intents` (the
        run's open intents are read ``FOR UPDATE``: a dispatcher claiming one
        at that instant is waited for; times from the database clock unless
        ``now`` is given)."""
        return self._tx(
            lambda conn: self._withdraw_in(conn, run_id, reason, presumed_dead, presumed_alive, now)
        )

    def _withdraw_in(
        self,
        conn: Conn,
        run_id: str,
        reason: str,
        presumed_dead: Callable[[str], bool] | None,
        presumed_alive: Callable[[str], bool] | None,
        now: float | None,
    ) -> Withdrawal:
        """The body of :meth:`withdraw_intents`, in transaction ``conn``."""
        at = now
        if at is None:
            row = conn.execute("SELECT extract(epoch from flowdesk_now())::float8").fetchone()
            at = 0.0 if row is None else float(row[0])
        done = Withdrawal([], [])
        rows = conn.execute(
            SQL.open_intents_of_run + " FOR UPDATE OF o", (run_id, self.scope)
        ).fetchall()
        for r in rows:
            if withdrawable(r[5], r[9], r[10], at, presumed_dead, presumed_alive):
                conn.execute(SQL.withdraw_intent, (no_nul(reason), r[0], r[5]))
                done.withdrawn.append(intent_from_row(r))
            else:
                done.in_flight.append(intent_from_row(r))
        return done

    def open_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(SQL.open_intents_of_run, run_id)

    def failed_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(SQL.failed_intents_of_run, run_id)

    def _intents_of(self, sql: str, run_id: str) -> list[Intent]:
        rows = self._read(lambda conn: conn.execute(sql, (run_id, self.scope)).fetchall())
        return [intent_from_row(r) for r in rows]

    def sending_intents(self) -> dict[str, int]:
        rows = self._read(lambda conn: conn.execute(SQL.sending_by_run, (self.scope,)).fetchall())
        return {str(r[0]): int(r[1]) for r in rows}

    def sending_claims(self, run_id: str) -> dict[str, tuple[str | None, float | None]]:
        rows = self._read(
            lambda conn: conn.execute(SQL.sending_claims_of_run, (run_id, self.scope)).fetchall()
        )
        return {str(r[0]): (r[1], None if r[2] is None else float(r[2])) for r in rows}

    def undelivered_intents(self) -> dict[str, int]:
        rows = self._read(
            lambda conn: conn.execute(SQL.undelivered_by_run, (self.scope,)).fetchall()
        )
        return {str(r[0]): int(r[1]) for r in rows}

    # -- change detection, lifecycle ---------------------------------------------

    def data_version(self) -> int:
        """Changes whenever another transaction commits on the server (a hash
        of ``pg_current_snapshot()``, leaving out this store's own NOTIFY
        batches) or this store commits; cheap to poll. False positives (other
        databases' writes, aborted transactions) only cause a reload."""
        with self.notifier.xid_lock:
            row = self._read(
                lambda conn: conn.execute("SELECT pg_current_snapshot()::text").fetchone()
            )
            snap = self.notifier.normalized("" if row is None else str(row[0]))
        digest = int.from_bytes(hashlib.blake2b(snap.encode(), digest_size=4).digest(), "big")
        return (digest << 32) + self._own_commits

    def close(self) -> None:
        self.notifier.close()
        self.pool.close()


def _xact_status_on(conn: Conn, xid: str) -> tuple[str | None, str]:
    """``(pg_xact_status(xid), pg_postmaster_start_time() as epoch text)``
    asked on ``conn``; ``"aborted"`` for an id the server has not handed out
    (SQLSTATE 22023, "transaction ID … is in the future": after a crash, one
    none of whose WAL reached the disk)."""
    try:
        row = conn.execute(
            "SELECT pg_xact_status(%s::xid8), extract(epoch FROM pg_postmaster_start_time())::text",
            (xid,),
        ).fetchone()
    except psycopg.errors.InvalidParameterValue:
        return "aborted", ""
    assert row is not None
    return row[0], row[1]


def _fails_the_batch(exc: BaseException) -> bool:
    """Whether ``exc`` (raised by one request of :meth:`append_batch`) must
    fail the whole transaction: the connection dropped, or a serialization
    failure or deadlock the transaction retries as a whole."""
    return isinstance(exc, psycopg.Error) and (
        is_connection_lost(exc) or exc.sqlstate in RETRY_SQLSTATES
    )


def _slot_error(exc: Exception, where: str) -> BaseException:
    """What one request's slot of :meth:`append_batch` reports: the store's
    own errors as raised, a psycopg error as ``append`` would raise it."""
    return translate(exc, where) if isinstance(exc, psycopg.Error) else exc


def _connection_kwargs(
    application_name: str, pooler: Literal["none", "transaction"] = "none"
) -> dict[str, Any]:
    """Settings every pooled connection gets (:func:`connection_kwargs`, in
    autocommit mode: the store sends its own ``BEGIN``, with a write's first
    statement, where psycopg would send one and wait for it; a connection
    never switches mode per transaction, which cost CPU at every step).
    psycopg prepares nothing (``prepare_threshold=None``): on a rollback it
    would deallocate every prepared statement of the session, the store's
    own named ones too (see ``PostgresCheckpointStore._execute_opening``)."""
    return {**connection_kwargs(application_name), "autocommit": True}


def _set_search_path(conn: Conn) -> None:
    """The pool's ``configure``: a direct connection's session ``search_path``
    (set once, a statement of its own in autocommit mode; a transaction
    pooler would lose it, see ``pooler``)."""
    conn.execute(f"SET search_path = {migrations.PG_SCHEMA}")


def _check_connect(url: str) -> None:
    try:
        connect(url).close()
    except psycopg.Error as exc:
        said = str(exc).strip()  # libpq's text may end in "?" or "." already
        stop = "" if said.endswith((".", "?", "!")) else "."
        # a server down or starting up heals; a wrong password or database does not
        kind = ServerUnreachableAtOpenError if is_unreachable_at_connect(exc) else DatabaseOpenError
        raise kind(
            f"cannot connect to PostgreSQL at {redact(url)}: {said}{stop} Check the URL, that "
            "the server is up, and the role's password (~/.pgpass or PGPASSWORD)."
        ) from exc


def open_postgres_store(
    url: str,
    *,
    scope: str = "default",
    max_connections: int = 8,
    application_name: str = "flowdesk",
    pooler: Literal["none", "transaction"] = "none",
    listen_url: str | None = None,
    reconnect_max_s: float = RECONNECT_MAX_S,
    connect_wait_s: float = CONNECT_WAIT_S,
) -> PostgresCheckpointStore:
    """Connect to ``url`` (``postgresql://…``) and return a verified store.

    Args:
        url: a libpq URL; the password comes from libpq's own sources
            (``~/.pgpass``, ``PGPASSWORD``) rather than the URL where possible.
        scope: the store scope.
        max_connections: the pool's size (threads that write at once, + 2).
        application_name: shown in ``pg_stat_activity`` (a worker passes its owner id).
        pooler: ``"transaction"`` when ``url`` goes through a transaction-mode
            pooler (PgBouncer ``pool_mode = transaction``): every transaction
            sets its own ``search_path`` and no statement is prepared; LISTEN
            and liveness locks are never sent through it.
        listen_url: a direct URL to the same server for LISTEN and a worker's
            liveness lock (default: ``url``, or none behind a transaction
            pooler; the store's ``listener()`` then raises NoSessionError).
        reconnect_max_s: seconds: the pool's reconnect attempts for a
            connection lost (a server outage) give up after this long and
            start afresh at the next request, so a server that came back is
            reached within about this long (psycopg_pool's own backoff
            doubles without a cap until ``reconnect_timeout``, 5 min by
            default: after a 2.5 min outage its next try came a minute or
            more after the server was back); also the cap of
            :meth:`~PostgresCheckpointStore.listener`'s reconnect backoff.
        connect_wait_s: seconds one try of a transaction waits for a pooled
            connection (the pool's ``timeout``); a transaction is tried
            :data:`MAX_ATTEMPTS` times.

    Raises:
        DatabaseOpenError: the server cannot be reached or refuses the role.
        SchemaMissingError: names ``flowdesk --db URL db apply``.
        SchemaChecksumError, SchemaTooNewError, StoreError.
    """
    _check_connect(url)
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=max(2, max_connections),
        kwargs=_connection_kwargs(application_name, pooler),
        configure=_set_search_path if pooler == "none" else None,
        open=False,
        name="flowdesk",
        timeout=connect_wait_s,
        reconnect_timeout=reconnect_max_s,
    )
    try:
        pool.open(wait=True, timeout=30)
        return PostgresCheckpointStore(
            pool,
            scope=scope,
            where=redact(url),
            db=redact(url, mask=None),
            pooler=pooler,
            listen_url=listen_url,
            reconnect_max_s=reconnect_max_s,
        )
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseOpenError(f"cannot open connections to PostgreSQL at {redact(url)}") from exc
    except BaseException:
        pool.close()
        raise


def apply_postgres_schema(url: str) -> list[migrations.SchemaFile]:
    """``flowdesk --db postgresql://… db apply``: apply every pending file of
    ``schema/postgres/`` (see :func:`desktop_app.store.migrations.apply`).
    Returns the files applied. Raises DatabaseOpenError, SchemaChecksumError,
    SchemaTooNewError, StoreError."""
    _check_connect(url)
    with connect(url, autocommit=True) as conn:
        return migrations.apply(conn, db=redact(url))


def postgres_schema_status(url: str) -> list[migrations.SchemaStatus]:
    """``flowdesk --db postgresql://… db status``: the state of every schema file."""
    _check_connect(url)
    with connect(url, autocommit=True) as conn:
        return migrations.status(conn, db=redact(url))


def verify_postgres_schema(url: str) -> None:
    """Refuse a database whose schema is missing, edited or newer (what the
    app and workers do at start: they never apply). Raises DatabaseOpenError,
    SchemaMissingError (names ``flowdesk --db URL db apply``),
    SchemaChecksumError, SchemaTooNewError."""
    _check_connect(url)
    with connect(url, autocommit=True) as conn:
        migrations.verify(conn, db=redact(url))
