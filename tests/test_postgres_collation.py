"""Reports do not depend on the database's collation: the same folder digested
on SQLite and on a PostgreSQL database whose collation is ICU ``en-US`` (or
``en_US.UTF-8``) gives byte-identical reports, names in code point order."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from desktop_app.flows.digest import REPORT_NAME
from tests import cli_forkserver
from tests.pg_support import with_database

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[1]
#: Names whose order differs between code points and English collations:
#: ``_`` sorts after upper case in code points, before letters in en-US;
#: upper case before lower case; accented letters after ``z``.
NAMES = ("__future__.py", "LICENSE.txt", "Zebra.md", "apple.md", "a_b.md", "aB.md", "ab.md",
         "zeta.md", "école.md", "Ünïcode.txt", "_private.md")  # fmt: skip


def flowdesk(*args: str) -> None:
    done = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr


def english_database(pg_server) -> str:
    """A database whose default collation is ICU ``en-US`` (libc
    ``en_US.UTF-8`` where the server has no ICU); its URL."""
    import psycopg

    name = "c_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        try:
            conn.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
            )
        except psycopg.Error:  # a server built without ICU
            conn.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 "
                "LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'"
            )
    return with_database(pg_server.admin_dsn, name)


@pytest.mark.scenario("S86")
def test_digest_report_is_byte_identical_on_sqlite_and_an_icu_en_us_database(pg_server, tmp_path):
    import psycopg

    folder = tmp_path / "names"
    folder.mkdir()
    for i, name in enumerate(NAMES):
        (folder / name).write_text(f"# Title {i}\n\nbody of {name}\n", encoding="utf-8")

    sqlite_db, sqlite_out = tmp_path / "f.db", tmp_path / "sqlite-out"
    flowdesk("--db", str(sqlite_db), "db", "apply")
    flowdesk("--db", str(sqlite_db), "run", "digest", "--folder", str(folder),
             "--out", str(sqlite_out), "--quiet")  # fmt: skip
    expected = (sqlite_out / REPORT_NAME).read_bytes()
    headings = [line[3:] for line in expected.decode().splitlines() if line.startswith("## ")]
    assert headings == sorted(NAMES)  # code point order: "LICENSE.txt" before "__future__.py"

    url = english_database(pg_server)
    try:
        with psycopg.connect(url) as conn:  # the collation really is not C
            row = conn.execute("SELECT '__future__.py' < 'LICENSE.txt'").fetchone()
            assert row == (True,)
        pg_out = tmp_path / "pg-out"
        flowdesk("--db", url, "db", "apply")
        flowdesk("--db", url, "run", "digest", "--folder", str(folder), "--out", str(pg_out),
                 "--quiet")  # fmt: skip
        assert (pg_out / REPORT_NAME).read_bytes() == expected
    finally:
        pg_server.drop_database(url)


@pytest.mark.scenario("S86")
def test_run_listings_and_tidy_moves_follow_code_points_on_an_icu_en_us_database(
    pg_server, sqlite_store
):
    """Runs created at the same instant are listed in run id order, and a
    tidy run's moves in source path order, by code point on both backends."""
    from desktop_app.store.domain import tidy
    from desktop_app.store.postgres.store import apply_postgres_schema, open_postgres_store
    from desktop_app.store.protocol import Checkpoint, RunRecord

    url = english_database(pg_server)
    try:
        apply_postgres_schema(url)
        pg_store = open_postgres_store(url)
        try:
            listed = {}
            for name, store in (("sqlite", sqlite_store), ("postgres", pg_store)):
                for rid in NAMES:
                    store.create_run(
                        RunRecord(rid, "f", "v1", "running", 0, 1000.0, 1000.0),
                        Checkpoint(rid, 0, "running", {}, {}, ("a",), 1000.0),
                    )
                moves = [tidy.TidyMove(f"/d/{n}", None, "documents", "2024-01") for n in NAMES]
                store.append(
                    Checkpoint(NAMES[0], 1, "running", {}, {}, ("a",), 1001.0),
                    writes=[tidy.record_plan(NAMES[0], moves)],
                )
                first = store.query(tidy.next_planned(NAMES[0]))
                listed[name] = (
                    [r.run_id for r in store.list_runs()],
                    [r.run_id for r in store.list_runs(newest_first=True, limit=3)],
                    [m.src for m in store.query(tidy.moves_of_run(NAMES[0]))],
                    None if first is None else first.src,
                )
        finally:
            pg_store.close()
    finally:
        pg_server.drop_database(url)
    assert listed["postgres"] == listed["sqlite"]
    assert listed["sqlite"][0] == sorted(NAMES)
    assert listed["sqlite"][1] == sorted(NAMES, reverse=True)[:3]
    assert listed["sqlite"][3] == "/d/LICENSE.txt"
