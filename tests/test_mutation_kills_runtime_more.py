"""More of what the agent runtime promises, where the first kill file did not
look: each model call's ``chat`` span (name, attributes, status), what a rate
limited or failed call records, a lease lost during the model call, a reused
empty tool result, the heartbeat's interval and renewal (on the injected
clock), the debug log's words, which calls of a turn are still unanswered,
plain versus streaming provider calls, the tool-list refusal's words, a
cancel seen by the executing process (during a model call, mid tool call,
between turns), a resume with other recorded sources, and a
parent canceled where no agent step can reach its agent child."""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import types
import weakref
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.agent import Agent, ScriptedModel, leases, runtime, tool
from desktop_app.errors import (
    AgentToolsChangedError,
    LeaseLostError,
    MalformedReplyError,
    ProviderUnavailableError,
    RateLimitedError,
    RunStateError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests import cli_forkserver

THIEF = "otherhost:1:thief"


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def tool_messages(model: ScriptedModel, call: int):
    return [m for m in model.seen[call] if m.role == "tool"]


# -- spans of model calls -------------------------------------------------------------

CHAT_SPANS_SCRIPT = r"""
import json, math, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import LeaseLostError, MalformedReplyError, RateLimitedError
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


class Named(ScriptedModel):
    model = "gpt-test"


@tool
def look(q: str) -> str:
    "Look."
    return "seen " + q

store = SqliteAgentStore(open_store(sys.argv[1]))
ctx = ExecutionContext(trace_id="cd" * 16)
runs = {}
runs["named"] = Agent(
    "helper", Named([{"tool": "look", "args": {"q": "a"}}, "ok"]), store, [look]
).ask("q", context=ctx).run_id
runs["limited"] = Agent(
    "helper", ScriptedModel([RateLimitedError("slow down", retry_after_s=5.0)]), store
).ask("q", context=ctx).run_id
runs["failed"] = Agent(
    "helper", ScriptedModel([MalformedReplyError("garbled")]), store
).ask("q", context=ctx).run_id
try:
    Agent("helper", ScriptedModel([]), store).ask("q", context=ctx, run_id="broken")
except RuntimeError:
    runs["interrupted"] = "broken"


@tool
def steal(q: str) -> str:
    "Another host takes the run's lease while this tool runs."
    holder = store.get("lost").lease_owner
    store.claim("lost", "otherhost:1:thief", 1e12, math.inf, takes_over=holder)
    return "too late"

try:
    Agent("helper", ScriptedModel([{"tool": "steal", "args": {"q": "a"}}]), store, [steal]).ask(
        "q", context=ctx, run_id="lost"
    )
except LeaseLostError:
    runs["lost"] = "lost"
out = []
for s in exporter.get_finished_spans():
    out.append({
        "name": s.name,
        "trace_id": format(s.context.trace_id, "032x"),
        "parent": s.parent.span_id if s.parent else None,
        "span_id": s.context.span_id,
        "status": s.status.status_code.name,
        "error": s.status.description,
        "attributes": dict(s.attributes),
    })
print(json.dumps({"runs": runs, "spans": out}))
"""


def test_each_model_call_is_a_chat_span_under_its_run_with_its_turn_and_outcome(db_path):
    pytest.importorskip("opentelemetry.sdk")
    proc = cli_forkserver.run_argv(
        [sys.executable, "-c", CHAT_SPANS_SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(proc.stdout)
    runs, spans = got["runs"], got["spans"]
    assert set(runs) == {"named", "limited", "failed", "interrupted", "lost"}
    assert {s["trace_id"] for s in spans} == {"cd" * 16}

    def of(rid: str, prefix: str) -> list[dict[str, Any]]:
        return [
            s
            for s in spans
            if s["attributes"].get("flowdesk.run_id") == rid and s["name"].startswith(prefix)
        ]

    def outcome(span: dict[str, Any]) -> tuple[str, str | None]:
        return span["status"], span["error"]

    (run,) = of(runs["named"], "invoke_agent")
    chats = of(runs["named"], "chat")
    assert [c["name"] for c in chats] == ["chat gpt-test", "chat gpt-test"]
    assert [c["attributes"] for c in chats] == [
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-test",
            "flowdesk.run_id": runs["named"],
            "flowdesk.turn": turn,
        }
        for turn in (1, 2)
    ]
    assert [c["parent"] for c in chats] == [run["span_id"]] * 2
    assert [outcome(c) for c in chats] == [("UNSET", None)] * 2
    assert outcome(run) == ("UNSET", None)

    # a model without a model name is named by its class; the error is its type
    (run,) = of(runs["limited"], "invoke_agent")
    (chat,) = of(runs["limited"], "chat")
    assert chat["name"] == "chat ScriptedModel"
    assert chat["attributes"]["gen_ai.request.model"] == "ScriptedModel"
    assert outcome(chat) == ("ERROR", "RateLimitedError")
    assert outcome(run) == ("ERROR", "rate_limited")
    assert run["attributes"]["flowdesk.status"] == "rate_limited"

    (run,) = of(runs["failed"], "invoke_agent")
    (chat,) = of(runs["failed"], "chat")
    assert outcome(chat) == ("ERROR", "MalformedReplyError")
    assert outcome(run) == ("ERROR", "failed")

    # a model call that raised something else: the call was interrupted, the
    # run did not end (no status), so its span is no error either
    (run,) = of(runs["interrupted"], "invoke_agent")
    (chat,) = of(runs["interrupted"], "chat")
    assert outcome(chat) == ("ERROR", "interrupted")
    assert outcome(run) == ("UNSET", None)
    assert run["attributes"]["flowdesk.status"] == "interrupted"

    # a tool whose result could not be saved (the lease was lost) was not reused
    (run,) = of(runs["lost"], "invoke_agent")
    (call,) = of(runs["lost"], "execute_tool")
    assert call["parent"] == run["span_id"]
    assert call["attributes"]["flowdesk.tool.reused"] is False
    assert run["attributes"]["flowdesk.status"] == "interrupted"


# -- what a rate limited or failed model call records ---------------------------------


def test_rate_limited_call_records_the_providers_words_and_the_type(astore):
    res = Agent(
        "helper", ScriptedModel([RateLimitedError("slow down", retry_after_s=5.0)]), astore
    ).ask("q")
    assert (res.status, res.error) == ("rate_limited", "slow down")
    run = astore.get(res.run_id)
    assert (run.status, run.error, run.error_type) == ("rate_limited", "slow down", "RateLimited")


def test_failed_call_records_the_providers_words_and_the_errors_type(astore):
    res = Agent("helper", ScriptedModel([MalformedReplyError("garbled")]), astore).ask("q")
    assert (res.status, res.error) == ("failed", "garbled")
    run = astore.get(res.run_id)
    assert (run.status, run.error, run.error_type) == ("failed", "garbled", "MalformedReplyError")


# -- a lease lost while the model answers -----------------------------------------------


class StealingModel(ScriptedModel):
    """Another host takes the run's lease while this model call runs."""

    def __init__(self, turns: Any, store: SqliteAgentStore) -> None:
        super().__init__(turns)
        self.store = store

    def complete(self, messages: Any, tools: Any) -> Any:
        (run,) = self.store.list(agent="helper")
        self.store.claim(
            run.run_id, THIEF, 1e12, math.inf, takes_over=self.store.get(run.run_id).lease_owner
        )
        return super().complete(messages, tools)


def test_a_reply_that_arrives_after_the_lease_was_lost_is_not_saved(astore):
    model = StealingModel(["42"], astore)
    with pytest.raises(LeaseLostError):
        Agent("helper", model, astore).ask("q")
    (run,) = astore.list(agent="helper")
    assert [m["role"] for m in astore.messages(run.run_id)] == ["user"]
    assert (run.turns, run.status, run.lease_owner) == (0, "running", THIEF)


# -- reuse of an empty result --------------------------------------------------------------


def test_a_reused_empty_tool_result_is_answered_empty(astore):
    runs = []

    @tool
    def blank(x: str) -> str:
        """Answer nothing."""
        runs.append(x)
        return ""

    call = {"tool": "blank", "args": {"x": "1"}}
    model = ScriptedModel([call, call, "ok"])
    events = list(Agent("helper", model, astore, [blank]).stream("q"))
    assert [e.reused for e in events if e.kind == "tool_end"] == [False, True]
    assert runs == ["1"]
    assert [m.content for m in tool_messages(model, 2)] == ["", ""]


# -- the heartbeat: its interval and its renewal, on the injected clock -----------------


class Ticks:
    """Stands in for ``threading`` inside the agent lease holder: the heartbeat's stop
    event records each interval it waits for; its first wait ends (as if the
    interval had passed) only when the test calls :meth:`tick`, every later
    wait only when the drive stops. ``progress`` is set once the heartbeat is
    done with that interval (waits again, or ended). No wall clock decides
    anything."""

    def __init__(self) -> None:
        self.intervals: list[float | None] = []
        self.progress = threading.Event()
        self._tick = threading.Semaphore(0)
        ticks = self

        class Event(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                ticks.intervals.append(timeout)
                if len(ticks.intervals) == 1:
                    ticks._tick.acquire()
                    return self.is_set()
                ticks.progress.set()
                return super().wait()

            def set(self) -> None:
                super().set()
                ticks._tick.release()

        class Thread(threading.Thread):
            def run(self) -> None:
                try:
                    super().run()
                finally:
                    ticks.progress.set()

        self.module = types.SimpleNamespace(Event=Event, Thread=Thread)

    def tick(self) -> None:
        self._tick.release()


@pytest.mark.parametrize(("ttl", "interval"), [(30.0, 10.0), (0.09, 0.05)])
def test_the_heartbeat_waits_a_third_of_the_lease_at_least_50_ms(
    sqlite_store, monkeypatch, ttl, interval
):
    ticks = Ticks()
    monkeypatch.setattr(leases, "threading", ticks.module)
    res = Agent("helper", ScriptedModel(["ok"]), SqliteAgentStore(sqlite_store), lease_ttl_s=ttl)
    assert res.ask("q").text == "ok"
    assert ticks.intervals[0] == pytest.approx(interval)


def heartbeat_round(sqlite_store, monkeypatch, before_interval):
    """An agent (owner ``me:1:a``, 30 s lease, injected clock) whose one tool
    call calls ``before_interval(store, clock)``, then lets 100 s and one
    heartbeat interval pass, and records who holds the lease then. Returns
    the agent, the store, the records and the heartbeat's intervals."""
    ticks = Ticks()
    monkeypatch.setattr(leases, "threading", ticks.module)
    clock = ManualClock()
    store = SqliteAgentStore(sqlite_store)
    seen: list[Any] = []

    @tool
    def work(x: str) -> str:
        """Something happens to the lease, then the interval passes."""
        before_interval(store, clock)
        clock.advance(100.0)
        ticks.tick()
        assert ticks.progress.wait(60.0), "the heartbeat never got past its interval"
        run = store.get("hb")
        seen.append((run.lease_owner, run.lease_expires_at - clock.now()))
        return "ok"

    agent = Agent(
        "helper", ScriptedModel([{"tool": "work", "args": {"x": "1"}}, "done"]), store, [work],
        clock=clock, owner="me:1:a", lease_ttl_s=30.0,
    )  # fmt: skip
    return agent, store, seen, ticks.intervals


def test_the_heartbeat_renews_on_the_injected_clock(sqlite_store, monkeypatch):
    agent, _, seen, intervals = heartbeat_round(sqlite_store, monkeypatch, lambda s, c: None)
    assert agent.ask("q", run_id="hb").text == "done"
    assert seen == [("me:1:a", 30.0)]
    assert intervals == [10.0, 10.0]


def test_the_heartbeat_never_takes_back_a_lease_another_host_took_even_once_expired(
    sqlite_store, monkeypatch
):
    def taken(store, clock) -> None:  # another host takes the lease; it expires
        store.claim("hb", THIEF, clock.now() + 5.0, math.inf, takes_over="me:1:a")

    agent, store, seen, _ = heartbeat_round(sqlite_store, monkeypatch, taken)
    with pytest.raises(LeaseLostError):  # the owner learns it lost the run
        agent.ask("q", run_id="hb")
    assert seen == [(THIEF, -95.0)]  # not taken back by the heartbeat
    assert store.get("hb").lease_owner == THIEF


# -- what the runtime logs ----------------------------------------------------------------


def test_debug_log_names_the_agent_the_run_its_end_and_each_retried_error(astore, caplog):
    caplog.set_level(logging.DEBUG, logger=runtime.__name__)
    model = ScriptedModel([ProviderUnavailableError("503"), "ok"])
    agent = Agent("helper", model, astore, clock=ManualClock())
    res = agent.ask("q")
    assert res.text == "ok"
    assert [r.getMessage() for r in caplog.records if r.name == runtime.__name__] == [
        f"agent helper: run {res.run_id} started (owner {agent.owner})",
        "agent helper: retryable provider error ProviderUnavailableError",
        f"agent helper: run {res.run_id} ended done",
    ]


# -- which calls of a turn are still unanswered ---------------------------------------------


class Crash(BaseException):
    """The process dies (not an Exception: nothing may catch it)."""


def test_a_crash_between_two_calls_of_one_turn_runs_only_the_second_on_resume(astore):
    calls: list[str] = []
    crash = {"b"}

    @tool
    def lookup(q: str) -> str:
        """Look something up; dies on the first call of a crashing query."""
        calls.append(q)
        if q in crash:
            crash.discard(q)
            raise Crash(q)
        return f"result for {q}"

    turn = [{"tool": "lookup", "args": {"q": "a"}}, {"tool": "lookup", "args": {"q": "b"}}]
    with pytest.raises(Crash):
        Agent("helper", ScriptedModel([turn]), astore, [lookup]).ask("q")
    (run,) = astore.list(agent="helper")
    model = ScriptedModel(["ok"])
    assert Agent("helper", model, astore, [lookup]).resume(run.run_id).text == "ok"
    assert calls == ["a", "b", "b"]
    assert [(m.tool_call_id, m.content) for m in tool_messages(model, 0)] == [
        ("call_0_0", "result for a"),
        ("call_0_1", "result for b"),
    ]


def test_a_model_that_reuses_a_call_id_in_the_next_turn_still_gets_its_answer(astore):
    seen: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        seen.append(q)
        return f"result for {q}"

    model = ScriptedModel(
        [
            {"id": "call_0", "tool": "lookup", "args": {"q": "a"}},
            {"id": "call_0", "tool": "lookup", "args": {"q": "b"}},
            "ok",
        ]
    )
    assert Agent("helper", model, astore, [lookup]).ask("q").text == "ok"
    assert seen == ["a", "b"]
    assert [m.content for m in tool_messages(model, 2)] == ["result for a", "result for b"]


# -- which provider call each entry point makes -----------------------------------------------


class CallKinds(ScriptedModel):
    """Records whether each model call was a plain or a streaming request."""

    def __init__(self, turns: Any) -> None:
        super().__init__(turns)
        self.kinds: list[str] = []
        self._streaming = False

    def complete(self, messages: Any, tools: Any) -> Any:
        if not self._streaming:
            self.kinds.append("complete")
        return super().complete(messages, tools)

    def stream(self, messages: Any, tools: Any) -> Any:
        self.kinds.append("stream")
        self._streaming = True
        try:
            deltas = list(super().stream(messages, tools))
        finally:
            self._streaming = False
        return iter(deltas)


def test_ask_resume_and_resume_input_make_plain_calls_stream_calls_stream(astore):
    limited = RateLimitedError("429", retry_after_s=0.0)
    question = {"tool": "ask_user", "args": {"question": "?"}}
    model = CallKinds([limited, "a", limited, "b", question, "c", limited, "d"])
    agent = Agent("helper", model, astore)
    first = agent.ask("q").run_id
    assert agent.resume(first).text == "a"
    second = list(agent.stream("q"))[-1].response.run_id
    assert list(agent.resume_stream(second))[-1].response.text == "b"
    third = agent.ask("q").run_id
    assert agent.resume_input(third, "yes").text == "c"
    fourth = agent.ask("q").run_id
    assert list(agent.stream("ignored", run_id=fourth))[-1].response.text == "d"
    assert model.kinds == [
        "complete", "complete",  # ask, resume
        "stream", "stream",  # stream, resume_stream
        "complete", "complete",  # ask, resume_input
        "complete", "stream",  # ask, stream with the run's id
    ]  # fmt: skip


# -- the refusal names every tool ---------------------------------------------------------------


@tool
def alpha(x: str) -> str:
    """A tool."""
    return x


@tool
def beta(x: str) -> str:
    """A tool."""
    return x


@tool
def gamma(x: str) -> str:
    """A tool."""
    return x


def test_resuming_with_other_tools_names_each_list_comma_separated(astore):
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)])
    rid = Agent("helper", model, astore, [beta, alpha]).ask("q").run_id
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", ScriptedModel(["x"]), astore, [gamma, alpha]).resume(rid)
    assert str(err.value).startswith(
        f"agent run {rid} was started with the tools alpha, beta (recorded when it started) "
        "but is resumed with the tools alpha, gamma; nothing was changed"
    )


