"""Resuming, waking and recovering runs through the Engine's public API: which
runs ``recover`` drives, in what order, what it reports for each, which leases
it leaves behind, and the errors a person sees when a run cannot continue
(kill tests for mutants of ``Engine.recover/resume/resume_with/_load_driver/
run/wake/tick/signal`` in ``flow/engine.py``).

Every test runs on a real SQLite file and the injected clock.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import apsw
import pytest
from pydantic import BaseModel, Field

from desktop_app.errors import (
    CheckpointDecodeError,
    FlowVersionMismatchError,
    InputError,
    RunLeasedError,
    RunStateError,
    WaitError,
    iso_utc,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.store import open_store

OTHER = "elsewhere.example:4242:abc123"  # a live owner on another host: never presumed dead


class S(BaseModel):
    n: int = 0
    notes: list[str] = []
    answer: str | None = None


def engine_for(db_path: Path, *flows, clock: ManualClock | None = None, **kw) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock(), **kw)


def counting(name: str, calls: Counter, version: str = "1", **kw):
    def fn(s: S) -> dict:
        calls[name] += 1
        return {"n": s.n + 1}

    return FlowBuilder(name, S, version=version, **kw).step("one", fn).compile()


def ask_flow(version: str = "1"):
    return (
        FlowBuilder("ask", S, version=version)
        .step("start", lambda s: {"n": 1})
        .await_input("ok", "answer", prompt="ship?", timeout_s=60.0)
        .step("ship", lambda s: {"notes": [*s.notes, "shipped"]})
        .chain()
        .compile()
    )


def nap_flow(name: str = "nap"):
    return (
        FlowBuilder(name, S)
        .step("start", lambda s: {"n": 1})
        .sleep("nap", 10.0)
        .step("after", lambda s: {"notes": [*s.notes, "woke"]})
        .chain()
        .compile()
    )


def signal_flow(key: str = "a", timeout_s: float | None = None):
    return (
        FlowBuilder(f"sig-{key}", S)
        .step("start", lambda s: {"n": 1})
        .wait_signal("go", "go", key, into="answer", timeout_s=timeout_s)
        .step("after", lambda s: {"notes": [*s.notes, "signalled"]})
        .chain()
        .compile()
    )


def two_questions(calls: Counter):
    def branch(name: str):
        def fn(s: S, ctx) -> dict:
            calls[name] += 1
            return {"notes": [f"{name}:{ctx.interrupt(f'approve {name}?')}"]}

        return fn

    import operator

    return (
        FlowBuilder("two", S)
        .parallel("calls", {"a": branch("a"), "b": branch("b")}, reducers={"notes": operator.add})
        .step("after", lambda s: {"n": len(s.notes)})
        .chain()
        .compile()
    )


def hold(engine: Engine, run_id: str, owner: str = OTHER, ttl_s: float = 300.0, **kw):
    """Lease ``run_id`` to ``owner`` the way a worker's claim does."""
    status = engine.store.get_run(run_id).status
    got = engine.store.claim_runnable(
        owner, ttl_s, statuses=(status,), wakeable=False, now=kw.get("now", engine.clock.now())
    )
    assert run_id in [r.run_id for r in got]
    for r in got:
        if r.run_id != run_id:  # a claim takes every free run of that status: give back the rest
            engine.store.release(r.run_id, owner)


# -- _load_driver: runs that cannot continue ---------------------------------


def test_a_canceled_run_is_refused_with_the_way_out(db_path):
    engine = engine_for(db_path, ask_flow())
    rid = engine.start("ask", S())
    engine.cancel(rid)
    with pytest.raises(RunStateError) as err:
        engine.resume(rid)
    assert str(err.value) == (
        f"run {rid} is canceled; it cannot be resumed. Replay or fork it "
        "from a checkpoint to run it again."
    )


