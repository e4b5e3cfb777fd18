"""``flowdesk export``: runs, checkpoints and domain tables to JSON or CSV.

Runs as its own process (``python -m desktop_app.export``) with sqlite-utils,
which uses the standard library's ``sqlite3``; it never imports apsw or the
engine, so two SQLite libraries never share a process (DESIGN.md). It only
reads: the database is opened read-only (``mode=ro`` URI).

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flowdesk export")
    p.add_argument("db", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("--table", action="append", help="only this table (repeatable)")
    args = p.parse_args(argv)
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
