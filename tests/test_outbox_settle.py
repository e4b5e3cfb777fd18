"""Settling intents a withdrawal took back mid-send (``outbox.settle_withdrawn``).

A dispatcher that dies after its send began leaves the intent ``sending``:
the effect may have been made. A cancel (or a tidy undo) that withdraws it
must not call it "never made": its destination is asked, as a dispatcher
reconciles an interrupted intent, and with none to ask the outcome is said
to be unknown. Real SQLite files; the dead dispatcher is a real process of
this host that has exited.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder, outbox
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import (
    CANCELED,
    OUTCOME_UNKNOWN,
    claimant_is_gone,
    settle_withdrawn,
)
from desktop_app.store.protocol import Withdrawal


class Mails(BaseModel):
    n: int = 0


def three_mails() -> Any:
    def queue(state: Mails, ctx: Any) -> dict[str, int]:
        for i in range(3):
            ctx.send("mail", {"n": i})
        return {"n": 3}

    def wait(state: Mails, ctx: Any) -> dict[str, int]:
        ctx.interrupt("send them?")
        return {}

    return FlowBuilder("mails", Mails).step("queue", queue).step("wait", wait).chain().compile()


def dead_owner() -> str:
    """The owner id of a dispatcher whose process (on this host) has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return f"{socket.gethostname()}:{gone.pid}:dead"


class Mailer:
    """A destination that has made the mails in ``made`` (receipts by key)."""

    def __init__(self, made: dict[str, Any] | None = None, broken: bool = False) -> None:
        self.made = made or {}
        self.broken = broken
        self.asked: list[str] = []

    def send(self, idempotency_key: str, payload: Any) -> Any:
        raise AssertionError("settling never sends")

    def lookup(self, idempotency_key: str) -> Any:
        self.asked.append(idempotency_key)
        if self.broken:
            raise OSError("the mail server is down")
        return self.made.get(idempotency_key)


def withdrawn_mid_send(store: Any) -> tuple[str, Withdrawal]:
    """A run with three mails queued: the first pending, the other two
    ``sending`` by a dispatcher that died; then withdrawn (all three)."""
    engine = Engine(store, flows=[three_mails()], clock=ManualClock())
    rid = engine.run("mails", {}).run_id
    owner = dead_owner()
    claimed = store.claim_intents(owner, 60.0, 10)
    keys = sorted(i.intent_id for i in claimed)
    for key in keys[1:]:
        assert store.mark_intent(key, "sending", 1.0, expect="pending")
    done = store.withdraw_intents(rid, CANCELED, presumed_dead=claimant_is_gone)
    assert sorted(i.intent_id for i in done.withdrawn) == keys
    return rid, done


def ids(intents: list[Any]) -> list[str]:
    return sorted(i.intent_id for i in intents)


def test_made_ones_are_recorded_delivered_the_others_stay_withdrawn(sqlite_store):
    _rid, done = withdrawn_mid_send(sqlite_store)
    pending, first, second = sorted(
        done.withdrawn, key=lambda i: (i.status != "pending", i.intent_id)
    )
    mailer = Mailer({first.intent_id: {"sent": "m-1"}})
    settled = settle_withdrawn(sqlite_store, done, ManualClock(500.0), {"mail": mailer})
    assert ids(settled.made) == [first.intent_id] and settled.unknown == []
    assert ids(settled.withdrawn) == ids([pending, second])  # pending: never sent, never asked
    assert sorted(mailer.asked) == sorted([first.intent_id, second.intent_id])
    (delivered,) = sqlite_store.intents(["delivered"])
    assert (delivered.intent_id, delivered.receipt) == (first.intent_id, {"sent": "m-1"})
    (at,) = sqlite_store.conn.execute(
        "SELECT delivered_at FROM outbox WHERE intent_id=?", (first.intent_id,)
    ).fetchone()
    assert at == 500.0  # the settling clock's time
    failed = {i.intent_id: i.last_error for i in sqlite_store.intents(["failed"])}
    assert failed == {pending.intent_id: CANCELED, second.intent_id: CANCELED}


def test_with_no_destination_or_a_failing_lookup_the_outcome_is_said_unknown(sqlite_store, caplog):
    _rid, done = withdrawn_mid_send(sqlite_store)
    caplog.set_level(logging.WARNING, logger="desktop_app.flow.outbox")
    broken = Mailer(broken=True)
    settled = settle_withdrawn(sqlite_store, done, destinations={"mail": broken})
    sending = ids([i for i in done.withdrawn if i.status == "sending"])
    assert ids(settled.unknown) == sending and settled.made == []
    assert [i.status for i in settled.withdrawn] == ["pending"]
    failed = {i.intent_id: i.last_error for i in sqlite_store.intents(["failed"])}
    assert [failed[k] for k in sending] == [OUTCOME_UNKNOWN] * 2
    said = [r.getMessage() for r in caplog.records if r.name == "desktop_app.flow.outbox"]
    for key in sending:
        assert f"intent {key}: lookup failed: the mail server is down" in said
    # no destination at all: unknown the same way
    _rid2, done2 = withdrawn_mid_send(sqlite_store)
    again = settle_withdrawn(sqlite_store, done2)
    assert len(again.unknown) == 2 and len(again.withdrawn) == 1 and again.made == []


