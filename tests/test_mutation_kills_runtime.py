"""What the agent runtime's replay logic promises, checked where the suite
did not: reuse of a completed tool result, an at-most-once call whose result
was never saved, resume of each status, the recorded tool list, leases, the
deadline and time-to-live, and the run's stored context."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Collection
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.agent import Agent, ScriptedModel, Tool, tool
from desktop_app.agent.runtime import agent_step
from desktop_app.agent.tools import TOOLSET_KEY
from desktop_app.errors import (
    AgentError,
    AgentRunLeasedError,
    AgentToolsChangedError,
    InputRequiredError,
    LeaseLostError,
    ProviderError,
    ProviderUnavailableError,
    RateLimitedError,
    RunStateError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests import cli_forkserver

THIEF = "otherhost:1:thief"


class Crash(BaseException):
    """The process dies (not an Exception: nothing may catch it)."""


class StealingStore(SqliteAgentStore):
    """A store whose lease is taken over by another host right after the
    named method ran once (the other process's takeover, at that moment)."""

    def __init__(self, checkpoints: Any, steal_after: str) -> None:
        super().__init__(checkpoints)
        self.steal_after = steal_after
        self.stolen = False

    def _maybe_steal(self, name: str, run_id: str) -> None:
        if name == self.steal_after and not self.stolen:
            self.stolen = True
            SqliteAgentStore.claim(
                self, run_id, THIEF, 1e12, math.inf, takes_over=self.get(run_id).lease_owner
            )

    def claim(self, run_id: str, owner: str, expires_at: float, now: float, **kw: Any) -> None:
        super().claim(run_id, owner, expires_at, now, **kw)
        self._maybe_steal("claim", run_id)

    def mark_reused(self, run_id: str, key: str) -> None:
        super().mark_reused(run_id, key)
        self._maybe_steal("mark_reused", run_id)

    def tool_result(self, run_id: str, key: str) -> Any:
        out = super().tool_result(run_id, key)
        if key.startswith("lookup:"):
            self._maybe_steal("tool_result", run_id)
        return out


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def lookup_tool(calls: Counter[str], crash_on: set[str] | None = None, at_most_once=False):
    crash_on = set() if crash_on is None else crash_on

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        calls[q] += 1
        if q in crash_on:
            crash_on.discard(q)
            raise Crash(q)
        if q == "bad":
            raise ValueError("no such thing")
        return f"result for {q}"

    if at_most_once:
        lookup.at_most_once = True
    return lookup


@tool
def other(x: str) -> str:
    """Another tool."""
    return x


def tool_messages(model: ScriptedModel, call: int):
    return [m for m in model.seen[call] if m.role == "tool"]


# -- reuse of a completed tool result ---------------------------------------


def test_identical_call_reuses_the_stored_result_and_says_so(astore):
    calls: Counter[str] = Counter()
    model = ScriptedModel(
        [{"tool": "lookup", "args": {"q": "a"}}, {"tool": "lookup", "args": {"q": "a"}}, "ok"]
    )
    agent = Agent("helper", model, astore, [lookup_tool(calls)])
    events = list(agent.stream("go"))
    ends = [e for e in events if e.kind == "tool_end"]
    assert [e.reused for e in ends] == [False, True]
    assert calls["a"] == 1
    first, second = tool_messages(model, 2)
    assert first.content == second.content == "result for a"
    assert first.name == second.name == "lookup"
    assert events[-1].response.status == "done"


def test_reuse_after_a_lost_lease_writes_nothing(sqlite_store):
    calls: Counter[str] = Counter()
    store = StealingStore(sqlite_store, "mark_reused")
    model = ScriptedModel(
        [{"tool": "lookup", "args": {"q": "a"}}, {"tool": "lookup", "args": {"q": "a"}}, "ok"]
    )
    agent = Agent("helper", model, store, [lookup_tool(calls)])
    with pytest.raises(LeaseLostError):
        agent.ask("go")
    (run,) = store.list(agent="helper")
    assert sum(1 for m in store.messages(run.run_id) if m["role"] == "tool") == 1
    assert model.calls == 2


def test_lost_lease_before_the_tool_runs_means_the_tool_does_not_run(sqlite_store):
    calls: Counter[str] = Counter()
    store = StealingStore(sqlite_store, "tool_result")
    agent = Agent(
        "helper", ScriptedModel([{"tool": "lookup", "args": {"q": "a"}}, "ok"]), store,
        [lookup_tool(calls)],
    )  # fmt: skip
    with pytest.raises(LeaseLostError):
        agent.ask("go")
    assert calls["a"] == 0


def test_lost_lease_while_the_tool_runs_saves_no_result(sqlite_store):
    calls: Counter[str] = Counter()
    store = SqliteAgentStore(sqlite_store)

    @tool
    def lookup(q: str) -> str:
        """Look something up; another host takes the lease meanwhile."""
        calls[q] += 1
        (run,) = store.list(agent="helper")
        store.claim(run.run_id, THIEF, 1e12, math.inf, takes_over=store.get(run.run_id).lease_owner)
        return "x"

    agent = Agent(
        "helper", ScriptedModel([{"tool": "lookup", "args": {"q": "a"}}, "ok"]), store, [lookup]
    )
    with pytest.raises(LeaseLostError):
        agent.ask("go")
    (run,) = store.list(agent="helper")
    assert store.tool_result(run.run_id, 'lookup:{"q":"a"}') is None or (
        store.tool_result(run.run_id, 'lookup:{"q":"a"}').status == "in_progress"
    )
    assert not [m for m in store.messages(run.run_id) if m["role"] == "tool"]


def test_unknown_tool_and_tool_error_are_answers_the_model_reads(astore):
    calls: Counter[str] = Counter()
    model = ScriptedModel(
        [{"tool": "nosuch", "args": {}}, {"tool": "lookup", "args": {"q": "bad"}}, "ok"]
    )
    res = Agent("helper", model, astore, [lookup_tool(calls)]).ask("go")
    assert res.status == "done"
    unknown, failed = tool_messages(model, 2)
    assert json.loads(unknown.content) == {"error": "unknown tool 'nosuch'"}
    assert unknown.name == "nosuch"
    assert json.loads(failed.content) == {"error": "ValueError: no such thing"}
    assert failed.name == "lookup"


# -- at-most-once -------------------------------------------------------------


def test_at_most_once_call_started_before_a_crash_is_not_repeated(db_path, sqlite_store):
    calls: Counter[str] = Counter()
    script = [{"tool": "lookup", "args": {"q": "a"}}, "ok"]
    store = SqliteAgentStore(sqlite_store)
    first = Agent("helper", ScriptedModel(script), store, [lookup_tool(calls, {"a"}, True)])
    with pytest.raises(Crash):
        first.ask("go")
    (run,) = store.list(agent="helper")
    assert store.tool_result(run.run_id, 'lookup:{"q":"a"}').status == "in_progress"
    model = ScriptedModel(script[1:])
    again = Agent("helper", model, store, [lookup_tool(calls, None, True)])
    res = again.resume(run.run_id)
    assert res.status == "done" and calls["a"] == 1
    (msg,) = tool_messages(model, 0)
    assert json.loads(msg.content) == {
        "error": "the call to lookup was interrupted before its result was saved; it was not "
        "repeated, so whether it took effect is unknown",
        "outcome": "unknown",
    }


def test_ordinary_tool_started_before_a_crash_runs_again(sqlite_store):
    calls: Counter[str] = Counter()
    script = [{"tool": "lookup", "args": {"q": "a"}}, "ok"]
    store = SqliteAgentStore(sqlite_store)
    with pytest.raises(Crash):
        Agent("helper", ScriptedModel(script), store, [lookup_tool(calls, {"a"})]).ask("go")
    (run,) = store.list(agent="helper")
    model = ScriptedModel(script[1:])
    assert Agent("helper", model, store, [lookup_tool(calls)]).resume(run.run_id).status == "done"
    assert calls["a"] == 2
    assert tool_messages(model, 0)[0].content == "result for a"


# -- resume by status -----------------------------------------------------------


def test_done_run_resumes_to_its_answer_even_with_other_tools_or_a_foreign_lease(astore):
    calls: Counter[str] = Counter()
    res = Agent("helper", ScriptedModel(["42"]), astore, [lookup_tool(calls)]).ask("q")
    astore.claim(res.run_id, THIEF, 1e12, math.inf, takes_over=astore.get(res.run_id).lease_owner)
    model = ScriptedModel([])
    again = Agent("helper", model, astore, [other])
    assert again.resume(res.run_id) == res
    assert [e.kind for e in again.resume_stream(res.run_id)] == ["done"]
    assert model.calls == 0


def test_input_required_resume_names_the_question_and_what_to_do(astore):
    agent = Agent(
        "helper",
        ScriptedModel([{"tool": "ask_user", "args": {"question": "Which colour?"}}]),
        astore,
    )
    res = agent.ask("paint")
    assert res.status == "input_required" and res.question == "Which colour?"
    with pytest.raises(InputRequiredError) as err:
        agent.resume(res.run_id)
    assert str(err.value) == (
        f"agent run {res.run_id} waits for an answer to 'Which colour?'; use "
        "resume_input(run_id, text)"
    )


def test_resume_input_answers_clears_the_question_and_runs(astore):
    seen: list[tuple[str, Any]] = []

    @tool
    def look(x: str) -> str:
        """Look."""
        run = astore.get(rid)
        seen.append((run.status, run.pending_call))
        return "seen"

    model = ScriptedModel(
        [
            {"tool": "ask_user", "args": {"question": "Which?"}},
            {"tool": "look", "args": {"x": "1"}},
            "red",
        ]
    )
    agent = Agent("helper", model, astore, [look])
    rid = agent.ask("paint").run_id
    res = agent.resume_input(rid, "red")
    assert res.status == "done" and res.text == "red"
    assert seen == [("running", None)]
    answer = tool_messages(model, 1)[0]
    assert answer.content == "Human input: red" and answer.name == "ask_user"
    final = astore.get(rid)
    assert final.pending_call is None and final.status == "done"


def test_resume_input_refuses_a_run_that_does_not_wait(astore):
    res = Agent("helper", ScriptedModel(["hi"]), astore).ask("q")
    with pytest.raises(RunStateError, match=r"not waiting for input.*'done'"):
        Agent("helper", ScriptedModel([]), astore).resume_input(res.run_id, "x")


def test_resume_input_refuses_a_canceled_run_that_had_a_question(astore):
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}, "never"])
    agent = Agent("helper", model, astore)
    rid = agent.ask("q").run_id
    agent.cancel(rid)
    with pytest.raises(RunStateError, match="status 'canceled'"):
        agent.resume_input(rid, "a")
    assert model.calls == 1 and astore.get(rid).status == "canceled"


