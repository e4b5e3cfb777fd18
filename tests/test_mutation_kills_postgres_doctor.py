"""``flowdesk --db postgresql://… doctor`` check by check: each check's exact
``(ok, what, detail)`` on a real PostgreSQL server.

The first tests use what the test server really is, plus what can be set on the
test's own database (``ALTER DATABASE … SET`` for ``synchronous_commit`` and the
timeouts, edits to its schema ledger) and the ``workers=`` argument. Values the
doctor reads from the server (its version, ``fsync``, ``max_connections``, the
timeouts) are compared with what ``SHOW`` says on that same server.

What cannot be set per database (``fsync=on``, an older server, a standby, a
clock that is off, the number of connections in use) comes from a *lookalike*:
functions and views in a schema ``lookalike`` that the test database's
``search_path`` puts before ``pg_catalog``. The doctor's SQL names
``current_setting``, ``pg_is_in_recovery``, ``pg_stat_activity`` and
``clock_timestamp`` unqualified, so PostgreSQL answers it with the lookalike's
objects, as another server would; nothing in the doctor is patched.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from desktop_app.store import migrations
from desktop_app.store.postgres.doctor import postgres_checks
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

NAMES = [
    "database",
    "server",
    "schema",
    "schema objects",
    "pooler",
    "primary",
    "fsync",
    "synchronous_commit",
    "connections",
    "timeouts",
    "clock offset",
]
LEDGER = "flowdesk.flowdesk_schema_ledger"
FSYNC_WARNING = " (a server crash can lose committed steps)"
SYNC_WARNING = " (a server crash can lose the last commits; a finished step may rerun)"
CLOCK_WARNING = " (leases use the server's clock and stay safe; fix NTP on this machine)"
TIMEOUTS_NOTE = "(server defaults; Flowdesk sets its own per connection)"


def _by_name(checks: list) -> dict:
    return {what: (ok, detail) for ok, what, detail in checks}


def _show(url: str, name: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
    assert row is not None
    return str(row[0])


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _with_password(url: str) -> tuple[str, str]:
    """``url`` with a password (the trusted test role ignores it) and that URL
    as the doctor must print it: the password replaced by ``***``."""
    parts = urlsplit(url)
    redacted = f"postgresql://{parts.username}:***@{parts.hostname}:{parts.port}{parts.path}"
    return with_address(url, password="secret"), redacted


def _alter_database(url: str, **settings: str) -> None:
    """``ALTER DATABASE <the test's database> SET name = value``: every new
    connection to it (the doctor's) starts with these values."""
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(_dbname(url)), sql.Identifier(name), sql.Literal(value)
                )
            )


