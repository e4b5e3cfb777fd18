"""Engine cases the scenario tests missed: a per-step retry count smaller
than the flow default (S15), cancel during a backoff on the injected clock."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.memory.store import InMemoryCheckpointStore


class S(BaseModel):
    n: int = 0


def failing(seen: Counter[str], name: str):
    def fn(s: S) -> None:
        seen[name] += 1
        raise RuntimeError(f"{name} broke")

    return fn


@pytest.mark.scenario("S15")
@pytest.mark.parametrize(
    ("flow_retry", "step_retry", "attempts"),
    [(3, 1, 2), (1, 3, 4), (2, 0, 3), (0, 2, 3), (0, 0, 1)],
)
def test_a_positive_step_retry_wins_over_the_flow_default_either_way(
    flow_retry, step_retry, attempts
):
    seen: Counter[str] = Counter()
    flow = FlowBuilder("f", S, retry=flow_retry).step("x", failing(seen, "x"), retry=step_retry)
    store = InMemoryCheckpointStore()
    res = Engine(store, flows=[flow.compile()]).run("f", S())
    assert res.status == "failed"
    assert seen["x"] == attempts
    word = "attempt" if attempts == 1 else "attempts"
    assert f"failed after {attempts} {word}: " in (res.error or "")
    assert store.latest(res.run_id).steps["x"].attempts == attempts


@pytest.mark.scenario("S15")
def test_cancel_during_a_backoff_wait_stops_the_retries(db_path):
    """The backoff sleeps on the injected clock; cancel wakes it. No wall time."""
    from desktop_app.store.sqlite.store import open_store

    class BackoffHoldingClock(ManualClock):
        """Time stands still during a backoff until the run is canceled."""

        def sleep(self, seconds, cancel=None):
            sleeping.set()  # the engine is now inside the backoff wait
            if cancel is None or not cancel.wait(60):  # 60 s: only a hang guard
                raise AssertionError("backoff wait was not woken by the cancel")
            return False

    sleeping = threading.Event()
    clock = BackoffHoldingClock()
    seen: Counter[str] = Counter()
    policy = RetryPolicy(retries=5, backoff=Backoff(initial_s=30, max_s=30, jitter_s=0))
    flow = FlowBuilder("b", S, retry=policy).step("x", failing(seen, "x")).compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[flow], clock=clock)
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", engine.run("b", S())))
    t.start()
    assert sleeping.wait(30), "the engine never entered the backoff wait"
    (run,) = store.list_runs()
    assert store.latest(run.run_id).steps["x"].next_retry_at == clock.now() + 30
    assert store.latest(run.run_id).steps["x"].attempts == 2  # attempt 2 is next
    engine.cancel(run.run_id)
    t.join(30)
    assert not t.is_alive()
    assert box["r"].status == "canceled"  # type: ignore[attr-defined]
    assert seen["x"] == 1  # no attempt after the cancel
    assert store.get_run(run.run_id).status == "canceled"
    store.close()


@pytest.mark.scenario("S15")
def test_backoff_curve_follows_initial_base_and_cap():
    assert [Backoff(initial_s=0.5, max_s=100, jitter_s=0).delay(n) for n in (1, 2, 3)] == [
        0.5,
        1.0,
        2.0,
    ]
    curve = Backoff(initial_s=1, max_s=20, exp_base=3, jitter_s=0)
    assert [curve.delay(n) for n in (1, 2, 3, 4)] == [1, 3, 9, 20]
    jittered = [Backoff(initial_s=1, max_s=100, jitter_s=0.5).delay(2) for _ in range(50)]
    assert all(2 <= d <= 2.5 for d in jittered) and len(set(jittered)) > 1
