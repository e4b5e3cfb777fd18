"""What a step's context holds and does: the run's six ids, the step's own
ids (attempt, iteration, idempotency key), staged writes and outbox intents
(dropped and refused once the attempt timed out), interrupt wait ids and
answers, child run ids through the journal, progress and queries."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from desktop_app.errors import StepTimeoutError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.context import (
    ExecutionContext,
    Interrupt,
    InterruptRequest,
    StepContext,
    asked_digest,
)
from desktop_app.store.protocol import Intent

IDS = dict(
    tenant_id="t1",
    user_id="u1",
    session_id="s1",
    run_id="r1",
    trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    correlation_id="c1",
)


def make(**kw) -> StepContext:
    args = dict(run_id="r1", step_id="st", attempt=2, context=ExecutionContext(**IDS))
    args.update(kw)
    return StepContext(**args)


def test_execution_context_is_six_optional_ids_frozen_and_closed():
    empty = ExecutionContext()
    assert empty.model_dump() == {k: None for k in IDS}
    ctx = ExecutionContext(**IDS)
    assert ctx.model_dump() == IDS
    with pytest.raises(ValidationError):
        ExecutionContext(tenant="x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ctx.run_id = "other"  # type: ignore[misc]


def test_a_step_context_holds_the_ids_it_was_given():
    ctx = make(iteration=3)
    assert (ctx.run_id, ctx.step_id, ctx.attempt, ctx.iteration) == ("r1", "st", 2, 3)
    assert ctx.context == ExecutionContext(**IDS)
    assert make().iteration == 0
    assert ctx.idempotency_key == "r1:st:3"
    assert make().idempotency_key == "r1:st:0"
    assert ctx.cancelled is False


def test_writes_are_staged_in_order_and_taken_once():
    ctx = make()

    def w1(tx):
        return None

    def w2(tx):
        return None

    ctx.write(w1)
    ctx.write(w2)
    assert ctx.take_writes() == [w1, w2]
    assert ctx.take_writes() == []


def test_send_queues_intents_with_stable_keys():
    ctx = make(iteration=4)
    assert ctx.send("mail", {"to": "a"}) == "r1:st:4:0"
    assert ctx.send("mail", {"to": "b"}, key="mine") == "mine"
    assert ctx.send("hook", [1]) == "r1:st:4:2"
    assert ctx.take_intents() == [
        Intent("r1:st:4:0", "r1", "st", "mail", {"to": "a"}),
        Intent("mine", "r1", "st", "mail", {"to": "b"}),
        Intent("r1:st:4:2", "r1", "st", "hook", [1]),
    ]
    assert ctx.take_intents() == []
    # numbering continues from the intents staged since the last take
    assert ctx.send("mail", None) == "r1:st:4:0"


def test_an_abandoned_attempt_drops_and_refuses_its_effects():
    ctx = make()
    ctx.write(lambda tx: None)
    ctx.send("mail", 1)
    ctx.abandon(2.5)
    assert ctx.cancelled is True
    assert ctx.take_writes() == []
    assert ctx.take_intents() == []
    for act in (
        lambda: ctx.write(lambda tx: None),
        lambda: ctx.send("mail", 1),
        lambda: ctx.child_run_id(),
    ):
        with pytest.raises(StepTimeoutError) as err:
            act()
        assert (err.value.step_id, err.value.timeout_s) == ("st", 2.5)
        assert str(err.value) == "step 'st' timed out after 2.5 s"
    assert ctx.take_writes() == [] and ctx.take_intents() == []


def test_progress_is_saved_as_integers_and_taken_once():
    ctx = make()
    assert ctx.take_progress() is None
    ctx.progress(1.9, 3.2)  # type: ignore[arg-type]
    ctx.progress(2, 5)
    assert ctx.take_progress() == (2, 5)
    assert ctx.take_progress() is None
    ctx.progress(True, 7.0)  # type: ignore[arg-type]
    got = ctx.take_progress()
    assert got == (1, 7) and all(type(v) is int for v in got)


def test_query_runs_the_op_through_the_store_or_says_there_is_none():
    seen = []

    def runner(op):
        seen.append(op)
        return op("db")

    ctx = make(query=runner)
    assert ctx.query(lambda db: f"rows from {db}") == "rows from db"
    assert len(seen) == 1
    with pytest.raises(RuntimeError) as err:
        make().query(lambda db: None)
    assert str(err.value) == "this step context has no store to query"


def test_interrupt_wait_ids_count_the_calls_and_answers_return():
    ctx = make(answers={"r1:st:0": "yes"}, answered={"r1:st:0": asked_digest("first?")})
    assert ctx.interrupt("first?") == "yes"
    with pytest.raises(Interrupt) as err:
        ctx.interrupt("second?", continuation={"at": 2}, timeout_s=9.0)
    (req,) = err.value.requests
    assert isinstance(req, InterruptRequest)
    assert (req.wait_id, req.step_id, req.prompt) == ("r1:st:1", "st", "second?")
    assert (req.continuation, req.timeout_s) == ({"at": 2}, 9.0)
    assert str(err.value) == "interrupted: ['r1:st:1']"
    assert not isinstance(err.value, Exception)  # a step's `except Exception` cannot eat it
    with pytest.raises(Interrupt) as err2:
        make().interrupt()
    (bare,) = err2.value.requests
    assert (bare.wait_id, bare.prompt, bare.continuation, bare.timeout_s) == (
        "r1:st:0",
        None,
        None,
        None,
    )


def test_continuation_is_this_steps_saved_value():
    assert make().continuation is None
    assert make(continuations={"st": {"k": 1}, "other": 2}).continuation == {"k": 1}
    assert make(step_id="other", continuations={"st": {"k": 1}, "other": 2}).continuation == 2


def test_child_run_ids_without_a_journal():
    ctx = make()
    assert [ctx.child_run_id(), ctx.child_run_id("agent"), ctx.child_run_id()] == [
        "r1:st",
        "r1:st:1",
        "r1:st:2",
    ]
    looped = make(iteration=3)
    assert [looped.child_run_id(), looped.child_run_id()] == ["r1:st#3", "r1:st#3:1"]


def test_child_run_ids_come_from_the_journal():
    calls = []

    def journal(key, seq, kind, proposed):
        calls.append((key, seq, kind, proposed))
        return f"recorded-{seq}"

    ctx = make(iteration=2, journal=journal)
    assert ctx.child_run_id() == "recorded-0"
    assert ctx.child_run_id("agent") == "recorded-1"
    assert calls == [
        ("st#2", 0, "flow", "r1:st#2"),
        ("st#2", 1, "agent", "r1:st#2:1"),
    ]


class N(BaseModel):
    n: int = 0


def test_a_step_sees_its_run_and_step_ids_through_the_engine(sqlite_store):
    seen: list[tuple] = []

    def look(state: N, ctx: StepContext) -> dict:
        seen.append((ctx.run_id, ctx.step_id, ctx.attempt, ctx.iteration, ctx.context))
        return {"n": state.n + 1}

    flow = FlowBuilder("ids", N).step("a", look).step("b", look).chain().compile()
    engine = Engine(sqlite_store, flows=[flow])
    given = ExecutionContext(tenant_id="t", user_id="u", trace_id=IDS["trace_id"])
    res = engine.run("ids", N(), context=given)
    assert res.status == "completed"
    expected = given.model_copy(update={"run_id": res.run_id})
    assert seen == [
        (res.run_id, "a", 1, 0, expected),
        (res.run_id, "b", 1, 0, expected),
    ]


def test_the_third_question_of_a_step_gets_the_third_wait_id():
    bound = {"r1:st:0": asked_digest(None), "r1:st:1": asked_digest(None)}
    ctx = make(answers={"r1:st:0": "a", "r1:st:1": "b"}, answered=bound)
    assert [ctx.interrupt(), ctx.interrupt()] == ["a", "b"]
    with pytest.raises(Interrupt) as err:
        ctx.interrupt("third?")
    assert [r.wait_id for r in err.value.requests] == ["r1:st:2"]
