"""Schema files and their ledger (store/migrations.py): the advice and the
states the schema tests reached only on one side."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.errors import SchemaMissingError
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection


def test_missing_schema_without_a_db_path_names_the_plain_command(tmp_path: Path):
    conn = open_connection(tmp_path / "empty.db")
    try:
        with pytest.raises(SchemaMissingError) as err:
            migrations.verify(conn)
        assert "run `flowdesk db apply` to apply it" in str(err.value)
        with pytest.raises(SchemaMissingError) as err:
            migrations.verify(conn, db="/data/f.db")
        assert "run `flowdesk --db /data/f.db db apply` to apply it" in str(err.value)
    finally:
        conn.close()


# -- PostgreSQL: what `db apply` says when the server refuses ---------------------


@pytest.fixture
def empty_pg(pg_server):
    from tests import pg_support

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    url = pg_server.empty_database()
    yield url
    pg_server.drop_database(url)


def _ledger_rows(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)", (f"flowdesk.{migrations.LEDGER}",)).fetchone()
        if row is None or row[0] is None:
            return 0
        got = conn.execute(f"SELECT count(*) FROM flowdesk.{migrations.LEDGER}").fetchone()
        return int(got[0]) if got else 0


def test_a_role_without_create_privilege_is_told_to_apply_as_the_owner(empty_pg):
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from desktop_app.errors import StoreError

    role = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(empty_pg, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    parts = urlsplit(empty_pg)
    as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    try:
        with psycopg.connect(as_role, autocommit=True) as conn, pytest.raises(StoreError) as err:
            migrations.apply(conn)
        assert type(err.value) is StoreError
        assert "lacks the privilege to create Flowdesk's schema (flowdesk)" in str(err.value)
        assert "Run `flowdesk db apply` as the database owner" in str(err.value)
        assert _ledger_rows(empty_pg) == 0  # nothing was applied
    finally:
        with psycopg.connect(empty_pg, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_an_applier_held_up_by_another_one_past_the_lock_timeout_applies_nothing(
    empty_pg, monkeypatch
):
    import psycopg

    from desktop_app.errors import StoreError

    # the other applier holds the schema lock; waiting 60 s for it is the
    # production setting, a tenth of a second gives the same refusal
    monkeypatch.setattr(migrations, "PG_LOCK_TIMEOUT", "100ms")
    with psycopg.connect(empty_pg) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (migrations.PG_APPLY_LOCK,))
        with psycopg.connect(empty_pg, autocommit=True) as conn, pytest.raises(StoreError) as err:
            migrations.apply(conn)
        other.rollback()
    assert "another `flowdesk db apply` held the schema lock for more than 100ms" in str(err.value)
    assert "nothing was applied by this one" in str(err.value)
    assert _ledger_rows(empty_pg) == 0
    with psycopg.connect(empty_pg, autocommit=True) as conn:
        assert len(migrations.apply(conn)) == len(migrations.schema_files(dialect="postgres"))


def test_a_failing_file_names_its_sqlstate_and_keeps_the_files_before_it(empty_pg):
    import psycopg

    from desktop_app.errors import StoreError

    good = migrations.schema_files(dialect="postgres")[:1]
    bad = migrations.SchemaFile("core", "9999_broken.sql", "CREATE TABLE (;")
    with psycopg.connect(empty_pg, autocommit=True) as conn:
        with pytest.raises(StoreError) as err:
            migrations.apply(conn, [*good, bad])
        assert "PostgreSQL error applying the schema (SQLSTATE 42601)" in str(err.value)
        states = {s.key: s.state for s in migrations.status(conn, [*good, bad])}
    assert states == {good[0].key: "applied", bad.key: "pending"}
