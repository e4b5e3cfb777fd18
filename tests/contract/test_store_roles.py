"""Conformance of the store's other roles, on memory, SQLite and PostgreSQL:
leases, single flight, control appends, the mailbox, events, waits and
deadlines, the outbox, listing filters. (The revision log itself is in
test_checkpoint_store.py.)"""

from __future__ import annotations

import math
import threading

import pytest

from desktop_app.errors import (
    DedupeKeyReusedError,
    DuplicateFlowKeyError,
    LeaseLostError,
    RevisionConflictError,
    RunLeasedError,
)
from desktop_app.store.protocol import Checkpoint, Intent, Lease, RunRecord, Wait

pytestmark = pytest.mark.scenario("S65")


def make_run(run_id: str, t: float = 1000.0, **kw) -> RunRecord:
    return RunRecord(run_id, kw.pop("flow", "f"), kw.pop("version", "v1"), "running", 0, t, t, **kw)


def cp(run_id: str, rev: int, state: dict | None = None, status="running", **kw) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), 1000.0 + rev, **kw)


def test_lease_claim_refuse_takeover_release(store):
    store.create_run(make_run("r1"), cp("r1", 0))
    got = store.claim("r1", Lease("a", 1030.0, 1000.0), 1000.0)
    assert got.lease_owner == "a" and got.lease_expires_at is not None
    with pytest.raises(RunLeasedError):
        store.claim("r1", Lease("b", 1040.0, 1010.0), 1010.0)
    with pytest.raises(LeaseLostError):
        store.append(cp("r1", 1), lease=Lease("b", 1040.0, 1010.0))
    store.append(cp("r1", 1, {"by": "a"}), lease=Lease("a", 1031.0, 1001.0))  # renewal
    store.release("r1", "b")  # not b's: no-op
    assert store.get_run("r1").lease_owner == "a"
    # an owner known dead: a lease naming it, issued_at = inf, takes over any expiry
    with pytest.raises(LeaseLostError):  # naming no holder takes nothing
        store.append(cp("r1", 2, {"by": "b"}), lease=Lease("b", 1050.0, math.inf))
    store.append(cp("r1", 2, {"by": "b"}), lease=Lease("b", 1050.0, math.inf, takes_over="a"))
    assert store.get_run("r1").lease_owner == "b"
    store.release("r1", "b")
    rec = store.get_run("r1")
    assert (rec.lease_owner, rec.lease_expires_at) == (None, None)
    store.claim("r1", Lease("c", 1060.0, 1030.0), 1030.0)
    store.append(cp("r1", 3, status="waiting"))
    assert store.get_run("r1").lease_owner is None  # nobody executes a waiting run


def test_single_flight_flow_key(store):
    store.create_run(make_run("r1", flow_key="k"), cp("r1", 0))
    with pytest.raises(DuplicateFlowKeyError):
        store.create_run(make_run("r2", flow_key="k"), cp("r2", 0))
    store.create_run(make_run("r3", flow_key="k", flow="other"), cp("r3", 0))
    store.append(cp("r1", 1, status="completed"))
    store.create_run(make_run("r2", flow_key="k"), cp("r2", 0))  # r1 finished: allowed
    assert [r.run_id for r in store.list_runs(flow_key="k", flow_name="f")] == ["r1", "r2"]


def test_update_latest_wins_against_concurrent_appends(store):
    store.create_run(make_run("r1"), cp("r1", 0, {"n": 0}))
    stop = threading.Event()
    appended: list[int] = []

    def busy() -> None:
        while not stop.is_set():
            rev = store.get_run("r1").revision + 1
            try:
                store.append(cp("r1", rev, {"n": rev}))
                appended.append(rev)
            except RevisionConflictError:
                continue

    t = threading.Thread(target=busy)
    t.start()
    try:
        done = [
            store.update_latest(
                "r1", lambda c, i=i: c.evolve(revision=c.revision + 1, meta={"i": i})
            )
            for i in range(5)
        ]
    finally:
        stop.set()
        t.join()
    revisions = [c.revision for c in done] + appended
    assert sorted(revisions) == list(range(1, len(revisions) + 1))  # no gaps, no duplicates
    for c in done:
        assert store.get_checkpoint("r1", c.revision).meta == c.meta