def test_resume_input_with_other_tools_is_refused(astore):
    calls: Counter[str] = Counter()
    agent = Agent(
        "helper", ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}]), astore,
        [lookup_tool(calls)],
    )  # fmt: skip
    rid = agent.ask("q").run_id
    model = ScriptedModel(["x"])
    with pytest.raises(AgentToolsChangedError):
        Agent("helper", model, astore, [other]).resume_input(rid, "a")
    assert model.calls == 0 and astore.get(rid).status == "input_required"


def test_rate_limited_run_resumes_at_its_retry_time_not_before(astore):
    clock = ManualClock()
    model = ScriptedModel([RateLimitedError("slow down", retry_after_s=30.0), "ok"])
    agent = Agent("helper", model, astore, clock=clock)
    res = agent.ask("q")
    assert res.status == "rate_limited" and res.retry_at == clock.now() + 30.0
    clock.advance(29.0)
    with pytest.raises(RunStateError) as err:
        agent.resume(res.run_id)
    assert str(err.value) == (
        f"agent run {res.run_id} is rate limited until 2026-01-01T00:00:30Z; resume it after that"
    )
    clock.advance(1.0)
    assert agent.resume(res.run_id).text == "ok"


@pytest.mark.parametrize("status", ["canceled", "timeout", "expired"])
def test_terminal_runs_are_not_resumed(astore, status):
    clock = ManualClock()
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}, "never"])
    agent = Agent("helper", model, astore, clock=clock, timeout_s=10.0, ttl_s=20.0)
    rid = agent.ask("q").run_id
    if status == "canceled":
        agent.cancel(rid)
    else:
        astore.update(rid, clock.now(), status=status, pending_call=None)
    with pytest.raises(RunStateError, match=f"is {status}; it cannot be resumed"):
        agent.resume(rid)
    assert model.calls == 1 and astore.get(rid).status == status


