"""The spans ``trace_engine`` records: names, attributes (ids and names only),
status and description, parent-child links and the trace a run joins, plus
the span helpers the agent runtime uses."""

from __future__ import annotations

import logging
import re
import sys

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, ExecutionContext, FlowBuilder
from desktop_app.flow.events import RunFinished, RunStarted, StepFinished, StepResult, StepStarted

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from desktop_app.flow import tracing
from tests.cli_support import install_hint

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class S(BaseModel):
    n: int = 0
    answer: str | None = None


@pytest.fixture
def recorded():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def by_name(exporter) -> dict:
    spans = exporter.get_finished_spans()
    out = {s.name: s for s in spans}
    assert len(out) == len(spans), [s.name for s in spans]
    return out


def test_a_completed_run_is_a_span_in_the_contexts_trace_with_one_child_per_step(
    sqlite_store, recorded
):
    provider, exporter = recorded
    flow = FlowBuilder("ok", S).step("a", lambda s: {"n": 1}).step("b", lambda s: None)
    engine = Engine(sqlite_store, flows=[flow.chain().compile()])
    tracing.trace_engine(engine, provider)
    res = engine.run("ok", S(), context=ExecutionContext(trace_id=TRACE))
    assert res.status == "completed"
    spans = by_name(exporter)
    assert set(spans) == {"run ok", "step a", "step b"}
    run = spans["run ok"]
    assert dict(run.attributes) == {
        "flowdesk.run_id": res.run_id,
        "flowdesk.flow": "ok",
        "flowdesk.status": "completed",
    }
    assert run.status.status_code is StatusCode.UNSET
    # the run span's parent is a remote, sampled span in the given trace
    assert run.parent is not None and run.parent.is_remote
    assert format(run.parent.trace_id, "032x") == TRACE
    assert run.parent.span_id != 0
    assert run.parent.trace_flags.sampled
    assert run.context.trace_flags.sampled
    for sid in ("a", "b"):
        step = spans[f"step {sid}"]
        assert step.parent.span_id == run.context.span_id
        assert step.parent.is_remote is False
        assert format(step.context.trace_id, "032x") == TRACE
        assert dict(step.attributes) == {
            "flowdesk.run_id": res.run_id,
            "flowdesk.step": sid,
            "flowdesk.attempt": 1,
            "flowdesk.status": "done",
        }
        assert step.status.status_code is StatusCode.UNSET
        assert step.instrumentation_scope.name == "flowdesk"


def test_a_failed_step_and_run_are_marked_error_with_its_class_never_its_message(
    sqlite_store, recorded
):
    """A step's error message may hold state values or a key (a tryout's
    step put an ``sk-live-...`` key in it, and both spans carried it): the
    spans say the exception's class and the run's status only."""
    provider, exporter = recorded

    def boom(s):
        raise ValueError("disk on fire with key sk-live-0123456789abcdef")

    flow = FlowBuilder("bad", S, retry=1).step("a", boom).compile()
    engine = Engine(sqlite_store, flows=[flow])
    tracing.trace_engine(engine, provider)
    res = engine.run("bad", S(), context=ExecutionContext(trace_id=TRACE))
    assert res.status == "failed"
    spans = exporter.get_finished_spans()
    steps = [s for s in spans if s.name == "step a"]
    assert [s.attributes["flowdesk.attempt"] for s in steps] == [1, 2]
    for s in steps:
        assert s.attributes["flowdesk.status"] == "error"
        assert (s.status.status_code, s.status.description) == (StatusCode.ERROR, "ValueError")
    (run,) = [s for s in spans if s.name == "run bad"]
    assert run.attributes["flowdesk.status"] == "failed"
    assert (run.status.status_code, run.status.description) == (StatusCode.ERROR, "failed")
    assert "sk-live-0123456789abcdef" in (res.error or "")  # the run's own record keeps it
    for s in spans:
        shown = [s.status.description, *map(str, s.attributes.values())]
        assert not any("sk-live" in x or "disk on fire" in x for x in shown if x), s.name


