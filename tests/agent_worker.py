"""A real process running (or resuming) a durable agent run; it can SIGKILL
itself inside a tool call.

Usage: python tests/agent_worker.py DB LOG CASE [--kill-in-tool Q]

CASE ``ask`` (S35), ``stream`` (S38) or ``flow`` (S40: a flow step that
dispatches the agent). With no run in the file it starts one; otherwise a
freshly built agent (and engine) over the same file resumes it. Every tool
call and every model call appends a line to LOG (fsync'd) before it returns,
so the parent counts executions across processes. ``--kill-in-tool Q`` (or
``--kill-after-agent`` for ``flow``) SIGKILLs the process at that point.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.agent.runtime import agent_step
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

ARGS = argparse.Namespace()
SCRIPT: list[Any] = [
    {"tool": "lookup", "args": {"q": "a"}},
    {"tool": "lookup", "args": {"q": "b"}},
    "done: a and b",
]


def log(line: str) -> None:
    with open(ARGS.log, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class LoggedModel(ScriptedModel):
    """A scripted model that logs each call with the tool results it was shown."""

    def complete(self, messages: Sequence[Any], tools: Sequence[dict[str, Any]]) -> Any:
        shown = [m.content for m in messages if m.role == "tool"]
        log(f"model {messages[0].content!r} tools={shown}")
        return super().complete(messages, tools)


@tool
def lookup(q: str) -> str:
    """Look something up."""
    log(f"tool {q}")
    if ARGS.kill_in_tool == q:
        die()
    return f"result for {q}"


class Q(BaseModel):
    question: str = ""
    answer: str | None = None
    n: int = 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("case", choices=["ask", "stream", "flow"])
    p.add_argument("--kill-in-tool")
    p.add_argument("--kill-after-agent", action="store_true")
    p.parse_args(namespace=ARGS)
    store = open_store(ARGS.db)
    astore = SqliteAgentStore(store)
    existing = astore.list()
    # a resumed run has already consumed the turns before the crash; the model
    # only answers what is still to come (counted from the log by the parent)
    logged = Path(ARGS.log).read_text().splitlines() if Path(ARGS.log).exists() else []
    model = LoggedModel(SCRIPT[sum(line.startswith("model") for line in logged) :])
    if ARGS.case == "flow":
        model = LoggedModel(["Paris is the capital."])
        agent = Agent("geo", model, astore)
        ask = agent_step(agent, lambda s: s.question, into="answer")

        def ask_step(s: Q, ctx: Any) -> dict[str, Any]:
            out = ask(s, ctx)
            log("ask step returned")
            if ARGS.kill_after_agent:
                die()  # the child finished; this step's checkpoint never happened
            return out

        flow = (
            FlowBuilder("quiz", Q)
            .step("ask", ask_step)
            .step("count", lambda s: log("count") or {"n": 1})
            .chain()
            .compile()
        )
        engine = Engine(store, flows=[flow])
        if store.list_runs(flow_name="quiz"):
            for _run, outcome in engine.recover():
                print("recovered", getattr(outcome, "status", outcome))
        else:
            print("ran", engine.run("quiz", Q(question="Capital of France?")).status)
    else:
        agent = Agent("helper", model, astore, [lookup])
        if existing:
            (run,) = existing
            if ARGS.case == "stream":
                events = list(agent.resume_stream(run.run_id))
                print("streamed", "".join(e.text for e in events if e.kind == "delta"))
                print("tools", [e.tool for e in events if e.kind == "tool_start"])
                print("resumed", events[-1].response.status if events[-1].response else None)
            else:
                print("resumed", agent.resume(run.run_id).status)
        elif ARGS.case == "stream":
            for ev in agent.stream("find a then b"):
                print("event", ev.kind, ev.tool, flush=True)
        else:
            print("asked", agent.ask("find a then b").status)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
