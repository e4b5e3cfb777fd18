"""Conformance checks of Mailbox: signals, events, waits and deadlines."""

from __future__ import annotations

from desktop_app.errors import (
    CheckpointNotFoundError,
    DedupeKeyReusedError,
    DuplicateWaitIdError,
    RevisionConflictError,
)
from desktop_app.store.conformance.helpers import (
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
    Wait,
)


@check("Mailbox.send_signal", "Mailbox.next_signal", "Mailbox.signal_consumer", "RunLog.append")
def signals_are_consumed_once(h: Harness) -> None:
    s = h.store()
    name, key = _id(), "k"
    first = s.send_signal(name, key, {"n": 1}, 10.0, dedupe_key=_id())
    second = s.send_signal(name, key, {"n": 2}, 11.0)
    got = s.next_signal(name, key)
    _ok(got is not None and got.signal_id == first and got.payload == {"n": 1}, "oldest first")
    _ok(got is not None and (got.name, got.key) == (name, key), "its name and key")
    _ok(got is not None and got.sent_at == 10.0, "when it was sent")
    _eq(s.next_signal(name, "other"), None, "another key")
    _eq(s.signal_consumer(first), None, "no wait consumed it yet")
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    s.append(_cp(rid, 1), consume=[(first, f"{rid}:w:0")])
    _eq(s.signal_consumer(first), f"{rid}:w:0", "the wait that consumed it")
    _eq(s.signal_consumer(second), None, "the next one still waits")
    nxt = s.next_signal(name, key)
    _ok(nxt is not None and nxt.signal_id == second, "a consumed signal is not handed out again")
    with _raises(RevisionConflictError, "consuming a signal twice"):
        s.append(_cp(rid, 2), consume=[(first, f"{rid}:w:1")])
    _eq(s.get_run(rid).revision, 1, "the refused append saved nothing")


@check("Mailbox.send_signal")
def signal_dedupe_from_two_connections(h: Harness) -> None:
    a, b = h.store(), h.store()
    name, dedupe = _id(), _id()
    ids: list[int] = []
    _threads(4, lambda i: ids.append((a, b)[i % 2].send_signal(name, "k", {"i": 1}, 5.0, dedupe)))
    _eq(len(set(ids)), 1, "four sends with one dedupe key from two connections store one signal")
    got = b.next_signal(name, "k")
    _ok(got is not None and got.signal_id == ids[0], "that signal")


@check("Mailbox.send_signal", "Mailbox.signal_by_dedupe_key")
def signal_dedupe_key_names_one_request(h: Harness) -> None:
    a, b = h.store(), h.store()
    name, dedupe = _id(), _id()
    _eq(a.signal_by_dedupe_key(dedupe), None, "a dedupe key not used yet")
    first = a.send_signal(name, "k", {"n": 1}, 5.0, dedupe)
    got = b.signal_by_dedupe_key(dedupe)
    _ok(
        got is not None
        and (got.signal_id, got.name, got.key, got.payload, got.sent_at)
        == (first, name, "k", {"n": 1}, 5.0),
        "the signal sent with it, from another connection",
    )
    _eq(b.send_signal(name, "k", {"n": 1}, 6.0, dedupe), first, "the same request: a duplicate")
    for sname, key, payload, why in (
        (name, "k", {"n": 2}, "another payload"),
        (name, "other", {"n": 1}, "another key"),
        (_id(), "k", {"n": 1}, "another name"),
        (name, "k", {"n": 1.0}, "a payload equal in Python, not in JSON"),
    ):
        with _raises(DedupeKeyReusedError, f"a used dedupe key with {why}"):
            b.send_signal(sname, key, payload, 7.0, dedupe)
    _eq(a.next_signal(name, "other"), None, "a refused send stored nothing")
    nxt = a.next_signal(name, "k")
    _ok(nxt is not None and nxt.signal_id == first and nxt.payload == {"n": 1}, "the first stays")


