"""Resumes one agent run in its own process (the agent-lease race test).

Usage: agent_lease_worker.py DB LOG RUN_ID

Its tool appends ``<pid> <q>`` to LOG (fsynced), prints ``tool-started`` and
then blocks reading one line from stdin, so the test decides when the tool
returns. Prints ``leased: <message>`` and exits 3 when another live process
holds the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import RunLeasedError
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


def main() -> int:
    db, log, run_id = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        with log.open("a") as fh:
            fh.write(f"{os.getpid()} {q}\n")
            fh.flush()
            os.fsync(fh.fileno())
        print("tool-started", flush=True)
        sys.stdin.readline()
        return f"result for {q}"

    store = open_store(db)
    model = ScriptedModel([{"tool": "lookup", "args": {"q": "a"}}, "done: a"])
    agent = Agent("helper", model, SqliteAgentStore(store), [lookup])
    try:
        res = agent.resume(run_id)
    except RunLeasedError as exc:
        print(f"leased: {exc}", flush=True)
        return 3
    print(f"status {res.status} {res.text}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
