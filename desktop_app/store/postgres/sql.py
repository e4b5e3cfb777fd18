"""PostgreSQL plumbing shared by the PostgreSQL stores: SQLSTATE error
classification, the :class:`SqlTx` domain writes run through (``?`` -> ``%s``),
time conversion at the boundary, and the one way Flowdesk opens a connection
(:func:`connect`, :func:`connection_kwargs`).

Transaction poolers (PgBouncer ``pool_mode = transaction``) hand each
*transaction* a server connection of their choosing, so nothing may rely on
session state surviving from one transaction to the next: connections send
no ``options`` startup parameter (PgBouncer refuses it), never prepare
statements (``prepare_threshold=None``: a statement prepared on one server
connection does not exist on the next, SQLSTATE 26000/42P05), and, told
``pooler="transaction"``, every transaction of the store's pool begins with
:data:`BEGIN_SQL` (``SET LOCAL``, which ends with the transaction). Only
:class:`~desktop_app.store.postgres.notify.Listener` needs a session (LISTEN,
a worker's liveness lock); it connects to a direct URL (see
:func:`desktop_app.store.postgres.store.open_postgres_store`). On a direct
connection the store's pool sets ``search_path`` once per connection instead
and prepares a step's append statement by name itself (see
``PostgresCheckpointStore._execute_opening``; no extra round trip).

Errors are classified by SQLSTATE (``exc.sqlstate``) and by psycopg's
exception classes, never by message text (the PostgreSQL error-code table,
Appendix A of its manual).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import psycopg

from desktop_app.errors import (
    DatabaseOpenError,
    DatabaseUnreachableError,
    DomainWriteError,
    FlowdeskError,
    SchemaMissingError,
    SchemaObjectMissingError,
    StoreError,
    TransactionControlError,
)
from desktop_app.errors import redact as redact  # its home moved; importers here keep working
from desktop_app.store import migrations
from desktop_app.store.protocol import SqlResult
from desktop_app.store.rows import transaction_control, written_table
from desktop_app.textsafe import shell_quote

#: Whole-transaction retry on these: serialization_failure, deadlock_detected.
RETRY_SQLSTATES = frozenset({"40001", "40P01"})


#: The session state each transaction of the store's pool sets first behind a
#: transaction pooler; ``SET LOCAL`` lasts until COMMIT/ROLLBACK, so it holds there.
BEGIN_SQL = f"SET LOCAL search_path = {migrations.PG_SCHEMA}"


def connection_kwargs(application_name: str = "flowdesk") -> dict[str, Any]:
    """``psycopg.connect`` keyword arguments every Flowdesk connection gets:
    ``application_name`` (a startup parameter PgBouncer passes on), no
    prepared statements, TCP keepalives (a partition is noticed in about 25 s)
    and a 10 s connect timeout. No ``options``: set session state per
    transaction with :data:`BEGIN_SQL`."""
    return {
        "application_name": application_name,
        "prepare_threshold": None,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "connect_timeout": 10,
    }


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(url)`` with :func:`connection_kwargs` (``kwargs``
    override them, e.g. ``autocommit=True``). Raises psycopg.Error."""
    return psycopg.connect(url, **{**connection_kwargs(), **kwargs})


def ts(placeholder: str = "%s") -> str:
    """SQL turning a UTC epoch-seconds parameter into ``timestamptz``."""
    return f"to_timestamp({placeholder})"


def epoch(column: str) -> str:
    """SQL reading a ``timestamptz`` column as UTC epoch seconds (float8)."""
    return f"extract(epoch from {column})::float8"


def no_nul(text: str | None) -> str | None:
    """Free text (error messages) with NUL replaced by U+FFFD: PostgreSQL text
    refuses NUL, and an error message must never make its append fail."""
    return None if text is None else text.replace("\x00", "\ufffd")


def is_connection_lost(exc: BaseException) -> bool:
    """The connection (not the statement) failed: nothing the server did is known."""
    if not isinstance(exc, psycopg.Error):
        return False
    code = exc.sqlstate or ""
    if code.startswith("08") or code in ("57P01", "57P02", "57P03"):
        return True
    return isinstance(exc, psycopg.OperationalError) and not code


#: what a server that answers says when it turns a connection away for a
#: while (libpq's text of its FATAL: starting up, shutting down, in recovery,
#: out of connection slots); any other FATAL (no such database or role, a
#: wrong password, no pg_hba.conf entry) stays until a person changes it
_TRANSIENT_FATAL = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "too many clients already",
    "remaining connection slots are reserved",
)


