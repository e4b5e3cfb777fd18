"""A real process driving many runs at once through the group commit.

Usage: python tests/group_commit_worker.py DB LOG start RUNS STEPS [WORKERS]
       python tests/group_commit_worker.py DB LOG recover [WORKERS]

``start`` runs RUNS runs of a STEPS-step linear flow with ``Engine.run_many``;
``recover`` resumes what a killed worker left with ``Engine.recover``. Every
step execution appends ``"<run_id> <step_id>\\n"`` to LOG (O_APPEND, no
buffering: it survives SIGKILL) before the step returns, and inserts a row
into the ``gc_effects`` domain table in the step's checkpoint transaction.
``RUN <run_id>`` is printed as each run starts to be driven (its row is
committed by then), ``ACK <run_id> <step_id>`` is printed after each ``StepFinished`` event, i.e.
once the step's batch is durable; ``DONE <batches> <appends>`` at the end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, EventBus
from desktop_app.flow.context import StepContext
from desktop_app.flow.definition import CompiledFlow, FlowBuilder
from desktop_app.flow.events import RunStarted, StepFinished
from desktop_app.store.sqlite.store import open_store


class Counter(BaseModel):
    n: int = 0


def build(steps: int, log_fd: int) -> CompiledFlow[Counter]:
    def step(state: Counter, ctx: StepContext) -> dict[str, int]:
        os.write(log_fd, f"{ctx.run_id} {ctx.step_id}\n".encode())
        run_id, step_id = ctx.run_id, ctx.step_id
        ctx.write(lambda c: c.execute("INSERT INTO gc_effects VALUES (?, ?)", (run_id, step_id)))
        return {"n": state.n + 1}

    b = FlowBuilder("gc_linear", Counter)
    for i in range(steps):
        b.step(f"s{i:03d}", step)
    return b.chain().compile()


def main() -> int:
    db, log, mode, *rest = sys.argv[1:]
    store = open_store(db)
    store.write(
        lambda c: c.execute("CREATE TABLE IF NOT EXISTS gc_effects(run_id TEXT, step_id TEXT)")
    )
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    steps = int(rest[1]) if mode == "start" else int(os.environ.get("GC_STEPS", "0"))
    if mode == "start":
        os.environ["GC_STEPS"] = str(steps)
        Path(db + ".steps").write_text(str(steps))
    else:
        steps = int(Path(db + ".steps").read_text())
    events = EventBus()

    def on_event(ev: object) -> None:
        if isinstance(ev, RunStarted):  # published once the run's row is committed
            os.write(1, f"RUN {ev.run_id}\n".encode())
        elif isinstance(ev, StepFinished) and ev.result.status == "done":
            os.write(1, f"ACK {ev.run_id} {ev.result.name}\n".encode())

    events.subscribe(on_event)
    engine = Engine(store, flows=[build(steps, log_fd)], events=events)
    if mode == "start":
        runs, workers = int(rest[0]), int(rest[2]) if len(rest) > 2 else 8
        out = engine.run_many("gc_linear", [{} for _ in range(runs)], max_workers=workers)
        bad = [o for o in out if isinstance(o, BaseException) or o.status != "completed"]
    else:
        workers = int(rest[0]) if rest else 8
        report = engine.recover(concurrency=workers)
        bad = [o for _, o in report if isinstance(o, BaseException) or o.status != "completed"]
    c = engine.committer
    os.write(1, f"DONE {c.batches if c else 0} {c.appends if c else 0} bad={bad}\n".encode())
    store.close()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
