"""``flowdesk export``: runs, checkpoints and domain tables to JSON or CSV.

Runs as its own process (``python -m desktop_app.export``) with sqlite-utils,
which uses the standard library's ``sqlite3``; it never imports apsw or the
engine, so two SQLite libraries never share a process (DESIGN.md). It only
reads: the database is opened read-only (``mode=ro`` URI).

On PostgreSQL (DB is a ``postgresql://`` URL) each table is read with
``COPY (SELECT …) TO STDOUT`` through psycopg, in one read-only snapshot;
times are written as UTC epoch seconds, as from a SQLite file, so both
backends export the same shape.

Usage: python -m desktop_app.export DB OUT_DIR [--format json|csv] [--table NAME ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import sqlite3
import sys
from pathlib import Path

import sqlite_utils

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


def export(db: Path, out: Path, fmt: str, tables: list[str] | None = None) -> dict[str, int]:
    """Write one file per table; returns rows written per table."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    database = sqlite_utils.Database(conn)
    present = set(database.table_names())
    wanted = tables or [t for t in DEFAULT_TABLES if t in present]
    missing = [t for t in wanted if t not in present]
    if missing:
        raise SystemExit(f"flowdesk export: no table {', '.join(missing)} in {db}")
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for name in wanted:
        rows = list(database[name].rows)
        counts[name] = len(rows)
        if fmt == "json":
            (out / f"{name}.json").write_text(
                json.dumps(rows, ensure_ascii=False, indent=1, default=str), encoding="utf-8"
            )
        else:
            columns = [c.name for c in database[name].columns]
            with (out / f"{name}.csv").open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)
    conn.close()
    return counts


def is_postgres_url(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def export_postgres(
    url: str, out: Path, fmt: str, tables: list[str] | None = None
) -> dict[str, int]:
    """Write one file per table from the PostgreSQL database at ``url``;
    returns rows written per table. Raises SystemExit for an unknown table,
    psycopg.Error when the server fails."""
    import io

    import psycopg

    from desktop_app.store.migrations import PG_SCHEMA

    counts: dict[str, int] = {}
    with psycopg.connect(url, connect_timeout=10) as conn:
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
        out.mkdir(parents=True, exist_ok=True)
        for name in wanted:
            select = ", ".join(
                f'extract(epoch from "{c}")::float8 AS "{c}"'
                if t == "timestamp with time zone"
                else f'"{c}"'
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
                (out / f"{name}.csv").write_text(text, encoding="utf-8", newline="")
            else:
                rows = [json.loads(ln.replace("\\\\", "\\")) for ln in text.splitlines()]
                counts[name] = len(rows)
                (out / f"{name}.json").write_text(
                    json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8"
                )
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
