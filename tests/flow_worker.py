"""A real process running one of the test flows below; it can SIGKILL itself.

Usage: python tests/flow_worker.py DB LOG FLOW [--kill POINT] [--answer TEXT]

Starts a run of FLOW when the file has none, otherwise recovers the
interrupted one (``--answer`` answers a waiting run instead). Every step body
appends a line to LOG (fsync'd) before it returns, so the parent counts
executions across processes. ``--kill POINT`` makes the process SIGKILL
itself when the flow reaches that point. Nothing here sleeps to order
things: a step that must come after another waits for that one's
checkpoint in the file.
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
from desktop_app.store.sqlite.store import open_store

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


def wait_for_branches(names: set[str]) -> None:
    """Block until the checkpoints of branches ``names`` of ``fan`` are in the
    file (read through a connection of its own), so the finishing order is
    fixed by the test, not by thread scheduling."""
    peek = open_store(ARGS.db)
    try:
        while True:
            (run,) = peek.list_runs()
            saved = peek.latest(run.run_id).meta.get("branches", {}).get("fan", {})
            if names <= set(saved):
                return
            threading.Event().wait(0.005)  # polls a condition; the order never depends on it
    finally:
        peek.close()


def parallel3():
    # finishing order b, a, c: a waits for b's checkpoint, c for a's and b's
    after = {"a": {"b"}, "b": set(), "c": {"a", "b"}}

    def branch(name: str):
        def run(state: S) -> dict:
            if ARGS.kill and after[name]:
                wait_for_branches(after[name])
            log(f"branch:{name}")
            point(f"branch-{name}")
            return {"items": [name], "n": 1}

        return run

    return (
        FlowBuilder("parallel3", S)
        .step("before", lambda s: log("before") or {"note": "x"})
        .parallel(
            "fan",
            {"a": branch("a"), "b": branch("b"), "c": branch("c")},
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


def cond3():
    def nested(name: str):
        def run(state: S) -> dict:
            log(name)
            point(name)
            return {"items": [*state.items, name]}

        return run

    return (
        FlowBuilder("cond3", S)
        .step("before", lambda s: log("before") or {"note": "go"})
        .condition("check", lambda s: s.note == "go", [(n, nested(n)) for n in ("n1", "n2", "n3")])
        .step("after", lambda s: log("after"))
        .chain()
        .compile()
    )


def approve():
    def approve_step(state: S, ctx) -> dict:
        log("approve")
        return {"note": ctx.interrupt("ship it?")}

    def after(state: S) -> dict:
        log("after")
        point("after")
        return {"n": 1}

    return (
        FlowBuilder("approve", S)
        .step("prep", lambda s: log("prep") or {"items": ["prepped"]})
        .step("approve", approve_step)
        .step("after", after)
        .chain()
        .compile()
    )


def redraft():
    """``draft`` is entered three times by a route back to itself; each visit
    queues a mail under its own idempotency key (``draft``, ``draft@2``, …)."""

    def draft(state: S, ctx) -> dict:
        visit = f"draft{state.n + 1}"
        ctx.send("mail", {"visit": visit})
        log(f"{visit} {ctx.idempotency_key}")
        point(visit)
        return {"n": state.n + 1}

    return (
        FlowBuilder("redraft", S)
        .step("draft", draft)
        .step("done", lambda s: log("done") or {})
        .route("draft", lambda s: "done" if s.n >= 3 else "draft", ["done", "draft"])
        .finish("done")
        .compile()
    )


def kill_when_backoff_saved(attempts: int) -> None:
    """SIGKILL this process as soon as the file holds the backoff checkpoint
    before attempt ``attempts`` (read through a connection of its own)."""

    def watch() -> None:
        peek = open_store(ARGS.db)
        while True:
            runs = peek.list_runs()
            rec = peek.latest(runs[0].run_id).steps.get("call") if runs else None
            if rec is not None and rec.attempts == attempts and rec.next_retry_at is not None:
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Event().wait(0.005)

    threading.Thread(target=watch, daemon=True).start()


def backoff():
    def flaky(state: S, ctx) -> dict:
        if ctx.attempt == 3 and ARGS.kill == "backoff-2":
            # on a loaded machine the watcher may not have seen the backoff
            # checkpoint within its 3 s; nothing is saved when an attempt
            # starts, so the file still holds it: wait here to be killed
            threading.Event().wait()
        log(f"attempt:{ctx.attempt}:{time.time():.3f}")
        if ctx.attempt < 3:
            if ctx.attempt == 2 and ARGS.kill == "backoff-2":
                kill_when_backoff_saved(3)
            raise ConnectionResetError("peer reset the connection")
        return {"n": ctx.attempt}

    # 1.5 s then 3 s: the watcher (5 ms polls) sees the second backoff long before it ends
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
    """Five steps; s1 blocks until the file ``LOG.release`` exists, so a
    parent can act while this process holds the run's lease."""
    release = Path(ARGS.log + ".release")

    def make(i: int):
        def step(state: S) -> dict:
            log(f"{os.getpid()} s{i}")
            while i == 1 and not release.exists():
                threading.Event().wait(0.01)  # polls a file the parent creates
            return {"n": state.n + 1}

        return step

    b = FlowBuilder("slow5", S)
    for i in range(5):
        b.step(f"s{i}", make(i))
    return b.chain().compile()


FLOWS = {
    f.__name__: f
    for f in (parallel3, loop10, recover, backoff, linear10, slow5, cond3, approve, redraft)
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("log")
    p.add_argument("flow", choices=sorted(FLOWS))
    p.add_argument("--kill")
    p.add_argument("--answer")
    p.parse_args(namespace=ARGS)
    store = open_store(ARGS.db)
    engine = Engine(store, flows=[FLOWS[ARGS.flow]()])
    if ARGS.answer is not None:
        for run in engine.waiting():
            print("answered", engine.resume_with(run.run_id, ARGS.answer).status)
    elif store.list_runs():
        for _run, outcome in engine.recover():
            print("recovered", getattr(outcome, "status", outcome))
    else:
        result = engine.run(ARGS.flow, S())
        # the error goes to stderr, so a test that fails on the status shows why
        print("ran", result.status)
        if result.error:
            print("run error:", result.error, file=sys.stderr)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
