"""S87: a person's answer is bound to what they were shown. A step killed
(SIGKILL, a real process) between the answer and its completion re-executes
in a new process: if it now asks something else (the payload file changed,
as a model asked again may propose another value) it asks again and nothing
runs under the old "yes"; if it asks the same, the answer is reused and the
effect happens once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from desktop_app.store.sqlite.store import _CP_COLUMNS, row_checksum

WORKER = Path(__file__).resolve().parent / "approval_flow_worker.py"


def worker(db: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(WORKER), str(db), str(tmp / "log"), str(tmp / "payload"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def records(tmp: Path) -> list[str]:
    log = tmp / "log"
    return log.read_text().splitlines() if log.exists() else []


def waits(out: str) -> list[tuple[str, dict]]:
    return [
        (line.split(" ", 2)[1], json.loads(line.split(" ", 2)[2]))
        for line in out.splitlines()
        if line.startswith("wait ")
    ]


@pytest.mark.scenario("S87")
def test_a_step_that_asks_something_else_after_a_crash_asks_again(db_path, tmp_path):
    (tmp_path / "payload").write_text("reviewed")
    r = worker(db_path, tmp_path, "start")
    assert r.returncode == 0, r.stderr
    ((first_id, shown),) = waits(r.stdout)
    assert shown == {"question": "Record this value?", "value": "reviewed"}
    r = worker(db_path, tmp_path, "answer", "yes", "--kill-after-answer")
    assert r.returncode == -signal.SIGKILL
    assert records(tmp_path) == []
    (tmp_path / "payload").write_text("changed")  # the re-executed step proposes another value
    r = worker(db_path, tmp_path, "recover")
    assert r.returncode == 0, r.stderr
    assert "status waiting" in r.stdout
    ((again_id, shown),) = waits(r.stdout)
    assert shown == {"question": "Record this value?", "value": "changed"}
    assert again_id != first_id and again_id.startswith(first_id + ".")
    assert records(tmp_path) == []  # the "yes" to 'reviewed' executed nothing
    r = worker(db_path, tmp_path, "answer", "yes")
    assert r.returncode == 0, r.stderr
    assert "status completed" in r.stdout
    assert records(tmp_path) == ["record changed"]


@pytest.mark.scenario("S87")
def test_a_step_that_asks_the_same_after_a_crash_reuses_the_answer_once(db_path, tmp_path):
    (tmp_path / "payload").write_text("reviewed")
    assert worker(db_path, tmp_path, "start").returncode == 0
    r = worker(db_path, tmp_path, "answer", "yes", "--kill-after-answer")
    assert r.returncode == -signal.SIGKILL
    r = worker(db_path, tmp_path, "recover")
    assert r.returncode == 0, r.stderr
    assert "status completed" in r.stdout and waits(r.stdout) == []
    assert records(tmp_path) == ["record reviewed"]


@pytest.mark.scenario("S87")
def test_an_answer_stored_without_a_digest_is_asked_again_not_applied(db_path, tmp_path):
    """A file written before answers were bound holds an answer with no
    digest: it stays readable, and its question is asked again (once), since
    nothing says what the person saw when they gave it."""
    (tmp_path / "payload").write_text("reviewed")
    assert worker(db_path, tmp_path, "start").returncode == 0
    r = worker(db_path, tmp_path, "answer", "yes", "--kill-after-answer")
    assert r.returncode == -signal.SIGKILL
    conn = apsw.Connection(str(db_path))
    # what an older Flowdesk stored: the answer, and no "asked" digests (the
    # rows rewritten with their checksums, as that version would have written them)
    rows = conn.execute(f"SELECT {_CP_COLUMNS} FROM checkpoints WHERE meta LIKE '%asked%'")
    rows = list(rows)
    assert rows
    for row in rows:
        meta = json.loads(row[11])
        assert "yes" in meta["answers"].values()
        del meta["asked"]
        new = (*row[:11], json.dumps(meta, sort_keys=True, separators=(",", ":")), row[12])
        conn.execute(
            "UPDATE checkpoints SET meta=?, checksum=? WHERE run_id=? AND revision=?",
            (new[11], row_checksum(new), row[0], row[1]),
        )
    left = conn.execute("SELECT count(*) FROM checkpoints WHERE meta LIKE '%asked%'").fetchone()
    conn.close()
    assert left == (0,)
    r = worker(db_path, tmp_path, "recover")
    assert r.returncode == 0, r.stderr
    assert "status waiting" in r.stdout
    ((_, shown),) = waits(r.stdout)
    assert shown == {"question": "Record this value?", "value": "reviewed"}
    assert records(tmp_path) == []
    r = worker(db_path, tmp_path, "answer", "yes")
    assert "status completed" in r.stdout
    assert records(tmp_path) == ["record reviewed"]