def test_a_timed_out_run_is_refused_and_nothing_runs_again(db_path):
    clock = ManualClock()
    calls: Counter = Counter()

    def start(s: S) -> dict:
        calls["start"] += 1
        return {"n": 1}

    flow = (
        FlowBuilder("late", S, deadline_s=5.0)
        .step("start", start)
        .sleep("nap", 10.0)
        .step("after", lambda s: {"n": 2})
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow, clock=clock)
    rid = engine.run("late", S()).run_id
    clock.advance(11.0)
    assert engine.wake(rid).status == "timed_out"
    before = engine.store.latest(rid).revision
    with pytest.raises(RunStateError) as err:
        engine.resume(rid)
    assert str(err.value).startswith(f"run {rid} is timed_out; it cannot be resumed.")
    assert engine.store.get_run(rid).status == "timed_out"
    assert engine.store.latest(rid).revision == before
    assert calls["start"] == 1


def test_a_run_of_a_changed_flow_names_the_run_and_both_versions(db_path):
    old, new = ask_flow("1"), ask_flow("2")
    engine = engine_for(db_path, old)
    rid = engine.run("ask", S()).run_id
    engine.store.close()
    engine = engine_for(db_path, new)
    with pytest.raises(FlowVersionMismatchError) as err:
        engine.resume(rid)
    assert (err.value.run_id, err.value.stored, err.value.current) == (
        rid,
        old.version,
        new.version,
    )
    assert str(err.value).startswith(
        f"run {rid} was started under flow version {old.version} but the flow is now "
        f"{new.version}; nothing was run."
    )


def test_a_run_a_live_process_holds_is_refused_with_its_owner_and_expiry(db_path):
    clock = ManualClock()
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    rid = engine.start("c", S())
    hold(engine, rid, ttl_s=300.0)
    with pytest.raises(RunLeasedError) as err:
        engine.resume(rid)
    assert (err.value.run_id, err.value.owner, err.value.expires_at) == (
        rid,
        OTHER,
        clock.now() + 300.0,
    )
    assert str(err.value).startswith(f"run {rid} is held by a live process")
    assert calls["c"] == 0


def test_a_lease_that_ends_exactly_now_is_taken_over(db_path):
    clock = ManualClock()
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    rid = engine.start("c", S())
    hold(engine, rid, ttl_s=30.0)
    clock.advance(30.0)  # the lease's last instant: expired (store rule: expires_at <= now)
    assert engine.resume(rid).status == "completed"
    assert calls["c"] == 1


def test_a_lease_that_expired_at_the_epoch_is_expired(db_path):
    # a lease ending at 0.0 (UTC epoch) is a time, not "no expiry"
    clock = ManualClock(0.5)
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    rid = engine.start("c", S())
    hold(engine, rid, ttl_s=0.0, now=0.0)
    assert engine.store.get_run(rid).lease_expires_at == 0.0
    assert engine.resume(rid).status == "completed"
    assert calls["c"] == 1


def test_a_lease_ending_at_the_epoch_is_reported_as_it_is(db_path):
    # seen from a clock before the epoch the lease still runs: its expiry is 0.0, not made up
    clock = ManualClock(-5.0)
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    rid = engine.start("c", S())
    hold(engine, rid, ttl_s=5.0)
    with pytest.raises(RunLeasedError) as err:
        engine.resume(rid)
    assert err.value.expires_at == 0.0
    report = engine.recover()
    assert [(r.run_id, type(out)) for r, out in report] == [(rid, RunLeasedError)]
    assert report[0][1].expires_at == 0.0  # type: ignore[union-attr]
    assert calls["c"] == 0


def test_a_lease_with_an_empty_owner_is_reported_as_unknown(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls))
    rid = engine.start("c", S())
    hold(engine, rid, owner="")
    with pytest.raises(RunLeasedError) as err:
        engine.resume(rid)
    assert err.value.owner == "?"
    report = engine.recover()
    assert [(r.run_id, getattr(out, "owner", None)) for r, out in report] == [(rid, "?")]
    assert calls["c"] == 0


