"""``flowdesk export``: runs, checkpoints and domain tables to JSON or CSV.

Runs as its own process (``python -m desktop_app.export``) with sqlite-utils,
which uses the standard library's ``sqlite3``; it never imports apsw or the
engine, so two SQLite libraries never share a process. It only
reads: the database is opened read-only (``mode=ro`` URI).

Times (every ``*_at`` column, stored as UTC epoch seconds) are written as
ISO-8601 UTC strings (``2026-12-01T11:25:43.120Z``). Every file written is
created mode 0600 (it holds user data); the output folder, when created
here, is 0700.

On PostgreSQL (DB is a ``postgresql://`` URL) each table is read with
``COPY (SELECT …) TO STDOUT`` through psycopg, in one read-only snapshot,
with times formatted the same way by the server, so both backends export
the same shape.

Only the runs of one scope are written (``--scope``, default ``default``,
as ``flowdesk runs`` lists them): a table with a ``scope`` column is
filtered on it, one with a ``run_id`` column on the runs (flow and agent) of
that scope; any other table is written whole.

The runs are the ones ``flowdesk runs`` lists: flow runs (``runs``),
agent runs, Pydantic AI's included (``agent_runs``), and LangGraph threads
(``langgraph_threads``: their rows, not LangGraph's serialized checkpoints).

One folder holds one export, never a mix of two. Each export writes a
manifest, ``flowdesk-export.json`` (0600), naming its source (the file's
absolute path, or the URL without its password), scope, format and tables;
on PostgreSQL also ``source_id``, the database as the server names it (its
cluster's system identifier and the database's name, :func:`pg_source_id`),
so URLs that reach one database differently (``localhost`` or
``127.0.0.1``, a socket, another user) are one source.
Before anything is written (exit 2), a folder is refused that holds files of
the other format (``runs.csv`` when writing JSON), the manifest of another
source or scope, or ``*.json``/``*.csv`` files without a manifest (an export
that cannot be told apart from another). An export of the same source and
scope replaces its files, and its manifest lists every table the folder
holds. The folder is locked (``flock``) while an export checks and writes
it, so two exports into one folder never interleave.

Nothing is left half-written: each table goes to a hidden temporary file in
the output folder (``.runs.json.partial-PID``), and the files take their
names only once every table was read. A database that cannot be read to the
end (a damaged page: ``database disk image is malformed``; a server gone)
leaves the folder as it was, and a folder made for this export is removed
again (exit 1). The SQLite file is read with ``cell_size_check`` on, so a
damaged page is reported instead of read as holding no rows.

Usage: python -m desktop_app.export DB OUT_DIR [--format json|csv] [--scope NAME] [--table NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import fcntl
import json
import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import sqlite_utils

from desktop_app.private import make_private_dirs
from desktop_app.words import listing, plural

if TYPE_CHECKING:
    import psycopg

#: Exported by default: run metadata, checkpoints, waits/signals/outbox,
#: agent runs, and every domain table of the built-in flows that exists.
DEFAULT_TABLES = (
    "runs",
    "checkpoints",
    "waits",
    "signals",
    "events",
    "outbox",
    "agent_runs",
    "agent_messages",
    "agent_tool_results",
    "langgraph_threads",
    "digest_files",
    "tidy_moves",
    "tidy_undos",
)


#: SQLite's storage keys (schema core/0011), not data: left out, so a file's
#: export has the columns a PostgreSQL database's export has
STORAGE_KEYS = {"runs": "run_key", "checkpoints": "ckey"}


def iso_time(value: Any) -> Any:
    """UTC epoch seconds → ISO-8601 UTC (``...Z``, milliseconds); other values unchanged."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value, UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return value


#: The manifest every export writes into its folder (module docstring).
MANIFEST = "flowdesk-export.json"


def _with_iso_times(row: dict[str, Any]) -> dict[str, Any]:
    return {k: iso_time(v) if k.endswith("_at") else v for k, v in row.items()}