def test_failed_run_resumed_runs_as_running_and_ends_without_the_old_error(astore):
    statuses: list[str] = []

    @tool
    def look(x: str) -> str:
        """Look."""
        statuses.append(astore.get(rid).status)
        return "ok"

    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)])
    agent = Agent("helper", model, astore, [look])
    rid = agent.ask("q").run_id
    astore.update(rid, 0.0, status="failed", error="boom")
    model.turns += [{"tool": "look", "args": {"x": "1"}}, "fine"]
    res = agent.resume(rid)
    assert res.status == "done" and statuses == ["running"]
    assert astore.get(rid).error is None


def test_failed_run_with_other_tools_is_refused_with_both_lists(astore):
    calls: Counter[str] = Counter()
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)])
    rid = Agent("helper", model, astore, [lookup_tool(calls)]).ask("q").run_id
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", ScriptedModel(["x"]), astore, [other]).resume(rid)
    assert str(err.value) == (
        f"agent run {rid} was started with the tools lookup (recorded when it started) but is "
        "resumed with the tools other; nothing was changed and it can still be resumed with the "
        f"same tools (flowdesk ask --resume {rid} with the --tools/--folder and --mcp options it "
        "was started with)"
    )
    with pytest.raises(AgentToolsChangedError, match="resumed with none;"):
        Agent("helper", ScriptedModel(["x"]), astore).resume(rid)


# -- leases -----------------------------------------------------------------------


def test_resume_takes_over_a_dead_local_owner_and_an_expired_remote_one(astore):
    clock = ManualClock()
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0), "a", "b"])
    agent = Agent("helper", model, astore, clock=clock, lease_ttl_s=30.0)
    rid = agent.ask("q").run_id
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    astore.claim(rid, f"{socket.gethostname()}:{dead.pid}:x", clock.now() + 1000, 0.0)
    astore.update(rid, clock.now(), status="failed")
    assert agent.resume(rid).text == "a"
    astore.update(rid, clock.now(), status="failed", messages=[{"role": "user", "content": "more"}])
    astore.claim(rid, THIEF, clock.now() + 5, math.inf, takes_over=astore.get(rid).lease_owner)
    with pytest.raises(AgentRunLeasedError):
        agent.resume(rid)  # a live remote owner's lease, not expired
    clock.advance(5.0)
    assert agent.resume(rid).text == "b"


