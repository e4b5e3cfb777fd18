"""Durable waits: input, interrupts, signals, events, deadlines (S26-S29, S31,
S46, S47, S51, S52)."""

from __future__ import annotations

import operator
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.errors import (
    FlowDefinitionError,
    FlowVersionMismatchError,
    RunStateError,
    WaitAlreadyResolvedError,
    WaitError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store

HOUR = 3600.0


class S(BaseModel):
    n: int = 0
    answer: str | None = None
    payload: dict | None = None
    notes: list[str] = []
    order: str = "o-1"


def engine_for(db_path, *flows, clock=None):
    store = open_store(db_path)
    return Engine(store, flows=list(flows), clock=clock or ManualClock())


def reopen(engine: Engine, *flows) -> Engine:
    """A fresh engine over the same file, as after a restart (same clock)."""
    engine.store.close()
    return Engine(open_store(engine.store.path), flows=list(flows), clock=engine.clock)


@pytest.mark.scenario("S26")
def test_interrupt_returns_the_resume_value_and_keeps_a_continuation(db_path):
    seen = []

    def ask(s: S, ctx) -> dict:
        reply = ctx.interrupt({"question": "approve?"}, continuation={"draft": 3})
        seen.append((reply, ctx.continuation))
        return {"answer": reply}

    flow = FlowBuilder("ask", S).step("prep", lambda s: {"n": 1}).step("ask", ask).chain()
    engine = engine_for(db_path, flow.compile())
    res = engine.run("ask", S())
    assert res.status == "waiting"
    (waiting,) = engine.waiting()
    assert waiting.run_id == res.run_id
    wait = engine.store.latest(res.run_id).waits[0]
    assert wait.wait_id == f"{res.run_id}:ask:0" and wait.prompt == {"question": "approve?"}
    engine = reopen(engine, flow.compile())
    done = engine.resume_with(res.run_id, "yes")
    assert done.run_id == res.run_id and done.status == "completed"
    assert done.state.answer == "yes" and done.state.n == 1
    assert seen == [("yes", {"draft": 3})]
    engine.store.close()


@pytest.mark.scenario("S27")
def test_signal_sent_while_down_is_delivered_after_restart(db_path):
    def flow():
        return (
            FlowBuilder("pay", S)
            .wait_signal("paid", "payment", key=lambda s: s.order, into="payload")
            .step("ship", lambda s: {"notes": ["shipped"]})
            .chain()
            .compile()
        )

    engine = engine_for(db_path, flow())
    res = engine.run("pay", S(order="o-7"))
    assert res.status == "waiting"
    engine.store.close()
    # another process (no engine, no flows) stores the signal while nobody runs the flow
    other = Engine(open_store(db_path), clock=engine.clock)
    other.signal("payment", "o-7", {"amount": 12})
    other.signal("payment", "o-8", {"amount": 99})  # someone else's
    other.store.close()
    restarted = Engine(open_store(db_path), flows=[flow()], clock=engine.clock)
    report = restarted.recover()
    assert [o.status for _, o in report] == ["completed"]
    state = restarted.get(res.run_id)
    assert state.payload == {"amount": 12} and state.notes == ["shipped"]
    assert restarted.store.next_signal("payment", "o-8") is not None  # not consumed
    restarted.store.close()


@pytest.mark.scenario("S27")
def test_a_signal_or_event_sent_after_the_deadline_does_not_complete_the_wait(db_path):
    """A wait with a deadline: what was sent within it completes it, even
    when no process ran until after the deadline; what was sent after it
    does not (the run times out, as after a late answer, and the signal
    stays unconsumed). It completed the wait whenever it was sent."""

    def signal_flow():
        return (
            FlowBuilder("pay", S)
            .wait_signal("paid", "payment", key=lambda s: s.order, into="payload", timeout_s=HOUR)
            .step("ship", lambda s: {"notes": ["shipped"]})
            .chain()
            .compile()
        )

    def event_flow(name: str, event_type: str):
        return (
            FlowBuilder(name, S)
            .wait_event("deploy", event_type, into="payload", timeout_s=HOUR)
            .step("after", lambda s: {"notes": ["deployed"]})
            .chain()
            .compile()
        )

    flows = [signal_flow(), event_flow("ev_in", "early"), event_flow("ev_late", "late")]
    clock = ManualClock()
    engine = engine_for(db_path, *flows, clock=clock)
    in_time, late = (engine.run("pay", S(order=o)).run_id for o in ("in", "late"))
    ev_in, ev_late = engine.run("ev_in", S()).run_id, engine.run("ev_late", S()).run_id
    engine.store.close()
    other = Engine(open_store(db_path), clock=clock)  # no flows: it stores, cannot deliver
    clock.advance(HOUR / 2)
    other.signal("payment", "in", {"amount": 1})
    other.publish("early", {"v": 1})
    clock.advance(HOUR)  # every deadline passed; then the late ones are sent
    other.signal("payment", "late", {"amount": 2})
    other.publish("late", {"v": 2})
    other.store.close()

    restarted = Engine(open_store(db_path), flows=flows, clock=clock)
    restarted.tick()
    assert restarted.status(in_time).status == "completed"
    assert restarted.get(in_time).payload == {"amount": 1}
    assert restarted.status(ev_in).status == "completed"
    assert restarted.get(ev_in).payload == {"v": 1}
    for rid in (late, ev_late):
        assert restarted.status(rid).status == "timed_out", rid
        assert "timed out" in (restarted.status(rid).error or "")
    assert restarted.store.next_signal("payment", "late") is not None  # not consumed
    restarted.store.close()


@pytest.mark.scenario("S27")
def test_event_wait_and_predicate_waits_are_refused():
    with pytest.raises(FlowDefinitionError, match="predicate waits cannot be persisted"):
        FlowBuilder("p", S).wait_until("w", lambda s: s.n > 3)
    with pytest.raises(FlowDefinitionError, match="predicate"):
        FlowBuilder("p", S).wait_signal("w", lambda s: True, key="k")  # type: ignore[arg-type]


@pytest.mark.scenario("S27")
def test_event_wait_is_broadcast(db_path):
    flow = (
        FlowBuilder("ev", S)
        .wait_event("deploy", "deployed", into="payload")
        .step("after", lambda s: {"n": 1})
        .chain()
        .compile()
    )
    engine = engine_for(db_path, flow)
    a, b = engine.run("ev", S()), engine.run("ev", S())
    assert a.status == b.status == "waiting"
    engine.publish("deployed", {"version": "2.1"})
    for rid in (a.run_id, b.run_id):
        assert engine.status(rid).status == "completed"
        assert engine.get(rid).payload == {"version": "2.1"}
    engine.store.close()


@pytest.mark.scenario("S28")
def test_deadline_judged_by_the_clock_on_recovery(db_path):
    def flow():
        return (
            FlowBuilder("approve", S)
            .await_input("ok", "answer", prompt="ship?", timeout_s=24 * HOUR, on_timeout="expired")
            .step("ship", lambda s: {"notes": ["shipped"]})
            .step("expired", lambda s: {"notes": ["expired"]})
            .edge("ok", "ship")
            .finish("ship", "expired")
            .compile()
        )

    clock = ManualClock()
    engine = engine_for(db_path, flow(), clock=clock)
    res = engine.run("approve", S())
    wait = engine.store.latest(res.run_id).waits[0]
    assert wait.deadline_at == clock.now() + 24 * HOUR
    engine.store.close()
    clock.advance(23 * HOUR)  # before the deadline: still waits
    engine = Engine(open_store(db_path), flows=[flow()], clock=clock)
    assert engine.recover() == []
    assert engine.status(res.run_id).status == "waiting"
    engine.store.close()
    clock.advance(2 * HOUR)  # past it: timeout outcome
    engine = Engine(open_store(db_path), flows=[flow()], clock=clock)
    (outcome,) = [o for _, o in engine.recover()]
    assert outcome.status == "completed" and outcome.state.notes == ["expired"]
    steps = engine.store.latest(res.run_id).steps
    assert steps["ok"].error_type == "WaitTimeout" and "ship" not in steps
    engine.store.close()


@pytest.mark.scenario("S28")
def test_timer_fires_while_running_without_restart(db_path):
    flow = FlowBuilder("nap", S).sleep("nap", 5.0).step("up", lambda s: {"n": 1}).chain().compile()
    clock = ManualClock()
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("nap", S())
    assert res.status == "waiting" and engine.tick() == 0
    clock.advance(5.0)
    assert engine.tick() == 1
    assert engine.status(res.run_id).status == "completed"
    engine.store.close()


@pytest.mark.scenario("S28")
def test_serve_loop_fires_a_deadline_when_it_falls_due(db_path):
    """The serve loop's timer, on the injected clock: nothing fires before the
    stored deadline, the first pass after it times the run out."""
    import threading

    flow = FlowBuilder("rt", S).wait_signal("w", "never", key="k", timeout_s=30).compile()
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[flow], clock=clock)
    res = engine.run("rt", S())
    passes: list[str] = []
    first_pass, timed_out, stop = threading.Event(), threading.Event(), threading.Event()

    def on_tick() -> None:
        status = engine.status(res.run_id).status
        passes.append(status)
        first_pass.set()
        if status == "timed_out":
            timed_out.set()

    t = threading.Thread(
        target=engine.serve, args=(stop,), kwargs={"poll_s": 0.01, "on_tick": on_tick}
    )
    t.start()
    try:
        assert first_pass.wait(30)
        clock.advance(29.9)
        assert engine.status(res.run_id).status == "waiting"  # not before the deadline
        clock.advance(0.2)
        assert timed_out.wait(30), passes  # 30 s: only a hang guard
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert passes[0] == "waiting" and passes[-1] == "timed_out"
    assert engine.status(res.run_id).status == "timed_out"
    engine.store.close()


