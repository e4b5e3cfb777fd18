"""A cancel that lands between a waking process's read of a waiting run and
its save: the wake-up is refused with a clear RunStateError (nothing was
delivered, the signal stays in the mailbox), and a worker's tick goes on
with its other runs. Before, the driver's internal stop signal (``Canceled``)
escaped ``Engine.wake``, ``Engine.signal`` and ``Engine.tick``, the loop of
``flowdesk serve``.

Two engines over one real SQLite file (``db_path``); the second one's clock
runs the other process's cancel the first time it is read after ``arm``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunStateError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class HookClock(ManualClock):
    """A manual clock that runs ``hook`` once, at the first read after the
    next ``skip`` reads that follow :meth:`arm`: another process acting
    between this engine's read of a run and its save."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None
        self.skip = 0

    def arm(self, hook: Callable[[], None], skip: int = 0) -> None:
        self.hook, self.skip = hook, skip

    def now(self) -> float:
        if self.hook is not None and self.skip:
            self.skip -= 1
        elif self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().now()


class S(BaseModel):
    order: str = "o-1"
    got: str = ""


def _paid() -> object:
    return (
        FlowBuilder("paid", S)
        .wait_signal("paid", "payment", lambda s: s.order, into="got")
        .chain()
        .compile()
    )


@pytest.fixture
def two(db_path):
    first = Engine(open_store(db_path), flows=[_paid()], clock=ManualClock())
    clock = HookClock()
    second = Engine(open_store(db_path), flows=[_paid()], clock=clock)
    yield first, second, clock
    first.store.close()
    second.store.close()


def test_a_wake_that_loses_the_race_to_a_cancel_says_so_and_delivers_nothing(two):
    first, second, clock = two
    rid = first.run("paid", S()).run_id
    second.store.send_signal("payment", "o-1", "ok", clock.now(), None)
    clock.arm(lambda: first.cancel(rid, "changed my mind"))
    with pytest.raises(RunStateError) as lost:
        second.wake(rid)
    assert str(lost.value) == (
        f"run {rid} was canceled a moment ago by another process; nothing was delivered"
    )
    run = first.status(rid)
    assert (run.status, run.error) == ("canceled", "changed my mind")
    assert first.get(rid).got == ""
    left = first.store.next_signal("payment", "o-1")
    assert left is not None and left.payload == "ok"  # not consumed


def test_a_tick_whose_run_is_canceled_meanwhile_goes_on_with_the_others(two):
    """Two runs wait for their payments, both sent; the first run is
    canceled while the tick delivers to it: the tick does not raise, and
    delivers the second run's payment."""
    first, second, clock = two
    canceled = first.run("paid", S(order="a")).run_id
    other = first.run("paid", S(order="b")).run_id
    for key in ("a", "b"):
        second.store.send_signal("payment", key, f"paid {key}", clock.now(), None)
    # the cancel lands in the first run's wake, after it read the run (the tick and
    # the wake read the time 3 times before: on the code before the fix, Canceled escaped)
    clock.arm(lambda: first.cancel(canceled, "changed my mind"), skip=3)
    assert second.tick() == 1
    assert first.status(canceled).status == "canceled"
    assert first.get(canceled).got == ""
    assert (first.status(other).status, first.get(other).got) == ("completed", "paid b")
