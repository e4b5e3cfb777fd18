"""The packaged conformance suite (desktop_app.store.conformance), run on the
in-memory, SQLite and PostgreSQL stores: every check of every role, each on a
fresh database, and a meta-check that every role method is covered."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from desktop_app.store import conformance
from desktop_app.store.memory.agent_runs import InMemoryAgentLog
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import CheckpointStore

pytestmark = pytest.mark.scenario("S65")

_spaces = itertools.count()


def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> conformance.Harness:
    space = f"conformance-{next(_spaces)}"
    log = InMemoryAgentLog()

    def open_(clock: Callable[[], float] | None = None) -> CheckpointStore:
        return InMemoryCheckpointStore(space=space, clock=clock)

    return conformance.Harness(
        open_, InMemoryCheckpointStore.capabilities, agent_log=lambda store: log
    )


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> conformance.Harness:
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store

    path = tmp_path / f"conformance-{next(_spaces)}.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()

    def open_(clock: Callable[[], float] | None = None) -> CheckpointStore:
        return open_store(path, clock=clock)

    def agent_log(store: CheckpointStore) -> SqliteAgentStore:
        assert isinstance(store, SqliteCheckpointStore)
        return SqliteAgentStore(store)

    return conformance.Harness(open_, SqliteCheckpointStore.capabilities, agent_log=agent_log)


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> conformance.Harness:
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore
    from desktop_app.store.postgres.store import PostgresCheckpointStore, open_postgres_store

    url = request.getfixturevalue("pg_url")

    def open_(clock: Callable[[], float] | None = None) -> CheckpointStore:
        return open_postgres_store(url, max_connections=6)

    def agent_log(store: CheckpointStore) -> PostgresAgentStore:
        assert isinstance(store, PostgresCheckpointStore)
        return PostgresAgentStore(store)

    return conformance.Harness(open_, PostgresCheckpointStore.capabilities, agent_log=agent_log)


KINDS = {"memory": _memory, "sqlite": _sqlite, "postgres": _postgres}
PARAMS = [
    pytest.param(
        kind,
        check,
        id=f"{kind}-{check.name}",
        marks=[pytest.mark.postgres] if kind == "postgres" else [],
    )
    for kind in KINDS
    for check in conformance.CHECKS
]


@pytest.fixture
def harness_of(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[str], conformance.Harness]]:
    made: list[conformance.Harness] = []

    def make(kind: str) -> conformance.Harness:
        h = KINDS[kind](tmp_path, request)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close_all()


@pytest.mark.parametrize(("kind", "check"), PARAMS)
def test_conformance(kind: str, check: conformance.Check, harness_of) -> None:
    h = harness_of(kind)
    if check not in conformance.checks_for(h.capabilities, agent_log=h.agent_log is not None):
        pytest.skip(
            f"{kind} does not declare {sorted(check.needs)} / declares {sorted(check.unless)}"
        )
    conformance.run_check(check, h)


def test_every_role_method_is_covered():
    counts = conformance.coverage()
    uncovered = [m for m, n in counts.items() if n == 0]
    assert not uncovered, f"role methods without a conformance check: {uncovered}"
    roles = conformance.role_methods()
    assert len(roles["RunLog"]) == 13 and len(roles["AgentLog"]) == 11
    assert set(roles) == {
        "RunLog",
        "Leases",
        "Mailbox",
        "Outbox",
        "ChangeFeed",
        "ChangePush",
        "DomainStore",
        "CheckpointStore",
        "AgentLog",
    }


def test_validate_reports_a_store_that_breaks_the_contract(tmp_path):
    """The suite can fail: a store whose append forgets compare-and-append."""

    class Sloppy(InMemoryCheckpointStore):
        def append(self, checkpoint, writes=(), lease=None, *, intents=(), consume=()):
            with self._lock:
                self._cps[checkpoint.run_id][checkpoint.revision] = checkpoint
                run = self._runs[checkpoint.run_id]
                from dataclasses import replace

                self._runs[checkpoint.run_id] = replace(run, revision=checkpoint.revision)

    def make() -> conformance.Harness:
        space = f"sloppy-{next(_spaces)}"
        return conformance.Harness(
            lambda clock=None: Sloppy(space=space, clock=clock), frozenset(), agent_log=None
        )

    failures = dict(conformance.validate(make))
    assert "compare_and_append_one_winner" in failures
    assert "RevisionConflictError" in failures["compare_and_append_one_winner"]
    assert "create_and_read_back" not in failures
