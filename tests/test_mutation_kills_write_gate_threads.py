"""The write gate among the threads and paths of one process (kill tests
for mutants of ``WriteGate.acquire``, ``_start_reaper``, ``_disable``,
``gate_for`` and ``_names`` in ``store/write_gate.py``): a thread waits
for another thread's write transaction up to its busy timeout and then
fails typed, never for ever; a failed nested write leaves the outer
transaction's ``flock`` held; two paths to one file share one gate; the
reaper is a named daemon thread; a refused ``flock`` is logged once with
its reason. Real SQLite files."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from desktop_app.errors import StoreError
from desktop_app.store import write_gate
from desktop_app.store.sqlite.store import open_store
from desktop_app.store.write_gate import LOCK_SUFFIX
from tests.test_write_gate import held_elsewhere

LIMIT_S = 60.0


def test_a_thread_waits_for_another_threads_write_only_its_busy_timeout(db_path: Path) -> None:
    holder = open_store(db_path)
    waiter = open_store(db_path, busy_timeout_s=0.3)
    inside, finish = threading.Event(), threading.Event()

    def long_write(tx: object) -> None:
        holder.publish_event("long", {}, holder.now())
        inside.set()
        assert finish.wait(LIMIT_S)

    thread = threading.Thread(target=holder.write, args=(long_write,))
    thread.start()
    try:
        assert inside.wait(LIMIT_S)
        began = time.monotonic()
        with pytest.raises(StoreError, match="busy timeout") as caught:
            waiter.publish_event("late", {}, waiter.now())
        assert time.monotonic() - began < LIMIT_S / 4  # its timeout, not the holder's end
        said = str(caught.value)
        assert "stayed locked by another thread of this process past the busy timeout" in said
        assert "nothing was written" in said
    finally:
        finish.set()
        thread.join(LIMIT_S)
    waiter.publish_event("after", {}, waiter.now())
    rows = waiter.conn.execute("SELECT type FROM events ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == ["long", "after"]
    holder.close()
    waiter.close()


def test_a_failed_nested_write_leaves_the_outer_transactions_flock_held(db_path: Path) -> None:
    outer = open_store(db_path, busy_timeout_s=0.2)
    inner = open_store(db_path, busy_timeout_s=0.2)
    seen: list[bool] = []

    def op(tx: object) -> None:
        outer.publish_event("outer", {}, outer.now())
        with pytest.raises(StoreError):
            inner.publish_event("inner", {}, inner.now())
        seen.append(held_elsewhere(db_path))  # still this transaction's
        outer.publish_event("outer-again", {}, outer.now())

    outer.write(op)
    assert seen == [True]
    outer.close()
    inner.close()


def test_two_paths_to_one_file_share_its_gate(db_path: Path) -> None:
    """A symbolic link and the file's own path (or a path spelled another
    way) name one database: one gate, so two connections of this process
    through them wait for each other's transaction, never for each other's
    ``flock``."""
    link = db_path.with_name("link.db")
    link.symlink_to(db_path)
    st = os.stat(db_path)
    key = (st.st_dev, st.st_ino)
    assert write_gate.gate_for(link, key) is write_gate.gate_for(db_path, key)
    assert write_gate._names(db_path, key) and write_gate._names(link, key)
    assert not write_gate._names(db_path.with_name("none.db"), key)
    other = db_path.with_name("other.db")
    other.write_bytes(b"")
    assert not write_gate._names(other, key)


def test_the_reaper_is_a_daemon_thread_named_after_the_database(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_gate, "HOLD_S", 60.0)  # the turn, and its reaper, stay
    store = open_store(db_path)
    try:
        store.publish_event("e", {}, store.now())
        (gate,) = [g for g in write_gate._GATES.values() if g.db == db_path]
        reaper = gate._reaper
        assert reaper is not None and reaper.is_alive()
        assert reaper.name == f"flowdesk-write-gate {db_path.name}"
        assert reaper.daemon  # an exit never waits for it
    finally:
        store.close()


def test_a_refused_flock_is_logged_once_with_its_reason(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    fresh = db_path.with_name("nolocks.db")
    fresh.write_bytes(db_path.read_bytes())
    monkeypatch.setattr(write_gate.fcntl, "flock", refused)
    caplog.set_level(logging.WARNING, logger="desktop_app.store.write_gate")
    store = open_store(fresh)
    try:
        store.publish_event("a", {}, store.now())
        store.publish_event("b", {}, store.now())
    finally:
        store.close()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "desktop_app.store.write_gate"]
    assert said == (
        f"cannot lock {fresh}{LOCK_SUFFIX} ({os.strerror(errno.ENOLCK)}): writes to this "
        "database wait for other processes in SQLite's busy handler only, slower with "
        "several processes on one file"
    )


def test_a_turn_end_that_cannot_be_written_leaves_the_write_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's planned end is a hint for the waiters (they poll without
    it): an I/O error writing it never fails the write."""
    db = tmp_path / "f.db"
    from tests.cli_support import flowdesk

    assert flowdesk(db, "db", "apply").returncode == 0

    def failing(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(write_gate.os, "pwrite", failing)
    store = open_store(db)
    try:
        store.publish_event("written", {}, store.now())
        rows = store.conn.execute("SELECT type FROM events").fetchall()
    finally:
        monkeypatch.undo()
        store.close()
    assert rows == [("written",)]
