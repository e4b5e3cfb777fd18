"""The PostgreSQL listener session and the notifier's snapshot filter
(``store/postgres/notify.py``), on a real server: a worker's liveness
session registers, hears, heartbeats, notices its loss, reconnects after a
failed try, and unregisters; ``data_version`` leaves the notifier's own
transactions out of the snapshot it hashes."""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from desktop_app.store.postgres.notify import (
    MAX_PAYLOADS,
    RECONNECT_FIRST_S,
    Listener,
    Notifier,
)
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address
from tests.polling import until

pytestmark = pytest.mark.postgres

OWNER = "testhost:4242:abcdef"


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_url, autocommit=True, options="-c search_path=flowdesk")
    yield conn
    conn.close()


@pytest.fixture
def proxy(pg_url: str) -> Iterator[CommitDropProxy]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    yield proxy
    proxy.close()


RECONNECT_LOG = re.compile(
    r"flowdesk: listener reconnect failed: (.+); next try in ([0-9.]+) s", re.DOTALL
)


def _reconnect_failures(caplog: pytest.LogCaptureFixture) -> list[tuple[str, float]]:
    """(cause, delay in seconds) of each logged failed reconnect, in order."""
    found = []
    for record in caplog.records:
        if record.getMessage().startswith("flowdesk: listener reconnect failed"):
            match = RECONNECT_LOG.fullmatch(record.getMessage())
            assert match, record.getMessage()
            found.append((match[1], float(match[2])))
    return found


def _session_gone(admin: psycopg.Connection[Any], pid: int) -> bool:
    """Whether the server has no backend ``pid`` any more."""
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid=%s", (pid,)
    ).fetchone() == (0,)


def _listener(url: str, **kw: Any) -> Listener:
    return Listener(
        url, ("flowdesk_test",), connect_kwargs={"options": "-c search_path=flowdesk"}, **kw
    )


def test_the_snapshot_leaves_out_the_notifiers_own_transactions():
    notifier = Notifier(None)  # type: ignore[arg-type]  # normalized() uses no connection
    notifier.own_xids = {103, 104, 110}
    # xmax steps back over own ids at the top; own ids leave the in-progress list
    assert notifier.normalized("100:105:101,103") == "103:101"
    assert notifier.normalized("100:112:101,102,107,110") == "112:101,102,107"
    assert notifier.normalized("100:100:") == "100:"
    assert notifier.normalized("") == "0:"  # what data_version passes for no row


def test_a_worker_session_registers_hears_and_unregisters(pg_url, admin):
    listener = _listener(pg_url, owner=OWNER, heartbeat_s=0.0).start()
    try:
        row = admin.execute(
            "SELECT host, pid, heartbeat_at FROM workers WHERE owner=%s", (OWNER,)
        ).fetchone()
        assert row is not None and row[:2] == ("testhost", 4242)
        first_beat = row[2]
        assert listener.wait(0.05) is False  # nothing sent: returns, unwoken
        for n in (1, 2):  # the thread keeps listening after its first pass
            admin.execute("NOTIFY flowdesk_test, 'x'")
            until(lambda n=n: listener.received == n, f"notification {n} heard")
            assert listener.wait(5) is True
        until(
            lambda: (
                admin.execute(
                    "SELECT heartbeat_at > %s FROM workers WHERE owner=%s", (first_beat, OWNER)
                ).fetchone()
                == (True,)
            ),
            "a heartbeat written",
        )
    finally:
        pid = listener.backend_pid
        listener.close()
    assert admin.execute("SELECT count(*) FROM workers WHERE owner=%s", (OWNER,)).fetchone() == (0,)
    until(
        lambda: _session_gone(admin, pid),
        "the session ended",
    )


def test_closing_without_unregistering_keeps_the_worker_row(pg_url, admin):
    listener = _listener(pg_url, owner=OWNER).start()
    listener.close(unregister=False)
    assert admin.execute("SELECT count(*) FROM workers WHERE owner=%s", (OWNER,)).fetchone() == (1,)
    admin.execute("DELETE FROM workers WHERE owner=%s", (OWNER,))


