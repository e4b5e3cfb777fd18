"""A run's creation and a batch on SQLite (kill tests for mutants of
``create_run``, ``_create`` and ``append_batch`` in
``store/sqlite/store.py``): the domain writes a run is created with, the
checkpoint a creation accepts, which error a taken run id gets when the
new run also has a flow key, and a full disk in the middle of a batch on
a store over a plain apsw connection (no write gate).

Every store is a real SQLite file in ``tmp_path``; the full disk is
``tests/power_loss_vfs.py``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from desktop_app.errors import DiskFullError, DuplicateFlowKeyError, RevisionConflictError
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.power_loss_vfs import PowerLossVFS, wal_size


def _cp(run_id: str, revision: int, state: dict[str, Any] | None = None) -> Checkpoint:
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint(
        run_id,
        revision,
        "running",
        {"n": revision} if state is None else state,
        {"a": rec},
        ("a",),
        revision + 1.0,
        "a",
    )


def _run(run_id: str, flow_key: str | None = None) -> RunRecord:
    return RunRecord(run_id, "flow", "v1", "running", 0, 1.0, 1.0, flow_key=flow_key)


def test_a_run_created_with_domain_writes_stores_them_with_it(db_path: Path):
    """``create_run(run, first, writes)``: the domain rows commit with the
    run's revision 0 (a digest's first file, say), read back afterwards."""

    def first_file(tx: Any) -> None:
        tx.execute(
            "INSERT INTO digest_files (run_id, path, kind, size_bytes) VALUES (?, ?, ?, ?)",
            ("r1", "notes/a.md", "markdown", 12),
        )

    store = open_store(db_path)
    try:
        store.create_run(_run("r1"), _cp("r1", 0), [first_file])
        rows = store.query(
            lambda tx: tx.fetchall("SELECT path, kind, size_bytes FROM digest_files")
        )
        assert [tuple(r) for r in rows] == [("notes/a.md", "markdown", 12)]
        assert store.get_run("r1").revision == 0
    finally:
        store.close()


@pytest.mark.parametrize(
    "first", [_cp("r1", 1), _cp("r2", 0)], ids=["revision-1", "another-runs-checkpoint"]
)
def test_a_creation_refuses_anything_but_the_runs_own_revision_0(db_path: Path, first):
    """A caller of the store API that passes the wrong checkpoint is told
    what the creation needs, and nothing is stored."""
    store = open_store(db_path)
    try:
        with pytest.raises(ValueError) as err:
            store.create_run(_run("r1"), first)
        assert str(err.value) == "create_run needs the run's revision-0 checkpoint"
        assert store.list_runs() == []
    finally:
        store.close()


def test_a_taken_run_id_with_a_new_flow_key_is_the_taken_id_not_a_duplicate_key(db_path: Path):
    """Creating run ``r1`` again, now with a flow key no live run holds: the
    error names the taken run id (pick another), not a duplicate flow key;
    a new run id with a live run's flow key is the duplicate key."""
    store = open_store(db_path)
    try:
        store.create_run(_run("r1", flow_key="k1"), _cp("r1", 0))
        with pytest.raises(RevisionConflictError) as err:
            store.create_run(_run("r1", flow_key="k2"), _cp("r1", 0))
        assert str(err.value) == "run r1 already exists; pick another run id"
        assert not isinstance(err.value, DuplicateFlowKeyError)
        with pytest.raises(DuplicateFlowKeyError) as dup:
            store.create_run(_run("r2", flow_key="k1"), _cp("r2", 0))
        assert str(dup.value) == "a live run of 'flow' with flow key 'k1' exists"
        assert [r.run_id for r in store.list_runs()] == ["r1"]
    finally:
        store.close()


def test_a_full_disk_in_mid_batch_over_a_plain_connection_is_a_full_disk(db_path: Path):
    """A store over the caller's own apsw connection (no write gate): a
    batch larger than SQLite's page cache meets a full disk before its
    COMMIT and SQLite rolls the whole transaction back. The caller is told
    the disk is full (the request's error), not what apsw then says about
    the transaction that is gone ("cannot rollback - no transaction is
    active"); nothing of the batch is saved, and once space is back the
    next batch saves and gives the WAL's space back."""
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    conn = apsw.Connection(str(db_path), vfs=vfs.name)
    store = SqliteCheckpointStore(conn, path=str(db_path))
    try:
        for rid in ("r1", "r2"):
            store.create_run(_run(rid), _cp(rid, 0))
        vfs.full_after_bytes, vfs.free = vfs.written, False  # the disk is full
        big = {"n": 1, "pad": "p" * 1_500_000}  # two of them: more than the 2 MB cache
        with pytest.raises(DiskFullError) as err:
            store.append_batch([AppendRequest(_cp("r1", 1, big)), AppendRequest(_cp("r2", 1, big))])
        assert str(db_path) in str(err.value) and "is full" in str(err.value)
        assert not conn.in_transaction
        assert [store.get_run(r).revision for r in ("r1", "r2")] == [0, 0]
        vfs.free = True  # the user frees space
        got = store.append_batch([AppendRequest(_cp("r1", 1)), AppendRequest(_cp("r2", 1))])
        assert got == [None, None]
        assert wal_size(db_path) == 0
        assert [store.get_run(r).revision for r in ("r1", "r2")] == [1, 1]
    finally:
        conn.close()
        vfs.unregister()
