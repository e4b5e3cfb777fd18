"""The SQLite :class:`~desktop_app.store.protocol.CheckpointStore` (apsw).

Each :meth:`SqliteCheckpointStore.append` is one short ``BEGIN IMMEDIATE``
transaction: check that ``runs.revision`` is ``revision - 1``
(compare-and-append), insert the checkpoint row (a delta against the previous
revision, see :mod:`desktop_app.store.codec`), run the step's domain writes,
update the run row. Either all of it commits or none of it does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NoReturn, ParamSpec, TypeVar

import apsw
import orjson

import desktop_app.store.sqlite.checkpoint_keys as CK
from desktop_app.errors import (
    CheckpointCorruptError,
    CheckpointDecodeError,
    CheckpointNotFoundError,
    DiskFullError,
    DomainWriteError,
    DuplicateFlowKeyError,
    FlowdeskError,
    LeaseLostError,
    QueryRefusedError,
    RevisionConflictError,
    RunLeasedError,
    SchemaObjectMissingError,
    StoreError,
    TransactionControlError,
)
from desktop_app.store import codec, migrations
from desktop_app.store.connection import Synchronous, open_connection, translate
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.leases_log import log_takeovers
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
    SqlResult,
    SqlTx,
    Withdrawal,
)
from desktop_app.store.records import claim_time, lease_is_free, lease_lost_message
from desktop_app.store.rows import (
    CheckpointRow,
    checkpoint_from_rows,
    checkpoint_infos,
    checkpoint_parts,
    checkpoint_values,
    claim_is_free,
    deduped_signal,
    detached,
    event_from_row,
    intent_from_row,
    remembered,
    run_from_row,
    same_signal_or_refuse,
    signal_from_row,
    transaction_control,
    unstorable,
    wait_values,
    withdrawable,
    written_table,
)
from desktop_app.store.statements import SQLITE_SQL as SQL
from desktop_app.store.write_gate import LOCK_SUFFIX, GatedConnection

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
_CACHE_RUNS = 256


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Serialise use of the store's one connection across threads.

    apsw raises ``ThreadingViolationError`` when two threads use one
    connection at once; the UI thread reads while a worker thread writes.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with args[0]._lock:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return wrapper


_RUN_COLUMNS = SQL.run_columns
#: ``Statements.runs_of_other_versions`` through the index of live statuses
_RUNS_OF_OTHER_VERSIONS = (
    f"SELECT {_RUN_COLUMNS} FROM runs INDEXED BY runs_scope_status WHERE scope=? "
    "AND status IN ('pending','running','waiting','failed') AND flow_name=? AND flow_version<>? "
    "ORDER BY created_at, run_id"
)
#: a run's creation: its ``runs`` row (made once, not formatted at every run)
_INSERT_RUN = f"INSERT INTO runs({_RUN_COLUMNS}) VALUES ({','.join('?' * 19)})"
#: a checkpoint row's columns, run_id first (the checksum covers them in this order)
_CP_COLUMNS = f"run_id, {SQL.checkpoint_columns}"


#: apsw errors of a query's own making (running it again fails the same way)
_QUERY_REFUSED = (
    apsw.SQLError,
    apsw.ConstraintError,
    apsw.MismatchError,
    apsw.RangeError,
    apsw.TooBigError,
    apsw.BindingsError,
)


def row_checksum(values: Sequence[Any]) -> str:
    """BLAKE2b-128 (hex) of a row's stored column values (str, int, float, None),
    written with the row and compared when it is read.

    The bytes hashed are the standard library's compact JSON of the values
    (``ensure_ascii=False``). orjson writes the same bytes ~3x faster for
    strings, 64-bit integers and floats Python prints without an exponent
    (``1e-4 <= |x| < 1e16``, or zero); any other value takes the standard
    library, so a checksum never depends on which encoder ran."""
    for v in values:
        if type(v) is float and not codec.orjson_float_alike(v):
            return _json_checksum(values)
    try:
        data = orjson.dumps(list(values))
    except TypeError:  # an integer beyond 64 bits, a lone surrogate
        return _json_checksum(values)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def checkpoint_checksum(row: Sequence[Any]) -> str:
    """:func:`row_checksum` of a ``checkpoints`` row (:func:`checkpoint_values`'s
    order), the same bytes hashed: its only column that can hold a float is
    ``created_at`` (index 5; the others are text, the revision or NULL), so
    only that one is checked for what orjson would print otherwise."""
    created_at = row[5]
    if type(created_at) is float and not (  # codec.orjson_float_alike, inline
        created_at == 0.0 or 1e-4 <= abs(created_at) < 1e16
    ):
        return _json_checksum(row)
    try:
        # a plain tuple (orjson refuses tuple subclasses such as CheckpointRow):
        # the same JSON array as a list
        data = orjson.dumps(row if type(row) is tuple else tuple(row))
    except TypeError:  # a lone surrogate
        return _json_checksum(row)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _json_checksum(values: Sequence[Any]) -> str:
    text = json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class SqliteTx:
    """The :class:`~desktop_app.store.protocol.SqlTx` of the SQLite store: a
    thin wrapper over the open apsw connection (``?`` placeholders are
    SQLite's own). Valid only inside the transaction it was handed in."""

    dialect: Literal["sqlite", "postgres"] = "sqlite"

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        #: the statement last run (names the table of a failed domain write)
        self.last_sql: str | None = None

    def _cursor(self) -> apsw.Cursor:
        """A cursor whose every statement passes :func:`_refuse_tx_control`
        first (each one of a multi-statement string, a cached one too)."""
        cur = self._conn.cursor()
        cur.exec_trace = _refuse_tx_control
        return cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> SqlResult:
        """Run ``sql`` (one statement or several) with ``params``.

        Raises:
            TransactionControlError: a statement would end, open or split
                the transaction (``COMMIT``, ``BEGIN``, ``SAVEPOINT`` ...);
                refused before SQLite runs it.
            apsw.Error: SQLite refused a statement.
        """
        self.last_sql = sql
        rows = self._cursor().execute(sql, tuple(params)).fetchall()
        return SqlResult(rows, int(self._conn.changes()))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.last_sql = sql
        self._cursor().executemany(sql, [tuple(r) for r in rows])

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self._cursor().execute(sql, tuple(params)).fetchall()
        return None if not rows else tuple(rows[0])

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._cursor().execute(sql, tuple(params)).fetchall()]