@contextmanager
def _private(path: Path) -> Iterator[IO[str]]:
    """Open ``path`` for writing, created (or reset to) mode 0600 before any byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
        yield fh


class _Staged:
    """The files of one export, written under temporary names in ``out``
    and renamed into place by :meth:`publish`; :meth:`discard` removes them
    (and ``out`` itself when this export created it)."""

    def __init__(self, out: Path, fmt: str, created: bool) -> None:
        self.out, self.fmt, self.created = out, fmt, created
        self.files: list[tuple[Path, Path]] = []

    def open(self, name: str) -> contextlib.AbstractContextManager[IO[str]]:
        """A 0600 temporary file for table ``name``."""
        final = self.out / f"{name}.{self.fmt}"
        temp = self.out / f".{final.name}.partial-{os.getpid()}"
        self.files.append((temp, final))
        return _private(temp)

    def manifest(self, content: dict[str, Any]) -> None:
        """Write :data:`MANIFEST` (0600) with ``content``, published first."""
        final = self.out / MANIFEST
        temp = self.out / f".{MANIFEST}.partial-{os.getpid()}"
        self.files.insert(0, (temp, final))
        with _private(temp) as fh:
            fh.write(json.dumps(content, ensure_ascii=False, indent=1))

    def publish(self) -> None:
        for temp, final in self.files:
            os.replace(temp, final)

    def discard(self) -> None:
        for temp, _ in self.files:
            temp.unlink(missing_ok=True)
        if self.created:
            with contextlib.suppress(OSError):  # holds something else meanwhile: keep it
                self.out.rmdir()


@contextmanager
def _staged(
    out: Path, fmt: str, source: str, scope: str, source_id: str | None = None
) -> Iterator[_Staged]:
    """Create ``out`` (:func:`make_out`), lock it, check it again under the
    lock (:func:`check_out`: another export may have written it meanwhile)
    and yield a :class:`_Staged`: its files are published when the body
    returns, discarded when it raises."""
    created = not out.exists()
    make_out(out)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one export at a time checks and writes a folder
        staged = _Staged(out, fmt, created)
        try:
            check_out(out, fmt, source, scope, source_id)
            yield staged
        except BaseException:
            staged.discard()
            raise
        staged.publish()
    finally:
        os.close(fd)


class MixedFormatsError(Exception):
    """The output folder holds files of the other format, or of another
    export (another source or scope, or no manifest): exit 2."""


class UnknownTableError(Exception):
    """A ``--table`` the database does not have (exit 2, nothing written)."""


class OutputFolderError(Exception):
    """``--out`` cannot be the export's folder: a file, or a folder that cannot
    be created or written (exit 2, nothing written)."""


class NoFlowdeskTablesError(Exception):
    """Asked for every table, the database holds none of Flowdesk's (its
    schema dropped, or never applied): nothing written (exit 1)."""


def _wanted(tables: list[str] | None, present: Iterable[str], where: str) -> list[str]:
    """The tables to export: ``tables`` when given, else Flowdesk's that are
    ``present``.

    Raises:
        UnknownTableError: a table of ``tables`` is not ``present``.
        NoFlowdeskTablesError: none given, and none of Flowdesk's is present.
    """
    have = set(present)
    if tables:
        missing = [t for t in tables if t not in have]
        if missing:
            raise _no_tables(missing, where, have)
        return tables
    wanted = [t for t in DEFAULT_TABLES if t in have]
    if not wanted:
        raise NoFlowdeskTablesError(
            f"{where} holds none of Flowdesk's tables (its schema was dropped, or never "
            "applied); nothing was written"
        )
    return wanted


def _no_tables(missing: list[str], where: str, present: Iterable[str]) -> UnknownTableError:
    return UnknownTableError(
        f"no table {', '.join(missing)} in {where}; its tables: {', '.join(sorted(present))}"
    )


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The manifest of the export in ``out`` (:data:`MANIFEST`), or ``None``
    when it has none; one that is not a JSON object counts as none."""
    try:
        content = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def check_out(
    out: Path, fmt: str, source: str = "", scope: str = "default", source_id: str | None = None
) -> None:
    """Refuse an output folder that holds another export (module docstring):
    ``source`` and ``scope`` are this export's (the source as
    :func:`source_of` gives it); ``source_id``, a PostgreSQL source's
    identity (:func:`pg_source_id`): when both it and the folder's manifest
    have one, they decide whether the sources are one, not the URLs' text.

    Raises:
        OutputFolderError: ``out`` is a file.
        MixedFormatsError: ``out`` holds ``*.csv`` files and ``fmt`` is
            ``json``, or ``*.json`` and ``csv``; or the manifest of another
            source or scope; or ``*.json``/``*.csv`` files and no manifest.
            The message says what to do.
    """
    if out.exists() and not out.is_dir():
        raise OutputFolderError(
            f"{out} is a file, not a folder; nothing was written: give --out a new folder "
            "(or one holding an earlier export of the same database and scope)"
        )
    if not out.is_dir():
        return
    other = "csv" if fmt == "json" else "json"
    found = sorted(p.name for p in out.glob(f"*.{other}") if p.name != MANIFEST)
    if found:
        raise MixedFormatsError(
            f"{out} holds an export in {other} ({_shown(found)}); nothing was written, so that "
            "one folder never mixes two formats: export to an empty folder, or remove those "
            "files first"
        )
    manifest = read_manifest(out)
    if manifest is None:
        files = sorted(
            p.name
            for p in out.iterdir()
            if p.suffix in (".json", ".csv") and not p.name.startswith(".")
        )
        if files:
            raise MixedFormatsError(
                f"{out} holds {_shown(files)} and no {MANIFEST} saying which database and "
                "scope they were exported from; nothing was written, so that one folder never "
                "mixes two exports: export to an empty folder, or remove those files first"
            )
        return
    theirs = (manifest.get("source"), manifest.get("scope"))
    their_id = manifest.get("source_id")
    same = (
        their_id == source_id
        if source_id is not None and isinstance(their_id, str)
        else theirs[0] == source
    )
    if not same or theirs[1] != scope:
        raise MixedFormatsError(
            f"{out} holds the export of {theirs[0]} (scope {theirs[1]!r}; its {MANIFEST}), "
            f"not of {source} (scope {scope!r}); nothing was written, so that one folder "
            "never mixes two exports: export to an empty folder, or remove that export first"
        )


