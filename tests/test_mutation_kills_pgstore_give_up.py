"""How long the PostgreSQL store waits for an unreachable server, by who
asks (``ServerOutages.on_unreachable``'s ``give_up_once``): a command gives
up once, then each transaction tries once; a worker keeps trying every
transaction four times; ``stop_waiting`` never waits longer than one usual
try. A real server; the pool's every connection held (no connection within
``connect_wait_s``) or a proxy that cuts a statement and refuses the rest.
The bounds compare a transaction's wait with the tries it makes (one try
against four), so a loaded machine does not blur them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from desktop_app.errors import CommitUnknownError, DatabaseUnreachableError
from desktop_app.store.postgres.store import open_postgres_store
from desktop_app.store.protocol import Checkpoint, RunRecord
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

#: one try's wait for a pooled connection (``postgres.connect_wait_s``)
WAIT_S = 0.5
T0 = 1000.0


@pytest.fixture
def store(pg_url: str) -> Iterator[Any]:
    store = open_postgres_store(pg_url, max_connections=2, connect_wait_s=WAIT_S)
    store.notifier.enabled = False
    try:
        yield store
    finally:
        store.close()


def held(store: Any) -> list[Any]:
    """Every connection of the store's pool, taken: a transaction finds none."""
    return [store.pool.getconn(), store.pool.getconn()]


def timed_refusal(store: Any, key: str) -> float:
    """Seconds a signal's write took to fail as the server unreachable."""
    began = time.monotonic()
    with pytest.raises(DatabaseUnreachableError):
        store.send_signal("go", key, {}, T0)
    return time.monotonic() - began


def test_a_command_gives_up_once_and_then_tries_each_transaction_once(store, pg_store):
    said: list[DatabaseUnreachableError] = []
    store.on_unreachable(said.append, give_up_once=True)
    conns = held(store)
    first = timed_refusal(store, "k1")
    second = timed_refusal(store, "k2")
    assert first >= 4 * WAIT_S  # four tries, each its whole wait
    assert second < 2.5 * WAIT_S  # one try: 4 would be 2.0 s
    assert len(said) == 1  # said once, at the first try
    for conn in conns:
        store.pool.putconn(conn)
    store.send_signal("go", "k3", {"n": 3}, T0)  # a free connection: the one try goes through
    assert pg_store.next_signal("go", "k3") is not None
    assert pg_store.next_signal("go", "k1") is None and pg_store.next_signal("go", "k2") is None


def test_a_worker_tries_every_transaction_four_times(store):
    store.on_unreachable(lambda _exc: None)  # a worker: give_up_once not set
    conns = held(store)
    try:
        timed_refusal(store, "k1")
        assert timed_refusal(store, "k2") >= 4 * WAIT_S
        store.on_unreachable(None, give_up_once=True)
        timed_refusal(store, "k3")
        assert timed_refusal(store, "k4") < 2.5 * WAIT_S  # the handler is optional
    finally:
        for conn in conns:
            store.pool.putconn(conn)


def test_stop_waiting_never_waits_longer_than_one_usual_try(store):
    conns = held(store)
    try:
        store.stop_waiting(30.0)
        assert timed_refusal(store, "k1") < 2.5 * WAIT_S  # not 30 s
    finally:
        for conn in conns:
            store.pool.putconn(conn)


def test_stop_waiting_waits_what_it_is_given_or_two_seconds(pg_url):
    """Below one usual try (8 s here), the wait given (0.3 s), and by
    default 2 s: neither the usual try's wait nor any other."""
    store = open_postgres_store(pg_url, max_connections=2, connect_wait_s=8.0)
    store.notifier.enabled = False
    conns = held(store)
    try:
        store.stop_waiting(0.3)
        assert timed_refusal(store, "k1") < 1.5  # not 8 s
        store.stop_waiting()
        assert 1.9 <= timed_refusal(store, "k2") < 2.8  # 2 s (a default of 3 s would be 3)
    finally:
        for conn in conns:
            store.pool.putconn(conn)
        store.close()


@pytest.mark.scenario("S70")
@pytest.mark.parametrize("give_up_once", [True, False], ids=["command", "worker"])
def test_a_command_that_asked_in_vain_whether_a_statement_landed_gives_up_once(
    pg_url, pg_store, monkeypatch, give_up_once
):
    """A run's creation sent as one statement, its reply cut and the server
    out of reach while the store asks whether it landed: the outcome is
    unknown, and the transaction after it tries once for a command
    (recording where it stopped), four times for a worker."""
    from desktop_app.store.postgres import store as postgres

    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 1.0)
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port),
        max_connections=2,
        connect_wait_s=WAIT_S,
        reconnect_max_s=0.1,
    )
    store.notifier.enabled = False
    store.on_unreachable(lambda _exc: None, give_up_once=give_up_once)
    proxy.arm("after_commit_unreachable")
    try:
        run = RunRecord("r1", "f", "v1", "running", 0, T0, T0)
        with pytest.raises(CommitUnknownError):
            store.create_run(run, Checkpoint("r1", 0, "running", {}, {}, ("a",), T0))
        took = timed_refusal(store, "k1")
        if give_up_once:
            assert took < 2.5 * WAIT_S
        else:
            assert took >= 4 * WAIT_S
    finally:
        store.close()
        proxy.close()
    assert [h.revision for h in pg_store.history("r1")] == [0]
