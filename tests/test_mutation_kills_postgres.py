"""PostgresCheckpointStore behaviour the conformance suite does not pin:
the schema helpers the CLI calls (``db apply``/``db status``/the check at
start), what the messages say and leave out, and the store's own reads.
Every test runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from desktop_app.errors import DatabaseOpenError, SchemaMissingError
from desktop_app.store import migrations

pytestmark = pytest.mark.postgres


def with_password(url: str, password: str) -> str:
    """``url`` with a password the server ignores (its roles are trusted)."""
    parts = urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


@pytest.fixture
def empty_url(pg_server: Any) -> Iterator[str]:
    from tests import pg_support

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    url = pg_server.empty_database()
    yield url
    pg_server.drop_database(url)


def closed_port_url(url: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parts = urlsplit(url)
    netloc = f"{parts.username}:hunter2@127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def test_verify_refuses_an_empty_database_naming_the_url_without_its_password(empty_url):
    from desktop_app.store.postgres import verify_postgres_schema

    url = with_password(empty_url, "hunter2")
    with pytest.raises(SchemaMissingError) as caught:
        verify_postgres_schema(url)
    message = str(caught.value)
    first = migrations.schema_files(dialect="postgres")[0]
    assert first.key in message
    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.username}:***@{parts.hostname}:{parts.port}{parts.path}"
    assert f"run `flowdesk --db {shown} db apply`" in message
    assert "hunter2" not in message


def test_verify_accepts_an_applied_database(pg_url):
    from desktop_app.store.postgres import verify_postgres_schema

    assert verify_postgres_schema(pg_url) is None


@pytest.mark.parametrize("helper", ["verify", "status", "apply"])
def test_schema_helpers_on_an_unreachable_server_say_so_without_the_password(pg_url, helper):
    from desktop_app.store import postgres

    call = {
        "verify": postgres.verify_postgres_schema,
        "status": postgres.postgres_schema_status,
        "apply": postgres.apply_postgres_schema,
    }[helper]
    with pytest.raises(DatabaseOpenError) as caught:
        call(closed_port_url(pg_url))
    message = str(caught.value)
    assert message.startswith("cannot connect to PostgreSQL at postgresql://")
    assert ":***@127.0.0.1:" in message and "hunter2" not in message
    assert "~/.pgpass or PGPASSWORD" in message


def test_status_lists_every_file_pending_then_applied(empty_url):
    from desktop_app.store.postgres import apply_postgres_schema, postgres_schema_status

    files = migrations.schema_files(dialect="postgres")
    keys = [f.key for f in files]
    before = postgres_schema_status(empty_url)
    assert [s.key for s in before] == keys
    assert {s.state for s in before} == {"pending"}
    assert all(s.applied_at is None for s in before)
    applied = apply_postgres_schema(empty_url)
    assert [f.key for f in applied] == keys
    after = postgres_schema_status(empty_url)
    assert [s.key for s in after] == keys
    assert {s.state for s in after} == {"applied"}
    assert all(isinstance(s.applied_at, float) for s in after)
