"""A step whose domain query (``ctx.query``) the database refuses fails that
step, under its ``on_error`` policy, with the database's words; it does not
stop the run as a failed save would (which left the run ``interrupted``, and
every resume met the same refusal). On SQLite and PostgreSQL, and on the
in-memory store (which has no SQL at all)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.context import StepContext
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.memory.store import InMemoryCheckpointStore


class Looked(BaseModel):
    rows: int = 0
    error: str = ""
    handled: bool = False


def _flow(name: str, sql: str, **policy: object):
    """``look`` reads with ``sql``; ``handle`` is the error route when asked."""
    attempts: list[int] = []

    def look(state: Looked, ctx: StepContext) -> dict:
        attempts.append(ctx.attempt)
        return {"rows": len(ctx.query(lambda tx: tx.fetchall(sql)))}

    b = FlowBuilder(name, Looked, retry=3)
    b.step("look", look, **policy)
    if policy.get("on_error") == "route":
        b.step("handle", lambda s: {"handled": True})
        b.finish("look", "handle")
    return b.compile(), attempts


def _stores(request: pytest.FixtureRequest, kind: str):
    if kind == "sqlite":
        return request.getfixturevalue("sqlite_store")
    return request.getfixturevalue("pg_store")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_query_of_a_missing_table_fails_the_step_once_with_the_databases_words(request, kind):
    store = _stores(request, kind)
    flow, attempts = _flow("reads_missing", "SELECT * FROM no_such_table")
    engine = Engine(store, flows=[flow])

    res = engine.run(flow, {})

    assert res.status == "failed", res
    assert attempts == [1]  # not retried: the same query fails the same way
    assert "DomainReadError" in (res.error or "")
    assert "step 'look': its domain query failed" in (res.error or "")
    assert "no_such_table" in (res.error or "")
    stored = store.latest(res.run_id)
    assert stored.status == "failed"
    assert stored.steps["look"].status == "failed"
    assert stored.steps["look"].error_type == "DomainReadError"
    row = store.get_run(res.run_id)
    assert (row.status, row.lease_owner) == ("failed", None)  # nothing left to resume


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_refused_query_takes_the_steps_error_route(request, kind):
    store = _stores(request, kind)
    flow, attempts = _flow(
        "reads_missing_routed",
        "SELECT no_such_column FROM runs",
        on_error="route",
        error_route="handle",
        error_field="error",
    )
    engine = Engine(store, flows=[flow])

    res = engine.run(flow, {})

    assert res.status == "completed", res
    assert attempts == [1]
    assert res.state.handled is True
    assert res.state.error.startswith("DomainReadError: step 'look': its domain query failed")
    assert "no_such_column" in res.state.error


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_query_that_tries_to_write_fails_the_step_and_names_store_write(request, kind):
    store = _stores(request, kind)
    flow, attempts = _flow("writes_in_query", "DELETE FROM runs WHERE run_id='nobody'")
    engine = Engine(store, flows=[flow])

    res = engine.run(flow, {})

    assert res.status == "failed", res
    assert attempts == [1]
    assert "a domain query tried to write; query() is read-only" in (res.error or "")
    assert "store.write(op)" in (res.error or "")


def test_a_query_on_the_in_memory_store_fails_the_step_saying_it_has_no_sql():
    store = InMemoryCheckpointStore()
    flow, attempts = _flow("reads_memory", "SELECT 1")
    engine = Engine(store, flows=[flow])

    res = engine.run(flow, {})

    assert res.status == "failed", res
    assert attempts == [1]
    assert "DomainReadError" in (res.error or "")
    assert "the in-memory store has none" in (res.error or "")


def test_a_query_that_raises_in_python_is_an_ordinary_step_failure_and_is_retried(sqlite_store):
    """Only the database's refusal is final; the op's own exception follows
    the retry policy like any exception a step raises."""
    attempts: list[int] = []

    def look(state: Looked, ctx: StepContext) -> dict:
        attempts.append(ctx.attempt)

        def op(tx):
            if len(attempts) < 3:
                raise ConnectionError("a flaky service read inside the op")
            return tx.fetchall("SELECT 1")

        return {"rows": len(ctx.query(op))}

    flow = (
        FlowBuilder(
            "flaky_op",
            Looked,
            retry=RetryPolicy(retries=3, backoff=Backoff(initial_s=0, jitter_s=0)),
        )
        .step("look", look)
        .compile()
    )
    res = Engine(sqlite_store, flows=[flow]).run(flow, {})

    assert res.status == "completed", res
    assert attempts == [1, 2, 3]
    assert res.state.rows == 1