def source_of(db: str | os.PathLike[str]) -> str:
    """What a manifest names as an export's source: a file's absolute path
    (symbolic links resolved), a ``postgresql://`` URL without its password."""
    text = os.fspath(db)
    if is_postgres_url(text):
        from desktop_app.errors import redact

        return redact(text, mask=None)
    return os.path.realpath(text)


def pg_source_id(conn: psycopg.Connection[Any]) -> str:
    """The PostgreSQL database ``conn`` reads, as the server names it,
    whatever URL reached it: ``system S, database D``, ``S`` the cluster's
    system identifier (``pg_control_system()``, set at ``initdb``), ``D``
    the database's name. A role the server denies ``pg_control_system()``
    gets ``server ADDR:PORT, database D`` instead (the server's own address,
    ``local`` over a socket): it says which it is, and the manifest keeps it.

    Raises:
        psycopg.Error: the server cannot be read.
    """
    row = conn.execute(
        "SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE'), "
        "current_database(), coalesce(host(inet_server_addr()), 'local'), inet_server_port()"
    ).fetchone()
    assert row is not None
    allowed, database, addr, port = row
    if allowed:
        ident = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
        assert ident is not None
        return f"system {ident[0]}, database {database}"
    return f"server {addr}:{port}, database {database}"


def _manifest(
    out: Path, source: str, scope: str, fmt: str, wanted: list[str], source_id: str | None = None
) -> dict[str, Any]:
    """This export's manifest: the folder's tables are its own and those of
    the earlier export of the same source and scope it adds to; a
    PostgreSQL source's ``source_id`` (:func:`pg_source_id`)."""
    earlier = read_manifest(out) or {}
    tables = set(wanted) | {t for t in earlier.get("tables", []) if isinstance(t, str)}
    manifest: dict[str, Any] = {"flowdesk_export": 1, "source": source}
    if source_id is not None:
        manifest["source_id"] = source_id
    return {
        **manifest,
        "scope": scope,
        "format": fmt,
        "tables": sorted(tables),
        "written_at": iso_time(datetime.now(UTC).timestamp()),
    }