def is_unreachable_at_connect(exc: BaseException) -> bool:
    """A connection attempt failed because no server answered (refused,
    timed out, a name that did not resolve, no socket) or the one that
    answered turns connections away for a while; ``False`` when it refused
    this connection for good (a wrong database, role or password). libpq
    reports a failed connection without a SQLSTATE, so its text decides: a
    server's refusal carries its ``FATAL:`` line (localized servers aside,
    whose refusals then read as a server away)."""
    if not isinstance(exc, psycopg.OperationalError) or exc.sqlstate:
        return is_connection_lost(exc)
    said = str(exc)
    return "FATAL:" not in said or any(t in said for t in _TRANSIENT_FATAL)


#: constraint kinds by SQLSTATE (class 23, integrity constraint violation)
_CONSTRAINT_KINDS = {
    "23505": "unique",
    "23514": "check",
    "23502": "not null",
    "23503": "foreign key",
    "23P01": "exclusion",
}


def domain_write_error(exc: Exception, sql: str | None) -> DomainWriteError | None:
    """A step's domain write that failed, as :class:`DomainWriteError`, or
    None when the failure is the server's or the connection's (not the
    write's: a lost connection, a serialization failure, a full disk), which
    stays a StoreError. A psycopg error is the write's when its SQLSTATE
    class is 22 (data exception), 23 (integrity constraint violation), 2D
    (a procedure it called committed: invalid transaction termination) or 42
    (a missing table or column, a syntax error, more than one statement
    in a parameterless ``execute``); the table and constraint
    come from the error's ``diag``, else the table from the statement."""
    if isinstance(exc, FlowdeskError):
        return None
    if not isinstance(exc, psycopg.Error):  # the write's own code, or a value psycopg refuses
        return DomainWriteError(written_table(sql), None, None, f"{type(exc).__name__}: {exc}")
    code = exc.sqlstate or ""
    if code[:2] not in ("22", "23", "2D", "42") or is_connection_lost(exc):
        return None
    diag = exc.diag
    table = diag.table_name or written_table(sql)
    detail = (diag.message_primary or str(exc)).strip()
    if code[:2] != "23":
        return DomainWriteError(table, None, None, f"SQLSTATE {code}: {detail}")
    kind = _CONSTRAINT_KINDS.get(code, "other")
    constraint = diag.constraint_name or f"{table}.{diag.column_name or '?'}"
    return DomainWriteError(table, constraint, kind, f"SQLSTATE {code}: {detail}")


def translate(
    exc: psycopg.Error, where: str = "", db: str = "", *, records_kept: bool = True
) -> StoreError:
    """A typed :class:`StoreError` with advice for a psycopg error (by SQLSTATE).

    Args:
        where: the database as shown (its password masked).
        db: the database as a command may name it (the URL with its password
            left out): a missing schema's ``db apply`` hint then runs as
            printed (libpq finds the password in PGPASSWORD or ~/.pgpass).
        records_kept: the schema's records (its ledger) are still in the
            database, so a Flowdesk table that does not exist was dropped
            alone (:class:`SchemaObjectMissingError`, which ``db apply``
            does not mend); ``False``: the whole schema went (a ``DROP
            SCHEMA``, a restore), and ``db apply`` is the advice.
    """
    at = f" ({where})" if where else ""
    code = exc.sqlstate or ""
    if is_connection_lost(exc):
        return DatabaseUnreachableError(
            f"lost the connection to PostgreSQL{at}; nothing of the transaction it cut off "
            "was committed. Check that the server is up and retry."
        )
    gone = (
        migrations.dropped_table(exc.diag.message_primary or "")
        if code == "42P01" and records_kept
        else None
    )
    if gone is not None:  # one of its tables, dropped after the schema was applied
        return SchemaObjectMissingError(gone, where, pooler_note=True)
    if code == "42P01" or code == "3F000":
        apply = (
            f"run `flowdesk --db {shell_quote(db)} db apply` to apply it"
            if db
            else "apply it with `flowdesk --db URL db apply`, URL naming this database"
        )
        return SchemaMissingError(
            f"the PostgreSQL database{at} has no Flowdesk schema; {apply}. If it was "
            "applied and --db goes through a transaction-mode pooler (PgBouncer), set "
            'postgres.pooler = "transaction".'
        )
    if code in ("26000", "42P05"):  # a prepared statement missing, or there already
        return StoreError(
            f"PostgreSQL lost track of a prepared statement{at} (SQLSTATE {code}): --db "
            "goes through a transaction-mode pooler (PgBouncer); set "
            'postgres.pooler = "transaction" (FLOWDESK_POSTGRES__POOLER). The transaction it '
            "failed in wrote nothing (what committed before it stays)."
        )
    if code == "3D000" or code.startswith("28"):
        return DatabaseOpenError(
            f"cannot open the PostgreSQL database{at} (SQLSTATE {code}): check the URL, "
            "the role and its password (~/.pgpass or PGPASSWORD)."
        )
    if code == "25006":
        return StoreError(
            f"connected to a read-only PostgreSQL server{at} (a standby?); nothing was "
            "written. Point --db at the primary."
        )
    if code == "53100":
        return StoreError(
            f"the PostgreSQL server{at} is out of disk space; nothing was written. "
            "Free some space and resume the run."
        )
    if code == "53300":
        return StoreError(
            f"the PostgreSQL server{at} has no free connection slots (max_connections); "
            "nothing was written. Stop some workers or raise max_connections."
        )
    if code in ("55P03", "57014"):
        return StoreError(
            f"a PostgreSQL lock or statement timeout expired{at}; nothing was written. Retry."
        )
    if code in RETRY_SQLSTATES:
        return StoreError(
            f"PostgreSQL kept aborting the transaction{at} (SQLSTATE {code}, a serialization "
            "failure or deadlock) after several retries; nothing was written. Retry."
        )
    if isinstance(exc, psycopg.DataError) and not code:
        return StoreError(
            f"a value cannot be stored in PostgreSQL{at}: {exc}. Text may not contain NUL "
            "characters; nothing was written."
        )
    return StoreError(f"PostgreSQL error{at} (SQLSTATE {code or 'none'}): {exc}")


