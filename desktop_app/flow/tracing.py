"""OpenTelemetry spans for runs and steps (optional: only when the
``opentelemetry-api`` package is installed).

Each run is a span whose trace id is the run's ``ExecutionContext.trace_id``
(32 hex digits), so a run's spans join the trace of whatever started it; each
step attempt is a child span. Attributes carry ids only (run, flow, step,
status), never state, messages or secrets.

    from desktop_app.flow.tracing import trace_engine
    trace_engine(engine)            # uses the global tracer provider
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from desktop_app.flow.engine import Engine
from desktop_app.flow.events import Event, RunFinished, RunStarted, StepFinished, StepStarted


def trace_engine(engine: Engine, tracer_provider: Any = None) -> Any:
    """Subscribe a span recorder to ``engine.events``; returns the unsubscribe function.

    Raises:
        ImportError: OpenTelemetry is not installed (``pip install opentelemetry-sdk``).
    """
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

    tracer = trace.get_tracer("flowdesk", tracer_provider=tracer_provider)
    runs: dict[str, Any] = {}
    steps: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def parent_context(run_id: str) -> Any:
        context = dict(engine.store.get_run(run_id).context)
        raw = context.get("trace_id") or ""
        try:
            trace_id = int(raw, 16)
        except ValueError:
            trace_id = 0
        if not trace_id:
            return None  # no trace id given: a new trace
        remote = SpanContext(
            trace_id=trace_id,
            span_id=int.from_bytes(secrets.token_bytes(8), "big") or 1,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(NonRecordingSpan(remote))

    def on_event(event: Event) -> None:
        with lock:
            if isinstance(event, RunStarted):
                span = tracer.start_span(
                    f"run {event.flow_name}",
                    context=parent_context(event.run_id),
                    attributes={"flowdesk.run_id": event.run_id, "flowdesk.flow": event.flow_name},
                )
                runs[event.run_id] = span
            elif isinstance(event, StepStarted):
                run_span = runs.get(event.run_id)
                ctx = trace.set_span_in_context(run_span) if run_span is not None else None
                steps[(event.run_id, event.step_id)] = tracer.start_span(
                    f"step {event.step_id}",
                    context=ctx,
                    attributes={
                        "flowdesk.run_id": event.run_id,
                        "flowdesk.step": event.step_id,
                        "flowdesk.attempt": event.attempt,
                    },
                )
            elif isinstance(event, StepFinished):
                span = steps.pop((event.run_id, event.result.name), None)
                if span is not None:
                    span.set_attribute("flowdesk.status", event.result.status)
                    if event.result.status == "error":
                        span.set_status(Status(StatusCode.ERROR, event.result.error or ""))
                    span.end()
            elif isinstance(event, RunFinished):
                span = runs.pop(event.run_id, None)
                if span is not None:
                    span.set_attribute("flowdesk.status", event.status)
                    if event.status in ("failed", "timed_out"):
                        span.set_status(Status(StatusCode.ERROR, event.error or event.status))
                    span.end()

    return engine.events.subscribe(on_event)
