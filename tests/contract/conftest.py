"""The store under test, once per implementation: memory, SQLite, PostgreSQL.

Reusable: a new conformance file in this folder takes the ``store`` fixture
and runs on all three. The PostgreSQL case gets a fresh database per test
(tests/pg_support.py); it skips without a server and fails under CI=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import CheckpointStore

STORE_KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path: Path) -> Iterator[CheckpointStore]:
    yield from open_kind(request, tmp_path)


def open_kind(request, tmp_path: Path) -> Iterator[CheckpointStore]:
    """The store of kind ``request.param`` (one of :data:`STORE_KINDS`), on a
    new file or database, closed after the test (for a fixture's body)."""
    if request.param == "memory":
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
