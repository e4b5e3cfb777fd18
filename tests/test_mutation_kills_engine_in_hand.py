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

T0 = 1_767_225_600.0


class S(BaseModel):
    n: int = 0


class FirstHeldClock(ManualClock):
    """The injected clock: the first ``waker-*`` thread to read it (inside
    ``wake``, with the run in hand, before it delivers anything) waits there
    until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(T0)
        self.release = threading.Event()
        self.first: str | None = None
        self.armed = False
        self._lock = threading.Lock()

    def now(self) -> float:
        name = threading.current_thread().name
        if self.armed and name.startswith("waker-"):
            with self._lock:
                if self.first is None:
                    self.first = name
            if self.first == name:
                assert self.release.wait(30)
        return super().now()


def test_two_threads_waking_one_due_run_at_once_deliver_it_once(db_path: Path):
    """Two threads of one engine wake the same run whose timer is due. The
    one that has it in hand takes the timeout and runs the next step; the
    other is refused at once (``RunLeasedError``: nothing delivered), not
    left to deliver the same wake-up beside it (one of the two saves would
    then lose with a revision conflict)."""
    clock = FirstHeldClock()
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
