"""OpenTelemetry spans for runs, steps, model calls and tool calls (optional:
only when the ``opentelemetry-api`` package is installed; export needs
``pip install 'flowdesk[otel]'``, see :mod:`desktop_app.observability`).

Each run is a span whose trace id is the run's ``ExecutionContext.trace_id``
(32 hex digits, W3C trace-context), so a run's spans join the trace of
whatever started it; each step attempt is a child span. Agent runs, their
model calls and their tool calls are spans too (:func:`start_run_span`,
:func:`start_child_span`), named after the OpenTelemetry GenAI semantic
conventions (``chat <model>``, ``execute_tool <tool>``). Attributes carry ids
and names only (run, flow, step, status, model, tool), never state, messages,
tool inputs or secrets; an ERROR status says the exception's class or the
run's status, never an error's message.

    from desktop_app.flow.tracing import trace_engine
    trace_engine(engine)            # uses the global tracer provider
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from desktop_app.flow.engine import Engine
from desktop_app.flow.events import Event, RunFinished, RunStarted, StepFinished, StepStarted

#: attribute values OpenTelemetry accepts (we only ever send these)
AttrValue = str | bool | int | float


def new_trace_id() -> str:
    """A fresh W3C trace id: 32 lowercase hex digits, never all zeros."""
    while True:
        raw = secrets.token_hex(16)
        if int(raw, 16):
            return raw


def _otel_trace() -> Any:
    """``opentelemetry.trace``, or ``None`` when the API is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


@functools.lru_cache(maxsize=8)
def _tracer(tracer_provider: Any) -> Any:
    """The ``flowdesk`` tracer of a provider (``None``: the global one, a proxy
    until a provider is installed); cached, the SDK builds a new one per call."""
    from opentelemetry import trace

    return trace.get_tracer("flowdesk", tracer_provider=tracer_provider)


#: the trace id a root span started now takes (:class:`RunTraceIds`)
ROOT_TRACE_ID: contextvars.ContextVar[int] = contextvars.ContextVar("flowdesk_root_trace_id")


class RunTraceIds:
    """Marks an SDK id generator whose root spans take :data:`ROOT_TRACE_ID`
    when it is set (:mod:`desktop_app.observability` makes one from the SDK's
    ``RandomIdGenerator``): a run's span is then a root span in the run's
    trace. Under a tracer provider without one (a program's own), a run's
    span has a remote parent in that trace instead (:func:`_parent`), a span
    id no exporter receives."""


