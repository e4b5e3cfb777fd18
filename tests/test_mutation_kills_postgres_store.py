"""PostgresCheckpointStore behaviour the conformance suite and
``tests/test_mutation_kills_postgres.py`` do not pin, found by the mutation
run of ``store/postgres/store.py`` (issue 29): a one-request batch that
carries everything a step can, batch requests built on revisions this store
holds stale or never read, the errors a batch puts in a request's slot or
retries the whole batch for, the outbox withdrawn on the database clock, and
domain queries refused of their own making. Every test runs on a real server
(``tests/pg_support.py``); the prune test runs on all three stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop_app.store.protocol import Checkpoint, RunRecord, Wait

T0 = 1000.0


def _rec(run_id: str) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, T0, T0)


def _cp(run_id: str, rev: int, state: Any = None, status: Any = "running", **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), T0 + rev, **kw)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: Any, tmp_path: Path) -> Iterator[Any]:
    """Each of the three stores (as ``tests/contract/conftest.py`` makes them)."""
    if request.param == "memory":
        from desktop_app.store.memory.store import InMemoryCheckpointStore

        yield InMemoryCheckpointStore()
        return
    if request.param == "postgres":
        yield request.getfixturevalue("pg_store")
        return
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.store import open_store

    path = tmp_path / "c.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    s = open_store(path)
    yield s
    s.close()


# -- prune ---------------------------------------------------------------------


def test_pruning_a_waiting_run_keeps_the_waits_of_its_latest_revision(any_store):
    """Pruning rewrites the oldest kept revision as a snapshot; the run's
    waits are its latest revision's and must stay exactly those. Before the
    fix both SQL stores wrote the kept revision's waits again: ``prune(run,
    1)`` on a waiting run failed on the waits' primary key (a StoreError,
    nothing pruned), and keeping an older revision brought back the waits the
    run had left, here a timer that then fired for a run that no longer
    waits on it."""
    s = any_store
    go = Wait("w1:s:0", "s", "signal", T0, name="go", key="k")
    s.create_run(_rec("w1"), _cp("w1", 0))
    s.append(_cp("w1", 1, {"n": 1}, status="waiting", waits=(go,)))
    s.append(_cp("w1", 2, {"n": 2}, status="waiting", waits=(go,)))
    assert s.prune("w1", 1) == 2
    assert s.runs_waiting_for("signal", "go", "k") == ["w1"]
    assert s.latest("w1").waits == (go,)

    timer = Wait("w2:t:0", "t", "timer", T0, deadline_at=T0 + 5.0)
    later = Wait("w2:s:0", "s", "signal", T0 + 3, name="later", key="k")
    s.create_run(_rec("w2"), _cp("w2", 0))
    s.append(_cp("w2", 1, status="waiting", waits=(timer,)))
    s.append(_cp("w2", 2, status="waiting", waits=(timer,), error="held"))
    s.append(_cp("w2", 3, status="waiting", waits=(later,)))
    assert s.prune("w2", 2) == 2
    assert s.due_waits(T0 + 60.0) == []
    assert s.runs_waiting_for("signal", "later", "k") == ["w2"]
    kept = s.get_checkpoint("w2", 2)
    assert (kept.waits, kept.error, dict(kept.state)) == ((timer,), "held", {})
    assert s.latest("w2").waits == (later,)