def make_out(out: Path) -> None:
    """Create the output folder ``out`` (0700, with its parents) unless it
    exists, and check that files can be created in it.

    Raises:
        OutputFolderError: it cannot be created (no such parent, read-only
            file system, no permission) or written; nothing was written.
    """
    try:
        make_private_dirs(out)
    except OSError as exc:
        raise OutputFolderError(
            f"cannot create the folder {out} ({exc.strerror or exc}); nothing was written: "
            "give --out a folder you can create and write"
        ) from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputFolderError(
            f"cannot write in the folder {out} (permission denied); nothing was written: "
            "give --out a folder you can create and write"
        )


def _scope_filter(
    columns: set[str], present: set[str], *, schema: str = "", value: str = "?"
) -> tuple[str, int]:
    """``(WHERE condition, times the scope is bound)`` keeping a table's rows
    of one scope, from its ``columns`` and the tables ``present``; ``("", 0)``
    for a table with neither ``scope`` nor ``run_id``. ``schema`` qualifies
    the ``runs``/``agent_runs`` it reads (``"flowdesk."``); ``value`` stands
    for the scope (a ``?`` to bind, or a quoted literal where COPY takes no
    parameters)."""
    if "scope" in columns:
        return f"scope = {value}", 1
    if "run_id" in columns:
        owners = [t for t in ("runs", "agent_runs") if t in present]
        union = " UNION ".join(
            f"SELECT run_id FROM {schema}{t} WHERE scope = {value}" for t in owners
        )
        return (f"run_id IN ({union})", len(owners)) if owners else ("", 0)
    return "", 0


def export(
    db: Path, out: Path, fmt: str, tables: list[str] | None = None, scope: str = "default"
) -> dict[str, int]:
    """Write one file per table (mode 0600, times as ISO-8601 UTC), only the
    rows of the runs of ``scope``; returns rows written per table. The files
    appear together once every table was read (module docstring).

    Raises:
        UnknownTableError: a requested table does not exist (nothing written).
        NoFlowdeskTablesError: no table asked for, and none of Flowdesk's
            exists (nothing written).
        MixedFormatsError: ``out`` holds another export (:func:`check_out`).
        OutputFolderError: ``out`` is a file or cannot be created or written.
        sqlite3.DatabaseError: the file cannot be read (a damaged page:
            nothing was written, ``out`` is as it was).
    """
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA cell_size_check=ON")  # a damaged page is an error, not "no rows"
        database = sqlite_utils.Database(conn)
        present = set(database.table_names())
        wanted = _wanted(tables, present, str(db))
        source = source_of(db)
        check_out(out, fmt, source, scope)
        counts: dict[str, int] = {}
        with _staged(out, fmt, source, scope) as staged:
            staged.manifest(_manifest(out, source, scope, fmt, wanted))
            for name in wanted:
                hidden = STORAGE_KEYS.get(name, "")
                where, n = _scope_filter({c.name for c in database[name].columns}, present)
                found = database[name].rows_where(where or None, [scope] * n)
                rows = [_with_iso_times(r) for r in found]
                for r in rows:
                    r.pop(hidden, None)
                counts[name] = len(rows)
                if fmt == "json":
                    with staged.open(name) as fh:
                        fh.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str))
                else:
                    columns = [c.name for c in database[name].columns if c.name != hidden]
                    with staged.open(name) as fh:
                        writer = csv.DictWriter(fh, fieldnames=columns)
                        writer.writeheader()
                        writer.writerows(rows)
    finally:
        conn.close()
    return counts