def _refuse_tx_control(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
    """apsw's execution tracer of a domain statement, called before SQLite
    runs each statement (``sql`` is that one statement, even one the
    connection's statement cache held): let it run unless it would end,
    open or split the transaction the step's checkpoint commits in.

    Raises:
        TransactionControlError: ``sql`` is ``COMMIT``, ``END``,
            ``ROLLBACK``, ``BEGIN``, ``SAVEPOINT`` or ``RELEASE``.
    """
    word = transaction_control(sql, nested_comments=False)
    if word is not None and not cursor.is_explain:
        raise TransactionControlError(word)
    return True


def lease_cond(lease: Lease, at: float) -> tuple[str, list[Any]]:
    """WHERE fragment: ``lease`` may take the run at ``at`` (UTC epoch s), the
    rule of :meth:`Lease.may_take` in SQL."""
    if lease.takes_over is None:
        return "(lease_owner IS NULL OR lease_owner=?)", [lease.owner]
    return (
        "(lease_owner IS NULL OR lease_owner=? OR "
        "(lease_owner=? AND coalesce(lease_expires_at, 0)<=?))",
        [lease.owner, lease.takes_over, at],
    )


def _constraint(exc: apsw.ConstraintError) -> int:
    """SQLite's extended result code of a constraint error (never its text)."""
    return int(getattr(exc, "extendedresult", 0) or 0)


@functools.cache
def _append_sql(set_status: bool, live: bool, lease: int) -> str:
    """The compare-and-append ``UPDATE`` of a run row, made once per shape:
    with ``set_status`` it sets the status too; a run no longer ``live``
    (running or pending) drops its lease; ``lease`` 1 claims or renews the
    run for the lease's owner, 2 also takes it over from a named holder (the
    bindings of :func:`lease_cond`, in its order), 0 checks no lease."""
    sql = SQL.append_run
    if set_status:
        sql += ", status=?"
    if not live:
        sql += ", lease_owner=NULL, lease_expires_at=NULL"
    elif lease:
        sql += ", lease_owner=?, lease_expires_at=?"
    sql += SQL.append_run_where
    if lease:
        cond, _ = lease_cond(Lease("", 0.0, takes_over=None if lease == 1 else "?"), 0.0)
        sql += f" AND {cond}"
    return sql


#: whether a run id is taken, in any scope (ids are unique across scopes)
SQL_RUN_EXISTS = "SELECT 1 FROM runs WHERE run_id=?"

#: constraint kinds by SQLite's extended result code
_CONSTRAINT_KINDS = {
    apsw.SQLITE_CONSTRAINT_UNIQUE: "unique",
    apsw.SQLITE_CONSTRAINT_PRIMARYKEY: "primary key",
    apsw.SQLITE_CONSTRAINT_CHECK: "check",
    apsw.SQLITE_CONSTRAINT_NOTNULL: "not null",
    apsw.SQLITE_CONSTRAINT_FOREIGNKEY: "foreign key",
}


def _domain_write_error(exc: Exception, sql: str | None) -> DomainWriteError:
    """A step's domain write that failed, as :class:`DomainWriteError`: the
    kind by extended result code; the constraint and table from SQLite's
    message (``UNIQUE constraint failed: notes.name``, ``CHECK constraint
    failed: n_positive``), else the table from the statement."""
    detail = str(exc) if isinstance(exc, apsw.Error) else f"{type(exc).__name__}: {exc}"
    table = written_table(sql)
    if not isinstance(exc, apsw.ConstraintError):
        return DomainWriteError(table, None, None, detail)
    kind = _CONSTRAINT_KINDS.get(_constraint(exc), "other")
    _, _, named = detail.partition(" failed: ")
    constraint = named or kind.upper()
    if kind in ("unique", "primary key", "not null") and "." in named:
        table = named.split(".", 1)[0]
    return DomainWriteError(table, constraint, kind, detail)


def _deferred_key_failed(exc: apsw.Error) -> bool:
    """Whether a ``COMMIT`` failed on a deferred foreign key: the one
    constraint SQLite checks at ``COMMIT``. Flowdesk's own keys are
    immediate, so only a step's domain writes (a domain table declaring
    ``DEFERRABLE INITIALLY DEFERRED``, or ``PRAGMA defer_foreign_keys``) can
    break one: the step's :class:`DomainWriteError`, not a lost
    compare-and-append."""
    return (
        isinstance(exc, apsw.ConstraintError)
        and _constraint(exc) == apsw.SQLITE_CONSTRAINT_FOREIGNKEY
    )


def _rollback_cause(exc: apsw.Error) -> apsw.Error:
    """What made SQLite roll a transaction back under a savepoint: when a
    statement inside one (a request of a batch) meets a full disk or an I/O
    error, SQLite rolls the whole transaction back and apsw, leaving the
    savepoint, complains that it is gone ("no such savepoint") while handling
    the error that says what happened: the first SQLite error in ``exc``'s
    chain. Otherwise ``exc`` itself."""
    if "no such savepoint" not in str(exc):
        return exc
    first = exc
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, apsw.Error):
            first = cause
        cause = cause.__context__
    return first


def _scalar(cursor: Any) -> Any:
    row = cursor.fetchone()
    return None if row is None else row[0]


#: ``_Write._gate`` of a transaction opened through ``conn.__enter__`` (a
#: savepoint of the transaction in progress, or a connection without a write
#: gate's ``begin_write``): ended through ``conn.__exit__``
_VIA_CONN = object()


class _Write:
    """The context manager of :meth:`SqliteCheckpointStore._write`: a class,
    not a generator (``contextlib``'s wrapping cost ~2 us per step). The
    outermost transaction of a gated connection (``open_store``'s) is
    opened and ended through its ``begin_write``/``end_write`` (what its
    ``with conn:`` does, without the level list); a nested one (a
    savepoint of a batch) or an ungated connection's, through ``with conn:``.
    Every write transaction of the store ends here: apsw errors become typed
    StoreErrors (a constraint violation ``on_constraint(exc)`` when given; a
    deferred foreign key refused at ``COMMIT``, the step's
    :class:`DomainWriteError`), the commit is counted for
    :meth:`SqliteCheckpointStore.data_version`, the WAL is truncated after a
    full disk."""

    __slots__ = ("_gate", "_on_constraint", "_store")
    #: ``begin_write``'s gate (``None``: none), or :data:`_VIA_CONN`
    _gate: Any

    def __init__(
        self,
        store: SqliteCheckpointStore,
        on_constraint: Callable[[apsw.ConstraintError], Exception] | None,
    ) -> None:
        self._store = store
        self._on_constraint = on_constraint

    def __enter__(self) -> apsw.Connection:
        store = self._store
        gated = store._gated
        try:
            if gated is not None and not gated.in_transaction:
                self._gate = gated.begin_write()
                return gated
            self._gate = _VIA_CONN
            return store.conn.__enter__()
        except apsw.Error as exc:  # a closed connection, a busy gate, BEGIN failed
            raise store._write_failed(exc, self._on_constraint) from exc

    def __exit__(
        self,
        etype: type[BaseException] | None,
        evalue: BaseException | None,
        etb: TracebackType | None,
    ) -> None:
        store = self._store
        gate = self._gate
        try:
            if gate is _VIA_CONN:
                store.conn.__exit__(etype, evalue, etb)  # commits, or rolls back
            else:  # begin_write's: commits, or rolls back, and gives the gate back
                store.conn.end_write(evalue is None, gate)  # type: ignore[attr-defined]
        except apsw.Error as exc:
            if evalue is None and _deferred_key_failed(exc):  # refused at COMMIT
                raise _domain_write_error(exc, None) from exc
            raise store._write_failed(exc, self._on_constraint) from exc
        if evalue is not None:
            if isinstance(evalue, apsw.Error):
                raise store._write_failed(evalue, self._on_constraint) from evalue
            return  # the body's own error goes on
        store._own_commits += 1
        if store._wal_needs_truncate and not store.conn.in_transaction:
            store._truncate_wal()


