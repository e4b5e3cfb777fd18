"""Schema core/0011: checkpoints keyed by ``run_key * 2**32 + revision``.

A database made before the file (runs and checkpoints keyed by
``(run_id, revision)``) keeps every row through the rebuild and its runs
read and resume; a run's checkpoints go with it; and the 10-step flow
writes at most 3 WAL pages per step (counted from the ``-wal`` file, as
``benchmarks/bench_wal.py`` does)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import apsw
import pytest
from pydantic import BaseModel

from desktop_app.errors import StoreError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    n: int = 0
    answer: str = ""


def linear(steps: int):
    b = FlowBuilder("linear", S)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    return b.chain().compile()


def asking():
    return (
        FlowBuilder("ask", S)
        .step("prep", lambda s: {"n": 1})
        .await_input("ok", "answer", prompt="ship?")
        .chain()
        .compile()
    )


def before_0011() -> list[migrations.SchemaFile]:
    return [
        f for f in migrations.schema_files() if not (f.component == "core" and f.name >= "0011")
    ]


def rows(conn: apsw.Connection, table: str, skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    cur = conn.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.getdescription()]
    return [{k: v for k, v in zip(names, r, strict=True) if k not in skip} for r in cur]


def insert(conn: apsw.Connection, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    conn.execute(
        f"INSERT INTO {table}({cols}) VALUES ({','.join('?' * len(row))})", tuple(row.values())
    )


def made_before_0011(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """An old-schema file holding what runs of today's engine stored: three
    completed 10-step runs and one waiting for an answer (with its wait row),
    inserted in shuffled order so old rowids do not follow creation."""
    made = tmp_path / "made.db"
    conn = open_connection(made)
    migrations.apply(conn)
    conn.close()
    engine = Engine(open_store(made), flows=[linear(10), asking()])
    done = [engine.run("linear", S()).run_id for _ in range(3)]
    waiting = engine.run("ask", S()).run_id
    engine.store.close()
    src = open_connection(made)
    runs = rows(src, "runs", ("run_key",))
    cps = rows(src, "checkpoints", ("ckey",))
    waits = rows(src, "waits")
    src.close()
    old = tmp_path / "old.db"
    conn = open_connection(old)
    migrations.apply(conn, before_0011())
    assert "ckey" not in {r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")}
    random.Random(7).shuffle(runs)
    random.Random(8).shuffle(cps)
    with conn:
        for table, got in (("runs", runs), ("checkpoints", cps), ("waits", waits)):
            for row in got:
                insert(conn, table, row)
    conn.close()
    return old, {"done": done, "waiting": waiting, "runs": runs, "checkpoints": cps, "waits": waits}


def test_a_database_made_before_0011_keeps_every_row_and_its_runs_read_and_resume(tmp_path):
    path, made = made_before_0011(tmp_path)
    conn = open_connection(path)
    applied = migrations.apply(conn)
    later = [f.key for f in migrations.schema_files() if f.component == "core" and f.name >= "0011"]
    assert [f.key for f in applied] == later
    assert later[0] == "core/0011_checkpoint_keys.sql"
    assert conn.execute("PRAGMA foreign_keys").fetchall() == [(1,)]  # back on after the rebuild
    # the old tables' pages went back to the file system, not to the free list
    assert conn.execute("PRAGMA freelist_count").fetchall() == [(0,)]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted((k, repr(v)) for k, v in r.items()))

    assert sorted(map(key, rows(conn, "runs", ("run_key",)))) == sorted(map(key, made["runs"]))
    assert sorted(map(key, rows(conn, "checkpoints", ("ckey",)))) == sorted(
        map(key, made["checkpoints"])
    )
    assert rows(conn, "waits") == made["waits"]
    indexes = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('index','trigger') "
            "AND tbl_name='runs' AND sql IS NOT NULL"
        )
    }
    assert indexes == {
        "runs_scope_status", "runs_scope_created", "runs_tenant_session",
        "runs_live_flow_key", "runs_waiting_deadline", "runs_delete_checkpoints",
    }  # fmt: skip
    conn.close()

    engine = Engine(open_store(path), flows=[linear(10), asking()])
    try:
        for run_id in made["done"]:
            res = engine.resume(run_id)  # a completed run: its saved result
            assert res.status == "completed" and res.state.n == 10
            assert [h.revision for h in engine.store.history(run_id)] == list(range(11))
        done = engine.resume_with(made["waiting"], "yes")
        assert done.status == "completed" and done.state.answer == "yes" and done.state.n == 1
        assert engine.store.latest(made["waiting"]).revision == done.revision
        fresh = engine.run("linear", S())
        assert fresh.status == "completed" and fresh.state.n == 10
    finally:
        engine.store.close()


def test_deleting_a_run_deletes_its_checkpoints_and_waits_and_no_other_runs(tmp_path):
    path, made = made_before_0011(tmp_path)
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    store = open_store(path)
    try:
        gone, kept = made["waiting"], made["done"][0]
        before = len(store.history(kept))
        store.delete_run(gone)
        count = store.conn.execute
        assert count("SELECT count(*) FROM checkpoints WHERE run_id=?", (gone,)).fetchall() == [
            (0,)
        ]
        assert count("SELECT count(*) FROM waits WHERE run_id=?", (gone,)).fetchall() == [(0,)]
        assert len(store.history(kept)) == before
        total = count("SELECT count(*) FROM checkpoints").fetchall()[0][0]
        assert total == sum(len(store.history(r)) for r in made["done"])
    finally:
        store.close()


def test_a_schema_file_that_leaves_a_dangling_foreign_key_applies_nothing(tmp_path):
    conn = open_connection(tmp_path / "x.db")
    migrations.apply(conn)
    bad = migrations.SchemaFile(
        "domain", "9999_dangling.sql",
        "CREATE TABLE notes (run_id TEXT REFERENCES runs(run_id));"
        "INSERT INTO notes VALUES ('no such run');",
    )  # fmt: skip
    with pytest.raises(StoreError, match=r"9999_dangling\.sql left 1 row whose foreign key"):
        migrations.apply(conn, [*migrations.schema_files(), bad])
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='notes'").fetchall() == []
    assert conn.execute("PRAGMA foreign_keys").fetchall() == [(1,)]
    conn.close()


def test_a_checkpoint_row_inserted_without_its_key_is_refused(tmp_path):
    path = tmp_path / "x.db"
    conn = open_connection(path)
    migrations.apply(conn)
    with pytest.raises(apsw.ConstraintError):  # ckey's low 32 bits must be the revision
        conn.execute(
            "INSERT INTO checkpoints(run_id, revision, kind, status, created_at, state, steps, "
            "frontier) VALUES ('r', 3, 'snapshot', 'running', 1.0, '{}', '{}', '[]')"
        )
    conn.close()


WAL_HEADER, FRAME_HEADER = 32, 24


def test_the_10_step_flow_writes_at_most_3_wal_pages_per_step(tmp_path):
    """Frames appended to the WAL over 30 runs of the 10-step flow (run
    creation included), on a file already holding 30 runs, with automatic
    checkpoints off so nothing resets the log: a count of pages, not a time.
    4.9 pages per step before schema 0011."""
    path = tmp_path / "wal.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    store = open_store(path, synchronous="OFF")
    flow = linear(10)
    engine = Engine(store, flows=[flow])
    try:
        for _ in range(30):
            engine.run("linear", S())
        store.conn.execute("PRAGMA wal_autocheckpoint=0")
        page = store.conn.execute("PRAGMA page_size").fetchall()[0][0]
        busy, _, _ = store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
        assert busy == 0
        runs = 30
        for _ in range(runs):
            assert engine.run("linear", S()).status == "completed"
        frames = (os.path.getsize(f"{path}-wal") - WAL_HEADER) // (page + FRAME_HEADER)
        _, logged, _ = store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
        assert frames == logged
        per_step = frames / (runs * 10)
        assert per_step <= 3.0, f"{per_step:.2f} WAL pages per step ({frames} frames)"
    finally:
        store.close()


def test_an_export_leaves_the_storage_keys_out(tmp_path):
    from desktop_app.export import export

    path = tmp_path / "x.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    engine = Engine(open_store(path), flows=[linear(2)])
    run_id = engine.run("linear", S()).run_id
    engine.store.close()
    export(path, tmp_path / "json", "json", ["runs", "checkpoints"])
    export(path, tmp_path / "csv", "csv", ["runs", "checkpoints"])
    import json

    runs = json.loads((tmp_path / "json" / "runs.json").read_text())
    cps = json.loads((tmp_path / "json" / "checkpoints.json").read_text())
    assert [r["run_id"] for r in runs] == [run_id] and "run_key" not in runs[0]
    assert [c["revision"] for c in cps] == [0, 1, 2] and "ckey" not in cps[0]
    header = (tmp_path / "csv" / "checkpoints.csv").read_text().splitlines()[0]
    assert header.startswith("run_id,revision,") and "ckey" not in header
    assert "run_key" not in (tmp_path / "csv" / "runs.csv").read_text().splitlines()[0]


def test_a_schema_file_runs_past_a_statement_that_returns_rows(tmp_path):
    """apsw stops a multi-statement string at the first row it returns; each
    file is stepped to its end (0011 ends with ``PRAGMA incremental_vacuum``,
    which returns a row per page it frees)."""
    conn = open_connection(tmp_path / "x.db")
    rows_first = migrations.SchemaFile(
        "domain", "9999_rows_first.sql", "SELECT 1 UNION ALL SELECT 2; CREATE TABLE after_rows(x);"
    )
    migrations.apply(conn, [*migrations.schema_files(), rows_first])
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='after_rows'").fetchall() == [
        ("after_rows",)
    ]
    conn.close()