@functools.lru_cache(maxsize=512)
def qmark_to_format(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s``, ``%`` escaped as ``%%``; quoted
    literals and identifiers (``'…'``, ``"…"``) are copied unchanged except
    for ``%`` escaping."""
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if ch == "%":
            out.append("%%")
            continue
        if quote is not None:
            out.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


class SqlTx:
    """The :class:`~desktop_app.store.protocol.SqlTx` of the PostgreSQL
    stores: the store's open transaction, running domain SQL written with
    ``?`` placeholders (translated to ``%s`` here). Valid only inside the
    transaction it was handed in.
    """

    dialect: Literal["sqlite", "postgres"] = "postgres"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        #: the statement last run (names the table of a failed domain write)
        self.last_sql: str | None = None

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        """Run ONE statement, refused first when it would end, open or split
        the transaction. Statements with parameters go over PostgreSQL's
        extended protocol, which takes one statement; one without would go
        over the simple protocol, which runs a multi-statement string
        ("INSERT ...; COMMIT") whole, so it is sent in a pipeline (extended
        protocol too): more than one statement is refused there (SQLSTATE
        42601), never run.

        Raises:
            TransactionControlError: ``sql`` is ``COMMIT``, ``END``,
                ``ROLLBACK``, ``ABORT``, ``BEGIN``, ``START TRANSACTION``,
                ``SAVEPOINT``, ``RELEASE`` or ``PREPARE TRANSACTION``.
            psycopg.Error: PostgreSQL refused the statement.
        """
        word = transaction_control(sql, nested_comments=True)
        if word is not None:
            raise TransactionControlError(word)
        query, args = qmark_to_format(sql), tuple(params)
        if args:
            return self._conn.execute(query, args)
        with self._conn.pipeline() as pipeline:
            cur = self._conn.execute(query, args)
            pipeline.sync()
        return cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> SqlResult:
        """Run ``sql`` (one statement) with ``params``.

        Raises:
            TransactionControlError: ``sql`` would end, open or split the
                transaction (``COMMIT``, ``BEGIN``, ``SAVEPOINT`` ...).
            psycopg.Error: PostgreSQL refused it (SQLSTATE 42601 for more
                than one statement in ``sql``).
        """
        self.last_sql = sql
        cur = self._execute(sql, params)
        rows = cur.fetchall() if cur.description is not None else []
        return SqlResult(rows, max(0, cur.rowcount))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.last_sql = sql
        word = transaction_control(sql, nested_comments=True)
        if word is not None:
            raise TransactionControlError(word)
        cur = self._conn.cursor()
        cur.executemany(qmark_to_format(sql), [tuple(r) for r in rows])

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self._execute(sql, params).fetchone()
        return None if row is None else tuple(row)

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._execute(sql, params).fetchall()]
