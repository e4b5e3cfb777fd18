"""The SQLite store's append on the lean step path (kill tests for mutants of
``SqliteCheckpointStore._append`` and ``_write_checkpoint`` in
``store/sqlite/store.py``): a run written in turn by two stores on one file
(two processes, as a worker and the app) reads back what the last writer
wrote, also when this store's cached revision is stale, for a checkpoint
the engine gives (``AppendRequest.given``) and one it does not; and the
error a failed checkpoint stores is read back.

Every store is a real SQLite file in ``tmp_path``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from desktop_app.errors import RevisionConflictError, RunLeasedError
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, Lease, RunRecord, StepRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests import cli_forkserver


def _cp(revision: int, state: dict, status: str = "running", error: str | None = None):
    rec = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    return Checkpoint(
        "r1", revision, status, state, {"a": rec}, ("a",), float(revision + 1), "a", None, error
    )


def _append(store: SqliteCheckpointStore, cp: Checkpoint, given: bool) -> None:
    if given:
        (err,) = store.append_batch([AppendRequest(cp, given=True)])
        assert err is None
    else:
        store.append(cp)


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_a_store_whose_cached_revision_is_stale_appends_against_the_stored_one(
    db_path: Path, given: bool
):
    """Store A caches the run at revision 1; store B (another process on the
    same file) appends revision 2, changing ``n``; A then appends revision 3
    with ``n`` back at revision 1's value. A must write its row against
    revision 2, the one stored: a row written against its stale cache would
    leave out ``n`` (unchanged since revision 1), and the run would read
    back with revision 2's ``n``."""
    a = open_store(db_path)
    b = open_store(db_path)
    a.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, {"n": 0, "m": 0}))
    _append(a, _cp(1, {"n": 1, "m": 0}), given)
    _append(b, _cp(2, {"n": 2, "m": 0}), given)
    _append(a, _cp(3, {"n": 1, "m": 3}), given)
    assert a.latest("r1").state == {"n": 1, "m": 3}
    a.close()
    b.close()
    fresh = open_store(db_path)
    assert fresh.latest("r1").state == {"n": 1, "m": 3}
    assert [fresh.get_checkpoint("r1", r).state["n"] for r in range(4)] == [0, 1, 2, 1]
    fresh.close()


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_a_failed_checkpoints_error_reads_back_from_the_file(db_path: Path, given: bool):
    """The error of a checkpoint that ends its run failed is stored with it:
    a fresh store (``flowdesk show``) reads it back."""
    store = open_store(db_path)
    store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, {"n": 0}))
    _append(store, _cp(1, {"n": 1}, "failed", "ValueError: bad input"), given)
    store.close()
    fresh = open_store(db_path)
    latest = fresh.latest("r1")
    assert (latest.status, latest.error) == ("failed", "ValueError: bad input")
    assert fresh.get_run("r1").error == "ValueError: bad input"
    fresh.close()


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_a_steps_reported_progress_is_on_the_run_row(db_path: Path, given: bool):
    """The progress a step reported is saved on the run's row too, which
    ``flowdesk list`` and the app's run list read without a checkpoint."""
    store = open_store(db_path)
    store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, {"n": 0}))
    _append(store, replace(_cp(1, {"n": 1}), progress=(3, 10)), given)
    store.close()
    fresh = open_store(db_path)
    assert fresh.get_run("r1").progress == (3, 10)
    assert fresh.latest("r1").progress == (3, 10)
    fresh.close()


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_a_running_step_saved_under_a_lease_keeps_the_run_leased(db_path: Path, given: bool):
    """Each step of a running run is saved under its owner's lease: the run
    row keeps the owner and the renewed expiry, so no other process claims
    it; the step that ends the run drops the lease."""
    a, b = open_store(db_path), open_store(db_path)
    a.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, {"n": 0}))
    lease = Lease("host:1:a", 130.0, issued_at=100.0)
    a.claim("r1", lease, now=100.0)
    renewed = Lease("host:1:a", 160.0, issued_at=100.0)
    cp = _cp(1, {"n": 1})
    if given:
        (err,) = a.append_batch([AppendRequest(cp, lease=renewed, given=True)])
        assert err is None
    else:
        a.append(cp, lease=renewed)
    run = b.get_run("r1")
    assert (run.status, run.lease_owner, run.lease_expires_at) == ("running", "host:1:a", 160.0)
    with pytest.raises(RunLeasedError):
        b.claim("r1", Lease("host:2:b", 170.0, issued_at=110.0), now=110.0)
    a.append(_cp(2, {"n": 2}, "completed"), lease=renewed)
    run = b.get_run("r1")
    assert (run.status, run.lease_owner, run.lease_expires_at) == ("completed", None, None)
    a.close()
    b.close()


def _flock_free_in_another_process(db_path: Path) -> bool:
    """Whether another process can take the write gate's ``flock`` at once."""
    import sys

    from desktop_app.store.write_gate import LOCK_SUFFIX

    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(1)\n"
    )
    done = cli_forkserver.run_argv(
        [sys.executable, "-c", probe, f"{db_path}{LOCK_SUFFIX}"], check=False, timeout=60
    )
    return done.returncode == 0


@pytest.mark.parametrize("given", [False, True], ids=["plain", "given"])
def test_a_refused_append_ends_its_transaction_and_gives_the_gate_back(db_path: Path, given: bool):
    """An append whose transaction runs without ``_write``'s layers
    (``GatedConnection.begin_write``/``end_write``) and is refused (a
    revision another writer saved) rolls back, leaves no transaction open,
    gives the write gate's ``flock`` back at once (another process takes
    it) and stores nothing; the next append goes through."""
    store = open_store(db_path)
    store.create_run(RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0), _cp(0, {"n": 0}))
    _append(store, _cp(1, {"n": 1}), given)
    with pytest.raises(RevisionConflictError):
        if given:
            (err,) = store.append_batch([AppendRequest(_cp(1, {"n": 5}), given=True)])
            raise err  # type: ignore[misc]
        store.append(_cp(1, {"n": 5}))
    assert not store.conn.in_transaction
    assert _flock_free_in_another_process(db_path)
    _append(store, _cp(2, {"n": 2}), given)
    store.close()
    fresh = open_store(db_path)
    assert [fresh.get_checkpoint("r1", r).state["n"] for r in range(3)] == [0, 1, 2]
    fresh.close()
