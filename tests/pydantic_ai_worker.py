"""A real process running (or resuming) a durable Pydantic AI run (S96).

Usage: python tests/pydantic_ai_worker.py DB (run PROMPT | resume RUN_ID) [--stream]

DB is a SQLite file or a ``postgresql://`` URL (opened as ``flowdesk --db DB`` does).

Builds ``tests.pydantic_ai_agents.make_helper()`` (see there for the
environment it reads) wrapped in ``FlowdeskAgent`` over DB
and runs PROMPT, or resumes RUN_ID. Prints ``run <id>`` as soon as the run
is stored, each streamed piece of text as ``text <text>`` with ``--stream``,
and ``<status> executed=<n> replayed=<n> output=<text>`` at the end (then
the question and the ``DeferredToolRequests`` approvals of a run that waits),
or ``canceled in_flight=<tool or None> <message>`` (exit 1) when the run was
canceled while it drove it (``AgentRunCanceledError``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

from desktop_app.bootstrap import open_services
from desktop_app.config import load_settings
from desktop_app.errors import AgentRunCanceledError
from desktop_app.integrations.pydantic_ai import FlowdeskAgent
from tests.pydantic_ai_agents import make_helper


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("action", choices=["run", "resume"])
    p.add_argument("arg")
    p.add_argument("--stream", action="store_true")
    a = p.parse_args()
    services = open_services(load_settings(db_path=a.db), flows=[])
    durable = FlowdeskAgent(make_helper(), services.agents)

    async def handler(_ctx: Any, events: Any) -> None:
        async for event in events:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                print("text", event.part.content, flush=True)
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                print("text", event.delta.content_delta, flush=True)

    stream = handler if a.stream else None
    try:
        if a.action == "run":
            run_id = uuid.uuid4().hex
            print("run", run_id, flush=True)
            res = await durable.run(a.arg, run_id=run_id, event_stream_handler=stream)
        else:
            res = await durable.resume(a.arg, event_stream_handler=stream)
    except AgentRunCanceledError as exc:  # `flowdesk cancel` while this process drove it
        print(f"canceled in_flight={exc.in_flight} {exc}")
        services.close()
        return 1
    print(f"{res.status} executed={res.executed} replayed={res.replayed} output={res.text}")
    if res.question:
        print("question", res.question)
    if isinstance(res.output, DeferredToolRequests):  # Pydantic AI's form of the wait
        print("deferred approvals", [(c.tool_name, c.args_as_dict()) for c in res.output.approvals])
    services.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