def is_postgres_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


#: A timestamptz column as the SQLite export writes times (ISO-8601 UTC, milliseconds).
_PG_ISO = """to_char("{c}" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""


def export_postgres(
    url: str, out: Path, fmt: str, tables: list[str] | None = None, scope: str = "default"
) -> dict[str, int]:
    """Write one file per table of the PostgreSQL database at ``url`` (mode
    0600, times as ISO-8601 UTC), only the rows of the runs of ``scope``;
    returns rows written per table.

    Raises:
        UnknownTableError: a requested table does not exist (nothing written).
        NoFlowdeskTablesError: no table asked for, and none of Flowdesk's
            exists (nothing written).
        MixedFormatsError: ``out`` holds another export (:func:`check_out`).
        OutputFolderError: ``out`` is a file or cannot be created or written.
        psycopg.Error: the server cannot be read (nothing was written, ``out``
            is as it was).
    """
    from psycopg import sql

    from desktop_app.store.migrations import PG_SCHEMA
    from desktop_app.store.postgres.sql import connect

    counts: dict[str, int] = {}
    with connect(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, dtype in conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema=%s ORDER BY table_name, ordinal_position",
            (PG_SCHEMA,),
        ):
            columns.setdefault(table, []).append((column, dtype))
        wanted = _wanted(tables, columns, "the database")
        source, source_id = source_of(url), pg_source_id(conn)
        check_out(out, fmt, source, scope, source_id)
        literal = sql.Literal(scope).as_string(conn)  # COPY takes no bound parameters
        with _staged(out, fmt, source, scope, source_id) as staged:
            staged.manifest(_manifest(out, source, scope, fmt, wanted, source_id))
            _copy_tables(conn, columns, wanted, literal, fmt, staged, counts)
    return counts


def _copy_tables(
    conn: psycopg.Connection[Any],
    columns: dict[str, list[tuple[str, str]]],
    wanted: list[str],
    literal: str,
    fmt: str,
    staged: _Staged,
    counts: dict[str, int],
) -> None:
    """COPY each ``wanted`` table (its scope's rows) into ``staged``'s files."""
    import io

    from desktop_app.store.migrations import PG_SCHEMA

    for name in wanted:
        select = ", ".join(
            (_PG_ISO.format(c=c) if t == "timestamp with time zone" else f'"{c}"') + f' AS "{c}"'
            for c, t in columns[name]
        )
        inner = f'SELECT {select} FROM {PG_SCHEMA}."{name}"'
        where, _ = _scope_filter(
            {c for c, _ in columns[name]}, set(columns), schema=f"{PG_SCHEMA}.", value=literal
        )
        if where:
            inner += " WHERE " + where
        if fmt == "csv":
            query = f"COPY ({inner}) TO STDOUT (FORMAT csv, HEADER)"
        else:  # one JSON object per line; text COPY doubles each backslash
            query = f"COPY (SELECT row_to_json(t) FROM ({inner}) t) TO STDOUT"
        buf = io.BytesIO()
        with conn.cursor().copy(query) as copy:
            for chunk in copy:
                buf.write(chunk)
        text = buf.getvalue().decode("utf-8")
        if fmt == "csv":
            counts[name] = len(list(csv.reader(io.StringIO(text, newline="")))) - 1
            with staged.open(name) as fh:
                fh.write(text)
        else:
            rows = [json.loads(ln.replace("\\\\", "\\")) for ln in text.splitlines()]
            counts[name] = len(rows)
            with staged.open(name) as fh:
                fh.write(json.dumps(rows, ensure_ascii=False, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flowdesk export")
    p.add_argument("db", help="a database file or a postgresql:// URL")
    p.add_argument("out", type=Path)
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("--table", action="append", help="only this table (repeatable)")
    p.add_argument("--scope", default="default", help="only the runs of this scope")
    p.add_argument("--doctor", default="flowdesk doctor", help="the doctor command to print")
    args = p.parse_args(argv)
    try:
        return _main(args)
    except OSError as exc:  # writing the files: a full disk, a quota, an I/O error
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        print(
            f"flowdesk export: cannot write in {args.out}: "
            + (
                f"the disk holding it is full ({exc.strerror}); free space on it or give "
                "--out a folder on another disk"
                if full
                else f"{exc.strerror or exc}"
            )
            + "; nothing was written (the folder is as it was)",
            file=sys.stderr,
        )
        return 1


def _main(args: argparse.Namespace) -> int:
    """:func:`main` once its arguments are read; returns the exit status."""
    if is_postgres_url(args.db):
        import psycopg

        try:
            counts = export_postgres(args.db, args.out, args.format, args.table, args.scope)
        except psycopg.Error as exc:
            print(
                f"flowdesk export: cannot read the PostgreSQL database: {exc}; nothing was written",
                file=sys.stderr,
            )
            return 1
        except (MixedFormatsError, OutputFolderError, UnknownTableError) as exc:
            print(f"flowdesk export: {exc}", file=sys.stderr)
            return 2
        except NoFlowdeskTablesError as exc:
            print(f"flowdesk export: {exc}: `{args.doctor}` says what to do", file=sys.stderr)
            return 1
        _report(counts, args.out, args.scope)
        return _said_absent(counts, args)
    args.db = Path(args.db)
    if not args.db.is_file():
        print(f"flowdesk export: no database at {args.db}", file=sys.stderr)
        return 2
    try:
        counts = export(args.db, args.out, args.format, args.table, args.scope)
    except sqlite3.DatabaseError as exc:
        advice = (
            " (the file is corrupt: restore it from a backup)"
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT
            else ""
        )
        said = str(exc) if len(str(exc)) <= 200 else str(exc)[:200] + "…"  # may quote a row
        print(
            f"flowdesk export: cannot read {args.db}: {said}{advice}; nothing was written",
            file=sys.stderr,
        )
        return 1
    except (MixedFormatsError, OutputFolderError, UnknownTableError) as exc:
        print(f"flowdesk export: {exc}", file=sys.stderr)
        return 2
    except NoFlowdeskTablesError as exc:
        print(f"flowdesk export: {exc}: `{args.doctor}` says what to do", file=sys.stderr)
        return 1
    assert "apsw" not in sys.modules, "export must not load apsw"
    _report(counts, args.out, args.scope)
    return _said_absent(counts, args)


def _said_absent(counts: dict[str, int], args: argparse.Namespace) -> int:
    """The exit status of an export that wrote ``counts``: 1, said on
    stderr, when it was asked for every table (no ``--table``) and a table
    Flowdesk's schema creates is not in the database (dropped outside
    Flowdesk, or a schema not applied whole): the export holds the rest,
    and is not whole. A tryout: it left such a table out without a word."""
    absent = [t for t in DEFAULT_TABLES if t not in counts] if not args.table else []
    if not absent:
        return 0
    print(
        f"flowdesk export: the database has no table {', '.join(absent)}, which Flowdesk's "
        f"schema creates, so the export holds every other table and is not whole; "
        f"`{args.doctor}` says what is missing and what to do",
        file=sys.stderr,
    )
    return 1


#: the tables holding the runs ``flowdesk runs`` lists, and what each row is
RUN_TABLES = (
    ("runs", "flow run"),
    ("agent_runs", "agent run"),
    ("langgraph_threads", "LangGraph thread"),
)


def _report(counts: dict[str, int], out: Path, scope: str) -> None:
    for name, n in counts.items():
        print(f"{name}: {plural(n, 'row')}")
    print(f"written to {out} (the runs of scope {scope!r})")
    kinds = [plural(counts[t], one) for t, one in RUN_TABLES if t in counts]
    if kinds:  # what `flowdesk runs` lists, by kind
        print(f"the runs as `runs` lists them: {listing(kinds)}")


if __name__ == "__main__":
    raise SystemExit(main())
