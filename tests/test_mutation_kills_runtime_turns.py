"""What an agent run's drive promises turn by turn, where the runtime's
earlier kill files did not look: a cancel that lands between the executing
process's last check and its write (the store refuses the write; the run
keeps the user's reason and nothing of the turn is saved), and the
``invoke_agent`` span a run leaves (its attributes, and its status when the
run is canceled or waits for a person).

Another process is played by a store write on the same SQLite file at the
moment a store subclass picks; spans are read in a subprocess, which owns
the process-wide OpenTelemetry tracer provider.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

STOPPED = "canceled by user; this process stopped before its next model or tool call"


class CanceledBeforeSave(SqliteAgentStore):
    """Another process cancels the run right before this process's next
    write of a model reply (after its last check that the run is live)."""

    armed = True

    def update(self, run_id: str, now: float, **fields: Any) -> None:
        saves_reply = any(m.get("role") == "assistant" for m in fields.get("messages") or ())
        if self.armed and saves_reply and fields.get("owner") is not None:
            self.armed = False
            SqliteAgentStore.update(self, run_id, now, status="canceled", error="canceled by user")
        super().update(run_id, now, **fields)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_cancel_between_the_check_and_the_replys_save_drops_the_reply(sqlite_store, streamed):
    store = CanceledBeforeSave(sqlite_store)
    model = ScriptedModel(["the answer", "never"])
    agent = Agent("helper", model, store)
    if streamed:
        events = list(agent.stream("q", run_id="c1"))
        res = events[-1].response
        assert [e.kind for e in events].count("done") == 1
    else:
        res = agent.ask("q", run_id="c1")
    assert res is not None
    assert (res.run_id, res.status, res.error, res.text) == ("c1", "canceled", STOPPED, None)
    run = store.get("c1")
    assert (run.status, run.error, run.response, run.turns) == (
        "canceled",
        "canceled by user",
        None,
        0,
    )
    assert [m["role"] for m in store.messages("c1")] == ["user"]  # the reply is not saved
    assert model.calls == 1


SPANS_SCRIPT = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

store = SqliteAgentStore(open_store(sys.argv[1]))
ctx = ExecutionContext(trace_id="ab" * 16)


@tool
def stop(x: str) -> str:
    "The user cancels the run while this call runs."
    Agent("helper", ScriptedModel([]), store).cancel("canceled")
    return "stopped " + x


runs = {}
for rid, model, tools in (
    ("done", ScriptedModel(["ok"]), []),
    ("asking", ScriptedModel([{"tool": "ask_user", "args": {"question": "Which?"}}]), []),
    ("canceled", ScriptedModel([{"tool": "stop", "args": {"x": "a"}}, "never"]), [stop]),
):
    res = Agent("helper", model, store, tools).ask("q", context=ctx, run_id=rid)
    runs[rid] = res.status
out = []
for s in exporter.get_finished_spans():
    if s.name.startswith("invoke_agent"):
        out.append({
            "name": s.name,
            "trace_id": format(s.context.trace_id, "032x"),
            "status": s.status.status_code.name,
            "error": s.status.description,
            "attributes": dict(s.attributes),
        })
print(json.dumps({"runs": runs, "spans": out}))
"""


def test_a_runs_span_names_the_agent_and_says_how_the_run_stopped(db_path):
    pytest.importorskip("opentelemetry.sdk")
    proc = subprocess.run(
        [sys.executable, "-c", SPANS_SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(proc.stdout)
    assert got["runs"] == {"done": "done", "asking": "input_required", "canceled": "canceled"}
    spans = {s["attributes"]["flowdesk.run_id"]: s for s in got["spans"]}
    assert sorted(spans) == ["asking", "canceled", "done"]
    for rid, status, outcome in (
        ("done", "done", ("UNSET", None)),
        # waiting for a person is no error
        ("asking", "input_required", ("UNSET", None)),
        # a run the user canceled while it executed here says so
        ("canceled", "canceled", ("ERROR", "canceled")),
    ):
        span = spans[rid]
        assert span["name"] == "invoke_agent helper"
        assert span["trace_id"] == "ab" * 16
        assert span["attributes"] == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "helper",
            "flowdesk.run_id": rid,
            "flowdesk.status": status,
        }
        assert (span["status"], span["error"]) == outcome