# -- resume -------------------------------------------------------------------


def test_resume_continues_a_run_whose_timer_fell_due(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, nap_flow(), clock=clock)
    rid = engine.run("nap", S()).run_id
    clock.advance(10.0)
    res = engine.resume(rid)
    assert (res.status, res.state.notes) == ("completed", ["woke"])
    assert engine.store.get_run(rid).status == "completed"


def test_resume_of_a_run_waiting_for_a_signal_keeps_it_waiting(db_path):
    engine = engine_for(db_path, signal_flow("a"))
    rid = engine.run("sig-a", S()).run_id
    res = engine.resume(rid)  # nothing arrived, nobody needs to answer: no error
    assert res.status == "waiting"
    assert [w.kind for w in engine.waits(rid)] == ["signal"]


def test_resume_of_a_run_with_questions_names_them_all(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, two_questions(calls))
    rid = engine.run("two", S()).run_id
    ids = [w.wait_id for w in engine.store.latest(rid).waits]
    assert len(ids) == 2
    with pytest.raises(RunStateError) as err:
        engine.resume(rid)
    assert str(err.value) == (
        f"run {rid} waits for input ({', '.join(ids)}); "
        "answer it with resume_with(run_id, value, wait_id=...)"
    )


def test_resume_clears_a_stale_cancel_request(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls))
    rid = engine.start("c", S())
    engine.cancel_event(rid).set()  # a cancel request that never became a canceled run
    res = engine.resume(rid)
    assert res.status == "completed"
    assert calls["c"] == 1


# -- resume_with ----------------------------------------------------------------


def test_resume_with_refuses_a_run_waiting_for_a_signal(db_path):
    engine = engine_for(db_path, signal_flow("a"))
    rid = engine.run("sig-a", S()).run_id
    with pytest.raises(RunStateError) as err:
        engine.resume_with(rid, "yes")
    assert str(err.value) == (
        f"run {rid} waits, but for no answer (it waits for: signal); nothing was answered"
    )


def test_resume_with_two_questions_and_no_wait_id_names_both(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, two_questions(calls))
    rid = engine.run("two", S()).run_id
    ids = [w.wait_id for w in engine.store.latest(rid).waits]
    with pytest.raises(WaitError) as err:
        engine.resume_with(rid, "yes")
    assert str(err.value) == (
        f"run {rid} has 2 questions pending ({', '.join(ids)}); answer one with wait_id=..."
    )
    with pytest.raises(WaitError) as unknown:
        engine.resume_with(rid, "yes", wait_id=f"{rid}:nope:0")
    assert str(unknown.value) == (
        f"run {rid} has no pending wait {rid}:nope:0; pending: {', '.join(ids)}"
    )
    assert calls == {"a": 1, "b": 1}
    assert [w.wait_id for w in engine.store.latest(rid).waits] == ids


def test_an_answer_at_the_deadline_is_too_late(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, ask_flow(), clock=clock)
    rid = engine.run("ask", S()).run_id
    clock.advance(60.0)  # exactly the deadline
    with pytest.raises(RunStateError) as err:
        engine.resume_with(rid, "yes")
    deadline = iso_utc(clock.now(), "milliseconds")  # the answer came exactly at it
    assert str(err.value) == (
        f"run {rid}: wait {rid}:ok:0 timed out before the answer came (its deadline "
        f"{deadline}, the answer at {deadline} by the later of this process's clock and the "
        "database's); the run is now timed_out; nothing was answered"
    )
    assert engine.store.get_run(rid).status == "timed_out"
    assert engine.get(rid).answer is None


def test_an_interrupt_answer_that_is_not_json_is_refused_and_nothing_changes(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, two_questions(calls))
    rid = engine.run("two", S()).run_id
    wait_id = engine.store.latest(rid).waits[0].wait_id
    before = engine.store.latest(rid).revision
    with pytest.raises(InputError) as err:
        engine.resume_with(rid, {1, 2}, wait_id=wait_id)
    assert str(err.value).startswith(f"run {rid}: the answer must be JSON data: ")
    assert "not JSON serializable" in str(err.value)
    assert engine.store.latest(rid).revision == before
    assert len(engine.store.latest(rid).waits) == 2
    assert calls == {"a": 1, "b": 1}