def test_a_run_without_a_trace_id_gets_one_and_its_span_joins_that_trace(sqlite_store, recorded):
    provider, exporter = recorded
    flow = FlowBuilder("own", S).step("a", lambda s: None).compile()
    engine = Engine(sqlite_store, flows=[flow])
    tracing.trace_engine(engine, provider)
    res = engine.run("own", S(), context=ExecutionContext(tenant_id="t"))
    stored = sqlite_store.get_run(res.run_id).context["trace_id"]
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "run own"]
    assert format(run.context.trace_id, "032x") == stored
    assert format(run.parent.trace_id, "032x") == stored


@pytest.mark.parametrize("tid", [None, "", "g" * 32, "xyz" * 11, TRACE[:31], TRACE + "0", "0" * 32])
def test_a_span_given_no_valid_trace_id_starts_a_new_trace(recorded, tid):
    provider, exporter = recorded
    tracing.end_span(tracing.start_run_span("r", tid, {}, provider))
    tracing.end_span(tracing.start_run_span("r", tid, {}, provider))
    first, second = exporter.get_finished_spans()
    assert first.parent is None and second.parent is None
    assert first.context.trace_id != second.context.trace_id


def _restart(engine, run_id: str, flow_name: str) -> None:
    """Publish a RunStarted for a stored run, as the engine does when it drives one."""
    engine.events.publish(RunStarted(run_id, flow_name))


def test_events_of_runs_the_recorder_did_not_start_are_ignored_and_missing_messages_are_named(
    sqlite_store, recorded, caplog
):
    provider, exporter = recorded
    flow = FlowBuilder("ask", S).await_input("q", "answer").step("b", lambda s: None).chain()
    engine = Engine(sqlite_store, flows=[flow.compile()])
    stop = tracing.trace_engine(engine, provider)
    res = engine.run("ask", S(), context=ExecutionContext(trace_id=TRACE))
    assert res.status == "waiting"
    exporter.clear()
    caplog.clear()  # the engine's own INFO lines about the run above
    # step events of a run never started here, and finishes of unknown spans
    with caplog.at_level(logging.ERROR, logger="desktop_app.flow.events"):
        engine.events.publish(StepStarted("elsewhere", "x", 1))
        engine.events.publish(StepFinished("elsewhere", StepResult("x", "done", None, 0.0)))
    with caplog.at_level(logging.ERROR, logger="desktop_app.flow.events"):
        engine.events.publish(RunFinished("elsewhere", "failed", "nope"))
    assert exporter.get_finished_spans() == ()
    # ignored quietly: the recorder did not fail on them (the bus would log it)
    assert caplog.records == []
    # a step that errs without a message, then the run times out without one
    _restart(engine, res.run_id, "ask")
    engine.events.publish(StepStarted(res.run_id, "z", 3))
    engine.events.publish(StepFinished(res.run_id, StepResult("z", "error", None, 0.0)))
    engine.events.publish(RunFinished(res.run_id, "timed_out", None))
    spans = by_name(exporter)
    z = spans["step z"]
    assert (z.status.status_code, z.status.description) == (StatusCode.ERROR, "error")
    assert z.attributes["flowdesk.attempt"] == 3
    run = spans["run ask"]
    assert (run.status.status_code, run.status.description) == (StatusCode.ERROR, "timed_out")
    assert run.attributes["flowdesk.status"] == "timed_out"
    assert format(run.context.trace_id, "032x") == TRACE
    # a finished run's span is gone: a second finish records nothing more
    engine.events.publish(RunFinished(res.run_id, "failed", "late"))
    assert len(exporter.get_finished_spans()) == 2
    stop()


