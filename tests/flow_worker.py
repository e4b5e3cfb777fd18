"""A real process running one of the test flows below; it can SIGKILL itself.

Usage: python tests/flow_worker.py DB LOG FLOW [--kill POINT]

Starts a run of FLOW when the file has none, otherwise recovers the
interrupted one. Every step body appends a line to LOG (fsync'd) before it
returns, so the parent counts executions across processes. ``--kill POINT``
makes the process SIGKILL itself when the flow reaches that point.
"""

from __future__ import annotations

import argparse
import operator
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite import open_store

ARGS = argparse.Namespace()


def log(line: str) -> None:
    with open(ARGS.log, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def point(name: str) -> None:
    if ARGS.kill == name:
        os.kill(os.getpid(), signal.SIGKILL)


class S(BaseModel):
    items: list[str] = []
    n: int = 0
    note: str = ""


def parallel3():
    def branch(name: str, delay: float):
        def run(state: S) -> dict:
            time.sleep(delay)
            log(f"branch:{name}")
            point(f"branch-{name}")
            return {"items": [name], "n": 1}

        return run

    return (
        FlowBuilder("parallel3", S)
        .step("before", lambda s: log("before") or {"note": "x"})
        .parallel(
            "fan",
            {"a": branch("a", 0.3), "b": branch("b", 0.0), "c": branch("c", 1.0)},
            reducers={"items": operator.add, "n": operator.add},
        )
        .step("after", lambda s: log("after"))
        .chain()
        .compile()
    )


def loop10():
    def body(state: S, ctx) -> dict:
        log(f"iteration:{ctx.iteration}")
        if ctx.iteration == 6:
            point("iteration-6")
        return {"n": state.n + 1}

    return (
        FlowBuilder("loop10", S)
        .loop("count", body, until=lambda s: s.n >= 10)
        .step("done", lambda s: log("done"))
        .chain()
        .compile()
    )


def recover():
    def body(state: S) -> dict:
        log("body")
        point("body")
        return {"note": "body"}

    def on_recover(state: S) -> dict:
        log("on_recover")
        return {"note": "recovered"}

    return (
        FlowBuilder("recover", S)
        .step("first", lambda s: log("first"))
        .step("charge", body, recovery="resume_only", on_recover=on_recover)
        .step("last", lambda s: log("last"))
        .chain()
        .compile()
    )


def backoff():
    def flaky(state: S, ctx) -> dict:
        log(f"attempt:{ctx.attempt}:{time.time():.3f}")
        if ctx.attempt < 3:
            if ctx.attempt == 2 and ARGS.kill == "backoff-2":
                threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
            raise ConnectionResetError("peer reset the connection")
        return {"n": ctx.attempt}

    policy = RetryPolicy(retries=3, backoff=Backoff(initial_s=1.5, max_s=10, jitter_s=0.0))
    return FlowBuilder("backoff", S, retry=policy).step("call", flaky).compile()


def linear10():
    def make(i: int):
        def step(state: S) -> dict:
            log(f"s{i}")
            if i == 5:
                point("step-5")
            return {"n": state.n + 1}

        return step

    b = FlowBuilder("linear10", S)
    for i in range(10):
        b.step(f"s{i}", make(i))
    return b.chain().compile()


def slow5():
    def make(i: int):
        def step(state: S) -> dict:
            time.sleep(0.3)
            log(f"{os.getpid()} s{i}")
            return {"n": state.n + 1}

        return step

    b = FlowBuilder("slow5", S)
    for i in range(5):
        b.step(f"s{i}", make(i))
    return b.chain().compile()


FLOWS = {f.__name__: f for f in (parallel3, loop10, recover, backoff, linear10, slow5)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("flow", choices=sorted(FLOWS))
    p.add_argument("--kill")
    p.parse_args(namespace=ARGS)
    store = open_store(ARGS.db)
    engine = Engine(store, flows=[FLOWS[ARGS.flow]()])
    if store.list_runs():
        for _run, outcome in engine.recover():
            print("recovered", getattr(outcome, "status", outcome))
    else:
        print("ran", engine.run(ARGS.flow, S()).status)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
