"""Opening a PostgreSQL store, second pass (``open_postgres_store``,
``PostgresCheckpointStore.__init__`` and ``_Xact.__init__``), as the
mutation run of those functions (issue 29) found them unpinned. Every test
runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from desktop_app.store.postgres import store as postgres
from desktop_app.store.protocol import Checkpoint, RunRecord
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres


def run(run_id: str) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, 1000.0, 1000.0)


def cp(run_id: str, rev: int) -> Checkpoint:
    return Checkpoint(run_id, rev, "running", {"x": rev}, {}, ("a",), 1000.0 + rev)


@pytest.fixture
def pooled_via_proxy(pg_url: str) -> Iterator[tuple[Any, CommitDropProxy]]:
    """A store that treats its URL as a transaction-mode pooler's (every read
    a transaction of its own: BEGIN, SET LOCAL, the read, COMMIT), reached
    through a proxy that can cut a COMMIT."""
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port),
        max_connections=2,
        pooler="transaction",
    )
    store.notifier.enabled = False
    try:
        yield store, proxy
    finally:
        store.close()
        proxy.close()


@pytest.mark.parametrize("mode", ["before_commit", "after_commit"])
def test_a_read_behind_a_pooler_whose_commit_was_lost_is_read_again(
    pooled_via_proxy, pg_store, monkeypatch, mode
):
    """A read's transaction wrote nothing and has no id: a COMMIT lost on
    the way (or its reply) is no unknown outcome to ask the server about;
    the read is simply made again and answers."""
    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 2.0)  # a question asked: fail soon
    store, proxy = pooled_via_proxy
    pg_store.create_run(run("r1"), cp("r1", 0))
    proxy.arm(mode)
    assert store.get_run("r1").status == "running"
    assert proxy.fired == [mode]


def test_stores_opened_without_a_scope_share_the_default_scope(pg_url):
    """A store opened by URL and one built on a caller's pool, neither given
    a scope, and one opened with ``scope="default"`` (what the settings
    default to) see the same runs; a store of another scope sees none."""
    from psycopg_pool import ConnectionPool

    by_url = postgres.open_postgres_store(pg_url, max_connections=2)
    named = postgres.open_postgres_store(pg_url, max_connections=2, scope="default")
    other = postgres.open_postgres_store(pg_url, max_connections=2, scope="team-b")
    pool: ConnectionPool[Any] = ConnectionPool(
        pg_url,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True, "options": "-c search_path=flowdesk"},
        open=False,
    )
    pool.open(wait=True)
    on_pool = postgres.PostgresCheckpointStore(pool)
    try:
        by_url.create_run(run("r1"), cp("r1", 0))
        on_pool.create_run(run("r2"), cp("r2", 0))
        for s in (by_url, named, on_pool):
            assert sorted(r.run_id for r in s.list_runs()) == ["r1", "r2"]
        assert other.list_runs() == []
    finally:
        for s in (by_url, named, other, on_pool):
            s.close()


def test_a_store_just_opened_holds_one_session(pg_url):
    """Opening a store costs one session of the server's connection limit
    (the pool grows only when threads wait for one): a host running many
    worker processes is not charged two each while they are idle."""
    import psycopg

    store = postgres.open_postgres_store(pg_url, application_name="just-opened")
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'just-opened'"
            ).fetchone()
        assert row == (1,)
        assert store.list_runs() == []
    finally:
        store.close()


def test_a_server_that_refuses_the_pools_connections_is_a_database_open_error(pg_url, monkeypatch):
    """A server that answered the first connection but refuses the pool's
    (it went away, or hit its connection limit, in between): opening the
    store fails with DatabaseOpenError naming the URL, its password masked,
    and keeps no pool behind. The pool's wait for its first connection is
    shortened here from 30 s to 1 s."""
    from psycopg_pool import ConnectionPool

    from desktop_app.errors import DatabaseOpenError

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port, password="s3cret")
    checked = postgres._check_connect
    opened: list[Any] = []

    def check_then_refuse(u: str) -> None:
        checked(u)  # the server answers this one
        proxy.refuse()

    class QuickPool(ConnectionPool):  # type: ignore[type-arg]
        def open(self, wait: bool = False, timeout: float = 30.0) -> None:
            opened.append(self)
            super().open(wait, None if timeout is None else min(timeout, 1.0))

    monkeypatch.setattr(postgres, "_check_connect", check_then_refuse)
    monkeypatch.setattr(postgres, "ConnectionPool", QuickPool)
    try:
        with pytest.raises(DatabaseOpenError) as caught:
            postgres.open_postgres_store(url)
    finally:
        proxy.close()
    port = proxy.port
    assert str(caught.value) == (
        f"cannot open connections to PostgreSQL at postgresql://postgres:***@127.0.0.1:{port}/"
        f"{urlsplit(pg_url).path.lstrip('/')}"
    )
    assert [p.closed for p in opened] == [True]


@pytest.mark.slow
def test_a_write_waits_for_a_pooled_connection_as_long_as_connect_wait_s(pg_url, pg_store):
    """``connect_wait_s`` (``postgres.connect_wait_s``) bounds each try's wait
    for a pooled connection: with every connection taken, a signal fails with
    the StoreError that says nothing was written after its tries, rather than
    the pool's own 30 s each. Here the connections come free 5 s later: a
    store that waited longer would take one then and store the signal."""
    import threading

    from desktop_app.errors import StoreError

    store = postgres.open_postgres_store(pg_url, max_connections=2, connect_wait_s=0.2)
    store.notifier.enabled = False
    held = [store.pool.getconn(), store.pool.getconn()]  # the pool's whole size
    freed = threading.Timer(5.0, lambda: [store.pool.putconn(c) for c in held])
    freed.start()
    try:
        with pytest.raises(StoreError) as caught:
            store.send_signal("go", "k", {"n": 1}, 1000.0)
    finally:
        freed.join()
        store.close()
    assert "nothing of the transaction it cut off was committed" in str(caught.value)
    assert pg_store.next_signal("go", "k") is None


def test_a_stores_listener_waits_between_reconnect_tries_at_most_reconnect_max_s(
    pg_url, pg_store, caplog
):
    """``reconnect_max_s`` given to ``open_postgres_store`` caps the waits
    between the reconnect tries of the store's listener (each logged, each
    double the last: 0.1, 0.2, then 0.4, 0.4 s), not the default 5 s; once
    the server takes connections again the listener is back and hears a new
    signal."""
    import logging

    import psycopg

    from desktop_app.store.postgres.notify import RECONNECT_FIRST_S
    from tests.polling import until

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port),
        max_connections=2,
        reconnect_max_s=0.4,
    )
    caplog.set_level(logging.WARNING, logger="desktop_app.store.postgres.notify")
    listener = store.listener()
    try:
        old = listener.backend_pid
        proxy.refuse()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (old,))

        def delays() -> list[float]:
            head, tail = "; next try in ", " s"
            return [
                float(m.rsplit(head, 1)[1].removesuffix(tail))
                for m in (r.getMessage() for r in caplog.records)
                if m.startswith("flowdesk: listener reconnect failed: ") and head in m
            ]

        until(lambda: len(delays()) >= 4, "four failed reconnects logged")
        assert delays()[:4] == [RECONNECT_FIRST_S, 0.2, 0.4, 0.4]
        proxy.admit()
        until(lambda: listener.alive and listener.backend_pid != old, "reconnected")
        while listener.wait(0.3):
            pass
        pg_store.send_signal("go", "k", {}, 1000.0)
        assert listener.wait(10.0)
    finally:
        listener.close()
        store.close()
        proxy.close()


def test_a_store_whose_server_refused_connections_for_a_while_reads_again(pg_url, pg_store):
    """Every pooled session dropped and the server refused new ones for a
    while (an outage): reads fail meanwhile with a StoreError, and once the
    server takes connections again the same store reads again (its pool's
    reconnect attempts, given up after ``reconnect_max_s``, start afresh)."""
    import psycopg

    from desktop_app.errors import StoreError
    from tests.polling import until

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port),
        max_connections=2,
        application_name="outage",
        reconnect_max_s=0.5,
        connect_wait_s=0.3,
    )
    store.notifier.enabled = False
    try:
        pg_store.create_run(run("r1"), cp("r1", 0))
        assert store.get_run("r1").status == "running"
        proxy.refuse()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'outage'"
            )
        with pytest.raises(StoreError):
            store.get_run("r1")
        proxy.admit()

        def reads() -> bool:
            try:
                return store.get_run("r1").status == "running"
            except StoreError:
                return False

        until(reads, "the store reads again", bound_s=60.0)
    finally:
        store.close()
        proxy.close()