def test_a_lost_session_is_fenced_then_reconnected_after_failed_tries(pg_url, admin, proxy, caplog):
    """The server ends the session while new connections are refused: the
    listener counts one loss, calls ``on_lost`` once (a failure there is
    logged, not raised), logs each failed reconnect, and is back once
    connections are admitted. Twice, so the back-off is reset in between."""
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port)
    lost = threading.Event()
    calls: list[int] = []

    def on_lost() -> None:
        calls.append(1)
        lost.set()
        if len(calls) == 1:
            raise RuntimeError("fencing failed")

    listener = _listener(url, owner=OWNER, on_lost=on_lost, reconnect_max_s=0.4).start()
    caplog.set_level(logging.WARNING, logger="desktop_app.store.postgres.notify")
    try:
        for round_ in (1, 2):
            lost.clear()
            caplog.clear()
            proxy.refuse()
            old = listener.backend_pid
            admin.execute("SELECT pg_terminate_backend(%s)", (old,))
            assert lost.wait(20), "the loss was never noticed"
            assert (listener.losses, len(calls), listener.alive) == (round_, round_, False)
            until(lambda: len(_reconnect_failures(caplog)) >= 4, "four failed reconnects logged")
            failures = _reconnect_failures(caplog)
            # each wait doubles from the first, up to reconnect_max_s; a
            # reconnect resets it (round 2 starts over)
            assert [delay for _, delay in failures[:4]] == [RECONNECT_FIRST_S, 0.2, 0.4, 0.4]
            assert all(cause.strip() and cause not in ("%s", "None") for cause, _ in failures)
            messages = [r.getMessage() for r in caplog.records]
            head, tail = "flowdesk: liveness/listen connection lost (", "); fencing"
            causes = [
                m.removeprefix(head).removesuffix(tail)
                for m in messages
                if m.startswith(head) and m.endswith(tail)
            ]
            assert causes and all(c not in ("", "%s", "None") for c in causes), messages
            if round_ == 1:
                assert "flowdesk: on_lost failed" in messages
            proxy.admit()
            until(lambda: listener.alive, "reconnected")
            assert listener.backend_pid != old
    finally:
        listener.close()


# -- Notifier -----------------------------------------------------------------

CHANNEL = "flowdesk_test"


