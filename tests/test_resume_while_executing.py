"""A run this engine is executing right now, in another of its threads, is
not executed a second time by ``resume`` or ``recover`` in this process.

Found beside ``flow/engine.py``'s mutation survivors (issue 29, 2026-12-04:
``track`` on a run already tracked): a claim hands a process its own leases
back, so ``recover`` (the app's launch recovery, ``flowdesk agent``'s
passes) claimed the run another thread of the same engine was executing and
ran its step again at the same time; the first call then failed with a
revision conflict. Real SQLite files; the step waits on events, not time.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store

GUARD_S = 30.0  # a hang guard only: no passing test waits for it


class S(BaseModel):
    n: int = 0


class Busy:
    """An engine executing one run in a thread, held inside its step."""

    def __init__(self, db_path: Any) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.calls: Counter[str] = Counter()

        def work(s: S, ctx) -> dict:
            self.calls[ctx.run_id] += 1
            self.entered.set()
            assert self.go.wait(GUARD_S)
            return {"n": s.n + 1}

        flow = FlowBuilder("slow", S).step("work", work).compile()
        self.engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
        self.out: list[Any] = []
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.entered.wait(GUARD_S)
        (self.run_id,) = self.calls

    def _run(self) -> None:
        try:
            self.out.append(self.engine.run("slow", S()))
        except Exception as exc:  # reported by finish()
            self.out.append(exc)

    def finish(self) -> Any:
        self.go.set()
        self.thread.join(GUARD_S)
        self.engine.store.close()
        (out,) = self.out
        return out


@pytest.fixture
def busy(db_path):
    b = Busy(db_path)
    yield b
    b.go.set()
    b.thread.join(GUARD_S)


def test_resume_of_a_run_this_engine_is_executing_runs_nothing(busy):
    with pytest.raises(RunLeasedError) as caught:
        busy.engine.resume(busy.run_id)
    assert str(caught.value).startswith(
        f"run {busy.run_id} is held by a live process: it is being executed by "
        f"{busy.engine.owner}. Nothing was run here."
    )
    assert busy.calls == Counter({busy.run_id: 1})
    out = busy.finish()
    assert (out.status, out.state.n, out.revision) == ("completed", 1, 1)
    assert busy.calls == Counter({busy.run_id: 1})


def test_recover_leaves_a_run_this_engine_is_executing_to_its_thread(busy):
    report = busy.engine.recover()
    assert [(r.run_id, type(o).__name__) for r, o in report] == [(busy.run_id, "RunLeasedError")]
    assert busy.calls == Counter({busy.run_id: 1})
    out = busy.finish()
    assert (out.status, out.state.n) == ("completed", 1)
    assert busy.calls == Counter({busy.run_id: 1})