# -- run (executes=False: created for a worker) --------------------------------


def test_a_submitting_engine_creates_the_run_as_asked(db_path):
    calls: Counter = Counter()
    flow = counting("c", calls)
    worker = engine_for(db_path, flow)
    parent = worker.start("c", S())
    app = engine_for(db_path, flow, executes=False)
    ctx = ExecutionContext(user_id="ada", session_id="s-1")
    res = app.run("c", S(n=7), run_id="child-1", context=ctx, flow_key="k", parent_run_id=parent)
    assert (res.run_id, res.status, res.state, res.revision) == ("child-1", "pending", S(n=7), 0)
    run = app.store.get_run("child-1")
    assert (run.parent_run_id, run.flow_key) == (parent, "k")
    assert (run.context["user_id"], run.context["session_id"]) == ("ada", "s-1")
    again = app.run("c", S(n=8), flow_key="k")  # single flight: the live run with that key
    assert (again.run_id, again.state) == ("child-1", S(n=7))
    assert calls["c"] == 0


class Lossy(BaseModel):
    n: int = 0
    secret: str = Field(default="x", exclude=True)  # never stored: its checkpoint lacks it


def test_a_submitted_run_whose_state_cannot_be_read_back_names_it(db_path):
    flow = FlowBuilder("lossy", Lossy).step("one", lambda s: {"n": 1}).compile()
    app = engine_for(db_path, flow, executes=False)
    with pytest.raises(CheckpointDecodeError) as err:
        app.run("lossy", Lossy(), run_id="lossy-1")
    assert (err.value.run_id, err.value.revision, err.value.field_path) == ("lossy-1", 0, "secret")


# -- wake, tick, signal ---------------------------------------------------------


def paused_flow(calls: Counter):
    def boom(s: S) -> dict:
        calls["boom"] += 1
        raise ValueError("disk full")

    return FlowBuilder("paused", S, deadline_s=100.0).step("boom", boom, on_error="pause").compile()


def test_wake_leaves_a_paused_run_paused_even_past_its_deadline(db_path):
    clock = ManualClock()
    calls: Counter = Counter()
    engine = engine_for(db_path, paused_flow(calls), clock=clock)
    rid = engine.run("paused", S()).run_id
    assert engine.store.get_run(rid).status == "waiting"
    assert "pause" in engine.store.latest(rid).meta
    clock.advance(200.0)
    res = engine.wake(rid)
    assert res.status == "waiting"
    assert engine.store.get_run(rid).status == "waiting"
    # recover wakes (not resumes) a waiting run: the paused step is not retried
    report = engine.recover()
    assert [(r.run_id, getattr(out, "status", None)) for r, out in report] == [(rid, "waiting")]
    assert calls["boom"] == 1
    assert "pause" in engine.store.latest(rid).meta


def test_wake_of_a_completed_run_returns_its_result(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls))
    done = engine.run("c", S())
    res = engine.wake(done.run_id)
    assert (res.status, res.state.n, res.revision) == ("completed", 1, done.revision)


def test_tick_counts_every_run_it_woke_and_skips_a_leased_one(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, nap_flow("nap1"), nap_flow("nap2"), nap_flow("nap3"), clock=clock)
    leased = engine.run("nap1", S()).run_id
    clock.advance(1.0)
    b = engine.run("nap2", S()).run_id
    clock.advance(1.0)
    c = engine.run("nap3", S()).run_id
    hold(engine, leased)  # its deadline is due first: tick meets it first
    clock.advance(20.0)
    assert engine.tick() == 2
    assert [engine.store.get_run(r).status for r in (leased, b, c)] == [
        "waiting",
        "completed",
        "completed",
    ]


