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
        "free disk",
        "keyring",
    ):
        assert check in out.stdout, out.stdout
    assert "BAD  model provider" in out.stdout and out.returncode == 1
    os.chmod(db, 0o644)
    loose = flowdesk(db, "doctor")
    assert "BAD  file mode          0644" in loose.stdout
