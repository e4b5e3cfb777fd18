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

Usage: python -m desktop_app.export DB OUT_DIR [--format json|csv] [--table NAME ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import sqlite_utils

from desktop_app.private import make_private_dirs

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
    "digest_files",
    "tidy_moves",
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


def _with_iso_times(row: dict[str, Any]) -> dict[str, Any]:
    return {k: iso_time(v) if k.endswith("_at") else v for k, v in row.items()}


@contextmanager
def _private(path: Path) -> Iterator[IO[str]]:
    """Open ``path`` for writing, created (or reset to) mode 0600 before any byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
        yield fh


def export(db: Path, out: Path, fmt: str, tables: list[str] | None = None) -> dict[str, int]:
    """Write one file per table (mode 0600, times as ISO-8601 UTC); returns
    rows written per table.

    Raises:
        SystemExit: a requested table does not exist.
        sqlite3.DatabaseError: the file cannot be read.
    """
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    database = sqlite_utils.Database(conn)
    present = set(database.table_names())
    wanted = tables or [t for t in DEFAULT_TABLES if t in present]
    missing = [t for t in wanted if t not in present]
    if missing:
        raise SystemExit(f"flowdesk export: no table {', '.join(missing)} in {db}")
    make_private_dirs(out)
    counts: dict[str, int] = {}
    for name in wanted:
        hidden = STORAGE_KEYS.get(name, "")
        rows = [_with_iso_times(r) for r in database[name].rows]
        for r in rows:
            r.pop(hidden, None)
        counts[name] = len(rows)
        if fmt == "json":
            with _private(out / f"{name}.json") as fh:
                fh.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str))
        else:
            columns = [c.name for c in database[name].columns if c.name != hidden]
            with _private(out / f"{name}.csv") as fh:
                writer = csv.DictWriter(fh, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)
    conn.close()
    return counts


def is_postgres_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


#: A timestamptz column as the SQLite export writes times (ISO-8601 UTC, milliseconds).
_PG_ISO = """to_char("{c}" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""


def export_postgres(
    url: str, out: Path, fmt: str, tables: list[str] | None = None
) -> dict[str, int]:
    """Write one file per table of the PostgreSQL database at ``url`` (mode
    0600, times as ISO-8601 UTC); returns rows written per table.

    Raises:
        SystemExit: a requested table does not exist.
        psycopg.Error: the server cannot be read.
    """
    import io

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
        wanted = tables or [t for t in DEFAULT_TABLES if t in columns]
        missing = [t for t in wanted if t not in columns]
        if missing:
            raise SystemExit(f"flowdesk export: no table {', '.join(missing)} in the database")
        make_private_dirs(out)
        for name in wanted:
            select = ", ".join(
                (_PG_ISO.format(c=c) if t == "timestamp with time zone" else f'"{c}"')
                + f' AS "{c}"'
                for c, t in columns[name]
            )
            inner = f'SELECT {select} FROM {PG_SCHEMA}."{name}"'
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
                with _private(out / f"{name}.csv") as fh:
                    fh.write(text)
            else:
                rows = [json.loads(ln.replace("\\\\", "\\")) for ln in text.splitlines()]
                counts[name] = len(rows)
                with _private(out / f"{name}.json") as fh:
                    fh.write(json.dumps(rows, ensure_ascii=False, indent=1))
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flowdesk export")
    p.add_argument("db", help="a database file or a postgresql:// URL")
    p.add_argument("out", type=Path)
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("--table", action="append", help="only this table (repeatable)")
    args = p.parse_args(argv)
    if is_postgres_url(args.db):
        import psycopg

        try:
            counts = export_postgres(args.db, args.out, args.format, args.table)
        except psycopg.Error as exc:
            print(f"flowdesk export: cannot read the PostgreSQL database: {exc}", file=sys.stderr)
            return 1
        for name, n in counts.items():
            print(f"{name}: {n} rows")
        print(f"written to {args.out}")
        return 0
    args.db = Path(args.db)
    if not args.db.is_file():
        print(f"flowdesk export: no database at {args.db}", file=sys.stderr)
        return 2
    try:
        counts = export(args.db, args.out, args.format, args.table)
    except sqlite3.DatabaseError as exc:
        print(f"flowdesk export: cannot read {args.db}: {exc}", file=sys.stderr)
        return 1
    assert "apsw" not in sys.modules, "export must not load apsw"
    for name, n in counts.items():
        print(f"{name}: {n} rows")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