# -- canceling a flow whose agent child no agent step here can reach -------------------------


class Q(BaseModel):
    question: str
    answer: str | None = None


def test_canceling_a_parent_where_no_agent_step_was_built_says_where_to_cancel_the_child(
    sqlite_store, monkeypatch
):
    astore = SqliteAgentStore(sqlite_store)
    agent = Agent("geo", ScriptedModel([{"tool": "ask_user", "args": {"question": "?"}}]), astore)
    flow = FlowBuilder("quiz", Q).step(
        "ask", runtime.agent_step(agent, lambda s: s.question, "answer")
    )
    engine = Engine(sqlite_store, flows=[flow.chain().compile()])
    res = engine.run("quiz", Q(question="Capital?"))
    (child,) = astore.list(agent="geo")
    # another process (the command line, say) that built no agent step
    monkeypatch.setattr(runtime, "_CHILD_STORES", weakref.WeakSet())
    with pytest.raises(RunStateError) as err:
        engine.cancel(res.run_id)
    assert str(err.value) == (
        f"run {res.run_id} was canceled, but not all its children: agent child "
        f"{child.run_id}: agent run {child.run_id} was not canceled: no agent step is built "
        "in this process; cancel it with Agent.cancel where its agent runs"
    )
    assert astore.get(child.run_id).status == "input_required"


