"""A real process that drives an agent run over server-filesystem and dies
with SIGKILL inside a tool call, after the server acted and before the
result is journaled (the window in which a crash leaves a call in flight).

Usage: python tests/mcp_crash_worker.py DB RUN_ID SERVER_COMMAND_JSON MODE

MODE ``kill-in:write_file``: the model asks ``fs__write_file`` for
``note.txt`` with ``v1`` in the server's folder; MODE
``kill-in:create_directory``: ``fs__create_directory`` for ``sub``. Either
way the process kills itself once the server answered. MODE ``resume``:
resume the run; the model answers ``ok``; prints the result as one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.mcp import McpServer
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


def main() -> int:
    db, run_id, command_json, mode = sys.argv[1:5]
    command = json.loads(command_json)
    folder = Path(command[-1])
    store = SqliteAgentStore(open_store(Path(db)))
    with McpServer("fs", command=command, timeout_s=60) as server:
        tools = server.tools()
        if mode == "resume":
            res = Agent("fs", ScriptedModel(["ok"]), store, tools).resume(run_id)
            print(json.dumps({"status": res.status, "text": res.text}), flush=True)
            return 0
        tool = mode.split(":", 1)[1]
        args: dict[str, Any] = (
            {"path": str(folder / "note.txt"), "content": "v1"}
            if tool == "write_file"
            else {"path": str(folder / "sub")}
        )
        victim = next(t for t in tools if t.name == f"fs__{tool}")
        real_call = victim.call

        def call_then_die(arguments: dict[str, Any]) -> str:
            real_call(arguments)  # the server acted; its answer is never journaled
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

        victim.call = call_then_die  # type: ignore[method-assign]
        model = ScriptedModel([{"tool": f"fs__{tool}", "args": args}, "unreached"])
        Agent("fs", model, store, tools).ask("write", run_id=run_id)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