def test_a_signal_wakes_only_runs_waiting_on_its_key(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, signal_flow("a", timeout_s=30.0), signal_flow("b"), clock=clock)
    a = engine.run("sig-a", S()).run_id
    b = engine.run("sig-b", S()).run_id
    clock.advance(60.0)  # a's wait is overdue, but only tick/recover act on that
    engine.signal("go", "b", "hello")
    assert engine.store.get_run(b).status == "completed"
    assert engine.store.get_run(a).status == "waiting"
    assert engine.get(a).answer is None


# -- recover ------------------------------------------------------------------


def test_recover_reports_held_runs_with_their_lease_and_calls_back(db_path):
    clock = ManualClock()
    calls: Counter = Counter()
    fails = FlowBuilder("bad", S).step("x", lambda s: 1 / 0).compile()
    engine = engine_for(db_path, counting("c", calls), fails, ask_flow(), clock=clock)
    free = engine.start("c", S())
    clock.advance(1.0)
    held = engine.start("c", S())
    hold(engine, held)
    failed = engine.run("bad", S()).run_id
    assert engine.store.get_run(failed).status == "failed"
    hold(engine, failed)  # failed runs are left alone, held or not
    waiting = engine.run("ask", S()).run_id
    hold(engine, waiting)
    seen: list[tuple[str, object]] = []
    report = engine.recover(
        on_result=lambda run, out: seen.append((run.run_id, out)),
        only=lambda run: run.flow_name in ("c", "bad", "ask"),
    )
    assert [r.run_id for r, _ in report] == [free, held]
    assert report[0][1].status == "completed"  # type: ignore[union-attr]
    leased = report[1][1]
    assert isinstance(leased, RunLeasedError)
    assert (leased.run_id, leased.owner, leased.expires_at) == (held, OTHER, clock.now() + 300.0)
    assert str(leased).startswith(f"run {held} is held by a live process")
    assert [(rid, type(out)) for rid, out in seen] == [
        (free, type(report[0][1])),
        (held, RunLeasedError),
    ]
    assert seen[1][1] is leased
    assert calls["c"] == 1


def test_recover_leaves_excluded_runs_unclaimed(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("a", calls), counting("b", calls))
    a = engine.start("a", S())
    b = engine.start("b", S())
    report = engine.recover(only=lambda run: run.flow_name == "a")
    assert [r.run_id for r, _ in report] == [a]
    assert calls == {"a": 1}
    rb = engine.store.get_run(b)
    assert (rb.status, rb.lease_owner, rb.lease_expires_at) == ("pending", None, None)


def test_recover_reports_a_run_of_a_changed_flow_once_and_releases_it(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls, version="1"))
    rid = engine.start("c", S())
    engine.store.close()
    engine = engine_for(db_path, counting("c", calls, version="2"))
    report = engine.recover()
    assert [(r.run_id, type(out)) for r, out in report] == [(rid, FlowVersionMismatchError)]
    run = engine.store.get_run(rid)
    assert (run.status, run.lease_owner) == ("pending", None)
    assert calls["c"] == 0


def test_recover_does_not_report_a_run_a_step_started_meanwhile(db_path):
    calls: Counter = Counter()
    holder: list[Engine] = []
    started: list[str] = []

    def spawn(s: S) -> dict:
        started.append(holder[0].start("c", S()))
        return {"n": 1}

    spawner = FlowBuilder("spawner", S).step("spawn", spawn).compile()
    engine = engine_for(db_path, spawner, counting("c", calls))
    holder.append(engine)
    rid = engine.start("spawner", S())
    report = engine.recover()
    assert [r.run_id for r, _ in report] == [rid]
    assert engine.store.get_run(started[0]).status == "pending"  # the next recover's work


