"""``flowdesk db copy`` (``desktop_app/store/postgres/copy.py``), pinned where
its mutants got past ``tests/test_postgres_copy.py``: times copied as UTC
(fractions to the µs, ``±inf`` as PostgreSQL's infinities, NaN refused naming
its column), NUL in text, the copy order by foreign keys (circular keys
refused), the source file left untouched, and every refusal's typed error and
message (missing or unopenable file, missing schema on either side, an
unreachable server, a non-empty target, a row the server refuses), with
nothing copied. Sources are SQLite files with the schema (``db_path``),
filled with plain SQL; targets are fresh PostgreSQL databases (``pg_url``).
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from desktop_app.errors import (
    MOVED_EXPIRES_AT,
    CopyTargetNotEmptyError,
    DatabaseOpenError,
    SchemaMissingError,
    StoreError,
)
from desktop_app.store.postgres.copy import _order, _timestamp, copy_sqlite_to_postgres
from desktop_app.store.postgres.sql import redact
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

T0 = 1_700_000_000.123456  # 2023-11-14T22:13:20.123456Z


def add_run(lite: sqlite3.Connection, run_id: str, **cols: object) -> None:
    row = {
        "run_id": run_id,
        "flow_name": "f",
        "flow_version": "1",
        "status": "running",
        "revision": 1,
        "created_at": T0,
        "updated_at": T0,
        **cols,
    }
    lite.execute(
        f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
        list(row.values()),
    )


def add_wait(lite: sqlite3.Connection, wait_id: str, run_id: str, deadline: object) -> None:
    lite.execute(
        "INSERT INTO waits (wait_id, run_id, step_id, kind, deadline_at, created_at) "
        "VALUES (?, ?, 's', 'timer', ?, ?)",
        (wait_id, run_id, deadline, T0),
    )


def source(db_path: Path, fill) -> Path:
    """``db_path`` after ``fill(conn)`` ran on it (foreign keys unchecked, as
    SQLite leaves them by default)."""
    with sqlite3.connect(db_path) as lite:
        fill(lite)
    lite.close()
    return db_path


def pg(url: str) -> psycopg.Connection:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET search_path = flowdesk")
    return conn


def count(url: str, table: str) -> int:
    with pg(url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tokyo_time():
    """The laptop's local zone is UTC+9 for the test."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


# -- _timestamp ---------------------------------------------------------------


def test_timestamp_of_none_is_none():
    assert _timestamp(None, "waits", "deadline_at") is None


def test_timestamp_gives_postgres_literals_for_infinities():
    assert _timestamp(math.inf, "waits", "deadline_at") == "infinity"
    assert _timestamp(-math.inf, "waits", "deadline_at") == "-infinity"


def test_timestamp_renders_fractional_epoch_seconds_as_utc_to_the_microsecond(tokyo_time):
    assert _timestamp(T0, "runs", "created_at") == "2023-11-14T22:13:20.123456+00:00"


def test_timestamp_refuses_nan_naming_table_and_column():
    with pytest.raises(StoreError) as exc:
        _timestamp(math.nan, "waits", "deadline_at")
    assert str(exc.value) == "waits.deadline_at holds NaN, which is not a time; nothing was copied"


# -- times and text through a real copy -----------------------------------------


def test_copy_keeps_infinite_and_fractional_times_whatever_the_laptops_zone(
    db_path, pg_url, tokyo_time
):
    def fill(lite):
        add_run(lite, "r1")
        add_wait(lite, "w-future", "r1", math.inf)
        add_wait(lite, "w-past", "r1", -math.inf)
        add_wait(lite, "w-fraction", "r1", T0 + 60)

    copy_sqlite_to_postgres(source(db_path, fill), pg_url)
    with pg(pg_url) as conn:
        rows = conn.execute(
            "SELECT wait_id, deadline_at::text, extract(epoch FROM deadline_at)::numeric "
            "FROM waits ORDER BY wait_id"
        ).fetchall()
        created = conn.execute(
            "SELECT extract(epoch FROM created_at)::numeric FROM runs"
        ).fetchone()
    by_id = {wait_id: (text, epoch) for wait_id, text, epoch in rows}
    assert by_id["w-future"][0] == "infinity"
    assert by_id["w-past"][0] == "-infinity"
    assert float(by_id["w-fraction"][1]) == pytest.approx(T0 + 60, abs=1e-6)
    assert str(created[0]) == "1700000000.123456"