class SqliteCheckpointStore:
    """Runs and checkpoints in one WAL-mode SQLite file.

    Args:
        conn: an open apsw connection (see :func:`open_store` for the usual way).
        scope: runs saved under one scope are invisible from another.
        path: shown in error messages.

    The schema must have been applied (``flowdesk db apply``); the
    constructor verifies it and raises ``SchemaError`` otherwise.
    """

    #: see :data:`desktop_app.store.protocol.CAPABILITIES`
    capabilities = frozenset({"sql", "processes", "vacuum", "append_batch", "group_commit"})

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        scope: str = "default",
        path: str = "",
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.conn = conn
        self.scope = scope
        self.path = path
        self._clock = clock if clock is not None else time.time
        migrations.verify(conn, db=path)
        # Last checkpoint written or read per run, to compute the next delta
        # without reading it back: the store's own copy (rows.detached, or
        # rows.remembered after an append), never handed out.
        self._last: OrderedDict[str, Checkpoint] = OrderedDict()
        self._lock = threading.RLock()
        self._own_commits = 0  # PRAGMA data_version ignores this connection's commits
        self._wal_needs_truncate = False  # set by a full disk
        self._clock_fd: int | None = None  # file_system_now's lock file
        self._clock_lock = threading.Lock()
        #: a connection with a write gate's ``begin_write``/``end_write``
        #: (``open_store``'s): ``_Write`` opens and ends its outermost
        #: transactions through them, not through ``with conn:``
        self._gated = conn if isinstance(conn, GatedConnection) else None

    # -- helpers ---------------------------------------------------------

    def _remember(self, own: Checkpoint) -> None:
        """Cache ``own``: a checkpoint no caller holds (see ``rows.detached``)."""
        self._last[own.run_id] = own
        self._last.move_to_end(own.run_id)
        while len(self._last) > _CACHE_RUNS:
            self._last.popitem(last=False)

    def _err(self, exc: apsw.Error) -> StoreError:
        if isinstance(exc, apsw.FullError):
            self._wal_needs_truncate = True
            self._truncate_wal()
        if isinstance(exc, apsw.SQLError) and (gone := migrations.dropped_table(str(exc))):
            return SchemaObjectMissingError(gone, self.path)
        return translate(exc, self.path)

    def _write(
        self, on_constraint: Callable[[apsw.ConstraintError], Exception] | None = None
    ) -> _Write:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back
        when the body raises): apsw errors become typed StoreErrors, and a
        constraint violation becomes ``on_constraint(exc)`` when given. Counts
        the commit for :meth:`data_version`. Nested use joins the outer
        transaction (a savepoint)."""
        return _Write(self, on_constraint)

    def _write_failed(
        self,
        exc: apsw.Error,
        on_constraint: Callable[[apsw.ConstraintError], Exception] | None,
    ) -> Exception:
        """The error a write transaction that failed with ``exc`` raises."""
        if isinstance(exc, apsw.ConstraintError):
            return on_constraint(exc) if on_constraint is not None else self._err(exc)
        return self._err(_rollback_cause(exc))

    @contextlib.contextmanager
    def _read(self) -> Iterator[apsw.Connection]:
        """A read: apsw errors become typed StoreErrors."""
        try:
            yield self.conn
        except apsw.Error as exc:
            raise self._err(exc) from exc

    def now(self) -> float:
        """The store's clock (UTC epoch seconds): the process clock unless a
        test clock was injected."""
        return self._clock()

    def file_system_now(self) -> float | None:
        """The clock of the file system holding the database (UTC epoch
        seconds): the modification time the kernel stamps on a one-byte
        write to the write gate's lock file (``<db>-flowdesk.lock``, 0600,
        emptied again at once), which no process's own clock (``faketime``,
        ``LD_PRELOAD``) moves. ``None`` for an in-memory database, an
        injected test clock, or a folder the file cannot be written in (the
        database's writes then fail on their own)."""
        if (
            self._clock is not time.time
            or self.path in ("", ":memory:")
            or self.path.startswith("file:")
        ):
            return None
        try:
            with self._clock_lock:
                fd = self._clock_fd
                if fd is None:
                    fd = self._clock_fd = os.open(
                        f"{self.path}{LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
                    )
            os.pwrite(fd, b"\0", 0)
            os.ftruncate(fd, 0)
            return os.fstat(fd).st_mtime
        except OSError:
            return None

    def _truncate_wal(self) -> None:
        """Give the WAL's space back after a full disk, once space allows
        (the checkpoint copies its pages into the database first)."""
        try:
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
        except apsw.Error:
            return  # still full: retried after the next commit
        if not busy:
            self._wal_needs_truncate = False

    def _write_checkpoint(
        self,
        cp: Checkpoint,
        previous: Checkpoint | None,
        changed_steps: frozenset[str] | None = None,
        changed_fields: frozenset[str] | None = None,
        *,
        given: bool = False,
    ) -> CheckpointRow | None:
        """Insert ``cp``'s row (a snapshot without ``previous``, else a delta
        against it) and its waits when they changed; return the row, or
        ``None`` for a ``given`` checkpoint (``AppendRequest.given``: cached
        as it is, so the row's values are all it takes)."""
        conn = self.conn
        row: CheckpointRow | None = None
        try:
            if given:
                values = checkpoint_parts(
                    cp, previous, changed_steps, changed_fields, error=cp.error
                )[0]
            else:
                values = row = checkpoint_values(
                    cp, previous, changed_steps, changed_fields, error=cp.error
                )
            conn.execute(CK.INSERT, (*values, checkpoint_checksum(values)))
            if conn.changes() != 1:  # no run row to key it by
                raise CheckpointNotFoundError(f"no run {cp.run_id} in scope {self.scope!r}")
            if previous is None or previous.waits != cp.waits:
                if previous is not None:
                    conn.execute(SQL.delete_waits, (cp.run_id,))
                for wait_row in wait_values(cp):
                    conn.execute(SQL.insert_wait, wait_row)
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise unstorable(cp, exc) from exc
        return row

    # -- writes ----------------------------------------------------------

    def create_run(
        self, run: RunRecord, first: Checkpoint, writes: Sequence[DomainWrite] = ()
    ) -> None:
        self._create(run, first, writes)

    def _create(self, run: RunRecord, first: Checkpoint, writes: Sequence[DomainWrite]) -> None:
        """One run created: a transaction of its own, or a savepoint inside a batch."""
        if first.revision != 0 or run.run_id != first.run_id:
            raise ValueError("create_run needs the run's revision-0 checkpoint")
        progress = run.progress or (None, None)

        def conflict(exc: apsw.ConstraintError) -> Exception:
            taken = self.conn.execute(SQL_RUN_EXISTS, (run.run_id,)).fetchone() is not None
            if (
                run.flow_key is not None
                and not taken
                and _constraint(exc) == apsw.SQLITE_CONSTRAINT_UNIQUE
            ):
                return DuplicateFlowKeyError(
                    f"a live run of {run.flow_name!r} with flow key {run.flow_key!r} exists"
                )
            return RevisionConflictError(f"run {run.run_id} already exists; pick another run id")

        with _Write(self, conflict):
            self._create_in(run, first, writes, progress)
        self._remember(detached(first))

    def _create_in(
        self,
        run: RunRecord,
        first: Checkpoint,
        writes: Sequence[DomainWrite],
        progress: tuple[int | None, int | None],
    ) -> None:
        """The statements of one run's creation, in the open transaction:
        its ``runs`` row, its revision 0, the domain writes."""
        self.conn.execute(
            _INSERT_RUN,
            (
                run.run_id,
                run.flow_name,
                run.flow_version,
                first.status,
                0,
                run.created_at,
                run.updated_at,
                self.scope,
                run.flow_key,
                run.parent_run_id,
                codec.dumps(dict(run.context)),
                progress[0],
                progress[1],
                run.error,
                run.lease_owner,
                run.lease_expires_at,
                run.context.get("tenant_id"),
                run.context.get("session_id"),
                run.deadline_at,
            ),
        )
        self._write_checkpoint(first, None)
        self._run_domain(writes)

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
        self._append(
            AppendRequest(
                checkpoint, writes, lease, intents, consume, changed_steps, changed_fields
            )
        )
        if self._wal_needs_truncate and not self.conn.in_transaction:
            self._truncate_wal()

    def append_one(self, request: AppendRequest) -> BaseException | None:
        """``append_batch((request,))[0]`` without a batch: ``request`` in a
        transaction of its own (no savepoint), its error returned, not
        raised. The group committer's call when it commits one request
        alone (one run in flight): from the committer to ``COMMIT`` through
        :meth:`_append` (or :meth:`_create`) and its ``_Write`` only.

        Raises:
            nothing of the request's own: ``RevisionConflictError``,
            ``LeaseLostError``, ``StoreError`` (a closed connection, a full
            disk), a domain write's error are returned.
        """
        try:
            if request.run is None:
                self._append(request)
            else:
                self._create(request.run, request.checkpoint, request.writes)
        except Exception as exc:  # a domain write may raise anything
            return exc
        finally:
            if self._wal_needs_truncate and not self.conn.in_transaction:
                self._truncate_wal()
        return None

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[BaseException | None]:
        """Append every request in one ``BEGIN IMMEDIATE`` transaction (one
        commit, one fsync at ``synchronous=FULL``), each in its own SAVEPOINT:
        a conflict, lost lease or failing domain write rolls back that
        request's part only and is returned in its slot. See
        :class:`~desktop_app.store.group_commit.BatchAppender`.

        Raises:
            StoreError: the transaction itself failed; nothing committed.
        """
        results: list[BaseException | None] = []
        if len(requests) == 1:  # no savepoint needed: the transaction is the request
            return [self.append_one(requests[0])]
        lost: BaseException | None = None
        try:
            with self.conn:
                for request in requests:
                    try:
                        self._create_or_append(request)  # nested: a SAVEPOINT of the batch
                    except Exception as exc:
                        if not self.conn.in_transaction:
                            # SQLite rolled the whole transaction back (I/O
                            # error, full disk): nothing of the batch committed
                            lost = exc
                            raise
                        results.append(exc)
                    else:
                        results.append(None)
        except BaseException as exc:
            for request in requests:  # cached as appended, but nothing committed
                self._last.pop(request.checkpoint.run_id, None)
            cause = lost if lost is not None else exc
            if isinstance(cause, StoreError):
                raise cause from None
            if isinstance(cause, apsw.Error):
                raise self._err(cause) from cause
            if lost is not None:
                raise StoreError(
                    f"a batch of {len(requests)} checkpoints was rolled back by SQLite "
                    f"({type(cause).__name__}: {cause}); none of them was saved"
                ) from cause
            raise
        if self._wal_needs_truncate and not self.conn.in_transaction:
            self._truncate_wal()
        return results

    def _create_or_append(self, request: AppendRequest) -> None:
        if request.run is not None:
            self._create(request.run, request.checkpoint, request.writes)
        else:
            self._append(request)

    def _append(self, request: AppendRequest) -> None:
        """One append: a transaction of its own, or a savepoint inside a batch."""
        cp, lease = request.checkpoint, request.lease
        previous = self._last.get(cp.run_id)
        if previous is None or previous.revision != cp.revision - 1:
            previous = self._load_or_none(cp.run_id, cp.revision - 1)

        def conflict(exc: apsw.ConstraintError) -> Exception:
            return RevisionConflictError(
                f"run {cp.run_id}: revision {cp.revision} (or one of its outbox intents) was "
                "already saved by another writer"
            )

        # compare-and-append: the run row moves from revision-1 to revision
        done, total = cp.progress if cp.progress is not None else (None, None)
        args: list[Any] = [cp.revision, cp.created_at, done, total, cp.error]
        # status is indexed: setting it, even to the same value, rewrites its
        # index entries (WAL pages); the row at revision-1 has
        # previous.status (the WHERE checks revision)
        set_status = previous is None or previous.status != cp.status
        if set_status:
            args.append(cp.status)
        live = cp.status in ("running", "pending")
        if live and lease is not None:
            args += [lease.owner, lease.expires_at]
        args += [cp.run_id, self.scope, cp.revision - 1]
        if lease is not None:
            args.append(lease.owner)
            if lease.takes_over is not None:
                args += [lease.takes_over, lease.issued_at]
        sql = _append_sql(
            set_status,
            live,
            0 if lease is None else 1 if lease.takes_over is None else 2,
        )

        conn = self.conn
        # the statements, in one transaction (a savepoint inside a batch): the
        # run row's compare-and-append, the checkpoint row (returned as
        # _write_checkpoint does), the signals consumed, the outbox intents,
        # the domain writes
        with _Write(self, conflict):
            conn.execute(sql, args)
            if conn.changes() != 1 or previous is None:
                stored = conn.execute(SQL.run_revision_owner, (cp.run_id, self.scope)).fetchone()
                if stored is None:
                    raise CheckpointNotFoundError(f"no run {cp.run_id} in scope {self.scope!r}")
                if lease is not None and stored[1] not in (None, lease.owner):
                    # another process holds the lease: it took the run over (or won
                    # a takeover race) and may have saved revisions since
                    raise LeaseLostError(lease_lost_message(cp.run_id, stored[1], lease))
                raise RevisionConflictError(
                    f"run {cp.run_id}: revision {cp.revision} conflicts with the stored "
                    f"latest revision {stored[0]}; another writer got there first. Reload "
                    f"the run and try again."
                )
            # the row (its JSON and checksum) is built here, inside the write
            # transaction: built before it, so that the cross-process write
            # gate is held for the SQL and the commit only, it measured no
            # gain with 8 processes on one file (docs/measurements.md,
            # 2026-12-05 02:50-03:07)
            row = self._write_checkpoint(
                cp, previous, request.changed_steps, request.changed_fields, given=request.given
            )
            for signal_id, wait_id in request.consume:
                conn.execute(SQL.consume_signal, (wait_id, cp.created_at, signal_id))
                if conn.changes() != 1:
                    raise RevisionConflictError(
                        f"signal {signal_id} was consumed by another wait first"
                    )
            for intent in request.intents:
                conn.execute(
                    SQL.insert_intent,
                    (
                        intent.intent_id,
                        intent.run_id,
                        intent.step_id,
                        intent.destination,
                        codec.dumps(intent.payload),
                        cp.created_at,
                    ),
                )
            if request.writes:
                self._run_domain(request.writes)
        self._remember(cp if row is None else remembered(cp, previous, row))

    def update_latest(self, run_id: str, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        with self._write():  # BEGIN IMMEDIATE: no other writer between read and append
            self._last.pop(run_id, None)
            cp = change(self.latest(run_id))
            self.append(cp)
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
        (one ``BEGIN IMMEDIATE`` transaction; each part a savepoint of it)."""
        try:
            with self._write():
                cp = self.update_latest(run_id, change)
                done = self.withdraw_intents(
                    run_id,
                    reason,
                    presumed_dead=presumed_dead,
                    presumed_alive=presumed_alive,
                    now=now,
                )
        except BaseException:
            self._last.pop(run_id, None)  # cached as appended, but nothing committed
            raise
        return cp, done

    def end_unreadable(self, run_id: str, status: RunStatus, error: str, now: float) -> RunRecord:
        """End a live run whose latest checkpoint cannot be read back (a
        :class:`CheckpointCorruptError`) without reading it: its ``runs`` row
        becomes ``status`` (``canceled``, ``failed``) with ``error``, its
        lease and pending waits go, and no checkpoint is appended (a new
        revision would be a delta onto the damaged one); its history stays
        as stored, so a backup or a replay from an intact revision still
        has it all.

        Args:
            run_id: the run; status: its new status; error: why (names the
                damage); now: UTC epoch seconds, its ``updated_at``.

        Returns:
            RunRecord: the run as it is now.

        Raises:
            CheckpointNotFoundError: no such run in this scope.
            RunStateError: the run had ended already (nothing was changed).
            StoreError: the database could not be written.
        """
        from desktop_app.errors import RunStateError

        with self._write():
            self.conn.execute(SQL.end_unreadable, (status, error, now, run_id, self.scope))
            changed = self.conn.changes() == 1
            if changed:
                self.conn.execute(SQL.delete_waits, (run_id,))
            run = self.get_run(run_id)
        self._last.pop(run_id, None)
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
        """:meth:`end_unreadable` and :meth:`withdraw_intents` (with
        ``reason``) in one transaction, as ``update_latest_withdrawing`` for a
        run whose latest checkpoint cannot be read: a cancel killed part-way
        never leaves its intents queued.

        Raises:
            the errors of :meth:`end_unreadable` (nothing is withdrawn then).
        """
        with self._write():
            run = self.end_unreadable(run_id, status, error, now)
            done = self.withdraw_intents(
                run_id, reason, presumed_dead=presumed_dead, presumed_alive=presumed_alive
            )
        return run, done

    def claim(self, run_id: str, lease: Lease, now: float) -> RunRecord:
        with self._write():
            cond, cargs = lease_cond(lease, claim_time(lease, now))
            self.conn.execute(
                "UPDATE runs SET lease_owner=?, lease_expires_at=? WHERE run_id=? AND scope=? "
                f"AND {cond}",
                (lease.owner, lease.expires_at, run_id, self.scope, *cargs),
            )
            claimed = self.conn.changes() == 1
            run = self.get_run(run_id)
        if not claimed:
            raise RunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        return run

    def renew(self, run_ids: Sequence[str], lease: Lease) -> set[str]:
        if not run_ids:
            return set()
        with self._write():
            marks = ",".join("?" * len(run_ids))
            rows = self.conn.execute(
                f"UPDATE runs SET lease_expires_at=? WHERE run_id IN ({marks}) AND scope=? "
                "AND lease_owner=? AND status IN ('pending','running') RETURNING run_id",
                (lease.expires_at, *run_ids, self.scope, lease.owner),
            ).fetchall()
        return {str(r[0]) for r in rows}

    def release(self, run_id: str, owner: str) -> None:
        with self._write():
            self.conn.execute(SQL.release_run, (run_id, owner))

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
        ``BEGIN IMMEDIATE`` transaction selects the candidates and sets their
        lease, so two processes never claim the same run."""
        at = self.now() if now is None else now
        if limit <= 0:
            return []
        judged = presumed_dead is not None or presumed_alive is not None
        claimed: list[RunRecord] = []

        taken: list[tuple[str, str, bool]] = []  # for the log, once committed

        def take(run: RunRecord) -> None:
            if lease_is_free(run, owner, at, presumed_dead, presumed_alive):
                if run.lease_owner not in (None, owner):
                    lapsed = run.lease_expires_at is not None and run.lease_expires_at <= at
                    taken.append((run.run_id, run.lease_owner, lapsed))
                expires = at + ttl_s
                self.conn.execute(
                    "UPDATE runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?",
                    (owner, expires, run.run_id),
                )
                claimed.append(replace(run, lease_owner=owner, lease_expires_at=expires))

        with self._write():
            seen: set[str] = set()
            if statuses:
                by_age = [
                    self._oldest_in(status, flows, None if judged else (owner, at), limit)
                    for status in dict.fromkeys(statuses)
                ]
                oldest_first = heapq.merge(*by_age, key=lambda r: (r.created_at, r.run_id))
                while len(claimed) < limit:  # checked first: no page read past the limit
                    run = next(oldest_first, None)
                    if run is None:
                        break
                    seen.add(run.run_id)
                    take(run)
            # waiting runs to wake, read a window at a time (4x larger each
            # time) until the limit is claimed or none is left: the runs a
            # window skips (other flows', live holders', already seen) must
            # not hide the ones behind them from this claimant forever
            window = max(limit * 4, 100)
            while wakeable and len(claimed) < limit:
                due = self.wakeable_runs(at, limit=window)
                for run_id in due:
                    if len(claimed) >= limit:
                        break
                    if run_id in seen:
                        continue
                    seen.add(run_id)
                    run = self.get_run(run_id)
                    if flows is None or run.flow_name in flows:
                        take(run)
                if len(due) < window:
                    break
                window *= 4
        log_takeovers(owner, taken)
        return claimed

    def _oldest_in(
        self,
        status: RunStatus,
        flows: Collection[str] | None,
        free_for: tuple[str, float] | None,
        page: int,
    ) -> Iterator[RunRecord]:
        """The scope's runs in ``status`` (of ``flows``; with ``free_for=(owner,
        at)``, only those whose lease is free, ``owner``'s or expired at
        ``at``), oldest first (``created_at, run_id``), read ``page`` rows (64
        at least after the first) at a time as the caller goes on.

        Read through ``runs_scope_status`` from the oldest run in ``status``,
        so a claim of ``page`` runs reads about ``page`` rows however many
        runs of other statuses are older (through ``runs_scope_created`` it
        stepped past every finished run at every claim: 8 ms per claim of 32
        behind 9,000 completed runs, 0.3-0.5 ms this way)."""
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM runs INDEXED BY runs_scope_status "
            "WHERE scope=? AND status=?"
        )
        args: list[Any] = [self.scope, status]
        if flows is not None:
            sql += f" AND flow_name IN ({','.join('?' * len(flows))})"
            args.extend(flows)
        if free_for is not None:
            sql += " AND (lease_owner IS NULL OR lease_owner=? OR lease_expires_at<=?)"
            args += free_for
        after: list[Any] = []
        while True:
            keyset = " AND (created_at, run_id) > (?, ?)" if after else ""
            with self._read():
                rows = self.conn.execute(
                    f"{sql}{keyset} ORDER BY created_at, run_id LIMIT ?", [*args, *after, page]
                ).fetchall()
            runs = [run_from_row(r) for r in rows]
            yield from runs
            if len(runs) < page:
                return
            after, page = [runs[-1].created_at, runs[-1].run_id], max(page, 64)

    def delete_run(self, run_id: str) -> None:
        with self._write():
            self.get_run(run_id)
            self.conn.execute("DELETE FROM runs WHERE run_id=?", (run_id,))
        self._last.pop(run_id, None)
        self.vacuum(min_free_pages=256)

    def prune(self, run_id: str, keep_last_n: int) -> int:
        if keep_last_n < 1:
            raise ValueError(
                "keep_last_n must be at least 1: the latest checkpoint is never pruned"
            )
        with self._write():
            latest = self.get_run(run_id).revision
            oldest_kept = latest - keep_last_n + 1
            first = self.conn.execute(CK.OLDEST_REVISION, (run_id,)).fetchone()
            if first is None or first[0] is None or first[0] >= oldest_kept:
                return 0
            base = self._load(run_id, oldest_kept)
            deleted = _scalar(self.conn.execute(CK.COUNT_BELOW, (run_id, oldest_kept)))
            self.conn.execute(CK.DELETE_TO, (run_id, oldest_kept))
            # the oldest kept revision again, as a snapshot; the run's waits
            # mirror its latest revision, which stays, so they stay as they are
            row = checkpoint_values(base, None, error=base.error)
            self.conn.execute(CK.INSERT, (*row, checkpoint_checksum(row)))
        self.vacuum(min_free_pages=256)
        return int(deleted)

    # -- reads -----------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        with self._read():
            row = self.conn.execute(SQL.get_run, (run_id, self.scope)).fetchone()
        if row is None:
            raise CheckpointNotFoundError(f"no run {run_id} in scope {self.scope!r}")
        return run_from_row(row)

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
        sql, args = SQL.list_runs(
            self.scope, statuses, flow_name, newest_first,
            tenant_id=tenant_id, session_id=session_id, flow_key=flow_key,
            run_id_prefix=run_id_prefix,
        )  # fmt: skip
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            args.extend([limit, offset])
        elif offset:
            sql += " LIMIT ? OFFSET ?"  # no portable "no limit": the largest int64
            args.extend([2**63 - 1, offset])
        with self._read():
            return [run_from_row(r) for r in self.conn.execute(sql, args)]

    def runs_of_other_versions(self, flow_name: str, version: str) -> list[RunRecord]:
        """Read through ``runs_scope_status``: the scope's live runs only, not
        every run it ever had (SQLite's planner, with no statistics, walked
        ``runs_scope_created`` to skip the sort)."""
        with self._read():
            return [
                run_from_row(r)
                for r in self.conn.execute(
                    _RUNS_OF_OTHER_VERSIONS, (self.scope, flow_name, version)
                )
            ]

    def history(self, run_id: str) -> list[CheckpointInfo]:
        self.get_run(run_id)
        with self._read():
            rows: list[Any] = self.conn.execute(CK.HISTORY, (run_id,)).fetchall()
        return checkpoint_infos(run_id, rows)

    def history_page(self, run_id: str, *, after: int = -1, limit: int) -> list[CheckpointInfo]:
        self.get_run(run_id)
        try:
            rows: list[Any] = self.conn.execute(CK.HISTORY_PAGE, (run_id, after, limit)).fetchall()
        except apsw.Error as exc:
            raise self._err(exc) from exc
        return checkpoint_infos(run_id, rows)

    def latest(self, run_id: str) -> Checkpoint:
        return self.head(run_id).checkpoint

    def head(self, run_id: str) -> RunHead:
        run = self.get_run(run_id)
        cached = self._last.get(run_id)
        if cached is not None and cached.revision == run.revision:
            return RunHead(run, detached(cached))
        # the row's revision: never rewritten, so its checkpoint must be there
        cp = self._load(run_id, run.revision, run.status, latest=True)
        self._remember(detached(cp))
        return RunHead(run, cp)

    def get_checkpoint(self, run_id: str, revision: int) -> Checkpoint:
        run = self.get_run(run_id)
        return self._load(run_id, revision, run.status)

    def _load_or_none(self, run_id: str, revision: int) -> Checkpoint | None:
        try:
            return self._load(run_id, revision)
        except CheckpointNotFoundError:
            return None

    def _load(
        self, run_id: str, revision: int, status: str | None = None, *, latest: bool = False
    ) -> Checkpoint:
        """Fold deltas onto the nearest snapshot at or below ``revision``
        (``status``: the run's, named by a :class:`CheckpointCorruptError`;
        ``latest``: ``revision`` is the run's own, so a missing row is
        damage, not a pruned or unsaved revision)."""
        with self._read():
            raw: list[Any] = self.conn.execute(CK.FOLD_ROWS, (run_id, revision)).fetchall()
        rows: list[Any] = []
        for r in raw:
            if r[-1] is not None and row_checksum(r[:-1]) != r[-1]:
                self._damaged(run_id, int(r[1]), status)
            rows.append(r[1:-1])
        try:
            return checkpoint_from_rows(run_id, revision, rows)
        except CheckpointCorruptError as exc:  # a row between two others is missing
            self._damaged(run_id, exc.revision, status, missing=True)
        except CheckpointNotFoundError:
            if rows:  # those below it are there: it is the one missing
                if not latest:
                    raise  # pruned, or never saved
                self._damaged(run_id, revision, status, missing=True)
            kept = [i.revision for i in self.history(run_id)]  # the error path only
            if not (latest or revision in kept):
                raise
            # the row is there (or is the run's own latest) but no snapshot at
            # or below it is: the one the oldest kept row builds on is gone
            below = [r for r in kept if r <= revision]
            self._damaged(run_id, below[0] - 1 if below else revision, status, missing=True)

    def _damaged(
        self, run_id: str, revision: int, status: str | None, *, missing: bool = False
    ) -> NoReturn:
        """Raise the :class:`CheckpointCorruptError` of ``run_id``'s row at
        ``revision`` (changed, or ``missing``), naming the newest intact
        revision below it and the run's status."""
        readable = self.readable_revision_below(run_id, revision)
        if status is None:
            status = self.get_run(run_id).status
        raise CheckpointCorruptError(
            run_id, revision, readable=readable, run_status=status, missing=missing
        )

    def readable_revision_below(self, run_id: str, revision: int) -> int | None:
        """The newest revision of run ``run_id`` below ``revision`` whose
        checkpoint reads back intact (int): its rows, from the nearest
        snapshot at or below it, all match their checksums and decode.
        ``None`` when no such revision is left (the run's first snapshot
        is damaged, or ``revision`` is 0). Reads every row below
        ``revision`` once: meant for the error path.

        Raises:
            StoreError: the database could not be read.
        """
        with self._read():
            raw: list[Any] = self.conn.execute(CK.ROWS_BELOW, (run_id, revision)).fetchall()
        chain_ok, candidates = False, []
        for r in raw:  # run_id, revision, kind, ..., checksum
            row_ok = r[-1] is None or row_checksum(r[:-1]) == r[-1]
            chain_ok = row_ok if r[2] == "snapshot" else chain_ok and row_ok
            if chain_ok:
                candidates.append(int(r[1]))
        for rev in reversed(candidates):  # the checksums hold; the JSON must decode too
            try:
                checkpoint_from_rows(run_id, rev, self._fold_rows_unchecked(run_id, rev))
            except CheckpointDecodeError:
                continue
            return rev
        return None

    def _fold_rows_unchecked(self, run_id: str, revision: int) -> list[Any]:
        with self._read():
            raw: list[Any] = self.conn.execute(CK.FOLD_ROWS, (run_id, revision)).fetchall()
        return [r[1:-1] for r in raw]

    def _run_domain(self, writes: Sequence[DomainWrite]) -> None:
        """Run a step's domain writes in the open transaction.

        Raises:
            DomainWriteError: a write broke a constraint, met a missing table
                or column, or raised; the caller rolls back. A failure of the
                database itself (full disk, I/O error) stays a StoreError.
        """
        if writes:
            tx = SqliteTx(self.conn)
            for write in writes:
                try:
                    write(tx)
                except (apsw.ConstraintError, apsw.SQLError, apsw.MismatchError) as exc:
                    raise _domain_write_error(exc, tx.last_sql) from exc
                except (apsw.Error, FlowdeskError):
                    raise
                except Exception as exc:  # the write's own code, or a value SQLite refuses
                    raise _domain_write_error(exc, tx.last_sql) from exc

    def query(self, op: Callable[[SqlTx], T]) -> T:
        """Run ``op(tx)`` read-only (``PRAGMA query_only``).

        Raises:
            QueryRefusedError: SQLite refused the query itself (a missing
                table or column, an SQL error, a write: that one names
                :meth:`write`).
            StoreError: the database could not be read (locked, I/O error).
        """
        self.conn.execute("PRAGMA query_only=ON")
        try:
            with self._read():
                return op(SqliteTx(self.conn))
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, apsw.ReadOnlyError):
                raise QueryRefusedError(
                    "a domain query tried to write; query() is read-only. Run writes "
                    "through store.write(op) (their own transaction) or as a step's "
                    "ctx.write (with its checkpoint)."
                ) from cause
            if isinstance(cause, _QUERY_REFUSED):
                raise QueryRefusedError(str(exc)) from cause
            raise
        finally:
            self.conn.execute("PRAGMA query_only=OFF")

    def write(self, op: Callable[[SqlTx], T]) -> T:
        """Run ``op(tx)`` in its own ``BEGIN IMMEDIATE`` transaction and commit."""
        with self._write():
            return op(SqliteTx(self.conn))

    # -- waits, signals, events ------------------------------------------

    def send_signal(
        self, name: str, key: str, payload: Any, now: float, dedupe_key: str | None = None
    ) -> SignalId:
        body = codec.dumps(payload)
        with self._write():
            if dedupe_key is not None:
                row = self.conn.execute(
                    SQL.signal_by_dedupe_key, (self.scope, dedupe_key)
                ).fetchone()
                if row is not None:
                    first = deduped_signal(row)
                    same = same_signal_or_refuse(first, dedupe_key, name, key, body)
                    return SignalId(same, stored=False)
            signal_id = int(
                _scalar(
                    self.conn.execute(
                        SQL.insert_signal + " RETURNING signal_id",
                        (self.scope, name, key, body, dedupe_key, now),
                    )
                )
            )
        return SignalId(signal_id)

    def signal_by_dedupe_key(self, dedupe_key: str) -> Signal | None:
        with self._read():
            row = self.conn.execute(SQL.signal_by_dedupe_key, (self.scope, dedupe_key)).fetchone()
        return None if row is None else deduped_signal(row)

    def next_signal(self, name: str, key: str) -> Signal | None:
        with self._read():
            row = self.conn.execute(SQL.next_signal, (self.scope, name, key)).fetchone()
        return None if row is None else signal_from_row(name, key, row)

    def signal_consumer(self, signal_id: int) -> str | None:
        with self._read():
            row = self.conn.execute(SQL.signal_consumer, (self.scope, signal_id)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def publish_event(self, type_: str, payload: Any, now: float) -> int:
        with self._write():
            event_id = int(
                _scalar(
                    self.conn.execute(
                        SQL.publish_event,
                        (self.scope, type_, codec.dumps(payload), now),
                    )
                )
            )
        return event_id

    def first_event(self, type_: str, since: float) -> Event | None:
        with self._read():
            row = self.conn.execute(SQL.first_event, (self.scope, type_, since)).fetchone()
        return None if row is None else event_from_row(type_, row)

    def due_waits(self, now: float, limit: int = 1000) -> list[tuple[str, str]]:
        with self._read():
            rows = self.conn.execute(
                "SELECT w.run_id, w.wait_id FROM waits w CROSS JOIN runs r "
                "WHERE r.run_id=w.run_id AND w.deadline_at IS NOT NULL AND w.deadline_at<=? "
                "AND r.scope=? ORDER BY w.deadline_at LIMIT ?",
                (now, self.scope, limit),
            ).fetchall()
        return [(str(a), str(b)) for a, b in rows]

    def next_deadline(self) -> float | None:
        with self._read():
            value = _scalar(
                self.conn.execute(
                    "SELECT w.deadline_at FROM waits w CROSS JOIN runs r "
                    "WHERE r.run_id=w.run_id AND w.deadline_at IS NOT NULL AND r.scope=? "
                    "ORDER BY w.deadline_at LIMIT 1",
                    (self.scope,),
                )
            )
        return None if value is None else float(value)

    def wakeable_runs(self, now: float, limit: int = 1000) -> list[str]:
        # Driven from the waits table (CROSS JOIN keeps SQLite from starting at
        # runs, which would scan every run ever made); due deadlines first, by
        # deadline, so a burst of signals never delays a deadline.
        with self._read():
            rows = self.conn.execute(
                "SELECT run_id, min(prio), min(due) FROM ("
                " SELECT w.run_id, 0 AS prio, w.deadline_at AS due FROM waits w"
                " CROSS JOIN runs r"
                " WHERE r.run_id=w.run_id AND w.deadline_at IS NOT NULL"
                "  AND w.deadline_at<=:now AND r.scope=:scope"
                " UNION ALL SELECT run_id, 0, deadline_at FROM runs"
                " WHERE scope=:scope AND status='waiting' AND deadline_at IS NOT NULL"
                "  AND deadline_at<=:now"
                " UNION ALL SELECT w.run_id, 1, NULL FROM waits w"
                " CROSS JOIN runs r"
                " WHERE r.run_id=w.run_id AND w.kind='signal' AND r.scope=:scope"
                "  AND EXISTS (SELECT 1 FROM signals s"
                "  WHERE s.scope=:scope AND s.name=w.name AND s.key=w.key"
                "  AND s.consumed_by IS NULL)"
                " UNION ALL SELECT w.run_id, 1, NULL FROM waits w"
                " CROSS JOIN runs r"
                " WHERE r.run_id=w.run_id AND w.kind='event' AND r.scope=:scope"
                "  AND EXISTS (SELECT 1 FROM events e"
                "  WHERE e.scope=:scope AND e.type=w.name AND e.published_at>=w.created_at)"
                ") GROUP BY run_id ORDER BY min(prio), min(due) LIMIT :limit",
                {"scope": self.scope, "now": now, "limit": limit},
            ).fetchall()
        return [str(r[0]) for r in rows]

    def runs_waiting_for(self, kind: str, name: str, key: str | None = None) -> list[str]:
        sql = SQL.runs_waiting_for
        args: list[Any] = [self.scope, kind, name]
        if key is not None:
            sql += SQL.and_wait_key
            args.append(key)
        sql += SQL.waiting_longest_first
        with self._read():
            return [str(r[0]) for r in self.conn.execute(sql, args)]

    # -- outbox --------------------------------------------------------------

    def intents(
        self, statuses: Sequence[str], limit: int = 100, *, run_id: str | None = None
    ) -> list[Intent]:
        with self._read():
            rows: list[Any] = self.conn.execute(
                *SQL.intents(self.scope, statuses, limit, run_id)
            ).fetchall()
        return [intent_from_row(r) for r in rows]

    def delivered_runs(self, flow_name: str, limit: int = 100) -> list[str]:
        with self._read():
            rows = self.conn.execute(*SQL.delivered_runs(self.scope, flow_name, limit)).fetchall()
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
        """See :meth:`desktop_app.store.protocol.Outbox.claim_intents` (one
        ``BEGIN IMMEDIATE`` transaction)."""
        at = self.now() if now is None else now
        only = ""
        only_args: tuple[str, ...] = ()
        if destinations is not None:
            names = tuple(destinations)
            only, only_args = f" AND o.destination IN ({','.join('?' * len(names))})", names
        with self._write():
            rows: list[Any] = self.conn.execute(
                "SELECT o.intent_id, o.run_id, o.step_id, o.destination, o.payload, o.status, "
                "o.attempts, o.receipt, o.last_error, o.claimed_by, o.claim_expires_at "
                "FROM outbox o JOIN runs r ON r.run_id=o.run_id "
                f"WHERE r.scope=? AND o.status IN ('pending','sending'){only} "
                "ORDER BY o.created_at, o.intent_id",
                (self.scope, *only_args),
            ).fetchall()
            out: list[Intent] = []
            for r in rows:
                if len(out) >= limit:
                    break
                if not claim_is_free(r[9], r[10], owner, at, presumed_dead, presumed_alive):
                    continue  # a live dispatcher holds it
                self.conn.execute(
                    "UPDATE outbox SET claimed_by=?, claim_expires_at=? WHERE intent_id=?",
                    (owner, at + ttl_s, r[0]),
                )
                out.append(intent_from_row(r, interrupted=r[5] == "sending"))
        return out

    def renew_intent_claim(
        self, intent_id: str, owner: str, ttl_s: float, *, now: float | None = None
    ) -> bool:
        """See :meth:`desktop_app.store.protocol.Outbox.renew_intent_claim`."""
        at = self.now() if now is None else now
        with self._write():
            self.conn.execute(
                "UPDATE outbox SET claim_expires_at=? "
                "WHERE intent_id=? AND claimed_by=? AND status='sending'",
                (at + ttl_s, intent_id, owner),
            )
            return bool(self.conn.changes() == 1)

    def release_intent(self, intent_id: str, owner: str, error: str) -> bool:
        """See :meth:`desktop_app.store.protocol.Outbox.release_intent`."""
        with self._write():
            self.conn.execute(SQL.release_intent, (error, intent_id, owner))
            return bool(self.conn.changes() == 1)

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
        with self._write():
            if status == "sending":
                self.conn.execute(SQL.mark_sending + guard, (now, intent_id, *guard_args))
            elif status == "delivered":
                self.conn.execute(
                    SQL.mark_delivered + guard,
                    (now, codec.dumps(receipt), intent_id, *guard_args),
                )
            else:
                self.conn.execute(SQL.mark_other + guard, (status, error, intent_id, *guard_args))
            moved = self.conn.changes() == 1
        return moved

    def withdraw_intents(
        self,
        run_id: str,
        reason: str,
        *,
        presumed_dead: Callable[[str], bool] | None = None,
        presumed_alive: Callable[[str], bool] | None = None,
        now: float | None = None,
    ) -> Withdrawal:
        """See :meth:`desktop_app.store.protocol.Outbox.withdraw_intents` (one
        ``BEGIN IMMEDIATE`` transaction)."""
        at = self.now() if now is None else now
        done = Withdrawal([], [])
        with self._write():
            rows: list[Any] = self.conn.execute(
                SQL.open_intents_of_run, (run_id, self.scope)
            ).fetchall()
            for r in rows:
                if withdrawable(r[5], r[9], r[10], at, presumed_dead, presumed_alive):
                    self.conn.execute(SQL.withdraw_intent, (reason, r[0], r[5]))
                    done.withdrawn.append(intent_from_row(r))
                else:
                    done.in_flight.append(intent_from_row(r))
        return done

    def open_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(SQL.open_intents_of_run, run_id)

    def failed_intents(self, run_id: str) -> list[Intent]:
        return self._intents_of(SQL.failed_intents_of_run, run_id)

    def _intents_of(self, sql: str, run_id: str) -> list[Intent]:
        with self._read():
            rows: list[Any] = self.conn.execute(sql, (run_id, self.scope)).fetchall()
        return [intent_from_row(r) for r in rows]

    def sending_intents(self) -> dict[str, int]:
        with self._read():
            rows: list[Any] = self.conn.execute(SQL.sending_by_run, (self.scope,)).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def sending_claims(self, run_id: str) -> dict[str, tuple[str | None, float | None]]:
        with self._read():
            rows: list[Any] = self.conn.execute(
                SQL.sending_claims_of_run, (run_id, self.scope)
            ).fetchall()
        return {str(r[0]): (r[1], None if r[2] is None else float(r[2])) for r in rows}

    def undelivered_intents(self) -> dict[str, int]:
        with self._read():
            rows: list[Any] = self.conn.execute(SQL.undelivered_by_run, (self.scope,)).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def vacuum(self, min_free_pages: int = 0) -> int:
        """Give free pages back to the file system (``PRAGMA incremental_vacuum``)
        when more than ``min_free_pages`` are free; returns the pages freed."""
        with self._read():
            free = int(_scalar(self.conn.execute("PRAGMA freelist_count")))
            if free <= min_free_pages:
                return 0
            self.conn.execute("PRAGMA incremental_vacuum").fetchall()
            return free - int(_scalar(self.conn.execute("PRAGMA freelist_count")))

    def data_version(self) -> int:
        """Changes whenever anyone commits: SQLite's ``PRAGMA data_version``
        (other connections and processes) combined with this store's own commits."""
        with self._read():
            other = int(_scalar(self.conn.execute("PRAGMA data_version")))
            return (other << 32) + self._own_commits

    def fold_wal(self) -> None:
        """Copy the commits in the write-ahead log into the database file
        (``PRAGMA wal_checkpoint(PASSIVE)``: what no other process still
        reads, never waiting for one), so that a copy of the file alone
        holds them; the ``-wal`` and ``-shm`` files stay, as they are (a
        command on a full disk can still open the file). The command line
        calls it as each command ends.

        Raises:
            StoreError: the checkpoint failed (a full disk, an I/O error).
        """
        try:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except apsw.Error as exc:
            raise self._err(exc) from exc

    def close(self) -> None:
        self.conn.close()
        fd, self._clock_fd = self._clock_fd, None
        if fd is not None:
            os.close(fd)


#: Public methods that do not use the store's connection (clock reads).
_UNLOCKED = frozenset({"now", "file_system_now"})
# Every other public method uses the store's one connection and runs under its
# lock (:func:`_locked`), also one added later. Wrapped here, not with
# ``@_locked`` on each: mutmut never mutates a decorated function, so
# decorated they were never mutation-tested.
for _name, _method in list(vars(SqliteCheckpointStore).items()):
    if callable(_method) and not _name.startswith("_") and _name not in _UNLOCKED:
        setattr(SqliteCheckpointStore, _name, _locked(_method))
del _name, _method


def open_store(
    path: str | os.PathLike[str],
    *,
    scope: str = "default",
    synchronous: Synchronous = "FULL",
    busy_timeout_s: float = 10.0,
    fullfsync: bool = False,
    create: bool = True,
    vfs: str | None = None,
    clock: Callable[[], float] | None = None,
    write_gate: bool = True,
) -> SqliteCheckpointStore:
    """Open the file and return a verified store (``clock``: a test clock for
    lease and claim decisions, UTC epoch seconds; default the process clock;
    ``write_gate``: see :func:`~desktop_app.store.connection.open_connection`).

    A missing file is refused and nothing is created (no empty database, no
    ``-wal``, ``-shm`` or lock file): a new file would have no schema. With
    ``create`` (the default) it is refused as a database without the schema
    (``SchemaMissingError``), else as a missing database
    (``DatabaseMissingError``); both name ``flowdesk --db PATH db apply``,
    which creates it. A missing folder is a ``DatabaseOpenError`` either way.

    Raises:
        DatabaseOpenError, SchemaMissingError (names ``flowdesk db apply``),
        SchemaChecksumError, SchemaTooNewError, StoreError.
    """
    p = Path(path)
    if create and vfs is None and not os.path.lexists(p) and p.parent.is_dir():
        # refused before anything is made: a command that refuses leaves nothing behind
        raise migrations.schema_missing([f.key for f in migrations.schema_files()], str(p))
    try:
        conn = open_connection(
            path,
            synchronous=synchronous,
            busy_timeout_s=busy_timeout_s,
            fullfsync=fullfsync,
            create=create,
            vfs=vfs,
            write_gate=write_gate,
        )
        try:
            return SqliteCheckpointStore(conn, scope=scope, path=str(Path(path)), clock=clock)
        except BaseException:
            conn.close()
            raise
    except DiskFullError as exc:  # its words are a run's: nothing ran yet
        raise exc.stopping_no_run("open it again") from exc
