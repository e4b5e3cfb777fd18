"""Kill tests for desktop_app/store/statements.py (issue 29).

The statements are rendered once, when the package is imported, so a
mutant of them changes every statement a process runs. mutmut's own run
forks each mutant from a process that imported the unmutated SQL, and sees
no test reach them; ``tools/mutate.py --survivors`` runs each in a fresh
process, where these tests see the mutated SQL through the stores.

What a user of either built-in store would notice: the packaged
conformance suite, through its public entry point (as a third-party backend
runs it), passes on a new SQLite file and a new PostgreSQL database per
check: runs read back with their times, lists in order and filtered,
checkpoints folded and paged, signals, events, the outbox and agent runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_app.store import conformance
from desktop_app.store.protocol import AgentLog, CheckpointStore

_files = itertools.count()


def _conforms(
    new_database: Callable[[], Callable[..., CheckpointStore]],
    agent_log: Callable[[CheckpointStore], AgentLog],
) -> None:
    """Every check that applies, each on a new database, stopping at the
    first that fails (``run_conformance`` runs them all, then reports)."""
    first = new_database()()
    try:
        capabilities = first.capabilities
    finally:
        first.close()
    for check in conformance.checks_for(capabilities):
        conformance.run_check(check, conformance.Harness(new_database(), capabilities, agent_log))


@pytest.mark.slow
def test_the_sqlite_store_passes_the_conformance_suite(tmp_path: Path) -> None:
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store

    def new_database() -> Callable[..., CheckpointStore]:
        path = tmp_path / f"c{next(_files)}.db"
        conn = open_connection(path)
        migrations.apply(conn)
        conn.close()
        return lambda clock=None: open_store(path, clock=clock)

    def agent_log(store: CheckpointStore) -> SqliteAgentStore:
        assert isinstance(store, SqliteCheckpointStore)
        return SqliteAgentStore(store)

    _conforms(new_database, agent_log)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_postgres_store_passes_the_conformance_suite(pg_server) -> None:
    from tests import pg_support

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore
    from desktop_app.store.postgres.store import PostgresCheckpointStore, open_postgres_store

    made: list[str] = []

    def new_database() -> Callable[..., CheckpointStore]:
        url = pg_server.new_database()
        made.append(url)
        return lambda clock=None: open_postgres_store(url, max_connections=6)

    def agent_log(store: CheckpointStore) -> PostgresAgentStore:
        assert isinstance(store, PostgresCheckpointStore)
        return PostgresAgentStore(store)

    try:
        _conforms(new_database, agent_log)
    finally:
        for url in made:
            pg_server.drop_database(url)


def _empty_filters_match_nothing(store: CheckpointStore, agents: AgentLog) -> None:
    from desktop_app.store.conformance.helpers import _cp, _run

    store.create_run(_run("r1"), _cp("r1", 0, status="pending"))
    assert [r.run_id for r in store.list_runs(statuses=["pending"])] == ["r1"]
    # an empty status filter matches no run: answered, not a syntax error
    assert store.list_runs(statuses=[]) == []
    assert store.intents([]) == []
    assert agents.list(statuses=[]) == []


def test_empty_status_filters_match_nothing_on_sqlite(sqlite_store) -> None:
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    _empty_filters_match_nothing(sqlite_store, SqliteAgentStore(sqlite_store))


@pytest.mark.postgres
def test_empty_status_filters_match_nothing_on_postgres(pg_store) -> None:
    """PostgreSQL matches a list with ``= ANY(%s)``; ``IN ()`` would be refused."""
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore

    _empty_filters_match_nothing(pg_store, PostgresAgentStore(pg_store))