@pytest.fixture
def hearer(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session LISTENing on the test channel."""
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    yield conn
    conn.close()


@pytest.fixture
def pool(pg_url: str) -> Iterator[ConnectionPool[Any]]:
    """A pool of one connection, so a test holding it can make the notifier
    wait (and queue everything sent meanwhile into one batch)."""
    pool: ConnectionPool[Any] = ConnectionPool(pg_url, min_size=1, max_size=1, open=True)
    pool.wait()
    yield pool
    pool.close()


def _heard(conn: psycopg.Connection[Any], n: int) -> list[str]:
    """The payloads of the next ``n`` notifications, in the order sent."""
    got = [n.payload for n in conn.notifies(timeout=20, stop_after=n)]
    assert len(got) == n, got
    return got


def _threads(name: str) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == name}


def test_the_notifier_counts_its_batches_on_one_daemon_thread_that_close_ends(pool, hearer):
    before = _threads("flowdesk-notify")
    notifier = Notifier(pool)
    assert notifier.batches == 0
    notifier.send(CHANNEL, "a:1")
    assert _heard(hearer, 1) == ["a:1"]
    until(lambda: notifier.batches >= 1, "the first batch counted")
    assert notifier.batches == 1
    (thread,) = _threads("flowdesk-notify") - before
    assert thread.daemon  # never holds up the process's exit
    notifier.send(CHANNEL, "a:2")
    assert _heard(hearer, 1) == ["a:2"]
    until(lambda: notifier.batches >= 2, "the second batch counted")
    assert notifier.batches == 2
    assert _threads("flowdesk-notify") - before == {thread}  # the same thread, not a new one
    notifier.close()
    assert not thread.is_alive()
    notifier.send(CHANNEL, "a:3")  # after close: nothing is sent, nothing started
    assert _threads("flowdesk-notify") - before == set()
    assert notifier.batches == 2


def test_a_batch_that_cannot_be_sent_is_dropped_and_logged(pg_url, caplog):
    closed: ConnectionPool[Any] = ConnectionPool(pg_url, min_size=0, max_size=1, open=True)
    closed.close()
    caplog.set_level(logging.WARNING, logger="desktop_app.store.postgres.notify")
    notifier = Notifier(closed)
    try:
        notifier.send(CHANNEL, "a:1")  # never raises: listeners poll as a fallback
        until(lambda: bool(caplog.records), "the dropped batch logged")
    finally:
        notifier.close()
    (record,) = caplog.records
    head = "flowdesk: notification batch dropped: "
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(head)
    assert "closed" in record.getMessage().removeprefix(head)  # the pool's own error text
    assert notifier.batches == 0


def _one_batch(pool: ConnectionPool[Any], notifier: Notifier, payloads: list[str]) -> None:
    """Send ``payloads`` so that they go out in one batch: hold the pool's only
    connection while a warm-up send waits for it, queue them, then let go."""
    held = pool.getconn()
    try:
        notifier.send("flowdesk_elsewhere", "warm")
        until(lambda: pool.get_stats().get("requests_waiting", 0) == 1, "the notifier waiting")
        for payload in payloads:
            notifier.send(CHANNEL, payload)
    finally:
        pool.putconn(held)


def test_up_to_max_payloads_go_out_one_by_one_in_order_and_more_become_a_scope(pool, hearer):
    notifier = Notifier(pool)
    try:
        exactly = [f"a:run{i:02d}" for i in range(MAX_PAYLOADS)]
        _one_batch(pool, notifier, list(reversed(exactly)))
        assert _heard(hearer, MAX_PAYLOADS) == exactly  # sorted, each its own
        # one more than MAX_PAYLOADS: one ``scope:*`` per scope (the text
        # before the first colon), whatever the run ids hold
        over = [f"a:run{i}" for i in range(40)] + [f"b:r:{i}" for i in range(MAX_PAYLOADS + 1 - 40)]
        _one_batch(pool, notifier, over)
        assert _heard(hearer, 2) == ["a:*", "b:*"]
    finally:
        notifier.close()


def test_the_notifier_remembers_its_last_ten_thousand_transaction_ids():
    notifier = Notifier(None)  # type: ignore[arg-type]  # _own uses no connection
    for xid in range(10_001):
        notifier._own(xid)
    assert notifier.own_xids == set(range(1, 10_001))  # the oldest one forgotten


# -- Listener -------------------------------------------------------------------


def test_a_listener_never_started_has_no_session_and_closes_quietly(pg_url):
    listener = _listener(pg_url, owner=OWNER)
    assert (listener.backend_pid, listener.received, listener.losses) == (0, 0, 0)
    assert listener.alive is False
    listener.close()  # nothing to stop, nothing to unregister
    assert listener.alive is False


def test_the_listen_thread_is_a_daemon_and_close_ends_it(pg_url, admin):
    before = _threads("flowdesk-listen")
    listener = _listener(pg_url).start()
    (thread,) = _threads("flowdesk-listen") - before
    assert thread.daemon and thread.is_alive()
    admin.execute(f"NOTIFY {CHANNEL}, 'x'")  # the thread, not start(), hears it
    until(lambda: listener.received == 1, "the thread heard a notification")
    listener.close()
    assert not thread.is_alive()


@pytest.mark.parametrize(
    "owner, host, pid",
    [
        ("h:42:x:y", "h", 42),  # the pid is the second field only
        ("h:abc:x", "h", 0),  # not a number: 0
        (":7:z", socket.gethostname(), 7),  # no host: this machine's name
    ],
)
def test_the_worker_row_takes_host_and_pid_from_the_owner_id(pg_url, admin, owner, host, pid):
    listener = _listener(pg_url, owner=owner).start()
    try:
        row = admin.execute("SELECT host, pid FROM workers WHERE owner=%s", (owner,)).fetchone()
        assert row == (host, pid)
    finally:
        listener.close()


@pytest.mark.parametrize("owner", [OWNER, "w" * 80])
def test_the_liveness_session_names_itself_after_its_owner(pg_url, admin, owner):
    listener = _listener(pg_url, owner=owner).start()
    try:
        row = admin.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid=%s", (listener.backend_pid,)
        ).fetchone()
        # PostgreSQL keeps 63 bytes of an application_name
        assert row == ((owner + " liveness")[:63],)
    finally:
        listener.close()


def _beat(admin: psycopg.Connection[Any], owner: str = OWNER) -> Any:
    row = admin.execute("SELECT heartbeat_at FROM workers WHERE owner=%s", (owner,)).fetchone()
    assert row is not None
    return row[0]


def _notify_and_hear(admin: psycopg.Connection[Any], listener: Listener, times: int) -> None:
    """Send ``times`` notifications one after another, each heard before the
    next: every pass but the last has also finished its heartbeat check."""
    for _ in range(times):
        want = listener.received + 1
        admin.execute(f"NOTIFY {CHANNEL}, 'x'")
        until(lambda want=want: listener.received == want, "a notification heard")


def test_heartbeats_go_on_after_the_first(pg_url, admin):
    listener = _listener(pg_url, owner=OWNER, heartbeat_s=0.0).start()
    try:
        beats = [_beat(admin)]
        for n in (1, 2):
            until(lambda: _beat(admin) > beats[-1], f"heartbeat {n} written")
            beats.append(_beat(admin))
    finally:
        listener.close()


def test_no_heartbeat_before_heartbeat_s_has_passed(pg_url, admin):
    listener = _listener(pg_url, owner=OWNER, heartbeat_s=3600.0).start()
    try:
        first = _beat(admin)
        _notify_and_hear(admin, listener, 3)
        assert _beat(admin) == first
    finally:
        listener.close()


def test_a_listener_without_an_owner_never_heartbeats(pg_url, admin):
    listener = _listener(pg_url, heartbeat_s=0.0).start()
    try:
        _notify_and_hear(admin, listener, 3)
        row = admin.execute(
            "SELECT query FROM pg_stat_activity WHERE pid=%s", (listener.backend_pid,)
        ).fetchone()
        assert row == (f"LISTEN {CHANNEL}",)  # its last statement is still its LISTEN
    finally:
        listener.close()


def test_a_failed_heartbeat_ends_the_session_and_reconnects_once_it_can(pg_url, admin, caplog):
    """A heartbeat UPDATE the server refuses counts as a lost session: the old
    session is closed (its backend ends), reconnects fail while the
    registration is refused too, and succeed once it is allowed again."""
    admin.execute(
        "CREATE FUNCTION refuse_beat() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.owner = %s THEN RAISE EXCEPTION 'heartbeat refused'; END IF; RETURN NEW; "
        "END $$".replace("%s", f"'{OWNER}'")
    )
    admin.execute(
        "CREATE TRIGGER refuse_beat BEFORE UPDATE ON workers "
        "FOR EACH ROW EXECUTE FUNCTION refuse_beat()"
    )
    caplog.set_level(logging.WARNING, logger="desktop_app.store.postgres.notify")
    listener = _listener(pg_url, owner=OWNER, heartbeat_s=0.0, reconnect_max_s=0.2).start()
    try:
        old = listener.backend_pid
        until(lambda: listener.losses == 1, "the refused heartbeat counted as a loss")
        until(
            lambda: _session_gone(admin, old),
            "the old session closed",
            bound_s=5,
        )
        until(lambda: bool(_reconnect_failures(caplog)), "a refused reconnect logged")
        assert "heartbeat refused" in _reconnect_failures(caplog)[0][0]
        assert not listener.alive
        admin.execute("DROP TRIGGER refuse_beat ON workers")
        until(lambda: listener.alive, "reconnected once allowed")
        assert listener.backend_pid not in (0, old)
    finally:
        listener.close()


def test_the_notifier_records_its_batchs_own_transaction_id(pool, hearer, admin):
    """``data_version`` leaves out exactly these ids: each must be the id of a
    batch's own committed transaction."""
    notifier = Notifier(pool)
    try:
        notifier.send(CHANNEL, "a:1")
        assert _heard(hearer, 1) == ["a:1"]
        until(lambda: notifier.batches == 1, "the batch counted")
        (xid,) = notifier.own_xids
        row = admin.execute("SELECT pg_xact_status(%s::text::xid8)", (str(xid),)).fetchone()
        assert row == ("committed",)
    finally:
        notifier.close()


def test_close_ends_the_session_even_when_unregistering_fails(pg_url, admin):
    """Shutting down never raises: a refused unregister leaves the worker row
    (it ages out like a killed worker's) and the session still ends."""
    admin.execute(
        "CREATE FUNCTION refuse_unregister() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "RAISE EXCEPTION 'unregister refused'; END $$"
    )
    admin.execute(
        "CREATE TRIGGER refuse_unregister BEFORE DELETE ON workers "
        "FOR EACH ROW EXECUTE FUNCTION refuse_unregister()"
    )
    listener = _listener(pg_url, owner=OWNER).start()
    pid = listener.backend_pid
    listener.close()
    assert listener.alive is False
    assert admin.execute("SELECT count(*) FROM workers WHERE owner=%s", (OWNER,)).fetchone() == (1,)
    until(
        lambda: _session_gone(admin, pid),
        "the session ended",
        bound_s=5,
    )
