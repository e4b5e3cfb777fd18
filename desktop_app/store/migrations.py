"""Versioned SQL files in ``schema/``, applied explicitly, recorded in a ledger.

The engine never creates tables on import or on open. ``flowdesk db apply``
(:func:`apply`) runs each ``schema/<component>/*.sql`` file not yet applied,
in component order (core, events, domain) then file-name order, each in its
own transaction together with its ledger row (name and SHA-256 of the file).

Two dialects, one ledger discipline. Every function takes either an apsw
``Connection`` (SQLite: the tree ``schema/``, ``BEGIN IMMEDIATE`` per file) or
a psycopg ``Connection`` (PostgreSQL: the tree ``schema/postgres/`` with the
same file names, everything inside the PostgreSQL schema ``flowdesk``; each
file runs in its own transaction holding ``pg_advisory_xact_lock``, and the
ledger is re-read under the lock, so two machines running ``db apply`` at
once serialise instead of both applying). psycopg is imported only when a
PostgreSQL connection is passed. :func:`verify` is what the engine calls on open: it
refuses a missing schema, a file edited since it was applied, and a ledger
naming files this version of Flowdesk does not ship (a newer schema), each
with an error that says what to run.

The SQL ships inside the wheel as ``desktop_app/schema`` (hatch
``force-include``) and the PyInstaller bundle; from a source checkout it is
read from the repository's ``schema/`` folder.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import apsw

from desktop_app.errors import (
    SchemaChecksumError,
    SchemaMissingDiskFullError,
    SchemaMissingError,
    SchemaRecordsLostError,
    SchemaTooNewError,
    StoreError,
    redact,
)
from desktop_app.store.connection import translate
from desktop_app.textsafe import shell_quote
from desktop_app.words import plural

COMPONENTS: tuple[str, ...] = ("core", "events", "domain")
#: free space (bytes) under which a database lacking schema files is told as
#: on a full disk: every file applied writes a few pages to the ``-wal``, and
#: the whole schema takes under 1 MiB
SCHEMA_SPACE_BYTES = 2**20
LEDGER = "flowdesk_schema_ledger"
FileState = Literal["applied", "pending", "edited", "unknown"]
Dialect = Literal["sqlite", "postgres"]
#: The PostgreSQL schema (namespace) holding every Flowdesk table.
PG_SCHEMA = "flowdesk"
#: ``pg_advisory_xact_lock`` key serialising schema appliers ("flowdesk" in ASCII).
PG_APPLY_LOCK = 0x666C6F776465736B
#: How long a PostgreSQL applier waits for another applier's lock before failing.
PG_LOCK_TIMEOUT = "60s"


@dataclass(frozen=True)
class SchemaFile:
    """One SQL file: ``component/name`` with its text and SHA-256 checksum."""

    component: str
    name: str
    sql: str

    @property
    def key(self) -> str:
        return f"{self.component}/{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SchemaStatus:
    """Where one schema file stands in a database."""

    key: str
    state: FileState
    applied_at: float | None


def schema_root() -> Traversable:
    """The folder holding ``core/``, ``events/``, ``domain/``."""
    packaged = resources.files("desktop_app").joinpath("schema")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "schema"
    if checkout.is_dir():
        return checkout
    raise SchemaMissingError(
        "the schema files are not installed with Flowdesk (no desktop_app/schema); reinstall it."
    )


def dialect_of(conn: Any) -> Dialect:
    """``"sqlite"`` for an apsw connection, ``"postgres"`` for a psycopg one.

    Raises:
        TypeError: any other object.
    """
    if isinstance(conn, apsw.Connection):
        return "sqlite"
    if type(conn).__module__.split(".")[0] in ("psycopg", "psycopg_pool"):
        return "postgres"
    raise TypeError(f"not an apsw or psycopg connection: {type(conn).__name__}")


def schema_files(root: Traversable | None = None, dialect: Dialect = "sqlite") -> list[SchemaFile]:
    """Every shipped schema file of ``dialect``, in the order they are applied.

    SQLite files live in ``<root>/<component>/``, PostgreSQL files in
    ``<root>/postgres/<component>/`` under the same names (so ledger keys match).
    """
    base = root if root is not None else schema_root()
    if dialect == "postgres":
        base = base.joinpath("postgres")
    out: list[SchemaFile] = []
    for component in COMPONENTS:
        folder = base.joinpath(component)
        if not folder.is_dir():
            continue
        names = sorted(f.name for f in folder.iterdir() if f.name.endswith(".sql"))
        for name in names:
            out.append(SchemaFile(component, name, folder.joinpath(name).read_text("utf-8")))
    return out


def _ledger(conn: Any, db: str) -> dict[str, tuple[str, float]]:
    if dialect_of(conn) == "postgres":
        return _pg_ledger(conn)
    exists = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?", (LEDGER,)
    ).fetchall()
    if not exists:
        if conn.execute(
            "SELECT 1 FROM sqlite_schema WHERE type='table' AND name='runs'"
        ).fetchall():
            raise SchemaRecordsLostError(
                f"the database{f' {db}' if db else ''} holds Flowdesk's tables but not its "
                f"record of the schema applied (table {LEDGER}): it was dropped outside "
                "Flowdesk, and `db apply` cannot tell what is applied. Restore the file from "
                "a backup (stop every Flowdesk process using it first); nothing was changed"
            )
        return {}
    rows = conn.execute(f"SELECT component, name, checksum, applied_at FROM {LEDGER}")
    return {f"{c}/{n}": (str(s), float(a)) for c, n, s, a in rows}


def _pg_ledger(conn: Any) -> dict[str, tuple[str, float]]:
    """The ledger's rows on PostgreSQL, ``{}`` before the schema exists. A
    refused privilege here is on a schema that exists (``to_regclass`` of a
    missing one is NULL), whose error names the grants, not a ``--db``."""
    import psycopg

    try:
        with conn.transaction():
            row = conn.execute("SELECT to_regclass(%s)", (f"{PG_SCHEMA}.{LEDGER}",)).fetchone()
            if row is None or row[0] is None:
                return {}
            rows = conn.execute(
                "SELECT component, name, checksum, extract(epoch from applied_at)::float8 "
                f"FROM {PG_SCHEMA}.{LEDGER}"
            ).fetchall()
    except psycopg.Error as exc:
        raise _pg_error(exc, conn) from exc
    return {f"{c}/{n}": (str(s), float(a)) for c, n, s, a in rows}


#: What a role that only runs Flowdesk (workers, the app, the CLI) needs on
#: the schema once the owner applied it (``{role}``: the role's name).
PG_WORKER_GRANTS = (
    f"GRANT USAGE ON SCHEMA {PG_SCHEMA} TO {{role}}; "
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {PG_SCHEMA} TO {{role}}"
)


def _pg_error(exc: Exception, conn: Any = None, db: str = "") -> StoreError:
    """A StoreError for a failed PostgreSQL schema statement (SQLSTATE, not
    message text). A refused privilege (42501) is told as it is: with
    ``conn``, whether Flowdesk's schema already exists (then the role lacks
    privileges on it: the grants it needs) or not (then it may not create
    it: the ``db apply`` to run, with ``--db`` when ``db`` names the database)."""
    code = getattr(exc, "sqlstate", None)
    if code == "42501" and conn is not None:
        return _pg_privilege_error(exc, conn, db)
    if code == "55P03":
        return StoreError(
            f"another `flowdesk db apply` held the schema lock for more than {PG_LOCK_TIMEOUT}; "
            "nothing was applied by this one. Wait for it to finish and run it again."
        )
    if code == "42501":
        return StoreError(
            "the PostgreSQL role lacks the privilege to create Flowdesk's schema "
            f"({PG_SCHEMA}); nothing was applied. Run `flowdesk db apply` as the database owner."
        )
    return StoreError(f"PostgreSQL error applying the schema (SQLSTATE {code}): {exc}")


def _pg_privilege_error(exc: Exception, conn: Any, db: str) -> StoreError:
    try:  # pg_namespace and current_user are readable by any role
        with conn.transaction():
            row = conn.execute(
                "SELECT current_user, EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)",
                (PG_SCHEMA,),
            ).fetchone()
    except Exception:  # the connection itself failed: say what PostgreSQL said
        return StoreError(f"PostgreSQL refused the role a privilege: {exc}")
    role, exists = str(row[0]), bool(row[1])
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else "permission denied"
    quoted = '"' + role.replace('"', '""') + '"'
    if exists:
        return StoreError(
            f"Flowdesk's schema ({PG_SCHEMA}) exists in this database, but the PostgreSQL "
            f"role {role} lacks privileges on it ({said}); nothing was changed. The "
            "database owner grants what a role running Flowdesk needs: "
            f"{PG_WORKER_GRANTS.format(role=quoted)};"
        )
    runnable = redact(db, mask=None)
    target = f" --db {shell_quote(runnable)}" if db else ""
    return StoreError(
        f"the PostgreSQL role {role} may not create Flowdesk's schema ({PG_SCHEMA}) in this "
        f"database ({said}); nothing was applied. The database owner applies it (with their "
        f"role in the URL), or grants this role CREATE on the database (GRANT CREATE ON "
        f"DATABASE ... TO {quoted};) and it runs `flowdesk{target} db apply`."
    )


def status(
    conn: Any, files: Iterable[SchemaFile] | None = None, db: str = ""
) -> list[SchemaStatus]:
    """State of every shipped file plus any unknown ledger entries.

    ``conn`` is an apsw or psycopg connection (see :func:`dialect_of`);
    ``db`` names the database in a printed command (a URL's password left out).

    Raises:
        StoreError: PostgreSQL refused the role (its message says whether
            the schema exists and what to grant or run).
    """
    if files is None:
        files = schema_files(dialect=dialect_of(conn))
    try:
        ledger = _ledger(conn, db)
    except apsw.Error as exc:
        raise translate(exc, conn.filename or None) from exc
    shipped = list(files) if files is not None else schema_files()
    out: list[SchemaStatus] = []
    for f in shipped:
        entry = ledger.pop(f.key, None)
        if entry is None:
            out.append(SchemaStatus(f.key, "pending", None))
        elif entry[0] != f.checksum:
            out.append(SchemaStatus(f.key, "edited", entry[1]))
        else:
            out.append(SchemaStatus(f.key, "applied", entry[1]))
    out.extend(SchemaStatus(k, "unknown", at) for k, (_, at) in sorted(ledger.items()))
    return out


def _raise_for(statuses: list[SchemaStatus], db_hint: str) -> None:
    edited = [s.key for s in statuses if s.state == "edited"]
    if edited:
        one = len(edited) == 1
        raise SchemaChecksumError(
            f"schema {'file' if one else 'files'} {', '.join(edited)} changed since "
            f"{'it was' if one else 'they were'} applied to this "
            "database; Flowdesk will not guess. Restore the original files, or add a new "
            "numbered migration instead of editing an applied one."
        )
    unknown = [s.key for s in statuses if s.state == "unknown"]
    if unknown:
        raise SchemaTooNewError(
            f"this database has schema {', '.join(unknown)} that this version of Flowdesk "
            "does not know: it was written by a newer Flowdesk. Upgrade Flowdesk."
        )


def verify(conn: Any, files: Iterable[SchemaFile] | None = None, db: str = "") -> None:
    """Refuse to run on a database whose schema is missing, edited or newer.

    Raises:
        SchemaMissingError: names ``flowdesk db apply`` (with ``--db`` when
            ``db`` names the database: quoted, a URL's password left out).
        SchemaChecksumError: an applied file was edited.
        SchemaTooNewError: the ledger names files this code does not ship.
    """
    statuses = status(conn, files, db)
    _raise_for(statuses, db)
    pending = [s.key for s in statuses if s.state == "pending"]
    if pending:
        missing = schema_missing(pending, db, len(statuses))
        full = _disk_full(conn, pending, db, len(statuses))
        raise missing if full is None else full


def _disk_full(
    conn: Any, pending: Sequence[str], db: str, shipped: int
) -> SchemaMissingDiskFullError | None:
    """The error for schema files ``pending`` on a SQLite file whose disk is
    full (less than :data:`SCHEMA_SPACE_BYTES` free for this user): a ``db
    apply`` would stop as the last one did. ``None`` when the disk has room,
    for PostgreSQL, or when its free space cannot be read."""
    if dialect_of(conn) != "sqlite" or not conn.filename:
        return None
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(conn.filename)))
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free >= SCHEMA_SPACE_BYTES:
        return None
    runnable = redact(db, mask=None)
    target = f" --db {shell_quote(runnable)}" if db else ""
    return SchemaMissingDiskFullError(
        _missing(pending, shipped), str(conn.filename), free, f"flowdesk{target} db apply"
    )


def schema_missing(
    pending: Sequence[str], db: str = "", shipped: int | None = None
) -> SchemaMissingError:
    """The error for a database lacking schema files ``pending`` (their
    keys, ``core/0001_runs_checkpoints.sql``...) of the ``shipped`` ones
    (default: all of them pending): it names ``flowdesk db apply``, with
    ``--db`` when ``db`` names the database (quoted, a URL's password left
    out)."""
    # a command that runs as printed: quoted, a URL's password left out (never shown)
    runnable = redact(db, mask=None)
    target = f" --db {shell_quote(runnable)}" if db else ""
    where = " (libpq reads the password from PGPASSWORD or ~/.pgpass)" if runnable != db else ""
    return SchemaMissingError(
        f"{_missing(pending, len(pending) if shipped is None else shipped)}; "
        f"run `flowdesk{target} db apply` to apply it{where}."
    )


def _missing(pending: Sequence[str], shipped: int) -> str:
    """What is missing, briefly: no schema at all, the few files by name, or
    how many of how many (the first and last named)."""
    if len(pending) >= shipped:
        files = plural(shipped, "schema file")
        return f"the database has no Flowdesk schema yet ({files} to apply)"
    if len(pending) <= 3:
        return f"the database is missing schema {', '.join(pending)}"
    return (
        f"the database is missing {len(pending)} of Flowdesk's {shipped} schema files "
        f"({pending[0]} to {pending[-1]})"
    )


def _pg_lock(conn: Any) -> None:
    conn.execute(f"SET LOCAL lock_timeout = '{PG_LOCK_TIMEOUT}'")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_APPLY_LOCK,))
    conn.execute(f"SET LOCAL search_path = {PG_SCHEMA}")


def _pg_apply(conn: Any, files: Iterable[SchemaFile] | None, db: str) -> list[SchemaFile]:
    import psycopg

    shipped = list(files) if files is not None else schema_files(dialect="postgres")
    statuses = status(conn, shipped, db)
    _raise_for(statuses, "")
    if not any(s.state == "pending" for s in statuses):
        return []  # all applied: no DDL (a role without CREATE may ask too)
    applied: list[SchemaFile] = []
    try:
        with conn.transaction():
            _pg_lock(conn)
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {PG_SCHEMA}.{LEDGER} ("
                "component text NOT NULL, name text NOT NULL, checksum text NOT NULL, "
                "applied_at timestamptz NOT NULL, PRIMARY KEY (component, name))"
            )
        for f in shipped:
            with conn.transaction():
                _pg_lock(conn)
                # Re-read under the lock: another applier may have done this file.
                row = conn.execute(
                    f"SELECT checksum FROM {LEDGER} WHERE component=%s AND name=%s",
                    (f.component, f.name),
                ).fetchone()
                if row is not None:
                    if row[0] != f.checksum:
                        _raise_for([SchemaStatus(f.key, "edited", None)], "")
                    continue
                conn.execute(f.sql.encode("utf-8"))  # no parameters: several statements
                conn.execute(
                    f"INSERT INTO {LEDGER}(component, name, checksum, applied_at) "
                    "VALUES (%s, %s, %s, now())",
                    (f.component, f.name, f.checksum),
                )
            applied.append(f)
    except psycopg.Error as exc:
        raise _pg_error(exc, conn, db) from exc
    return applied


@functools.cache
def _shipped_objects() -> tuple[frozenset[tuple[str, str]], dict[str, tuple[str, ...]]]:
    """``(type, name)`` of every table, index, trigger and view the shipped
    SQLite schema files create, and each table's columns, as applied to an
    empty in-memory database."""
    conn = apsw.Connection(":memory:")
    try:
        apply(conn)
        return _objects(conn), _columns(conn)
    finally:
        conn.close()


def dropped_table(message: str) -> str | None:
    """The Flowdesk table a database error ``message`` says does not exist
    (SQLite's ``no such table: main.waits``, PostgreSQL's ``relation
    "flowdesk.waits" does not exist``): ``"waits"``; ``None`` when the
    message names no table, or one the shipped schema does not create (a
    step's own SQL on a table of its own)."""
    m = re.search(
        r'no such table: (?:\w+\.)?(\w+)|relation "(?:\w+\.)?(\w+)" does not exist', message
    )
    if m is None:
        return None
    name = m.group(1) or m.group(2)
    tables = {n for kind, n in _shipped_objects()[0] if kind == "table"}
    return name if name in tables else None


def _objects(conn: Any) -> frozenset[tuple[str, str]]:
    rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    return frozenset((str(kind), str(name)) for kind, name in rows)


def _columns(conn: Any) -> dict[str, tuple[str, ...]]:
    tables = [str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {
        t: tuple(str(row[1]) for row in conn.execute("SELECT * FROM pragma_table_info(?)", (t,)))
        for t in tables
    }


def missing_objects(conn: Any) -> list[str]:
    """What the applied schema created that the SQLite database behind
    ``conn`` lacks now (``["column digest_files.kind", "index waits_run",
    "table waits"]``, sorted): dropped by hand or by a program outside
    Flowdesk, which ``db apply`` does not create again (its ledger says
    every file was applied). Empty when nothing is missing, or when a
    schema file is not applied yet (``status`` reports that).

    Raises:
        SchemaRecordsLostError: the ledger itself was dropped.
    """
    if any(s.state != "applied" for s in status(conn)):
        return []
    shipped, columns = _shipped_objects()
    lost = [f"{kind} {name}" for kind, name in shipped - _objects(conn)]
    have = _columns(conn)
    for table, wanted in columns.items():
        if table in have:
            lost += [f"column {table}.{c}" for c in wanted if c not in have[table]]
    return sorted(lost)


#: The schema :func:`pg_missing_objects` builds the shipped files in, inside
#: a transaction it rolls back (so never seen by another session).
PG_PROBE_SCHEMA = "flowdesk_doctor_probe"


def pg_missing_objects(conn: Any) -> list[str]:
    """What the applied schema created that the PostgreSQL database behind
    ``conn`` (a psycopg connection in autocommit mode) lacks now, as
    :func:`missing_objects` says it for SQLite (``["column runs.tenant_id",
    "function flowdesk_now", "table waits"]``, sorted). The shipped files
    are applied to :data:`PG_PROBE_SCHEMA` in a transaction that is rolled
    back, and its tables, columns, indexes, functions, triggers and
    constraints (``constraint TABLE.NAME``: a foreign key a ``DROP TABLE
    ... CASCADE`` took from another table) are compared with those of the
    ``flowdesk`` schema: nothing is left on the server. Empty when nothing
    is missing, or when a schema file is not applied yet (``status``
    reports that).

    Raises:
        psycopg.Error: the role may not create a schema in the database
            (``CREATE`` on it), or the server is a read-only standby.
    """
    if any(s.state != "applied" for s in status(conn)):
        return []
    with conn.transaction(force_rollback=True):
        conn.execute(f"SET LOCAL lock_timeout = '{PG_LOCK_TIMEOUT}'")
        conn.execute(f"CREATE SCHEMA {PG_PROBE_SCHEMA}")
        conn.execute(f"SET LOCAL search_path = {PG_PROBE_SCHEMA}")
        for f in schema_files(dialect="postgres"):
            conn.execute(f.sql.encode("utf-8"))
        shipped = _pg_objects(conn, PG_PROBE_SCHEMA)
        have = _pg_objects(conn, PG_SCHEMA)
    lost = shipped - have
    gone = {name.split(" ", 1)[1] for name in lost if name.startswith("table ")}

    def with_its_table(name: str) -> bool:
        """A column or constraint of a dropped table: the table says it (as on SQLite)."""
        kind, _, what = name.partition(" ")
        return kind in ("column", "constraint") and what.split(".")[0] in gone

    # a constraint another table lost with it (DROP TABLE ... CASCADE) is named
    return sorted(n for n in lost if not with_its_table(n))


def _pg_objects(conn: Any, schema: str) -> frozenset[str]:
    """``"table runs"``, ``"column runs.tenant_id"``, ``"index waits_run"``,
    ``"function flowdesk_now"``, ``"trigger …"``: the objects in ``schema``."""
    rows = conn.execute(
        "SELECT CASE c.relkind WHEN 'i' THEN 'index' WHEN 'v' THEN 'view' ELSE 'table' END "
        "|| ' ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %(s)s AND c.relkind IN ('r', 'p', 'i', 'v') "
        "UNION ALL SELECT 'column ' || table_name || '.' || column_name "
        "FROM information_schema.columns WHERE table_schema = %(s)s "
        "UNION ALL SELECT 'function ' || p.proname FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s "
        "UNION ALL SELECT 'trigger ' || t.tgname FROM pg_trigger t JOIN pg_class c "
        "ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %(s)s AND NOT t.tgisinternal "
        "UNION ALL SELECT 'constraint ' || c.relname || '.' || con.conname "
        "FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s",
        {"s": schema},
    ).fetchall()
    return frozenset(str(r[0]) for r in rows)


def apply(conn: Any, files: Iterable[SchemaFile] | None = None, db: str = "") -> list[SchemaFile]:
    """Apply every pending schema file; returns the files applied (maybe none).

    Each file and its ledger row commit in one transaction (``BEGIN
    IMMEDIATE`` on SQLite; on PostgreSQL under ``pg_advisory_xact_lock``, so
    a concurrent applier waits and then finds the file applied).

    Raises:
        SchemaChecksumError / SchemaTooNewError: as :func:`verify`; nothing applied.
        StoreError: the SQL failed; that file's transaction rolled back (a
            refused privilege says whether the schema exists; ``db`` names
            the database in the command it prints).
    """
    if dialect_of(conn) == "postgres":
        return _pg_apply(conn, files, db)
    shipped = list(files) if files is not None else schema_files()
    statuses = status(conn, shipped)
    _raise_for(statuses, "")
    pending = {s.key for s in statuses if s.state == "pending"}
    applied: list[SchemaFile] = []
    # SQLite's procedure for rebuilding a table (lang_altertable.html, "Making
    # Other Kinds Of Table Schema Changes"): foreign keys off while a file
    # drops and renames tables (with them on, dropping `runs` would delete
    # every row that references it), then `foreign_key_check` before commit.
    # The pragma is a no-op inside a transaction, so it is set around them.
    enforced = bool(conn.execute("PRAGMA foreign_keys").fetchall()[0][0])
    try:
        if enforced and pending:
            conn.execute("PRAGMA foreign_keys=OFF")
        with conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {LEDGER} ("
                "component TEXT NOT NULL, name TEXT NOT NULL, checksum TEXT NOT NULL, "
                "applied_at REAL NOT NULL, PRIMARY KEY (component, name))"
            )
        for f in shipped:
            if f.key not in pending:
                continue
            with conn:
                # stepped to the end: apsw stops a multi-statement string at the
                # first statement that returns a row (``PRAGMA incremental_vacuum``
                # returns one per page it frees) and would skip the rest
                conn.execute(f.sql).fetchall()
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    table, rowid, parent, _ = broken[0]
                    raise StoreError(
                        f"schema file {f.key} left {plural(len(broken), 'row')} whose foreign key "
                        f"points nowhere (first: {table} row {rowid} -> {parent}); "
                        "nothing of it was applied"
                    )
                conn.execute(
                    f"INSERT INTO {LEDGER}(component, name, checksum, applied_at) VALUES (?,?,?,?)",
                    (f.component, f.name, f.checksum, time.time()),
                )
            applied.append(f)
    except apsw.Error as exc:
        raise translate(exc, conn.filename or None) from exc
    finally:
        if enforced and pending:
            conn.execute("PRAGMA foreign_keys=ON")
    return applied
