"""The PostgreSQL schema tree and its ledger: parity with the SQLite tree,
the advisory-locked applier, checksum and "newer schema" refusals."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path

import pytest

from desktop_app.errors import SchemaChecksumError, SchemaMissingError, SchemaTooNewError
from desktop_app.store import migrations
from tests import pg_support

pytestmark = pytest.mark.postgres

# Column types, normalised: both trees must agree on these families.
_SQLITE_TYPES = {"TEXT": "text", "INTEGER": "integer", "REAL": "time", "BLOB": "bytes"}
_PG_TYPES = {
    "text": "text",
    "integer": "integer",
    "bigint": "integer",
    "timestamp with time zone": "time",
    "bytea": "bytes",
}


def _literals(predicate: str | None) -> tuple[str, ...] | None:
    return None if predicate is None else tuple(sorted(re.findall(r"'([^']*)'", predicate)))


def sqlite_shape(path: Path) -> dict:
    conn = sqlite3.connect(path)
    tables = {}
    for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type='table' ORDER BY name"
    ):
        cols = []
        pk = []
        for _cid, col, typ, notnull, _default, pkpos in conn.execute(
            f"SELECT * FROM pragma_table_info('{name}')"
        ):
            cols.append((col, _SQLITE_TYPES[typ.upper()], bool(notnull or pkpos)))
            if pkpos:
                pk.append((pkpos, col))
        fks = sorted(
            (r[3], r[2], r[4], r[6])  # from, table, to, on_delete
            for r in conn.execute(f"SELECT * FROM pragma_foreign_key_list('{name}')")
        )
        checks = sorted(set(re.findall(r"(\w+)\s+\w+\s+NOT NULL[^,]*?CHECK \((\w+) IN", sql)))
        checks = sorted({c for _, c in checks})
        uniques = sorted(
            tuple(r[2] for r in conn.execute(f"SELECT * FROM pragma_index_info('{i[1]}')"))
            for i in conn.execute(f"SELECT * FROM pragma_index_list('{name}')")
            if i[1].startswith("sqlite_autoindex") and i[3] == "u"
        )
        tables[name] = {
            "columns": cols,
            "pk": [c for _, c in sorted(pk)],
            "fks": [(f, t, to, od.upper()) for f, t, to, od in fks],
            "checks": checks,
            "unique_constraints": uniques,
        }
    indexes = {}
    for name, table, sql in conn.execute(
        "SELECT name, tbl_name, sql FROM sqlite_schema WHERE type='index' AND sql IS NOT NULL"
    ):
        cols = tuple(r[2] for r in conn.execute(f"SELECT * FROM pragma_index_info('{name}')"))
        where = sql.split(" WHERE ", 1)[1] if " WHERE " in sql else None
        indexes[name] = (table, cols, sql.upper().startswith("CREATE UNIQUE"), _literals(where))
    conn.close()
    return {"tables": tables, "indexes": indexes}


def pg_shape(url: str) -> dict:
    import psycopg

    schema = migrations.PG_SCHEMA
    tables = {}
    with psycopg.connect(url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema=%s "
                "ORDER BY table_name",
                (schema,),
            )
        ]
        for name in names:
            cols = [
                (c, _PG_TYPES[t], n == "NO")
                for c, t, n in conn.execute(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema=%s AND table_name=%s ORDER BY ordinal_position",
                    (schema, name),
                )
            ]
            oid = f"{schema}.{name}"
            pk = [
                r[0]
                for r in conn.execute(
                    "SELECT a.attname FROM pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) "
                    "WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a ON a.attrelid=c.conrelid "
                    "AND a.attnum=k.attnum WHERE c.conrelid=%s::regclass AND c.contype='p' "
                    "ORDER BY k.n",
                    (oid,),
                )
            ]
            fks = sorted(
                (f, t, to, {"c": "CASCADE", "a": "NO ACTION"}[od])
                for f, t, to, od in conn.execute(
                    "SELECT a.attname, rt.relname, ra.attname, c.confdeltype FROM pg_constraint c "
                    "JOIN pg_attribute a ON a.attrelid=c.conrelid AND a.attnum=c.conkey[1] "
                    "JOIN pg_class rt ON rt.oid=c.confrelid "
                    "JOIN pg_attribute ra ON ra.attrelid=c.confrelid AND ra.attnum=c.confkey[1] "
                    "WHERE c.conrelid=%s::regclass AND c.contype='f'",
                    (oid,),
                )
            )
            checks = sorted(
                r[0]
                for r in conn.execute(
                    "SELECT a.attname FROM pg_constraint c JOIN pg_attribute a ON "
                    "a.attrelid=c.conrelid AND a.attnum=c.conkey[1] "
                    "WHERE c.conrelid=%s::regclass AND c.contype='c'",
                    (oid,),
                )
            )
            uniques = sorted(
                tuple(r[0])
                for r in conn.execute(
                    "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_constraint c "
                    "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
                    "JOIN pg_attribute a ON a.attrelid=c.conrelid AND a.attnum=k.attnum "
                    "WHERE c.conrelid=%s::regclass AND c.contype='u' GROUP BY c.oid",
                    (oid,),
                )
            )
            tables[name] = {
                "columns": cols,
                "pk": pk,
                "fks": fks,
                "checks": checks,
                "unique_constraints": uniques,
            }
        indexes = {}
        for name, table, unique, cols, where in conn.execute(
            "SELECT i.relname, t.relname, x.indisunique, "
            "array(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid=t.oid AND a.attnum=k.attnum ORDER BY k.n), "
            "pg_get_expr(x.indpred, x.indrelid) FROM pg_index x "
            "JOIN pg_class i ON i.oid=x.indexrelid JOIN pg_class t ON t.oid=x.indrelid "
            "JOIN pg_namespace s ON s.oid=t.relnamespace WHERE s.nspname=%s "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid=x.indexrelid)",
            (schema,),
        ):
            indexes[name] = (table, tuple(cols), unique, _literals(where))
    return {"tables": tables, "indexes": indexes}


def test_both_trees_ship_the_same_files():
    sqlite_keys = [f.key for f in migrations.schema_files()]
    pg_keys = [f.key for f in migrations.schema_files(dialect="postgres")]
    assert sqlite_keys == pg_keys
    assert len(pg_keys) >= 8


#: the two tables SQLite keys by integers (schema core/0011), as SQLite has them
SQLITE_KEYED = {
    "runs": {
        "columns": [
            ("run_id", "text", True), ("scope", "text", True), ("flow_name", "text", True),
            ("flow_version", "text", True), ("flow_key", "text", False),
            ("parent_run_id", "text", False), ("status", "text", True),
            ("revision", "integer", True), ("created_at", "time", True),
            ("updated_at", "time", True), ("context", "text", True),
            ("progress_done", "integer", False), ("progress_total", "integer", False),
            ("error", "text", False), ("lease_owner", "text", False),
            ("lease_expires_at", "time", False), ("tenant_id", "text", False),
            ("session_id", "text", False), ("deadline_at", "time", False),
            ("run_key", "integer", True),
        ],
        "pk": ["run_key"],
        "fks": [],
        "checks": ["status"],
        "unique_constraints": [("run_id",)],
    },
    "checkpoints": {
        "columns": [
            ("run_id", "text", True), ("revision", "integer", True), ("kind", "text", True),
            ("status", "text", True), ("step_id", "text", True), ("created_at", "time", True),
            ("state", "text", True), ("steps", "text", True), ("frontier", "text", True),
            ("progress", "text", False), ("error", "text", False), ("meta", "text", False),
            ("waits", "text", False), ("checksum", "text", False), ("ckey", "integer", True),
        ],
        "pk": ["ckey"],
        "fks": [],
        "checks": ["kind"],
        "unique_constraints": [],
    },
}  # fmt: skip


def test_parity_tables_columns_indexes_constraints(pg_url, tmp_path):
    from desktop_app.store.connection import open_connection

    path = tmp_path / "parity.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    lite, pg = sqlite_shape(path), pg_shape(pg_url)
    assert sorted(lite["tables"]) == sorted(pg["tables"])
    assert {t: lite["tables"][t] for t in SQLITE_KEYED} == SQLITE_KEYED
    for table in lite["tables"]:
        if table not in SQLITE_KEYED:
            assert lite["tables"][table] == pg["tables"][table], table
    for table, key in (("runs", "run_key"), ("checkpoints", "ckey")):
        # the same columns but SQLite's integer key; PostgreSQL's primary key
        # is the one SQLite keeps as a unique column (runs) or leaves unindexed
        # (checkpoints: its rows are read by ckey range)
        lite_cols = [c for c in lite["tables"][table]["columns"] if c[0] != key]
        assert lite_cols == pg["tables"][table]["columns"], table
    assert pg["tables"]["runs"]["pk"] == ["run_id"]
    assert pg["tables"]["checkpoints"]["pk"] == ["run_id", "revision"]
    assert pg["tables"]["checkpoints"]["fks"] == [("run_id", "runs", "run_id", "CASCADE")]
    assert lite["indexes"] == pg["indexes"]
    # the comparison sees real content, not two empty shapes
    assert {"runs", "checkpoints", "signals", "outbox", "agent_runs"} <= set(pg["tables"])
    assert pg["indexes"]["runs_live_flow_key"][2] is True
    assert "waiting" in pg["indexes"]["runs_live_flow_key"][3]


def test_tables_live_in_their_own_schema(pg_url):
    import psycopg

    with psycopg.connect(pg_url) as conn:
        public = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema='public'"
        ).fetchone()
        ours = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema=%s",
            (migrations.PG_SCHEMA,),
        ).fetchone()
    assert public == (0,)
    assert ours is not None and ours[0] >= 10


def test_store_refuses_an_empty_database_and_names_db_apply(pg_server):
    from desktop_app.store.postgres.store import open_postgres_store

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    url = pg_server.empty_database()
    try:
        with pytest.raises(SchemaMissingError, match="db apply"):
            open_postgres_store(url)
    finally:
        pg_server.drop_database(url)


def test_two_appliers_at_once_apply_each_file_exactly_once(pg_server):
    import psycopg

    from desktop_app.store.postgres.store import apply_postgres_schema, postgres_schema_status

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    url = pg_server.empty_database()
    try:
        barrier = threading.Barrier(2)
        results: list[object] = []

        def applier() -> None:
            barrier.wait()
            try:
                results.append(len(apply_postgres_schema(url)))
            except Exception as exc:
                results.append(exc)

        threads = [threading.Thread(target=applier) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = len(migrations.schema_files(dialect="postgres"))
        assert all(isinstance(r, int) for r in results), results
        assert sum(results) == total  # type: ignore[arg-type]
        assert {s.state for s in postgres_schema_status(url)} == {"applied"}
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                f"SELECT count(*) FROM {migrations.PG_SCHEMA}.{migrations.LEDGER}"
            ).fetchone()
        assert rows == (total,)
        assert apply_postgres_schema(url) == []  # idempotent
    finally:
        pg_server.drop_database(url)


def test_edited_file_and_newer_schema_are_refused(pg_url):
    import psycopg

    from desktop_app.store.postgres.store import open_postgres_store

    with psycopg.connect(pg_url, autocommit=True) as conn:
        files = migrations.schema_files(dialect="postgres")
        edited = [
            migrations.SchemaFile(f.component, f.name, f.sql + "\n-- edited") if i == 0 else f
            for i, f in enumerate(files)
        ]
        with pytest.raises(SchemaChecksumError):
            migrations.verify(conn, edited)
        with pytest.raises(SchemaChecksumError):
            migrations.apply(conn, edited)
        conn.execute(
            f"INSERT INTO {migrations.PG_SCHEMA}.{migrations.LEDGER} VALUES "
            "('core', '9999_from_the_future.sql', 'x', now())"
        )
    with pytest.raises(SchemaTooNewError, match="newer Flowdesk"):
        open_postgres_store(pg_url)


def test_ci_never_skips_the_postgres_half(monkeypatch):
    """Without a server a developer's run skips, a CI run fails."""
    monkeypatch.setattr(pg_support, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception):
        pg_support.unavailable("none here")
    monkeypatch.setattr(pg_support, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        pg_support.unavailable("none here")
