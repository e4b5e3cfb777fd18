"""Durable agent runs (S34-S40)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.agent.runtime import agent_step
from desktop_app.errors import InputRequiredError, RateLimitedError, RunStateError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


class Crash(BaseException):
    """The process dies (not an Exception: nothing may catch it)."""


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def counting_tools(calls: Counter, crash_on: set[str] | None = None):
    crash_on = crash_on if crash_on is not None else set()

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        calls[q] += 1
        if q in crash_on:
            crash_on.discard(q)
            raise Crash(q)
        return f"result for {q}"

    return [lookup]


@pytest.mark.scenario("S34")
def test_resuming_a_completed_run_returns_the_saved_answer_without_the_model(astore):
    first = Agent("helper", ScriptedModel(["The answer is 42."]), astore)
    res = first.ask("What is the answer?")
    assert res.status == "done" and res.text == "The answer is 42."
    model = ScriptedModel([])
    again = Agent("helper", model, astore).resume(res.run_id)
    assert again == res
    assert model.calls == 0


@pytest.mark.scenario("S35")
def test_unfinished_run_reenters_with_saved_history_tools_not_rerun(db_path):
    calls: Counter[str] = Counter()
    script = [
        {"tool": "lookup", "args": {"q": "a"}},
        {"tool": "lookup", "args": {"q": "b"}},
        "done: a and b",
    ]
    store = open_store(db_path)
    agent = Agent(
        "helper",
        ScriptedModel(script),
        SqliteAgentStore(store),
        counting_tools(calls, crash_on={"b"}),
    )
    with pytest.raises(Crash):
        agent.ask("find a then b")
    store.close()
    # a restart: a freshly built agent over the same file
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    (run,) = astore.list()
    model = ScriptedModel(["done: a and b"])
    fresh = Agent("helper", model, astore, counting_tools(calls))
    res = fresh.resume(run.run_id)
    assert res.status == "done" and res.text == "done: a and b"
    assert calls == {"a": 1, "b": 2}  # a completed before the crash: not invoked again
    seen = model.seen[0]
    assert seen[0].content == "find a then b"  # the saved input
    assert [m.content for m in seen if m.role == "tool"] == ["result for a", "result for b"]
    store.close()


@pytest.mark.scenario("S36")
def test_identical_tool_calls_share_one_result_within_a_run_only(astore):
    calls: Counter[str] = Counter()
    script = [
        [
            {"tool": "lookup", "args": {"q": "x"}, "id": "c1"},
            {"tool": "lookup", "args": {"q": "x"}, "id": "c2"},
        ],
        {"tool": "lookup", "args": {"q": "x"}},
        "ok",
    ]
    agent = Agent("helper", ScriptedModel(script * 2), astore, counting_tools(calls))
    first = agent.ask("go")
    assert first.status == "done" and calls == {"x": 1}
    results = {r.tool_key: r for r in astore.tool_results(first.run_id)}
    # one journal row for the call, reused twice, and the run's tool names
    assert sorted(results) == ["agent/toolset", 'lookup:{"q":"x"}']
    assert results['lookup:{"q":"x"}'].reused == 2
    assert json.loads(results["agent/toolset"].result or "") == ["lookup"]
    tool_msgs = [m for m in astore.messages(first.run_id) if m["role"] == "tool"]
    assert [m.get("reused", False) for m in tool_msgs] == [False, True, True]
    agent.model = ScriptedModel(script)
    second = agent.ask("go again")
    assert second.status == "done" and calls == {"x": 2}  # another run does not reuse


@pytest.mark.scenario("S37")
def test_ask_user_pauses_input_required_and_resume_input_continues(astore):
    model = ScriptedModel(
        [{"tool": "ask_user", "args": {"question": "Which city?"}}, "Booked Paris."]
    )
    agent = Agent("travel", model, astore)
    res = agent.ask("book me a trip")
    assert res.status == "input_required" and res.question == "Which city?"
    with pytest.raises(InputRequiredError, match="resume_input"):
        agent.resume(res.run_id)
    done = agent.resume_input(res.run_id, "Paris")
    assert done.run_id == res.run_id and done.status == "done" and done.text == "Booked Paris."
    assert model.seen[1][-1].content == "Human input: Paris"
    with pytest.raises(RunStateError):
        agent.resume_input(res.run_id, "again")


@pytest.mark.scenario("S38")
def test_streaming_resume_does_not_replay_a_completed_tool(db_path):
    calls: Counter[str] = Counter()
    script = [
        {"tool": "lookup", "args": {"q": "a"}},
        {"tool": "lookup", "args": {"q": "b"}},
        "all done now",
    ]
    store = open_store(db_path)
    agent = Agent(
        "s", ScriptedModel(script), SqliteAgentStore(store), counting_tools(calls, crash_on={"b"})
    )
    events = []
    with pytest.raises(Crash):
        for ev in agent.stream("stream it"):
            events.append((ev.kind, ev.tool))
    assert ("tool_end", "lookup") in events
    store.close()
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    (run,) = astore.list()
    fresh = Agent("s", ScriptedModel(["all done now"]), astore, counting_tools(calls))
    resumed = list(fresh.resume_stream(run.run_id))
    assert "".join(e.text for e in resumed if e.kind == "delta") == "all done now"
    assert [e.tool for e in resumed if e.kind == "tool_start"] == ["lookup"]  # only b
    assert calls == {"a": 1, "b": 2}
    assert resumed[-1].response is not None and resumed[-1].response.status == "done"
    store.close()


@pytest.mark.scenario("S39")
def test_pending_excludes_terminal_statuses_and_lists_paused(astore):
    clock = ManualClock()

    def make(script, **kw):
        return Agent("p", ScriptedModel(script), astore, clock=clock, **kw)

    done = make(["ok"]).ask("a").run_id
    canceled = make([{"tool": "ask_user", "args": {"question": "?"}}]).ask("b").run_id
    make([]).cancel(canceled)
    waiting = make([{"tool": "ask_user", "args": {"question": "?"}}]).ask("c").run_id
    paused = make([{"tool": "ask_user", "args": {"question": "?"}}]).ask("d").run_id
    make([]).pause(paused)
    limited = make([RateLimitedError("slow down", retry_after_s=30)]).ask("e")
    assert limited.status == "rate_limited" and limited.retry_at == clock.now() + 30
    slow = make([{"tool": "ask_user", "args": {"question": "?"}}], timeout_s=10)
    timed = slow.ask("f").run_id
    short = make([{"tool": "ask_user", "args": {"question": "?"}}], ttl_s=5)
    expiring = short.ask("g").run_id
    clock.advance(11)
    astore.update(timed, clock.now(), status="running", pending_call=None)
    astore.update(expiring, clock.now(), status="running", pending_call=None)
    assert make(["x"], timeout_s=10).resume(timed).status == "timeout"
    assert make(["x"], ttl_s=5).resume(expiring).status == "expired"
    pending = {r.run_id for r in make([]).pending()}
    assert pending == {waiting, paused}
    statuses = {r.run_id: r.status for r in astore.list()}
    assert statuses[done] == "done" and statuses[canceled] == "canceled"
    assert statuses[limited.run_id] == "rate_limited"
    with pytest.raises(RunStateError, match="rate limited until"):
        make(["later"]).resume(limited.run_id)
    clock.advance(30)
    (after,) = make(["later"]).resume_due()
    assert after.status == "done" and after.text == "later"


@pytest.mark.scenario("S40")
def test_flow_step_dispatches_agent_records_parent_and_reattaches(db_path):
    class Q(BaseModel):
        question: str
        answer: str | None = None
        n: int = 0

    model = ScriptedModel(["Paris is the capital."])
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    agent = Agent("geo", model, astore)
    ask = agent_step(agent, lambda s: s.question, into="answer")
    crash = {"on": True}

    def ask_then_maybe_die(s: Q, ctx) -> dict:
        out = ask(s, ctx)
        if crash["on"]:
            crash["on"] = False
            raise Crash()  # the child finished; the flow step's checkpoint never happened
        return out

    flow = (
        FlowBuilder("quiz", Q)
        .step("ask", ask_then_maybe_die)
        .step("count", lambda s: {"n": 1})
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    with pytest.raises(Crash):
        engine.run("quiz", Q(question="Capital of France?"))
    (run,) = store.list_runs()
    res = engine.resume(run.run_id)
    assert res.status == "completed" and res.state.answer == "Paris is the capital."
    children = astore.list()
    assert len(children) == 1 and children[0].parent_run_id == run.run_id
    assert model.calls == 1  # the re-executed step reattached to its child run
    store.close()
