"""A step costs what it changed: appending a checkpoint whose state keeps a
large field unchanged does not copy that field (real SQLite file, real
PostgreSQL server). The stores used to deep-copy the whole state and step map
on every append to keep a private cached copy; a long list in the state then
cost its size at every loop iteration (a 50,724-file digest went from 643 to
68 files/s)."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.events import RunStarted, StepFinished
from desktop_app.store import codec
from desktop_app.store.records import Checkpoint, RunRecord

ITEMS = 200_000  # a deep copy of them takes tens of milliseconds
ROUNDS = 15


def _min_s(fn: Callable[[], object], rounds: int) -> float:
    """The fastest of ``rounds`` calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("kind", ["sqlite", "pg"])
def test_an_append_costs_what_the_step_changed_not_the_state_it_kept(kind, request):
    store = request.getfixturevalue(f"{kind}_store")
    items = [f"file-{i:06d}.txt" for i in range(ITEMS)]
    rid = "run-long-state"
    store.create_run(
        RunRecord(rid, "f", "v1", "running", 0, 1000.0, 1000.0),
        Checkpoint(rid, 0, "running", {"items": items, "n": 0}, {}, ("walk",), 1000.0),
    )
    revision = 0

    def append() -> None:
        nonlocal revision
        revision += 1
        # as the driver's encoder passes it: the unchanged field is the same object
        state = {"items": items, "n": revision}
        store.append(Checkpoint(rid, revision, "running", state, {}, ("walk",), 1000.0 + revision))

    append_s = _min_s(append, ROUNDS)
    copy_s = _min_s(lambda: codec.copy({"items": items, "n": 0}), 5)
    assert append_s < copy_s / 2, (
        f"an append that changed one integer took {append_s * 1e3:.2f} ms; one copy of "
        f"the state takes {copy_s * 1e3:.2f} ms"
    )
    latest = store.latest(rid)
    assert (latest.revision, latest.state["n"], latest.state["items"]) == (ROUNDS, ROUNDS, items)


class Counter(BaseModel):
    n: int = 0


def test_a_step_on_postgresql_costs_the_same_at_step_2500_as_at_step_10(pg_store):
    """Each step's append names the step record it changed, also when the
    engine appends without a group committer (PostgreSQL): the store used to
    compare every step record of the run at every step, so the 2,500th step
    of a run cost 3-4x its 10th."""
    steps = 2_500
    b = FlowBuilder("long", Counter, max_steps=steps + 10)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    engine = Engine(pg_store, flows=[b.chain().compile()])
    marks: list[float] = []
    engine.events.subscribe(
        lambda ev: (
            marks.append(time.perf_counter()) if isinstance(ev, RunStarted | StepFinished) else None
        )
    )
    assert engine.run("long", Counter()).state.n == steps
    costs = [b - a for a, b in itertools.pairwise(marks)]
    early, late = statistics.median(costs[9:110]), statistics.median(costs[-100:])
    assert late < 2 * early, (
        f"steps {steps - 99}-{steps}: median {late * 1e6:,.0f} us; steps 10-110: "
        f"{early * 1e6:,.0f} us"
    )
