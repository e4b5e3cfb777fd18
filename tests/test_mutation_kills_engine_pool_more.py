"""More of the engine's pool and lease heartbeat through its public API:
``resume_many`` (one entry per id, in order, errors in place, eight threads
by default), ``on_result`` called while other runs of the pool still run, a
heartbeat that ended when the engine went idle being started again for the
next run, and a state instance stored as given (kill tests for mutants of
``Engine.resume_many/_pooled/_renew_leases/_submit`` in ``flow/engine.py``).

Every test runs on a real SQLite file, real threads and the injected clock;
threads meet on conditions and events, timeouts are only hang guards.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import apsw
from pydantic import BaseModel, ConfigDict, field_validator

from desktop_app.errors import CheckpointNotFoundError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store

GUARD_S = 10.0  # only a hang guard: no passing test waits for it
HEARTBEAT = "flowdesk-leases"


class S(BaseModel):
    n: int = 0
    notes: list[str] = []


def engine_for(db_path: Path, *flows, clock: ManualClock | None = None, **kw) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock(), **kw)


def counting(name: str, calls: Counter):
    def fn(s: S, ctx) -> dict:
        calls[ctx.run_id] += 1
        return {"n": s.n + 1}

    return FlowBuilder(name, S).step("one", fn).compile()


# -- resume_many ----------------------------------------------------------------


def test_resume_many_gives_one_entry_per_id_in_order_with_the_error_in_place(db_path):
    """Each id gets its own outcome at its own position; an unknown id's entry
    is its CheckpointNotFoundError and the other runs still complete."""
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls))
    a = engine.start("c", S(n=1))
    b = engine.start("c", S(n=5))
    out = engine.resume_many((a, "no-such-run", b))
    assert len(out) == 3
    first, missing, last = out
    assert (first.run_id, first.status, first.state.n) == (a, "completed", 2)  # type: ignore[union-attr]
    assert isinstance(missing, CheckpointNotFoundError)
    assert (last.run_id, last.status, last.state.n) == (b, "completed", 6)  # type: ignore[union-attr]
    assert calls == {a: 1, b: 1}
    assert [engine.store.get_run(r).status for r in (a, b)] == ["completed", "completed"]
    engine.store.close()


def test_resume_many_with_one_worker_resumes_in_the_calling_thread(db_path):
    """``max_workers=1`` resumes the runs one after another in the caller's thread."""
    threads: list[str] = []

    def fn(s: S) -> dict:
        threads.append(threading.current_thread().name)
        return {"n": s.n + 1}

    engine = engine_for(db_path, FlowBuilder("t", S).step("one", fn).compile())
    ids = [engine.start("t", S(n=i)) for i in range(3)]
    out = engine.resume_many(ids, max_workers=1)
    assert [(r.run_id, r.state.n) for r in out] == list(zip(ids, [1, 2, 3], strict=True))  # type: ignore[union-attr]
    assert threads == [threading.current_thread().name] * 3
    engine.store.close()


def test_resume_many_drives_up_to_eight_runs_at_once_by_default(db_path):
    """Nine runs whose step waits until eight are inside: eight pool threads
    drive them, the ninth run waits for a free one."""
    entered: list[str] = []
    gate = threading.Condition()

    def fn(s: S) -> dict:
        with gate:
            entered.append(threading.current_thread().name)
            gate.notify_all()
            assert gate.wait_for(lambda: len(entered) >= 8, timeout=GUARD_S)  # a guard
        return {"n": s.n + 1}

    engine = engine_for(db_path, FlowBuilder("wide", S).step("one", fn).compile())
    ids = [engine.start("wide", S(n=i)) for i in range(9)]
    out = engine.resume_many(ids)
    assert [(r.run_id, r.status, r.state.n) for r in out] == [  # type: ignore[union-attr]
        (rid, "completed", i + 1) for i, rid in enumerate(ids)
    ]
    assert len(entered) == 9
    assert len(set(entered)) == 8  # eight threads: the ninth run waited for a free one
    engine.store.close()


# -- _pooled: on_result as each run finishes --------------------------------------


def test_on_result_of_a_finished_run_comes_while_another_run_still_runs(db_path):
    """The pool reports a run as soon as it finishes, not once all have: the
    second run's step sees the first run's ``on_result`` before it returns."""
    reported_first = threading.Event()
    reported: list[int] = []

    def fn(s: S) -> dict:
        if s.n == 1:  # the second run: wait (bounded) for the first one's report
            return {"notes": [f"first reported: {reported_first.wait(GUARD_S)}"]}
        return {"notes": ["quick"]}

    def on_result(i: int, out: object) -> None:
        reported.append(i)
        if i == 0:
            reported_first.set()

    engine = engine_for(db_path, FlowBuilder("two", S).step("one", fn).compile())
    out = engine.run_many("two", [S(n=0), S(n=1)], max_workers=2, on_result=on_result)
    assert [r.state.notes for r in out] == [["quick"], ["first reported: True"]]  # type: ignore[union-attr]
    assert reported == [0, 1]
    engine.store.close()


