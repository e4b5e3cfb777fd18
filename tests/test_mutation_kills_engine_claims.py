"""The claims behind ``resume_pending``, ``recover`` and ``serve``: which runs
a sweep claims, how many at a time, that every claim it does not drive is
released (also when the sweep stops early or the store is busy), and the
wait ``serve`` computes from the next stored deadline (real SQLite files,
the injected clock, no sleeps)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import FlowVersionMismatchError, StepFailedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store
from tests.polling import until

GUARD_S = 30.0  # only a hang guard: no passing test waits for it


class S(BaseModel):
    n: int = 0


def _counting(name: str, executed: Counter[str], version: str = "1"):
    def work(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        return {"n": s.n + 1}

    return FlowBuilder(name, S, version=version).step("work", work).compile()


def _start(engine: Engine, flow: str, count: int) -> list[str]:
    """``count`` pending runs, one clock second apart (claims go oldest first)."""
    ids = []
    for _ in range(count):
        ids.append(engine.start(flow, S()))
        engine.clock.advance(1)  # type: ignore[attr-defined]
    return ids


def _leases(engine: Engine, ids: list[str]) -> list[str | None]:
    return [engine.store.get_run(rid).lease_owner for rid in ids]


# -- resume_pending ------------------------------------------------------------


def test_a_sweep_claims_one_batch_of_32_runs_at_a_time(db_path):
    """While the sweep drives its first run it holds the claims of its first
    batch only: another process can take the runs beyond it."""
    executed: Counter[str] = Counter()
    clock = ManualClock()
    other = Engine(open_store(db_path), flows=[_counting("c", Counter())], clock=clock)
    taken: list[str] = []

    def work(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        if not taken:
            taken.extend(r.run_id for r in other.claim_runnable(100, wakeable=False))
        return {"n": s.n + 1}

    flow = FlowBuilder("c", S).step("work", work).compile()
    engine = Engine(open_store(db_path, synchronous="NORMAL"), flows=[flow], clock=clock)
    ids = _start(engine, "c", 34)
    out = engine.resume_pending()
    assert taken == ids[32:]
    assert [r.run_id for r in out.resumed] == ids[:32]
    assert (out.failed_run_id, out.error) == (None, None)
    assert executed == Counter({rid: 1 for rid in ids[:32]})
    assert _leases(engine, ids[:32]) == [None] * 32
    assert _leases(engine, ids[32:]) == [other.owner] * 2  # the other process's claims stand
    engine.store.close()
    other.store.close()


def test_a_sweep_resumes_failed_runs(db_path):
    broken = [True]

    def flaky(s: S) -> dict:
        if broken[0]:
            raise ValueError("not yet")
        return {"n": 7}

    engine = Engine(
        open_store(db_path),
        flows=[FlowBuilder("f", S).step("flaky", flaky).compile()],
        clock=ManualClock(),
    )
    first = engine.run("f", S())
    assert first.status == "failed"
    broken[0] = False
    out = engine.resume_pending()
    assert [(r.run_id, r.status, r.state.n) for r in out.resumed] == [
        (first.run_id, "completed", 7)
    ]
    assert out.failed_run_id is None
    engine.store.close()


def test_a_sweep_leaves_waiting_runs_alone_even_when_their_deadline_passed(db_path):
    clock = ManualClock()
    flow = FlowBuilder("w", S).wait_signal("w", "never", key="k", timeout_s=30).compile()
    engine = Engine(open_store(db_path), flows=[flow], clock=clock)
    res = engine.run("w", S())
    assert res.status == "waiting"
    clock.advance(31)  # due: recover/tick would time it out; resume_pending does not
    out = engine.resume_pending()
    assert out.resumed == [] and out.failed_run_id is None
    run = engine.store.get_run(res.run_id)
    assert (run.status, run.revision, run.lease_owner) == ("waiting", res.revision, None)
    engine.store.close()


def resume_pending_guarded(observer: Engine, guard_s: float = GUARD_S) -> Any:
    """``observer.resume_pending()`` in a thread; a sweep that hands the same
    runs out again and again (never ends) is stopped and fails the test."""
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(observer.resume_pending()), daemon=True)
    t.start()
    t.join(guard_s)
    if t.is_alive():
        observer.stop()
        t.join(guard_s)
        pytest.fail("resume_pending never ended")
    (out,) = box
    return out


def test_an_observer_sweep_hands_each_run_back_once_and_keeps_no_claim(db_path):
    """``executes=False``: each pending run is resumed once (saved running, its
    lease released for a worker); the sweep's second claim finds them again
    and releases those claims too."""
    writer = Engine(open_store(db_path), flows=[_counting("c", Counter())], clock=ManualClock())
    ids = _start(writer, "c", 3)
    observer = Engine(
        open_store(db_path),
        flows=[_counting("c", Counter())],
        clock=ManualClock(),
        executes=False,
    )
    out = resume_pending_guarded(observer)
    assert [(r.run_id, r.status) for r in out.resumed] == [(rid, "running") for rid in ids]  # type: ignore[attr-defined]
    assert [observer.store.get_run(rid).revision for rid in ids] == [1, 1, 1]
    assert _leases(observer, ids) == [None] * 3
    writer.store.close()
    observer.store.close()


def test_a_sweep_stopped_by_an_error_releases_every_claim_it_holds(db_path):
    """The oldest run needs another flow version: the sweep stops there with
    its error, and no claim is left behind (that run's, for a process that
    has its version, nor the runs after it)."""
    clock = ManualClock()
    old = Engine(open_store(db_path), flows=[_counting("c", Counter(), "1")], clock=clock)
    (stale,) = _start(old, "c", 1)
    old.store.close()
    executed: Counter[str] = Counter()
    engine = Engine(open_store(db_path), flows=[_counting("c", executed, "2")], clock=clock)
    later = _start(engine, "c", 3)
    out = engine.resume_pending()
    assert out.resumed == [] and out.failed_run_id == stale
    assert isinstance(out.error, FlowVersionMismatchError)
    assert _leases(engine, [stale, *later]) == [None] * 4
    assert [engine.store.get_run(rid).status for rid in later] == ["pending"] * 3
    assert executed == Counter()
    engine.store.close()


def test_a_sweep_stopped_by_a_failed_run_names_its_step_and_attempts(db_path):
    def boom(s: S) -> dict:
        raise ValueError("bad input")

    executed: Counter[str] = Counter()
    engine = Engine(
        open_store(db_path),
        flows=[
            FlowBuilder("bad", S).step("explode", boom, retry=1).compile(),
            _counting("c", executed),
        ],
        clock=ManualClock(),
    )
    (failing,) = _start(engine, "bad", 1)
    later = _start(engine, "c", 2)
    out = engine.resume_pending()
    assert [r.run_id for r in out.resumed] == [failing]
    assert out.failed_run_id == failing
    assert isinstance(out.error, StepFailedError)
    assert (out.error.run_id, out.error.step_id, out.error.attempts) == (failing, "explode", 2)
    message = f"run {failing}: step 'explode' failed after 2 attempts: ValueError: bad input"
    assert str(out.error) == message
    assert engine.store.get_run(failing).error == message  # the same words as the run's own
    assert _leases(engine, [failing, *later]) == [None] * 3
    assert executed == Counter()
    engine.store.close()


def test_a_sweep_stopped_by_a_halted_run_names_the_step_it_stopped_at(db_path):
    executed: Counter[str] = Counter()
    flow = (
        FlowBuilder("loop", S, max_steps=1)
        .step("one", lambda s: {"n": 1})
        .step("two", lambda s: {"n": 2})
        .chain()
        .compile()
    )
    engine = Engine(
        open_store(db_path), flows=[flow, _counting("c", executed)], clock=ManualClock()
    )
    (halted,) = _start(engine, "loop", 1)
    later = _start(engine, "c", 1)
    out = engine.resume_pending()
    assert [(r.run_id, r.status) for r in out.resumed] == [(halted, "failed")]
    assert out.failed_run_id == halted
    assert isinstance(out.error, StepFailedError)
    assert (out.error.step_id, out.error.attempts) == ("two", 0)
    reason = "halted: max_steps 1 reached at step 'two'"
    assert engine.store.get_run(halted).error == reason
    assert str(out.error) == f"run {halted}: step 'two' failed after 0 attempts: {reason}"
    assert _leases(engine, [halted, *later]) == [None] * 2 and executed == Counter()
    engine.store.close()


# -- recover: a run ``only`` excludes is released --------------------------------


def test_recover_releases_the_runs_only_excludes(db_path):
    executed: Counter[str] = Counter()
    engine = Engine(
        open_store(db_path),
        flows=[_counting("a", executed), _counting("b", executed)],
        clock=ManualClock(),
    )
    (a,) = _start(engine, "a", 1)
    (b,) = _start(engine, "b", 1)
    report = engine.recover(only=lambda run: run.flow_name == "a")
    assert [(r.run_id, o.status) for r, o in report] == [(a, "completed")]  # type: ignore[union-attr]
    assert executed == Counter({a: 1})
    run = engine.store.get_run(b)
    assert (run.status, run.lease_owner) == ("pending", None)
    engine.store.close()


def test_recover_goes_on_when_releasing_an_excluded_run_finds_the_store_busy(db_path):
    """The release of a claim is best effort: a locked database (another
    process's write) leaves the claim to expire and the recovery goes on."""
    executed: Counter[str] = Counter()
    flows = [_counting("a", executed), _counting("b", executed)]
    clock = ManualClock()
    # the runs are started with the usual busy timeout: with none, a start
    # could meet this process's own lease or write-gate thread for an instant
    starter = Engine(open_store(db_path), flows=flows, clock=clock)
    (b,) = _start(starter, "b", 1)
    (a,) = _start(starter, "a", 1)
    starter.store.close()
    # a short busy timeout: the release of b gives up on the blocker, while the
    # run of a rides over this process's own lease and write-gate threads (with
    # none, it met them for an instant once in ~3,000 CI runs)
    engine = Engine(open_store(db_path, busy_timeout_s=0.5), flows=flows, clock=clock)
    blocker = open_connection(db_path)
    locked: list[bool] = []

    def only(run) -> bool:
        if run.flow_name == "b":  # lock the file while the engine releases b
            blocker.execute("BEGIN IMMEDIATE")
            locked.append(True)
            return False
        blocker.execute("ROLLBACK")
        return True

    report = engine.recover(only=only)
    assert locked == [True]
    assert [(r.run_id, o.status) for r, o in report] == [(a, "completed")]  # type: ignore[union-attr]
    assert executed == Counter({a: 1})
    run = engine.store.get_run(b)
    assert (run.status, run.lease_owner) == ("pending", engine.owner)  # it expires on its own
    blocker.close()
    engine.store.close()


# -- serve ------------------------------------------------------------------------


class OnePass(threading.Event):
    """A stop event for one pass of the serve loop: records the wait serve
    asks for and stops it there."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.set()
        return True


def test_serve_polls_every_second_by_default_when_nothing_is_due(db_path):
    engine = Engine(open_store(db_path), flows=[_counting("c", Counter())], clock=ManualClock())
    stop = OnePass()
    ticks: list[int] = []
    engine.serve(stop, on_tick=lambda: ticks.append(1))
    assert stop.waits == [1.0] and ticks == [1]
    engine.store.close()


def test_serve_wakes_up_for_the_next_deadline_sooner_than_a_poll(db_path):
    clock = ManualClock()
    flow = FlowBuilder("w", S).wait_signal("w", "never", key="k", timeout_s=10).compile()
    engine = Engine(open_store(db_path), flows=[flow], clock=clock)
    res = engine.run("w", S())
    clock.advance(9.5)  # the deadline is 0.5 s away
    stop = OnePass()
    engine.serve(stop, poll_s=60)
    assert stop.waits == [pytest.approx(0.5)]
    assert engine.store.get_run(res.run_id).status == "waiting"
    again = OnePass()
    clock.advance(2)  # overdue: this pass times it out, the next one is a poll away
    engine.serve(again, poll_s=60, only=lambda run: False)  # the pass, not the recovery thread
    assert again.waits == [60]
    assert engine.store.get_run(res.run_id).status == "timed_out"
    engine.store.close()


def test_serve_recovers_a_run_left_behind_between_passes_and_never_one_it_cannot_run(
    db_path,
):
    executed: Counter[str] = Counter()
    other = Engine(
        open_store(db_path),
        flows=[_counting("a", executed), _counting("b", executed), _counting("c", executed, "2")],
        clock=ManualClock(),
    )
    (b,) = _start(other, "b", 1)  # a flow the serving engine does not have
    (c,) = _start(other, "c", 1)  # a version it does not have
    engine = Engine(open_store(db_path), flows=[_counting("a", executed), _counting("c", executed)])
    claims: list[int] = []  # claims take the write lock: none on a pass with nothing to do
    real_claim = engine.claim_runnable

    def counted(*args, **kwargs):
        claims.append(1)
        return real_claim(*args, **kwargs)

    engine.claim_runnable = counted  # type: ignore[method-assign]
    stop = threading.Event()
    serving = threading.Thread(target=engine.serve, args=(stop,), kwargs={"poll_s": 0.02})
    serving.start()
    try:
        until(lambda: len(claims) == 1, "the launch's claim")
        time.sleep(0.2)  # ten passes with nothing to do: no claim
        assert len(claims) == 1
        (a,) = _start(other, "a", 1)  # another process's run, left behind
        until(lambda: engine.store.get_run(a).status == "completed", "run a completed")
    finally:
        stop.set()
        serving.join()
    assert executed == Counter({a: 1})
    for rid in (b, c):
        assert (engine.store.get_run(rid).status, engine.store.get_run(rid).lease_owner) == (
            "pending",
            None,
        )
    # one claim at launch (b and c, refused once), one on the pass that found run a
    assert len(claims) == 2
    other.store.close()
    engine.store.close()


def test_serve_recovers_only_the_runs_its_policy_allows(db_path):
    executed: Counter[str] = Counter()
    engine = Engine(
        open_store(db_path),
        flows=[_counting("a", executed), _counting("b", executed)],
        clock=ManualClock(),
    )
    (a,) = _start(engine, "a", 1)
    (b,) = _start(engine, "b", 1)
    engine.serve(OnePass(), only=lambda run: run.flow_name == "a")
    assert executed == Counter({a: 1})
    assert engine.store.get_run(a).status == "completed"
    run = engine.store.get_run(b)
    assert (run.status, run.lease_owner) == ("pending", None)
    engine.store.close()