def _parent(trace: Any, trace_id: int) -> Any:
    """An OpenTelemetry context whose (remote) parent is in trace ``trace_id``."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    remote = SpanContext(
        trace_id=trace_id,
        span_id=int.from_bytes(secrets.token_bytes(8), "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _trace_id(text: str | None) -> int:
    """``text`` as a trace id, or 0 (a new trace) when it is missing or not 32
    hex digits."""
    try:
        tid = int(text or "", 16)
    except ValueError:
        return 0
    return tid if len(text or "") == 32 else 0


def start_run_span(
    name: str,
    trace_id: str | None,
    attributes: Mapping[str, AttrValue],
    tracer_provider: Any = None,
) -> Any:
    """Start a run's span in trace ``trace_id`` (32 hex digits; else a new
    trace): a root span when the provider's id generator is a
    :class:`RunTraceIds`, else a span with a remote parent in that trace.
    ``None`` when OpenTelemetry is not installed. End it with :func:`end_span`."""
    trace = _otel_trace()
    if trace is None:
        return None
    tid = _trace_id(trace_id)
    tracer = _tracer(tracer_provider)
    if not tid:
        return tracer.start_span(name, context=None, attributes=dict(attributes))
    provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
    if isinstance(getattr(provider, "id_generator", None), RunTraceIds):
        from opentelemetry.context import Context

        token = ROOT_TRACE_ID.set(tid)
        try:  # an empty context: no parent, whatever span is current
            return tracer.start_span(name, context=Context(), attributes=dict(attributes))
        finally:
            ROOT_TRACE_ID.reset(token)
    return tracer.start_span(name, context=_parent(trace, tid), attributes=dict(attributes))


def start_agent_span(agent: str, run_id: str, trace_id: str | None) -> Any:
    """Start an agent run's span, ``invoke_agent <agent>`` (GenAI semantic
    conventions), in ``trace_id`` on the global provider (see
    :func:`start_run_span`); ``None`` without OpenTelemetry."""
    return start_run_span(
        f"invoke_agent {agent}",
        trace_id,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "flowdesk.run_id": run_id,
        },
    )


def start_child_span(
    parent: Any, name: str, attributes: Mapping[str, AttrValue], tracer_provider: Any = None
) -> Any:
    """Start a span under ``parent`` (a span from :func:`start_run_span`);
    ``None`` when ``parent`` is ``None``."""
    trace = _otel_trace()
    if trace is None or parent is None:
        return None
    return _tracer(tracer_provider).start_span(
        name, context=trace.set_span_in_context(parent), attributes=dict(attributes)
    )


@contextlib.contextmanager
def current(span: Any) -> Iterator[None]:
    """Make ``span`` the current span while the block runs, so spans others
    start in it (a framework's own instrumentation: Pydantic AI's
    ``instrument=True``) are its children; nothing when ``span`` is ``None``.
    Does not end it."""
    if span is None:
        yield
        return
    from opentelemetry import trace

    with trace.use_span(span, end_on_exit=False):
        yield


def end_span(
    span: Any, *, error: str | None = None, attributes: Mapping[str, AttrValue] | None = None
) -> None:
    """Set ``attributes``, mark the span ERROR when ``error`` is given (its
    description: an exception's class name or a run's status, never a
    message, which may hold state, a message's text or a key), end it. A
    ``None`` span is ignored."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    for key, value in (attributes or {}).items():
        span.set_attribute(key, value)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


#: seconds the exit hook waits for an event being recorded to end (a thread
#: of the engine may hold the recorder's lock as the process exits)
EXIT_LOCK_S = 1.0

#: each live recorder's exit hook (:func:`end_open_spans` runs them)
_open_enders: list[Callable[[], None]] = []


def end_open_spans() -> None:
    """End the open spans of every recorder of this process as
    ``interrupted``, as its exit hook does: for a process about to leave by
    ``os._exit`` (``flowdesk agent`` past its grace), which runs no hook."""
    for end in list(_open_enders):
        end()


def trace_engine(engine: Engine, tracer_provider: Any = None) -> Callable[[], None]:
    """Subscribe a span recorder to ``engine.events``; returns the unsubscribe function.

    A run this process stops before its end (SIGTERM, Ctrl-C, the app
    closing) publishes no finish: at the process's exit its open spans end
    with ``flowdesk.status`` ``interrupted`` (the step attempt's span as an
    ERROR ``interrupted``, as an agent run's model call), so its trace
    shows where it stopped; the run's next attempt joins the same trace.
    ``kill -9`` leaves no exit hook to run: those spans are lost.

    Raises:
        ImportError: OpenTelemetry is not installed (the message gives the
            command that installs it: :func:`desktop_app.extras.install_command`).
    """
    if _otel_trace() is None:
        from desktop_app.extras import install_command

        raise ImportError(f"OpenTelemetry is not installed: {install_command('otel')}")
    runs: dict[str, Any] = {}
    steps: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def on_event(event: Event) -> None:
        with lock:
            if isinstance(event, RunStarted):
                context = dict(engine.store.get_run(event.run_id).context)
                runs[event.run_id] = start_run_span(
                    f"run {event.flow_name}",
                    context.get("trace_id"),
                    {"flowdesk.run_id": event.run_id, "flowdesk.flow": event.flow_name},
                    tracer_provider,
                )
            elif isinstance(event, StepStarted):
                run_span = runs.get(event.run_id)
                if run_span is not None:
                    steps[(event.run_id, event.step_id)] = start_child_span(
                        run_span,
                        f"step {event.step_id}",
                        {
                            "flowdesk.run_id": event.run_id,
                            "flowdesk.step": event.step_id,
                            "flowdesk.attempt": event.attempt,
                        },
                        tracer_provider,
                    )
            elif isinstance(event, StepFinished):
                span = steps.pop((event.run_id, event.result.name), None)
                # the exception's class only: its message may hold state or a key
                end_span(
                    span,
                    error=(event.result.error_type or "error")
                    if event.result.status == "error"
                    else None,
                    attributes={"flowdesk.status": event.result.status},
                )
            elif isinstance(event, RunFinished):
                span = runs.pop(event.run_id, None)
                failed = event.status in ("failed", "timed_out")
                # the status only: the run's error holds its step's message
                end_span(
                    span,
                    error=event.status if failed else None,
                    attributes={"flowdesk.status": event.status},
                )

    def end_open() -> None:
        if not lock.acquire(timeout=EXIT_LOCK_S):
            return
        try:
            for span in steps.values():
                end_span(span, error="interrupted", attributes={"flowdesk.status": "interrupted"})
            for span in runs.values():
                end_span(span, attributes={"flowdesk.status": "interrupted"})
            steps.clear()
            runs.clear()
        finally:
            lock.release()

    stop_recording: Callable[[], None] = engine.events.subscribe(on_event)
    atexit.register(end_open)  # before the provider's own exit hook (last in, first out)
    _open_enders.append(end_open)

    def unsubscribe() -> None:
        stop_recording()
        atexit.unregister(end_open)
        with contextlib.suppress(ValueError):
            _open_enders.remove(end_open)

    return unsubscribe