# -- the heartbeat after it went idle -------------------------------------------


class Ticks(threading.Event):
    """``engine.heartbeat_stop`` for the heartbeat: every ``wait`` from a thread
    other than the test's own is recorded and blocks until the test lets one
    round run (``_go``); ``set`` (shutdown) frees every waiter for good."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []
        self._entered = threading.Semaphore(0)
        self._go = threading.Semaphore(0)
        self._main = threading.current_thread()

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread() is self._main or self.is_set():
            return super().wait(timeout)
        self.threads.append(threading.current_thread())
        self._entered.release()
        self._go.acquire()
        return self.is_set()

    def waiting(self) -> None:
        """Until a heartbeat (re)enters its wait."""
        assert self._entered.acquire(timeout=GUARD_S), "the heartbeat never waited"

    def set(self) -> None:
        super().set()
        for _ in range(100):
            self._go.release()


def test_a_run_after_the_idle_heartbeat_ended_gets_a_new_heartbeat(db_path):
    """Once the heartbeat thread ended because no run was active, the next run
    executes normally and starts a fresh heartbeat that renews its lease."""
    clock = ManualClock()
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    ticks = Ticks()
    engine.heartbeat_stop = ticks
    try:
        first = engine.run("c", S(), run_id="r1")
        assert first.status == "completed"
        ticks.waiting()
        (beat,) = ticks.threads
        assert beat.name == HEARTBEAT
        ticks._go.release()  # its next round finds no active run: the heartbeat ends
        beat.join(GUARD_S)
        assert not beat.is_alive()
        second = engine.run("c", S(n=4), run_id="r2")
        assert (second.status, second.state.n) == ("completed", 5)
        ticks.waiting()  # a new heartbeat began
        assert len(ticks.threads) == 2
        fresh = ticks.threads[1]
        assert fresh is not beat and fresh.name == HEARTBEAT and fresh.is_alive()
        assert calls == {"r1": 1, "r2": 1}
    finally:
        ticks.set()
    for t in ticks.threads:
        t.join(GUARD_S)
    engine.store.close()


# -- _submit: a state instance is stored as given ---------------------------------


class Stamped(BaseModel):
    """A model that re-validates instances, with a validator that is not idempotent."""

    model_config = ConfigDict(revalidate_instances="always")
    tags: list[str] = []

    @field_validator("tags")
    @classmethod
    def stamp(cls, v: list[str]) -> list[str]:
        return [*v, "checked"]


def test_a_state_instance_of_the_flows_model_is_stored_as_given(db_path):
    """``start`` stores an instance of the flow's model as it is; it is not
    validated again (which would run its validators a second time)."""
    flow = FlowBuilder("stamped", Stamped).step("one", lambda s: {}).compile()
    engine = engine_for(db_path, flow)
    state = Stamped(tags=["x"])
    assert state.tags == ["x", "checked"]
    rid = engine.start("stamped", state)
    assert engine.store.latest(rid).state["tags"] == ["x", "checked"]
    from_dict = engine.start("stamped", {"tags": ["x"]})  # a mapping is validated once
    assert engine.store.latest(from_dict).state["tags"] == ["x", "checked"]
    engine.store.close()


# -- an engine that does not execute ------------------------------------------------


def test_a_run_whose_release_fails_is_left_to_its_lease_by_a_non_executing_engine(db_path):
    """``executes=False`` (a process that only submits and answers) hands each
    run back at once after saving it. When the release itself fails (here a
    trigger refuses it, as a failing disk would) the call still returns the
    run as saved, and the lease it holds expires on its own."""
    engine = engine_for(db_path, counting("c", Counter()), executes=False)
    rid = engine.start("c", S(n=3))
    other = apsw.Connection(str(db_path))
    other.execute(
        "CREATE TRIGGER refuse_release BEFORE UPDATE OF lease_owner ON runs "
        "WHEN NEW.lease_owner IS NULL BEGIN SELECT RAISE(ABORT, 'release refused'); END"
    )
    other.close()
    out = engine.resume(rid)
    assert (out.run_id, out.status, out.state.n) == (rid, "running", 3)
    run = engine.store.get_run(rid)
    assert run.lease_owner == engine.owner and run.lease_expires_at is not None
    engine.store.close()
