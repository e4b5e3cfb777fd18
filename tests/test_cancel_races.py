"""A cancel that lands between a waking process's read of a waiting run and
its save: the wake-up is refused with a clear RunStateError (nothing was
delivered, the signal stays in the mailbox), and a worker's tick goes on
with its other runs. Before, the driver's internal stop signal (``Canceled``)
escaped ``Engine.wake``, ``Engine.signal`` and ``Engine.tick``, the loop of
``flowdesk serve``, and ``Engine.resume_with`` when it took a late answer's
timeout.

Two engines over one real SQLite file (``db_path``); the second one's clock
runs the other process's cancel the first time it is read after ``arm``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunStateError
from desktop_app.flow import FlowBuilder
from tests.hook_clock import racing_engines


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
    with racing_engines(db_path, _paid) as engines:
        yield engines


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
    canceled right after the tick's wake-up read it: the tick does not
    raise, and delivers the second run's payment."""
    first, second, _clock = two
    canceled = first.run("paid", S(order="a")).run_id
    other = first.run("paid", S(order="b")).run_id
    for key in ("a", "b"):
        second.store.send_signal("payment", key, f"paid {key}", first.clock.now(), None)
    read = second.store.head
    raced: list[str] = []

    def head_then_cancel(run_id: str):  # the other process acts after this read
        got = read(run_id)
        if run_id == canceled and not raced:
            raced.append(run_id)
            first.cancel(canceled, "changed my mind")
        return got

    second.store.head = head_then_cancel  # type: ignore[method-assign]
    assert second.tick() == 1
    assert raced == [canceled]
    assert first.status(canceled).status == "canceled"
    assert first.get(canceled).got == ""
    assert (first.status(other).status, first.get(other).got) == ("completed", "paid b")


def test_a_late_answer_whose_timeout_loses_the_race_to_a_cancel_says_the_run_was_canceled(
    db_path,
):
    """The answer comes after its question's deadline: the engine takes the
    timeout first, and a cancel lands before that save. The answer is
    refused with RunStateError saying the run was canceled a moment ago
    (not the driver's internal stop signal); the run stays canceled."""

    def ask(s: S, ctx) -> dict:
        return {"got": ctx.interrupt("paid?", timeout_s=5.0)}

    flow = FlowBuilder("late", S).step("ask", ask).chain().compile()
    with racing_engines(db_path, lambda: flow) as (first, second, clock):
        rid = first.run("late", S()).run_id
        clock.advance(10.0)
        clock.arm(lambda: first.cancel(rid, "changed my mind"))
        with pytest.raises(RunStateError) as lost:
            second.resume_with(rid, "yes")
        assert str(lost.value) == (
            f"run {rid} was canceled a moment ago by another process; nothing was answered"
        )
        run = first.status(rid)
        assert (run.status, run.error) == ("canceled", "changed my mind")
        assert first.get(rid).got == ""