@pytest.mark.scenario("S29")
def test_recovery_recreates_only_pending_waits_not_entry_effects(db_path, tmp_path):
    calls = tmp_path / "emails"

    def send_email(s: S) -> dict:
        with calls.open("a") as fh:
            fh.write("sent\n")
        return {"notes": ["emailed"]}

    def flow():
        return (
            FlowBuilder("mail", S)
            .wait_signal(
                "reply", "reply", key="k", on_enter=send_email, into="answer", timeout_s=HOUR
            )
            .compile()
        )

    clock = ManualClock()
    engine = engine_for(db_path, flow(), clock=clock)
    res = engine.run("mail", S())
    first = engine.store.latest(res.run_id).waits
    for _ in range(3):  # restarts and recoveries
        engine = reopen(engine, flow())
        engine.recover()
        engine.tick()
        assert engine.store.latest(res.run_id).waits == first  # same id, same deadline
    assert calls.read_text() == "sent\n"
    engine.signal("reply", "k", "hello")
    assert engine.get(res.run_id).answer == "hello"
    assert calls.read_text() == "sent\n"
    engine.store.close()


@pytest.mark.scenario("S31")
def test_single_flight_by_flow_key(db_path):
    flow = FlowBuilder("sf", S).await_input("a", "answer").compile()
    engine = engine_for(db_path, flow)
    first = engine.run("sf", S(), flow_key="invoice-42")
    again = engine.run("sf", S(n=5), flow_key="invoice-42")
    assert again.run_id == first.run_id and again.state.n == 0
    assert engine.start("sf", S(), flow_key="invoice-42") == first.run_id
    other = engine.run("sf", S(), flow_key="invoice-43")
    assert other.run_id != first.run_id
    engine.resume_with(first.run_id, "done")
    fresh = engine.run("sf", S(), flow_key="invoice-42")  # the first is finished now
    assert fresh.run_id != first.run_id
    engine.store.close()


