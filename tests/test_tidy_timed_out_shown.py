"""A tidy whose approval timed out: `show` says its files were not moved, and
its error gives the deadline as every deadline reads (local time and UTC).

A tryout found `show` of a timed-out tidy saying `300 planned (waits for
approval)` and `error: wait RUN:approve:0 timed out (deadline
1796497593.291)`. The run is started and shown by the real CLI over a real
SQLite file; the deadline is passed with the engine's injected clock.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flows.tidy import build_tidy_flow
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import flowdesk
from tests.tidy_folders import fill, top_files


@pytest.fixture
def kolkata(monkeypatch):
    """This process's local time zone is Asia/Kolkata (IST, UTC+05:30)."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_timed_out_tidy_says_its_files_were_not_moved_and_when_its_deadline_was(
    tmp_path, kolkata
):
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 30)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting", started.stderr

    clock = ManualClock()
    engine = Engine(open_store(db), flows=[build_tidy_flow()], clock=clock)
    (wait,) = engine.waits(run_id)
    assert wait.deadline_at is not None
    clock.advance(wait.deadline_at - clock.now() - 1)
    assert engine.tick() == 0 and engine.status(run_id).status == "waiting"
    clock.advance(2)  # the approval's deadline passed
    assert engine.tick() == 1 and engine.status(run_id).status == "timed_out"
    engine.store.close()
    assert top_files(folder) == files

    moment = datetime.fromtimestamp(wait.deadline_at, UTC)
    ist = moment.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%Y-%m-%d %H:%M:%S")
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    deadline = f"{ist} IST (local), {utc} (UTC)"

    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].endswith("status timed_out"), lines[0]
    assert f"error: wait {run_id}:approve:0 timed out (deadline {deadline})" in lines
    assert "30 files: 30 not moved (the approval timed out)" in lines
    assert "waits for approval" not in shown.stdout and "planned" not in shown.stdout

    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert as_json["error"] == f"wait {run_id}:approve:0 timed out (deadline {deadline})"
    assert {(f["outcome"], f["says"]) for f in as_json["files"]} == {
        ("timed_out", "not moved (the approval timed out)")
    }


def test_a_timed_out_tidys_moves_are_recorded_never_made_in_its_table(tmp_path):
    """Its ``tidy_moves`` rows said ``planned`` for ever (as `export` shows
    the table, and the app's preview counted them "to move"): the timeout
    now records them ``skipped`` with its reason, in the same commit as the
    run's ``timed_out``; `show` reads the same. A timed-out run's files are
    then planned again by the next tidy, which moves them once approved."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 4)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]

    clock = ManualClock()
    engine = Engine(open_store(db), flows=[build_tidy_flow()], clock=clock)
    (wait,) = engine.waits(run_id)
    assert wait.deadline_at is not None
    clock.advance(wait.deadline_at - clock.now() + 1)  # the approval's deadline passed
    assert engine.tick() == 1 and engine.status(run_id).status == "timed_out"
    engine.store.close()

    out = tmp_path / "exp"
    exported = flowdesk(db, "export", "--out", str(out), "--table", "tidy_moves")
    assert exported.returncode == 0, exported.stderr
    rows = json.loads((out / "tidy_moves.json").read_text())
    assert sorted((r["src"], r["status"], r["reason"]) for r in rows) == [
        (
            str(folder / name),
            "skipped",
            "the approval timed out before an answer; nothing was moved",
        )
        for name in sorted(files)
    ]
    shown = flowdesk(db, "show", run_id)
    assert "4 files: 4 not moved (the approval timed out)" in shown.stdout.splitlines()

    again = flowdesk(db, "run", "tidy", "--folder", str(folder))
    second = again.stdout.splitlines()[0]
    answered = flowdesk(db, "answer", second, "yes")
    assert answered.returncode == 0, answered.stderr
    assert top_files(folder) == {}  # all four moved by the second run
    assert "4 files: 4 moved" in flowdesk(db, "show", second).stdout.splitlines()
