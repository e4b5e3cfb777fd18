"""The store's one write-transaction helper, ``_Write`` (kill tests for
mutants of ``_Write.__enter__``/``__exit__`` in ``store/sqlite/store.py``):
after a full disk, the first write that commits once space is back (a new
run, not only a step's append) gives the WAL's space back.

Every store is a real SQLite file in ``tmp_path``; the full disk is
``tests/power_loss_vfs.py``'s.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from desktop_app.errors import DiskFullError
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord
from desktop_app.store.sqlite.store import open_store
from tests.power_loss_vfs import PowerLossVFS, wal_size


def _cp(run_id: str, revision: int) -> Checkpoint:
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint(
        run_id, revision, "running", {"n": revision}, {"a": rec}, ("a",), revision + 1.0, "a"
    )


def _run(run_id: str) -> RunRecord:
    return RunRecord(run_id, "flow", "v1", "running", 0, 1.0, 1.0)


def test_a_new_run_once_space_is_back_after_a_full_disk_gives_the_wal_back(db_path: Path):
    """A step's append meets a full disk (``DiskFullError``, nothing
    saved); the user frees space and starts another run: that run's
    creation, the first commit since, truncates the WAL the full disk left
    (its space goes back to the disk now, not at some later append)."""
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    store = open_store(db_path, vfs=vfs.name)
    try:
        store.create_run(_run("r1"), _cp("r1", 0))
        vfs.full_after_bytes, vfs.free = vfs.written, False  # the disk is full
        big = dataclasses.replace(_cp("r1", 1), state={"n": 1, "pad": "p" * 20_000})
        with pytest.raises(DiskFullError):
            store.append(big)
        assert store.get_run("r1").revision == 0
        assert wal_size(db_path) > 0
        vfs.free = True  # the user frees space
        store.create_run(_run("r2"), _cp("r2", 0))
        assert wal_size(db_path) == 0
        assert store.get_run("r2").revision == 0
        store.create_run(_run("r3"), _cp("r3", 0))
        assert wal_size(db_path) > 0  # once: later commits leave the WAL to SQLite
    finally:
        store.close()
        vfs.unregister()
