"""One thread of an engine has a run in hand at a time (kill tests for
``Engine._in_hand_here`` as ``wake`` uses it; ``_in_hand_here`` is a
``contextlib.contextmanager``, which mutmut does not mutate, so its mutants
were made by hand: docs/mutation.md).

Every run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.held_clock import FirstHeldClock

T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0


def test_two_threads_waking_one_due_run_at_once_deliver_it_once(db_path: Path):
    """Two threads of one engine wake the same run whose timer is due. The
    one that has it in hand takes the timeout and runs the next step; the
    other is refused at once (``RunLeasedError``: nothing delivered), not
    left to deliver the same wake-up beside it (one of the two saves would
    then lose with a revision conflict)."""
    clock = FirstHeldClock("waker-")
    ran: list[str] = []

    def after(s: S) -> dict:
        ran.append(threading.current_thread().name)
        return {"n": s.n + 1}

    flow = FlowBuilder("nap", S).sleep("nap", 10.0).step("after", after).chain().compile()
    engine = Engine(open_store(db_path), flows=[flow], clock=clock, group_commit=False)
    try:
        first = engine.run("nap", S())
        assert first.status == "waiting"
        rid = first.run_id
        clock.advance(11.0)
        clock.armed = True
        out: dict[str, Any] = {}

        def go(name: str) -> None:
            try:
                out[name] = engine.wake(rid)
            except Exception as exc:  # the refused one's error is the point
                out[name] = exc
            if clock.first != f"waker-{name}":
                clock.release.set()  # the one turned away is back: let the other go on

        threads = [threading.Thread(target=go, args=(n,), name=f"waker-{n}") for n in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert clock.first is not None
        holder = clock.first.removeprefix("waker-")
        other = "b" if holder == "a" else "a"
        refused = out[other]
        assert isinstance(refused, RunLeasedError), repr(refused)
        assert str(refused).startswith(
            f"run {rid} is held by a live process: it is being executed by {engine.owner}. "
            "Nothing was run here."
        )
        done = out[holder]
        assert (done.status, done.state.n) == ("completed", 1), repr(done)
        assert ran == [clock.first]
        assert engine.store.get_run(rid).status == "completed"
        assert engine.wake(rid).status == "completed"  # let go once its wake ended
    finally:
        engine.store.close()


def test_a_sweep_beside_a_run_this_engine_executes_keeps_its_lease(db_path: Path):
    """``recover`` in one thread while ``run`` executes a run's step in
    another: the sweep's claim hands the engine its own lease back, and the
    sweep must not give that lease away (``holds``: executing counts, not
    only a run in hand for a resume). Another process's resume is then
    refused while the step is in flight, and the step runs once."""
    entered = threading.Event()
    go = threading.Event()
    calls: list[str] = []

    def work(s: S, ctx) -> dict:
        calls.append(ctx.run_id)
        if len(calls) == 1:
            entered.set()
            assert go.wait(30)
        return {"n": s.n + 1}

    flow = FlowBuilder("slow", S).step("work", work).compile()
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock(T0))
    other = Engine(open_store(db_path), flows=[flow], clock=ManualClock(T0))
    out: list[Any] = []
    runner = threading.Thread(target=lambda: out.append(engine.run("slow", S(), run_id="r1")))
    runner.start()
    try:
        assert entered.wait(30)
        report = engine.recover()
        assert [(r.run_id, type(o).__name__) for r, o in report] == [("r1", "RunLeasedError")]
        assert engine.store.get_run("r1").lease_owner == engine.owner  # not given away
        try:
            other.resume("r1")
        except RunLeasedError as exc:
            assert (exc.run_id, exc.owner) == ("r1", engine.owner)
        else:
            raise AssertionError("another process resumed a run this engine executes")
        assert calls == ["r1"]
    finally:
        go.set()
        runner.join(30)
    (done,) = out
    assert (done.status, done.state.n) == ("completed", 1)
    assert calls == ["r1"]
    engine.store.close()
    other.store.close()
