"""A worker process on a simulated machine, for the PostgreSQL multi-worker tests.

Usage: python tests/pg_worker.py URL HOST [options]

Runs :class:`desktop_app.flow.worker.Worker` against the PostgreSQL database
at URL with the lease owner id ``HOST:pid:nonce``; HOST is a fake machine
name (``machine-a``), so the same-host pid shortcut can never decide a
takeover. Prints one flushed line per event on stdout, each stamped with the
database's clock (``clock_timestamp()``), so the parent measures takeovers
on the clock that decides them:

    ready OWNER DBTIME LIVENESS_PID
    start RUN STEP ATTEMPT DBTIME      (a step body begins)
    done RUN STEP DBTIME               (a step body returns)
    fenced DBTIME                      (the liveness connection dropped)
    woken RUN DBTIME RECEIVED          (the step after a signal wait begins)
    finished RUN STATUS                (the run's final checkpoint committed)

Flows: ``slow`` (steps s0..s{N-1}, each sleeping --step-s; --hang-at STEP never
returns from that step, so a kill always lands with it in flight), ``quick`` (one
step), ``waiter`` (waits for signal ``go``/run key, then step ``after``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.worker import ServerClock, Worker
from desktop_app.store.postgres.store import PostgresCheckpointStore, open_postgres_store

OUT_LOCK = threading.Lock()
STORE: PostgresCheckpointStore | None = None
LISTENER: Any = None


def db_now() -> float:
    assert STORE is not None
    return STORE.server_time()[0]


def say(*parts: object) -> None:
    line = " ".join(str(p) for p in parts)
    with OUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class S(BaseModel):
    n: int = 0
    got: Any = None


def slow_flow(steps: int, step_s: float, hang_at: str | None = None):
    def make(i: int):
        def body(state: S, ctx) -> dict:
            say("start", ctx.run_id, ctx.step_id, ctx.attempt, f"{db_now():.6f}")
            if ctx.step_id == hang_at:  # in flight until this process is killed
                threading.Event().wait()
            time.sleep(step_s)
            say("done", ctx.run_id, ctx.step_id, f"{db_now():.6f}")
            return {"n": state.n + 1}

        return body

    b = FlowBuilder("slow", S)
    for i in range(steps):
        b = b.step(f"s{i}", make(i))
    return b.chain().compile()


def quick_flow():
    def body(state: S, ctx) -> dict:
        say("start", ctx.run_id, ctx.step_id, ctx.attempt, f"{db_now():.6f}")
        return {"n": state.n + 1}

    return FlowBuilder("quick", S).step("only", body).chain().compile()


def waiter_flow():
    def after(state: S, ctx) -> dict:
        received = LISTENER.received if LISTENER is not None else -1
        say("woken", ctx.run_id, f"{db_now():.6f}", received)
        return {"n": 1}

    return (
        FlowBuilder("waiter", S)
        .wait_signal("wait", "go", lambda s: "k", into="got")
        .step("after", after)
        .chain()
        .compile()
    )


class SkewedClock(ServerClock):
    """The database's clock plus ``skew_s`` (a machine whose clock runs ahead)."""

    def __init__(self, probe, skew_s: float) -> None:
        super().__init__(probe)
        self.skew_s = skew_s

    def now(self) -> float:
        return super().now() + self.skew_s


def main() -> None:
    global STORE, LISTENER
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("host")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-s", type=float, default=0.3)
    ap.add_argument("--hang-at", help="a step of 'slow' that never ends in this worker")
    ap.add_argument("--ttl", type=float, default=30.0)
    ap.add_argument("--poll", type=float, default=0.25)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--no-liveness", action="store_true")
    ap.add_argument("--skew", type=float, default=0.0)
    ap.add_argument("--cooldown", type=float, default=1.0)
    args = ap.parse_args()

    owner = f"{args.host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    STORE = open_postgres_store(args.url, application_name=owner[:63])
    clock = SkewedClock(STORE.server_time, args.skew)
    engine = Engine(
        STORE,
        flows=[slow_flow(args.steps, args.step_s, args.hang_at), quick_flow(), waiter_flow()],
        clock=clock,
        owner=owner,
        lease_ttl_s=args.ttl,
    )
    from desktop_app.flow.events import RunFinished

    def finished(event: object) -> None:
        if isinstance(event, RunFinished):
            say("finished", event.run_id, event.status)

    engine.events.subscribe(finished)
    passes = [0]

    def on_tick() -> None:
        passes[0] += 1
        if passes[0] <= 3:
            say("pass", passes[0])

    worker = Worker(
        engine,
        concurrency=args.concurrency,
        poll_s=args.poll,
        on_tick=on_tick,
        fence_cooldown_s=args.cooldown,
    )

    def lost() -> None:
        worker.fence()
        say("fenced", f"{db_now():.6f}")

    if not args.no_liveness:
        LISTENER = STORE.listener(owner=owner, on_lost=lost)
        worker.session = LISTENER
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    say("ready", owner, f"{db_now():.6f}", LISTENER.backend_pid if LISTENER else 0)
    worker.serve(stop)
    if LISTENER is not None:
        LISTENER.close()
    STORE.close()
    say("stopped")


if __name__ == "__main__":
    main()