def test_recover_drives_parents_before_children_whatever_the_claim_order(db_path):
    # all created at the same instant: claim order is by run id (w, x, y, z), the
    # reverse of the lineage z -> y -> x -> w
    calls: Counter = Counter()
    order: list[str] = []

    def fn(s: S, ctx) -> dict:
        order.append(ctx.run_id)
        return {"n": 1}

    flow = FlowBuilder("kin", S).step("one", fn).compile()
    engine = engine_for(db_path, flow, counting("c", calls))
    ctx = ExecutionContext()
    engine.start("kin", S(), run_id="z")
    engine.start("kin", S(), run_id="y", parent_run_id="z", context=ctx)
    engine.start("kin", S(), run_id="x", parent_run_id="y", context=ctx)
    engine.start("kin", S(), run_id="w", parent_run_id="x", context=ctx)
    seen: list[str] = []
    report = engine.recover(on_result=lambda run, out: seen.append(run.run_id), concurrency=1)
    assert [r.run_id for r, _ in report] == ["w", "x", "y", "z"]  # claim order
    assert order == ["z", "y", "x", "w"]
    assert seen == ["z", "y", "x", "w"]


def test_recover_drives_up_to_sixty_four_runs_at_once_by_default(db_path):
    """64 at once: one commit (one fsync) carries up to 64 runs' checkpoints."""
    calls: Counter = Counter()
    entered: list[str] = []
    gate = threading.Condition()

    def fn(s: S) -> dict:
        with gate:
            entered.append(threading.current_thread().name)
            gate.notify_all()
            assert gate.wait_for(lambda: len(entered) >= 64, timeout=60.0)  # a guard, not a sync
        return {"n": 1}

    flow = FlowBuilder("wide", S).step("one", fn).compile()
    engine = engine_for(db_path, flow, counting("c", calls))
    ids = [engine.start("wide", S()) for _ in range(65)]
    report = engine.recover()
    assert sorted(r.run_id for r, _ in report) == sorted(ids)
    assert all(getattr(out, "status", None) == "completed" for _, out in report)
    assert len(entered) == 65
    assert len(set(entered)) == 64  # 64 threads: the 65th run waited for a free one


def test_recover_ends_on_runs_whose_parents_form_a_cycle(db_path):
    # the engine refuses a parent that does not exist, so the cycle (p names q,
    # q names p) is made in the file by hand, as a damaged or edited file has it
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("c", calls))
    engine.start("c", S(), run_id="p")
    engine.start("c", S(), run_id="q", parent_run_id="p")
    other = apsw.Connection(str(db_path))
    other.execute("UPDATE runs SET parent_run_id='q' WHERE run_id='p'")
    other.close()
    assert engine.store.get_run("p").parent_run_id == "q"
    done: list[list] = []
    worker = threading.Thread(target=lambda: done.append(engine.recover()), daemon=True)
    worker.start()
    worker.join(timeout=60.0)  # a guard against a loop that never ends, not a sync
    assert not worker.is_alive(), "recover never ended"
    assert [(r.run_id, getattr(out, "status", None)) for r, out in done[0]] == [
        ("p", "completed"),
        ("q", "completed"),
    ]
    assert calls["c"] == 2


def test_an_engine_on_a_file_refuses_to_write_from_a_clock_an_hour_off(db_path, monkeypatch):
    """An ``Engine`` given no clock checks its process's clock against the
    file system's (``default_clock``: the store's ``file_system_now``): a
    clock an hour ahead starts nothing and writes nothing, in process as in
    the CLI's skew tests."""
    import time
    from types import SimpleNamespace

    from desktop_app.errors import ClockSkewError
    from desktop_app.flow import clock

    store = open_store(db_path)
    try:
        # this process's clock an hour ahead (the file system's is the kernel's)
        ahead = SimpleNamespace(time=lambda: time.time() + 3600, monotonic=time.monotonic)
        monkeypatch.setattr(clock, "time", ahead)
        engine = Engine(store, flows=[ask_flow()])
        with pytest.raises(ClockSkewError):
            engine.run("ask", S())
        monkeypatch.undo()
        assert store.list_runs() == []
    finally:
        store.close()
