"""A run whose record (``runs.revision``) was set back outside Flowdesk
below its newest checkpoint: every command read the older checkpoint, and
``resume`` refused with "already saved by another writer", with nothing
that said what was wrong (a new user's tryout, editing the file by hand).
Now ``resume`` points at ``doctor``, and ``doctor`` names the run, its two
revisions, and the replay that goes on from the newest checkpoint, which
works as printed."""

from __future__ import annotations

import os
import re

import apsw
import pytest

from tests.cli_support import as_printed, flowdesk
from tests.delete_flows import FLOWS_ENV

ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def _waiting_run(db) -> str:
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "asked_only", "--input", '{"key": "k1"}', env=ENV)
    assert started.returncode == 0, started.stderr
    return started.stdout.split()[0]


def _set_back(db, run_id: str) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("UPDATE runs SET revision = revision - 1 WHERE run_id = ?", (run_id,))
    finally:
        conn.close()


@pytest.mark.scenario("S129")
def test_a_run_record_set_back_is_named_by_doctor_with_a_replay_that_works(tmp_path) -> None:
    db = tmp_path / "f.db"
    run_id = _waiting_run(db)
    healthy = flowdesk(db, "doctor", env=ENV)
    assert re.search(r"ok\s+run records\s+no run's record is behind", healthy.stdout)
    _set_back(db, run_id)

    resumed = flowdesk(db, "resume", run_id, env=ENV)
    assert resumed.returncode == 1
    assert "already saved by another writer" in resumed.stderr
    hint = re.search(r"`(flowdesk [^`]*doctor)` checks", resumed.stderr)
    assert hint, resumed.stderr

    doctor = as_printed(hint.group(1), {**os.environ, **ENV}, timeout=60)
    assert doctor.returncode == 1, doctor.stdout
    line = next(ln for ln in doctor.stdout.splitlines() if "run records" in ln)
    assert line.startswith("BAD")
    assert f"run {run_id}: record at revision 0, newest checkpoint 1" in line
    replay = re.search(r"`(flowdesk [^`]*replay [^`]*)`", line)
    assert replay and replay.group(1).endswith(f"replay {run_id}:1"), line
    cancel = re.search(r"`(flowdesk [^`]*cancel [^`]*)`", line)
    assert cancel and cancel.group(1).endswith(f"cancel {run_id}"), line

    again = as_printed(replay.group(1), {**os.environ, **ENV}, timeout=60)
    assert again.returncode == 0, again.stderr
    new_id = again.stdout.split()[0]
    assert new_id != run_id
    # the new run went on from the newest checkpoint: it waits for the question
    shown = flowdesk(db, "show", new_id, env=ENV)
    assert "status waiting" in shown.stdout, shown.stdout

    # the old run ends as printed (it met "saved by another writer" before),
    # without a save: then doctor lists it no more
    ended = as_printed(cancel.group(1), {**os.environ, **ENV}, timeout=60)
    assert ended.returncode == 0, ended.stderr
    shown = flowdesk(db, "show", run_id, env=ENV)
    assert "status canceled" in shown.stdout, shown.stdout
    assert "its record was at revision 0, below its newest checkpoint 1" in shown.stdout
    after = flowdesk(db, "doctor", env=ENV)
    assert re.search(r"ok\s+run records", after.stdout), after.stdout


@pytest.mark.parametrize("n", [7])
def test_doctor_names_the_first_runs_behind_and_counts_the_rest(tmp_path, n: int) -> None:
    db = tmp_path / "f.db"
    ids = [_waiting_run(db)]
    for i in range(n - 1):
        started = flowdesk(db, "start", "asked_only", "--input", f'{{"key": "k{i + 2}"}}', env=ENV)
        ids.append(started.stdout.split()[0])
    for run_id in ids:
        _set_back(db, run_id)
    doctor = flowdesk(db, "doctor", env=ENV)
    line = next(ln for ln in doctor.stdout.splitlines() if "run records" in ln)
    assert f"{n} runs not ended behind their checkpoints" in line
    assert line.count(" replay ") == 5 and line.count(" cancel ") == 5
    # oldest first, the rest listed as these end
    assert [m for m in re.findall(r"run (\w{32}): record", line)] == ids[:5]
    assert "and 2 more runs (listed here as these end)" in line
