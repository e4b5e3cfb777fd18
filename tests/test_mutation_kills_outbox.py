"""The dispatcher's rules checked in one process, on a real SQLite file and a
test clock: how long a claim holds (300 s by default, on the dispatcher's
clock), whose claim is presumed gone, the pass limit, reconciling an
interrupted send, error classification, the ``expect`` guard against a
dispatcher whose claim expired, and the times recorded for an export."""

from __future__ import annotations

import contextlib
import gc
import json
import socket
import sys
import weakref

import pytest
from pydantic import BaseModel

from desktop_app.export import export, iso_time
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher, claimant_is_gone
from desktop_app.flow.owners import new_owner
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver


class Q(BaseModel):
    dest: str = "sink"
    count: int = 1


def _queue(s: Q, ctx) -> dict:
    for i in range(s.count):
        ctx.send(s.dest, {"n": i})
    return {}


FLOW = FlowBuilder("queue", Q).step("queue", _queue).compile()


class Crash(BaseException):
    """The dispatcher's process dying mid-send (escapes ``except Exception``)."""


class Sink:
    """A destination that de-duplicates by key and remembers every call."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.sent: list[tuple[str, object]] = []
        self.have: dict[str, dict] = {}
        self.clock = clock
        self.fail_next: list[BaseException] = []
        self.crash_after_accept = False

    def send(self, key, payload):
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.sent.append((key, payload))
        receipt = {"accepted": key, "payload": payload}
        self.have[key] = receipt
        if self.clock is not None:
            self.clock.advance(5)
        if self.crash_after_accept:
            self.crash_after_accept = False
            raise Crash()
        return receipt

    def lookup(self, key):
        return self.have.get(key)


def _queued(db_path, count: int = 1, dest: str = "sink"):
    store = open_store(db_path)  # the store keeps the process clock: claims follow the dispatcher's
    res = Engine(store, flows=[FLOW]).run("queue", Q(dest=dest, count=count))
    assert res.status == "completed"
    return store, [f"{res.run_id}:queue:0:{i}" for i in range(count)]


def _outbox_rows(db_path, tmp_path) -> dict[str, dict]:
    out = tmp_path / "export"
    export(db_path, out, "json", ["outbox"])
    return {r["intent_id"]: r for r in json.loads((out / "outbox.json").read_text())}


#: an owner id of a dispatcher on another machine: never presumed alive or
#: dead from here, so only its claim's expiry (or renewal) keeps its intent
ELSEWHERE = "another-machine:1:abcdef"


def test_a_live_dispatchers_claim_holds_300_s_on_the_dispatchers_clock(db_path):
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink()
    crashing.fail_next = [Crash()]
    first = Dispatcher(store, {"sink": crashing}, clock, owner=ELSEWHERE)
    with pytest.raises(Crash):
        first.dispatch()
    (held,) = store.intents(["sending"])
    assert held.attempts == 1
    sink = Sink()
    second = Dispatcher(store, {"sink": sink}, clock)
    assert second.dispatch() == 0  # the first one is alive and its claim holds
    clock.advance(299.5)
    assert second.dispatch() == 0 and sink.sent == []
    clock.advance(0.5)
    assert second.dispatch() == 1  # expired at exactly 300 s: reconciled, then sent
    assert sink.sent == [(key, {"n": 0})]
    (done,) = store.intents(["delivered"])
    assert done.attempts == 2
    assert first.owner != second.owner
    store.close()


def test_a_claim_of_a_live_dispatcher_of_this_host_holds_whatever_the_clock(db_path):
    """Liveness beats clocks (the rule of run leases): a dispatcher of this
    process that is still alive keeps its claim an hour past its expiry."""
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink()
    crashing.fail_next = [Crash()]
    first = Dispatcher(store, {"sink": crashing}, clock)
    with pytest.raises(Crash):
        first.dispatch()
    sink = Sink()
    second = Dispatcher(store, {"sink": sink}, clock)
    clock.advance(3600)
    assert second.dispatch() == 0 and sink.sent == []
    assert first.dispatch() == 1  # its own claim: reconciled, then sent
    assert crashing.sent == [(key, {"n": 0})]
    store.close()


def test_a_dropped_dispatchers_claim_is_taken_at_once(db_path):
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink()
    crashing.fail_next = [Crash()]
    first = Dispatcher(store, {"sink": crashing}, clock)
    with contextlib.suppress(Crash):
        first.dispatch()
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None
    sink = Sink()
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1  # no wait for the claim
    assert sink.sent == [(key, {"n": 0})]
    store.close()


def test_which_claimants_are_presumed_gone(sqlite_store):
    live = Dispatcher(sqlite_store, {})
    assert claimant_is_gone(live.owner) is False
    assert claimant_is_gone(new_owner()) is True  # this process, but no dispatcher has it
    assert claimant_is_gone("elsewhere.invalid:1:abcdef") is False  # its claim expires instead
    exited = cli_forkserver.run_argv(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert claimant_is_gone(f"{socket.gethostname()}:{exited.stdout.strip()}:abcdef") is True


def test_one_pass_delivers_at_most_limit_intents_100_by_default(db_path):
    store, keys = _queued(db_path, count=103)
    sink = Sink()
    dispatcher = Dispatcher(store, {"sink": sink}, ManualClock())
    assert dispatcher.dispatch(limit=2) == 2
    assert dispatcher.dispatch() == 100
    assert dispatcher.dispatch() == 1
    assert sorted(k for k, _ in sink.sent) == sorted(keys)  # each once
    store.close()


def test_an_intent_for_a_destination_a_dispatcher_lacks_stays_pending_for_one_that_has_it(
    db_path,
):
    """The CLI's, the app's and ``flowdesk agent``'s dispatchers know the
    built-in destinations only; a user's program delivers its own. An intent
    for one of those is left to it: not failed, not claimed, and not taking
    a slot of the pass's limit (it used to be failed for good, the effect
    lost while its run showed ``completed``)."""
    store, (key,) = _queued(db_path, dest="nowhere")
    others, keys = _queued_more(store, count=3)
    theirs = Dispatcher(store, {"sink": others}, ManualClock())
    assert theirs.dispatch(limit=3) == 3  # the unknown one took none of the 3 slots
    assert theirs.dispatch() == 0
    (pending,) = store.intents(["pending", "sending", "failed"])
    assert (pending.intent_id, pending.status, pending.last_error) == (key, "pending", None)
    claimed_by = store.conn.execute(
        "SELECT claimed_by FROM outbox WHERE intent_id=?", (key,)
    ).fetchone()[0]
    assert claimed_by is None
    mine = Sink()
    assert Dispatcher(store, {"nowhere": mine}, ManualClock()).dispatch() == 1
    assert [k for k, _ in mine.sent] == [key] and sorted(k for k, _ in others.sent) == keys
    store.close()


def _queued_more(store, count: int) -> tuple[Sink, list[str]]:
    """``count`` more intents for ``sink`` on ``store`` (after the others)."""
    res = Engine(store, flows=[FLOW]).run("queue", Q(count=count))
    assert res.status == "completed"
    keys = sorted(i.intent_id for i in store.intents(["pending"]) if i.destination == "sink")
    return Sink(), keys


def test_an_interrupted_send_the_destination_has_is_marked_delivered_not_resent(db_path, tmp_path):
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    sink = Sink(clock)
    sink.crash_after_accept = True  # accepted, then the process died before marking it
    with pytest.raises(Crash):
        Dispatcher(store, {"sink": sink}, clock).dispatch()
    gc.collect()
    clock.advance(300)
    reconciled_at = clock.now()
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1
    assert sink.sent == [(key, {"n": 0})]  # not sent again
    (done,) = store.intents(["delivered"])
    assert done.receipt == {"accepted": key, "payload": {"n": 0}}
    assert done.attempts == 1
    store.close()
    assert _outbox_rows(db_path, tmp_path)[key]["delivered_at"] == iso_time(reconciled_at)


def test_an_interrupted_send_the_destination_lacks_is_sent_again_with_its_key(db_path):
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink()
    crashing.fail_next = [Crash()]  # died before the destination got it
    with pytest.raises(Crash):
        Dispatcher(store, {"sink": crashing}, clock).dispatch()
    clock.advance(300)
    sink = Sink()
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1
    assert sink.sent == [(key, {"n": 0})]
    (done,) = store.intents(["delivered"])
    assert done.receipt == {"accepted": key, "payload": {"n": 0}} and done.attempts == 2
    store.close()


def test_delivery_records_the_receipt_and_the_dispatchers_times(db_path, tmp_path):
    clock = ManualClock()
    store, (key,) = _queued(db_path)
    sink = Sink(clock)  # each send takes 5 s on the test clock
    started = clock.now()
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1
    (done,) = store.intents(["delivered"])
    assert done.receipt == {"accepted": key, "payload": {"n": 0}}
    assert done.attempts == 1 and done.last_error is None
    store.close()
    row = _outbox_rows(db_path, tmp_path)[key]
    assert row["sent_at"] == iso_time(started)
    assert row["delivered_at"] == iso_time(started + 5)


class Refused(Exception):
    retryable = False


class Flaky(Exception):
    retryable = True


def test_an_error_marked_not_retryable_fails_the_intent_for_good(db_path):
    store, (key,) = _queued(db_path)
    sink = Sink()
    sink.fail_next = [Refused("no such account")]
    dispatcher = Dispatcher(store, {"sink": sink}, ManualClock())
    assert dispatcher.dispatch() == 0
    (failed,) = store.intents(["failed"])
    assert failed.intent_id == key
    assert failed.last_error == "Refused: no such account" and failed.attempts == 1
    assert dispatcher.dispatch() == 0 and sink.sent == []
    store.close()


@pytest.mark.parametrize(
    "error, text",
    [(ConnectionError("reset"), "ConnectionError: reset"), (Flaky("busy"), "Flaky: busy")],
)
def test_any_other_error_leaves_the_outcome_unknown_for_the_next_pass_to_look_up(
    db_path, error, text
):
    """A retryable error may come after the effect (a reset once the server
    made it): the intent stays ``sending`` with the error, its claim let go,
    and the next pass looks it up before sending it again."""
    from desktop_app.flow.outbox import SEND_FAILED

    store, (key,) = _queued(db_path)
    asked: list[str] = []

    class Asked(Sink):
        def lookup(self, key):
            asked.append(key)
            return super().lookup(key)

    sink = Asked()
    sink.fail_next = [error]
    dispatcher = Dispatcher(store, {"sink": sink}, ManualClock())
    assert dispatcher.dispatch() == 0
    assert store.intents(["pending"]) == []
    (unknown,) = store.intents(["sending"])
    assert unknown.intent_id == key
    assert unknown.last_error == f"{SEND_FAILED}: {text}" and unknown.attempts == 1
    assert asked == []
    assert dispatcher.dispatch() == 1  # looked up (not there), then sent again, same key
    assert asked == [key]
    (done,) = store.intents(["delivered"])
    assert done.attempts == 2 and done.last_error is None
    assert sink.sent == [(key, {"n": 0})]
    store.close()


def test_an_intent_another_dispatcher_took_over_is_not_sent_again(db_path):
    """A dispatcher whose claim expired while it was sending (a slow send) finds
    its next intent taken over and delivered by another one: it skips it."""
    clock = ManualClock()
    store, (k0, k1) = _queued(db_path, count=2)
    other_store = open_store(db_path)
    sent: list[str] = []
    other = Dispatcher(other_store, {"sink": Sink()}, clock)
    other_delivered: list[int] = []

    class Slow(Sink):
        def send(self, key, payload):
            if not other_delivered:
                clock.advance(301)  # this send outlives the claim on both intents
                other_delivered.append(other.dispatch())
            sent.append(key)
            return {"slow": key}

    slow = Dispatcher(store, {"sink": Slow()}, clock, owner=ELSEWHERE)  # not seen alive
    assert slow.dispatch() == 1  # k0 delivered; k1 was no longer pending
    assert other_delivered == [2]
    assert sent == [k0]
    delivered = {i.intent_id: i for i in store.intents(["delivered"])}
    assert set(delivered) == {k0, k1}
    assert delivered[k1].attempts == 1 and delivered[k1].receipt["accepted"] == k1
    # k0: the other dispatcher's delivery stands; the slow one's late mark
    # (its claim expired) is refused, not written over it
    assert delivered[k0].receipt == {"accepted": k0, "payload": {"n": 0}}
    store.close()
    other_store.close()


def test_a_late_send_error_does_not_set_back_an_intent_another_dispatcher_delivered(db_path):
    """A dispatcher whose claim expired while its send hung, and whose send
    then failed, finds the intent delivered by another dispatcher meanwhile:
    its error mark is refused (it would set the intent back to pending and
    send it a second time)."""
    clock = ManualClock()
    store, (k0,) = _queued(db_path, count=1)
    other_store = open_store(db_path)
    other_sink = Sink()
    other = Dispatcher(other_store, {"sink": other_sink}, clock)

    class Broken(Sink):
        def send(self, key, payload):
            clock.advance(301)  # this send outlives its claim
            assert other.dispatch() == 1  # the other one delivers it meanwhile
            raise ConnectionError("reset")

    broken = Dispatcher(store, {"sink": Broken()}, clock, owner=ELSEWHERE)  # not seen alive
    assert broken.dispatch() == 0
    (done,) = store.intents(["delivered", "pending", "failed"])
    assert (done.intent_id, done.status) == (k0, "delivered")
    assert other.dispatch() == 0 and other_sink.sent == [(k0, {"n": 0})]
    store.close()
    other_store.close()


# -- the claim of the intent being sent is renewed while it is sent ------------


def _claim_expiry(db_path, key: str) -> float:
    """The intent's claim expiry read from the file (with the product's SQLite
    library: a second SQLite library in one process would drop its locks)."""
    from desktop_app.store.connection import open_connection

    conn = open_connection(db_path)
    try:
        ((at,),) = conn.execute(
            "SELECT claim_expires_at FROM outbox WHERE intent_id=?", (key,)
        ).fetchall()
    finally:
        conn.close()
    return float(at)


def _until(check, what: str, limit_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {limit_s} s: {check.__doc__}"
        time.sleep(0.05)


def test_a_slow_send_renews_its_claim_on_the_dispatchers_clock_and_no_peer_takes_it(db_path):
    """A dispatcher never presumed alive (another machine) whose send outlives
    its claim: the claim is renewed to the dispatcher's clock plus the TTL,
    so a peer dispatching meanwhile leaves the intent alone and it is sent once."""
    clock = ManualClock(2_000_000_000.0)  # ahead of the store's clock: renewal must use this one
    store, (key,) = _queued(db_path)
    peer_sink = Sink()
    seen: list[int] = []

    class SlowSink(Sink):
        def send(self, key, payload):
            clock.advance(1000)  # the claim (0.3 s) expired long ago by this clock
            _until(
                lambda: _claim_expiry(db_path, key) == pytest.approx(2_000_001_000.3, abs=0.01),
                "renewal to the dispatcher's clock + 0.3 s",
                limit_s=30,
            )
            with contextlib.closing(open_store(db_path)) as peer_store:
                seen.append(Dispatcher(peer_store, {"sink": peer_sink}, clock).dispatch())
            return super().send(key, payload)

    sink = SlowSink()
    first = Dispatcher(store, {"sink": sink}, clock, owner=ELSEWHERE, claim_ttl_s=0.3)
    assert first.dispatch() == 1, store.intents(["pending"])
    assert seen == [0] and peer_sink.sent == []  # the peer took nothing over
    assert sink.sent == [(key, {"n": 0})]
    (done,) = store.intents(["delivered"])
    assert (done.intent_id, done.attempts) == (key, 1)
    store.close()


def test_a_send_whose_claim_was_lost_to_a_cancel_says_so(db_path, caplog):
    """A cancel took back the send while its (expired, never presumed alive)
    claimant was sending, and said its outcome unknown: the renewal finds the
    claim gone and logs it (what the intent then records: docs/mutation.md,
    the eleventh session's outbox section)."""
    from desktop_app.flow.outbox import withdraw_for_cancel

    clock = ManualClock()
    store, (key,) = _queued(db_path)
    run_id = key.split(":")[0]
    other = open_store(db_path)
    lost = f"intent {key}: claim lost while sending"
    said: list[bool] = []

    class CanceledSink(Sink):
        def send(self, key, payload):
            withdrawn = withdraw_for_cancel(other, run_id, None)  # the store's clock: expired
            assert [i.intent_id for i in withdrawn.unknown] == [key]  # said unknown
            _until(lambda: lost in caplog.messages, "warning of the lost claim", limit_s=30)
            said.append(True)
            return super().send(key, payload)

    caplog.set_level("WARNING", logger="desktop_app.flow.outbox")
    sink = CanceledSink()
    first = Dispatcher(store, {"sink": sink}, clock, owner=ELSEWHERE, claim_ttl_s=0.3)
    assert first.dispatch() == 1
    assert said == [True]
    assert sink.sent == [(key, {"n": 0})]  # sent once, by the claimant
    other.close()
    store.close()


class DownSink(Sink):
    def lookup(self, key):
        raise OSError("destination down")


def test_a_failed_lookup_keeps_the_send_interrupted_says_why_and_lets_the_claim_go(db_path, caplog):
    """An interrupted send whose lookup raises is neither sent blindly nor
    counted: it stays ``sending`` with the reason, the warning names it, and its
    claim is let go so the next dispatcher looks it up at once."""
    from desktop_app.flow.outbox import LOOKUP_FAILED

    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink()
    crashing.fail_next = [Crash()]
    with pytest.raises(Crash):
        Dispatcher(store, {"sink": crashing}, clock).dispatch()
    gc.collect()  # that dispatcher is gone: its claim is taken at once
    caplog.set_level("WARNING", logger="desktop_app.flow.outbox")
    down = DownSink()
    assert Dispatcher(store, {"sink": down}, clock).dispatch() == 0
    assert down.sent == []  # never sent blindly
    assert f"intent {key}: lookup failed: destination down" in caplog.messages
    (held,) = store.intents(["sending"])
    assert held.intent_id == key  # still sending: its outcome unknown
    assert held.last_error == f"{LOOKUP_FAILED}: OSError: destination down"
    sink = Sink()  # the same clock: the claim was let go, not left to expire
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1
    assert sink.sent == [(key, {"n": 0})]
    (done,) = store.intents(["delivered"])
    assert done.intent_id == key
    store.close()


def test_a_cancel_leaves_a_send_a_live_dispatcher_of_this_process_makes_to_it(db_path):
    """Its claim expired by the store's clock (the dispatcher's runs 11 months
    behind), but its dispatcher is alive here: the cancel leaves it in flight,
    and the send is recorded delivered when it ends."""
    from desktop_app.flow.outbox import withdraw_for_cancel

    clock = ManualClock()  # 2026-01-01: the claim expired long ago by the store's clock
    store, (key,) = _queued(db_path)
    run_id = key.split(":")[0]
    other = open_store(db_path)
    seen = []

    class CanceledSink(Sink):
        def send(self, key, payload):
            done = withdraw_for_cancel(other, run_id, None)
            seen.append(([i.intent_id for i in done.in_flight], done.withdrawn, done.unknown))
            return super().send(key, payload)

    sink = CanceledSink()
    assert Dispatcher(store, {"sink": sink}, clock).dispatch() == 1
    assert seen == [([key], [], [])]
    (done,) = store.intents(["delivered"])
    assert (done.intent_id, done.receipt) == (key, sink.have[key])
    other.close()
    store.close()


def test_a_pass_that_sends_nothing_yet_renews_no_claim_and_warns_of_none(db_path, caplog):
    """While a pass looks an interrupted send up (nothing being sent yet),
    the renewal ticks (every 0.1 s here) renew nothing and warn of nothing."""
    import time

    clock = ManualClock()
    store, (key,) = _queued(db_path)
    crashing = Sink(clock)
    crashing.crash_after_accept = True
    with pytest.raises(Crash):
        Dispatcher(store, {"sink": crashing}, clock).dispatch()
    gc.collect()

    class SlowLookup(Sink):
        def lookup(self, key):
            time.sleep(0.5)  # several renewal ticks pass
            return crashing.have.get(key)

    caplog.set_level("WARNING", logger="desktop_app.flow.outbox")
    assert Dispatcher(store, {"sink": SlowLookup()}, clock, claim_ttl_s=0.3).dispatch() == 1
    # the outbox's own warnings: another test in this process may have left
    # the engine's INFO lines (a run created, stopped) reaching caplog
    outbox_said = [r.getMessage() for r in caplog.records if r.name == "desktop_app.flow.outbox"]
    assert outbox_said == []
    (done,) = store.intents(["delivered"])
    assert done.intent_id == key
    store.close()