def test_mailbox_dedupe_order_and_consume(store):
    waits = (Wait("r1:a:0", "a", "signal", 1000.0, name="approve", key="k"),)
    store.create_run(make_run("r1"), cp("r1", 0))
    store.append(cp("r1", 1, status="waiting", waits=waits))
    assert store.wakeable_runs(1000.0) == []
    s1 = store.send_signal("approve", "k", {"n": 1}, 1001.0, dedupe_key="d")
    assert store.send_signal("approve", "k", {"n": 1}, 1002.0, dedupe_key="d") == s1
    with pytest.raises(DedupeKeyReusedError, match="with another payload: nothing was sent"):
        store.send_signal("approve", "k", {"n": 99}, 1002.0, dedupe_key="d")
    s2 = store.send_signal("approve", "k", {"n": 2}, 1003.0)
    store.send_signal("approve", "other", {"n": 3}, 1003.0)
    first = store.next_signal("approve", "k")
    assert first is not None and (first.signal_id, first.payload) == (s1, {"n": 1})
    assert store.wakeable_runs(1000.0) == ["r1"]
    assert store.runs_waiting_for("signal", "approve", "k") == ["r1"]
    assert store.runs_waiting_for("signal", "approve", "nope") == []
    store.append(cp("r1", 2, status="waiting", waits=waits), consume=[(s1, "r1:a:0")])
    nxt = store.next_signal("approve", "k")
    assert nxt is not None and nxt.signal_id == s2
    with pytest.raises(RevisionConflictError):
        store.append(cp("r1", 3), consume=[(s1, "r1:a:1")])
    assert store.get_run("r1").revision == 2  # the refused append left nothing behind


def test_events_deadlines_and_wake_order(store):
    store.create_run(make_run("r1"), cp("r1", 0))
    store.create_run(make_run("r2"), cp("r2", 0))
    store.append(
        cp(
            "r1",
            1,
            status="waiting",
            waits=(Wait("r1:a:0", "a", "timer", 1000.0, deadline_at=1500.0),),
        )
    )
    store.append(
        cp("r2", 1, status="waiting", waits=(Wait("r2:a:0", "a", "event", 1000.0, name="deploy"),))
    )
    assert store.next_deadline() == 1500.0
    assert store.due_waits(1499.0) == []
    assert store.due_waits(1500.0) == [("r1", "r1:a:0")]
    store.publish_event("deploy", {"v": 0}, 999.0)  # before the wait began
    assert store.first_event("deploy", 1000.0) is None
    assert store.wakeable_runs(1000.0) == []
    eid = store.publish_event("deploy", {"v": 1}, 1001.0)
    ev = store.first_event("deploy", 1000.0)
    assert ev is not None and (ev.event_id, ev.payload, ev.published_at) == (eid, {"v": 1}, 1001.0)
    assert store.wakeable_runs(1600.0) == ["r1", "r2"]  # a due deadline first
    store.append(cp("r1", 2, status="running"))
    assert store.next_deadline() is None


def test_outbox_intents_in_the_checkpoint_transaction(store):
    store.create_run(make_run("r1"), cp("r1", 0))
    a = Intent("r1:s:0:0", "r1", "s", "http", {"p": 1})
    b = Intent("r1:s:0:1", "r1", "s", "http", {"p": 2})
    store.append(cp("r1", 1), intents=[a, b])
    assert [i.intent_id for i in store.intents(["pending"])] == [a.intent_id, b.intent_id]
    store.mark_intent(a.intent_id, "sending", 1002.0)
    store.mark_intent(a.intent_id, "sending", 1003.0)
    store.mark_intent(a.intent_id, "delivered", 1004.0, receipt={"id": 7})
    store.mark_intent(b.intent_id, "failed", 1004.0, error="410 gone")
    (got_a,) = store.intents(["delivered"])
    assert (got_a.attempts, got_a.receipt, got_a.payload) == (2, {"id": 7}, {"p": 1})
    (got_b,) = store.intents(["failed"])
    assert got_b.last_error == "410 gone"
    with pytest.raises(RevisionConflictError):
        store.append(cp("r1", 2), intents=[a])  # an idempotency key is used once
    assert store.get_run("r1").revision == 1


def test_list_filters_and_other_versions(store):
    ctx = {"tenant_id": "t1", "session_id": "s1"}
    store.create_run(make_run("r1", t=1.0, context=ctx), cp("r1", 0))
    store.create_run(make_run("r2", t=2.0, version="v2"), cp("r2", 0))
    store.create_run(make_run("r3", t=3.0, context={"tenant_id": "t1"}), cp("r3", 0))
    store.append(cp("r3", 1, status="completed"))
    assert [r.run_id for r in store.list_runs(tenant_id="t1")] == ["r1", "r3"]
    assert [r.run_id for r in store.list_runs(tenant_id="t1", session_id="s1")] == ["r1"]
    assert store.get_run("r1").context == ctx
    assert [r.run_id for r in store.runs_of_other_versions("f", "v2")] == ["r1"]
    assert [r.run_id for r in store.runs_of_other_versions("f", "v1")] == ["r2"]
    assert store.list_runs(flow_name="nope") == []