def three_approvals(calls: Counter):
    def branch(name: str):
        def fn(s: S, ctx) -> dict:
            calls[name] += 1
            ok = ctx.interrupt(f"approve {name}?")
            return {"notes": [f"{name}:{ok}"]}

        return fn

    return (
        FlowBuilder("tools", S)
        .parallel(
            "calls",
            {"a": branch("a"), "b": branch("b"), "c": branch("c")},
            reducers={"notes": operator.add},
        )
        .step("after", lambda s: {"n": len(s.notes)})
        .chain()
        .compile()
    )


@pytest.mark.scenario("S46")
def test_several_pending_waits_have_stable_ids_and_are_answered_one_by_one(db_path):
    calls: Counter[str] = Counter()
    engine = engine_for(db_path, three_approvals(calls))
    res = engine.run("tools", S())
    assert res.status == "waiting"
    ids = sorted(w.wait_id for w in engine.store.latest(res.run_id).waits)
    assert ids == [f"{res.run_id}:calls/{b}:0" for b in "abc"]
    engine = reopen(engine, three_approvals(calls))
    assert sorted(w.wait_id for w in engine.store.latest(res.run_id).waits) == ids
    with pytest.raises(WaitError, match="3 questions pending"):
        engine.resume_with(res.run_id, "yes")
    r = engine.resume_with(res.run_id, "yes", wait_id=ids[1])  # answer b only
    assert r.status == "waiting"
    assert calls == {"a": 1, "b": 2, "c": 1}  # only b ran again
    assert sorted(w.wait_id for w in engine.store.latest(res.run_id).waits) == [ids[0], ids[2]]
    with pytest.raises(WaitAlreadyResolvedError):
        engine.resume_with(res.run_id, "no", wait_id=ids[1])
    engine.resume_with(res.run_id, "no", wait_id=ids[2])
    done = engine.resume_with(res.run_id, "maybe")  # the only one left: bare answer is fine
    assert done.status == "completed"
    assert done.state.notes == ["a:maybe", "b:yes", "c:no"]  # declared order; b's first answer
    engine.store.close()


