"""A real process running a flow whose step starts an agent child run.

Usage: python tests/children_worker.py DB LOG MODE

* ``start``: run flow ``trip`` (version 1); its step ``plan`` dispatches an
  agent child, and the process SIGKILLs itself right after the child
  answered, before the step's checkpoint commits.
* ``upgrade``: with ``trip`` at version 2, fork the killed run onto it.
* ``resume``: with ``trip`` at version 1, resume the killed run.

Every model call appends ``model-call`` to LOG (fsync'd), so the parent
counts calls across processes. The final status is printed as ``status X``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.agent.models import ScriptedModel
from desktop_app.agent.runtime import Agent, agent_step
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


class Trip(BaseModel):
    goal: str
    plan: str | None = None
    booked: bool = False


class LoggingModel(ScriptedModel):
    def __init__(self, log: Path) -> None:
        super().__init__(["Take the 9:00 train."] * 5)
        self.log = log

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write("model-call\n")
            fh.flush()
            os.fsync(fh.fileno())
        return super().complete(*args, **kwargs)


def main() -> int:
    db, log, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    store = open_store(db)
    agent = Agent("planner", LoggingModel(log), SqliteAgentStore(store))
    plan = agent_step(agent, lambda s: s.goal, into="plan")

    def plan_step(state: Trip, ctx: Any) -> dict[str, Any]:
        out = plan(state, ctx)
        if mode == "start":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    version = "2" if mode == "upgrade" else "1"
    flow = (
        FlowBuilder("trip", Trip, version=version)
        .step("plan", plan_step)
        .step("book", lambda s: {"booked": True})
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    if mode == "start":
        engine.run("trip", Trip(goal="Get to Lyon"))
        return 3  # never reached: the step kills the process
    (run,) = [r for r in store.list_runs() if r.status != "canceled"]
    res = engine.fork_onto_current(run.run_id) if mode == "upgrade" else engine.resume(run.run_id)
    print(f"status {res.status} {res.run_id}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
