"""A COMMIT whose reply was lost to a server crash, asked about by its
transaction id after the server came back.

A server that crashes (``pg_ctl -m immediate stop``, a killed backend, a
power cut) forgets the ids of transactions none of whose WAL reached its
disk, and hands those ids out again once it has recovered. Found with a
real crash (``flowdesk start digest`` on PostgreSQL, the server stopped
with ``-m immediate`` a few seconds in): the store asked
``pg_xact_status`` about its lost append's id, heard "is in the future"
(taken for an unreachable server, and asked again), then "committed" once
another process's transaction had been given that id, and counted the
append as landed. The run went on from a revision the database never
stored and its next append was refused ("revision 550 conflicts with the
stored latest revision 548").

A crash cannot be timed to the instant between a statement and its COMMIT,
so these tests drop the COMMIT with the proxy (the server rolls it back)
and have the store note an id the server has not handed out yet, as the
crashed server's lost id is from the restarted server's view; then another
connection's transactions are given that id and commit, as the agent's
were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.store.postgres import store as postgres
from desktop_app.store.protocol import Checkpoint, RunRecord
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import PrivateCluster, find_bindir, unavailable, with_address

pytestmark = pytest.mark.postgres

#: a domain write: the append is a transaction (BEGIN … COMMIT), asked about by its id
IN_A_TRANSACTION = (lambda tx: tx.execute("SELECT 1"),)


def run(run_id: str, t: float = 1000.0) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, t, t)


def cp(run_id: str, rev: int, state: dict[str, Any]) -> Checkpoint:
    return Checkpoint(run_id, rev, "running", state, {}, ("a",), 1000.0 + rev)


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[Any, CommitDropProxy]]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False  # only the append's COMMIT goes through the armed proxy
    yield store, proxy
    store.close()
    proxy.close()


def _last_handed_out(url: str) -> int:
    """The id the server hands out now (to a transaction of its own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    return int(row[0])


def _note_an_id_ahead(monkeypatch: pytest.MonkeyPatch, ahead: int) -> list[int]:
    """The store notes, for its transactions from now on, the id ``ahead``
    past the one the server gave: an id not handed out yet, as a crashed
    server's forgotten id is after its recovery. Returns the ids noted."""
    noted: list[int] = []
    real = postgres._Xact.note

    def note(self: Any, xid: Any, pid: Any, *row: Any) -> None:
        noted.append(int(xid) + ahead)
        real(self, noted[-1], pid, *row)

    monkeypatch.setattr(postgres._Xact, "note", note)
    return noted


def test_a_lost_append_whose_id_went_to_another_committed_transaction_is_run_again(
    proxied, pg_url, pg_store, monkeypatch
):
    """The lost append's id is given to another transaction, which commits,
    before the store asks: the commit log says "committed", but the
    checkpoints row the append wrote is not stored, so it did not land. It
    is run again and lands: revision 1 is stored once, with its state."""
    store, proxy = proxied
    store.create_run(run("r1"), cp("r1", 0, {"x": 0}))
    noted = _note_an_id_ahead(monkeypatch, 50)
    asked = store._xact_status

    def xact_status(xid: str, pid: int, *written: Any) -> str | None:
        # as after the crash: other sessions' transactions are handed the
        # lost id (and the ones before it) and commit
        with psycopg.connect(pg_url, autocommit=True) as other:
            while True:
                row = other.execute("SELECT pg_current_xact_id()::text").fetchone()
                assert row is not None
                if int(row[0]) >= int(xid):
                    break
            # the id may have gone to another session's transaction on this
            # shared server (another test's), still open: wait for its end
            for _ in range(600):
                (state,) = other.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
                if state != "in progress":
                    break
                time.sleep(0.05)
        assert state == "committed"  # another transaction's, under the lost append's id
        return asked(xid, pid, *written)

    monkeypatch.setattr(store, "_xact_status", xact_status)
    proxy.arm("before_commit")
    store.append(cp("r1", 1, {"x": 1}), IN_A_TRANSACTION)
    assert proxy.fired == ["before_commit"]
    # append returned: revision 1 is stored (before the fix: [0], a false "landed")
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]
    assert len(noted) == 2  # the lost try and the one run again
    assert pg_store.latest("r1").state == {"x": 1}
    store.append(cp("r1", 2, {"x": 2}), IN_A_TRANSACTION)
    assert pg_store.latest("r1").revision == 2