# -- a cancel from another process, seen by the executing one ---------------------------


class CancelingModel(ScriptedModel):
    """A model during whose ``cancel_at``-th call another process cancels the run."""

    def __init__(self, turns: list[Any], astore: SqliteAgentStore, cancel_at: int) -> None:
        super().__init__(turns)
        self.astore, self.cancel_at, self.rid = astore, cancel_at, ""

    def complete(self, messages, tools):  # type: ignore[no-untyped-def]
        reply = super().complete(messages, tools)
        if self.calls == self.cancel_at:
            Agent("helper", ScriptedModel([]), self.astore).cancel(self.rid)
        return reply


def test_a_cancel_during_the_model_call_drops_its_reply_and_runs_no_tool(astore):
    ran: list[str] = []

    @tool
    def act(x: str) -> str:
        """Act."""
        ran.append(x)
        return "acted"

    model = CancelingModel([{"tool": "act", "args": {"x": "1"}}, "never"], astore, 1)
    model.rid = "c1"
    res = Agent("helper", model, astore, [act]).ask("q", run_id="c1")
    assert (res.status, res.error) == (
        "canceled",
        "canceled by user; this process stopped before its next model or tool call",
    )
    assert ran == [] and model.calls == 1
    assert [m["role"] for m in astore.messages("c1")] == ["user"]  # the reply was not committed
    run = astore.get("c1")
    assert (run.status, run.error, run.lease_owner) == ("canceled", "canceled by user", None)


