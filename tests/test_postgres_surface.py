"""The user's surface on PostgreSQL: doctor and export."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

pytestmark = pytest.mark.postgres


class S(BaseModel):
    text: str = ""


def _flow():
    from desktop_app.flow import FlowBuilder

    return (
        FlowBuilder("texty", S)
        .step("one", lambda s: {"text": 'back\\slash "quoted"\nnew line \u00e9'})
        .chain()
        .compile()
    )


def test_doctor_reports_the_servers_durability_and_schema(pg_url, pg_server):
    from desktop_app.store.postgres.doctor import postgres_checks

    checks = {what: (ok, detail) for ok, what, detail in postgres_checks(pg_url, workers=2)}
    assert checks["server"][0] is True and checks["server"][1].startswith("PostgreSQL ")
    assert checks["schema"] == (True, "all applied")
    assert checks["primary"][0] is True
    # test clusters run with fsync=off; synchronous_commit depends on who
    # started the server (the tests' own cluster: off; .ci/postgres.sh: on)
    assert checks["fsync"][0] is False and "crash" in checks["fsync"][1]
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
    sync = row[0] if row else ""
    expected = True if sync in ("on", "remote_apply", "remote_write") else None
    assert checks["synchronous_commit"] == (
        expected,
        sync
        if expected
        else f"{sync} (a server crash can lose the last commits; a finished step may rerun)",
    )
    assert checks["clock offset"][0] is True
    assert "max_connections" in checks["connections"][1]

    empty = pg_server.empty_database()
    try:
        schema_ok, detail = {w: (o, d) for o, w, d in postgres_checks(empty)}["schema"]
        assert schema_ok is False and "db apply" in detail
    finally:
        pg_server.drop_database(empty)


def test_doctor_reports_an_unreachable_server_without_raising():
    from desktop_app.store.postgres.doctor import postgres_checks

    ((ok, what, detail),) = postgres_checks("postgresql://nobody:secret@127.0.0.1:1/x")
    assert (ok, what) == (False, "database")
    assert "secret" not in detail  # the password is redacted


def test_export_reads_postgres_with_copy_json_and_csv(pg_url, pg_store, tmp_path, capsys):
    import csv

    from desktop_app.export import main
    from desktop_app.flow import Engine

    engine = Engine(pg_store, flows=[_flow()])
    res = engine.run("texty", {})
    assert res.status == "completed"
    import psycopg

    with psycopg.connect(pg_url) as conn:
        stored = conn.execute(
            "SELECT state FROM flowdesk.checkpoints WHERE run_id=%s AND revision=1", (res.run_id,)
        ).fetchone()[0]
    assert "\\\\" in stored and '\\"' in stored  # the codec escaped the backslash and quotes

    assert main([pg_url, str(tmp_path / "j"), "--table", "runs", "--table", "checkpoints"]) == 0
    runs = json.loads((tmp_path / "j" / "runs.json").read_text())
    cps = json.loads((tmp_path / "j" / "checkpoints.json").read_text())
    assert [r["run_id"] for r in runs] == [res.run_id]
    from desktop_app.export import iso_time

    assert runs[0]["created_at"] == iso_time(pg_store.get_run(res.run_id).created_at)
    assert len(cps) == 2
    # the codec text comes out exactly as stored (backslashes, quotes, newlines)
    assert cps[1]["state"] == stored

    assert main([pg_url, str(tmp_path / "c"), "--format", "csv"]) == 0
    with (tmp_path / "c" / "checkpoints.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["revision"]) for r in rows] == [0, 1]
    assert rows[1]["state"] == stored
    out = capsys.readouterr().out
    assert "checkpoints: 2 rows" in out
