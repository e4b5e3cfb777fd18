"""A run stopped between two steps runs no further step (kill tests for
mutants of ``RunDriver._drive`` in ``flow/driver.py``): a cancel, or a lease
another process took over, that lands after a step was saved and before the
next one starts stops the run there. The next step's body never runs: its
side effects (a mail sent, a file moved) would be made by a run the user
canceled, or by a process that no longer owns the run while the new owner
runs the step again.

Both land from an event subscriber on the step's ``StepFinished`` (the
app's way of watching a run): after the save, before the next step. Every
run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import LeaseLostError
from desktop_app.flow import Engine, EventBus, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import RunFinished, StepFinished
from desktop_app.store.protocol import Lease
from desktop_app.store.sqlite.store import open_store

T0 = 1_767_225_600.0
OTHER = "elsewhere.example:4242:abc123"  # a live owner on another host


class S(BaseModel):
    n: int = 0


def _two_steps(ran: list[str]):
    def a(s: S) -> dict:
        ran.append("a")
        return {"n": 1}

    def b(s: S) -> dict:
        ran.append("b")
        return {"n": 2}

    return FlowBuilder("two", S).step("a", a).step("b", b).chain().compile()


def _engine(db_path: Path, on_a_saved) -> tuple[Engine, list[Any]]:
    events: list[Any] = []
    bus = EventBus()

    def watch(event: Any) -> None:
        events.append(event)
        if isinstance(event, StepFinished) and event.result.name == "a":
            on_a_saved(event.run_id)

    bus.subscribe(watch)
    engine = Engine(open_store(db_path), clock=ManualClock(T0), events=bus, group_commit=False)
    return engine, events


def test_a_cancel_between_two_steps_runs_no_further_step(db_path: Path):
    ran: list[str] = []
    engine: Engine | None = None

    def cancel(run_id: str) -> None:
        assert engine is not None
        engine.cancel(run_id, "stop after a")

    engine, events = _engine(db_path, cancel)
    try:
        engine.register(_two_steps(ran))
        r = engine.run("two", S())
        assert ran == ["a"]
        latest = engine.store.latest(r.run_id)
        assert (r.status, latest.status) == ("canceled", "canceled")
        assert latest.state["n"] == 1  # a's work was saved, b's never made
        assert "stop after a" in (r.error or "")
        assert [e for e in events if isinstance(e, RunFinished)] == [
            RunFinished(r.run_id, "canceled", latest.error)
        ]
    finally:
        engine.store.close()


def test_a_lease_taken_over_between_two_steps_runs_no_further_step(db_path: Path):
    ran: list[str] = []
    other = open_store(db_path)
    engine: Engine | None = None

    def take_over(run_id: str) -> None:
        assert engine is not None
        now = engine.clock.now()
        other.claim(run_id, Lease(OTHER, now + 100.0, math.inf, takes_over=engine.owner), math.inf)
        engine.renew_leases()  # the heartbeat finds the run taken

    engine, _ = _engine(db_path, take_over)
    try:
        engine.register(_two_steps(ran))
        with pytest.raises(LeaseLostError):
            engine.run("two", S(), run_id="r1")
        assert ran == ["a"]  # the new owner runs b; this process never does
        latest = other.latest("r1")
        assert (latest.status, latest.state["n"]) == ("running", 1)
        assert other.get_run("r1").lease_owner == OTHER
    finally:
        other.close()
        engine.store.close()
