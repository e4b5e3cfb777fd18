"""The SQLite checkpoint store's guarantees, each on a real file (store/sqlite/store.py).

What the rest of the suite never checked: a writer whose cached checkpoint
is stale (another connection appended since) still stores the exact state;
the errors a stale writer, a lost lease, a reused intent id, a signal
consumed twice and an unknown run get, word for word; a pending checkpoint
keeps its lease; an edited row names its run and revision, and rows from
before row checksums still load; the checksum rule itself (part of the file
format); deltas instead of full copies; the WAL truncated once space is back
after a full disk (and not otherwise); and what ``open_store`` passes on
(scope, pragmas, busy timeout, ``create``, VFS).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from desktop_app.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    DatabaseOpenError,
    DiskFullError,
    LeaseLostError,
    RevisionConflictError,
    RunLeasedError,
    SchemaMissingError,
    StateNotStorableError,
)
from desktop_app.store.connection import busy_timeout_s, open_connection
from desktop_app.store.protocol import Checkpoint, Intent, Lease, RunRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.power_loss_vfs import PowerLossVFS, wal_size

T0 = 1_000.0


def _run(run_id: str = "r1") -> RunRecord:
    return RunRecord(run_id, "flow", "v1", "running", 0, T0, T0)


def _cp(run_id: str, revision: int, state: dict, status: str = "running", **kw) -> Checkpoint:
    return Checkpoint(
        run_id,
        revision,
        status,  # type: ignore[arg-type]
        state,
        {},
        ("a",),
        T0 + revision,
        step_id="a" if revision else "",
        **kw,
    )


def _edit(db: Path, sql: str, params: tuple = ()) -> None:
    """Change the closed file behind the store's back (another program)."""
    conn = open_connection(db)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


# -- compare-and-append between two connections -----------------------------


def test_a_writer_whose_cached_checkpoint_is_stale_still_stores_the_exact_state(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {"x": 0, "y": 0}))  # a caches revision 0
    b.append(_cp("r1", 1, {"x": 1, "y": 0}))
    # a continues from b's revision 1 (after a takeover): x goes back to 0
    a.append(_cp("r1", 2, {"x": 0, "y": 1}))
    a.close(), b.close()
    fresh = open_store(db_path)
    assert fresh.get_checkpoint("r1", 2).state == {"x": 0, "y": 1}
    assert fresh.get_checkpoint("r1", 1).state == {"x": 1, "y": 0}
    fresh.close()


def test_a_stale_writer_gets_a_conflict_naming_the_latest_revision_and_writes_nothing(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {"n": 0}))
    b.append(_cp("r1", 1, {"n": 1}))
    b.append(_cp("r1", 2, {"n": 2}))
    with pytest.raises(RevisionConflictError) as err:
        a.append(_cp("r1", 1, {"n": 99}))
    assert type(err.value) is RevisionConflictError
    assert str(err.value) == (
        "run r1: revision 1 conflicts with the stored latest revision 2; another writer "
        "got there first. Reload the run and try again."
    )
    assert b.get_checkpoint("r1", 1).state == {"n": 1}
    assert a.latest("r1").state == {"n": 2}
    a.close(), b.close()


def test_a_lost_lease_raises_lease_lost_and_nothing_is_written(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {"n": 0}))
    a.claim("r1", Lease("host:1:a", T0 + 30, issued_at=T0), now=T0)
    # a stalls past its lease; b takes the run over
    b.claim("r1", Lease("host:2:b", T0 + 61, T0 + 31, takes_over="host:1:a"), now=T0 + 31)
    with pytest.raises(LeaseLostError) as err:
        a.append(_cp("r1", 1, {"n": 1}), lease=Lease("host:1:a", T0 + 60, issued_at=T0 + 30))
    assert str(err.value) == (
        "run r1 is held by host:2:b, not by this process (host:1:a): it took the run over; "
        "this process stops executing it."
    )
    run = b.get_run("r1")
    assert (run.revision, run.lease_owner) == (0, "host:2:b")
    assert [i.revision for i in b.history("r1")] == [0]
    a.close(), b.close()


