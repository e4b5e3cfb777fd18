"""Conformance checks of Outbox: intents queued by steps, claimed and marked by dispatchers."""

from __future__ import annotations

from desktop_app.errors import (
    RevisionConflictError,
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
from desktop_app.store.conformance.suite import Harness, check
from desktop_app.store.protocol import (
    Checkpoint,
    CheckpointStore,
    Intent,
    Wait,
    Withdrawal,
)


def _with_intents(s: CheckpointStore, n: int) -> tuple[str, list[str]]:
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    keys = [f"{rid}:send:0:{i}" for i in range(n)]
    intents = [Intent(k, rid, "send", "dest", {"i": i}) for i, k in enumerate(keys)]
    s.append(_cp(rid, 1), intents=intents)
    return rid, keys


@check("Outbox.intents", "Outbox.claim_intents", "Mailbox.due_waits")
def listing_intents_and_due_waits_is_paged_by_default(h: Harness) -> None:
    s = h.store()
    rid, _ = _with_intents(s, 101)
    _eq(len(s.intents(["pending"])), 100, "intents by default")
    _eq(len(s.intents(["pending"], limit=101)), 101, "intents with limit=101")
    _eq(len(s.claim_intents("d", 30.0)), 100, "claimed intents by default")
    waits = tuple(Wait(f"{rid}:t:{i}", "t", "timer", 10.0, deadline_at=50.0) for i in range(1001))
    s.append(_cp(rid, 2, status="waiting", waits=waits))
    _eq(len(s.due_waits(60.0)), 1000, "due waits by default")
    _eq(len(s.due_waits(60.0, limit=1001)), 1001, "due waits with limit=1001")


@check("Outbox.intents")
def intents_of_one_run_are_its_own_whatever_the_others(h: Harness) -> None:
    s = h.store()
    first, first_keys = _with_intents(s, 3)
    second, second_keys = _with_intents(s, 2)
    got = s.intents(["pending"], run_id=second)
    _eq([i.intent_id for i in got], second_keys, "only that run's, oldest first")
    got = s.intents(["pending"], limit=2, run_id=first)
    _eq([i.intent_id for i in got], first_keys[:2], "only that run's, at most the limit")
    _eq(s.intents(["delivered"], run_id=first), [], "only the statuses asked for")
    _eq(s.intents(["pending"], run_id=_id()), [], "a run with none")


@check("Outbox.delivered_runs", "Outbox.mark_intent")
def delivered_runs_are_the_completed_ones_with_nothing_left_to_send(h: Harness) -> None:
    s = h.store()

    def completed(t: float, statuses: tuple[str, ...], flow: str = "f") -> str:
        rid = _id()
        s.create_run(_run(rid, t, flow=flow), _cp(rid, 0))
        keys = [f"{rid}:send:0:{i}" for i in range(len(statuses))]
        intents = [Intent(k, rid, "send", "dest", {"i": i}) for i, k in enumerate(keys)]
        s.append(_cp(rid, 1, status="completed"), intents=intents)
        for key, status in zip(keys, statuses, strict=True):
            if status != "pending":
                s.mark_intent(key, "sending", t)
                s.mark_intent(key, status, t, error="x" if status == "failed" else None)
        return rid

    sent = completed(1000.0, ("delivered", "delivered"))
    none = completed(1001.0, ())
    completed(1002.0, ("delivered", "pending"))
    completed(1003.0, ("sending",))
    completed(1004.0, ("failed",))
    completed(1005.0, (), flow="other")
    live = _id()
    s.create_run(_run(live, 1006.0), _cp(live, 0))
    _eq(s.delivered_runs("f"), [none, sent], "completed, all delivered or none, newest first")
    _eq(s.delivered_runs("f", limit=1), [none], "at most the limit")
    _eq(s.delivered_runs("other"), [s.list_runs(flow_name="other")[0].run_id], "of that flow")
    _eq(s.delivered_runs("nothing"), [], "a flow with no runs")


@check("Outbox.intents", "Outbox.mark_intent", "RunLog.append")
def intents_commit_with_their_checkpoint(h: Harness) -> None:
    s = h.store()
    rid, keys = _with_intents(s, 2)
    got = s.intents(["pending"])
    _eq([i.intent_id for i in got if i.run_id == rid], keys, "pending, oldest first")
    _eq(got[0].payload, {"i": 0}, "payload")
    with _raises(RevisionConflictError, "an intent id already in the outbox"):
        s.append(_cp(rid, 2), intents=[Intent(keys[0], rid, "send", "dest", {})])
    _eq(s.get_run(rid).revision, 1, "the refused append saved nothing")
    s.mark_intent(keys[0], "sending", 5.0)
    s.mark_intent(keys[0], "delivered", 6.0, receipt={"ok": 1})
    s.mark_intent(keys[1], "sending", 5.0)
    s.mark_intent(keys[1], "failed", 6.0, error="no")
    (done,) = [i for i in s.intents(["delivered"]) if i.run_id == rid]
    _eq((done.attempts, done.receipt, done.last_error), (1, {"ok": 1}, None), "delivered")
    (bad,) = [i for i in s.intents(["failed"]) if i.run_id == rid]
    _eq((bad.intent_id, bad.last_error), (keys[1], "no"), "failed")
    _eq(s.intents(["pending", "sending"], limit=1), [], "nothing left to send")


@check("Outbox.mark_intent")
def mark_intent_with_expect_moves_only_from_that_status(h: Harness) -> None:
    s = h.store()
    rid, keys = _with_intents(s, 1)
    (key,) = keys
    _eq(s.mark_intent(key, "sending", 5.0, expect="sending"), False, "expecting the wrong status")
    (still,) = [i for i in s.intents(["pending"]) if i.run_id == rid]
    _eq((still.status, still.attempts), ("pending", 0), "the refused move changed nothing")
    _eq(s.mark_intent(key, "sending", 5.0, expect="pending"), True, "the first dispatcher")
    _eq(s.mark_intent(key, "sending", 5.0, expect="pending"), False, "the second, too late")
    (sent,) = [i for i in s.intents(["sending"]) if i.run_id == rid]
    _eq(sent.attempts, 1, "one send counted")
    _eq(s.mark_intent(key, "delivered", 6.0, receipt={"ok": 1}, expect="sending"), True, "acked")
    _eq(s.mark_intent(key, "pending", 7.0, expect="sending"), False, "no move after delivery")
    _eq(s.mark_intent(_id(), "delivered", 7.0), False, "an unknown intent does not move")


@check("Outbox.claim_intents", "Outbox.mark_intent")
def claimed_intents_are_not_handed_to_a_peer(h: Harness) -> None:
    s, clock, db = _clocked(h)

    def at() -> float | None:
        return None if db is None else clock.now()

    _, keys = _with_intents(s, 3)
    first = s.claim_intents("d1", 60.0, 2, now=at())
    _eq([i.intent_id for i in first], keys[:2], "oldest first, limit")
    _ok(not any(i.interrupted for i in first), "pending intents are not interrupted")
    _eq(
        [i.intent_id for i in s.claim_intents("d2", 60.0, 10, now=at())],
        keys[2:],
        "the peer gets the rest",
    )
    _eq(s.claim_intents("d3", 60.0, 10, now=at()), [], "nothing while both claims live")
    _eq(
        [i.intent_id for i in s.claim_intents("d1", 60.0, 10, now=at())],
        keys[:2],
        "the holder may claim its own again",
    )
    s.mark_intent(keys[0], "sending", clock.now())  # d1 sends keys[0] ... and dies
    s.mark_intent(keys[1], "pending", clock.now(), error="retry later")  # ends the claim
    got = s.claim_intents("d3", 60.0, 10, now=at())
    _eq([i.intent_id for i in got], [keys[1]], "an intent set back to pending is free again")
    gone = s.claim_intents("d4", 60.0, 10, presumed_dead=lambda o: o == "d1", now=at())
    _eq(
        [(i.intent_id, i.interrupted) for i in gone],
        [(keys[0], True)],
        "a dead claimant's send is reconciled",
    )
    _eq(gone[0].attempts, 1, "claiming does not count an attempt")
    clock.advance(61)
    late = s.claim_intents("d5", 60.0, 10, now=at())
    _eq(sorted(i.intent_id for i in late), sorted(keys), "every claim expired")


@check("Outbox.claim_intents", "Outbox.mark_intent")
def claim_intents_skips_what_is_done(h: Harness) -> None:
    """Delivered and failed intents are passed over, not the end of the
    scan; a delivery clears the error an earlier attempt left."""
    s = h.store()
    _, keys = _with_intents(s, 3)
    s.mark_intent(keys[0], "delivered", 5.0, receipt=1)
    s.mark_intent(keys[1], "failed", 5.0, error="no")
    _eq([i.intent_id for i in s.claim_intents("d", 30.0, 10)], keys[2:], "the pending one")
    s.mark_intent(keys[2], "sending", 6.0)
    s.mark_intent(keys[2], "pending", 6.0, error="timed out")
    s.mark_intent(keys[2], "sending", 7.0)
    s.mark_intent(keys[2], "delivered", 8.0, receipt=2)
    (done,) = [i for i in s.intents(["delivered"]) if i.intent_id == keys[2]]
    _eq((done.last_error, done.attempts, done.receipt), (None, 2, 2), "delivered after a retry")


@check("Outbox.claim_intents")
def claim_intents_for_some_destinations_leaves_the_others(h: Harness) -> None:
    """A dispatcher claims only the destinations it delivers to; the others'
    intents stay pending and unclaimed, and take no slot of its limit."""
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    theirs = [Intent(f"{rid}:a:{i}", rid, "a", "theirs", {"i": i}) for i in range(3)]
    mine = [Intent(f"{rid}:b:{i}", rid, "b", "mine", {"i": i}) for i in range(2)]
    s.append(_cp(rid, 1), intents=[*theirs, *mine])
    got = s.claim_intents("d", 30.0, 2, destinations=("mine", "other"))
    _eq([i.intent_id for i in got], [i.intent_id for i in mine], "only its destinations")
    _eq(s.claim_intents("d", 30.0, 10, destinations=()), [], "no destination: nothing")
    rest = s.claim_intents("e", 30.0, 10)
    _eq([i.intent_id for i in rest], [i.intent_id for i in theirs], "the others, unclaimed")


@check("Outbox.claim_intents")
def two_connections_claim_each_intent_once(h: Harness) -> None:
    a, b = h.store(), h.store()
    _, keys = _with_intents(a, 12)
    got: list[list[str]]

    got = [[] for _ in range(4)]

    def claimer(i: int) -> None:
        store = (a, b)[i % 2]
        while True:  # a claimant may claim its own again: stop when nothing is new
            batch = store.claim_intents(f"d{i}", 60.0, len(got[i]) + 2)
            new = [x.intent_id for x in batch if x.intent_id not in got[i]]
            if not new:
                return
            got[i].extend(new)

    _threads(4, claimer)
    every = [k for g in got for k in g]
    _eq(sorted(every), sorted(keys), "each intent claimed exactly once")


@check(
    "Outbox.withdraw_intents",
    "Outbox.undelivered_intents",
    "Outbox.mark_intent",
    "Outbox.failed_intents",
)
def withdrawing_takes_back_what_no_live_dispatcher_sends(h: Harness) -> None:
    """Pending intents (claimed or not) and a dead dispatcher's ``sending``
    one are withdrawn; a live dispatcher's send is left in flight; a
    dispatcher that claimed a withdrawn intent loses its compare-and-set."""
    s, clock, db = _clocked(h)

    def at() -> float | None:
        return None if db is None else clock.now()

    rid, keys = _with_intents(s, 5)
    other, other_keys = _with_intents(s, 1)
    _eq(s.undelivered_intents().get(rid), 5, "five undelivered")
    s.mark_intent(keys[0], "delivered", clock.now(), receipt=1)
    claimed = {i.intent_id for i in s.claim_intents("live", 60.0, 10, now=at())}
    _ok(set(keys[1:]) <= claimed, "the live dispatcher claims the run's pending intents")
    s.mark_intent(keys[1], "sending", clock.now(), expect="pending")  # live, in flight
    s.mark_intent(keys[2], "sending", clock.now(), expect="pending")  # dead, below
    done = s.withdraw_intents(rid, "withdrawn", presumed_dead=lambda o: False, now=at())
    _eq(sorted(i.intent_id for i in done.withdrawn), keys[3:], "pending ones, claimed or not")
    _eq(sorted(i.intent_id for i in done.in_flight), keys[1:3], "live sends left alone")
    _eq(s.mark_intent(keys[3], "sending", clock.now(), expect="pending"), False, "claimant loses")
    again = s.withdraw_intents(rid, "withdrawn", presumed_dead=lambda o: True, now=at())
    _eq(sorted(i.intent_id for i in again.withdrawn), keys[1:3], "a dead claimant's sends")
    _eq(again.in_flight, [], "nothing left in flight")
    _eq([i.status for i in again.withdrawn], ["sending"] * 2, "told as they were: mid-send")
    _eq(s.mark_intent(keys[2], "delivered", clock.now(), expect="sending"), False, "late ack")
    failed = {i.intent_id: i.last_error for i in s.intents(["failed"], limit=1000)}
    _eq([failed.get(k) for k in keys[1:]], ["withdrawn"] * 4, "withdrawn with the reason")
    _eq([i.intent_id for i in s.failed_intents(rid)], keys[1:], "the run's failed, oldest first")
    _eq(s.failed_intents(other), [], "none of another run")
    _eq(s.failed_intents(_id()), [], "none of an unknown run")
    pending = [i.intent_id for i in s.intents(["pending"], limit=1000)]
    _eq(pending, other_keys, "another run's intent stays pending")
    _eq(rid in s.undelivered_intents(), False, "nothing of the run undelivered")
    _eq(s.undelivered_intents().get(other), 1, "another run's intent is untouched")
    _eq(s.withdraw_intents(rid, "x", now=at()), Withdrawal([], []), "running it again: nothing")
    # settling one withdrawn mid-send that its destination says was made
    settled = s.mark_intent(keys[2], "delivered", clock.now(), receipt={"r": 2}, expect="failed")
    _eq(settled, True, "a withdrawn intent settled as made")
    _eq([i.receipt for i in s.intents(["delivered"], limit=1000) if i.intent_id == keys[2]],
        [{"r": 2}], "with the destination's receipt")  # fmt: skip


@check(
    "Outbox.claim_intents",
    "Outbox.renew_intent_claim",
    "Outbox.release_intent",
    "Outbox.open_intents",
    "Outbox.sending_intents",
    "Outbox.sending_claims",
    "Outbox.withdraw_intents",
)
def a_live_or_renewed_claim_holds_and_a_released_send_stays_interrupted(h: Harness) -> None:
    s, clock, db = _clocked(h)

    def at() -> float | None:
        return None if db is None else clock.now()

    rid, keys = _with_intents(s, 2)
    _eq([i.status for i in s.open_intents(rid)], ["pending", "pending"], "open, oldest first")
    _eq(s.open_intents(_id()), [], "no open intents of an unknown run")
    (mine,) = s.claim_intents("d1", 60.0, 1, now=at())
    _eq(s.renew_intent_claim(mine.intent_id, "d1", 60.0, now=at()), False, "not sending yet")
    s.mark_intent(mine.intent_id, "sending", clock.now(), expect="pending")
    _eq(s.sending_intents().get(rid), 1, "one sending")
    _eq({k: c[0] for k, c in s.sending_claims(rid).items()}, {mine.intent_id: "d1"}, "its claim")
    _eq(s.sending_claims(_id()), {}, "no sending intents of an unknown run")
    _eq([i.status for i in s.open_intents(rid)], ["sending", "pending"], "still open")
    clock.advance(61)
    alive = s.claim_intents("d2", 60.0, 10, presumed_alive=lambda o: o == "d1", now=at())
    _eq([i.intent_id for i in alive], keys[1:], "an expired claim of a live claimant holds")
    _eq(
        s.withdraw_intents(rid, "gone", presumed_alive=lambda o: o == "d1", now=at()).in_flight,
        [i for i in s.open_intents(rid) if i.intent_id == keys[0]],
        "nor is it withdrawn",
    )
    _eq(s.renew_intent_claim(keys[0], "d2", 60.0, now=at()), False, "only by its claimant")
    _eq(s.renew_intent_claim(keys[0], "d1", 60.0, now=at()), True, "renewed while sending")
    _eq(s.claim_intents("d3", 60.0, 10, now=at()), [], "a renewed claim holds by the clock too")
    _eq(s.release_intent(keys[0], "d3", "no"), False, "released only by its claimant")
    _eq(s.release_intent(keys[0], "d1", "lookup failed"), True, "released")
    _eq(s.sending_claims(rid), {keys[0]: (None, None)}, "sending, its claim let go")
    (again,) = s.claim_intents("d3", 60.0, 10, now=at())
    _eq(
        (again.intent_id, again.status, again.interrupted, again.attempts, again.last_error),
        (keys[0], "sending", True, 1, "lookup failed"),
        "a released send is claimed interrupted, its reason kept",
    )
    _eq(s.sending_intents().get(rid), 1, "still sending: outcome unknown")


@check("Outbox.update_latest_withdrawing")
def ending_a_run_and_withdrawing_its_intents_commit_together(h: Harness) -> None:
    """A run's terminal checkpoint and the withdrawal of its undelivered
    intents (a cancel) commit together: after it, no dispatcher (another
    connection too) claims them; a ``change`` that raises changes neither."""
    s, clock, db = _clocked(h)

    def at() -> float | None:
        return None if db is None else clock.now()

    rid, keys = _with_intents(s, 3)
    s.mark_intent(keys[0], "delivered", clock.now(), receipt=1)

    def refuse(cp: Checkpoint) -> Checkpoint:
        raise RevisionConflictError("no")

    with _raises(RevisionConflictError, "what change raises goes on"):
        s.update_latest_withdrawing(rid, refuse, "gone", now=at())
    _eq(s.undelivered_intents().get(rid), 2, "nothing withdrawn when the change fails")
    _eq(s.get_run(rid).status, "running", "nor the run changed")

    def cancel(cp: Checkpoint) -> Checkpoint:
        return cp.evolve(revision=cp.revision + 1, status="canceled")

    cp, done = s.update_latest_withdrawing(rid, cancel, "gone", now=at())
    _eq((cp.revision, cp.status), (2, "canceled"), "the appended checkpoint")
    _eq(s.get_run(rid).status, "canceled", "the run ended")
    _eq(sorted(i.intent_id for i in done.withdrawn), keys[1:], "its pending intents withdrawn")
    _eq(done.in_flight, [], "none in flight")
    _eq(h.store().claim_intents("d", 60.0, 10, now=at()), [], "no dispatcher claims them")
    failed = {i.intent_id: i.last_error for i in s.intents(["failed"], limit=1000)}
    _eq([failed.get(k) for k in keys[1:]], ["gone", "gone"], "withdrawn with the reason")
