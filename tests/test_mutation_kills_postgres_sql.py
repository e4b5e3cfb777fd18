"""The PostgreSQL plumbing in ``desktop_app/store/postgres/sql.py``: which
psycopg errors mean the connection is gone, the typed error and advice each
SQLSTATE becomes, passwords kept out of messages, and ``?`` placeholders of
domain SQL turned into psycopg's. Pure functions: the errors are psycopg's
own classes, as the server's replies produce them."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg_errors

from desktop_app.errors import (
    DatabaseOpenError,
    DatabaseUnreachableError,
    SchemaMissingError,
    StoreError,
)
from desktop_app.store.postgres.sql import (
    epoch,
    is_connection_lost,
    no_nul,
    qmark_to_format,
    redact,
    translate,
    ts,
)

WHERE = "postgresql://me:***@db.example:5433/flow"


def error(sqlstate: str) -> psycopg.Error:
    return pg_errors.lookup(sqlstate)("the server said no")


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (error("08006"), True),  # connection_failure
        (error("08003"), True),  # connection_does_not_exist
        (error("57P01"), True),  # admin_shutdown
        (error("57P02"), True),  # crash_shutdown
        (error("57P03"), True),  # cannot_connect_now
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (error("53300"), False),  # too_many_connections: an OperationalError with a code
        (error("57014"), False),  # query_canceled
        (error("40001"), False),
        (psycopg.DataError("NUL"), False),
        (OSError("not psycopg's"), False),
    ],
)
def test_which_errors_mean_the_connection_is_gone(exc, lost):
    assert is_connection_lost(exc) is lost


CASES = [
    (
        "08006",
        DatabaseUnreachableError,
        "lost the connection to PostgreSQL ({w}); nothing of the transaction it cut off "
        "was committed. Check that the server is up and retry.",
    ),
    (
        "42P01",
        SchemaMissingError,
        "the PostgreSQL database ({w}) has no Flowdesk schema; apply it with "
        "`flowdesk --db URL db apply`, URL naming this database. If it was applied "
        "and --db goes through a transaction-mode pooler (PgBouncer), set "
        'postgres.pooler = "transaction".',
    ),
    (
        "3F000",
        SchemaMissingError,
        "the PostgreSQL database ({w}) has no Flowdesk schema; apply it with "
        "`flowdesk --db URL db apply`, URL naming this database. If it was applied "
        "and --db goes through a transaction-mode pooler (PgBouncer), set "
        'postgres.pooler = "transaction".',
    ),
    (
        "26000",
        StoreError,
        "PostgreSQL lost track of a prepared statement ({w}) (SQLSTATE 26000): --db goes "
        "through a transaction-mode pooler (PgBouncer); set postgres.pooler = "
        '"transaction" (FLOWDESK_POSTGRES__POOLER). The transaction it failed in wrote '
        "nothing (what committed before it stays).",
    ),
    (
        "42P05",
        StoreError,
        "PostgreSQL lost track of a prepared statement ({w}) (SQLSTATE 42P05): --db goes "
        "through a transaction-mode pooler (PgBouncer); set postgres.pooler = "
        '"transaction" (FLOWDESK_POSTGRES__POOLER). The transaction it failed in wrote '
        "nothing (what committed before it stays).",
    ),
    (
        "3D000",
        DatabaseOpenError,
        "cannot open the PostgreSQL database ({w}) (SQLSTATE 3D000): check the URL, "
        "the role and its password (~/.pgpass or PGPASSWORD).",
    ),
    (
        "28P01",
        DatabaseOpenError,
        "cannot open the PostgreSQL database ({w}) (SQLSTATE 28P01): check the URL, "
        "the role and its password (~/.pgpass or PGPASSWORD).",
    ),
    (
        "25006",
        StoreError,
        "connected to a read-only PostgreSQL server ({w}) (a standby?); nothing was "
        "written. Point --db at the primary.",
    ),
    (
        "53100",
        StoreError,
        "the PostgreSQL server ({w}) is out of disk space; nothing was written. "
        "Free some space and resume the run.",
    ),
    (
        "53300",
        StoreError,
        "the PostgreSQL server ({w}) has no free connection slots (max_connections); "
        "nothing was written. Stop some workers or raise max_connections.",
    ),
    (
        "55P03",
        StoreError,
        "a PostgreSQL lock or statement timeout expired ({w}); nothing was written. Retry.",
    ),
    (
        "57014",
        StoreError,
        "a PostgreSQL lock or statement timeout expired ({w}); nothing was written. Retry.",
    ),
    (
        "40001",
        StoreError,
        "PostgreSQL kept aborting the transaction ({w}) (SQLSTATE 40001, a serialization "
        "failure or deadlock) after several retries; nothing was written. Retry.",
    ),
    (
        "40P01",
        StoreError,
        "PostgreSQL kept aborting the transaction ({w}) (SQLSTATE 40P01, a serialization "
        "failure or deadlock) after several retries; nothing was written. Retry.",
    ),
    (
        "23503",
        StoreError,
        "PostgreSQL error ({w}) (SQLSTATE 23503): the server said no",
    ),
]


@pytest.mark.parametrize(("sqlstate", "kind", "message"), CASES)
def test_each_sqlstate_becomes_a_typed_error_with_its_advice(sqlstate, kind, message):
    got = translate(error(sqlstate), WHERE)
    assert type(got) is kind
    assert str(got) == message.format(w=WHERE)
    bare = translate(error(sqlstate))
    assert str(bare) == message.replace(" ({w})", "")


@pytest.mark.parametrize("sqlstate", ["42P01", "3F000"])
def test_a_missing_schema_names_the_db_apply_of_the_database_it_is_given(sqlstate):
    got = translate(error(sqlstate), WHERE, "postgresql://alice@db.example:5432/x y")
    assert str(got) == (
        f"the PostgreSQL database ({WHERE}) has no Flowdesk schema; run "
        "`flowdesk --db 'postgresql://alice@db.example:5432/x y' db apply` to apply it. "
        "If it was applied and --db goes through a transaction-mode pooler (PgBouncer), "
        'set postgres.pooler = "transaction".'
    )


def test_a_value_psycopg_cannot_send_and_an_error_without_a_code():
    nul = translate(psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"))
    assert type(nul) is StoreError
    assert str(nul) == (
        "a value cannot be stored in PostgreSQL: PostgreSQL text fields cannot contain NUL "
        "(0x00) bytes. Text may not contain NUL characters; nothing was written."
    )
    other = translate(psycopg.ProgrammingError("something else"), WHERE)
    assert str(other) == f"PostgreSQL error ({WHERE}) (SQLSTATE none): something else"
    coded = translate(error("22P02"), WHERE)  # a DataError the server coded
    assert str(coded) == f"PostgreSQL error ({WHERE}) (SQLSTATE 22P02): the server said no"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://me:s3cret@db.example:5433/flow", "postgresql://me:***@db.example:5433/flow"),
        ("postgresql://me:s3cret@db.example/flow", "postgresql://me:***@db.example/flow"),
        ("postgresql://:s3cret@db.example/flow", "postgresql://db.example/flow"),
        (
            "postgresql://me:s3cret@db.example:5433/flow?sslmode=require#x",
            "postgresql://me:***@db.example:5433/flow?sslmode=require#x",
        ),
        ("postgresql://me@db.example:5433/flow", "postgresql://me@db.example:5433/flow"),
        (  # libpq's secret parameters in the query; the others kept as written
            "postgresql://me@db/flow?application_name=a+b%20c&password=s3cret&sslpassword=k",
            "postgresql://me@db/flow?application_name=a+b%20c&password=***&sslpassword=***",
        ),
        ("postgresql://me:s3cret@db/flow?Password=x", "postgresql://me:***@db/flow?Password=***"),
        ("postgresql:///flow", "postgresql:///flow"),
        (  # a Unix socket: no host in the authority
            "postgresql://me:s3cret@/flow?host=/var/run/postgresql",
            "postgresql://me:***@/flow?host=/var/run/postgresql",
        ),
    ],
)
def test_redact_keeps_everything_but_the_password(url, shown):
    assert redact(url) == shown


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT ? , ?", "SELECT %s , %s"),
        ("SELECT '?' || \"a?\" || ?", "SELECT '?' || \"a?\" || %s"),
        ("SELECT 'it''s ?' , ?", "SELECT 'it''s ?' , %s"),
        ("SELECT 5 % 3, '100%', ?", "SELECT 5 %% 3, '100%%', %s"),
        ('SELECT "50%" FROM t', 'SELECT "50%%" FROM t'),
        ("SELECT 'a\"b?' , ?", "SELECT 'a\"b?' , %s"),
    ],
)
def test_qmark_placeholders_outside_quotes_only(sql, want):
    assert qmark_to_format(sql) == want


def test_time_and_text_at_the_boundary():
    assert ts() == "to_timestamp(%s)"
    assert ts("%(at)s") == "to_timestamp(%(at)s)"
    assert epoch("w.deadline_at") == "extract(epoch from w.deadline_at)::float8"
    assert no_nul(None) is None
    assert no_nul("a\x00b\x00") == "a\ufffdb\ufffd"
