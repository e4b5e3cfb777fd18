"""``Engine.serve`` resumes runs on a thread of its own, and one engine
never drives a run on two threads at once.

Before, ``flowdesk agent`` (SQLite) resumed a run left behind on its only
thread: while it resumed a long run (a digest of thousands of files), no
other run's deadline fired and no signal was delivered until that run
stopped. A second thread needs a guard: a run's lease is the process's, so
the claim of a second thread of the same engine succeeds, and without the
guard both threads would run the current step; with it, the second thread
is refused (``RunLeasedError``, nothing run there).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests.polling import until

ROUNDS = 20


class S(BaseModel):
    n: int = 0


def test_a_deadline_fires_while_serve_resumes_a_long_run_left_behind(db_path: Path) -> None:
    release = threading.Event()  # the long run's step goes on only once this is set
    entered = threading.Event()

    def long_step(s: S) -> dict:
        entered.set()
        assert release.wait(60), "the test never released the long step"
        return {"n": s.n + 1}

    long_flow = FlowBuilder("long", S).step("work", long_step).compile()
    timer = (
        FlowBuilder("timer", S)
        .sleep("nap", 0.3)
        .step("after", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )
    # another process's runs: one left pending (its process gone), one asleep
    other = Engine(open_store(db_path), flows=[long_flow, timer])
    left = other.start("long", S())
    napping = other.run("timer", S())
    assert napping.status == "waiting"
    other.store.close()

    engine = Engine(open_store(db_path), flows=[long_flow, timer])
    stop = threading.Event()
    serving = threading.Thread(target=engine.serve, args=(stop,), kwargs={"poll_s": 0.05})
    serving.start()
    try:
        assert entered.wait(30), "serve did not resume the run left behind"
        until(
            lambda: engine.store.get_run(napping.run_id).status == "completed",
            "the timer's deadline fired while the long run was being resumed",
        )
        assert engine.store.get_run(left).status == "running"  # still in its step
        release.set()
        until(lambda: engine.store.get_run(left).status == "completed", "the long run completed")
    finally:
        release.set()
        stop.set()
        serving.join(60)
    assert not serving.is_alive()
    engine.store.close()


def test_two_threads_of_one_engine_never_run_one_step_twice(db_path: Path) -> None:
    """A resume from one thread and a recovery sweep from another, released
    together over the same interrupted run, twenty rounds: its step runs
    once in every round, and the run completes."""
    executed: Counter[str] = Counter()

    def work(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        time.sleep(0.01)  # a step that takes a moment: both threads are in by then
        return {"n": s.n + 1}

    flow = FlowBuilder("once", S).step("work", work).step("more", work).chain().compile()
    engine = Engine(open_store(db_path), flows=[flow])
    maker = Engine(open_store(db_path), flows=[flow])
    outcomes: list[object] = []
    for _ in range(ROUNDS):
        rid = maker.start("once", S())  # pending: its process left it behind
        barrier = threading.Barrier(2)

        def by_resume(rid: str = rid, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                outcomes.append(engine.resume(rid))
            except RunLeasedError as exc:  # the sweep had it in hand: nothing run here
                outcomes.append(exc)

        def by_sweep(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            outcomes.append(engine.recover())

        threads = [threading.Thread(target=by_resume), threading.Thread(target=by_sweep)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert executed[rid] == 2, f"run {rid}: its steps ran {executed[rid]} times: {outcomes}"
        run = engine.store.get_run(rid)
        assert (run.status, run.lease_owner) == ("completed", None)
    maker.store.close()
    engine.store.close()
