"""The event bus's contract: subscribers in subscription order, an
unsubscribe that removes only its own subscriber (and may be called twice),
and a failing subscriber logged by name without stopping the others."""

from __future__ import annotations

import logging

from desktop_app.flow.events import EventBus, RunProgress, RunStarted


def test_subscribers_get_every_event_in_subscription_order_until_they_unsubscribe():
    bus = EventBus()
    got: list[tuple[str, object]] = []
    stop_a = bus.subscribe(lambda e: got.append(("a", e)))
    bus.subscribe(lambda e: got.append(("b", e)))
    first = RunStarted("r1", "flow")
    bus.publish(first)
    assert got == [("a", first), ("b", first)]
    stop_a()
    stop_a()  # a second call is harmless
    second = RunProgress("r1", 1, 2)
    bus.publish(second)
    assert got == [("a", first), ("b", first), ("b", second)]


def test_a_failing_subscriber_is_logged_and_the_others_still_get_the_event(caplog):
    bus = EventBus()
    got: list[object] = []

    def broken(event) -> None:
        raise ValueError("listener bug")

    bus.subscribe(broken)
    bus.subscribe(got.append)
    event = RunStarted("r1", "flow")
    with caplog.at_level(logging.ERROR, logger="desktop_app.flow.events"):
        bus.publish(event)
    assert got == [event]
    (record,) = caplog.records
    assert record.name == "desktop_app.flow.events"
    assert record.getMessage() == f"event subscriber {broken!r} failed on 'RunStarted'"
    assert record.exc_info is not None and record.exc_info[0] is ValueError