def test_copy_refuses_a_nan_time_naming_its_column_and_copies_nothing(db_path, pg_url):
    def fill(lite):
        add_run(lite, "r1")
        add_wait(lite, "w1", "r1", "NaN")  # text: SQLite itself turns a REAL NaN into NULL

    with pytest.raises(StoreError) as exc:
        copy_sqlite_to_postgres(source(db_path, fill), pg_url)
    assert str(exc.value) == "waits.deadline_at holds NaN, which is not a time; nothing was copied"
    assert count(pg_url, "runs") == 0


def test_copy_replaces_nul_in_text_by_the_replacement_character(db_path, pg_url):
    copy_sqlite_to_postgres(
        source(db_path, lambda lite: add_run(lite, "r1", error="disk\x00full")), pg_url
    )
    with pg(pg_url) as conn:
        assert conn.execute("SELECT error FROM runs").fetchone()[0] == "disk\ufffdfull"


def test_copy_leaves_a_crashed_laptops_file_and_its_wal_untouched(db_path, pg_url, tmp_path):
    """Only ended runs: nothing to mark moved, so the file is only read."""
    crashed = tmp_path / "crashed.db"
    lite = sqlite3.connect(db_path)
    add_run(lite, "r1", status="completed")
    lite.commit()  # in the WAL, not yet checkpointed into the file
    shutil.copy(db_path, crashed)  # the files a killed process leaves behind
    shutil.copy(f"{db_path}-wal", f"{crashed}-wal")
    lite.close()
    before = (crashed.read_bytes(), Path(f"{crashed}-wal").read_bytes())

    report = copy_sqlite_to_postgres(crashed, pg_url)

    assert report.runs == 1  # the WAL's rows were read
    assert report.moved == []
    assert Path(f"{crashed}-wal").exists()
    assert (crashed.read_bytes(), Path(f"{crashed}-wal").read_bytes()) == before


def test_copy_marks_a_crashed_laptops_unfinished_run_moved_keeping_its_wal_rows(
    db_path, pg_url, tmp_path
):
    """A run left ``running`` in the WAL a killed process left: copied, then
    marked moved in that file (its rows kept: the copy read them first)."""
    crashed = tmp_path / "crashed.db"
    lite = sqlite3.connect(db_path)
    add_run(lite, "r1")
    add_run(lite, "r2", status="completed")
    lite.commit()
    shutil.copy(db_path, crashed)
    shutil.copy(f"{db_path}-wal", f"{crashed}-wal")
    lite.close()

    report = copy_sqlite_to_postgres(crashed, pg_url)

    assert report.runs == 2 and report.moved == ["r1"]
    with sqlite3.connect(crashed) as back:
        rows = back.execute(
            "SELECT run_id, status, lease_owner, lease_expires_at FROM runs ORDER BY run_id"
        ).fetchall()
    back.close()
    assert rows == [
        ("r1", "running", f"moved to {redact(pg_url, mask=None)}", MOVED_EXPIRES_AT),
        ("r2", "completed", None, None),
    ]
    with pg(pg_url) as conn:  # the copy holds no lease: free for the first worker
        assert conn.execute("SELECT lease_owner FROM runs WHERE run_id='r1'").fetchone() == (None,)


# -- refusals ---------------------------------------------------------------------


def test_copy_from_a_missing_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "nope.db"
    with pytest.raises(DatabaseOpenError) as exc:
        copy_sqlite_to_postgres(path, f"postgresql://127.0.0.1:{closed_port()}/x")
    assert str(exc.value) == f"{path}: no such database file; nothing was copied"


def test_copy_from_a_file_sqlite_cannot_open_is_refused_naming_it(tmp_path):
    folder = tmp_path
    while len(str(folder)) < 600:  # past SQLite's 512-byte path limit, not the OS's
        folder = folder / ("d" * 100)
        folder.mkdir()
    path = folder / "laptop.db"
    path.touch()
    with pytest.raises(DatabaseOpenError) as exc:
        copy_sqlite_to_postgres(path, f"postgresql://127.0.0.1:{closed_port()}/x")
    assert str(exc.value).startswith(f"cannot open {path} for reading: ")
    assert "unable to open database file" in str(exc.value)


def test_copy_from_a_file_without_schema_names_it_in_the_advice(tmp_path):
    path = tmp_path / "blank.db"
    path.touch()
    with pytest.raises(SchemaMissingError) as exc:
        copy_sqlite_to_postgres(path, f"postgresql://127.0.0.1:{closed_port()}/x")
    assert f"run `flowdesk --db {path} db apply`" in str(exc.value)


def test_copy_to_an_unreachable_server_names_it_without_the_password(db_path):
    url = f"postgresql://me:secret@127.0.0.1:{closed_port()}/x"
    with pytest.raises(DatabaseOpenError) as exc:
        copy_sqlite_to_postgres(db_path, url)
    message = str(exc.value)
    assert message.startswith(f"cannot connect to PostgreSQL at {redact(url)}: ")
    assert "me:***@" in message and "secret" not in message


