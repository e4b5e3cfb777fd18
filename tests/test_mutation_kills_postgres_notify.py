"""The PostgreSQL listener session and the notifier's snapshot filter
(``store/postgres_notify.py``), on a real server: a worker's liveness
session registers, hears, heartbeats, notices its loss, reconnects after a
failed try, and unregisters; ``data_version`` leaves the notifier's own
transactions out of the snapshot it hashes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.store.postgres_notify import Listener, Notifier
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

OWNER = "testhost:4242:abcdef"


def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``check`` (a state the listener thread reaches) until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


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
            _until(lambda n=n: listener.received == n, f"notification {n} heard")
            assert listener.wait(5) is True
        _until(
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
    _until(
        lambda: (
            admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid=%s", (pid,)).fetchone()
            == (0,)
        ),
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

    listener = _listener(url, owner=OWNER, on_lost=on_lost).start()
    caplog.set_level(logging.WARNING, logger="desktop_app.store.postgres_notify")
    try:
        for round_ in (1, 2):
            lost.clear()
            caplog.clear()
            proxy.refuse()
            old = listener.backend_pid
            admin.execute("SELECT pg_terminate_backend(%s)", (old,))
            assert lost.wait(20), "the loss was never noticed"
            assert (listener.losses, len(calls), listener.alive) == (round_, round_, False)
            _until(
                lambda: any("listener reconnect failed" in r.getMessage() for r in caplog.records),
                "a failed reconnect logged",
            )
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
            _until(lambda: listener.alive, "reconnected")
            assert listener.backend_pid != old
    finally:
        listener.close()
