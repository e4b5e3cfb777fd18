"""A wait step's own code fails like any step: its signal key function and
its ``on_enter`` effect run as an attempt of the step, under the flow's
retry policy, and an error that is not retried fails the run with the step
and the error named. Before, the exception escaped ``Engine.run`` /
``resume`` as it was and left the run ``running`` under its lease."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    order: str = ""
    got: str = ""


@pytest.fixture
def engine(db_path):
    store = open_store(db_path)
    yield Engine(store, clock=ManualClock())
    store.close()


def _bad_key(s: S) -> str:
    raise ValueError(f"no order id in {s.order!r}")


def test_a_signal_key_that_raises_fails_the_run_naming_the_step(engine):
    flow = (
        FlowBuilder("w", S)
        .step("prep", lambda s: {"order": ""})
        .wait_signal("paid", "payment", _bad_key, into="got")
        .chain()
        .compile()
    )
    engine.register(flow)
    r = engine.run("w", S())
    assert r.status == "failed"
    assert "paid" in r.error and "ValueError: no order id in ''" in r.error
    assert engine.waits(r.run_id) == []
    rec = engine.store.latest(r.run_id).steps["paid"]
    assert (rec.status, rec.error_type) == ("failed", "ValueError")
    assert engine.store.get_run(r.run_id).status == "failed"


def test_a_failing_on_enter_is_retried_and_its_effect_commits_once(engine):
    calls: list[int] = []

    def notify(s: S, ctx) -> dict:
        calls.append(ctx.attempt)
        ctx.send("mail", {"attempt": ctx.attempt})
        if len(calls) == 1:
            raise ConnectionError("mail server down")
        return {}

    flow = (
        FlowBuilder("w", S, retry=1)
        .wait_signal("paid", "payment", "o-1", into="got", on_enter=notify)
        .compile()
    )
    engine.register(flow)
    r = engine.run("w", S())
    assert r.status == "waiting", r.error
    assert calls == [1, 2]
    (wait,) = engine.waits(r.run_id)
    assert (wait.wait_id, wait.name, wait.key) == (f"{r.run_id}:paid:0", "payment", "o-1")
    queued = [(i.intent_id, i.payload) for i in engine.store.intents(["pending"])]
    assert queued == [(f"{r.run_id}:paid:0:0", {"attempt": 2})]
    engine.signal("payment", "o-1", "ok")
    r = engine.wake(r.run_id)
    assert (r.status, r.state.got) == ("completed", "ok")
    assert calls == [1, 2]  # the one-shot effect never runs again
