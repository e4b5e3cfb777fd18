"""The S43 workload: N runs mixing domain writes, retries, outbox intents,
signal waits and timers. Each invocation recovers what is there, creates what
is missing, delivers signals and the outbox, and exits when all is done. The
parent SIGKILLs it at random moments.

Usage: python tests/fault_worker.py DB WORKDIR N
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store


class Job(BaseModel):
    index: int
    total: int = 0
    key: str | None = None


def append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effect(run_id: str, step: str):
    def write(conn) -> None:
        conn.execute(
            "INSERT INTO fault_rows(run_id, step, n) VALUES (?,?,1) "
            "ON CONFLICT(run_id, step) DO UPDATE SET n=n+1",
            (run_id, step),
        )

    return write


def build(workdir: Path):
    log = workdir / "executions.log"

    def step(name: str, work):
        def fn(s: Job, ctx) -> dict:
            append_line(log, f"{ctx.run_id} {name} {ctx.attempt}")
            time.sleep(0.01)  # some real work, so kills land inside steps too
            ctx.write(effect(ctx.run_id, name))
            return work(s, ctx) or {}

        return fn

    def flaky(s: Job, ctx) -> dict:
        if ctx.attempt == 1 and s.index % 2 == 0:
            raise ConnectionError("transient")
        return {"total": s.total + 10}

    policy = RetryPolicy(retries=3, backoff=Backoff(initial_s=0.05, max_s=0.2, jitter_s=0.0))
    return (
        FlowBuilder("mix", Job, retry=policy)
        .step("write", step("write", lambda s, c: {"total": s.total + 1}))
        .step("flaky", step("flaky", flaky))
        .step("send", step("send", lambda s, c: {"key": c.send("sink", {"i": s.index})}))
        .route("send", lambda s: "signal" if s.index % 2 else "timer", ["signal", "timer"])
        .wait_signal("signal", "go", key=lambda s: f"job-{s.index}")
        .sleep("timer", 0.2)
        .step("done", step("done", lambda s, c: {"total": s.total + 100}))
        .chain("write", "flaky", "send")
        .edge("signal", "done")
        .edge("timer", "done")
        .compile()
    )


class Sink:
    """A destination that de-duplicates by key, backed by a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _keys(self) -> set[str]:
        return set(self.path.read_text().split()) if self.path.exists() else set()

    def send(self, key: str, payload: object) -> object:
        append_line(self.path, key)
        return {"key": key}

    def lookup(self, key: str) -> object | None:
        return {"key": key} if key in self._keys() else None


def main() -> int:
    db, workdir, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    store = open_store(db)
    engine = Engine(store, flows=[build(workdir)], lease_ttl_s=2.0)
    dispatcher = Dispatcher(store, {"sink": Sink(workdir / "sink.log")})
    engine.recover(concurrency=1)  # one run at a time: a kill interrupts one step
    existing = {r.flow_key for r in store.list_runs()}
    for i in range(n):
        if f"job-{i}" not in existing:
            engine.run("mix", Job(index=i), flow_key=f"job-{i}")
    while True:
        engine.recover(concurrency=1)
        for run in store.list_runs(statuses=("waiting",)):
            engine.signal("go", run.flow_key or "", None, dedupe_key=f"go-{run.flow_key}")
        engine.tick()
        dispatcher.dispatch()
        runs = store.list_runs()
        open_intents = store.intents(["pending", "sending"])
        if len(runs) == n and all(r.status == "completed" for r in runs) and not open_intents:
            break
    store.close()
    print("all done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
