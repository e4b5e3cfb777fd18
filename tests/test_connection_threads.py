"""Opening a connection while another thread is inside a call on an existing
connection to the same file.

The registry of open connections checks whether each is still open by
reading an attribute; apsw refuses that with ``ThreadingViolationError``
("Connection is busy in another thread") while another thread is using the
connection. A second store opened then (a watcher thread, a worker pool, a
crash test's peek connection) must open, not fail: seen as a rare failure of
the parallel-branch crash test, whose branch threads open their own stores
while the engine's connection commits.
"""

from __future__ import annotations

import threading
from pathlib import Path

from desktop_app.store.connection import connections_open
from desktop_app.store.sqlite.store import open_store


def test_a_store_opens_while_another_thread_is_inside_a_call_on_the_first(
    db_path: Path,
) -> None:
    db = db_path
    first = open_store(db)
    inside, release = threading.Event(), threading.Event()

    def block() -> int:
        inside.set()
        assert release.wait(30)
        return 1

    first.conn.create_scalar_function("block", block, 0)
    busy = threading.Thread(
        target=lambda: first.query(lambda c: c.execute("SELECT block()").fetchall())
    )
    busy.start()
    try:
        assert inside.wait(30)  # the first connection is now in use by that thread
        assert connections_open(db) == 1
        second = open_store(db)  # raised ThreadingViolation before
        try:
            assert second.list_runs() == []
            assert connections_open(db) == 2
        finally:
            second.close()
    finally:
        release.set()
        busy.join(30)
    assert not busy.is_alive()
    assert connections_open(db) == 1
    first.close()
    assert connections_open(db) == 0