def test_the_lease_lasts_lease_ttl_from_start_and_from_resume(astore):
    clock = ManualClock()
    observed: list[Any] = []

    @tool
    def look(x: str) -> str:
        """Try to take the lease as another host."""
        run = astore.get(rid)
        observed.append(run.lease_expires_at - clock.now())
        with pytest.raises(AgentRunLeasedError):
            astore.claim(rid, THIEF, clock.now() + 100, clock.now() + 29.0)
        return "ok"

    model = ScriptedModel(
        [{"tool": "look", "args": {"x": "1"}}, RateLimitedError("429", retry_after_s=0.0),
         {"tool": "look", "args": {"x": "2"}}, "done"]
    )  # fmt: skip
    agent = Agent("helper", model, astore, [look], clock=clock, lease_ttl_s=30.0)
    rid = "run-lease"
    agent.ask("q", run_id=rid)
    assert agent.resume(rid).text == "done"
    assert observed == [30.0, 30.0]


def test_resume_that_loses_the_lease_at_once_calls_no_model(sqlite_store):
    store = StealingStore(sqlite_store, "none")
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0), "x"])
    rid = Agent("helper", model, store).ask("q").run_id
    store.steal_after = "claim"
    with pytest.raises(LeaseLostError):
        Agent("helper", model, store).resume(rid)
    assert model.calls == 1


def test_resume_input_that_loses_the_lease_at_once_calls_no_model(sqlite_store):
    store = StealingStore(sqlite_store, "none")
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}, "x"])
    rid = Agent("helper", model, store).ask("q").run_id
    store.steal_after = "claim"
    with pytest.raises(LeaseLostError):
        Agent("helper", model, store).resume_input(rid, "a")
    assert model.calls == 1 and store.get(rid).status == "input_required"


# -- deadline, time-to-live, context, system prompt -----------------------------------


@pytest.mark.parametrize("field", ["timeout_s", "ttl_s"])
def test_deadline_and_ttl_count_from_creation(astore, field):
    clock = ManualClock()

    @tool
    def wait(s: float) -> str:
        """Let time pass."""
        clock.advance(s)
        return "waited"

    model = ScriptedModel(
        [{"tool": "wait", "args": {"s": 9.0}}, "in time",
         {"tool": "wait", "args": {"s": 10.0}}, "late"]
    )  # fmt: skip
    agent = Agent("helper", model, astore, [wait], clock=clock, **{field: 10.0})
    assert agent.ask("one").text == "in time"
    late = agent.ask("two")  # reaches its limit exactly: 10 s after it started
    if field == "timeout_s":
        assert (late.status, late.error) == ("timeout", "the run's deadline passed")
    else:
        assert (late.status, late.error) == ("expired", "the run's time-to-live passed")


def test_run_context_keeps_its_run_id_and_trace_id(astore):
    model = ScriptedModel(["a", "b"])
    agent = Agent("helper", model, astore, system="Be brief.")
    given = ExecutionContext(trace_id="ab" * 16)
    r1 = agent.ask("q", context=given)
    r2 = agent.ask("q")
    c1, c2 = astore.get(r1.run_id).context, astore.get(r2.run_id).context
    assert c1["run_id"] == r1.run_id and c1["trace_id"] == "ab" * 16
    assert (
        c2["run_id"] == r2.run_id and len(c2["trace_id"]) == 32 and c2["trace_id"] != c1["trace_id"]
    )
    first = model.seen[0][0]
    assert (first.role, first.content) == ("system", "Be brief.")


# -- pending, due, cancel ---------------------------------------------------------


def test_resume_pending_skips_waiting_runs_and_stops_at_the_first_failure(astore):
    clock = ManualClock()

    def started(turns: list[Any]) -> str:
        clock.advance(1.0)
        rid = Agent("helper", ScriptedModel(turns), astore, clock=clock).ask("q").run_id
        if astore.get(rid).status == "rate_limited":
            astore.update(rid, clock.now(), status="failed", error="earlier")
        return rid

    paused = started([RateLimitedError("429", retry_after_s=0.0)])
    Agent("helper", ScriptedModel([]), astore, clock=clock).pause(paused)
    waiting = started([{"tool": "ask_user", "args": {"question": "?"}}])
    ok = started([RateLimitedError("429", retry_after_s=0.0)])
    bad = started([RateLimitedError("429", retry_after_s=0.0)])
    later = started([RateLimitedError("429", retry_after_s=0.0)])
    model = ScriptedModel(["fine", ProviderError("bad request", status=400)])
    agent = Agent("helper", model, astore, clock=clock)
    rid, err = agent.resume_pending()
    assert rid == bad and isinstance(err, AgentError) and str(err) == "bad request"
    assert [astore.get(r).status for r in (paused, waiting, ok, bad, later)] == [
        "paused", "input_required", "done", "failed", "failed"
    ]  # fmt: skip
    assert model.calls == 2


