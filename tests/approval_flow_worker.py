"""A real process running (or answering, or recovering) a flow whose step asks
a person to approve a value read from a file; it can SIGKILL itself between
the answer and the step's completion (S87).

Usage: python tests/approval_flow_worker.py DB LOG PAYLOAD start|recover
       python tests/approval_flow_worker.py DB LOG PAYLOAD answer VALUE [--kill-after-answer]

The step reads PAYLOAD (a file the test rewrites between processes, as a
model asked again after a crash may propose another value), asks
``{"question": "Record this value?", "value": <PAYLOAD>}``, and on "yes"
appends ``record <value>`` to LOG (fsync'd). ``--kill-after-answer`` SIGKILLs
the process once the step got its answer, before it records anything or
completes. Prints ``status <run status>`` and one ``wait <id> <prompt>`` per
pending question.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store

ARGS = argparse.Namespace()


def log(line: str) -> None:
    with open(ARGS.log, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class S(BaseModel):
    recorded: str = ""


def approve(s: S, ctx: Any) -> dict[str, Any]:
    value = Path(ARGS.payload).read_text()
    answer = ctx.interrupt({"question": "Record this value?", "value": value})
    if ARGS.kill_after_answer:
        os.kill(os.getpid(), signal.SIGKILL)
    if answer != "yes":
        return {"recorded": ""}
    log(f"record {value}")
    return {"recorded": value}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("payload")
    p.add_argument("action", choices=["start", "answer", "recover"])
    p.add_argument("value", nargs="?")
    p.add_argument("--kill-after-answer", action="store_true")
    p.parse_args(namespace=ARGS)
    store = open_store(ARGS.db)
    flow = FlowBuilder("review", S).step("approve", approve).chain().compile()
    engine = Engine(store, flows=[flow])
    if ARGS.action == "start":
        run_id = engine.run("review", S()).run_id
    else:
        (run,) = store.list_runs(flow_name="review")
        run_id = run.run_id
        if ARGS.action == "answer":
            engine.resume_with(run_id, ARGS.value)
        else:
            engine.recover()
    print("status", engine.status(run_id).status)
    for w in engine.waits(run_id):
        print("wait", w.wait_id, json.dumps(w.prompt, sort_keys=True))
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
