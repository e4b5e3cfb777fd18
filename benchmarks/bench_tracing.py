"""The cost of OTLP export on durable steps and agent turns, interleaved (A B, B A, ...) in one run.

    python benchmarks/bench_tracing.py [--runs 100] [--steps 10] [--repeat 8] [--synchronous NORMAL]

A: no exporter configured (what every run does without
``OTEL_EXPORTER_OTLP_ENDPOINT``). B: the SDK tracer provider with a batch
processor and the OTLP/HTTP exporter sending to a receiver on 127.0.0.1 in
another process (the wiring ``flowdesk`` installs when the endpoint is set).
Prints median µs per durable step (10-step linear flows, every step its own
commit) and per agent run (ScriptedModel, one tool call, two model turns),
and B/A ratios. ``synchronous=NORMAL`` by default: without a per-commit
fsync the numbers show the CPU cost of the spans instead of disk noise.
Needs ``flowdesk[otel]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic import BaseModel

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.tracing import trace_engine
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

RECEIVER = """
import sys
from tests.otlp_receiver import OtlpReceiver
with OtlpReceiver() as r:
    print(r.endpoint, flush=True)
    sys.stdin.read()
    print(len(r.spans), flush=True)
"""


class Counter(BaseModel):
    n: int = 0


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


SYNCHRONOUS = ["NORMAL"]


def fresh_store(folder: Path, name: str):
    path = folder / f"{name}.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return open_store(path, synchronous=SYNCHRONOUS[0])  # type: ignore[arg-type]


def step_us(folder: Path, name: str, runs: int, steps: int, provider: object | None) -> float:
    b = FlowBuilder("bench", Counter)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    store = fresh_store(folder, name)
    engine = Engine(store, flows=[b.chain().compile()])
    if provider is not None:
        trace_engine(engine, provider)
    t0 = time.perf_counter()
    for _ in range(runs):
        assert engine.run("bench", Counter()).status == "completed"
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed / (runs * steps) * 1e6


def agent_us(folder: Path, name: str, runs: int) -> float:
    store = fresh_store(folder, name)
    agents = SqliteAgentStore(store)
    t0 = time.perf_counter()
    for i in range(runs):
        model = ScriptedModel([{"tool": "echo", "args": {"text": str(i)}}, "done"])
        assert Agent("bench", model, agents, [echo]).ask("go").status == "done"
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed / runs * 1e6


class Switch:
    """A global tracer provider that delegates to the SDK one only while on
    (OpenTelemetry allows one global provider per process)."""

    def __init__(self, sdk: TracerProvider) -> None:
        self.sdk = sdk
        self.on = False
        self.off = trace.NoOpTracerProvider()

    def get_tracer(self, *args: object, **kwargs: object):
        return (self.sdk if self.on else self.off).get_tracer(*args, **kwargs)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeat", type=int, default=8)
    p.add_argument("--synchronous", default="NORMAL", choices=["NORMAL", "FULL"])
    args = p.parse_args()
    SYNCHRONOUS[0] = args.synchronous
    repo = Path(__file__).resolve().parents[1]
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
    )
    endpoint = receiver.stdout.readline().strip()  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        sdk = TracerProvider()
        sdk.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
        )
        switch = Switch(sdk)
        trace.set_tracer_provider(switch)  # type: ignore[arg-type]
        folder = Path(tmp)
        results: dict[str, list[float]] = {"A step": [], "B step": [], "A agent": [], "B agent": []}
        for i in range(args.repeat):
            order = (("A", None), ("B", sdk))
            for label, provider in order if i % 2 == 0 else order[::-1]:  # A B B A ...
                switch.on = provider is not None
                results[f"{label} step"].append(
                    step_us(folder, f"{label}{i}s", args.runs, args.steps, provider)
                )
                results[f"{label} agent"].append(agent_us(folder, f"{label}{i}a", args.runs))
        sdk.shutdown()
        med = {k: statistics.median(v) for k, v in results.items()}
        for what in ("step", "agent"):
            a, b = med[f"A {what}"], med[f"B {what}"]
            print(
                f"{what:5}  no exporter {a:9.1f} us  OTLP export {b:9.1f} us  ratio {b / a:.2f}"
                f"  (medians of {args.repeat})"
            )
    received, _ = receiver.communicate("")
    print(f"spans received: {received.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
