"""A real process running a condition step whose nested step is retried;
it SIGKILLs itself during the nested step's second attempt.

Usage: python tests/driver_structure_worker.py DB LOG nested_retry [--tight]

Starts a run when the file has none, otherwise recovers the interrupted one.
The nested step appends ``n1:<attempt>`` to LOG (fsync'd) at each attempt:
attempt 1 fails (retryable), attempt 2 is killed, later attempts succeed,
or with ``--tight`` (a budget of 2 attempts) fail.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder, Step
from desktop_app.flow.definition import Policy
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    note: str = ""


class Flaky(Exception):
    retryable = True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("flow", choices=["nested_retry"])
    p.add_argument("--tight", action="store_true")
    args = p.parse_args()

    def n1(state: S, ctx) -> dict:
        with open(args.log, "a", encoding="utf-8") as fh:
            fh.write(f"n1:{ctx.attempt}\n")
            fh.flush()
            os.fsync(fh.fileno())
        if ctx.attempt == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if ctx.attempt == 1 or args.tight:
            raise Flaky(f"attempt {ctx.attempt} failed")
        return {"note": "done"}

    flow = (
        FlowBuilder("nested_retry", S)
        .condition("check", lambda s: True, [Step("n1", n1, Policy(retry=1 if args.tight else 3))])
        .compile()
    )
    store = open_store(args.db)
    engine = Engine(store, flows=[flow])
    if store.list_runs():
        for _run, outcome in engine.recover():
            print("recovered", getattr(outcome, "status", outcome))
    else:
        print("ran", engine.run("nested_retry", S()).status)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