def test_resume_due_resumes_own_rate_limited_runs_whose_time_came(astore):
    clock = ManualClock()

    def limited(name: str, after: float) -> str:
        agent = Agent(
            name, ScriptedModel([RateLimitedError("429", retry_after_s=after)]), astore, clock=clock
        )
        return agent.ask("q").run_id

    due = limited("helper", 0.0)
    future = limited("helper", 60.0)
    foreign = limited("other", 0.0)
    failed = limited("helper", 0.0)
    astore.update(failed, clock.now(), status="failed")
    model = ScriptedModel(["resumed"])
    out = Agent("helper", model, astore, clock=clock).resume_due()
    assert [(r.run_id, r.text) for r in out] == [(due, "resumed")]
    assert [astore.get(r).status for r in (future, foreign, failed)] == [
        "rate_limited", "rate_limited", "failed"
    ]  # fmt: skip


def test_cancel_says_so_and_cannot_repeat_pause_keeps_no_error(astore):
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)] * 2)
    agent = Agent("helper", model, astore)
    a, b = agent.ask("q").run_id, agent.ask("q").run_id
    for rid in (a, b):
        astore.update(rid, 0.0, status="failed")
    agent.cancel(a)
    assert (astore.get(a).status, astore.get(a).error) == ("canceled", "canceled by user")
    with pytest.raises(RunStateError, match=f"agent run {a} is already canceled"):
        agent.cancel(a)
    agent.pause(b)
    assert (astore.get(b).status, astore.get(b).error) == ("paused", None)


def test_pending_lists_only_this_agents_unfinished_runs(astore):
    mine = Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0), "x"]), astore)
    theirs = Agent("other", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), astore)
    r1 = mine.ask("q").run_id
    r2 = theirs.ask("q").run_id
    for rid in (r1, r2):
        astore.update(rid, 0.0, status="failed")
    mine.ask("q")  # done
    assert [r.run_id for r in mine.pending()] == [r1]


# -- finishing under a lost lease, the heartbeat ----------------------------------


class CountingStealer(StealingStore):
    """Takes the lease over right after the n-th read of the messages."""

    def __init__(self, checkpoints: Any, nth: int) -> None:
        super().__init__(checkpoints, "none")
        self.nth = nth
        self.reads = 0

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        out = super().messages(run_id)
        self.reads += 1
        if self.reads == self.nth:
            SqliteAgentStore.claim(
                self, run_id, THIEF, 1e12, math.inf, takes_over=self.get(run_id).lease_owner
            )
        return out


def test_answer_is_not_saved_as_done_after_the_lease_was_lost(sqlite_store):
    store = CountingStealer(sqlite_store, nth=2)
    with pytest.raises(LeaseLostError):
        Agent("helper", ScriptedModel(["42"]), store).ask("q")
    (run,) = store.list(agent="helper")
    assert run.status == "running" and run.response is None


class HeartbeatStore(SqliteAgentStore):
    """Signals each lease renewal made off the calling thread (the heartbeat)."""

    def __init__(self, checkpoints: Any) -> None:
        super().__init__(checkpoints)
        self.renewed = threading.Event()
        self.caller = threading.current_thread()
        self.since = float("-inf")  # only renewals read on the clock at or after this count

    def claim(self, run_id: str, owner: str, expires_at: float, now: float, **kw: Any) -> None:
        super().claim(run_id, owner, expires_at, now, **kw)
        if threading.current_thread() is not self.caller and now >= self.since:
            self.renewed.set()


def test_heartbeat_renews_the_lease_on_the_injected_clock(sqlite_store):
    clock = ManualClock()
    store = HeartbeatStore(sqlite_store)
    seen: list[Any] = []

    @tool
    def work(x: str) -> str:
        """Work while the clock moves on; wait for the heartbeat's renewal."""
        # A renewal already in flight read the clock before it moved: wait for one after.
        store.since = clock.now() + 1000.0
        store.renewed.clear()
        clock.advance(1000.0)
        assert store.renewed.wait(30.0), "the heartbeat never renewed the lease"
        run = store.get(rid)
        seen.append((run.lease_owner, run.lease_expires_at - clock.now()))
        return "ok"

    agent = Agent(
        "helper", ScriptedModel([{"tool": "work", "args": {"x": "1"}}, "done"]), store, [work],
        clock=clock, owner="me:1:a", lease_ttl_s=0.15,
    )  # fmt: skip
    rid = "hb"
    assert agent.ask("q", run_id=rid).text == "done"
    assert seen == [("me:1:a", pytest.approx(0.15))]
    assert store.get(rid).lease_owner is None


# -- the tool list, what the model is offered, streaming --------------------------------