def test_a_lost_append_whose_id_the_server_has_not_handed_out_is_run_again(
    proxied, pg_url, pg_store, monkeypatch
):
    """Asked before the server hands the lost id out again, the answer is
    that the transaction never committed (its commit record would have moved
    the server past it): the append is run again at once, not asked about
    until RESOLVE_TIMEOUT_S as if the server could not be reached."""
    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 2.0)
    store, proxy = proxied
    store.create_run(run("r1"), cp("r1", 0, {"x": 0}))
    noted = _note_an_id_ahead(monkeypatch, 10**9)
    proxy.arm("before_commit")
    store.append(cp("r1", 1, {"x": 1}), IN_A_TRANSACTION)
    assert proxy.fired == ["before_commit"]
    assert noted[0] > _last_handed_out(pg_url)  # still not handed out
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]
    assert pg_store.latest("r1").state == {"x": 1}


@pytest.fixture
def own_cluster() -> Iterator[PrivateCluster]:
    """A cluster of this test's own (it is restarted; the session's is shared)."""
    bindir = find_bindir()
    if bindir is None:
        unavailable("no /usr/lib/postgresql/*/bin/initdb to start a cluster to restart")
    assert bindir is not None
    cluster = PrivateCluster(bindir)
    try:
        url = cluster.start()
        postgres.apply_postgres_schema(url)
        yield cluster
    finally:
        cluster.stop()


def test_a_lost_commit_asked_about_after_a_server_restart_is_unknown_not_committed(
    own_cluster, monkeypatch
):
    """A plain write (``send_signal``) commits and its reply is lost; the
    server then restarts before the store can ask. Its commit log says
    "committed", but a restarted server may have given that id to another
    transaction (after a crash it does), so the store assumes nothing:
    CommitUnknownError, saying the server restarted."""
    from desktop_app.errors import CommitUnknownError

    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 60.0)
    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    proxy = CommitDropProxy(own_cluster.port)
    store = postgres.open_postgres_store(
        with_address(url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False
    restarted = threading.Event()

    def restart() -> None:  # once the store is asking (the proxy refuses it meanwhile)
        assert proxy.fired == ["after_commit_unreachable"]
        own_cluster._run(
            f"{own_cluster.bindir}/pg_ctl", "-D", own_cluster.datadir, "-m", "fast", "-w",
            "restart",
        )  # fmt: skip
        proxy.admit()
        restarted.set()

    asked = store._xact_status
    restarter: list[threading.Thread] = []

    def xact_status(*args: Any) -> str | None:
        if not restarter:
            restarter.append(threading.Thread(target=restart))
            restarter[0].start()
        return asked(*args)

    monkeypatch.setattr(store, "_xact_status", xact_status)
    proxy.arm("after_commit_unreachable")
    try:
        with pytest.raises(CommitUnknownError) as caught:
            store.send_signal("go", "k", {"n": 1}, 1000.0)
    finally:
        store.close()
        proxy.close()
    assert restarted.is_set()
    assert caught.value.reason == (
        "the server restarted since, and its commit log says committed, but a restarted "
        "server gives the id of a transaction it lost to another one, so that may be "
        "another transaction's"
    )
    with psycopg.connect(url) as conn:
        (state,) = conn.execute("SELECT pg_xact_status(%s::xid8)", (caught.value.xid,)).fetchone()
        (n,) = conn.execute("SELECT count(*) FROM flowdesk.signals").fetchone()
    assert (state, n) == ("committed", 1)  # here it was this one's: unknown is not a lie
