"""Races between separate stores: two connections (or two objects on one
shared space for the in-memory store), never one store object shared by two
callers, so a store's own lock cannot hide a missing database condition.

Built on ``store_factory``: a callable that opens another store on the same
database each time it is called. A backend joins by adding an opener to
``OPENERS`` (or by overriding the ``store_factory`` fixture).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app.errors import LeaseLostError, RevisionConflictError, RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.protocol import Checkpoint, CheckpointStore, Lease, RunRecord

StoreFactory = Callable[[], CheckpointStore]


def _memory(tmp_path: Path) -> Callable[[], CheckpointStore]:
    from desktop_app.store.memory.store import InMemoryCheckpointStore

    space = uuid.uuid4().hex
    return lambda: InMemoryCheckpointStore(space=space)


def _sqlite(tmp_path: Path) -> Callable[[], CheckpointStore]:
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.store import open_store

    path = tmp_path / "races.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return lambda: open_store(path)


#: backend name -> (tmp_path -> opener of another store on one database)
OPENERS: dict[str, Callable[[Path], Callable[[], CheckpointStore]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}


@pytest.fixture(params=sorted(OPENERS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    opener = OPENERS[request.param](tmp_path)
    opened: list[CheckpointStore] = []

    def factory() -> CheckpointStore:
        store = opener()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def run_record(run_id: str, t: float = 1000.0, **kw: Any) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, t, t, **kw)


def cp(run_id: str, rev: int, state: dict[str, Any], status: str = "running") -> Checkpoint:
    return Checkpoint(run_id, rev, status, state, {}, ("a",), 1000.0 + rev)  # type: ignore[arg-type]


class S(BaseModel):
    n: int = 0
    payload: dict[str, Any] | None = None
    notes: list[str] = []


# -- compare-and-append (S7) -------------------------------------------------


@pytest.mark.scenario("S7")
def test_two_stores_writing_the_same_revision_exactly_one_wins(store_factory):
    """Both writers read revision 0 through their own connection, then both
    append revision 1: the database, not a lock in one store object, decides.
    (Truly simultaneous writers in two processes: tests/test_races_processes.py.)"""
    a, b = store_factory(), store_factory()
    a.create_run(run_record("r1"), cp("r1", 0, {"x": 0}))
    assert a.latest("r1").revision == b.latest("r1").revision == 0
    b.append(cp("r1", 1, {"x": 2}))
    with pytest.raises(RevisionConflictError):
        a.append(cp("r1", 1, {"x": 1}))
    with pytest.raises(RevisionConflictError):
        a.append(cp("r1", 3, {"x": 3}))  # skipping a revision is a conflict too
    for store in (a, b, store_factory()):
        assert store.latest("r1").state == {"x": 2}
        assert [h.revision for h in store.history("r1")] == [0, 1]
    a.append(cp("r1", 2, {"x": 4}))  # reloaded at revision 1, a goes on
    assert b.latest("r1").state == {"x": 4}


@pytest.mark.scenario("S7")
def test_stale_second_writer_after_pruning_is_a_conflict(store_factory):
    """The primary key on (run_id, revision) cannot stop this one: the stale
    writer's revision was pruned away, only the revision condition can."""
    a, b = store_factory(), store_factory()
    a.create_run(run_record("r1"), cp("r1", 0, {"x": 0}))
    assert b.latest("r1").state == {"x": 0}  # b last saw revision 0
    for i in range(1, 10):
        a.append(cp("r1", i, {"x": i}))
    assert a.prune("r1", 3) == 7  # revisions 0..6 are gone
    with pytest.raises(RevisionConflictError):
        b.append(cp("r1", 1, {"x": -1}))
    for store in (a, b, store_factory()):
        assert store.get_run("r1").revision == 9
        assert store.latest("r1").state == {"x": 9}
        assert [h.revision for h in store.history("r1")] == [7, 8, 9]


# -- leases (S42) -------------------------------------------------------------


@pytest.mark.scenario("S42")
def test_lease_taken_over_right_after_a_pre_check_loses_the_append(store_factory):
    """A saw the run's lease expired (its pre-check) and went on; B took the
    run over before A's checkpoint: A's append must fail, not overwrite."""
    a, b = store_factory(), store_factory()
    a.create_run(
        run_record("r1", lease_owner="host:1:a", lease_expires_at=1100.0),
        cp("r1", 0, {"x": 0}),
    )
    now = 1200.0  # A's lease expired at 1100
    assert a.get_run("r1").lease_expires_at == 1100.0  # the pre-check
    b.claim("r1", Lease("host:2:b", now + 30, now, takes_over="host:1:a"), now)  # in between
    with pytest.raises(LeaseLostError):
        a.append(cp("r1", 1, {"x": 1}), lease=Lease("host:1:a", now + 30, now))
    run = b.get_run("r1")
    assert (run.revision, run.lease_owner) == (0, "host:2:b")
    assert b.latest("r1").state == {"x": 0}
    # B, the holder, saves normally
    b.append(cp("r1", 1, {"x": 2}), lease=Lease("host:2:b", now + 30, now))
    assert a.latest("r1").state == {"x": 2}


