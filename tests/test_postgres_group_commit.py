"""Group commit on PostgreSQL: ``append_batch`` puts several runs' appends in
one transaction (one savepoint each), a transient failure retries the whole
batch once, and an engine asked for group commit batches runs in flight and
acknowledges only durable steps. By default the engine leaves it off there
(the store declares ``append_batch`` but not ``group_commit``).

Real PostgreSQL (a fresh database per test); skips without a server and
fails under CI=true (the ``postgres`` marker, tests/pg_support.py)."""

from __future__ import annotations

import threading

import psycopg.errors
import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, EventBus
from desktop_app.flow.definition import FlowBuilder
from desktop_app.flow.events import StepFinished
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord

pytestmark = pytest.mark.postgres


def _seed(store, *run_ids: str) -> None:
    for rid in run_ids:
        store.create_run(
            RunRecord(rid, "f", "v1", "running", 0, 1000.0, 1000.0),
            Checkpoint(rid, 0, "running", {"n": 0}, {}, ("a",), 1000.0),
        )


def _cp(rid: str, rev: int) -> Checkpoint:
    steps = {"a": StepRecord("a", "in_progress", attempts=rev)}
    return Checkpoint(rid, rev, "running", {"n": rev}, steps, ("a",), 1000.0 + rev)


def test_a_batch_of_three_runs_is_one_commit(pg_store, pg_url):
    from desktop_app.store.postgres.store import open_postgres_store

    _seed(pg_store, "r1", "r2", "r3")
    before = pg_store._own_commits
    out = pg_store.append_batch([AppendRequest(_cp(r, 1)) for r in ("r1", "r2", "r3")])
    assert out == [None, None, None]
    assert pg_store._own_commits - before == 1
    other = open_postgres_store(pg_url)  # another connection reads what committed
    try:
        assert [other.latest(r).state for r in ("r1", "r2", "r3")] == [{"n": 1}] * 3
        assert [c.revision for c in other.history("r2")] == [0, 1]
    finally:
        other.close()


def test_a_serialization_failure_retries_the_whole_batch_once(pg_url):
    from desktop_app.store.postgres.store import PostgresCheckpointStore, open_postgres_store

    failed: list[str] = []

    class FlakyOnce(PostgresCheckpointStore):
        def _append_request(self, conn, r, previous):
            if r.checkpoint.run_id == "r2" and not failed:
                failed.append("r2")
                raise psycopg.errors.SerializationFailure("could not serialize access")
            return super()._append_request(conn, r, previous)

    plain = open_postgres_store(pg_url)
    store = FlakyOnce(plain.pool, where="test")
    try:
        _seed(store, "r1", "r2", "r3")
        out = store.append_batch([AppendRequest(_cp(r, 1)) for r in ("r1", "r2", "r3")])
        assert out == [None, None, None] and failed == ["r2"]
        # the first attempt's r1 was rolled back with it: each revision once
        for r in ("r1", "r2", "r3"):
            assert [c.revision for c in store.history(r)] == [0, 1]
    finally:
        plain.close()


class Count(BaseModel):
    n: int = 0


def _flow(steps: int):
    b = FlowBuilder("count", Count)
    for i in range(steps):
        b.step(f"s{i}", lambda state, ctx: {"n": state.n + 1})
    return b.chain().compile()


def test_the_engine_group_commits_on_postgres_and_acks_only_durable_steps(pg_store, pg_url):
    from desktop_app.store.postgres.store import open_postgres_store

    reader = open_postgres_store(pg_url)  # its own connections: sees only what committed
    acked: list[bool] = []
    lock = threading.Lock()

    def on_event(ev: object) -> None:
        if isinstance(ev, StepFinished):
            rec = reader.get_checkpoint(ev.run_id, reader.get_run(ev.run_id).revision)
            done = rec.steps[ev.result.name].status == "completed"
            with lock:
                acked.append(done)

    events = EventBus()
    events.subscribe(on_event)
    try:
        assert Engine(pg_store, flows=[_flow(12)]).committer is None  # off by default here
        engine = Engine(pg_store, flows=[_flow(12)], events=events, group_commit=True)
        assert engine.committer is not None  # declared append_batch: it can be asked for
        out = engine.run_many("count", [{"n": i * 100} for i in range(8)], max_workers=8)
        assert [(r.status, r.state.n) for r in out] == [
            ("completed", i * 100 + 12) for i in range(8)
        ]
        assert len(acked) == 96 and all(acked)
        assert engine.committer.appends == 96
        for r in out:
            assert [c.revision for c in reader.history(r.run_id)] == list(range(13))
    finally:
        reader.close()
