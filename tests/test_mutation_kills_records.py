"""The stored forms of step records, waits and checkpoint ids
(``store/records.py``). They are what every checkpoint row already on disk
holds, so the key names are a file format: a renamed key loses that field
of every existing run, and the defaults read rows written before a field
existed. The round trip through each store is a conformance check."""

from __future__ import annotations

import pytest

from desktop_app.store.records import (
    StepRecord,
    Wait,
    checkpoint_id,
    parse_checkpoint_id,
)
from desktop_app.store.rows import step_json

STEP_ROW = {
    "step_id": "fetch",
    "status": "failed",
    "attempts": 3,
    "started_at": 10.0,
    "finished_at": 11.5,
    "error": "boom",
    "error_type": "ValueError",
    "iteration": 4,
    "duration_ms": 1500.0,
    "next_retry_at": 40.0,
}
WAIT_ROW = {
    "wait_id": "r:ask:0",
    "step_id": "ask",
    "kind": "input",
    "created_at": 12.0,
    "name": None,
    "key": None,
    "prompt": {"question": "Approve?"},
    "deadline_at": 99.5,
    "continuation": {"page": 2},
}


def test_a_step_record_is_stored_under_these_keys():
    rec = StepRecord.from_json(STEP_ROW)
    assert rec == StepRecord(
        "fetch", "failed", 3, 10.0, 11.5, "boom", "ValueError", 4, 1500.0, 40.0
    )
    assert rec.to_json() == STEP_ROW


def test_a_stored_step_leaves_out_its_id_and_its_defaults():
    stored = step_json(StepRecord("fetch", "completed", attempts=1, started_at=1.0))
    assert stored == {"status": "completed", "attempts": 1, "started_at": 1.0}
    assert step_json(StepRecord.from_json(STEP_ROW)) == {
        k: v for k, v in STEP_ROW.items() if k != "step_id"
    }


def test_a_step_row_written_before_attempts_and_iterations_were_kept_reads_as_zero():
    rec = StepRecord.from_json({"step_id": "old", "status": "completed"})
    assert (rec.attempts, rec.iteration) == (0, 0)
    assert (rec.error, rec.error_type, rec.next_retry_at, rec.duration_ms) == (None,) * 4


def test_a_wait_is_stored_under_these_keys():
    wait = Wait.from_json(WAIT_ROW)
    assert wait == Wait(
        "r:ask:0", "ask", "input", 12.0, None, None, {"question": "Approve?"}, 99.5, {"page": 2}
    )
    assert wait.to_json() == WAIT_ROW
    signal = Wait.from_json({**WAIT_ROW, "kind": "signal", "name": "go", "key": "k"})
    assert (signal.name, signal.key) == ("go", "k")


def test_a_checkpoint_id_splits_at_its_last_colon():
    assert checkpoint_id("a:b", 3) == "a:b:3"
    assert parse_checkpoint_id("a:b:3") == ("a:b", 3)
    assert parse_checkpoint_id("5f2c:12") == ("5f2c", 12)
    for bad in ("5f2c", ":3", "5f2c:x", "5f2c:"):
        with pytest.raises(ValueError, match="expected '<run_id>:<revision>'"):
            parse_checkpoint_id(bad)