@pytest.mark.scenario("S42")
def test_second_claim_of_a_live_lease_from_another_store_is_refused(store_factory):
    a, b = store_factory(), store_factory()
    a.create_run(run_record("r1"), cp("r1", 0, {}))
    a.claim("r1", Lease("host:1:a", 1030.0, 1000.0), 1000.0)
    with pytest.raises(RunLeasedError):
        b.claim("r1", Lease("host:2:b", 1040.0, 1010.0), 1010.0)
    assert b.get_run("r1").lease_owner == "host:1:a"
    with pytest.raises(RunLeasedError):  # expired, but a clock alone takes no lease
        b.claim("r1", Lease("host:2:b", 1060.0, 1030.0), 1030.0)
    b.claim("r1", Lease("host:2:b", 1060.0, 1030.0, takes_over="host:1:a"), 1030.0)
    assert a.get_run("r1").lease_owner == "host:2:b"


@pytest.mark.scenario("S42")
def test_lease_lost_mid_run_stops_the_run_before_its_next_step(store_factory):
    clock = ManualClock()
    executed: list[str] = []
    store_a, store_b = store_factory(), store_factory()
    holder: dict[str, Engine] = {}

    def slow_first(s: S) -> dict:
        executed.append(f"a by {holder['current'].owner}")
        if holder["current"] is engine_a:
            # A stalls past its lease; B takes the run over meanwhile
            clock.advance(31)
            (run,) = store_b.list_runs()
            store_b.claim(run.run_id, engine_b.lease(takes_over="hosta:1:a"), clock.now())
        return {"n": 1}

    def step(name: str):
        def fn(s: S) -> dict:
            executed.append(f"{name} by {holder['current'].owner}")
            return {"n": s.n + 1}

        return fn

    def flow():
        return (
            FlowBuilder("three", S)
            .step("first", step("first"))
            .step("a", slow_first)
            .step("b", step("b"))
            .step("c", step("c"))
            .chain()
            .compile()
        )

    engine_a = Engine(store_a, flows=[flow()], clock=clock, owner="hosta:1:a", lease_ttl_s=30)
    engine_b = Engine(store_b, flows=[flow()], clock=clock, owner="hostb:2:b", lease_ttl_s=30)
    holder["current"] = engine_a
    with pytest.raises(LeaseLostError):  # A learns it lost the run: no "running" result
        engine_a.run("three", S())
    assert executed == ["first by hosta:1:a", "a by hosta:1:a"]  # A stopped before b
    (res,) = store_b.list_runs()
    run = store_b.get_run(res.run_id)
    assert run.lease_owner == "hostb:2:b"
    assert store_b.latest(res.run_id).steps["a"].status == "in_progress"  # A's result not saved
    holder["current"] = engine_b
    done = engine_b.resume(res.run_id)
    assert done.status == "completed" and done.state.n == 3
    assert executed == [
        "first by hosta:1:a",
        "a by hosta:1:a",
        "a by hostb:2:b",
        "b by hostb:2:b",
        "c by hostb:2:b",
    ]


# -- signals ------------------------------------------------------------------


@pytest.mark.scenario("S27")
def test_one_signal_consumed_by_two_waits_in_two_stores_only_one_wins(store_factory):
    a, b = store_factory(), store_factory()
    for rid in ("r1", "r2"):
        a.create_run(run_record(rid), cp(rid, 0, {}))
    sid = a.send_signal("paid", "o-1", {"amount": 5}, 1000.0)
    seen_a, seen_b = a.next_signal("paid", "o-1"), b.next_signal("paid", "o-1")
    assert seen_a is not None and seen_b is not None
    assert seen_a.signal_id == seen_b.signal_id == sid  # both waits saw the one signal
    a.append(cp("r1", 1, {"got": 5}), consume=[(sid, "r1:w:0")])
    with pytest.raises(RevisionConflictError):
        b.append(cp("r2", 1, {"got": 5}), consume=[(sid, "r2:w:0")])
    assert b.get_run("r2").revision == 0  # the loser's checkpoint rolled back with it
    assert a.next_signal("paid", "o-1") is None and b.next_signal("paid", "o-1") is None


@pytest.mark.scenario("S27")
def test_one_signal_wakes_one_of_two_waiting_runs_the_other_keeps_waiting(store_factory):
    clock = ManualClock()

    def flow():
        return (
            FlowBuilder("pay", S)
            .wait_signal("paid", "payment", key="o-1", into="payload")
            .step("ship", lambda s: {"notes": ["shipped"]})
            .chain()
            .compile()
        )

    engine_a = Engine(store_factory(), flows=[flow()], clock=clock)
    engine_b = Engine(store_factory(), flows=[flow()], clock=clock)
    r1 = engine_a.run("pay", S())
    r2 = engine_b.run("pay", S())
    assert (r1.status, r2.status) == ("waiting", "waiting")
    engine_b.signal("payment", "o-1", {"amount": 12})
    engine_a.tick()
    engine_b.tick()
    statuses = sorted(engine_a.status(r).status for r in (r1.run_id, r2.run_id))
    assert statuses == ["completed", "waiting"]
    (done,) = (r for r in (r1.run_id, r2.run_id) if engine_a.status(r).status == "completed")
    assert engine_a.get(done).payload == {"amount": 12}
    # a second signal wakes the other one
    engine_a.signal("payment", "o-1", {"amount": 13})
    engine_b.tick()
    (other,) = (r for r in (r1.run_id, r2.run_id) if r != done)
    assert engine_b.status(other).status == "completed"
    assert engine_b.get(other).payload == {"amount": 13}