def test_a_registered_lookup_is_asked_when_none_is_given_and_a_given_one_wins(sqlite_store):
    _rid, done = withdrawn_mid_send(sqlite_store)
    first, second = sorted(i.intent_id for i in done.withdrawn if i.status == "sending")
    registered = Mailer({first: {"r": 1}, second: {"r": 2}})
    seen: list[Any] = []

    def factory(store: Any) -> Mailer:
        seen.append(store)
        return registered

    outbox.register_lookup("mail", factory)
    try:
        settled = settle_withdrawn(sqlite_store, done)
        assert ids(settled.made) == [first, second] and seen == [sqlite_store] * 2
        _rid2, done2 = withdrawn_mid_send(sqlite_store)
        given = Mailer()  # it says none was made: given destinations come first
        later = settle_withdrawn(sqlite_store, done2, destinations={"mail": given})
        assert later.made == [] and len(later.withdrawn) == 3 and len(given.asked) == 2
    finally:
        outbox._LOOKUPS.pop("mail")


def test_what_the_withdrawal_already_settled_and_left_in_flight_is_kept(sqlite_store):
    _rid, done = withdrawn_mid_send(sqlite_store)
    earlier = done.withdrawn[:1]
    carried = Withdrawal(done.withdrawn[1:], earlier, made=earlier, unknown=earlier)
    settled = settle_withdrawn(sqlite_store, carried, destinations={"mail": Mailer()})
    assert settled.in_flight == earlier
    assert settled.made == earlier and settled.unknown == earlier


@pytest.mark.parametrize("status", ["pending", "sending"])
def test_only_mid_send_intents_are_asked(sqlite_store, status):
    _rid, done = withdrawn_mid_send(sqlite_store)
    mailer = Mailer()
    settle_withdrawn(sqlite_store, done, destinations={"mail": mailer})
    asked_statuses = {i.status for i in done.withdrawn if i.intent_id in mailer.asked}
    assert (status in asked_statuses) == (status == "sending")


class PeerFirst(Mailer):
    """A destination whose lookup of an intent finds another process has
    just settled that very intent (marked it delivered with ``receipt``)
    before this one's mark; then answers like ``Mailer``."""

    def __init__(self, peer: Any, receipt: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.peer, self.receipt = peer, receipt

    def lookup(self, idempotency_key: str) -> Any:
        assert self.peer.mark_intent(
            idempotency_key, "delivered", 2.0, receipt=self.receipt, expect="failed"
        )
        return super().lookup(idempotency_key)


@pytest.mark.parametrize("ours", ["made", "broken"])
def test_an_intent_another_process_settled_first_keeps_its_mark(db_path, sqlite_store, ours):
    """Two processes settle one intent (an undo and a cancel at once): the
    second's mark is compared and set on the ``failed`` the withdrawal left,
    so it never overwrites the first's ``delivered`` and its receipt."""
    from desktop_app.store.sqlite.store import open_store

    _rid, done = withdrawn_mid_send(sqlite_store)
    peer = open_store(db_path)
    try:
        made = {i.intent_id: {"ours": 1} for i in done.withdrawn}
        mailer = PeerFirst(peer, {"theirs": 1}, made=made, broken=ours == "broken")
        settle_withdrawn(sqlite_store, done, destinations={"mail": mailer})
    finally:
        peer.close()
    delivered = {i.intent_id: i.receipt for i in sqlite_store.intents(["delivered"])}
    assert sorted(delivered) == sorted(mailer.asked) and len(delivered) == 2
    assert set(map(str, delivered.values())) == {str({"theirs": 1})}


def test_a_cancel_logs_how_many_intents_it_withdrew(sqlite_store, caplog):
    caplog.set_level(logging.INFO, logger="desktop_app.flow.outbox")
    engine = Engine(sqlite_store, flows=[three_mails()], clock=ManualClock())
    rid = engine.run("mails", {}).run_id
    engine.cancel(rid)
    said = [r.getMessage() for r in caplog.records if r.name == "desktop_app.flow.outbox"]
    assert f"run {rid} canceled: 3 queued intents withdrawn" in said
