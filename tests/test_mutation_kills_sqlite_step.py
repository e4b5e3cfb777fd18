"""A run's creation and a step's append on SQLite through the one transaction
helper (kill tests for mutants of ``SqliteCheckpointStore._transact``,
``_create_in`` and ``_append_in`` in ``store/sqlite/store.py``): what a
run's creation stores on its row (progress, tenant and session, which the
runs list filters by), a step's outbox intent stored with its payload, a
write on a closed store refused as a typed error, and a store over a plain
apsw connection (no write gate) that creates and appends as one from
``open_store`` does.

Every store is a real SQLite file in ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from desktop_app.errors import StoreError
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, Intent, RunRecord, StepRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store


def _cp(revision: int, status: str = "running") -> Checkpoint:
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint(
        "r1", revision, status, {"n": revision}, {"a": rec}, ("a",), float(revision + 1), "a"
    )


def _run(**fields: object) -> RunRecord:
    return RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("lone", [False, True], ids=["create_run", "group-commit-lone"])
def test_a_runs_creation_stores_its_progress_tenant_and_session(db_path: Path, lone: bool):
    """The run's row carries the progress it was created with (done, then
    total) and its context's tenant and session, which ``flowdesk runs
    --tenant/--session`` and the app's filter read; also through the group
    committer's lone request (``append_one``)."""
    store = open_store(db_path)
    run = _run(progress=(1, 4), context={"tenant_id": "acme", "session_id": "s-9"})
    if lone:
        (err,) = store.append_batch([AppendRequest(_cp(0), run=run)])
        assert err is None
    else:
        store.create_run(run, _cp(0))
    store.close()
    fresh = open_store(db_path)
    try:
        assert fresh.get_run("r1").progress == (1, 4)
        assert [r.run_id for r in fresh.list_runs(tenant_id="acme")] == ["r1"]
        assert [r.run_id for r in fresh.list_runs(session_id="s-9")] == ["r1"]
        assert fresh.list_runs(tenant_id="s-9") == fresh.list_runs(session_id="acme") == []
    finally:
        fresh.close()


def test_a_steps_outbox_intent_is_stored_with_its_payload(db_path: Path):
    store = open_store(db_path)
    store.create_run(_run(), _cp(0))
    intent = Intent("r1:a:0:0", "r1", "a", "mail", {"to": "ann@example.com", "n": [1, 2]})
    store.append(_cp(1), intents=[intent])
    store.close()
    fresh = open_store(db_path)
    try:
        (stored,) = fresh.intents(["pending"])
        assert (stored.intent_id, stored.destination) == ("r1:a:0:0", "mail")
        assert stored.payload == {"to": "ann@example.com", "n": [1, 2]}
    finally:
        fresh.close()


@pytest.mark.parametrize("write", ["create_run", "append"])
def test_a_write_on_a_closed_store_is_a_store_error(db_path: Path, write: str):
    """Not apsw's own ``ConnectionClosedError``: the typed error every
    caller handles (the engine, the CLI's exit 1 with its message)."""
    store = open_store(db_path)
    if write == "append":
        store.create_run(_run(), _cp(0))
    store.close()
    with pytest.raises(StoreError) as caught:
        if write == "append":
            store.append(_cp(1))
        else:
            store.create_run(_run(), _cp(0))
    assert not isinstance(caught.value, apsw.Error)
    assert str(caught.value) == f"database error ({db_path}): The connection has been closed"


def test_a_store_over_a_plain_apsw_connection_creates_and_appends(db_path: Path):
    """``SqliteCheckpointStore(conn)`` with an apsw connection of the
    caller's (no write gate) runs the same transactions."""
    conn = apsw.Connection(str(db_path))
    store = SqliteCheckpointStore(conn, path=str(db_path))
    store.create_run(_run(), _cp(0))
    store.append(_cp(1))
    (err,) = store.append_batch([AppendRequest(_cp(2))])
    assert err is None
    assert not conn.in_transaction
    conn.close()
    fresh = open_store(db_path)
    try:
        assert fresh.latest("r1").revision == 2
        assert fresh.latest("r1").state == {"n": 2}
    finally:
        fresh.close()


