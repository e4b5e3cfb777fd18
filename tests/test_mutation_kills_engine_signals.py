"""What a sender is told, and which run takes a signal or an event, through
the Engine in this process: a payload a waiting run cannot take is refused
before anything is stored, naming that run, its step, the type it takes and
why; runs this engine cannot judge (another flow, another version with no
mode registered for it) are passed over, not a reason to stop judging or
delivering; a signal wakes only the runs waiting for its name and key.
(Kill tests for mutants of ``Engine.signal/publish/_unfit_runs/_deliver``
in ``flow/engine.py``; the CLI's tests of the same run in subprocesses,
which mutmut does not credit.) A real SQLite file and the injected clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import EventPayloadError, SignalPayloadError
from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store

PROBLEM = (
    '"lots" does not fit: Input should be a valid integer, unable to parse string as an integer'
)


class Pay(BaseModel):
    order: str
    amount: int | None = None
    done: bool = False


class Note(BaseModel):
    order: str
    text: str | None = None


def pay_flow(*, extra: bool = False, timeout_s: float | None = None) -> CompiledFlow[Pay]:
    """Waits for signal ``paid`` keyed by its order; ``extra`` is another
    version of it (one more step: another fingerprint)."""
    b = FlowBuilder("pay", Pay, inputs=("order",)).wait_signal(
        "wait", "paid", lambda s: s.order, into="amount", timeout_s=timeout_s
    )
    if extra:
        b = b.step("audit", lambda s: {})
    return b.step("finish", lambda s: {"done": True}).chain().compile()


#: another flow waiting for the same signal, with a field of another type
note_flow = (
    FlowBuilder("note", Note, inputs=("order",))
    .wait_signal("wait", "paid", lambda s: s.order, into="text")
    .chain()
    .compile()
)

#: waits for the event ``shipped`` with a number
boxes_flow = (
    FlowBuilder("boxes", Pay, inputs=("order",))
    .wait_event("count", "shipped", into="amount")
    .chain()
    .compile()
)


def engine(db: Path, *flows: CompiledFlow[Any], clock: ManualClock | None = None) -> Engine:
    return Engine(open_store(db), flows=list(flows), clock=clock or ManualClock())


def waiting_longest(db: Path, flow: CompiledFlow[Any], state: BaseModel, clock: ManualClock) -> str:
    """A run of ``flow`` started by another engine (another process), then
    the clock moved on: it waits longer than any run started after it."""
    other = engine(db, flow, clock=clock)
    try:
        run_id = other.run(flow.name, state).run_id
    finally:
        other.store.close()
    clock.advance(1.0)
    return run_id


def status(e: Engine, run_id: str) -> str:
    return e.store.get_run(run_id).status


def test_a_payload_the_waiting_run_cannot_take_is_refused_naming_it_and_nothing_is_stored(
    db_path: Path,
) -> None:
    clock = ManualClock()
    e = engine(db_path, pay_flow(), clock=clock)
    try:
        other = e.run("pay", Pay(order="a")).run_id  # waits for key "a", longest
        clock.advance(1.0)
        mine = e.run("pay", Pay(order="b")).run_id
        with pytest.raises(SignalPayloadError) as refused:
            e.signal("paid", "b", "lots")
        exc = refused.value
        assert (exc.run_id, exc.step_id, exc.expected) == (mine, "wait", "int | None")
        assert str(exc) == (
            f"signal 'paid' with key 'b' was not sent: run {mine} waits for it at step "
            f"'wait', which takes a payload of type int | None; {PROBLEM}. Nothing was "
            "stored; send a payload of type int | None"
        )
        # nothing stored: a fitting payload is the one the run takes
        e.signal("paid", "b", 7)
        assert status(e, mine) == "completed"
        assert e.store.latest(mine).state["amount"] == 7
        assert status(e, other) == "waiting"  # another key: not its signal
    finally:
        e.store.close()


def test_runs_this_engine_cannot_judge_or_run_are_passed_over_not_a_stop(
    db_path: Path,
) -> None:
    """The run waiting longest is of a flow this engine does not register:
    it is not judged (its own process judges it when it wakes), and the
    payload still goes to the next run, judged and delivered now."""
    clock = ManualClock()
    foreign = waiting_longest(db_path, note_flow, Note(order="b"), clock)
    e = engine(db_path, pay_flow(), clock=clock)
    try:
        mine = e.run("pay", Pay(order="b")).run_id
        with pytest.raises(SignalPayloadError) as refused:
            e.signal("paid", "b", "lots")
        assert refused.value.run_id == mine
        e.signal("paid", "b", 7)
        assert status(e, mine) == "completed"  # delivered past the run it cannot run
        assert status(e, foreign) == "waiting"
    finally:
        e.store.close()


def test_a_run_of_another_version_is_judged_by_its_own_mode_or_passed_over(
    db_path: Path,
) -> None:
    old_flow = pay_flow(extra=True)
    clock = ManualClock()
    old = waiting_longest(db_path, old_flow, Pay(order="b"), clock)
    e = engine(db_path, pay_flow(), clock=clock)
    try:
        assert old_flow.version != e.flow("pay").version
        mine = e.run("pay", Pay(order="b")).run_id
        with pytest.raises(SignalPayloadError) as refused:  # the old run passed over
            e.signal("paid", "b", "lots")
        assert refused.value.run_id == mine
        e.register_variant("pay", old_flow.version, lambda: pay_flow(extra=True))
        with pytest.raises(SignalPayloadError) as refused:  # now judged, first
            e.signal("paid", "b", "lots")
        assert refused.value.run_id == old
    finally:
        e.store.close()


def test_a_signal_wakes_only_the_runs_waiting_for_its_name_and_key(db_path: Path) -> None:
    """A run of another key whose deadline passed is not timed out by a
    signal that is not its own (the next tick does that)."""
    clock = ManualClock()
    e = engine(db_path, pay_flow(timeout_s=10.0), clock=clock)
    try:
        late = e.run("pay", Pay(order="a")).run_id
        clock.advance(60.0)  # its deadline passed; no tick ran since
        mine = e.run("pay", Pay(order="b")).run_id
        e.signal("paid", "b", 7)
        assert status(e, mine) == "completed"
        assert status(e, late) == "waiting"
        e.tick()
        assert status(e, late) != "waiting"
    finally:
        e.store.close()


def test_an_event_a_waiting_run_cannot_take_is_refused_naming_the_event_and_why(
    db_path: Path,
) -> None:
    e = engine(db_path, boxes_flow)
    try:
        run_id = e.run("boxes", Pay(order="b")).run_id
        with pytest.raises(EventPayloadError) as refused:
            e.publish("shipped", "lots")
        assert str(refused.value) == (
            f"event 'shipped' was not published: run {run_id} waits for it at step "
            f"'count', which takes a payload of type int | None; {PROBLEM}. Nothing was "
            "stored; publish a payload of type int | None"
        )
        e.publish("shipped", 3)
        assert e.store.latest(run_id).state["amount"] == 3
    finally:
        e.store.close()
