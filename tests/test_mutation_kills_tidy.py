"""The domain rows of the ``tidy`` flow (``desktop_app.store.domain.tidy``),
on both SQL stores: what each write leaves in ``tidy_moves`` and what each
query returns, row by row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from desktop_app.store.domain.tidy import (
    TidyMove,
    mark_queued,
    move_by_key,
    moves_of_run,
    next_planned,
    record_outcome,
    record_plan,
    skip_planned,
)
from desktop_app.store.protocol import Checkpoint, RunRecord


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    s = request.getfixturevalue("sqlite_store" if request.param == "sqlite" else "pg_store")
    for run_id in ("r1", "r2"):
        s.create_run(
            RunRecord(run_id, "tidy", "v1", "running", 0, 1000.0, 1000.0),
            Checkpoint(run_id, 0, "running", {}, {}, (), 1000.0),
        )
    yield s


A = TidyMove("/f/a.jpg", "/f/Images/2026-01/a.jpg", "images", "2026-01")
B = TidyMove("/f/b.txt", None, "other", "2026-02", "skipped", "left in place")
C = TidyMove("/f/c.pdf", "/f/Documents/2026-03/c.pdf", "documents", "2026-03")


def _plan(store: Any) -> None:
    store.write(record_plan("r1", [C, A, B]))
    store.write(record_plan("r2", [TidyMove("/g/z.mp3", "/g/Audio/z.mp3", "audio", "2025-12")]))


def test_a_plan_is_stored_row_by_row_and_read_back_in_source_order(store):
    _plan(store)
    assert store.query(moves_of_run("r1")) == [A, B, C]
    assert store.query(moves_of_run("nobody")) == []


def test_a_plan_written_again_replaces_the_runs_rows_only(store):
    _plan(store)
    store.write(record_plan("r1", [B]))
    assert store.query(moves_of_run("r1")) == [B]
    assert [m.src for m in store.query(moves_of_run("r2"))] == ["/g/z.mp3"]


def test_next_planned_is_the_first_planned_row_by_source(store):
    _plan(store)
    assert store.query(next_planned("r1")) == A
    store.write(mark_queued("r1", A.src, "key-a"))
    assert store.query(next_planned("r1")) == C  # B is skipped, not planned
    store.write(mark_queued("r1", C.src, "key-c"))
    assert store.query(next_planned("r1")) is None


def test_mark_queued_records_the_intent_key_of_a_planned_row_only(store):
    _plan(store)
    store.write(mark_queued("r1", A.src, "key-a"))
    store.write(mark_queued("r1", A.src, "key-again"))  # already queued: unchanged
    store.write(mark_queued("r1", B.src, "key-b"))  # skipped: unchanged
    store.write(mark_queued("r2", A.src, "key-x"))  # another run's source: nothing
    assert store.query(moves_of_run("r1")) == [
        TidyMove(A.src, A.dst, A.kind, A.month, "queued", None, "key-a"),
        B,
        C,
    ]
    assert store.query(move_by_key("key-a")) == TidyMove(
        A.src, A.dst, A.kind, A.month, "queued", None, "key-a"
    )
    assert store.query(move_by_key("key-again")) is None
    assert store.query(move_by_key("key-b")) is None


def test_skip_planned_skips_the_runs_planned_rows_with_the_reason(store):
    _plan(store)
    store.write(mark_queued("r1", A.src, "key-a"))
    store.write(skip_planned("r1", "not approved"))
    assert store.query(moves_of_run("r1")) == [
        TidyMove(A.src, A.dst, A.kind, A.month, "queued", None, "key-a"),
        B,  # keeps its own reason
        TidyMove(C.src, C.dst, C.kind, C.month, "skipped", "not approved"),
    ]
    assert store.query(moves_of_run("r2"))[0].status == "planned"


def test_record_outcome_moved_clears_the_reason_and_sticks(store):
    _plan(store)
    store.write(mark_queued("r1", A.src, "key-a"))
    store.write(mark_queued("r1", C.src, "key-c"))
    store.write(record_outcome("key-c", False, "destination exists", status="refused"))
    assert store.query(move_by_key("key-c")).status == "refused"
    store.write(record_outcome("key-c", True))
    store.write(record_outcome("key-a", True))
    store.write(record_outcome("key-a", False, "file vanished"))  # moved stays moved
    assert store.query(moves_of_run("r1")) == [
        TidyMove(A.src, A.dst, A.kind, A.month, "moved", None, "key-a"),
        B,
        TidyMove(C.src, C.dst, C.kind, C.month, "moved", None, "key-c"),
    ]


def test_record_outcome_not_moved_stores_status_and_reason(store):
    _plan(store)
    store.write(mark_queued("r1", A.src, "key-a"))
    store.write(record_outcome("key-a", False, "source changed"))
    assert store.query(move_by_key("key-a")) == TidyMove(
        A.src, A.dst, A.kind, A.month, "skipped", "source changed", "key-a"
    )
    store.write(record_outcome("key-a", False, "symbolic link", status="refused"))
    assert store.query(move_by_key("key-a")) == TidyMove(
        A.src, A.dst, A.kind, A.month, "refused", "symbolic link", "key-a"
    )


@pytest.mark.parametrize("status", ["moved", "planned", "queued", ""])
def test_record_outcome_refuses_a_status_other_than_skipped_or_refused(status):
    with pytest.raises(ValueError) as err:
        record_outcome("key", False, "r", status=status)
    assert str(err.value) == f"status must be 'skipped' or 'refused', not {status!r}"