def test_a_pending_checkpoint_keeps_its_writers_lease(db_path):
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(_run(), _cp("r1", 0, {"n": 0}))
    lease = Lease("host:1:a", T0 + 30, issued_at=T0)
    a.claim("r1", lease, now=T0)
    a.append(_cp("r1", 1, {"n": 1}, status="pending"), lease=lease)
    assert b.get_run("r1").lease_owner == "host:1:a"
    with pytest.raises(RunLeasedError):  # still a's: no second process runs it
        b.claim("r1", Lease("host:2:b", T0 + 40, issued_at=T0 + 10), now=T0 + 10)
    a.append(_cp("r1", 2, {"n": 2}, status="completed"), lease=lease)
    assert b.get_run("r1").lease_owner is None  # a finished run holds no lease
    a.close(), b.close()


def test_an_intent_id_saved_before_is_a_conflict_and_the_checkpoint_is_not_saved(sqlite_store):
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    s.append(_cp("r1", 1, {"n": 1}), intents=[Intent("k1", "r1", "a", "mail", {"to": "x"})])
    with pytest.raises(RevisionConflictError) as err:
        s.append(_cp("r1", 2, {"n": 2}), intents=[Intent("k1", "r1", "a", "mail", {})])
    assert str(err.value) == (
        "run r1: revision 2 (or one of its outbox intents) was already saved by another writer"
    )
    assert s.get_run("r1").revision == 1


def test_a_signal_consumed_by_one_wait_cannot_be_consumed_by_another(sqlite_store):
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    sid = s.send_signal("approve", "k", {"ok": True}, now=T0)
    s.append(_cp("r1", 1, {"n": 1}), consume=[(sid, "r1:a:0")])
    with pytest.raises(RevisionConflictError) as err:
        s.append(_cp("r1", 2, {"n": 2}), consume=[(sid, "r1:b:0")])
    assert str(err.value) == f"signal {sid} was consumed by another wait first"
    assert s.get_run("r1").revision == 1


def test_appending_to_an_unknown_run_names_it_and_its_scope(sqlite_store):
    with pytest.raises(CheckpointNotFoundError) as err:
        sqlite_store.append(_cp("nope", 1, {}))
    assert str(err.value) == "no run nope in scope 'default'"


def test_state_that_is_not_json_is_refused_naming_the_field_and_the_value_error(sqlite_store):
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    with pytest.raises(StateNotStorableError) as err:
        s.append(_cp("r1", 1, {"n": {1, 2}}))
    assert err.value.field == "n"
    assert "cannot be stored: TypeError: " in str(err.value) and "set" in str(err.value)
    assert s.get_run("r1").revision == 0


def test_a_failed_checkpoints_error_is_stored_with_it(db_path):
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    s.append(_cp("r1", 1, {"n": 1}, status="failed", error="ValueError: bad input"))
    s.close()
    s = open_store(db_path)
    assert s.get_checkpoint("r1", 1).error == "ValueError: bad input"
    s.close()


def test_a_small_change_to_a_large_state_stores_a_delta_not_a_copy(sqlite_store):
    s = sqlite_store
    blob = "x" * 64_000
    s.create_run(_run(), _cp("r1", 0, {"blob": blob, "n": 0}))

    def size(tx) -> int:
        return tx.fetchone("PRAGMA page_count")[0] * tx.fetchone("PRAGMA page_size")[0]

    before = s.query(size)
    for n in range(1, 11):
        s.append(_cp("r1", n, {"blob": blob, "n": n}))
    assert s.query(size) - before < 64_000  # ten full copies would be 640 kB
    assert s.get_checkpoint("r1", 10).state == {"blob": blob, "n": 10}


# -- row checksums ----------------------------------------------------------


def _three_revisions(db: Path) -> None:
    s = open_store(db)
    s.create_run(_run(), _cp("r1", 0, {"n": 0, "note": "café ✓"}))
    s.append(_cp("r1", 1, {"n": 1, "note": "café ✓"}))
    s.append(_cp("r1", 2, {"n": 2, "note": "café ✓"}))
    s.close()


def test_an_edited_row_is_refused_naming_its_run_and_revision(db_path):
    _three_revisions(db_path)
    _edit(db_path, "UPDATE checkpoints SET state=replace(state, '1', '7') WHERE revision=1")
    s = open_store(db_path)
    with pytest.raises(CheckpointCorruptError) as err:
        s.get_checkpoint("r1", 2)  # folds revision 1's delta
    assert (err.value.run_id, err.value.revision) == ("r1", 1)
    assert str(err.value).startswith("checkpoint of run r1 revision 1 was changed outside")
    assert "Restore the file from a backup, or replay the run from revision 0" in str(err.value)
    assert err.value.readable == 0  # the newest revision below the damage that reads back
    assert s.get_checkpoint("r1", 0).state["n"] == 0  # the rows before it still load
    s.close()


