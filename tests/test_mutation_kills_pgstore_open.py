"""Opening a PostgreSQL store (``open_postgres_store`` and
``PostgresCheckpointStore.__init__``) as the mutation run of those two
(issue 29) found it unpinned: the sessions a process holds against the
server's connection limit, the name they show in ``pg_stat_activity``, and
where LISTEN goes. Every test runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from desktop_app.errors import CheckpointNotFoundError
from tests.pg_support import with_address
from tests.polling import until

pytestmark = pytest.mark.postgres


def _sessions(pg_url: str, name: str) -> int:
    """Sessions of this test's database named ``name``."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            (name,),
        ).fetchone()
    return int(n)


def _peak_sessions(pg_url: str, name: str, threads: int, cap: int, **open_kw: Any) -> int:
    """Open a store named ``name`` and have ``threads`` threads read at once
    while a table lock holds every read: the most sessions the store held,
    watched until it has ``cap`` and for 2 s more (its pool opens one
    connection at a time while reads wait for one), every read then let
    through."""
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url, application_name=name, **open_kw)
    outcomes: list[BaseException | None] = []
    try:
        with psycopg.connect(pg_url) as locker:
            locker.execute("LOCK TABLE flowdesk.runs IN ACCESS EXCLUSIVE MODE")

            def read() -> None:
                try:
                    store.get_run("nobody")
                except BaseException as exc:  # the expected CheckpointNotFoundError
                    outcomes.append(exc)

            readers = [threading.Thread(target=read) for _ in range(threads)]
            for t in readers:
                t.start()
            peak, deadline, more_until = 0, time.monotonic() + 20, float("inf")
            while time.monotonic() < min(deadline, more_until):
                peak = max(peak, _sessions(pg_url, name))
                if peak >= cap and more_until == float("inf"):
                    more_until = time.monotonic() + 2.0
                time.sleep(0.05)
            locker.rollback()
        for t in readers:
            t.join(30)
    finally:
        store.close()
    assert len(outcomes) == threads
    assert all(isinstance(o, CheckpointNotFoundError) for o in outcomes), outcomes
    return peak


def test_a_store_holds_at_most_eight_sessions_by_default(pg_url):
    """A Flowdesk process (the app, each worker) opens at most 8 sessions
    however many of its threads read at once: a machine running several
    workers stays within the server's connection limit. The ninth and
    tenth reader wait for a free session, and every read still ends."""
    assert _peak_sessions(pg_url, "flowdesk-cap", 10, 8) == 8


def test_a_store_asked_for_one_connection_still_holds_two(pg_url):
    """``max_connections`` below 2 still gets 2 (one for a step, one for
    the reads beside it), never more."""
    assert _peak_sessions(pg_url, "flowdesk-floor", 4, 2, max_connections=1) == 2


def test_a_store_opened_without_a_name_shows_as_flowdesk(pg_url):
    """``pg_stat_activity`` names a store's sessions ``flowdesk`` unless the
    caller names them (a worker passes its owner id): what an operator
    filters on to see Flowdesk's sessions."""
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url)
    try:
        assert _sessions(pg_url, "flowdesk") == 1
    finally:
        store.close()
    # a closed connection's backend leaves pg_stat_activity a moment after
    # (a CI run under load still counted it): gone within the bound
    until(lambda: _sessions(pg_url, "flowdesk") == 0, "the closed store's sessions to end")


def test_a_direct_store_given_a_listen_url_listens_there_and_nowhere_else(pg_url):
    """``listen_url`` is where LISTEN and a worker's liveness lock go, also
    for a store whose pool connects directly: a listen URL that cannot be
    reached fails ``listener()`` (no silent fallback to the pool's URL),
    while the store's own reads and writes go on."""
    import socket

    from desktop_app.store.postgres.store import open_postgres_store

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    unreachable = with_address(pg_url, host="127.0.0.1", port=dead)
    store = open_postgres_store(pg_url, listen_url=unreachable)
    try:
        assert store.session_url == unreachable
        with pytest.raises(psycopg.OperationalError):
            store.listener()
        with pytest.raises(CheckpointNotFoundError):
            store.get_run("nobody")
    finally:
        store.close()


def test_a_store_behind_a_transaction_pooler_sets_no_session_search_path(pg_url, bouncer):
    """Behind a transaction-mode pooler the store sets ``search_path`` in
    each transaction only (``SET LOCAL``), never for the session: a session
    setting would stay on the pooler's server connections, which other
    clients of the same pooler then use, and they would find Flowdesk's
    schema first."""
    from desktop_app.store.postgres.store import open_postgres_store

    via = bouncer.url(pg_url)
    store = open_postgres_store(via, pooler="transaction")
    try:
        with pytest.raises(CheckpointNotFoundError):
            store.get_run("nobody")
    finally:
        store.close()
    for _ in range(4):  # the pooler's server connections (2), each at least once
        with psycopg.connect(via, autocommit=True, prepare_threshold=None) as other:
            (path,) = other.execute("SHOW search_path").fetchone()
            assert "flowdesk" not in path
