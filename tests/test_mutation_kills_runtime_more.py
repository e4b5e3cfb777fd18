"""More of what the agent runtime promises, where the first kill file did not
look: each model call's ``chat`` span (name, attributes, status), what a rate
limited or failed call records, a lease lost during the model call, and a
reused empty tool result."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import LeaseLostError, MalformedReplyError, RateLimitedError
from desktop_app.store.agent_runs import SqliteAgentStore

THIEF = "otherhost:1:thief"


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def tool_messages(model: ScriptedModel, call: int):
    return [m for m in model.seen[call] if m.role == "tool"]


# -- spans of model calls -------------------------------------------------------------

CHAT_SPANS_SCRIPT = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import MalformedReplyError, RateLimitedError
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite import open_store

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
    proc = subprocess.run(
        [sys.executable, "-c", CHAT_SPANS_SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(proc.stdout)
    runs, spans = got["runs"], got["spans"]
    assert set(runs) == {"named", "limited", "failed", "interrupted"}
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
        self.store.claim(run.run_id, THIEF, 1e12, 0.0, takeover=True)
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