def test_a_refused_lone_append_after_a_full_disk_gives_the_wal_back(db_path: Path):
    """After a full disk the store owes the WAL's space back (``PRAGMA
    wal_checkpoint(TRUNCATE)`` once space allows). A lone append the
    group committer hands the store (``append_one``) that is then refused
    (a stale revision) still gives it back: the disk that was full gets its
    space now, not at some later commit."""
    from desktop_app.errors import RevisionConflictError

    store = open_store(db_path)
    store.create_run(_run(), _cp(0))
    for revision in range(1, 20):
        store.append(_cp(revision))
    wal = Path(f"{db_path}-wal")
    assert wal.stat().st_size > 0
    # what a full disk leaves behind once its space came back (the store's
    # own attempt at the time failed: still full)
    store._wal_needs_truncate = True
    (err,) = store.append_batch([AppendRequest(_cp(5))])  # revision 5 is taken
    assert isinstance(err, RevisionConflictError)
    assert wal.stat().st_size == 0
    assert store.latest("r1").revision == 19
    store.close()


def _gate_held(db: Path) -> bool:
    """Whether the write gate's flock is held (tried on a descriptor of our
    own, never waiting: a flock belongs to its open file, not the process)."""
    import fcntl
    import os

    from desktop_app.store.write_gate import LOCK_SUFFIX

    fd = os.open(f"{db}{LOCK_SUFFIX}", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.parametrize("write", ["create_run", "append"])
def test_a_write_behind_an_outside_writer_fails_typed_frees_the_gate_and_then_goes_through(
    db_path: Path, write: str
):
    """A writer that takes no gate (the sqlite3 shell) holds SQLite's write
    lock: the step's append or the run's creation waits the busy timeout
    only, fails with the typed busy error (not apsw's), gives the gate back
    at once (another process of this file can write), and goes through once
    the outside writer is done."""
    store = open_store(db_path, busy_timeout_s=0.2)
    if write == "append":
        store.create_run(_run(), _cp(0))

    def go() -> None:
        if write == "append":
            store.append(_cp(1))
        else:
            store.create_run(_run(), _cp(0))

    raw = apsw.Connection(str(db_path))
    raw.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="busy timeout") as caught:
            go()
        assert not isinstance(caught.value, apsw.Error)
        assert not _gate_held(db_path)
        assert not store.conn.in_transaction
    finally:
        raw.execute("ROLLBACK")
        raw.close()
    go()
    assert store.latest("r1").revision == (1 if write == "append" else 0)
    store.close()


def test_a_batch_creating_a_taken_run_id_gets_the_typed_conflict_in_its_slot(db_path: Path):
    """In a batch each request is a savepoint of the batch's transaction
    (the nested path): a creation whose run id is taken gets "already
    exists; pick another run id" in its own slot, the others commit."""
    from desktop_app.errors import RevisionConflictError

    store = open_store(db_path)
    store.create_run(_run(), _cp(0))
    other = RunRecord("r2", "flow", "v1", "running", 0, 1.0, 1.0)
    first = Checkpoint("r2", 0, "running", {}, {}, ("a",), 1.0)
    taken, fine = store.append_batch(
        [AppendRequest(_cp(0), run=_run()), AppendRequest(first, run=other)]
    )
    assert isinstance(taken, RevisionConflictError)
    assert "run r1 already exists; pick another run id" in str(taken)
    assert fine is None
    assert store.get_run("r2").revision == 0
    store.close()


def test_every_own_commit_is_a_new_data_version(db_path: Path):
    """SQLite's ``PRAGMA data_version`` ignores the connection's own
    commits, so the store counts them: a watcher of this very store (the
    app refreshing after its own writes) sees each one, creation and
    appends alike."""
    store = open_store(db_path)
    seen = [store.data_version()]
    store.create_run(_run(), _cp(0))
    seen.append(store.data_version())
    for revision in (1, 2):
        store.append(_cp(revision))
        seen.append(store.data_version())
    assert len(set(seen)) == 4, seen
    store.close()