@pytest.mark.scenario("S47")
def test_answered_wait_is_not_asked_again_after_a_crash(db_path):
    calls: Counter[str] = Counter()

    class Boom(BaseException):
        pass

    crash = {"on": True}

    def prep(s: S) -> dict:
        calls["prep"] += 1
        return {"n": 1}

    def approve(s: S, ctx) -> dict:
        calls["approve"] += 1
        return {"answer": ctx.interrupt("ok?")}

    def after(s: S) -> dict:
        calls["after"] += 1
        if crash["on"]:
            crash["on"] = False
            raise Boom()  # the process dies during the next step
        return {"notes": ["done"]}

    def flow():
        return (
            FlowBuilder("ap", S)
            .step("prep", prep)
            .step("approve", approve)
            .step("after", after)
            .chain()
            .compile()
        )

    engine = engine_for(db_path, flow())
    res = engine.run("ap", S())
    with pytest.raises(Boom):
        engine.resume_with(res.run_id, "approved")
    engine = reopen(engine, flow())
    (outcome,) = [o for _, o in engine.recover()]
    assert outcome.status == "completed" and outcome.state.answer == "approved"
    assert calls == {"prep": 1, "approve": 2, "after": 2}  # asked once, prep once
    assert engine.waiting() == []
    engine.store.close()


@pytest.mark.scenario("S52")
def test_deadline_passed_while_closed_fires_at_once_and_is_never_pushed_later(db_path):
    def flow():
        return (
            FlowBuilder("d", S, deadline_s=48 * HOUR)
            .await_input("ok", "answer", timeout_s=24 * HOUR)
            .compile()
        )

    clock = ManualClock()
    t0 = clock.now()
    engine = engine_for(db_path, flow(), clock=clock)
    res = engine.run("d", S())
    run_deadline = engine.status(res.run_id).deadline_at
    assert run_deadline == t0 + 48 * HOUR
    clock.set(t0 + 23 * HOUR)
    engine = reopen(engine, flow())
    engine.recover()
    assert engine.status(res.run_id).status == "waiting"
    assert engine.store.latest(res.run_id).waits[0].deadline_at == t0 + 24 * HOUR
    assert engine.status(res.run_id).deadline_at == run_deadline  # not pushed later
    engine.store.close()
    clock.set(t0 + 30 * HOUR)
    engine = Engine(open_store(db_path), flows=[flow()], clock=clock)
    engine.recover()
    run = engine.status(res.run_id)
    assert run.status == "timed_out" and "timed out" in (run.error or "")
    with pytest.raises(RunStateError):
        engine.resume_with(res.run_id, "too late")
    engine.store.close()


@pytest.mark.scenario("S52")
def test_run_level_deadline_times_out_a_waiting_run(db_path):
    flow = FlowBuilder("rd", S, deadline_s=HOUR).wait_signal("w", "x", key="k").compile()
    clock = ManualClock()
    engine = engine_for(db_path, flow, clock=clock)
    res = engine.run("rd", S())
    clock.advance(HOUR + 1)
    assert engine.tick() == 1
    assert engine.status(res.run_id).status == "timed_out"
    engine.store.close()