@check("Mailbox.publish_event", "Mailbox.first_event")
def events_are_broadcast(h: Harness) -> None:
    s = h.store()
    kind = _id()
    e1 = s.publish_event(kind, {"n": 1}, 100.0)
    e2 = s.publish_event(kind, {"n": 2}, 200.0)
    _ok(e2 != e1, "distinct ids")
    got = s.first_event(kind, 50.0)
    _ok(got is not None and got.event_id == e1 and got.payload == {"n": 1}, "first since 50")
    _ok(got is not None and got.type == kind and got.published_at == 100.0, "its type and time")
    at = s.first_event(kind, 100.0)
    _ok(at is not None and at.event_id == e1, "an event at exactly `since` counts")
    got = s.first_event(kind, 150.0)
    _ok(got is not None and got.event_id == e2, "first since 150")
    _eq(s.first_event(kind, 250.0), None, "none since 250")
    _eq(s.first_event(_id(), 0.0), None, "another type")


@check(
    "Mailbox.due_waits",
    "Mailbox.next_deadline",
    "Mailbox.wakeable_runs",
    "Mailbox.runs_waiting_for",
)
def waits_deadlines_and_wakeups(h: Harness) -> None:
    s = h.store()
    timer, sig, ev, late = _id(), _id(), _id(), _id()
    sname, etype = _id(), _id()
    waits = {
        timer: Wait(f"{timer}:t:0", "t", "timer", 10.0, deadline_at=50.0),
        sig: Wait(f"{sig}:s:0", "s", "signal", 10.0, name=sname, key="k", deadline_at=90.0),
        ev: Wait(f"{ev}:e:0", "e", "event", 10.0, name=etype),
    }
    for rid, w in waits.items():
        s.create_run(_run(rid), _cp(rid, 0))
        s.append(_cp(rid, 1, status="waiting", waits=(w,)))
    s.create_run(_run(late, deadline_at=70.0), _cp(late, 0, status="waiting"))
    _eq(s.next_deadline(), 50.0, "earliest deadline")
    _eq(s.due_waits(60.0), [(timer, f"{timer}:t:0")], "due at 60")
    _eq(s.due_waits(40.0), [], "none due at 40")
    _eq(s.wakeable_runs(40.0), [], "nothing to act on at 40")
    _eq(s.wakeable_runs(75.0), [timer, late], "due deadlines, by deadline")
    s.send_signal(sname, "k", None, 20.0)
    s.publish_event(etype, None, 30.0)
    _eq(set(s.wakeable_runs(40.0)), {sig, ev}, "a deliverable signal and event")
    _eq(s.wakeable_runs(75.0)[:2], [timer, late], "deadlines before signals")
    _eq(s.runs_waiting_for("signal", sname, "k"), [sig], "waiting for the signal")
    _eq(s.runs_waiting_for("signal", sname), [sig], "any key")
    _eq(s.runs_waiting_for("event", etype), [ev], "waiting for the event")
    older = "zz" + _id()  # waits longer, its id sorts last
    s.create_run(_run(older), _cp(older, 0))
    w = Wait(f"{older}:s:0", "s", "signal", 5.0, name=sname, key="k")
    s.append(_cp(older, 1, status="waiting", waits=(w,)))
    _eq(s.runs_waiting_for("signal", sname, "k"), [older, sig], "the one waiting longest first")
    s.append(_cp(timer, 2))
    _eq(s.next_deadline(), 90.0, "a resolved wait's deadline is gone")


