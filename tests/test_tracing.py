"""OpenTelemetry: each run and step is a span in the context's trace."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, ExecutionContext, FlowBuilder

otel = pytest.importorskip("opentelemetry.sdk.trace")


class S(BaseModel):
    n: int = 0


def test_runs_and_steps_are_spans_with_the_context_trace_id(sqlite_store):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from desktop_app.flow.tracing import trace_engine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flow = (
        FlowBuilder("traced", S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: 1 / 0)
        .chain()
        .compile()
    )
    engine = Engine(sqlite_store, flows=[flow])
    trace_engine(engine, provider)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    res = engine.run("traced", S(), context=ExecutionContext(trace_id=trace_id, tenant_id="t"))
    assert res.status == "failed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"run traced", "step a", "step b"}
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {trace_id}
    run_span = spans["run traced"]
    assert spans["step a"].parent.span_id == run_span.context.span_id
    assert spans["step b"].status.status_code.name == "ERROR"
    assert run_span.attributes["flowdesk.run_id"] == res.run_id
    assert all("n" not in dict(s.attributes) for s in spans.values())  # ids only, no state