def test_copy_to_a_database_without_schema_names_it_in_the_advice(db_path, pg_empty_url):
    url = with_address(pg_empty_url, password="secret")
    with pytest.raises(SchemaMissingError) as exc:
        copy_sqlite_to_postgres(db_path, url)
    # runnable as printed: the password left out (libpq reads PGPASSWORD), never masked
    assert f"run `flowdesk --db {redact(url, mask=None)} db apply`" in str(exc.value)
    assert "secret" not in str(exc.value)


def test_copy_refuses_a_target_holding_runs_with_advice_and_copies_nothing(db_path, pg_url):
    url = with_address(pg_url, password="secret")
    with pg(pg_url) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, flow_name, flow_version, status, revision, created_at, "
            "updated_at) VALUES ('server-1', 'f', '1', 'completed', 1, now(), now())"
        )
    with pytest.raises(CopyTargetNotEmptyError) as exc:
        copy_sqlite_to_postgres(source(db_path, lambda lite: add_run(lite, "r1")), url)
    assert str(exc.value) == (
        f"{redact(url)} already holds 1 flow run; nothing was copied. Copy into a new, "
        "empty database once db apply has created its tables there."
    )
    assert (exc.value.runs, exc.value.agent_runs) == (1, 0)
    assert count(pg_url, "runs") == 1


def test_copy_refuses_a_target_holding_agent_runs_naming_that_table(db_path, pg_url):
    with pg(pg_url) as conn:
        conn.execute(
            "INSERT INTO agent_runs (run_id, agent, status, input, created_at, updated_at) "
            "VALUES ('a1', 'helper', 'done', '{}', now(), now())"
        )
    with pytest.raises(CopyTargetNotEmptyError) as exc:
        copy_sqlite_to_postgres(db_path, pg_url)
    assert str(exc.value).startswith(f"{pg_url} already holds 1 agent run; nothing was copied.")


def test_copy_a_row_the_server_refuses_names_both_ends_and_copies_nothing(db_path, pg_url):
    url = with_address(pg_url, password="secret")

    def fill(lite):
        add_run(lite, "r1")
        add_wait(lite, "w-orphan", "ghost", None)  # its run is not in the file

    with pytest.raises(StoreError) as exc:
        copy_sqlite_to_postgres(source(db_path, fill), url)
    message = str(exc.value)
    assert message.startswith(f"copying {db_path} to {redact(url)} failed: ")
    assert message.endswith("; nothing was copied")
    assert "foreign key" in message and "secret" not in message
    assert count(pg_url, "runs") == 0


# -- copy order -------------------------------------------------------------------


def test_order_puts_each_table_after_the_tables_it_references(pg_url):
    tables = [
        "waits", "checkpoints", "runs", "agent_messages", "agent_tool_results",
        "agent_runs", "digest_files", "tidy_moves", "signals",
    ]  # fmt: skip
    with psycopg.connect(pg_url) as conn:  # default search_path: names come schema-qualified
        out = _order(conn, tables)
    assert sorted(out) == sorted(tables)
    for child in ("checkpoints", "waits", "digest_files", "tidy_moves"):
        assert out.index("runs") < out.index(child)
    for child in ("agent_messages", "agent_tool_results"):
        assert out.index("agent_runs") < out.index(child)


def test_order_ignores_foreign_keys_to_or_from_tables_not_listed(pg_url):
    with psycopg.connect(pg_url) as conn:
        assert _order(conn, ["waits", "checkpoints"]) == ["checkpoints", "waits"]
        assert _order(conn, ["runs"]) == ["runs"]


def test_order_ignores_a_table_referencing_itself(pg_url):
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "CREATE TABLE flowdesk.tree (id int PRIMARY KEY, up int REFERENCES flowdesk.tree)"
        )
        assert _order(conn, ["tree"]) == ["tree"]


def test_copy_refuses_circular_foreign_keys_naming_the_tables(db_path, pg_url):
    with pg(pg_url) as conn:
        conn.execute("CREATE TABLE loop_a (id int PRIMARY KEY, b int)")
        conn.execute("CREATE TABLE loop_b (id int PRIMARY KEY, a int REFERENCES loop_a)")
        conn.execute("ALTER TABLE loop_a ADD FOREIGN KEY (b) REFERENCES loop_b")
    with pytest.raises(StoreError) as exc:
        copy_sqlite_to_postgres(db_path, pg_url)
    assert str(exc.value) == "circular foreign keys between ['loop_a', 'loop_b']"