def test_a_cancel_while_a_call_is_in_flight_records_it_and_runs_nothing_after(astore):
    ran: list[str] = []

    @tool
    def act(x: str) -> str:
        """Act."""
        ran.append(x)
        Agent("helper", ScriptedModel([]), astore).cancel("c2")  # lands mid-call
        return f"acted {x}"

    model = ScriptedModel(
        [[{"tool": "act", "args": {"x": "1"}}, {"tool": "act", "args": {"x": "2"}}]]
    )
    res = Agent("helper", model, astore, [act]).ask("q", run_id="c2")
    assert res.status == "canceled" and res.error == (
        "canceled by user while the call to act was in flight: that call ran to its end (its "
        "result is recorded, whatever it did stays done) and nothing after it ran"
    )
    assert ran == ["1"] and model.calls == 1  # not the second call, no further turn
    assert astore.tool_result("c2", 'act:{"x":"1"}').result == "acted 1"
    assert astore.get("c2").status == "canceled"
    with pytest.raises(RunStateError, match="is canceled; it cannot be resumed"):
        Agent("helper", ScriptedModel(["x"]), astore, [act]).resume("c2")


def test_a_run_canceled_between_turns_makes_no_model_call(astore):
    calls = []

    @tool
    def act(x: str) -> str:
        """Act."""
        calls.append(x)
        return "acted"

    model = CancelingModel([RateLimitedError("429", retry_after_s=0.0)], astore, 0)
    rid = Agent("helper", model, astore, [act]).ask("q").run_id
    astore.update(rid, 0.0, status="running")  # left running, as by a killed process
    astore.update(rid, 0.0, status="canceled", error="stop")
    # resume refuses; a drive that finds it canceled at a turn boundary stops the same way
    agent = Agent("helper", model, astore, [act])
    events = list(agent._drive(rid, stream=False))
    assert events[-1].response is not None
    assert (events[-1].response.status, events[-1].response.error) == (
        "canceled",
        "stop; this process stopped before its next model or tool call",
    )
    assert model.calls == 1 and calls == []