class OfferedModel(ScriptedModel):
    """Records the tool names offered on each call."""

    def __init__(self, turns: Any) -> None:
        super().__init__(turns)
        self.offered: list[list[str]] = []

    def complete(self, messages: Any, tools: Any) -> Any:
        self.offered.append([t["function"]["name"] for t in tools])
        return super().complete(messages, tools)


def test_model_is_offered_the_agents_tools_and_ask_user_streamed_or_not(astore):
    model = OfferedModel(["a", "b"])
    agent = Agent("helper", model, astore, [other])
    agent.ask("q")
    list(agent.stream("q"))
    assert model.offered == [["other", "ask_user"], ["other", "ask_user"]]


def test_a_run_started_without_tools_may_be_resumed_with_tools(astore):
    rid = (
        Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), astore)
        .ask("q")
        .run_id
    )
    assert Agent("helper", ScriptedModel(["ok"]), astore, [other]).resume(rid).text == "ok"


def test_stream_and_resume_stream_yield_text_deltas_and_keep_the_context(astore):
    model = ScriptedModel(["hello there", RateLimitedError("429", retry_after_s=0.0), "one two"])
    agent = Agent("helper", model, astore)
    events = list(agent.stream("q", context=ExecutionContext(trace_id="cd" * 16)))
    assert [e.text for e in events if e.kind == "delta"] == ["hello", " there"]
    rid = events[-1].response.run_id
    assert astore.get(rid).context["trace_id"] == "cd" * 16
    limited = agent.ask("q").run_id
    again = list(agent.stream("ignored", run_id=limited))
    assert [e.text for e in again if e.kind == "delta"] == ["one", " two"]


# -- defaults ---------------------------------------------------------------------------


class SleepLog(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds: float, cancel: Any = None) -> bool:
        self.sleeps.append(seconds)
        return super().sleep(seconds, cancel)


def test_default_retries_backoff_lease_owner_and_turns(astore):
    clock = SleepLog()
    model = ScriptedModel([ProviderUnavailableError("503")] * 3)
    res = Agent("helper", model, astore, clock=clock).ask("q")
    assert res.status == "failed" and model.calls == 3
    assert 1.0 <= clock.sleeps[0] <= 1.5 and 2.0 <= clock.sleeps[1] <= 2.5
    clock = SleepLog()
    model = ScriptedModel([ProviderUnavailableError("503")] * 7)
    Agent("helper", model, astore, clock=clock, retries=6).ask("q")
    assert clock.sleeps[-1] == 20.0  # the cap

    leases: list[Any] = []

    @tool
    def look(x: str) -> str:
        """Look at the lease."""
        run = astore.get(current[0])
        leases.append((run.lease_owner, run.lease_expires_at - clock.now()))
        return "ok"

    current = ["defaults"]
    turns = [{"tool": "look", "args": {"x": str(i)}} for i in range(25)]
    model = ScriptedModel(turns)
    res = Agent("helper", model, astore, [look], clock=clock).ask("q", run_id=current[0])
    assert res.status == "failed" and res.error == "no answer after 20 turns" and model.calls == 20
    assert astore.get("defaults").error_type == "MaxTurns"
    owner, ttl = leases[0]
    assert owner.startswith(f"{socket.gethostname()}:{os.getpid()}:") and ttl == 30.0
    current[0] = "own"
    Agent(
        "helper", ScriptedModel([*turns[:1], "x"]), astore, [look], clock=clock, owner="me:2:b"
    ).ask("q", run_id="own")
    assert leases[-1][0] == "me:2:b"


# -- agent steps in a flow ---------------------------------------------------------------


class Q(BaseModel):
    question: str
    answer: str | None = None


def test_agent_step_child_shares_the_trace_says_why_it_failed_and_is_canceled_with_reason(
    sqlite_store,
):
    astore = SqliteAgentStore(sqlite_store)
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "Which city?"}}])
    agent = Agent("geo", model, astore)
    flow = FlowBuilder("quiz", Q).step("ask", agent_step(agent, lambda s: s.question, "answer"))
    engine = Engine(sqlite_store, flows=[flow.chain().compile()])
    res = engine.run("quiz", Q(question="Capital?"), context=ExecutionContext(trace_id="ef" * 16))
    (child,) = astore.list(agent="geo")
    assert child.context["trace_id"] == "ef" * 16 and child.status == "input_required"
    assert res.status == "failed"
    assert f"agent geo run {child.run_id} ended input_required: Which city?" in (res.error or "")
    engine.cancel(res.run_id, reason="user gave up")
    assert (astore.get(child.run_id).status, astore.get(child.run_id).error) == (
        "canceled",
        f"parent run {res.run_id} was canceled",
    )


