"""A wait whose delivery cannot complete its step (kill tests for mutants of
``fail_resolution`` and ``run_wait`` in ``flow/waiting.py``).

A signal whose route fails fails the step under its ``on_error`` policy: an
error route continues the run, the failed wait counts as answered, and the
failure is one attempt of its own. Every test runs on a real SQLite file and
the injected clock.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import Policy, WaitStep
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    got: str = ""
    pick: str = ""
    error: str = ""


@pytest.fixture
def engine(db_path):
    store = open_store(db_path)
    yield Engine(store, clock=ManualClock())
    store.close()


def _broken(s: S) -> str:
    raise KeyError(f"no route for {s.got!r}")


def test_a_signal_whose_route_fails_takes_the_wait_steps_error_route(engine):
    """on_error="route" on a signal wait: the failed delivery routes to the
    handler, which runs and completes the run; the wait is remembered as
    resolved and the signal stays in the mailbox."""
    flow = (
        FlowBuilder("sig", S)
        .add(
            WaitStep(
                "paid",
                "signal",
                "payment",
                "o-1",
                into="got",
                policy=Policy(on_error="route", error_route="handle"),
            )
        )
        .step("yes", lambda s: {"pick": "yes"})
        .step("handle", lambda s: {"pick": "handled"})
        .route("paid", _broken, ["yes"])
        .finish("yes", "handle")
        .compile()
    )
    engine.register(flow)
    r = engine.run("sig", S())
    assert r.status == "waiting"
    (wait,) = engine.waits(r.run_id)
    engine.signal("payment", "o-1", "ok")
    run = engine.status(r.run_id)
    assert (run.status, run.lease_owner) == ("completed", None), run.error
    done = engine.get(r.run_id)
    assert done.pick == "handled" and done.got == ""  # the payload did not land
    assert done.error.startswith("RouteError: flow 'sig': the route from step 'paid' failed")
    cp = engine.store.latest(r.run_id)
    assert cp.steps["paid"].error_type == "RouteError"
    assert cp.steps["handle"].status == "completed"
    assert wait.wait_id in cp.meta["resolved"]
    pending = engine.store.next_signal("payment", "o-1")
    assert pending is not None and pending.payload == "ok"


def test_a_failed_delivery_is_one_attempt_whatever_the_wait_began_with(engine):
    """The wait's on_enter needed two attempts; the delivery that fails its
    route later is recorded as a failure after 1 attempt of its own, started
    when the wait began."""
    tries: list[int] = []

    def notify(s: S, ctx) -> dict:
        tries.append(ctx.attempt)
        if len(tries) == 1:
            raise ConnectionError("mail server down")
        return {}

    flow = (
        FlowBuilder("sig", S, retry=1)
        .wait_signal("paid", "payment", "o-1", into="got", on_enter=notify)
        .step("yes", lambda s: {"pick": "yes"})
        .route("paid", _broken, ["yes"])
        .finish("yes")
        .compile()
    )
    engine.register(flow)
    r = engine.run("sig", S())
    assert r.status == "waiting" and tries == [1, 2]
    (wait,) = engine.waits(r.run_id)
    assert engine.store.latest(r.run_id).steps["paid"].attempts == 2
    engine.signal("payment", "o-1", "ok")
    run = engine.status(r.run_id)
    assert run.status == "failed"
    assert "step 'paid' failed after 1 attempt: RouteError" in (run.error or "")
    rec = engine.store.latest(r.run_id).steps["paid"]
    assert (rec.status, rec.attempts, rec.error_type) == ("failed", 1, "RouteError")
    assert rec.started_at == wait.created_at
    assert tries == [1, 2]  # on_enter never runs again


def test_a_signal_key_function_returning_none_fails_the_step_instead_of_waiting(engine):
    """A key function that returns ``None`` (no key) fails the wait step with
    WaitKeyError, not retried, instead of saving the run waiting on a key no
    signal can carry (before, an assertion escaped ``Engine.run``)."""
    calls: list[int] = []

    def no_key(s: S) -> None:
        calls.append(1)
        return None

    flow = (
        FlowBuilder("sig", S, retry=2)
        .wait_signal("paid", "payment", no_key, into="got")
        .chain()
        .compile()
    )
    engine.register(flow)
    r = engine.run("sig", S())
    assert r.status == "failed"
    assert "WaitKeyError" in r.error and "the signal key of wait step 'paid' is None" in r.error
    assert calls == [1]
    (run,) = engine.store.list_runs()
    assert (run.status, run.lease_owner) == ("failed", None)
    assert engine.waits(run.run_id) == []