def test_a_resume_with_other_sources_than_recorded_is_refused_naming_them(astore, tmp_path):
    recorded = json.dumps({"folder": str(tmp_path), "mcp": ["notes", "git"]})
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)])
    rid = Agent("helper", model, astore, tool_sources=recorded).ask("q").run_id
    other = json.dumps({"folder": None, "mcp": ["notes", "git"]})
    before = astore.tool_results(rid)
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", ScriptedModel(["x"]), astore, tool_sources=other).resume(rid)
    assert str(err.value) == (
        f"agent run {rid} was started with the file tools over {tmp_path} and the tools of MCP "
        "servers notes, git (recorded when it started) but is resumed with none; nothing was "
        f"changed and it can still be resumed with the same tools (flowdesk resume {rid} "
        "reconnects them)"
    )
    assert astore.tool_results(rid) == before and astore.get(rid).status == "rate_limited"


class CancelAfterRead(SqliteAgentStore):
    """Once ``armed``, the next read of the run returns it as it was and
    another process's cancel commits right after (the read saw no cancel)."""

    armed = False

    def get(self, run_id: str) -> Any:
        run = super().get(run_id)
        if self.armed:
            self.armed = False
            SqliteAgentStore.update(self, run_id, 0.0, status="canceled", error="late")
        return run


def test_a_cancel_right_after_the_check_is_fenced_by_the_store(sqlite_store):
    store = CancelAfterRead(sqlite_store)
    ran: list[str] = []

    @tool
    def act(x: str) -> str:
        """Act."""
        ran.append(x)
        return "acted"

    class Arming(ScriptedModel):
        def complete(self, messages, tools):  # type: ignore[no-untyped-def]
            store.armed = True  # the check before the reply is committed reads 'running'
            return super().complete(messages, tools)

    res = Agent("helper", Arming([{"tool": "act", "args": {"x": "1"}}]), store, [act]).ask("q")
    assert (res.status, res.error) == (
        "canceled",
        "late; this process stopped before its next model or tool call",
    )
    assert ran == [] and [m["role"] for m in store.messages(res.run_id)] == ["user"]
    assert store.get(res.run_id).status == "canceled"
