"""A Flowdesk table dropped outside Flowdesk while its schema records say
the schema is applied (by hand, by another program).

Before: on SQLite a command that needed the table said "database error:
no such table: waits" and printed a `resume` that met the same error; on
PostgreSQL it said the database "has no Flowdesk schema; run `db apply`",
whose `db apply` answered "schema is up to date", and PostgreSQL's doctor
found nothing wrong. Now every command says which table is gone, that
`db apply` does not create it again and that a backup gives it back,
prints no `resume` but the `doctor` that lists what is missing, and that
doctor, run as printed, lists it on both databases."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import apsw
import pytest

from tests.cli_support import as_printed, flowdesk

APPROVAL = json.dumps(["desktop_app.examples.approval:approval"])
ENV = {"FLOWDESK_FLOWS": APPROVAL}


def _drop_waits(db: str) -> None:
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DROP TABLE flowdesk.waits CASCADE")
    else:
        conn = apsw.Connection(db)
        conn.execute("DROP TABLE waits")
        conn.close()


def _check_refusal(db: str, shown_db: str) -> None:
    """The commands that need `waits` say it is gone; the doctor they print
    lists it, run as printed."""
    env = {**os.environ, **ENV}
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=ENV)
    assert started.returncode == 1, started.stderr
    run_id = started.stdout.split()[0]
    said = (
        f"flowdesk: the database ({shown_db}) has no table waits, which Flowdesk's schema "
        "creates: it was dropped outside Flowdesk, and `db apply` does not create it again "
        "(its records say the schema is applied); nothing more was written. Restore the "
        "database from a backup (stop every Flowdesk process using it first); `doctor` lists "
        "everything missing."
    )
    assert said in started.stderr, started.stderr
    assert "resume with" not in started.stderr, started.stderr  # it would meet the gap again
    assert f"run {run_id} stopped at its last checkpoint that was saved" in started.stderr
    hint = re.search(r"list what is missing with: (flowdesk .+)", started.stderr)
    assert hint is not None, started.stderr
    assert hint.group(1) == f"flowdesk --db {db} doctor"
    doctor = as_printed(hint.group(1), env)
    assert doctor.returncode == 1, doctor.stdout
    (line,) = [x for x in doctor.stdout.splitlines() if "schema objects" in x]
    assert line.startswith("BAD  schema objects     missing index waits_deadline, "), line
    assert "table waits: dropped outside Flowdesk" in line, line
    # `db apply` still says nothing is pending (the message says why it does not help)
    applied = flowdesk(db, "db", "apply", env=ENV)
    assert applied.returncode == 0 and "up to date" in applied.stdout, applied.stdout
    resumed = flowdesk(db, "resume", run_id, env=ENV)  # the same words, never "no schema"
    assert resumed.returncode == 1 and "has no table waits" in resumed.stderr, resumed.stderr


@pytest.mark.scenario("S124")
def test_a_dropped_table_is_said_on_sqlite_and_its_doctor_lists_it(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    assert flowdesk(db, "db", "apply").returncode == 0
    _drop_waits(db)
    _check_refusal(db, db)


@pytest.mark.postgres
@pytest.mark.scenario("S124")
def test_a_dropped_table_is_said_on_postgres_and_its_doctor_lists_it(pg_url: str) -> None:
    from desktop_app.store.migrations import PG_PROBE_SCHEMA

    intact = flowdesk(pg_url, "doctor")
    assert "ok   schema objects     all present" in intact.stdout, intact.stdout
    _drop_waits(pg_url)
    _check_refusal(pg_url, pg_url)
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:  # the doctor left nothing behind
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (PG_PROBE_SCHEMA,)
        ).fetchone()
        assert left == (0,)
        # a table dropped with CASCADE takes other tables' foreign keys: named too
        conn.execute("DROP TABLE flowdesk.runs CASCADE")
    doctor = flowdesk(pg_url, "doctor")
    (line,) = [x for x in doctor.stdout.splitlines() if "schema objects" in x]
    assert "constraint checkpoints.checkpoints_run_id_fkey" in line, line
    assert "table runs" in line and "constraint waits." not in line, line  # waits went first


def test_an_export_without_a_dropped_table_says_it_is_not_whole(tmp_path: Path) -> None:
    """A tryout: `export` left a dropped table out without a word (exit 0).
    It writes every other table, says which one the database lacks and
    exits 1; the doctor it names, run as printed, lists it."""
    db = str(tmp_path / "f.db")
    assert flowdesk(db, "db", "apply").returncode == 0
    _drop_waits(db)
    out = tmp_path / "exp"
    done = flowdesk(db, "export", "--out", str(out))
    assert done.returncode == 1, done.stderr
    assert (out / "runs.json").exists() and not (out / "waits.json").exists()
    said = re.search(
        r"flowdesk export: the database has no table waits, which Flowdesk's schema creates, "
        r"so the export holds every other table and is not whole; `(flowdesk [^`]+)` says what "
        r"is missing and what to do",
        done.stderr,
    )
    assert said is not None, done.stderr
    doctor = as_printed(said.group(1), dict(os.environ))
    assert "table waits: dropped outside Flowdesk" in doctor.stdout, doctor.stdout
    # asked for by name, the other tables are a whole export
    assert flowdesk(db, "export", "--out", str(out), "--table", "runs").returncode == 0


@pytest.mark.postgres
def test_an_export_of_a_database_whose_schema_was_dropped_writes_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    """A tryout: with the whole schema dropped, `export` wrote a manifest of
    no tables, said "written to", then that the export was not whole. It
    writes nothing, and the doctor it names says to apply the schema."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA flowdesk CASCADE")
    out = tmp_path / "exp"
    done = flowdesk(pg_url, "export", "--out", str(out))
    assert done.returncode == 1, done.stderr
    assert "written to" not in done.stdout, done.stdout
    assert not out.exists() or not any(out.iterdir())
    said = re.search(
        r"flowdesk export: the database holds none of Flowdesk's tables \(its schema was "
        r"dropped, or never applied\); nothing was written: `(flowdesk [^`]+)` says what to do",
        done.stderr,
    )
    assert said is not None, done.stderr
    doctor = as_printed(said.group(1), dict(os.environ))
    assert "db apply" in doctor.stdout, doctor.stdout


def test_only_flowdesk_tables_are_taken_for_dropped_ones() -> None:
    """A step's own SQL on a table of its own keeps SQLite's words: only a
    table the shipped schema creates is said to be dropped outside Flowdesk."""
    from desktop_app.store.migrations import dropped_table

    assert dropped_table("no such table: waits") == "waits"
    assert dropped_table("no such table: main.outbox") == "outbox"
    assert dropped_table('relation "flowdesk.runs" does not exist') == "runs"
    assert dropped_table('relation "checkpoints" does not exist') == "checkpoints"
    assert dropped_table("no such table: my_orders") is None
    assert dropped_table('relation "my_orders" does not exist') is None
    assert dropped_table("no such column: waits") is None
    assert dropped_table("") is None
