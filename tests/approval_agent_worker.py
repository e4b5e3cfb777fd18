"""A real process driving an agent run whose tool requires approval (S88); it
can SIGKILL itself right after the approval is journaled, before the call.

Usage: python tests/approval_agent_worker.py DB LOG URL ask
       python tests/approval_agent_worker.py DB LOG URL answer TEXT [--kill-after-approval]
       python tests/approval_agent_worker.py DB LOG URL resume
       python tests/approval_agent_worker.py DB LOG URL race TEXT --start-at T --every S

The model is an OpenAI-compatible server at URL (the test's scripted one on
127.0.0.1). The tool ``record_value(value)`` is a Python tool built with
``@tool(requires_approval=True)``; each execution appends ``record <value>``
to LOG (fsync'd), so the parent counts executions across processes.
``--kill-after-approval`` SIGKILLs the process as soon as the transaction
that journals the person's decision has committed. Prints ``status
<status>`` and, when the run waits, ``question <question>``.

``race`` answers every run of the database, oldest first, the i-th
at the wall-clock instant ``T + i*S`` (UTC epoch seconds), as another
process does at the same instants: per run it prints ``done <i> <status>``
or ``refused <i> <error class>: <message>`` (a typed Flowdesk error).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.agent import Agent, tool
from desktop_app.agent.approvals import APPROVAL_PREFIX
from desktop_app.agent.openai_compat import OpenAICompatibleModel
from desktop_app.errors import FlowdeskError
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.instant import release_at

ARGS = argparse.Namespace()


@tool(requires_approval=True)
def record_value(value: str) -> str:
    """Record a value in the ledger."""
    with open(ARGS.log, "a", encoding="utf-8") as fh:
        fh.write(f"record {value}\n")
        fh.flush()
        os.fsync(fh.fileno())
    return f"recorded {value}"


class KillAfterApproval(SqliteAgentStore):
    """The agent store, dying (SIGKILL) once an approval row has committed."""

    def update(self, run_id: str, now: float, **kw: Any) -> None:
        super().update(run_id, now, **kw)
        tool_row = kw.get("tool")
        if tool_row is not None and tool_row[0].startswith(APPROVAL_PREFIX):
            os.kill(os.getpid(), signal.SIGKILL)


def ledger_agent(astore: SqliteAgentStore, url: str) -> Agent:
    """The agent every action drives (its one tool requires approval)."""
    model = OpenAICompatibleModel(url, "m", stream=False)
    return Agent("ledger", model, astore, [record_value])


def race(agent: Agent, astore: SqliteAgentStore) -> None:
    # every run, in the order they were made (not only those still waiting:
    # a process that starts late must still number them as the other does)
    runs = sorted(astore.list(), key=lambda r: (r.created_at, r.run_id))
    for i, run in enumerate(runs):
        at = ARGS.start_at + i * ARGS.every
        release_at(at)  # at the instant the other process is released
        try:
            res = agent.resume_input(run.run_id, ARGS.text)
        except FlowdeskError as exc:
            print(f"refused {i} {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"done {i} {res.status}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("url")
    p.add_argument("action", choices=["ask", "answer", "resume", "race"])
    p.add_argument("text", nargs="?")
    p.add_argument("--kill-after-approval", action="store_true")
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--every", type=float, default=0.0)
    p.parse_args(namespace=ARGS)
    store = open_store(ARGS.db)
    astore = (KillAfterApproval if ARGS.kill_after_approval else SqliteAgentStore)(store)
    agent = ledger_agent(astore, ARGS.url)
    if ARGS.action == "race":
        race(agent, astore)
        store.close()
        return 0
    if ARGS.action == "ask":
        res = agent.ask("Record the reviewed value.")
    else:
        (run,) = astore.list()
        if ARGS.action == "answer":
            res = agent.resume_input(run.run_id, ARGS.text)
        else:
            res = agent.resume(run.run_id)
    print("status", res.status)
    if res.question is not None:
        print("question", res.question)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
