"""Conformance checks of Leases: who executes a run (claim, renew, release,
claim_runnable, the clock)."""

from __future__ import annotations

import math

from desktop_app.errors import (
    CheckpointNotFoundError,
    LeaseLostError,
    RunLeasedError,
)
from desktop_app.store.conformance.helpers import (
    _clocked,
    _cp,
    _eq,
    _id,
    _ok,
    _raises,
    _run,
    _threads,
)
from desktop_app.store.conformance.suite import ConformanceError, Harness, check
from desktop_app.store.protocol import (
    Intent,
    Lease,
    Wait,
)


@check("Leases.claim", "Leases.release", "RunLog.append")
def lease_claim_fence_release(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    got = s.claim(rid, Lease("a", 1030.0, 1000.0, ttl_s=30.0), 1000.0)
    _eq(got.lease_owner, "a", "claimed")
    try:
        s.claim(rid, Lease("b", 1040.0, 1010.0, ttl_s=30.0), 1010.0)
    except RunLeasedError as exc:
        _eq((exc.run_id, exc.owner), (rid, "a"), "the refusal names the run and its holder")
        _eq(exc.expires_at, s.get_run(rid).lease_expires_at, "and when its lease runs out")
    else:
        raise ConformanceError("claiming a live lease: expected RunLeasedError, nothing raised")
    with _raises(LeaseLostError, "appending under someone else's live lease"):
        s.append(_cp(rid, 1), lease=Lease("b", 1040.0, 1010.0))
    s.release(rid, "b")
    _eq(s.get_run(rid).lease_owner, "a", "release by a non-holder is a no-op")
    s.release(rid, "a")
    _eq((s.get_run(rid).lease_owner, s.get_run(rid).lease_expires_at), (None, None), "released")
    s.claim(rid, Lease("c", 1060.0, 1030.0), 1030.0)
    s.append(_cp(rid, 1, status="waiting"))
    _eq(s.get_run(rid).lease_owner, None, "a waiting run has no lease")
    with _raises(CheckpointNotFoundError, "claiming a missing run"):
        s.claim(_id(), Lease("a", 1.0, 0.0), 0.0)


@check("Leases.claim", "RunLog.append")
def a_takeover_is_a_compare_and_set_on_the_holder(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    t = s.now()
    s.claim(rid, Lease("gone", t + 3600.0, t, ttl_s=3600.0), t)
    with _raises(RunLeasedError, "a lease that names no holder taking a held run"):
        s.claim(rid, Lease("a", t + 60.0, math.inf, ttl_s=60.0), math.inf)
    with _raises(RunLeasedError, "taking over a live lease of another host's owner"):
        s.claim(rid, Lease("a", t + 60.0, t, ttl_s=60.0, takes_over="gone"), t)
    dead = Lease("a", t + 60.0, math.inf, ttl_s=60.0, takes_over="gone")
    _eq(s.claim(rid, dead, t).lease_owner, "a", "the first taker of a dead owner wins")
    late = Lease("b", t + 60.0, math.inf, ttl_s=60.0, takes_over="gone")
    with _raises(RunLeasedError, "a second taker of the owner the first one replaced"):
        s.claim(rid, late, t)
    with _raises(LeaseLostError, "appending as a second taker of the replaced owner"):
        s.append(_cp(rid, 1), lease=late)
    _eq(s.get_run(rid).lease_owner, "a", "the first taker keeps the run")
    s.append(_cp(rid, 1), lease=Lease("a", t + 60.0, t, ttl_s=60.0))
    _eq(s.get_run(rid).revision, 1, "the winner saves")
    other = _id()
    s.create_run(_run(other), _cp(other, 0))
    s.claim(other, Lease("expired", t, t, ttl_s=0.0), t)
    with _raises(LeaseLostError, "an append whose lease names no holder, on an expired lease"):
        s.append(_cp(other, 1), lease=Lease("c", t + 60.0, t + 1.0, ttl_s=60.0))
    taker = Lease("c", t + 61.0, t + 1.0, ttl_s=60.0, takes_over="expired")
    s.append(_cp(other, 1), lease=taker)
    _eq(s.get_run(other).lease_owner, "c", "an expired lease taken over by naming its owner")


@check("Leases.renew")
def renew_extends_only_our_runs_that_still_run(h: Harness) -> None:
    s = h.store()
    ours, theirs, waiting, free = (_id() for _ in range(4))
    for rid in (ours, theirs, waiting, free):
        s.create_run(_run(rid), _cp(rid, 0))
    t = s.now()
    mine = Lease("me", t + 30.0, t, ttl_s=30.0)
    s.claim(ours, mine, t)
    s.claim(theirs, Lease("other", t + 30.0, t, ttl_s=30.0), t)
    s.claim(waiting, mine, t)
    s.append(_cp(waiting, 1, status="waiting"), lease=mine)
    _eq(s.renew([], mine), set(), "nothing to renew")
    got = s.renew([ours, theirs, waiting, free, _id()], Lease("me", t + 600.0, t, ttl_s=600.0))
    _eq(got, {ours}, "only the running run this owner holds is renewed")
    _eq((s.get_run(ours).lease_expires_at or 0.0) > t + 300.0, True, "its lease runs on")
    _eq(s.get_run(theirs).lease_owner, "other", "another owner's lease is left as it is")
    _eq(s.get_run(waiting).lease_owner, None, "a waiting run is not leased again")
    _eq(s.get_run(free).lease_owner, None, "a free run is not leased by a heartbeat")


@check("Leases.now", "Leases.claim_runnable", "Leases.claim")
def lease_expiry_on_an_injected_clock(h: Harness) -> None:
    s, clock, db = _clocked(h)
    if db is None:
        _eq(s.now(), clock.now(), "now() is the injected clock")
    else:
        t = s.now()
        _ok(abs(t - clock.now()) < 60, "now() is the database clock")

    def at() -> float | None:
        return None if db is None else clock.now()

    rid = _id()
    s.create_run(_run(rid, t=clock.now()), _cp(rid, 0, t=clock.now()))
    (got,) = s.claim_runnable("a", 30.0, 10, now=at())
    _eq(got.lease_owner, "a", "claimed by a")
    _ok(abs((got.lease_expires_at or 0) - (clock.now() + 30.0)) < 1.0, "the lease carries its TTL")
    clock.advance(29)
    _eq(s.claim_runnable("b", 30.0, 10, now=at()), [], "a live lease is not handed out")
    clock.advance(2)
    (again,) = s.claim_runnable("b", 30.0, 10, now=at())
    _eq(again.lease_owner, "b", "an expired lease is taken over")
    _eq(s.get_run(rid).lease_owner, "b", "stored")


@check("Leases.claim", "Leases.claim_runnable", "Outbox.claim_intents")
def claims_use_the_time_they_are_given(h: Harness) -> None:
    """A lease or an intent claim that runs out at exactly ``now`` is free;
    ``claim_runnable`` and ``claim_intents`` judge expiry at the ``now``
    passed, not the store's clock; an owner may claim its own live lease."""
    s, clock, _ = _clocked(h)
    t = clock.now()
    rid, other = _id(), _id()
    s.create_run(_run(rid, t=t), _cp(rid, 0, t=t))
    s.create_run(_run(other, t=t + 1), _cp(other, 0, t=t))
    s.claim(rid, Lease("a", t + 30.0, t, ttl_s=30.0), t)
    _eq(s.claim(rid, Lease("a", t + 40.0, t + 10, ttl_s=30.0), t + 10).lease_owner, "a", "again")
    s.claim(other, Lease("a", t + 500.0, t, ttl_s=500.0), t)
    got = s.claim_runnable("b", 60.0, 10, wakeable=False, now=t + 40.0)
    _eq([r.run_id for r in got], [rid], "a lease out at exactly now is free; a live one is not")
    intents = [Intent(f"{other}:send:0:0", other, "send", "dest", {})]
    s.append(_cp(other, 1, t=t), intents=intents)
    _eq(len(s.claim_intents("d1", 60.0, 10, now=t + 100.0)), 1, "claimed until now + 60")
    _eq(s.claim_intents("d2", 60.0, 10, now=t + 159.0), [], "live one second before")
    _eq(len(s.claim_intents("d2", 60.0, 10, now=t + 160.0)), 1, "free at exactly its expiry")


@check("Leases.claim_runnable")
def claim_runnable_hands_out_what_may_run(h: Harness) -> None:
    s = h.store()
    t = s.now()
    ids = {
        name: _id()
        for name in ("pending", "running", "failed", "done", "waiting", "other", "ready", "dead")
    }
    for i, (name, rid) in enumerate(ids.items()):
        status = {
            "pending": "pending",
            "failed": "failed",
            "waiting": "waiting",
            "ready": "waiting",
        }.get(name, "running")
        s.create_run(
            _run(rid, t=t + i, flow="g" if name == "other" else "f"),
            _cp(rid, 0, status=status, t=t),
        )
    s.append(_cp(ids["done"], 1, status="completed", t=t))
    w = Wait(f"{ids['ready']}:w:0", "w", "signal", t, name="go", key="k")
    s.append(_cp(ids["ready"], 1, status="waiting", t=t, waits=(w,)))
    s.send_signal("go", "k", {}, t)
    s.claim(ids["dead"], Lease("ghost", t + 3600, t), t)
    got = s.claim_runnable("me", 60.0, 100, flows=["f"])
    _eq(
        [r.run_id for r in got],
        [ids["pending"], ids["running"], ids["ready"]],
        "claimed, interrupted first",
    )
    _ok(all(r.lease_owner == "me" for r in got), "returned with the lease set")
    _eq(s.claim_runnable("me2", 60.0, 100, flows=["f"]), [], "nothing twice")
    mine = s.claim_runnable("me", 60.0, 100, flows=["f"], wakeable=False)
    _eq([r.run_id for r in mine], [ids["pending"], ids["running"]], "the holder may claim again")
    dead = s.claim_runnable("me", 60.0, 100, presumed_dead=lambda o: o == "ghost", wakeable=False)
    _ok(ids["dead"] in [r.run_id for r in dead], "a dead owner's live lease is taken over")
    _ok(ids["other"] in [r.run_id for r in dead], "flows=None claims every flow")
    failed = s.claim_runnable("x", 60.0, 1, statuses=["failed"], wakeable=False)
    _eq([r.run_id for r in failed], [ids["failed"]], "statuses and limit")
    _eq(s.claim_runnable("x", 60.0, 0), [], "limit 0")
    one = s.claim_runnable("me", 60.0, 1, presumed_dead=lambda o: o == "ghost", wakeable=False)
    _eq([r.run_id for r in one], [ids["pending"]], "limit with presumed_dead: the oldest only")


@check("RunLog.create_run", "RunLog.get_run")
def a_lease_given_at_creation_keeps_its_length(h: Harness) -> None:
    """A run created already leased (a worker starting what it runs) holds
    the lease for exactly the length it was given: ``lease_expires_at -
    created_at``, on the store's clock, never rounded up to a second."""
    s, clock, db = _clocked(h)
    t = clock.now()
    rid = _id()
    s.create_run(_run(rid, t=t, lease_owner="a", lease_expires_at=t + 0.25), _cp(rid, 0, t=t))
    got = s.get_run(rid)
    _eq(got.lease_owner, "a", "leased at creation")
    held = (got.lease_expires_at or 0.0) - t
    if db is None:
        _eq(held, 0.25, "the lease's length on the injected clock")
    else:  # the database clock ran on a little between t and the INSERT
        _ok(0.25 <= held < 0.75, f"the lease's length on the database clock (got {held:.3f} s)")
    gone = _id()
    s.create_run(_run(gone, t=t, lease_owner="a", lease_expires_at=t - 5.0), _cp(gone, 0, t=t))
    taken = s.claim(gone, Lease("b", t + 60.0, t + 1.0, ttl_s=59.0, takes_over="a"), t + 1.0)
    _eq(taken.lease_owner, "b", "a lease already out at creation holds nothing")


@check("Leases.claim_runnable", "Mailbox.wakeable_runs")
def claiming_and_waking_runs_is_paged_by_default(h: Harness) -> None:
    s = h.store()
    t = s.now()
    for i in range(1001):  # waiting runs whose run deadline has passed
        rid = _id()
        s.create_run(
            _run(rid, t=t - 100 + i * 0.001, deadline_at=t - 10), _cp(rid, 0, status="waiting")
        )
    _eq(len(s.wakeable_runs(t)), 1000, "wakeable runs by default")
    _eq(len(s.wakeable_runs(t, limit=1001)), 1001, "wakeable runs with limit=1001")
    _eq(len(s.claim_runnable("me", 60.0)), 100, "claimed runs by default")


@check("Leases.claim_runnable")
def four_threads_claim_each_run_once(h: Harness) -> None:
    stores = [h.store() for _ in range(4)]
    t = stores[0].now()
    ids = [_id() for _ in range(24)]
    for i, rid in enumerate(ids):
        stores[0].create_run(_run(rid, t=t + i), _cp(rid, 0, status="pending", t=t))
    claimed: list[list[str]] = [[] for _ in range(4)]

    def claimer(i: int) -> None:
        while True:  # a holder may claim its own runs again: stop when nothing is new
            got = stores[i].claim_runnable(f"w{i}", 60.0, len(claimed[i]) + 3, wakeable=False)
            new = [r.run_id for r in got if r.run_id not in claimed[i]]
            if not new:
                return
            claimed[i].extend(new)

    _threads(4, claimer)
    every = [rid for c in claimed for rid in c]
    _eq(sorted(every), sorted(ids), "each run claimed exactly once by 4 concurrent claimants")
    for i, c in enumerate(claimed):
        for rid in c:
            _eq(stores[0].get_run(rid).lease_owner, f"w{i}", "the stored lease names the claimant")


@check("Leases.claim_runnable", "Mailbox.wakeable_runs")
def a_worker_of_some_flows_wakes_its_due_runs_behind_other_flows(h: Harness) -> None:
    """A worker that serves some flows (``flows``) wakes its own due runs
    however many due runs of other flows come before them in the order runs
    are woken, and claims none of those. (The SQLite and PostgreSQL stores
    looked at the first ``max(4 * limit, 100)`` due runs only, then kept the
    worker's flows: its run was never woken while those waited.)"""
    s = h.store()
    mine, other = _id(), _id()
    ahead = [_id() for _ in range(150)]
    for i, rid in enumerate(ahead):
        s.create_run(_run(rid, flow=other, deadline_at=10.0 + i), _cp(rid, 0, status="waiting"))
    behind, first = _id(), _id()
    s.create_run(_run(behind, flow=mine, deadline_at=500.0), _cp(behind, 0, status="waiting"))
    got = s.claim_runnable("w", 60.0, 1, flows=[mine], now=1000.0)
    _eq([r.run_id for r in got], [behind], "the worker's due run behind 150 of another flow")
    s.create_run(_run(first, flow=mine, deadline_at=5.0), _cp(first, 0, status="waiting"))
    got = s.claim_runnable("w", 60.0, 2, flows=[mine], now=1000.0)
    _eq(
        sorted(r.run_id for r in got),
        sorted([first, behind]),
        "a due run at the front and the one it holds behind the others, once each",
    )
    held = [rid for rid in ahead if s.get_run(rid).lease_owner is not None]
    _eq(held, [], "no run of the other flow claimed")
