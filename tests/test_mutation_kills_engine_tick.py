"""``Engine.tick``: every waiting run with a due timer is tried in one pass;
a run skipped, leased by another process, or refused by this engine stops
none of those after it, and a refusal is handed to ``on_refused`` with its
run and error. In process, on the injected clock."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.errors import UnknownFlowError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.records import Lease

NAP_S = 10.0


class Nap(BaseModel):
    n: int = 0


def napper(name: str = "napper") -> object:
    return FlowBuilder(name, Nap).sleep("nap", NAP_S).compile()


def three_due(store: InMemoryCheckpointStore, clock: ManualClock) -> tuple[Engine, list[str]]:
    """Three runs asleep, in the order they were made; their timers due now."""
    engine = Engine(store, flows=[napper()], clock=clock)
    ids = []
    for _ in range(3):
        ids.append(engine.run("napper", Nap()).run_id)
        clock.advance(1)
    clock.advance(NAP_S)
    return engine, ids


def test_a_skipped_run_stops_none_after_it() -> None:
    clock = ManualClock()
    store = InMemoryCheckpointStore(clock=clock.now)
    engine, ids = three_due(store, clock)
    assert engine.tick(skip={ids[0]}) == 2
    assert [store.get_run(r).status for r in ids] == ["waiting", "completed", "completed"]


def test_a_run_leased_elsewhere_stops_none_after_it() -> None:
    clock = ManualClock()
    store = InMemoryCheckpointStore(clock=clock.now)
    engine, ids = three_due(store, clock)
    store.claim(ids[0], Lease("another-host:1:x", clock.now() + 600, clock.now()), clock.now())
    assert engine.tick() == 2
    assert [store.get_run(r).status for r in ids[1:]] == ["completed", "completed"]


def test_a_refused_run_is_handed_over_with_its_error_and_stops_none_after_it() -> None:
    clock = ManualClock()
    store = InMemoryCheckpointStore(clock=clock.now)
    first = Engine(store, flows=[napper("other")], clock=clock).run("other", Nap()).run_id
    clock.advance(1)
    engine, ids = three_due(store, clock)
    refused: list[tuple[str, BaseException]] = []
    assert engine.tick(on_refused=lambda run_id, exc: refused.append((run_id, exc))) == 3
    ((run_id, exc),) = refused
    assert run_id == first and isinstance(exc, UnknownFlowError)
    assert [store.get_run(r).status for r in ids] == ["completed"] * 3