@pytest.mark.scenario("S51")
def test_waiting_run_of_a_changed_flow_is_reported_and_can_be_failed_forked_or_kept(db_path):
    v1 = (
        FlowBuilder("up", S, version="1")
        .step("prep", lambda s: {"n": 1})
        .await_input("ok", "answer")
        .step("go", lambda s: {"notes": ["v1"]})
        .chain()
        .compile()
    )
    v2 = (
        FlowBuilder("up", S, version="2")
        .step("prep", lambda s: {"n": 1})
        .await_input("ok", "answer")
        .step("check", lambda s: {"n": 2})
        .step("go", lambda s: {"notes": ["v2"]})
        .chain()
        .compile()
    )
    old = engine_for(db_path, v1)
    runs = [old.run("up", S()).run_id for _ in range(3)]
    old.store.close()
    engine = Engine(open_store(db_path), flows=[v2], clock=old.clock)
    report = engine.incompatible_runs()
    assert sorted(r.run_id for r in report) == sorted(runs)
    first = report[0]
    assert (first.stored_version, first.current_version) == (v1.version, v2.version)
    assert first.step == "ok" and first.status == "waiting"
    with pytest.raises(FlowVersionMismatchError):
        engine.resume_with(runs[0], "yes")
    failed = engine.fail_run(runs[0], "flow changed; abandoned")
    assert failed.status == "failed"
    forked = engine.fork_onto_current(runs[1])
    assert forked.run_id != runs[1] and forked.status == "waiting"
    done = engine.resume_with(forked.run_id, "yes")
    assert done.status == "completed" and done.state.notes == ["v2"] and done.state.n == 2
    assert engine.status(runs[1]).status == "canceled"  # superseded by its fork
    assert engine.status(runs[2]).status == "waiting"  # kept for the old version
    keep = Engine(engine.store, flows=[v1], clock=old.clock)
    assert keep.resume_with(runs[2], "ok").state.notes == ["v1"]
    engine.store.close()


@pytest.mark.scenario("S51")
def test_a_run_moved_onto_a_new_version_keeps_its_wait_deadline_and_on_enter_effect(db_path):
    """The wait a run is in goes on in the run that continues it on the new
    version: its deadline as stored (a sleep is not slept again, a timeout
    counts from when the wait began) and its ``on_enter`` effect not done
    again. A wait the new version changed begins anew."""
    entered: list[str] = []

    def flow(first: str, signal: str = "go", version: str = "1") -> object:
        return (
            FlowBuilder("mv", S, version=version)
            .step(first, lambda s: {"n": 1})
            .sleep("nap", 10 * HOUR)
            .wait_signal(
                "w", signal, key="k", timeout_s=24 * HOUR,
                on_enter=lambda s, ctx: entered.append(ctx.run_id),
            )
            .step("end", lambda s: {"notes": ["done"]})
            .chain()
            .compile()
        )  # fmt: skip

    clock = ManualClock()
    old = engine_for(db_path, flow("a"), clock=clock)
    napping, signalled, renamed = (old.run("mv", S()).run_id for _ in range(3))
    nap_deadline = old.store.latest(napping).waits[0].deadline_at
    clock.advance(10 * HOUR)
    for rid in (signalled, renamed):  # past the nap, into the signal wait
        assert old.resume(rid).status == "waiting"
    assert entered == [signalled, renamed]
    began = old.store.latest(signalled).waits[0]
    old.store.close()

    clock.advance(-9 * HOUR)  # the nap has 9 of its 10 hours left
    engine = Engine(open_store(db_path), flows=[flow("b")], clock=clock)
    moved = engine.fork_onto_current(napping)
    (wait,) = engine.store.latest(moved.run_id).waits
    assert (wait.step_id, wait.deadline_at) == ("nap", nap_deadline)
    assert wait.wait_id == f"{moved.run_id}:nap:0"
    clock.advance(9 * HOUR - 1)
    assert engine.tick() == 0 and engine.status(moved.run_id).status == "waiting"
    clock.advance(1)
    assert engine.tick() == 1  # its nap ends when the old one would have
    assert entered == [signalled, renamed, moved.run_id]  # then it waits for the signal

    clock.advance(9 * HOUR)
    moved = engine.fork_onto_current(signalled)
    (wait,) = engine.store.latest(moved.run_id).waits
    assert (wait.deadline_at, wait.created_at) == (began.deadline_at, began.created_at)
    assert len(entered) == 3  # no second on_enter for it
    napped = entered[2]  # the moved nap's run, in the same wait
    for _ in range(2):
        engine.signal("go", "k", {"x": 1})
    assert engine.status(moved.run_id).status == engine.status(napped).status == "completed"
    assert engine.status(signalled).status == "canceled"
    engine.store.close()

    # a version that waits on another signal there: the wait begins anew
    changed = Engine(open_store(db_path), flows=[flow("b", "went", "2")], clock=clock)
    fresh = changed.fork_onto_current(renamed)
    (wait,) = changed.store.latest(fresh.run_id).waits
    assert wait.name == "went" and wait.deadline_at == clock.now() + 24 * HOUR
    assert entered[-1] == fresh.run_id and len(entered) == 4
    changed.store.close()
