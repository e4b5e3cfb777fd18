"""Schema ``domain/0007``: a tidy run that ended ``timed_out`` before its
timeout was recorded in ``tidy_moves`` kept its ``planned`` rows (``export``
showed them planned, the app's preview counted them to move). ``flowdesk db
apply`` on such a database records them ``skipped`` with the reason a
timeout gives them now; a waiting run's planned rows and every other row
stay as they were. On SQLite and PostgreSQL, through the real CLI.

The database is the one a Flowdesk of the previous schema left: its runs
made by the real tidy flow without the ``on_timed_out`` option (as that
Flowdesk's was), then the ledger row of ``domain/0007`` removed. That file
only updates rows (it ran on an empty table here), so the result is that
schema version exactly; the first test checks that it changes no table,
index or trigger."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flows.tidy import TIMED_OUT, build_tidy_flow
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from tests.cli_support import flowdesk
from tests.ownership_racer import open_db
from tests.tidy_folders import fill

FILE = "0007_tidy_timed_out_skipped.sql"
PARTIAL = "download in progress"


def test_the_file_changes_no_table_index_or_trigger(tmp_path):
    files = migrations.schema_files()
    assert files[-1].key == f"domain/{FILE}"
    shapes = []
    for name, upto in (("before.db", files[:-1]), ("after.db", files)):
        conn = open_connection(tmp_path / name)
        migrations.apply(conn, upto)
        shapes.append(
            sorted(
                conn.execute(
                    "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
                ).fetchall()
            )
        )
        conn.close()
    assert shapes[0] == shapes[1]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request, tmp_path) -> str:
    if request.param == "sqlite":
        db = tmp_path / "t.db"
        assert flowdesk(db, "db", "apply").returncode == 0
        return str(db)
    return str(request.getfixturevalue("pg_url"))


def forget_0007(db: str) -> None:
    """Take ``domain/0007`` out of the ledger: the database says it is at the
    previous schema version, which it is (the file only updates rows)."""
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                f"DELETE FROM {migrations.PG_SCHEMA}.{migrations.LEDGER} "
                "WHERE component = 'domain' AND name = %s",
                (FILE,),
            )
        return
    conn = open_connection(Path(db))
    with conn:
        conn.execute(
            f"DELETE FROM {migrations.LEDGER} WHERE component = 'domain' AND name = ?", (FILE,)
        )
    conn.close()


def moves(db: str, tmp_path: Path) -> dict[str, list[tuple[str, str, str | None]]]:
    """``export``'s ``tidy_moves``: each run's ``(file, status, reason)``, sorted."""
    out = tmp_path / f"export-{len(list(tmp_path.glob('export-*')))}"
    exported = flowdesk(db, "export", "--out", str(out), "--table", "tidy_moves")
    assert exported.returncode == 0, exported.stderr
    got: dict[str, list[tuple[str, str, str | None]]] = {}
    for r in json.loads((out / "tidy_moves.json").read_text()):
        got.setdefault(r["run_id"], []).append((Path(r["src"]).name, r["status"], r["reason"]))
    return {k: sorted(v) for k, v in got.items()}


def test_db_apply_records_planned_moves_of_timed_out_tidies_as_skipped(database, tmp_path):
    timed, other = tmp_path / "timed", tmp_path / "other"
    fill(timed, 3)
    (timed / "big.iso.part").write_text("half")  # skipped at plan time: stays as it is
    fill(other, 2)
    rids: dict[str, str] = {}
    for name, folder in (("timed", timed), ("other", other)):
        started = flowdesk(database, "run", "tidy", "--folder", str(folder))
        assert started.returncode == 0, started.stderr
        rids[name] = started.stdout.splitlines()[0]

    # the previous Flowdesk's tidy flow: no on_timed_out, so a timeout left
    # its planned rows as they were
    old_tidy = dataclasses.replace(build_tidy_flow(), on_timed_out=None)
    clock = ManualClock()
    store: Any = open_db(database)
    try:
        engine = Engine(store, flows=[old_tidy], clock=clock)
        deadlines = [w.deadline_at for r in rids.values() for w in engine.waits(r)]
        assert len(deadlines) == 2 and None not in deadlines
        clock.advance(max(deadlines) - clock.now() + 1)  # type: ignore[type-var]
        while engine.tick():
            pass
        assert engine.status(rids["timed"]).status == "timed_out"
        assert engine.status(rids["other"]).status == "timed_out"
    finally:
        store.close()
    # a run still waiting for its approval, planning the same files again
    started = flowdesk(database, "run", "tidy", "--folder", str(other))
    assert started.returncode == 0, started.stderr
    rids["live"] = started.stdout.splitlines()[0]
    forget_0007(database)

    planned = [(f"f{i}.txt", "planned", None) for i in range(3)]
    before = moves(database, tmp_path)
    assert before[rids["timed"]] == sorted([("big.iso.part", "skipped", PARTIAL), *planned])
    assert before[rids["other"]] == [(f"f{i}.txt", "planned", None) for i in range(2)]
    assert before[rids["live"]] == [(f"f{i}.txt", "planned", None) for i in range(2)]

    applied = flowdesk(database, "db", "apply")
    assert applied.returncode == 0, applied.stderr
    assert f"applied domain/{FILE}" in applied.stdout
    after = moves(database, tmp_path)
    assert after[rids["timed"]] == sorted(
        [("big.iso.part", "skipped", PARTIAL)]
        + [(f"f{i}.txt", "skipped", TIMED_OUT) for i in range(3)]
    )
    assert after[rids["other"]] == [(f"f{i}.txt", "skipped", TIMED_OUT) for i in range(2)]
    assert after[rids["live"]] == before[rids["live"]]  # a waiting run's plan is untouched
    again = flowdesk(database, "db", "apply")
    assert again.returncode == 0 and "applied domain/" not in again.stdout, again.stdout
