"""A checkpoint appended on SQLite is read back as stored, whatever its
writer does with it afterwards (a kill test for a mutant of
``SqliteCheckpointStore._append`` in ``store/sqlite/store.py``).

A writer that does not give its checkpoint up (``AppendRequest.given``
unset: ``store.append``) may change the checkpoint's state after the
append. The store keeps its own copy of the latest revision (its cache, the
base of the next revision's delta); caching the writer's object instead
let that later change show in ``latest`` and in the rows written after it,
a state that was never stored.

Every store is a real SQLite file in ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord
from desktop_app.store.sqlite.store import open_store


def _cp(revision: int, items: list[str]) -> Checkpoint:
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint(
        "r1",
        revision,
        "running",
        {"items": items, "n": revision},
        {"a": rec},
        ("a",),
        float(revision + 1),
        "a",
    )


def test_a_checkpoint_changed_by_its_writer_after_the_append_reads_back_as_stored(
    db_path: Path,
):
    store = open_store(db_path)
    try:
        store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, []))
        cp1 = _cp(1, ["a"])
        store.append(cp1)
        cp1.state["items"].append("not stored")  # the writer reuses its own objects
        cp1.state["n"] = 99
        assert store.latest("r1").state == {"items": ["a"], "n": 1}
        # the next revision's delta is taken against the stored revision 1
        store.append(_cp(2, ["a", "b"]))
        assert store.latest("r1").state == {"items": ["a", "b"], "n": 2}
    finally:
        store.close()
    fresh = open_store(db_path)
    try:
        assert fresh.get_checkpoint("r1", 1).state == {"items": ["a"], "n": 1}
        assert fresh.latest("r1").state == {"items": ["a", "b"], "n": 2}
    finally:
        fresh.close()
