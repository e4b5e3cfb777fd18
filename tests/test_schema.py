"""The SQLite file: explicit schema, ledger with checksums, pragmas (S41)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.errors import (
    DatabaseOpenError,
    SchemaChecksumError,
    SchemaMissingError,
    SchemaTooNewError,
)
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver


def flowdesk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(list(args), cwd=cwd, timeout=120)


@pytest.mark.scenario("S41")
def test_engine_on_file_without_schema_names_the_command(tmp_path):
    path = tmp_path / "empty.db"
    with pytest.raises(SchemaMissingError) as info:
        open_store(path)
    assert f"flowdesk --db {path} db apply" in str(info.value)


@pytest.mark.scenario("S41")
def test_db_apply_applies_and_records_every_component(tmp_path):
    path = tmp_path / "f.db"
    out = flowdesk("--db", str(path), "db", "apply")
    assert out.returncode == 0, out.stderr
    assert "applied core/0001_runs_checkpoints.sql" in out.stdout
    assert "applied domain/0001_digest.sql" in out.stdout
    status = flowdesk("--db", str(path), "db", "status")
    assert status.returncode == 0
    assert "pending" not in status.stdout and "applied  core/0001" in status.stdout
    again = flowdesk("--db", str(path), "db", "apply")
    assert "schema is up to date" in again.stdout
    # an independent reader (stdlib sqlite3 via sqlite-utils, in this process
    # only after every apsw handle on the file is closed) sees the ledger
    import sqlite_utils

    db = sqlite_utils.Database(path)
    rows = list(db["flowdesk_schema_ledger"].rows)
    assert {(r["component"], r["name"]) for r in rows} >= {
        ("core", "0001_runs_checkpoints.sql"),
        ("domain", "0001_digest.sql"),
    }
    assert all(len(r["checksum"]) == 64 for r in rows)
    assert {"runs", "checkpoints", "digest_files"} <= set(db.table_names())
    db.close()


@pytest.mark.scenario("S41")
def test_wal_busy_timeout_foreign_keys_synchronous(db_path):
    store = open_store(db_path, busy_timeout_s=7.5)
    conn = store.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # a busy handler that sleeps with the GIL released, not SQLite's busy_timeout
    from desktop_app.store.connection import busy_timeout_s

    assert busy_timeout_s(conn) == 7.5
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.transaction_mode == "IMMEDIATE"
    store.close()


@pytest.mark.scenario("S41")
def test_edited_applied_schema_is_refused(db_path):
    files = migrations.schema_files()
    edited = [
        migrations.SchemaFile(f.component, f.name, f.sql + "\n-- edited\n")
        if f.name.startswith("0001_runs")
        else f
        for f in files
    ]
    conn = open_connection(db_path)
    with pytest.raises(SchemaChecksumError) as info:
        migrations.verify(conn, edited)
    assert "core/0001_runs_checkpoints.sql" in str(info.value)
    with pytest.raises(SchemaChecksumError):
        migrations.apply(conn, edited)
    conn.close()


@pytest.mark.scenario("S41")
def test_schema_newer_than_code_is_refused(db_path):
    conn = open_connection(db_path)
    with conn:
        conn.execute("INSERT INTO flowdesk_schema_ledger VALUES ('core','0099_future.sql','x',0)")
    conn.close()
    with pytest.raises(SchemaTooNewError) as info:
        open_store(db_path)
    assert "newer Flowdesk" in str(info.value)


def test_partially_applied_schema_names_missing_files(tmp_path):
    path = tmp_path / "p.db"
    conn = open_connection(path)
    core_only = [f for f in migrations.schema_files() if f.component == "core"]
    migrations.apply(conn, core_only)
    with pytest.raises(SchemaMissingError) as info:
        migrations.verify(conn, db=str(path))
    conn.close()
    pending = [f.key for f in migrations.schema_files() if f.component != "core"]
    shipped = len(migrations.schema_files())
    said = str(info.value)
    # what is missing, briefly: how many of how many, the first and last named
    assert f"missing {len(pending)} of Flowdesk's {shipped} schema files" in said
    assert f"({pending[0]} to {pending[-1]})" in said
    # its command, run as printed, applies the rest: the store then opens
    command = said.split("run `", 1)[1].split("`", 1)[0]
    assert command == f"flowdesk --db {path} db apply"
    argv = command.split()
    done = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", *argv[1:]],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    open_store(path).close()


def test_database_file_is_created_0600(tmp_path):
    path = tmp_path / "new.db"
    open_connection(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_not_a_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"my precious notes\n" * 100)
    before = path.read_bytes()
    with pytest.raises(DatabaseOpenError) as info:
        open_store(path)
    assert "not a SQLite database" in str(info.value)
    assert path.read_bytes() == before
    out = flowdesk("--db", str(path), "runs")
    assert out.returncode == 1 and "not a SQLite database" in out.stderr
    assert path.read_bytes() == before


def test_database_in_missing_folder_is_a_clear_error(tmp_path):
    out = flowdesk("--db", str(tmp_path / "nope" / "f.db"), "db", "apply")
    assert out.returncode == 1
    assert "folder does not exist" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_database_in_read_only_folder_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        out = flowdesk("--db", str(ro / "f.db"), "db", "apply")
    finally:
        ro.chmod(0o700)
    assert out.returncode == 1, out.stderr
    assert "not writable" in out.stderr and "Traceback" not in out.stderr
    assert not (ro / "f.db").exists()


def test_read_only_database_file_write_is_a_store_error(db_path):
    """Root ignores permission bits, so open the file read-only through SQLite itself."""
    import apsw

    from desktop_app.errors import StoreError
    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import SqliteCheckpointStore
    from tests.flows_for_tests import Numbers, counting_flow

    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    store = SqliteCheckpointStore(conn, path=str(db_path))
    from collections import Counter

    with pytest.raises(StoreError) as info:
        Engine(store, flows=[counting_flow(Counter())]).run("counting", Numbers())
    assert "read-only" in str(info.value)
    conn.close()


def test_unreadable_or_broken_config_file_is_a_clear_error(tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_text("synchronous = [broken")
    monkeypatch.setenv("FLOWDESK_CONFIG", str(cfg))
    out = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(tmp_path / "x.db"), "db", "apply"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "not valid TOML" in out.stderr


def test_fresh_install_and_stepwise_upgrade_end_equal(tmp_path):
    """Applying all files at once and one component at a time give the same schema."""
    files = migrations.schema_files()
    a = open_connection(tmp_path / "a.db")
    migrations.apply(a, files)
    b = open_connection(tmp_path / "b.db")
    for i in range(1, len(files) + 1):
        migrations.apply(b, files[:i])

    def dump(conn):
        return sorted(
            conn.execute(
                "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
            ).fetchall()
        )

    assert dump(a) == dump(b)
    a.close()
    b.close()
