"""Event waits that fail and are begun again (flow/waiting.py): each failed
event wait keeps its own start, so the wait begun after it receives the
event it could not take, even while another step's failed wait is kept too.

A real engine over a real SQLite file (``db_path``), a manual clock."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import Policy, WaitStep
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    a: str | None = None
    b: str | None = None
    error: str | None = None
    done: bool = False


def test_two_failed_event_waits_each_receive_their_event_again(db_path):
    """A's route fails on its event and routes the error to B; B's route
    fails on its own and routes back to A. Both failed waits are kept (each
    from its own start): A's new wait receives A's event again, then, a
    second later, B's new wait receives B's event (published before it
    began) again, and the run completes without a new event published."""
    routes = {"a": 0, "b": 0}
    clock = ManualClock()

    def route_a(s: S) -> str:
        routes["a"] += 1
        if routes["a"] == 1:
            raise KeyError("a: not yet")
        return "tick"

    def route_b(s: S) -> str:
        routes["b"] += 1
        if routes["b"] == 1:
            raise KeyError("b: not yet")
        return "end"

    flow = (
        FlowBuilder("two", S)
        .add(
            WaitStep(
                "a", "event", "ev.a", into="a", policy=Policy(on_error="route", error_route="b")
            )
        )
        .add(
            WaitStep(
                "b", "event", "ev.b", into="b", policy=Policy(on_error="route", error_route="a")
            )
        )
        .step("tick", lambda s: clock.advance(1.0))  # a step that takes a second
        .step("end", lambda s: {"done": True})
        .entry("a")
        .route("a", route_a, ["b", "tick"])
        .edge("tick", "b")
        .route("b", route_b, ["end"])
        .finish("end")
        .compile()
    )
    store = open_store(db_path)
    engine = Engine(store, flows=[flow], clock=clock)
    rid = engine.run("two", S()).run_id
    (wait_a,) = engine.waits(rid)
    engine.clock.advance(5.0)
    engine.publish("ev.a", "a1")  # A's route fails: on to B, A's wait start kept
    (wait_b,) = engine.waits(rid)
    assert wait_b.step_id == "b"
    assert engine.store.latest(rid).meta["event_since"] == {"a": wait_a.created_at}
    engine.clock.advance(5.0)
    engine.publish("ev.b", "b1")  # B's route fails: back to A, which gets a1 again
    out = engine.store.latest(rid)
    assert (out.status, out.state["a"], out.state["b"], out.state["done"]) == (
        "completed",
        "a1",
        "b1",
        True,
    ), (out.status, out.meta, out.waits)
    assert routes == {"a": 2, "b": 2}
    assert not any("since" in k.lower() for k in out.meta), out.meta
    store.close()


class Box(BaseModel):
    payload: object = None
    picked: bool = False


def test_a_signal_another_writer_stored_too_deep_is_refused_naming_the_field(db_path):
    """A signal stored by another writer (not through ``Engine.signal``,
    which refuses it) that validates but no checkpoint can hold: the wait
    refuses it naming its field and goes on waiting; the signal is marked
    taken by the wait, so no wait meets it again."""
    flow = (
        FlowBuilder("deep", Box)
        .wait_signal("got", "parcel", "p-1", into="payload")
        .step("use", lambda s: {"picked": True})
        .chain()
        .compile()
    )
    store = open_store(db_path)
    engine = Engine(store, flows=[flow], clock=ManualClock())
    rid = engine.run("deep", Box()).run_id
    deep: object = "x"
    for _ in range(400):
        deep = [deep]
    bad = store.send_signal("parcel", "p-1", deep, engine.clock.now())
    out = engine.wake(rid)
    assert (out.status, out.error) == ("waiting", None)
    cp = engine.store.latest(rid)
    assert cp.steps["got"].status == "waiting"
    assert cp.meta["refused_signals"] == [
        {
            "signal": bad,
            "wait": f"{rid}:got:0",
            "reason": "field 'payload' (object): it cannot be stored: "
            "Maximum serialization depth exceeded",
        }
    ]
    assert store.next_signal("parcel", "p-1") is None
    assert store.signal_consumer(bad) == f"{rid}:got:0"
    store.close()


# -- a signal sent after the deadline (waiting._too_late) ----------------------


class P(BaseModel):
    got: dict | None = None


def _paid_flow():
    return (
        FlowBuilder("pay", P)
        .wait_signal("paid", "payment", key="k", into="got", timeout_s=60)
        .step("ship", lambda s: {})
        .chain()
        .compile()
    )


def _sent_at(db_path, sent_offset: float, judged_offset: float) -> str:
    """A run whose 60 s signal wait began at t; a signal stored by another
    process at ``t + 60 + sent_offset`` (by its clock); the run woken at
    ``t + 60 + judged_offset``: its status."""
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[_paid_flow()], clock=clock)
    run_id = engine.run("pay", P()).run_id
    deadline = engine.store.latest(run_id).waits[0].deadline_at
    engine.store.send_signal("payment", "k", {"n": 1}, deadline + sent_offset)
    clock.set(deadline + judged_offset)
    engine.tick()
    status = engine.status(run_id).status
    engine.store.close()
    return status


def test_a_signal_sent_at_the_deadline_itself_is_in_time(db_path):
    assert _sent_at(db_path, sent_offset=0.0, judged_offset=5.0) == "completed"


def test_at_the_deadline_a_signal_stamped_after_it_is_late(db_path):
    """Judged at the deadline's very instant (it has passed: the wait times
    out then), a signal whose sender's clock stamped it a second later is
    late."""
    assert _sent_at(db_path, sent_offset=1.0, judged_offset=0.0) == "timed_out"


def test_before_the_deadline_a_signal_stamped_after_it_still_counts(db_path):
    """A sender's clock ahead of this process's loses nothing while the
    deadline has not passed here."""
    assert _sent_at(db_path, sent_offset=1.0, judged_offset=-1.0) == "completed"
