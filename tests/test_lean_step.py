"""The lean step path (issue 31): what it skips must not change what a run
stores, reads back or tells its subscribers."""

from __future__ import annotations

import dataclasses

from desktop_app.store.protocol import StepRecord
from desktop_app.store.rows import step_json


def test_step_json_keeps_every_field_a_record_has():
    """``step_json`` names the record's fields one by one: a field added to
    ``StepRecord`` and forgotten there would be silently lost on disk."""
    rec = StepRecord(
        "s",
        "failed",
        attempts=3,
        started_at=1.5,
        finished_at=2.5,
        error="boom",
        error_type="ValueError",
        iteration=4,
        duration_ms=7.25,
        next_retry_at=9.0,
    )
    assert {f.name for f in dataclasses.fields(StepRecord)} - {"step_id"} == set(step_json(rec))
    assert StepRecord.from_json({"step_id": "s", **step_json(rec)}) == rec
    assert step_json(StepRecord("s", "in_progress")) == {"status": "in_progress", "attempts": 0}