def test_a_failed_run_without_a_message_a_timed_out_one_with_one_and_a_canceled_one(
    sqlite_store, recorded
):
    provider, exporter = recorded
    flow = FlowBuilder("w", S).await_input("q", "answer").compile()
    engine = Engine(sqlite_store, flows=[flow])
    tracing.trace_engine(engine, provider)
    ids = [engine.run("w", S()).run_id for _ in range(3)]
    exporter.clear()
    for rid in ids:
        _restart(engine, rid, "w")
    engine.events.publish(RunFinished(ids[0], "failed", None))
    engine.events.publish(RunFinished(ids[1], "timed_out", "past the deadline"))
    engine.events.publish(RunFinished(ids[2], "canceled", "by a person"))
    runs = {s.attributes["flowdesk.run_id"]: s for s in exporter.get_finished_spans()}
    assert (runs[ids[0]].status.status_code, runs[ids[0]].status.description) == (
        StatusCode.ERROR,
        "failed",
    )
    assert (runs[ids[1]].status.status_code, runs[ids[1]].status.description) == (
        StatusCode.ERROR,
        "timed_out",  # its status, not its error's words
    )
    assert runs[ids[2]].status.status_code is StatusCode.UNSET
    assert runs[ids[2]].attributes["flowdesk.status"] == "canceled"


def test_after_unsubscribing_nothing_is_recorded(sqlite_store, recorded):
    provider, exporter = recorded
    flow = FlowBuilder("u", S).step("a", lambda s: None).compile()
    engine = Engine(sqlite_store, flows=[flow])
    stop = tracing.trace_engine(engine, provider)
    engine.run("u", S())
    assert len(exporter.get_finished_spans()) == 2
    stop()
    engine.run("u", S())
    assert len(exporter.get_finished_spans()) == 2


def test_the_span_helpers(recorded):
    provider, exporter = recorded
    run = tracing.start_run_span("agent x", TRACE, {"k": "v", "n": 2}, provider)
    child = tracing.start_child_span(run, "chat m", {"gen_ai.model": "m"}, provider)
    assert tracing.start_child_span(None, "orphan", {}, provider) is None
    tracing.end_span(None, error="ignored")
    tracing.end_span(child, attributes={"tokens": 5})
    tracing.end_span(run, error="it broke", attributes={"flowdesk.status": "failed"})
    spans = by_name(exporter)
    assert dict(spans["chat m"].attributes) == {"gen_ai.model": "m", "tokens": 5}
    assert spans["chat m"].parent.span_id == spans["agent x"].context.span_id
    assert spans["chat m"].status.status_code is StatusCode.UNSET
    agent = spans["agent x"]
    assert dict(agent.attributes) == {"k": "v", "n": 2, "flowdesk.status": "failed"}
    assert (agent.status.status_code, agent.status.description) == (StatusCode.ERROR, "it broke")
    assert format(agent.context.trace_id, "032x") == TRACE


def test_without_opentelemetry_the_helpers_do_nothing_and_tracing_is_refused(
    monkeypatch, sqlite_store
):
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert tracing.start_run_span("r", TRACE, {}) is None
    assert tracing.start_child_span(object(), "c", {}) is None
    engine = Engine(sqlite_store, flows=[])
    with pytest.raises(ImportError) as err:
        tracing.trace_engine(engine)
    assert str(err.value) == f"OpenTelemetry is not installed: {install_hint('otel')}"


def test_new_trace_ids_are_32_lowercase_hex_digits_and_differ():
    ids = {tracing.new_trace_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) and int(i, 16) for i in ids)


def test_an_all_zero_draw_is_drawn_again(monkeypatch):
    draws = iter(["0" * 32, TRACE])
    monkeypatch.setattr(tracing.secrets, "token_hex", lambda n: next(draws))
    assert tracing.new_trace_id() == TRACE


def test_the_remote_parent_span_id_is_never_zero(monkeypatch, recorded):
    provider, exporter = recorded
    monkeypatch.setattr(tracing.secrets, "token_bytes", lambda n: b"\0" * n)
    span = tracing.start_run_span("r", TRACE, {}, provider)
    tracing.end_span(span)
    (got,) = exporter.get_finished_spans()
    assert got.parent.span_id == 1
    assert got.parent.trace_id == int(TRACE, 16)
