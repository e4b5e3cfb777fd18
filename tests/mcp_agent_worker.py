"""A real process that drives one agent run over the test MCP server (stdio).

Usage: python tests/mcp_agent_worker.py DB RUN_ID NOTES_LOG MODE

MODE ``first``: the model asks for ``notes__append {"text": "hello"}``; once
the tool result is journaled (the ``tool_end`` event) the worker prints
``TOOL_JOURNALED`` and waits on stdin for its parent to kill it.
MODE ``again``: resume; the model asks for the identical call once more, then
answers ``noted``. MODE ``hang``: the model asks for ``notes__append_and_hang``
(the server appends, then never answers). MODE ``after-hang``: resume; the
model answers ``ok``. Resuming modes print the result as one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.mcp import McpServer
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "first": [{"id": "c1", "tool": "notes__append", "args": {"text": "hello"}}, "unreached"],
    "again": [{"id": "c2", "tool": "notes__append", "args": {"text": "hello"}}, "noted"],
    "hang": [{"id": "h1", "tool": "notes__append_and_hang", "args": {"text": "x"}}],
    "after-hang": ["ok"],
}


def main() -> int:
    db, run_id, notes_log, mode = sys.argv[1:5]
    command = [sys.executable, "-m", "tests.mcp_notes_server", notes_log, "stdio"]
    store = open_store(Path(db))
    with McpServer("notes", command=command, cwd=REPO, timeout_s=30) as server:
        model = ScriptedModel(SCRIPTS[mode])
        agent = Agent("notes", model, SqliteAgentStore(store), server.tools())
        last = None
        for event in agent.stream("note hello", run_id=run_id):
            if event.kind == "tool_end" and mode == "first":
                print("TOOL_JOURNALED", flush=True)
                sys.stdin.read()  # the parent SIGKILLs us here
            if event.kind == "tool_start" and mode == "hang":
                print("TOOL_STARTED", flush=True)
            last = event
        assert last is not None and last.response is not None
        print(json.dumps({"status": last.response.status, "text": last.response.text}), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
