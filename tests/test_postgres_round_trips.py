"""Round trips a durable step costs on PostgreSQL, counted at the wire.

A :class:`~tests.pg_wire.WireCounter` stands between the store and the
server (or PgBouncer) and counts how often the client waited for an answer.
A step's append on a direct connection is one statement (the
compare-and-set on ``runs`` and the checkpoint insert, prepared by name)
sent with no ``BEGIN`` on the autocommit connection, so the server commits
it before it replies: one round trip. Behind a transaction-mode pooler it
is one pipeline (``BEGIN``, ``SET LOCAL search_path``, the statement) and
one ``COMMIT``: two. A read on a direct connection is one statement in no
transaction, a NOTIFY batch one simple query, and a transaction borrows a
pooled connection once, in autocommit mode. Counts, not times: a regression
adds a round trip or a checkout and fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import BaseModel

from desktop_app.errors import LeaseLostError, RevisionConflictError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.protocol import Checkpoint, Lease, RunRecord, Wait
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
    # the pool opens its connections in the background: one whose set-up
    # lands in a test's count counted a trip too many (a CI run saw 4 for 3)
    store.pool.wait(timeout=30)
    return store, wire


@pytest.fixture(params=["none", "transaction"])
def counted(request: pytest.FixtureRequest, pg_url: str) -> Iterator[tuple[Any, WireCounter]]:
    store, wire = _counted_store(pg_url, pooler=request.param)
    yield store, wire
    store.close()
    wire.close()


def test_an_append_and_create_run_are_one_round_trip_each_two_behind_a_pooler(counted):
    store, wire = counted
    wire.reset()
    store.create_run(_run("r1"), _cp("r1", 0, 0))
    created = wire.snapshot()
    for rev in range(1, 11):
        store.append(_cp("r1", rev, rev))
    appended = wire.snapshot()
    assert created[0] == (1 if store._begin is None else 2), created
    assert appended[0] - created[0] == (10 if store._begin is None else 20), appended
    # messages. Direct: EXECUTE of the append statement, prepared under a
    # name on the connection (PREPARE rides in the first one), as one simple
    # query with no BEGIN: it commits by itself. Behind a pooler, which keeps
    # no session: a pipeline of BEGIN, SET LOCAL and the statement (extended
    # protocol), then COMMIT (simple).
    if store._begin is None:
        assert appended[2]["E"] - created[2]["E"] == 0
        assert appended[2]["Q"] - created[2]["Q"] == 10
    else:
        assert appended[2]["E"] - created[2]["E"] == 10 * 3
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
    # statement (direct: alone, committing nothing; behind a pooler: its
    # pipeline), the read of why it failed, and behind a pooler a ROLLBACK
    assert wire.snapshot()[0] == (6 if store._begin is not None else 3)
    assert store.latest("r1").state == {"n": 1}
    lease = Lease("me", 1000.0, 1030.0)
    with pytest.raises(LeaseLostError):
        store.claim("r1", Lease("other", 1000.0, 1e12), 1000.0)
        store.append(_cp("r1", 2, 2), lease=lease)
    assert [h.revision for h in store.history("r1")] == [0, 1]


class _N(BaseModel):
    n: int = 0


def test_a_ten_step_run_costs_one_round_trip_per_step_and_a_few_per_run(pg_url):
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
    # 10 steps x 1, the run's creation 1, reading its head back once (one
    # SELECT: a read on a direct connection opens no transaction)
    assert trips <= 10 * 1 + 1 + 1, trips


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


def test_a_ten_step_run_borrows_a_pooled_connection_once_per_transaction(pg_url):
    """The client CPU a step costs, counted where it cannot move with load:
    one pool checkout per transaction (create_run and 10 appends; the run
    is not read back before its first step: the engine drives it from what
    it stored), and every connection stays in autocommit mode (the store
    sends its own BEGIN; switching modes cost a lock and a wait twice a
    step)."""
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url, max_connections=2)
    store.notifier.enabled = False  # it borrows connections of its own
    try:
        b = FlowBuilder("count", _N)
        for i in range(10):
            b.step(f"s{i}", lambda s: {"n": s.n + 1})
        engine = Engine(store, flows=[b.chain().compile()])
        assert engine.run("count", {}).state.n == 10  # warm
        before = store.pool.get_stats()["requests_num"]
        assert engine.run("count", {}).state.n == 10
        assert store.pool.get_stats()["requests_num"] - before == 1 + 10
        with store.pool.connection() as conn:
            assert conn.autocommit
    finally:
        store.close()


@pytest.mark.parametrize("pooler", ["none", "transaction"])
def test_a_notify_batch_is_one_round_trip(pg_url, pooler):
    """A NOTIFY batch (its BEGIN, SET LOCAL, the notifications and COMMIT)
    is one simple query: one round trip, whatever it carries; a listener
    hears every payload."""
    import psycopg

    from desktop_app.store.postgres.notify import WAKE

    store, wire = _counted_store(pg_url, pooler=pooler)
    listener = psycopg.connect(pg_url, autocommit=True)
    try:
        listener.execute(f"LISTEN {WAKE}")
        store.notifier.enabled = True
        wire.reset()
        with store.notifier._cond:  # queue three before the thread takes any
            for name in ("a", "b'c", "d,{e}"):
                store.notifier._pending.setdefault(WAKE, set()).add(f"s:{name}")
        store.notifier.send(WAKE, "s:f")
        heard = {n.payload for n in listener.notifies(timeout=10, stop_after=4)}
        assert heard == {"s:a", "s:b'c", "s:d,{e}", "s:f"}
        store.notifier.close()  # waits for its thread to finish the batch
        assert store.notifier.batches == 1
        trips, _requests, messages = wire.snapshot()
        assert (trips, messages["Q"], messages["E"]) == (1, 1, 0)
    finally:
        listener.close()
        store.close()
        wire.close()


def test_a_named_statement_survives_rollbacks_and_a_session_reset_prepares_it_again(pg_url):
    """On a direct connection the append statement is prepared by name once
    per connection (the PREPARE rides in the first append's query). A
    rolled-back append keeps it; a session that lost it (``DISCARD ALL``)
    costs one failed try and a rollback, then it is prepared again: nothing
    is lost and nothing is written twice."""
    store, wire = _counted_store(pg_url)
    try:
        store.create_run(_run("r1"), _cp("r1", 0, 0))
        store.append(_cp("r1", 1, 1))
        with pytest.raises(RevisionConflictError):
            store.append(_cp("r1", 1, 99))  # rolled back on the same connection
        wire.reset()
        store.append(_cp("r1", 2, 2))
        assert wire.snapshot()[0] == 1
        assert store.pool.get_stats()["pool_size"] == 1  # the one connection every call took
        with store.pool.connection() as conn:
            assert [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
            conn.execute("DISCARD ALL")
            conn.execute("SET search_path = flowdesk")
        wire.reset()
        store.append(_cp("r1", 3, 3))
        # the EXECUTE that fails (in no transaction: nothing to roll back),
        # then PREPARE with EXECUTE
        assert wire.snapshot()[0] == 2
        assert [h.revision for h in store.history("r1")] == [0, 1, 2, 3]
        assert store.latest("r1").state == {"n": 3}
    finally:
        store.close()
        wire.close()


def test_a_head_read_once_is_served_from_the_cache_until_another_writer_moves_it(pg_url):
    """A store that did not write a run (the app, a second worker) reads
    its head: the run's row and then its checkpoints, two statements. Read
    again while nothing changed, the checkpoint comes from the store's own
    copy: one statement. Once another store appends, the next read loads
    the new revision again, and hands out what that writer saved."""
    from desktop_app.store.postgres.store import open_postgres_store

    writer = open_postgres_store(pg_url, max_connections=1)
    reader, wire = _counted_store(pg_url)
    try:
        writer.create_run(_run("r1"), _cp("r1", 0, 0))
        writer.append(_cp("r1", 1, 1))
        wire.reset()
        assert reader.head("r1").checkpoint.state == {"n": 1}
        first = wire.snapshot()[0]
        assert reader.head("r1").checkpoint.state == {"n": 1}
        again = wire.snapshot()[0] - first
        writer.append(_cp("r1", 2, 2))
        before = wire.snapshot()[0]
        head = reader.head("r1")
        moved = wire.snapshot()[0] - before
    finally:
        reader.close()
        wire.close()
        writer.close()
    assert (first, again, moved) == (2, 1, 2)
    assert (head.run.revision, head.checkpoint.revision, head.checkpoint.state) == (2, 2, {"n": 2})


def test_a_store_keeps_the_heads_of_its_last_256_runs(pg_url):
    """The store keeps its own copy of the latest checkpoint of the 256
    runs it touched last (a worker's runs in flight): reading the head of
    one of them is one statement. The 257th run pushes out the one touched
    longest ago, whose head is then read from its checkpoints again."""
    from desktop_app.store.postgres.store import _CACHE_RUNS

    store, wire = _counted_store(pg_url)
    try:
        ids = [f"r{i:03d}" for i in range(_CACHE_RUNS + 1)]
        for run_id in ids:
            store.create_run(_run(run_id), _cp(run_id, 0, 0))
        trips = []
        for run_id in (ids[-1], ids[1], ids[0]):  # newest, oldest kept, pushed out
            before = wire.snapshot()[0]
            assert store.head(run_id).checkpoint.state == {"n": 0}
            trips.append(wire.snapshot()[0] - before)
    finally:
        store.close()
        wire.close()
    assert (_CACHE_RUNS, trips) == (256, [1, 1, 2])


def test_a_run_created_with_a_wait_is_three_round_trips(counted):
    """A run created waiting (a transaction: its insert, its waits, COMMIT)
    costs three round trips, direct or behind a pooler: a new run has no
    waits to delete first."""
    store, wire = counted
    wait = Wait("r1:go:0", "go", "signal", 1000.0, name="go", key="k")
    wire.reset()
    store.create_run(_run("r1"), _cp("r1", 0, 0).evolve(status="waiting", waits=(wait,)))
    assert wire.snapshot()[0] == 3
    assert store.runs_waiting_for("signal", "go", "k") == ["r1"]
