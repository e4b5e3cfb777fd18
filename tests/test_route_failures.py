"""A route function is the flow's code and runs as part of the step it
routes from: when it raises, or picks a target it did not declare, that
step fails with ``RouteError`` under its ``on_error`` policy, not retried,
and nothing escapes ``Engine.run``/``resume``/``wake``. Before, the
exception escaped as it was and left the run ``running`` under its lease,
so every recovery ran the step's body again and failed the same way.

After a wait step: a person's answer that makes the route fail is refused
(``RouteError``, the run still waiting, nothing changed); a signal whose
route fails, or whose payload does not fit the field, fails the step and
stays unconsumed, so nothing sent is lost."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import RouteError, SignalPayloadError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    n: int = 0
    pick: str = ""
    answer: str = ""
    count: int = 0
    error: str = ""


@pytest.fixture
def engine(db_path):
    store = open_store(db_path)
    yield Engine(store, clock=ManualClock())
    store.close()


def _broken(s: S) -> str:
    raise KeyError(f"no route for n={s.n}")


def _counting_flow(calls: list[int], pick, **policy) -> object:
    def work(s: S) -> dict:
        calls.append(s.n)
        return {"n": s.n + 1}

    b = (
        FlowBuilder("r", S, retry=3)
        .step("work", work, **policy)
        .step("left", lambda s: {"pick": "left"})
        .step("right", lambda s: {"pick": "right"})
        .route("work", pick, ["left", "right"])
        .finish("left", "right")
    )
    if "error_route" in policy:
        b = b.step("handle", lambda s: {"pick": "handled"}).finish("handle")
    return b.compile()


def test_a_route_that_raises_fails_its_step_once_and_names_the_route(engine):
    calls: list[int] = []
    engine.register(_counting_flow(calls, _broken))
    r = engine.run("r", S())
    assert r.status == "failed"
    assert calls == [0]  # not retried: retry=3 would have run work four times
    assert "step 'work' failed after 1 attempt" in r.error
    assert "RouteError: flow 'r': the route from step 'work' failed: KeyError" in r.error
    assert "no route for n=1" in r.error  # the state the step left
    run = engine.store.get_run(r.run_id)
    assert (run.status, run.lease_owner) == ("failed", None)
    cp = engine.store.latest(r.run_id)
    assert (cp.steps["work"].status, cp.steps["work"].error_type) == ("failed", "RouteError")
    assert cp.state["n"] == 0  # the step's output did not land
    assert "left" not in cp.steps and "right" not in cp.steps


def test_a_route_that_picks_an_undeclared_target_fails_its_step(engine):
    calls: list[int] = []
    engine.register(_counting_flow(calls, lambda s: "middle"))
    r = engine.run("r", S())
    assert r.status == "failed"
    assert calls == [0]
    assert "FlowDefinitionError" in r.error
    assert "route from 'work' picked 'middle', not one of ['left', 'right']" in r.error


def test_a_failing_route_takes_the_steps_error_route(engine):
    calls: list[int] = []
    flow = _counting_flow(calls, _broken, on_error="route", error_route="handle")
    engine.register(flow)
    r = engine.run("r", S())
    assert r.status == "completed", r.error
    assert (r.state.pick, r.state.n) == ("handled", 0)
    assert r.state.error.startswith("RouteError: flow 'r': the route from step 'work' failed")
    assert calls == [0]


def test_a_paused_route_failure_resumes_once_the_route_works(engine):
    calls: list[int] = []
    fixed = {"yes": False}

    def pick(s: S) -> str:
        if not fixed["yes"]:
            raise KeyError("not yet")
        return "right"

    engine.register(_counting_flow(calls, pick, on_error="pause"))
    r = engine.run("r", S())
    assert r.status == "waiting"
    assert "paused after step 'work' failed: RouteError" in r.error
    fixed["yes"] = True
    r = engine.resume(r.run_id)
    assert (r.status, r.state.pick, r.state.n) == ("completed", "right", 1)
    assert calls == [0, 0]  # the step ran again from the state before it


def _review_flow(route) -> object:
    return (
        FlowBuilder("rev", S)
        .await_input("ask", "answer", "approve?")
        .step("yes", lambda s: {"pick": "yes"})
        .step("no", lambda s: {"pick": "no"})
        .route("ask", route, ["yes", "no"])
        .finish("yes", "no")
        .compile()
    )


def test_an_answer_whose_route_fails_is_refused_and_the_run_still_waits(engine):
    def route(s: S) -> str:
        return {"approve": "yes", "reject": "no"}[s.answer]

    engine.register(_review_flow(route))
    r = engine.run("rev", S())
    assert r.status == "waiting"
    before = engine.store.latest(r.run_id)
    with pytest.raises(RouteError, match="the route from step 'ask' failed: KeyError: 'maybe'"):
        engine.resume_with(r.run_id, "maybe")
    after = engine.store.latest(r.run_id)
    assert after.revision == before.revision  # nothing was saved
    assert engine.store.get_run(r.run_id).status == "waiting"
    (wait,) = engine.waits(r.run_id)
    assert wait.wait_id == f"{r.run_id}:ask:0"
    r = engine.resume_with(r.run_id, "reject")
    assert (r.status, r.state.pick, r.state.answer) == ("completed", "no", "reject")


def _signal_flow(route, into: str = "answer") -> object:
    return (
        FlowBuilder("sig", S)
        .wait_signal("paid", "payment", "o-1", into=into)
        .step("yes", lambda s: {"pick": "yes"})
        .step("no", lambda s: {"pick": "no"})
        .route("paid", route, ["yes", "no"])
        .finish("yes", "no")
        .compile()
    )


def test_a_signal_whose_route_fails_fails_the_step_and_stays_unconsumed(engine):
    fixed = {"yes": False}

    def route(s: S) -> str:
        if not fixed["yes"]:
            raise KeyError(s.answer)
        return "yes"

    engine.register(_signal_flow(route))
    r = engine.run("sig", S())
    assert r.status == "waiting"
    engine.signal("payment", "o-1", "ok")
    run = engine.store.get_run(r.run_id)
    assert run.status == "failed"
    assert "step 'paid' failed after 1 attempt: RouteError" in (run.error or "")
    assert engine.waits(r.run_id) == []
    pending = engine.store.next_signal("payment", "o-1")
    assert pending is not None and pending.payload == "ok"  # nothing sent was lost
    fixed["yes"] = True
    r = engine.resume(r.run_id)  # a new wait, which receives the same signal
    assert (r.status, r.state.answer, r.state.pick) == ("completed", "ok", "yes"), r.error
    assert engine.store.next_signal("payment", "o-1") is None


def test_a_signal_payload_that_does_not_fit_is_refused_before_it_is_stored(engine):
    engine.register(_signal_flow(lambda s: "yes", into="count"))
    r = engine.run("sig", S())
    with pytest.raises(SignalPayloadError) as refused:
        engine.signal("payment", "o-1", {"not": "a number"})
    assert str(refused.value) == (
        f"signal 'payment' with key 'o-1' was not sent: run {r.run_id} waits for it at step "
        '\'paid\', which takes a payload of type int; {"not":"a number"} does not fit: '
        "Input should be a valid integer. Nothing was stored; send a payload of type int"
    )
    assert (refused.value.run_id, refused.value.step_id, refused.value.expected) == (
        r.run_id,
        "paid",
        "int",
    )
    assert engine.store.next_signal("payment", "o-1") is None  # nothing stored
    assert engine.store.get_run(r.run_id).status == "waiting"
    engine.signal("payment", "o-1", 7)
    assert engine.store.get_run(r.run_id).status == "completed"


def test_a_stored_signal_payload_that_does_not_fit_is_refused_and_the_wait_goes_on(engine):
    """Stored by another writer (or before the run waited): the wait refuses
    it with the reason recorded, takes the next signal that fits, and the
    route after the step runs on that one."""
    engine.register(_signal_flow(lambda s: "yes", into="count"))
    r = engine.run("sig", S())
    bad = engine.store.send_signal("payment", "o-1", {"not": "a number"}, engine.clock.now())
    good = engine.store.send_signal("payment", "o-1", 5, engine.clock.now())
    assert engine.wake(r.run_id).status == "completed"
    cp = engine.store.latest(r.run_id)
    assert cp.state["count"] == 5
    wait_id = f"{r.run_id}:paid:0"
    assert cp.meta["refused_signals"] == [
        {
            "signal": bad,
            "wait": wait_id,
            "reason": 'field \'count\' (int): {"not":"a number"} does not fit: '
            "Input should be a valid integer",
        }
    ]
    assert engine.store.signal_consumer(bad) == wait_id
    assert engine.store.signal_consumer(good) == wait_id


def test_an_event_whose_route_fails_is_received_again_after_the_resume(engine):
    """An event is a broadcast and is never consumed: the step fails, and the
    wait the resumed run begins looks from the failed wait's start, so it
    receives that same event instead of waiting for a later one."""
    fixed = {"yes": False}

    def route(s: S) -> str:
        if not fixed["yes"]:
            raise KeyError(s.answer)
        return "yes"

    flow = (
        FlowBuilder("ev", S)
        .wait_event("shipped", "parcel.shipped", into="answer")
        .step("yes", lambda s: {"pick": "yes"})
        .step("no", lambda s: {"pick": "no"})
        .route("shipped", route, ["yes", "no"])
        .finish("yes", "no")
        .compile()
    )
    engine.register(flow)
    r = engine.run("ev", S())
    (first,) = engine.waits(r.run_id)
    engine.clock.advance(5.0)
    engine.publish("parcel.shipped", "box-1")
    failed = engine.store.latest(r.run_id)
    assert failed.status == "failed"
    rec = failed.steps["shipped"]
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", "RouteError", 1)
    assert rec.started_at == first.created_at
    assert failed.meta["event_since"] == {"shipped": first.created_at}
    assert first.wait_id in failed.meta["resolved"]
    assert engine.waits(r.run_id) == []
    engine.clock.advance(5.0)
    fixed["yes"] = True
    r = engine.resume(r.run_id)
    assert (r.status, r.state.answer, r.state.pick) == ("completed", "box-1", "yes"), r.error
    assert "event_since" not in engine.store.latest(r.run_id).meta


def test_a_timer_whose_route_fails_fails_its_step_and_releases_the_run(engine):
    flow = (
        FlowBuilder("t", S)
        .sleep("nap", 10.0)
        .step("yes", lambda s: {"pick": "yes"})
        .route("nap", _broken, ["yes"])
        .finish("yes")
        .compile()
    )
    engine.register(flow)
    r = engine.run("t", S())
    (wait,) = engine.waits(r.run_id)
    engine.clock.advance(10.0)
    r = engine.wake(r.run_id)
    assert r.status == "failed"
    assert "step 'nap' failed after 1 attempt: RouteError" in r.error
    run = engine.store.get_run(r.run_id)
    assert (run.status, run.lease_owner) == ("failed", None)
    cp = engine.store.latest(r.run_id)
    assert cp.steps["nap"].started_at == wait.created_at
    assert "event_since" not in cp.meta
    assert engine.waits(r.run_id) == []