def test_rows_written_before_row_checksums_existed_still_load(db_path):
    _three_revisions(db_path)
    _edit(db_path, "UPDATE checkpoints SET checksum=NULL")  # as schema 0007 left old rows
    s = open_store(db_path)
    assert s.get_checkpoint("r1", 2).state == {"n": 2, "note": "café ✓"}
    s.close()


def test_the_row_checksum_is_blake2b_128_of_the_rows_compact_utf8_json(db_path):
    """The rule is part of the file format: rows written by other versions are
    verified with it, so a different rule would make every one look edited."""
    _three_revisions(db_path)
    conn = open_connection(db_path)
    try:
        rows = conn.execute(
            "SELECT run_id, revision, kind, status, step_id, created_at, state, steps, "
            "frontier, progress, error, meta, waits, checksum FROM checkpoints"
        ).fetchall()
    finally:
        conn.close()
    assert len(rows) == 3
    texts = [json.dumps(list(r[:-1]), ensure_ascii=False, separators=(",", ":")) for r in rows]
    assert "café ✓" in texts[0]  # the snapshot: non-ASCII text is hashed as UTF-8
    for row, text in zip(rows, texts, strict=True):
        assert row[-1] == hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


# -- a full disk --------------------------------------------------------------


def test_the_wal_is_truncated_once_space_is_back_after_a_full_disk(db_path):
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    s = open_store(db_path, vfs=vfs.name)
    try:
        s.create_run(_run(), _cp("r1", 0, {"n": 0}))
        assert wal_size(db_path) > 0  # no full disk: the WAL is SQLite's to checkpoint
        vfs.full_after_bytes, vfs.free = vfs.written, False  # the disk is full
        with pytest.raises(DiskFullError) as err:
            s.append(_cp("r1", 1, {"n": 1, "pad": "p" * 20_000}))
        assert vfs.full_errors >= 1 and str(db_path) in str(err.value)
        assert s.get_run("r1").revision == 0
        vfs.free = True  # the user frees space
        s.append(_cp("r1", 1, {"n": 1, "pad": "p" * 20_000}))
        assert wal_size(db_path) == 0  # the first commit gave the WAL's space back
        s.append(_cp("r1", 2, {"n": 2}))
        assert wal_size(db_path) > 0  # once: later commits leave it alone
        assert s.get_checkpoint("r1", 2).state == {"n": 2}
    finally:
        s.close()
        vfs.unregister()


# -- open_store -----------------------------------------------------------------


def test_runs_saved_without_a_scope_are_in_the_default_scope_only(db_path):
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    s.close()
    same = open_store(db_path, scope="default")
    assert [r.run_id for r in same.list_runs()] == ["r1"]
    same.close()
    direct = SqliteCheckpointStore(open_connection(db_path))
    assert direct.get_run("r1").scope == "default"
    direct.close()
    other = open_store(db_path, scope="team-b")
    assert other.list_runs() == []
    with pytest.raises(CheckpointNotFoundError):
        other.get_run("r1")
    other.close()


def test_open_store_passes_its_durability_and_lock_settings_on(db_path):
    def pragma(store, name: str) -> int:
        return store.query(lambda tx: tx.fetchone(f"PRAGMA {name}")[0])

    s = open_store(db_path)
    assert (pragma(s, "synchronous"), pragma(s, "fullfsync")) == (2, 0)  # FULL, off
    assert busy_timeout_s(s.conn) == 10.0
    s.close()
    s = open_store(db_path, synchronous="NORMAL", busy_timeout_s=2.5, fullfsync=True)
    assert (pragma(s, "synchronous"), pragma(s, "fullfsync")) == (1, 1)
    assert busy_timeout_s(s.conn) == 2.5
    s.close()


def test_open_store_without_create_refuses_a_missing_file_and_creates_nothing(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseOpenError):
        open_store(path, create=False)
    assert not path.exists()


def test_a_new_file_without_the_schema_names_the_command_that_applies_it(tmp_path):
    path = tmp_path / "new.db"
    with pytest.raises(SchemaMissingError) as err:
        open_store(path)
    assert f"run `flowdesk --db {path} db apply`" in str(err.value)
    conn = open_connection(path)
    try:
        with pytest.raises(SchemaMissingError) as bare:
            SqliteCheckpointStore(conn)  # no path known: the plain command
        assert "run `flowdesk db apply` to apply it." in str(bare.value)
    finally:
        conn.close()