@check("RunLog.create_run", "RunLog.append", "Mailbox.due_waits", "Mailbox.runs_waiting_for")
def two_waits_with_one_wait_id_are_refused(h: Harness) -> None:
    """A checkpoint carrying two waits with one wait id is the caller's bug:
    :class:`DuplicateWaitIdError` naming the wait id, on a new run and on an
    append, and nothing of it saved (no revision, no wait); never a conflict
    with another writer."""
    s = h.store()
    sname = _id()
    created, appended = _id(), _id()

    def twins(rid: str) -> tuple[Wait, Wait]:
        return (
            Wait(f"{rid}:w:0", "w", "signal", 10.0, name=sname, key="k", deadline_at=50.0),
            Wait(f"{rid}:w:0", "t", "timer", 10.0, deadline_at=60.0),
        )

    def said(rid: str, revision: int) -> str:
        return (
            f"run {rid}: checkpoint revision {revision} carries 2 waits with wait id "
            f"'{rid}:w:0'; each wait of a run needs an id of its own, so nothing was saved "
            "(a bug in the code that built the checkpoint, not another writer's save)"
        )

    with _raises(DuplicateWaitIdError, "a new run's two waits with one id", said(created, 0)):
        s.create_run(_run(created), _cp(created, 0, status="waiting", waits=twins(created)))
    with _raises(CheckpointNotFoundError, "the refused run was not created"):
        s.get_run(created)
    s.create_run(_run(appended), _cp(appended, 0))
    with _raises(DuplicateWaitIdError, "an append's two waits with one id", said(appended, 1)):
        s.append(_cp(appended, 1, status="waiting", waits=twins(appended)))
    _eq(s.get_run(appended).revision, 0, "the refused append saved nothing")
    _eq(s.due_waits(100.0), [], "no wait of either was saved")
    _eq(s.runs_waiting_for("signal", sname), [], "no run waits for the signal")
    s.append(_cp(appended, 1, status="waiting", waits=twins(appended)[:1]))
    _eq(s.due_waits(100.0), [(appended, f"{appended}:w:0")], "one wait of that id is stored")


@check("Mailbox.wakeable_runs", "Mailbox.send_signal", "Mailbox.publish_event")
def wakeable_runs_orders_deadlines_and_matches_deliveries(h: Harness) -> None:
    """Due deadlines come first, earliest first, whether a wait's or the
    run's, and a deadline at exactly ``now`` is due; a run with both a due
    deadline and a delivery ranks by its deadline. Only a signal of the
    wait's own name and key wakes it; an event published at the instant the
    wait began wakes it."""
    s = h.store()
    p = _id()[:8]
    # run ids in the reverse of deadline order, so an order by id shows
    run_dl, sig_dl, timer20, timer30 = (f"{p}-{c}" for c in "dcba")
    other_sig, ev = f"{p}-e", f"{p}-f"
    sname = _id()
    s.create_run(_run(run_dl, deadline_at=5.0), _cp(run_dl, 0, status="waiting"))
    waits = {
        sig_dl: Wait(f"{sig_dl}:s:0", "s", "signal", 1.0, name=sname, key="k", deadline_at=10.0),
        timer20: Wait(f"{timer20}:t:0", "t", "timer", 1.0, deadline_at=20.0),
        timer30: Wait(f"{timer30}:t:0", "t", "timer", 1.0, deadline_at=30.0),
        other_sig: Wait(f"{other_sig}:s:0", "s", "signal", 1.0, name=sname, key="other"),
        ev: Wait(f"{ev}:e:0", "e", "event", 40.0, name=sname),
    }
    for rid, w in waits.items():
        s.create_run(_run(rid), _cp(rid, 0))
        s.append(_cp(rid, 1, status="waiting", waits=(w,)))
    s.send_signal(sname, "k", None, 2.0)
    s.send_signal(_id(), "other", None, 2.0)
    _eq(s.wakeable_runs(5.0)[:1], [run_dl], "a run deadline at exactly now")
    _eq(s.wakeable_runs(30.0)[:4], [run_dl, sig_dl, timer20, timer30], "deadlines, by deadline")
    _eq(s.wakeable_runs(20.0)[:3], [run_dl, sig_dl, timer20], "a wait deadline at exactly now")
    _ok(other_sig not in s.wakeable_runs(30.0), "a signal of another key or name wakes nothing")
    s.publish_event(sname, None, 40.0)
    _eq(set(s.wakeable_runs(0.0)), {sig_dl, ev}, "deliveries: the signal and the event")
