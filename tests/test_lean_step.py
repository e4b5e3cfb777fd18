"""The lean step path (issue 31): what it skips must not change what a run
stores, reads back or tells its subscribers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.protocol import StepRecord
from desktop_app.store.rows import step_json
from desktop_app.store.sqlite.store import open_store


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


class Items(BaseModel):
    items: list[str] = []
    n: int = 0


KEPT: list[str] = []


def test_a_step_changing_in_place_what_it_returned_earlier_changes_nothing_stored(
    db_path: Path,
):
    """The engine gives its encoded state to the store uncopied
    (``AppendRequest.given``): a list a step returned and later changes in
    place must change neither the store's cached latest checkpoint nor the
    file."""
    KEPT[:] = ["a"]

    def first(s: Items) -> dict[str, object]:
        return {"items": KEPT}

    def second(s: Items) -> dict[str, object]:
        KEPT.append("changed in place")
        return {"n": 1}

    def third(s: Items) -> dict[str, object]:
        KEPT.append("again")
        return {"n": 2}

    flow = (
        FlowBuilder("kept", Items).step("first", first).step("second", second).step("third", third)
    ).chain().compile()
    store = open_store(db_path)
    res = Engine(store, flows=[flow]).run("kept", Items())
    assert res.status == "completed"
    assert store.latest(res.run_id).state == {"items": ["a"], "n": 2}
    store.close()
    again = open_store(db_path)
    assert again.latest(res.run_id).state == {"items": ["a"], "n": 2}
    again.close()
