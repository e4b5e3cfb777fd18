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
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import apsw
import psycopg

from desktop_app.errors import CopyTargetNotEmptyError, DatabaseOpenError, StoreError
from desktop_app.store import migrations
from desktop_app.store.connection import translate
from desktop_app.store.postgres.sql import connect, no_nul, redact
from desktop_app.words import plural

#: Columns not copied: the laptop's leases and claims mean nothing on the server.
_DROPPED = frozenset({"lease_owner", "lease_expires_at", "claimed_by", "claim_expires_at"})
#: Tables not copied: each database keeps its own ledger; workers are live sessions.
_SKIPPED = frozenset({migrations.LEDGER, "workers"})


@dataclass
class CopyReport:
    """What ``db copy`` moved: rows per table (in copy order)."""

    rows: dict[str, int] = field(default_factory=dict)

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
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


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
                return _copy(src, dst, redact(url))
            except psycopg.Error as exc:
                dst.rollback()
                raise StoreError(
                    f"copying {path} to {redact(url)} failed: {exc}; nothing was copied"
                ) from exc
            except apsw.Error as exc:  # the source cannot be read (a damaged page)
                dst.rollback()
                raise translate(exc, path) from exc
    finally:
        src.close()


def _copy(src: apsw.Connection, dst: psycopg.Connection[Any], where: str) -> CopyReport:
    schema = migrations.PG_SCHEMA
    dst.execute(f"SET LOCAL search_path = {schema}")
    held = dict.fromkeys(("runs", "agent_runs"), 0)
    scopes: set[str] = set()
    for table in held:
        for scope, n in dst.execute(f"SELECT scope, count(*) FROM {table} GROUP BY scope"):
            held[table] += int(n)
            scopes.add(str(scope))
    if held["runs"] or held["agent_runs"]:
        raise CopyTargetNotEmptyError(
            where, held["runs"], held["agent_runs"], tuple(sorted(scopes))
        )
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    for table, column, dtype, identity in dst.execute(
        "SELECT table_name, column_name, data_type, is_identity FROM information_schema.columns "
        "WHERE table_schema=%s ORDER BY table_name, ordinal_position",
        (schema,),
    ):
        if table not in _SKIPPED:
            columns.setdefault(table, []).append((column, dtype, identity == "YES"))
    report = CopyReport()
    src.execute("BEGIN")  # one snapshot of the whole file
    try:
        for table in _order(dst, list(columns)):
            have = {r[1] for r in src.execute(f"SELECT * FROM pragma_table_info('{table}')")}
            cols = [c for c in columns[table] if c[0] in have and c[0] not in _DROPPED]
            names = ", ".join(c[0] for c in cols)
            times = [c[1] == "timestamp with time zone" for c in cols]
            count = 0
            with dst.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in src.execute(f"SELECT {names} FROM {table}"):
                    out = [
                        _timestamp(v, table, cols[i][0]) if times[i] else v
                        for i, v in enumerate(row)
                    ]
                    copy.write_row([no_nul(v) if isinstance(v, str) else v for v in out])
                    count += 1
            report.rows[table] = count
            for column, _dtype, identity in cols:
                if identity:  # the next generated id follows the copied ones
                    dst.execute(
                        f"SELECT setval(pg_get_serial_sequence(%s, %s), "
                        f"coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)",
                        (f"{schema}.{table}", column),
                    )
    finally:
        src.execute("COMMIT")
    dst.commit()
    return report
