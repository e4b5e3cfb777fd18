"""`tidy` from the command line: plan, approve with `flowdesk answer`, moves delivered."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import flowdesk


def test_tidy_approved_from_the_cli_moves_files_and_writes_undo(tmp_path):
    db, dl = tmp_path / "f.db", tmp_path / "Downloads"
    dl.mkdir()
    (dl / "photo.jpg").write_bytes(b"jpg")
    (dl / "paper.pdf").write_bytes(b"pdf")
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(dl)}))
    assert started.returncode == 0 and started.stdout.strip().endswith("waiting")
    run_id = started.stdout.splitlines()[0]  # the run id comes first
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting"
    assert "move 2 files" in flowdesk(db, "waiting").stdout
    answered = flowdesk(db, "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stderr
    assert "2 outbox intent(s) delivered" in answered.stdout
    moved = sorted(
        p.relative_to(dl).as_posix()
        for p in dl.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    assert [m.split("/")[0] for m in moved] == ["Documents", "Images"]
    undo = json.loads(next(dl.glob(".flowdesk-tidy-undo-*.json")).read_text())
    assert sorted(Path(u["to"]).name for u in undo) == ["paper.pdf", "photo.jpg"]