def _ledger(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def _lookalike(url: str, *definitions: sql.Composable | str) -> None:
    """Create ``definitions`` in schema ``lookalike`` of the test's database and
    put that schema before ``pg_catalog`` in the database's search_path."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA lookalike")
        for definition in definitions:
            conn.execute(definition)
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET search_path = lookalike, pg_catalog").format(
                sql.Identifier(_dbname(url))
            )
        )


def _settings(**values: str | None) -> sql.Composable:
    """A ``current_setting(name, missing_ok)`` that answers ``values`` (``None``:
    the server does not report it) and asks the real one for anything else."""
    cases = sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN {}").format(sql.Literal(name), sql.Literal(value))
        for name, value in values.items()
    )
    return sql.SQL(
        "CREATE FUNCTION lookalike.current_setting(text, boolean) RETURNS text "
        "LANGUAGE sql AS $$ SELECT CASE $1 {} ELSE pg_catalog.current_setting($1, $2) END $$"
    ).format(cases)


# -- the test server as it is ------------------------------------------------


def test_every_check_of_a_primary_with_the_schema_applied_in_order(pg_url):
    _alter_database(pg_url, synchronous_commit="on")
    url, redacted = _with_password(pg_url)
    fsync = _show(pg_url, "fsync")  # the test clusters run with fsync=off
    max_conn = _show(pg_url, "max_connections")

    checks = postgres_checks(url, workers=2)

    assert [what for _, what, _ in checks] == NAMES
    assert checks[:8] == [
        (True, "database", redacted),
        (True, "server", f"PostgreSQL {_show(pg_url, 'server_version')}"),
        (True, "schema", "all applied"),
        (True, "schema objects", "all present"),
        (True, "pooler", "none (the server's own port)"),
        (True, "primary", "yes (not a standby)"),
        (fsync == "on", "fsync", fsync + ("" if fsync == "on" else FSYNC_WARNING)),
        (True, "synchronous_commit", "on"),
    ]
    ok, _, detail = checks[8]
    used = re.fullmatch(
        rf"(\d+) of max_connections {max_conn} in use; 2 workers need about 20", detail
    )
    assert ok is True and used is not None
    assert int(used[1]) >= 1  # the doctor's own session is one of them
    assert checks[9] == (
        True,
        "timeouts",
        f"lock_timeout {_show(pg_url, 'lock_timeout')} "
        f"statement_timeout {_show(pg_url, 'statement_timeout')} "
        f"idle_in_transaction {_show(pg_url, 'idle_in_transaction_session_timeout')} "
        + TIMEOUTS_NOTE,
    )
    ok, _, detail = checks[10]
    clock = re.fullmatch(r"[+-]\d+\.\d ms, round trip (\d+\.\d\d) ms", detail)
    assert ok is True and clock is not None
    assert float(clock[1]) > 0  # a round trip to the server is never under 5 µs


def test_without_workers_the_connections_check_counts_none(pg_url):
    max_conn = _show(pg_url, "max_connections")

    ok, detail = _by_name(postgres_checks(pg_url))["connections"]

    assert ok is True
    assert re.fullmatch(rf"\d+ of max_connections {max_conn} in use", detail)


def test_more_workers_than_max_connections_allows_is_a_warning(pg_url):
    max_conn = int(_show(pg_url, "max_connections"))

    ok, detail = _by_name(postgres_checks(pg_url, workers=max_conn))["connections"]

    assert ok is None
    assert re.fullmatch(
        rf"\d+ of max_connections {max_conn} in use; {max_conn} workers need about {max_conn * 10}",
        detail,
    )


@pytest.mark.parametrize(
    ("value", "ok", "detail"),
    [
        ("on", True, "on"),
        ("remote_apply", True, "remote_apply"),
        ("remote_write", True, "remote_write"),
        ("local", None, "local" + SYNC_WARNING),
        ("off", None, "off" + SYNC_WARNING),
    ],
)
def test_synchronous_commit_off_or_local_is_a_warning(pg_url, value, ok, detail):
    _alter_database(pg_url, synchronous_commit=value)

    assert _by_name(postgres_checks(pg_url))["synchronous_commit"] == (ok, detail)


def test_the_timeouts_check_shows_the_databases_own_defaults(pg_url):
    _alter_database(
        pg_url,
        lock_timeout="1s",
        statement_timeout="2min",
        idle_in_transaction_session_timeout="3h",
    )

    assert _by_name(postgres_checks(pg_url))["timeouts"] == (
        True,
        f"lock_timeout 1s statement_timeout 2min idle_in_transaction 3h {TIMEOUTS_NOTE}",
    )


def test_every_schema_problem_is_listed_with_the_apply_command(pg_url):
    _ledger(pg_url, f"UPDATE {LEDGER} SET checksum = 'x' WHERE name = '0001_runs_checkpoints.sql'")
    _ledger(pg_url, f"DELETE FROM {LEDGER} WHERE name = '0002_run_leases.sql'")
    _ledger(pg_url, f"INSERT INTO {LEDGER} VALUES ('core', '9999_future.sql', 'y', now())")
    url, redacted = _with_password(pg_url)

    assert _by_name(postgres_checks(url))["schema"] == (
        False,
        "core/0001_runs_checkpoints.sql edited, core/0002_run_leases.sql pending, "
        f"core/9999_future.sql unknown (run `flowdesk --db {redacted} db apply` "
        "as the database owner)",
    )


def test_an_unreadable_ledger_is_a_schema_problem_not_a_crash(pg_url):
    _ledger(pg_url, f"ALTER TABLE {LEDGER} RENAME COLUMN checksum TO renamed")
    with psycopg.connect(pg_url, autocommit=True) as conn, pytest.raises(Exception) as raised:
        migrations.status(conn)
    assert type(raised.value).__name__ == "StoreError"

    checks = postgres_checks(pg_url)

    assert [what for _, what, _ in checks] == NAMES  # the later checks still ran
    assert _by_name(checks)["schema"] == (False, f"StoreError: {raised.value}")
    assert _by_name(checks)["schema objects"] == (
        None,
        "not checked: the schema is not applied whole (above)",
    )


def test_the_doctor_keeps_no_transaction_open_between_checks(pg_url):
    # Asked after the schema check, this pg_is_in_recovery answers whether the
    # doctor's session still holds a lock on the ledger (it would, had the
    # schema check run inside a transaction left open: `db apply` would wait).
    _lookalike(
        pg_url,
        "CREATE FUNCTION lookalike.pg_is_in_recovery() RETURNS boolean LANGUAGE sql AS $$ "
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() "
        f"AND relation = '{LEDGER}'::regclass) $$",
    )

    assert _by_name(postgres_checks(pg_url))["primary"] == (True, "yes (not a standby)")


# -- lookalikes of other servers -----------------------------------------------


def test_a_standby_is_a_problem(pg_url):
    _lookalike(
        pg_url,
        "CREATE FUNCTION lookalike.pg_is_in_recovery() RETURNS boolean "
        "LANGUAGE sql AS 'SELECT true'",
    )

    assert _by_name(postgres_checks(pg_url))["primary"] == (
        False,
        "read-only standby: connect to the primary",
    )


def test_fsync_on_passes(pg_url):
    _lookalike(pg_url, _settings(fsync="on"))

    assert _by_name(postgres_checks(pg_url))["fsync"] == (True, "on")


@pytest.mark.parametrize(
    ("version_num", "version", "ok", "detail"),
    [
        ("130011", "13.11", False, "PostgreSQL 13.11 (Flowdesk needs 14 or newer)"),
        ("140000", "14.0", True, "PostgreSQL 14.0"),
    ],
)
def test_a_server_older_than_14_is_a_problem(pg_url, version_num, version, ok, detail):
    _lookalike(pg_url, _settings(server_version_num=version_num, server_version=version))

    assert _by_name(postgres_checks(pg_url))["server"] == (ok, detail)


def test_a_setting_the_server_does_not_report_reads_as_zero(pg_url):
    _lookalike(pg_url, _settings(max_connections=None))

    ok, detail = _by_name(postgres_checks(pg_url))["connections"]

    assert ok is None  # no room at all, even for no workers
    assert re.fullmatch(r"\d+ of max_connections 0 in use", detail)


@pytest.mark.parametrize(("extra_workers", "ok"), [(0, True), (1, None)])
def test_workers_may_take_exactly_the_free_connections(pg_url, extra_workers, ok):
    max_conn = int(_show(pg_url, "max_connections"))
    used = 10 + max_conn % 10  # leaves a multiple of 10 free
    workers = (max_conn - used) // 10 + extra_workers
    _lookalike(
        pg_url,
        "CREATE VIEW lookalike.pg_stat_activity AS "
        f"SELECT pid FROM pg_catalog.generate_series(1, {used}) AS pid",
    )

    assert _by_name(postgres_checks(pg_url, workers=workers))["connections"] == (
        ok,
        f"{used} of max_connections {max_conn} in use; {workers} workers need about {workers * 10}",
    )


def test_a_clock_an_hour_ahead_is_a_warning(pg_url):
    _lookalike(
        pg_url,
        "CREATE FUNCTION lookalike.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS "
        "$$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$",
    )

    ok, detail = _by_name(postgres_checks(pg_url))["clock offset"]

    assert ok is None
    clock = re.fullmatch(
        r"\+(\d+\.\d) ms, round trip \d+\.\d\d ms" + re.escape(CLOCK_WARNING), detail
    )
    assert clock is not None
    assert abs(float(clock[1]) - 3_600_000) < 1_000  # an hour, in ms, give or take a second
