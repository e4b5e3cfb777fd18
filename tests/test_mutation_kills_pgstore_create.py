"""A run's creation on PostgreSQL (``create_run``), as the mutation run of
that function (issue 29) found it unpinned: every field a new run is
created with is stored and found by the filters that use it, a revision-0
checkpoint is required, a lease that has already run out can be taken at
once, a listening worker hears the new run, and a creation in a
transaction whose COMMIT reply was lost is settled by the row it wrote.
Every test runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.store.postgres import store as postgres
from desktop_app.store.protocol import Checkpoint, RunRecord, Wait
from desktop_app.store.records import Lease
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres


def cp(run_id: str, rev: int, **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, "running", {"x": rev}, {}, ("a",), 1000.0 + rev, **kw)


def test_a_new_run_keeps_every_field_it_was_created_with(pg_store):
    """Flow key, parent, context, progress, error, lease and deadline are
    stored; the runs list finds the run by its tenant, session and flow key."""
    s = pg_store
    now = s.now()
    context = {"tenant_id": "acme", "session_id": "sess-7", "user_id": "u1"}
    s.create_run(RunRecord("p1", "f", "v1", "running", 0, now, now), cp("p1", 0))
    record = RunRecord(
        "r1", "f", "v1", "running", 0, now, now,
        flow_key="invoice-42", parent_run_id="p1", context=context, progress=(2, 5),
        error="halted: waiting for a person", lease_owner="w1", lease_expires_at=now + 600.0,
        deadline_at=now + 3600.0,
    )  # fmt: skip
    s.create_run(record, cp("r1", 0))
    got = s.get_run("r1")
    assert (got.flow_key, got.parent_run_id, dict(got.context)) == ("invoice-42", "p1", context)
    assert (got.progress, got.error) == ((2, 5), "halted: waiting for a person")
    assert got.lease_owner == "w1"
    assert got.lease_expires_at is not None
    # the lease runs 600 s from the database's clock at the insert
    assert now + 599.999 <= got.lease_expires_at <= s.now() + 600.001
    assert got.deadline_at == pytest.approx(now + 3600.0)
    assert [r.run_id for r in s.list_runs(tenant_id="acme")] == ["r1"]
    assert [r.run_id for r in s.list_runs(session_id="sess-7")] == ["r1"]
    assert [r.run_id for r in s.list_runs(flow_key="invoice-42")] == ["r1"]


def test_a_new_run_without_a_lease_or_progress_has_none(pg_store):
    """A run created with no lease (or a lease owner but no expiry) and no
    progress is held by nobody and shows no progress: any worker may claim it."""
    s = pg_store
    now = s.now()
    s.create_run(RunRecord("r1", "f", "v1", "running", 0, now, now), cp("r1", 0))
    s.create_run(RunRecord("r2", "f", "v1", "running", 0, now, now, lease_owner="w1"), cp("r2", 0))
    for rid in ("r1", "r2"):
        got = s.get_run(rid)
        assert (got.lease_owner, got.lease_expires_at, got.progress) == (None, None, None)
        assert s.claim(rid, Lease("w2", now + 60.0, now), now).lease_owner == "w2"


def test_a_run_created_with_a_lease_already_run_out_can_be_taken_at_once(pg_store):
    """A lease whose expiry is before the run's creation time runs out at the
    creation itself (its length is never negative, nor made longer): another
    worker naming that holder takes the run over at once."""
    s = pg_store
    now = s.now()
    rec = RunRecord(
        "r1", "f", "v1", "running", 0, now, now, lease_owner="w1", lease_expires_at=now - 30.0
    )
    s.create_run(rec, cp("r1", 0))
    got = s.get_run("r1")
    assert got.lease_owner == "w1"
    assert got.lease_expires_at is not None and got.lease_expires_at <= s.now()
    taken = s.claim("r1", Lease("w2", now + 60.0, s.now(), takes_over="w1"), s.now())
    assert taken.lease_owner == "w2"


@pytest.mark.parametrize(
    "first", [cp("r1", 1), cp("other", 0)], ids=["revision 1", "another run's"]
)
def test_a_run_is_created_only_from_its_own_revision_0(pg_store, first):
    now = pg_store.now()
    with pytest.raises(ValueError) as caught:
        pg_store.create_run(RunRecord("r1", "f", "v1", "running", 0, now, now), first)
    assert str(caught.value) == "create_run needs the run's revision-0 checkpoint"
    assert pg_store.list_runs() == []


def test_a_new_run_wakes_a_listening_worker(pg_store):
    """A worker blocked on LISTEN hears a new run at once, not at its next poll."""
    listener = pg_store.listener()
    try:
        while listener.wait(0.3):
            pass
        now = pg_store.now()
        pg_store.create_run(RunRecord("r1", "f", "v1", "running", 0, now, now), cp("r1", 0))
        assert listener.wait(10.0)
    finally:
        listener.close()


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[Any, CommitDropProxy]]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False  # only the creation's COMMIT goes through the armed proxy
    yield store, proxy
    store.close()
    proxy.close()


def test_a_creation_whose_lost_commits_id_went_to_another_transaction_is_run_again(
    proxied, pg_url, pg_store, monkeypatch
):
    """A run created with a wait (a transaction: BEGIN … COMMIT) whose COMMIT
    never reached the server, asked about by an id the server says committed
    (another transaction's, as after a crash): its revision-0 row is not
    stored, so the creation did not land and is run again; the run exists,
    once, and its wait with it."""
    store, proxy = proxied
    with psycopg.connect(pg_url, autocommit=True) as other:
        row = other.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    taken = int(row[0])  # committed: a one-statement transaction of its own
    real = postgres._Xact.note
    noted: list[Any] = []

    def note(self: Any, _xid: Any, pid: Any, *written: Any) -> None:
        noted.append(_xid)
        real(self, taken, pid, *written)

    monkeypatch.setattr(postgres._Xact, "note", note)
    now = store.now()
    wait = Wait("r1:go:0", "go", "signal", 1000.0, name="go", key="k")
    proxy.arm("before_commit")
    store.create_run(
        RunRecord("r1", "f", "v1", "waiting", 0, now, now), cp("r1", 0).evolve(waits=(wait,))
    )
    assert proxy.fired == ["before_commit"]
    assert len(noted) == 2  # the lost try and the one run again
    assert [h.revision for h in pg_store.history("r1")] == [0]
    assert pg_store.runs_waiting_for("signal", "go", "k") == ["r1"]


def test_a_creation_whose_commit_landed_is_settled_by_its_own_transaction_id(
    proxied, pg_store, caplog, monkeypatch
):
    """A run created with a wait (a transaction: BEGIN … COMMIT) whose COMMIT
    reached the server and whose reply was lost: the store asks the server
    by the id of the transaction that wrote the run (the log names it), hears
    committed, and does not create it again; the run exists once, its wait
    with it."""
    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 2.0)  # an id it cannot ask about: fail soon
    store, proxy = proxied
    now = store.now()
    wait = Wait("r1:go:0", "go", "signal", 1000.0, name="go", key="k")
    proxy.arm("after_commit")
    with caplog.at_level(logging.INFO, logger=postgres.__name__):
        store.create_run(
            RunRecord("r1", "f", "v1", "waiting", 0, now, now), cp("r1", 0).evolve(waits=(wait,))
        )
    assert proxy.fired == ["after_commit"]
    ((xmin,),) = pg_store.query(lambda tx: tx.fetchall("SELECT xmin::text FROM runs", ()))
    settled = [r.getMessage() for r in caplog.records if "lost COMMIT" in r.getMessage()]
    assert len(settled) == 1, settled
    got = re.fullmatch(r"a lost COMMIT \(transaction (\d+)\) was settled: committed", settled[0])
    assert got is not None, settled
    assert int(got.group(1)) & 0xFFFFFFFF == int(xmin)  # the run's own transaction
    assert [h.revision for h in pg_store.history("r1")] == [0]
    assert pg_store.runs_waiting_for("signal", "go", "k") == ["r1"]
