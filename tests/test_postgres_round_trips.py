"""Round trips a durable step costs on PostgreSQL, counted at the wire.

A :class:`~tests.pg_wire.WireCounter` stands between the store and the
server (or PgBouncer) and counts how often the client waited for an answer.
A step's append is one pipeline (``BEGIN``, the compare-and-set on ``runs``
and the checkpoint insert as one statement that also returns the
transaction id) and one ``COMMIT``: two round trips, directly and behind a
transaction-mode pooler (whose ``SET LOCAL search_path`` rides in the same
pipeline). Counts, not times: a regression adds a round trip and fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import BaseModel

from desktop_app.errors import LeaseLostError, RevisionConflictError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.protocol import Checkpoint, Lease, RunRecord
from tests.pg_wire import WireCounter

pytestmark = pytest.mark.postgres


def _run(run_id: str) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, 1000.0, 1000.0)


def _cp(run_id: str, rev: int, n: int) -> Checkpoint:
    return Checkpoint(run_id, rev, "running", {"n": n}, {}, ("a",), 1000.0 + rev)


def _counted_store(url: str, **kw: Any) -> tuple[Any, WireCounter]:
    from desktop_app.store.postgres.store import open_postgres_store

    wire = WireCounter(int(urlsplit(url).port or 5432))
    store = open_postgres_store(wire.url(url), max_connections=2, **kw)
    store.notifier.enabled = False  # its NOTIFY batches would count too
    return store, wire


@pytest.fixture(params=["none", "transaction"])
def counted(request: pytest.FixtureRequest, pg_url: str) -> Iterator[tuple[Any, WireCounter]]:
    store, wire = _counted_store(pg_url, pooler=request.param)
    yield store, wire
    store.close()
    wire.close()


def test_an_append_is_two_round_trips_and_create_run_too(counted):
    store, wire = counted
    wire.reset()
    store.create_run(_run("r1"), _cp("r1", 0, 0))
    created = wire.snapshot()
    for rev in range(1, 11):
        store.append(_cp("r1", rev, rev))
    appended = wire.snapshot()
    assert created[0] == 2, created
    assert appended[0] - created[0] == 20, appended
    # statements: BEGIN (, SET LOCAL behind a pooler) and the one append
    # statement (extended protocol), COMMIT (simple)
    per_append = 3 if store._begin is not None else 2
    assert appended[2]["E"] - created[2]["E"] == 10 * per_append
    assert appended[2]["Q"] - created[2]["Q"] == 10
    assert store.latest("r1").state == {"n": 10}


def test_a_lost_compare_and_set_costs_one_more_round_trip_and_writes_nothing(counted):
    store, wire = counted
    store.create_run(_run("r1"), _cp("r1", 0, 0))
    store.append(_cp("r1", 1, 1))
    wire.reset()
    with pytest.raises(RevisionConflictError):
        store.append(_cp("r1", 1, 99))  # revision 1 is taken
    # reading revision 0 to diff against (one SELECT, in no transaction;
    # behind a pooler BEGIN with SET LOCAL, SELECT, COMMIT), then the
    # pipeline, the read of why it failed, ROLLBACK
    assert wire.snapshot()[0] == (6 if store._begin is not None else 4)
    assert store.latest("r1").state == {"n": 1}
    lease = Lease("me", 1000.0, 1030.0)
    with pytest.raises(LeaseLostError):
        store.claim("r1", Lease("other", 1000.0, 1e12), 1000.0)
        store.append(_cp("r1", 2, 2), lease=lease)
    assert [h.revision for h in store.history("r1")] == [0, 1]


class _N(BaseModel):
    n: int = 0


def test_a_ten_step_run_costs_two_round_trips_per_step_and_a_few_per_run(pg_url):
    store, wire = _counted_store(pg_url)
    try:
        b = FlowBuilder("count", _N)
        for i in range(10):
            b.step(f"s{i}", lambda s: {"n": s.n + 1})
        engine = Engine(store, flows=[b.chain().compile()])
        assert engine.run("count", {}).state.n == 10  # warm
        wire.reset()
        assert engine.run("count", {}).state.n == 10
        trips = wire.snapshot()[0]
    finally:
        store.close()
        wire.close()
    # 10 steps x 2, the run's creation 2, reading its head back once (one
    # SELECT: a read on a direct connection opens no transaction)
    assert trips <= 10 * 2 + 2 + 1, trips


def test_behind_pgbouncer_an_append_is_two_round_trips(bouncer, pg_url):
    store, wire = _counted_store(bouncer.url(pg_url), pooler="transaction")
    try:
        store.create_run(_run("r1"), _cp("r1", 0, 0))
        wire.reset()
        for rev in range(1, 11):
            store.append(_cp("r1", rev, rev))
        assert wire.snapshot()[0] == 20
        assert store.latest("r1").state == {"n": 10}
    finally:
        store.close()
        wire.close()
