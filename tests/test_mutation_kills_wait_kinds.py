"""Wait steps as their kinds begin them (kill tests for ``flow/wait_kinds.py``):
a signal wait visited again begins a wait with the next number, which is the
wait that consumes the next signal; a signal key that is an empty string is
refused with a message that names the run, the step and what to fix.

A real engine over a real SQLite file (``db_path``), a manual clock."""

from __future__ import annotations

import apsw
import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    got: str = ""
    count: int = 0


@pytest.fixture
def engine(db_path):
    store = open_store(db_path)
    yield Engine(store, clock=ManualClock())
    store.close()


def test_a_signal_wait_visited_again_waits_under_a_new_number(engine, db_path):
    """A route goes back to the signal wait once: the second wait is
    ``<run>:paid:1`` (the first was ``:0``), each signal is consumed by the
    wait that received it, and the run completes with both payloads seen."""
    flow = (
        FlowBuilder("twice", S)
        .wait_signal("paid", "payment", "o-1", into="got")
        .step("count", lambda s: {"count": s.count + 1})
        .step("end", lambda s: {"got": f"{s.got} after {s.count}"})
        .chain("paid", "count")
        .route("count", lambda s: "paid" if s.count < 2 else "end", ["paid", "end"])
        .finish("end")
        .compile()
    )
    engine.register(flow)
    rid = engine.run("twice", S()).run_id
    assert [w.wait_id for w in engine.waits(rid)] == [f"{rid}:paid:0"]
    engine.signal("payment", "o-1", "first")
    run = engine.status(rid)
    assert run.status == "waiting", run.error
    assert [w.wait_id for w in engine.waits(rid)] == [f"{rid}:paid:1"]
    engine.signal("payment", "o-1", "second")
    assert engine.status(rid).status == "completed"
    assert engine.get(rid).got == "second after 2"
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        consumed = list(conn.execute("SELECT consumed_by FROM signals ORDER BY signal_id"))
    finally:
        conn.close()
    assert consumed == [(f"{rid}:paid:0",), (f"{rid}:paid:1",)]


def test_an_empty_signal_key_fails_the_step_with_what_to_fix(engine):
    """A key function that returns ``""`` fails the wait step (WaitKeyError,
    not retried): no signal can be sent to an empty key. The run's error
    names the run, the step and the key, and says what to fix."""
    calls: list[int] = []

    def empty_key(s: S) -> str:
        calls.append(1)
        return ""

    flow = (
        FlowBuilder("nokey", S, retry=2)
        .wait_signal("paid", "payment", empty_key, into="got")
        .chain()
        .compile()
    )
    engine.register(flow)
    r = engine.run("nokey", S())
    assert r.status == "failed"
    assert calls == [1]
    assert engine.waits(r.run_id) == []
    assert r.error is not None
    assert r.error.endswith(
        f"WaitKeyError: run {r.run_id}: the signal key of wait step 'paid' is ''; "
        "it must be a non-empty string (fix the flow's key function)"
    ), r.error
