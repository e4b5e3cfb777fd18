"""A Pydantic AI run's span (a tryout: Pydantic AI agent runs exported no
span at all, not even under ``flowdesk resume``): ``invoke_agent <name>``
in the trace of the run's context, as a Flowdesk agent run's, current while
the run runs, so Pydantic AI's own instrumentation
nests under it (``Agent.instrument_all()``); ended with the run's status. A program of its own (the
global tracer provider is set once per process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests import cli_forkserver

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from desktop_app.flow.context import ExecutionContext
from desktop_app.integrations.pydantic_ai import FlowdeskAgent
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

def model(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "a"}, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart("found")])

Agent.instrument_all()  # Pydantic AI's own spans, on the global provider
agent = Agent(FunctionModel(model), name="helper")

@agent.tool_plain
def lookup(q: str) -> str:
    "Look something up."
    return "result for " + q

store = open_store(sys.argv[1])
agents = SqliteAgentStore(store)
durable = FlowdeskAgent(agent, agents)
ctx = ExecutionContext(tenant_id="initech", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
durable.run_sync("find a", run_id="r1", context=ctx)
out = []
for s in exporter.get_finished_spans():
    out.append({
        "name": s.name,
        "trace": format(s.context.trace_id, "032x"),
        "span": format(s.context.span_id, "016x"),
        "parent": format(s.parent.span_id, "016x") if s.parent else None,
        "attrs": {k: str(v) for k, v in (s.attributes or {}).items()},
        "status": s.status.status_code.name,
    })
store.close()
print(json.dumps(out))
"""


def test_a_pydantic_ai_run_is_a_span_in_its_trace_and_the_agents_own_spans_nest_under_it(
    db_path: Path,
) -> None:
    out = cli_forkserver.run_argv(
        [sys.executable, "-c", SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    spans = json.loads(out.stdout.splitlines()[-1])
    # Pydantic AI names its own agent-run span the same (GenAI conventions): ours has the run id
    [run] = [s for s in spans if "flowdesk.run_id" in s["attrs"]]
    assert run["name"] == "invoke_agent helper"
    assert run["trace"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert run["attrs"]["flowdesk.run_id"] == "r1" and run["attrs"]["flowdesk.status"] == "done"
    assert run["attrs"]["gen_ai.agent.name"] == "helper" and run["status"] == "UNSET"
    others = [s for s in spans if s is not run]
    names = sorted(s["name"] for s in others)  # Pydantic AI's own, all in this run
    assert names == ["chat function:model:", "chat function:model:", "execute_tool lookup",
                     "invoke_agent helper"], names  # fmt: skip
    assert {s["trace"] for s in others} == {run["trace"]}  # all in the run's trace
    by_id = {s["span"]: s for s in spans}
    top = [s for s in others if s["parent"] not in by_id or s["parent"] == run["span"]]
    assert top and all(s["parent"] == run["span"] for s in top), top
