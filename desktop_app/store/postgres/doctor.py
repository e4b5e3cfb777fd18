"""``flowdesk --db postgresql://… doctor``: what a PostgreSQL server must
offer Flowdesk, checked read-only.

Each check is ``(ok, what, detail)`` where ``ok`` is True (fine), False (a
problem: Flowdesk's guarantees do not hold or it cannot run) or None (a
warning). Nothing is left on the server: the schema-objects check builds
the shipped schema in a transaction it rolls back.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from desktop_app.store import migrations
from desktop_app.store.postgres.sql import connect, redact

Check = tuple[bool | None, str, str]
#: pg_current_snapshot (13), lz4 TOAST compression (14).
MIN_SERVER = 140000
#: A clock offset above this many seconds is reported (leases use the server's clock anyway).
CLOCK_WARN_S = 1.0


def _setting(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
    return "" if row is None or row[0] is None else str(row[0])


def _objects_check(conn: psycopg.Connection[Any]) -> Check:
    """Whether a table, column, index, function or trigger of the applied
    schema was dropped outside Flowdesk (``db apply`` does not create it
    again: its records say the schema is applied), as SQLite's doctor
    checks; see :func:`~desktop_app.store.migrations.pg_missing_objects`. A
    warning when it cannot be checked (a role without ``CREATE`` on the
    database, a standby)."""
    try:
        gone = migrations.pg_missing_objects(conn)
    except psycopg.Error as exc:
        detail = (exc.diag.message_primary or str(exc)).strip()
        return (
            None,
            "schema objects",
            f"not checked: {detail} (the check builds the schema in a transaction it rolls "
            "back: run doctor as the database owner, on the primary)",
        )
    if not gone:
        return (True, "schema objects", "all present")
    return (
        False,
        "schema objects",
        f"missing {', '.join(gone)}: dropped outside Flowdesk, and `db apply` does not create "
        "them again (its records say the schema is applied). Restore the database from a "
        "backup (stop every Flowdesk process using it first)",
    )


def _pooler_check(conn: psycopg.Connection[Any], pooler: str) -> Check:
    """Whether ``--db`` may go through a transaction-mode pooler the
    ``postgres.pooler`` setting does not name: the port the server listens
    on (``inet_server_port()``) is not the one the connection reached (a
    pooler such as PgBouncer listens on its own). A warning only: a port
    forward or a proxy differs the same way, and needs no setting."""
    row = conn.execute("SELECT inet_server_port()").fetchone()
    server = None if row is None or row[0] is None else int(row[0])  # NULL: a Unix socket
    reached = conn.info.port
    if pooler == "transaction":
        return (True, "pooler", 'transaction (postgres.pooler = "transaction")')
    if server is None or server == reached:
        return (True, "pooler", "none (the server's own port)")
    return (
        None,
        "pooler",
        f"--db reaches port {reached}, the server listens on {server}: if that is a "
        'transaction-mode pooler (PgBouncer), set postgres.pooler = "transaction" '
        "(FLOWDESK_POSTGRES__POOLER=transaction) on every machine using it; a port "
        "forward or a proxy needs nothing",
    )


def postgres_checks(url: str, *, workers: int = 0, pooler: str = "none") -> list[Check]:
    """Connect to ``url`` and check the server (see module doc).

    Args:
        workers: worker processes you plan to run (each needs its pool plus
            one liveness connection), compared with ``max_connections``.
        pooler: the ``postgres.pooler`` setting (``"none"`` or ``"transaction"``).
    Never raises: a failed connection is one failed check.
    """
    out: list[Check] = []
    where = redact(url)
    try:
        conn = connect(url, autocommit=True)
    except psycopg.Error as exc:
        return [(False, "database", f"{where}: cannot connect: {exc}")]
    with conn:
        out.append((True, "database", where))
        version = int(_setting(conn, "server_version_num") or 0)
        out.append(
            (
                version >= MIN_SERVER,
                "server",
                f"PostgreSQL {_setting(conn, 'server_version')}"
                + ("" if version >= MIN_SERVER else " (Flowdesk needs 14 or newer)"),
            )
        )
        applied = False
        try:
            states = migrations.status(conn)
            bad = [s for s in states if s.state != "applied"]
            applied = not bad
            out.append(
                (
                    not bad,
                    "schema",
                    "all applied"
                    if not bad
                    else ", ".join(f"{s.key} {s.state}" for s in bad)
                    + f" (run `flowdesk --db {where} db apply` as the database owner)",
                )
            )
        except Exception as exc:  # report, never crash the doctor
            out.append((False, "schema", f"{type(exc).__name__}: {exc}"))
        out.append(
            _objects_check(conn)
            if applied
            else (None, "schema objects", "not checked: the schema is not applied whole (above)")
        )
        out.append(_pooler_check(conn, pooler))
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        standby = bool(row and row[0])
        out.append(
            (
                not standby,
                "primary",
                "read-only standby: connect to the primary" if standby else "yes (not a standby)",
            )
        )
        fsync = _setting(conn, "fsync")
        out.append(
            (
                fsync == "on",
                "fsync",
                fsync + ("" if fsync == "on" else " (a server crash can lose committed steps)"),
            )
        )
        sync = _setting(conn, "synchronous_commit")
        out.append(
            (
                True if sync in ("on", "remote_apply", "remote_write") else None,
                "synchronous_commit",
                sync
                + (
                    ""
                    if sync in ("on", "remote_apply", "remote_write")
                    else " (a server crash can lose the last commits; a finished step may rerun)"
                ),
            )
        )
        max_conn = int(_setting(conn, "max_connections") or 0)
        row = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()
        used = int(row[0]) if row else 0
        need = workers * 10
        out.append(
            (
                True if need <= max_conn - used else None,
                "connections",
                f"{used} of max_connections {max_conn} in use"
                + (f"; {workers} workers need about {need}" if workers else ""),
            )
        )
        out.append(
            (
                True,
                "timeouts",
                "lock_timeout {} statement_timeout {} idle_in_transaction {} (server defaults; "
                "Flowdesk sets its own per connection)".format(
                    _setting(conn, "lock_timeout"),
                    _setting(conn, "statement_timeout"),
                    _setting(conn, "idle_in_transaction_session_timeout"),
                ),
            )
        )
        t0 = time.time()
        row = conn.execute("SELECT extract(epoch from clock_timestamp())::float8").fetchone()
        t1 = time.time()
        rtt = t1 - t0
        offset = float(row[0]) - (t0 + rtt / 2) if row else 0.0
        out.append(
            (
                True if abs(offset) <= CLOCK_WARN_S else None,
                "clock offset",
                f"{offset * 1000:+.1f} ms, round trip {rtt * 1000:.2f} ms"
                + (
                    ""
                    if abs(offset) <= CLOCK_WARN_S
                    else " (leases use the server's clock and stay safe; fix NTP on this machine)"
                ),
            )
        )
    return out