def test_canceling_a_flow_cancels_its_rate_limited_agent_child_which_never_goes_on(
    sqlite_store,
):
    """A rate-limited child would be resumed once its Retry-After came;
    canceling its parent cancels it (it was left rate_limited, as if ended),
    and a later sweep of due runs asks the model nothing."""
    clock = ManualClock()
    astore = SqliteAgentStore(sqlite_store)
    model = ScriptedModel([RateLimitedError("slow down", retry_after_s=30), "too late"])
    agent = Agent("geo", model, astore, clock=clock)
    flow = FlowBuilder("quiz", Q).step("ask", agent_step(agent, lambda s: s.question, "answer"))
    engine = Engine(sqlite_store, flows=[flow.chain().compile()], clock=clock)
    res = engine.run("quiz", Q(question="Capital?"))
    (child,) = astore.list(agent="geo")
    assert child.status == "rate_limited" and res.status == "failed"
    engine.cancel(res.run_id, reason="user gave up")
    assert astore.get(child.run_id).status == "canceled"
    clock.advance(60)
    assert agent.resume_due() == []
    assert model.calls == 1


# -- spans --------------------------------------------------------------------------------

SPANS_SCRIPT = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import ProviderError
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

@tool
def look(q: str) -> str:
    "Look."
    # the span current while the tool runs: a span the tool makes is its child
    with trace.get_tracer("tool").start_as_current_span("inside " + q):
        pass
    return "seen " + q

store = SqliteAgentStore(open_store(sys.argv[1]))
call = {"tool": "look", "args": {"q": "a"}}
ctx = ExecutionContext(trace_id="ab" * 16)
Agent("helper", ScriptedModel([call, call, "ok"]), store, [look]).ask("q", context=ctx)
Agent("helper", ScriptedModel([ProviderError("bad", status=400)]), store).ask("q", context=ctx)
Agent("helper", ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}]), store).ask(
    "q", context=ctx
)

@tool
def steal(q: str) -> str:
    "Another host takes the run's lease while this runs."
    (run,) = store.list(agent="thief")
    holder = store.get(run.run_id).lease_owner
    store.claim(run.run_id, "other-host", 1e12, float("inf"), takes_over=holder)
    return "x"

thief = ScriptedModel([{"tool": "steal", "args": {"q": "a"}}, "ok"])
try:  # the call's result cannot be saved: its span says nothing was reused
    Agent("thief", thief, store, [steal]).ask("q", context=ctx)
except Exception as exc:
    print(type(exc).__name__, file=sys.stderr)
out = []
for s in exporter.get_finished_spans():
    out.append({
        "name": s.name,
        "trace_id": format(s.context.trace_id, "032x"),
        "parent": s.parent.span_id if s.parent else None,
        "span_id": s.context.span_id,
        "error": s.status.description if s.status.status_code.name == "ERROR" else None,
        "attributes": dict(s.attributes),
    })
