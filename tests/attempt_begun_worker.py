"""A worker for tests/test_attempt_begun.py: ``python attempt_begun_worker.py
DB first|again``.

Flow ``charge``: one ``resume_only`` step, ``charge``, whose effect is a line
in ``DB.effects`` ("charged"); its ``on_recover`` writes "recovered" there
instead. Its first attempt fails with a retryable error before the effect; the
retry (after a backoff) makes the effect and then the process kills itself
with SIGKILL, before the step's checkpoint (``first``). ``again`` resumes the
run in a new process and prints its status and the step's attempts;
``handed`` does so with an engine that does not execute (it hands the run
to the workers).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.sqlite.store import open_store


class Charge(BaseModel):
    charged: bool = False


def flow(effects: Path):
    def charge(s: Charge) -> dict:
        tries = effects.with_suffix(".tries")
        with tries.open("a") as f:
            f.write("try\n")
        if tries.read_text().count("try") == 1:
            raise ConnectionError("the payment service did not answer")  # before any effect
        with effects.open("a") as f:
            f.write("charged\n")
        os.kill(os.getpid(), signal.SIGKILL)  # after the effect, before its checkpoint
        return {"charged": True}

    def recover(s: Charge) -> dict:
        with effects.open("a") as f:
            f.write("recovered\n")
        return {"charged": True}  # the payment service says it was charged

    backoff = Backoff(initial_s=0.05, max_s=0.05, jitter_s=0.0)
    return (
        FlowBuilder("charge", Charge, retry=RetryPolicy(retries=2, backoff=backoff))
        .step("charge", charge, recovery="resume_only", on_recover=recover)
        .chain()
        .compile()
    )


def main(db: Path, mode: str) -> None:
    store = open_store(db)
    # "handed": an engine that does not execute (the app on PostgreSQL beside
    # workers) resumes the run, which hands it to the workers
    executes = mode != "handed"
    engine = Engine(store, flows=[flow(db.with_suffix(".effects"))], executes=executes)
    if mode == "first":
        engine.run("charge", Charge())
        raise SystemExit("not killed")
    (run,) = store.list_runs()
    result = engine.resume(run.run_id)
    rec = store.latest(run.run_id).steps["charge"]
    print(result.status, rec.attempts)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
