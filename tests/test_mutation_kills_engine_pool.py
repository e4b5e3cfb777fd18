"""The engine's thread pool (``run_many``/``recover``), single flight by flow
key, and which journaled children canceling a parent cancels: the rules no
scenario test pinned (real SQLite files, the injected clock; threads meet on
barriers and events, timeouts are only hang guards)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.flows_for_tests import Crash

GUARD_S = 30.0  # only a hang guard: no passing test waits for it


class S(BaseModel):
    n: int = 0


def _engine(db_path, *flows, clock: ManualClock | None = None) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock())


def _recording_flow(threads: list[str], lock: threading.Lock, gate=None):
    """One step that records the thread it runs on (and waits at ``gate``)."""

    def work(s: S) -> dict:
        with lock:
            threads.append(threading.current_thread().name)
        if gate is not None:
            gate()
        return {"n": s.n + 1}

    return FlowBuilder("pooled", S).step("work", work).compile()


# -- the pool ------------------------------------------------------------------


def test_one_worker_drives_the_runs_one_after_another_in_the_calling_thread(db_path):
    threads: list[str] = []
    engine = _engine(db_path, _recording_flow(threads, threading.Lock()))
    reported: list[tuple[int, object]] = []
    out = engine.run_many(
        "pooled",
        [S(n=10), S(n=20), S(n=30)],
        max_workers=1,
        on_result=lambda i, res: reported.append((i, res)),
    )
    assert [(r.status, r.state.n) for r in out] == [  # type: ignore[union-attr]
        ("completed", 11),
        ("completed", 21),
        ("completed", 31),
    ]
    assert threads == [threading.current_thread().name] * 3
    # on_result: the index of the state and that run's own outcome, as each ends
    assert [i for i, _ in reported] == [0, 1, 2]
    assert all(res is out[i] for i, res in reported)
    engine.store.close()


def test_recover_with_concurrency_one_is_accepted(db_path):
    threads: list[str] = []
    engine = _engine(db_path, _recording_flow(threads, threading.Lock()))
    ids = []
    for i in range(2):
        ids.append(engine.start("pooled", S(n=i)))
        engine.clock.advance(1)  # type: ignore[attr-defined]  # claim order: oldest first
    report = engine.recover(concurrency=1)
    assert [(r.run_id, o.status) for r, o in report] == [(i, "completed") for i in ids]  # type: ignore[union-attr]
    assert threads == [threading.current_thread().name] * 2
    engine.store.close()


def test_zero_workers_is_refused_before_any_run_starts(db_path):
    engine = _engine(db_path, _recording_flow([], threading.Lock()))
    with pytest.raises(ValueError, match=r"^workers must be at least 1, not 0$"):
        engine.run_many("pooled", [S(), S()], max_workers=0)
    assert engine.store.list_runs() == []
    engine.store.close()


def test_a_single_state_runs_in_the_calling_thread_even_with_a_pool(db_path):
    threads: list[str] = []
    engine = _engine(db_path, _recording_flow(threads, threading.Lock()))
    reported: list[int] = []
    (res,) = engine.run_many(
        "pooled", [S(n=1)], max_workers=4, on_result=lambda i, r: reported.append(i)
    )
    assert res.status == "completed"  # type: ignore[union-attr]
    assert threads == [threading.current_thread().name]
    assert reported == [0]
    engine.store.close()


@pytest.mark.parametrize("workers", [2, 4])
def test_two_states_run_at_once_on_the_pool_threads(db_path, workers):
    """Both runs are in flight together (they meet at a barrier), each on one
    of the engine's ``flowdesk-run`` threads, never the caller's."""
    threads: list[str] = []
    barrier = threading.Barrier(2, timeout=GUARD_S)
    engine = _engine(db_path, _recording_flow(threads, threading.Lock(), gate=barrier.wait))
    reported: list[tuple[int, object]] = []
    out = engine.run_many(
        "pooled",
        [S(n=1), S(n=2)],
        max_workers=workers,
        on_result=lambda i, res: reported.append((i, res)),
    )
    assert [(r.status, r.state.n) for r in out] == [("completed", 2), ("completed", 3)]  # type: ignore[union-attr]
    assert len(threads) == 2 and len(set(threads)) == 2
    assert all(name.startswith("flowdesk-run_") for name in threads), threads
    assert sorted(i for i, _ in reported) == [0, 1]
    assert all(res is out[i] for i, res in reported)  # on_result in the pooled path too
    engine.store.close()


def _peak_threads(db_path, runs: int, bound: int, **kwargs) -> list[str]:
    """Drive ``runs`` runs whose step waits until ``bound`` of them are in it
    at once (so none finishes before the pool has had every chance to start
    more threads); the distinct threads that ran a step, sorted."""
    threads: list[str] = []
    lock = threading.Lock()
    inside = [0]
    full = threading.Event()

    def gate() -> None:
        with lock:
            inside[0] += 1
            if inside[0] >= bound:
                full.set()
        assert full.wait(GUARD_S)

    engine = _engine(db_path, _recording_flow(threads, lock, gate=gate))
    out = engine.run_many("pooled", [S(n=i) for i in range(runs)], **kwargs)
    assert [r.status for r in out] == ["completed"] * runs  # type: ignore[union-attr]
    engine.store.close()
    return sorted(set(threads))


def test_max_workers_bounds_the_threads_that_drive_runs(db_path):
    assert _peak_threads(db_path, 6, 2, max_workers=2) == ["flowdesk-run_0", "flowdesk-run_1"]


def test_run_many_uses_eight_threads_by_default(db_path):
    assert _peak_threads(db_path, 18, 8) == [f"flowdesk-run_{i}" for i in range(8)]


# -- single flight: the live run with the same flow and key --------------------


def _asking_flow(name: str, executed: Counter[str]):
    def ask(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        ctx.interrupt("go on?")
        return {}

    return FlowBuilder(name, S).step("ask", ask).compile()


def test_single_flight_answers_with_the_live_run_of_the_same_flow(db_path):
    executed: Counter[str] = Counter()
    engine = _engine(db_path, _asking_flow("a", executed), _asking_flow("b", executed))
    first = engine.run("a", S(), flow_key="k")
    engine.clock.advance(1)  # type: ignore[attr-defined]
    other = engine.run("b", S(), flow_key="k")  # the same key on another flow: its own run
    assert other.run_id != first.run_id and other.status == "waiting"
    again = engine.run("a", S(), flow_key="k")
    assert (again.run_id, again.status) == (first.run_id, "waiting")
    assert executed == Counter({first.run_id: 1, other.run_id: 1})
    engine.store.close()


def test_single_flight_answers_with_the_live_run_of_the_same_key(db_path):
    executed: Counter[str] = Counter()
    engine = _engine(db_path, _asking_flow("a", executed))
    first = engine.run("a", S(), flow_key="k1")
    engine.clock.advance(1)  # type: ignore[attr-defined]
    newer = engine.run("a", S(), flow_key="k2")
    again = engine.run("a", S(), flow_key="k1")
    assert again.run_id == first.run_id != newer.run_id
    assert executed == Counter({first.run_id: 1, newer.run_id: 1})
    engine.store.close()


def test_single_flight_finds_a_pending_run(db_path):
    executed: Counter[str] = Counter()
    engine = _engine(db_path, _asking_flow("a", executed))
    rid = engine.start("a", S(), flow_key="k")
    again = engine.run("a", S(n=5), flow_key="k")
    assert (again.run_id, again.status, again.state) == (rid, "pending", S())
    assert executed == Counter()  # the pending run is the answer; nothing ran
    assert [r.run_id for r in engine.store.list_runs()] == [rid]
    engine.store.close()


def test_single_flight_finds_a_run_left_running(db_path):
    calls: Counter[str] = Counter()

    def crash(s: S) -> dict:
        calls["crash"] += 1
        raise Crash()

    engine = _engine(db_path, FlowBuilder("a", S).step("crash", crash).compile())
    with pytest.raises(Crash):
        engine.run("a", S(), flow_key="k")
    (run,) = engine.store.list_runs()
    again = engine.run("a", S(), flow_key="k")
    assert (again.run_id, again.status) == (run.run_id, "running")
    assert calls == Counter({"crash": 1})
    engine.store.close()


def test_single_flight_finds_a_failed_run(db_path):
    calls: Counter[str] = Counter()

    def boom(s: S) -> dict:
        calls["boom"] += 1
        raise ValueError("no")

    engine = _engine(db_path, FlowBuilder("a", S).step("boom", boom).compile())
    first = engine.run("a", S(), flow_key="k")
    assert first.status == "failed"
    again = engine.run("a", S(), flow_key="k")
    assert (again.run_id, again.status) == (first.run_id, "failed")
    assert "no" in (again.error or "")
    assert calls == Counter({"boom": 1})
    engine.store.close()


# -- canceling a parent cancels only its live flow children --------------------


def _parent_flow(engine_ref: list[Engine], child: object | None):
    """A parent whose step starts ``child`` (or only journals a child id when
    None), then asks a question, so the parent stays live."""

    def start(s: S, ctx) -> dict:
        if child is None:
            ctx.child_run_id("flow")
        else:
            engine_ref[0].run_child(ctx, child, S())  # type: ignore[arg-type]
        ctx.interrupt("wait here")
        return {}

    return FlowBuilder("parent", S).step("start", start).compile()


def _cancel_parent_with(db_path, child, finish=None) -> tuple[Engine, str, str]:
    ref: list[Engine] = []
    flows = [_parent_flow(ref, child)] + ([child] if child is not None else [])
    engine = _engine(db_path, *flows)
    ref.append(engine)
    res = engine.run("parent", S())
    assert res.status == "waiting"
    child_id = f"{res.run_id}:start"
    if finish is not None:
        finish(engine, child_id)
    parent = engine.cancel(res.run_id)  # never raises for a child that is gone or finished
    assert (parent.status, parent.error) == ("canceled", "canceled by user")
    return engine, res.run_id, child_id


def test_canceling_a_parent_whose_child_was_never_created(db_path):
    engine, _parent, child_id = _cancel_parent_with(db_path, None)
    assert [r.run_id for r in engine.store.list_runs()] == [_parent]
    assert child_id not in {r.run_id for r in engine.store.list_runs()}
    engine.store.close()


def test_canceling_a_parent_leaves_a_completed_child_completed(db_path):
    child = FlowBuilder("child", S).step("one", lambda s: {"n": 1}).compile()
    engine, _parent, child_id = _cancel_parent_with(db_path, child)
    run = engine.store.get_run(child_id)
    assert (run.status, run.error) == ("completed", None)
    engine.store.close()


def test_canceling_a_parent_after_its_child_was_canceled(db_path):
    executed: Counter[str] = Counter()
    child = _asking_flow("child", executed)

    def cancel_child(engine: Engine, child_id: str) -> None:
        assert engine.store.get_run(child_id).status == "waiting"
        engine.cancel(child_id, "the child alone")

    engine, _parent, child_id = _cancel_parent_with(db_path, child, cancel_child)
    run = engine.store.get_run(child_id)
    assert (run.status, run.error) == ("canceled", "the child alone")  # not canceled again
    engine.store.close()


def test_canceling_a_parent_after_its_child_timed_out(db_path):
    child = FlowBuilder("child", S).wait_signal("w", "never", key="k", timeout_s=30).compile()

    def time_out(engine: Engine, child_id: str) -> None:
        engine.clock.advance(31)  # type: ignore[attr-defined]
        assert engine.wake(child_id).status == "timed_out"

    engine, _parent, child_id = _cancel_parent_with(db_path, child, time_out)
    assert engine.store.get_run(child_id).status == "timed_out"
    engine.store.close()
