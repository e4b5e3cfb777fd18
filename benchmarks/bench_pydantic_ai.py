"""What making a Pydantic AI agent durable on Flowdesk costs per step.

One agent (a ``FunctionModel``: no network, so only the framework and the
journal are timed) makes ``--turns`` model requests, each asking for one
call of a function tool, then answers. Contenders, interleaved
(``_harness.interleave``): the plain ``agent.run`` and ``FlowdeskAgent.run``
on a fresh SQLite file (``synchronous=FULL``). Reported: seconds per turn
(one model request + one tool call = two journaled steps), the durable
run's extra time per journaled step, and the database bytes per turn.

    python benchmarks/bench_pydantic_ai.py [--turns 40] [--rounds 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _harness import Row, header, interleave, ratios, stat, table
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from desktop_app.integrations.pydantic_ai import FlowdeskAgent
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


def make_agent(turns: int) -> Agent[None, str]:
    def reply(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        made = sum(isinstance(m, ModelResponse) for m in messages)
        if made >= turns:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": f"item {made}"}, f"c{made}")])

    agent = Agent(FunctionModel(reply), name="bench")

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"result for {q}" * 4

    return agent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--turns", type=int, default=40)  # Pydantic AI allows 50 requests a run
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", type=Path, default=None)
    a = p.parse_args()
    header("bench_pydantic_ai: a Pydantic AI run, plain vs durable on Flowdesk", **vars(a))
    agent = make_agent(a.turns)
    workdir = Path(tempfile.mkdtemp(prefix="bench-pai-", dir=a.dir))
    sizes: list[float] = []
    counter = iter(range(1_000_000))

    def plain() -> float:
        start = time.perf_counter()
        out = asyncio.run(agent.run("go")).output
        assert out == "done"
        return (time.perf_counter() - start) / a.turns

    def durable() -> float:
        db = workdir / f"r{next(counter)}.db"
        conn = open_connection(db)
        migrations.apply(conn)
        conn.close()
        store = open_store(db)
        empty = db.stat().st_size
        wrapped = FlowdeskAgent(agent, SqliteAgentStore(store))
        start = time.perf_counter()
        out = asyncio.run(wrapped.run("go"))
        took = (time.perf_counter() - start) / a.turns
        assert out.output == "done" and out.executed == 2 * a.turns + 1, out
        store.close()
        grown = db.stat().st_size - empty  # a clean close checkpointed the WAL into it
        sizes.append(grown / a.turns)
        return took

    got = interleave({"plain": plain, "durable": durable}, a.rounds)
    extra = [(d - p) / 2 for d, p in zip(got["durable"], got["plain"], strict=True)]
    table(
        [
            Row("plain agent.run, per turn", stat(got["plain"]).fmt(1000, unit=" ms")),
            Row("FlowdeskAgent.run, per turn", stat(got["durable"]).fmt(1000, unit=" ms")),
            Row("durable / plain", stat(ratios(got["durable"], got["plain"])).fmt(digits=2)),
            Row("extra per journaled step", stat(extra).fmt(1000, unit=" ms")),
            Row("database bytes per turn", stat(sizes).fmt(digits=0, unit=" B")),
        ]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
