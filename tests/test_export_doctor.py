"""`flowdesk export` (sqlite-utils, its own process) and `flowdesk doctor`."""

from __future__ import annotations

import json
import os

from tests.cli_support import flowdesk
from tests.digest_corpus import make_corpus


def test_export_json_and_csv_in_a_process_without_apsw(tmp_path):
    db = tmp_path / "f.db"
    make_corpus(tmp_path / "docs", 8)
    assert flowdesk(db, "db", "apply").returncode == 0
    assert (
        flowdesk(
            db,
            "run",
            "digest",
            "--folder",
            str(tmp_path / "docs"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ).returncode
        == 0
    )
    out = flowdesk(db, "export", "--out", str(tmp_path / "json"))
    assert out.returncode == 0, out.stderr
    runs = json.loads((tmp_path / "json" / "runs.json").read_text())
    assert len(runs) == 1 and runs[0]["status"] == "completed"
    files = json.loads((tmp_path / "json" / "digest_files.json").read_text())
    assert len(files) == 8
    cps = json.loads((tmp_path / "json" / "checkpoints.json").read_text())
    assert [c["revision"] for c in cps] == list(range(len(cps)))
    csv_out = flowdesk(
        db, "export", "--out", str(tmp_path / "csv"), "--format", "csv", "--table", "runs"
    )
    assert csv_out.returncode == 0
    assert (tmp_path / "csv" / "runs.csv").read_text().startswith("run_id,")
    missing = flowdesk(db, "export", "--out", str(tmp_path / "x"), "--table", "nope")
    assert missing.returncode != 0 and "no table nope" in missing.stderr


def test_doctor_reports_each_check(tmp_path):
    db = tmp_path / "f.db"
    absent = flowdesk(db, "doctor")
    assert absent.returncode == 1 and "BAD  database" in absent.stdout
    assert flowdesk(db, "db", "apply").returncode == 0
    out = flowdesk(
        db,
        "doctor",
        env={"FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9/v1", "FLOWDESK_MODEL__MODEL": "m"},
    )
    for check in (
        "file mode          0600",
        "schema             all applied",
        "journal mode       wal",
        "synchronous        FULL",
        "quick_check        ok",
        "schema objects     all present",
        "free disk",
        "keyring",
    ):
        assert check in out.stdout, out.stdout
    assert "BAD  model provider" in out.stdout and out.returncode == 1
    # no keyring in tests: the doctor names where a key can go instead
    assert "FLOWDESK_MODEL__API_KEY environment variable" in out.stdout
    os.chmod(db, 0o644)
    loose = flowdesk(db, "doctor")
    assert "BAD  file mode          0644" in loose.stdout


def test_doctor_names_a_table_dropped_by_hand(tmp_path):
    """A Flowdesk table dropped outside Flowdesk (its schema records intact):
    every command that needs it failed with "no such table" and `db apply`
    said the schema was up to date; the doctor said all was well (a
    tryout). It names what is missing and says to restore a backup."""
    import sqlite3

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE waits")
    conn.commit()
    conn.close()
    out = flowdesk(db, "doctor")
    assert out.returncode == 1, out.stdout
    (line,) = [x for x in out.stdout.splitlines() if "schema objects" in x]
    assert line.startswith("BAD  schema objects     missing index waits_deadline, "), line
    assert "table waits: dropped outside Flowdesk" in line and "from a backup" in line, line


def test_doctor_names_a_column_dropped_and_the_schema_records_dropped(tmp_path):
    """A second tryout: a dropped column and a table of the wrong shape went
    unseen; a dropped ledger made `runs` say to run `db apply`, which failed
    with "table runs already exists". The column is named; the ledger's loss
    is said by every command, `db apply` included, which changes nothing."""
    import sqlite3

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE digest_files DROP COLUMN kind")
    conn.execute("DROP INDEX outbox_status")
    conn.execute("DROP TABLE outbox")
    conn.execute("CREATE TABLE outbox(x)")
    conn.commit()
    out = flowdesk(db, "doctor")
    (line,) = [x for x in out.stdout.splitlines() if "schema objects" in x]
    assert "column digest_files.kind" in line and "column outbox.intent_id" in line, line
    assert "index outbox_status" in line and out.returncode == 1

    conn.execute("DROP TABLE flowdesk_schema_ledger")
    conn.commit()
    conn.close()
    lost = "holds Flowdesk's tables but not its record of the schema applied"
    for args in (("doctor",), ("runs",), ("db", "apply")):
        said = flowdesk(db, *args)
        assert said.returncode == 1, (args, said.stdout, said.stderr)
        assert lost in said.stdout + said.stderr, (args, said.stdout, said.stderr)
        assert "already exists" not in said.stderr and f"--db {db} db apply" not in said.stderr


def _tidy_in(db, folder, scope: str) -> str:
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    started = flowdesk(db, "--scope", scope, "run", "tidy", "--folder", str(folder))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    assert flowdesk(db, "--scope", scope, "answer", run_id, "yes").returncode == 0
    return run_id


def test_export_writes_only_the_runs_of_the_scope_asked(tmp_path):
    """A user's report: `export --scope work` wrote the runs of every scope.
    It writes the runs `runs --scope work` lists, and their checkpoints,
    outbox intents and tidy rows; nothing of the other scope."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    home = _tidy_in(db, tmp_path / "home", "default")
    work = _tidy_in(db, tmp_path / "work", "work")
    for scope, mine, other in (("work", work, home), ("default", home, work)):
        listed = json.loads(flowdesk(db, "--scope", scope, "runs", "-o", "json").stdout)
        assert [r["run_id"] for r in listed] == [mine]
        out = tmp_path / f"export-{scope}"
        done = flowdesk(db, "--scope", scope, "export", "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert f"(the runs of scope '{scope}')" in done.stdout
        assert "1 rows" not in done.stdout and "runs: 1 row\n" in done.stdout
        for table in ("runs", "checkpoints", "outbox", "tidy_moves"):
            rows = json.loads((out / f"{table}.json").read_text())
            assert rows and {r["run_id"] for r in rows} == {mine}, table
        assert other not in "".join(p.read_text() for p in out.iterdir())


def test_export_refuses_a_folder_holding_the_other_format(tmp_path):
    db, out = tmp_path / "f.db", tmp_path / "export"
    assert flowdesk(db, "db", "apply").returncode == 0
    _tidy_in(db, tmp_path / "home", "default")
    assert flowdesk(db, "export", "--out", str(out), "--format", "csv").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    mixed = flowdesk(db, "export", "--out", str(out), "--format", "json")
    assert mixed.returncode == 2, mixed.stdout + mixed.stderr
    assert f"{out} holds an export in csv (agent_messages.csv" in mixed.stderr
    assert "nothing was written" in mixed.stderr and "export to an empty folder" in mixed.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no .json written
    again = flowdesk(db, "export", "--out", str(out), "--format", "csv")  # same format: fine
    assert again.returncode == 0, again.stderr
