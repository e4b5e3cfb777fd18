"""Conformance checks of ChangeFeed and ChangePush: "did anything change" for
the UI, polled or pushed."""

from __future__ import annotations

import threading
import time
from typing import cast

from desktop_app.store.conformance.helpers import (
    _cp,
    _eq,
    _id,
    _ok,
    _run,
)
from desktop_app.store.conformance.suite import Harness, check
from desktop_app.store.protocol import (
    ChangePush,
    Intent,
    Lease,
)


@check("ChangeFeed.data_version")
def data_version_sees_every_commit(h: Harness) -> None:
    reader, writer = h.store(), h.store()
    rid = _id()
    # PostgreSQL's version is server-wide (documented false positives): a
    # commit in another database between two reads moves it too, so the
    # suite run in parallel on one server asks for one stable pair in up to
    # fifty (three were all moved by the other workers in a full CI run)
    pairs: list[tuple[int, int]] = []
    for _ in range(50):
        pairs.append((reader.data_version(), reader.data_version()))
        if pairs[-1][0] == pairs[-1][1]:
            break
        time.sleep(0.01)
    stable = [a for a, b in pairs if a == b]
    _ok(bool(stable), f"stable while nothing is committed: {pairs}")
    v0 = stable[-1]
    writer.create_run(_run(rid), _cp(rid, 0))
    v1 = reader.data_version()
    _ok(v1 != v0, "another connection's commit changes it")
    reader.append(_cp(rid, 1))
    _ok(reader.data_version() != v1, "the store's own commit changes it")


@check(
    "ChangeFeed.data_version",
    "RunLog.delete_run",
    "RunLog.prune",
    "Leases.release",
    "Mailbox.send_signal",
    "Mailbox.publish_event",
    "Outbox.mark_intent",
)
def every_kind_of_write_changes_data_version(h: Harness) -> None:
    """After any committed write the number differs from every value it had
    before: one that went back to an earlier value would hide a commit from
    a reader that polled before and after it."""
    s = h.store()
    rid, other = _id(), _id()
    seen = [s.data_version()]

    def changed(what: str) -> None:
        v = s.data_version()
        _ok(v not in seen, f"{what}: data_version went back to {v} (seen: {seen})")
        seen.append(v)

    s.create_run(_run(rid), _cp(rid, 0))
    changed("create_run")
    s.create_run(_run(other), _cp(other, 0))
    changed("a second create_run")
    s.append(_cp(rid, 1))
    changed("append")
    s.claim(rid, Lease("a", s.now() + 60, s.now(), ttl_s=60.0), s.now())
    changed("claim")
    s.release(rid, "a")
    changed("release")
    _eq(len(s.claim_runnable("b", 60.0, 10, wakeable=False)), 2, "both runs claimed")
    changed("claim_runnable")
    s.send_signal(_id(), "k", None, 1.0)
    changed("send_signal")
    s.publish_event(_id(), None, 1.0)
    changed("publish_event")
    key = f"{other}:send:0:0"
    s.append(_cp(other, 1), intents=[Intent(key, other, "send", "dest", {})])
    changed("append with an intent")
    _eq(len(s.claim_intents("d", 30.0, 10)), 1, "the intent claimed")
    changed("claim_intents")
    s.mark_intent(key, "sending", 2.0)
    changed("mark_intent")
    s.append(_cp(rid, 2))
    changed("a second append")
    _eq(s.prune(rid, 1), 2, "two checkpoints pruned")
    changed("prune")
    s.delete_run(other)
    changed("delete_run")


@check("ChangePush.watch_changes", needs=["push"])
def another_connections_changes_are_pushed(h: Harness) -> None:
    watched, writer = h.store(), h.store()
    heard = threading.Event()
    stop = cast(ChangePush, watched).watch_changes(heard.set)
    try:
        rid = _id()
        writer.create_run(_run(rid), _cp(rid, 0))
        _ok(heard.wait(30), "a run created by another connection is pushed")
        heard.clear()
        writer.append(_cp(rid, 1, status="completed"))
        _ok(heard.wait(30), "another connection's status change is pushed")
    finally:
        stop()
    stop()  # a second stop does nothing