print(json.dumps(out))
"""


def script_json(script: str, db_path: Any) -> Any:
    """What ``script`` (Python source run in a process of its own, with the
    database path as its argument) prints, read as JSON."""
    proc = cli_forkserver.run_argv(
        [sys.executable, "-c", script, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout)


def test_agent_spans_name_the_run_its_tools_and_how_it_ended(db_path):
    pytest.importorskip("opentelemetry.sdk")
    spans = script_json(SPANS_SCRIPT, db_path)
    assert {s["trace_id"] for s in spans} == {"ab" * 16}
    runs = [s for s in spans if s["name"] == "invoke_agent helper"]
    assert len(runs) == 3
    assert [r["attributes"]["flowdesk.status"] for r in runs] == [
        "done",
        "failed",
        "input_required",
    ]
    assert [r["error"] for r in runs] == [None, "failed", None]
    for r in runs:
        assert r["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert r["attributes"]["gen_ai.agent.name"] == "helper"
        assert len(r["attributes"]["flowdesk.run_id"]) == 32
    tools = [s for s in spans if s["name"] == "execute_tool look"]
    assert [t["attributes"]["flowdesk.tool.reused"] for t in tools] == [False, True]
    # the tool ran once (the second call reused its result), inside its span
    (inside,) = [s for s in spans if s["name"] == "inside a"]
    assert inside["parent"] == tools[0]["span_id"]
    # a call whose result could not be saved (its lease was taken): not reused
    (stolen,) = [s for s in spans if s["name"] == "execute_tool steal"]
    assert stolen["attributes"]["flowdesk.tool.reused"] is False
    for t in tools:
        assert t["parent"] == runs[0]["span_id"]
        assert t["attributes"]["gen_ai.operation.name"] == "execute_tool"
        assert t["attributes"]["gen_ai.tool.name"] == "look"
        assert t["attributes"]["gen_ai.tool.call.id"].startswith("call_")
        assert t["attributes"]["flowdesk.run_id"] == runs[0]["attributes"]["flowdesk.run_id"]


# -- tool sources with a recorded list (MCP servers) -------------------------------------


class ListedServer:
    """A tool source with a tool list (what an MCP server is to the runtime)."""

    def __init__(self, name: str, tools: list[str]) -> None:
        self.name = name
        self.tools = tools
        self.listing_key = f"mcp/tools_list:{name}"
        self.listing_tool = f"mcp {name}"

    def listing(self) -> str:
        return json.dumps(self.tools)

    def check_listing(self, recorded: str, used: Collection[str]) -> str | None:
        self.used = set(used)
        return None if json.loads(recorded) == self.tools else f"{self.name} changed its tools"

    def tool(self, name: str) -> Tool:
        def call(x: str = "") -> str:
            """A server tool."""
            return name

        t = Tool(call, name=name)
        t.server = self  # type: ignore[attr-defined]
        return t


def test_every_servers_list_is_recorded_and_checked_and_a_missing_server_is_named(astore):
    a, b = ListedServer("a", ["a1", "a2"]), ListedServer("b", ["b1"])
    tools = [other, a.tool("a1"), a.tool("a2"), b.tool("b1")]
    limited = [RateLimitedError("429", retry_after_s=0.0)]
    rid1 = Agent("helper", ScriptedModel(limited), astore, tools).ask("q").run_id
    rid2 = Agent("helper", ScriptedModel(limited), astore, tools).ask("q").run_id
    b.tools = ["b1", "b2"]
    model = ScriptedModel(["never"])
    res = Agent("helper", model, astore, tools).resume(rid1)
    assert (res.status, res.error) == ("failed", "b changed its tools")
    assert b.used == set()  # the run called none of the tools yet
    assert astore.get(rid1).error_type == "McpToolsChangedError" and model.calls == 0
    before = astore.get(rid2)
    with pytest.raises(AgentToolsChangedError) as err:  # refused before anything changes
        Agent("helper", model, astore, [other, b.tool("b1")]).resume(rid2)
    assert str(err.value) == (
        f"agent run {rid2} was started with the tools other and those of MCP servers a, b "
        "(recorded when it started) but is resumed with the tools other and those of MCP "
        "server b; nothing was changed and it can still be resumed with the same tools "
        f"(flowdesk ask --resume {rid2} with the --tools/--folder and --mcp options it was "
        "started with)"
    )
    assert astore.get(rid2) == before and model.calls == 0
    assert not [r for r in astore.tool_results(rid2) if r.tool_key == "mcp/tools_list:c"]
    with pytest.raises(AgentToolsChangedError, match="resumed with the tools other and those of"):
        Agent("helper", model, astore, [*tools, ListedServer("c", ["c1"]).tool("c1")]).resume(rid2)
    assert not [r for r in astore.tool_results(rid2) if r.tool_key == "mcp/tools_list:c"]
    assert astore.get(rid2) == before and model.calls == 0


# -- ask_user, the deadline's words, max turns' type ----------------------------------------


def test_ask_user_without_a_question_is_refused_to_the_model_not_asked(astore):
    # it used to pause on an empty question; the model is told instead
    model = ScriptedModel([{"tool": "ask_user", "args": {}}, "fine"])
    res = Agent("helper", model, astore).ask("q")
    assert (res.status, res.question, res.text) == ("done", None, "fine")
    (refusal,) = [m for m in astore.messages(res.run_id) if m["role"] == "tool"]
    assert "question: Field required" in refusal["content"]


def test_pausing_for_input_after_a_lost_lease_writes_nothing(sqlite_store):
    store = CountingStealer(sqlite_store, nth=2)
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}])
    with pytest.raises(LeaseLostError):
        Agent("helper", model, store).ask("q")
    (run,) = store.list(agent="helper")
    assert run.status == "running" and run.pending_call is None


def test_the_recorded_tool_list_is_a_toolset_row_in_the_runs_tool_journal(astore):
    calls: Counter[str] = Counter()
    rid = Agent("helper", ScriptedModel(["x"]), astore, [other, lookup_tool(calls)]).ask("q").run_id
    (row,) = [r for r in astore.tool_results(rid) if r.tool_key == TOOLSET_KEY]
    assert (row.tool, row.status, json.loads(row.result)) == (
        "toolset",
        "completed",
        ["lookup", "other"],
    )


def test_resume_pending_reports_a_failure_without_words_as_failed(astore):
    rid = Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), astore)
    rid = rid.ask("q").run_id
    astore.update(rid, 0.0, status="failed")
    agent = Agent("helper", ScriptedModel([ProviderError("", status=400)]), astore)
    got, err = agent.resume_pending()
    assert got == rid and str(err) == "failed"


ABANDON_SCRIPT = r"""
import sys
from desktop_app.agent import Agent, ScriptedModel
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

store = SqliteAgentStore(open_store(sys.argv[1]))
EVENTS = Agent("helper", ScriptedModel(["one two three"]), store).stream("q")
assert next(EVENTS).kind == "started"  # the run is stored: its id, for a Ctrl-C hint
print(next(EVENTS).text, flush=True)  # the caller stops reading and the process ends
"""


def test_a_process_that_stops_reading_a_stream_still_exits(db_path):
    proc = cli_forkserver.run_argv(
        [sys.executable, "-c", ABANDON_SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=30,  # a hang guard: the script itself takes about a second
    )
    assert (proc.returncode, proc.stdout) == (0, "one\n")
