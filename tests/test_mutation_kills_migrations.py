"""Schema files and their ledger (store/migrations.py): the advice and the
states the schema tests reached only on one side."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.errors import (
    SchemaChecksumError,
    SchemaMissingError,
    SchemaRecordsLostError,
    SchemaTooNewError,
    StoreError,
)
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from tests import cli_forkserver


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


def test_every_missing_file_is_named(tmp_path: Path):
    conn = open_connection(tmp_path / "p.db")
    try:
        files = migrations.schema_files()
        migrations.apply(conn, files[:-2])
        with pytest.raises(SchemaMissingError) as err:
            migrations.verify(conn)
        assert f"missing schema {files[-2].key}, {files[-1].key};" in str(err.value)
    finally:
        conn.close()


def test_apply_returns_the_files_it_applied_and_then_none(tmp_path: Path):
    conn = open_connection(tmp_path / "p.db")
    try:
        files = migrations.schema_files()
        assert migrations.dialect_of(conn) == "sqlite"
        first = migrations.apply(conn, files[:2])
        assert [f.key for f in first] == [f.key for f in files[:2]]
        rest = migrations.apply(conn)
        assert [f.key for f in rest] == [f.key for f in files[2:]]
        assert migrations.apply(conn) == []
        migrations.verify(conn)
    finally:
        conn.close()


def test_a_failing_sqlite_file_is_a_store_error_naming_the_database(tmp_path: Path):
    path = tmp_path / "p.db"
    conn = open_connection(path)
    try:
        bad = migrations.SchemaFile("core", "9999_broken.sql", "CREATE TABLE (;")
        good = migrations.schema_files()[:1]
        with pytest.raises(StoreError) as err:
            migrations.apply(conn, [*good, bad])
        assert f"database error ({path}):" in str(err.value)
        assert "syntax error" in str(err.value)
        states = {s.key: s.state for s in migrations.status(conn, [*good, bad])}
        assert states == {good[0].key: "applied", bad.key: "pending"}  # its transaction rolled back
    finally:
        conn.close()


def test_dialect_of_refuses_other_objects():
    with pytest.raises(TypeError, match="not an apsw or psycopg connection: str"):
        migrations.dialect_of("flowdesk.db")


def test_a_schema_tree_given_as_root_is_read_component_by_component(tmp_path: Path):
    # no core/ folder: the other components are still read, in component order
    (tmp_path / "domain").mkdir()
    (tmp_path / "events").mkdir()
    (tmp_path / "domain" / "0001_d.sql").write_text("CREATE TABLE d (x);", "utf-8")
    (tmp_path / "events" / "0002_b.sql").write_text("CREATE TABLE b (x); -- é", "utf-8")
    (tmp_path / "events" / "0001_a.sql").write_text("CREATE TABLE a (x);", "utf-8")
    (tmp_path / "events" / "notes.txt").write_text("not sql", "utf-8")
    files = migrations.schema_files(tmp_path)
    assert [f.key for f in files] == ["events/0001_a.sql", "events/0002_b.sql", "domain/0001_d.sql"]
    assert files[1].sql == "CREATE TABLE b (x); -- é"


def test_an_install_without_its_schema_files_says_reinstall(monkeypatch):
    # a copy of the package with neither desktop_app/schema nor a checkout's schema/
    monkeypatch.setattr(migrations, "__file__", "/nowhere/flowdesk/desktop_app/store/m.py")
    with pytest.raises(SchemaMissingError) as err:
        migrations.schema_root()
    assert str(err.value) == (
        "the schema files are not installed with Flowdesk (no desktop_app/schema); reinstall it."
    )


class _PackageFiles:
    """Stand-in for importlib.resources: an installed package folder at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def files(self, package: str) -> Path:
        assert package == "desktop_app"
        return self.root


def test_an_installed_package_reads_its_own_schema_folder(monkeypatch, tmp_path: Path):
    (tmp_path / "schema" / "core").mkdir(parents=True)
    (tmp_path / "schema" / "core" / "0001_x.sql").write_text("CREATE TABLE x (a);", "utf-8")
    monkeypatch.setattr(migrations, "resources", _PackageFiles(tmp_path))
    assert migrations.schema_root() == tmp_path / "schema"
    assert [f.key for f in migrations.schema_files()] == ["core/0001_x.sql"]


def test_schema_files_are_read_as_utf8_whatever_the_locale(tmp_path: Path):
    import os
    import sys

    import desktop_app

    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "0001_x.sql").write_text("-- café\nCREATE TABLE x (a);", "utf-8")
    env = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONCOERCECLOCALE": "0",  # a plain ASCII locale, as on an old server
        "PYTHONUTF8": "0",
    }
    code = (
        "import sys; from pathlib import Path; from desktop_app.store import migrations; "
        "print(ascii(migrations.schema_files(Path(sys.argv[1]))[0].sql))"
    )
    out = cli_forkserver.run_argv(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=Path(desktop_app.__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ascii("-- café\nCREATE TABLE x (a);")


def _two_files_db(tmp_path: Path):
    conn = open_connection(tmp_path / "p.db")
    files = [
        migrations.SchemaFile("core", "0001_a.sql", "CREATE TABLE a (x);"),
        migrations.SchemaFile("core", "0002_b.sql", "CREATE TABLE b (x);"),
    ]
    migrations.apply(conn, files)
    return conn, files


def test_status_reports_when_each_file_was_applied(tmp_path: Path):
    conn, files = _two_files_db(tmp_path)
    try:
        when = dict(
            conn.execute(
                f"SELECT component || '/' || name, applied_at FROM {migrations.LEDGER}"
            ).fetchall()
        )
        conn.execute(
            f"INSERT INTO {migrations.LEDGER} VALUES ('core', '0009_new.sql', 'x', 1234.5)"
        )
        edited = [files[0], migrations.SchemaFile("core", "0002_b.sql", "-- edited")]
        got = migrations.status(conn, edited)
        assert [(s.key, s.state, s.applied_at) for s in got] == [
            ("core/0001_a.sql", "applied", when["core/0001_a.sql"]),
            ("core/0002_b.sql", "edited", when["core/0002_b.sql"]),
            ("core/0009_new.sql", "unknown", 1234.5),
        ]
        assert all(isinstance(s.applied_at, float) for s in got)
    finally:
        conn.close()


def test_every_edited_and_every_unknown_file_is_named(tmp_path: Path):
    conn, files = _two_files_db(tmp_path)
    try:
        edited = [migrations.SchemaFile(f.component, f.name, f.sql + "--") for f in files]
        with pytest.raises(SchemaChecksumError) as err:
            migrations.verify(conn, edited)
        assert (
            "schema files core/0001_a.sql, core/0002_b.sql changed since they were applied"
            in str(err.value)
        )
        assert "Restore the original files, or add a new numbered migration" in str(err.value)
        with pytest.raises(SchemaTooNewError) as err2:
            migrations.verify(conn, [])
        assert "this database has schema core/0001_a.sql, core/0002_b.sql that" in str(err2.value)
        assert str(err2.value).endswith(
            " that this version of Flowdesk does not know: it was written by a newer "
            "Flowdesk. Upgrade Flowdesk."
        )
    finally:
        conn.close()


def test_a_ledger_that_cannot_be_read_is_a_store_error_naming_the_database(tmp_path: Path):
    path = tmp_path / "p.db"
    conn = open_connection(path)
    try:
        conn.execute(f"CREATE TABLE {migrations.LEDGER} (x)")  # not the ledger's columns
        with pytest.raises(StoreError) as err:
            migrations.status(conn)
        assert f"database error ({path}): no such column: component" in str(err.value)
    finally:
        conn.close()


# -- PostgreSQL: what `db apply` says when the server refuses ---------------------


def _ledger_rows(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)", (f"flowdesk.{migrations.LEDGER}",)).fetchone()
        if row is None or row[0] is None:
            return 0
        got = conn.execute(f"SELECT count(*) FROM flowdesk.{migrations.LEDGER}").fetchone()
        return int(got[0]) if got else 0


def test_a_role_without_create_privilege_is_told_to_apply_as_the_owner(pg_empty_url):
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from desktop_app.errors import StoreError

    role = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_empty_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    parts = urlsplit(pg_empty_url)
    as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    try:
        with psycopg.connect(as_role, autocommit=True) as conn, pytest.raises(StoreError) as err:
            migrations.apply(conn)
        assert type(err.value) is StoreError
        assert f"the PostgreSQL role {role} may not create Flowdesk's schema (flowdesk)" in str(
            err.value
        )
        assert "The database owner applies it" in str(err.value)
        assert "runs `flowdesk db apply`" in str(err.value)  # no database named: no --db
        assert _ledger_rows(pg_empty_url) == 0  # nothing was applied
    finally:
        with psycopg.connect(pg_empty_url, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_an_applier_held_up_by_another_one_past_the_lock_timeout_applies_nothing(
    pg_empty_url, monkeypatch
):
    import psycopg

    from desktop_app.errors import StoreError

    # the other applier holds the schema lock; waiting 60 s for it is the
    # production setting, a tenth of a second gives the same refusal
    monkeypatch.setattr(migrations, "PG_LOCK_TIMEOUT", "100ms")
    with psycopg.connect(pg_empty_url) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (migrations.PG_APPLY_LOCK,))
        with (
            psycopg.connect(pg_empty_url, autocommit=True) as conn,
            pytest.raises(StoreError) as err,
        ):
            migrations.apply(conn)
        other.rollback()
    assert str(err.value) == (
        "another `flowdesk db apply` held the schema lock for more than 100ms; "
        "nothing was applied by this one. Wait for it to finish and run it again."
    )
    assert _ledger_rows(pg_empty_url) == 0
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        assert len(migrations.apply(conn)) == len(migrations.schema_files(dialect="postgres"))


def test_a_failing_file_names_its_sqlstate_and_keeps_the_files_before_it(pg_empty_url):
    import psycopg

    from desktop_app.errors import StoreError

    good = migrations.schema_files(dialect="postgres")[:1]
    bad = migrations.SchemaFile("core", "9999_broken.sql", "CREATE TABLE (;")
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        with pytest.raises(StoreError) as err:
            migrations.apply(conn, [*good, bad])
        assert "PostgreSQL error applying the schema (SQLSTATE 42601)" in str(err.value)
        states = {s.key: s.state for s in migrations.status(conn, [*good, bad])}
    assert states == {good[0].key: "applied", bad.key: "pending"}


def test_dialect_of_a_psycopg_connection_is_postgres(pg_empty_url):
    import psycopg

    with psycopg.connect(pg_empty_url) as conn:
        assert migrations.dialect_of(conn) == "postgres"


def test_an_edited_file_is_refused_before_anything_is_applied(pg_empty_url):
    import psycopg

    files = migrations.schema_files(dialect="postgres")
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        migrations.apply(conn, files[:1])
        edited = migrations.SchemaFile(files[0].component, files[0].name, files[0].sql + "\n-- x")
        with pytest.raises(SchemaChecksumError):
            migrations.apply(conn, [files[1], edited])
        states = {s.key: s.state for s in migrations.status(conn, files[:2])}
    assert states == {files[0].key: "applied", files[1].key: "pending"}


def _blocked_on_the_schema_lock(url: str) -> None:
    """Return once a session waits for the appliers' advisory lock (bounded)."""
    import time

    import psycopg

    deadline = time.monotonic() + 60
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)  # polling an observable condition, not a guessed delay
    raise AssertionError("the applier never waited for the schema lock")


def _apply_while_another_applier_does_the_first_file(url: str, first_sql: str):
    """Start ``apply`` after its pre-check while another applier, holding the
    lock, records the first file (with ``first_sql``); returns what apply did."""
    import threading

    import psycopg

    files = migrations.schema_files(dialect="postgres")
    first = files[0]
    outcome: list[object] = []
    with psycopg.connect(url) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (migrations.PG_APPLY_LOCK,))

        def applier() -> None:
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    outcome.append(migrations.apply(conn))
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=applier)
        thread.start()
        _blocked_on_the_schema_lock(url)  # its pre-check saw every file pending
        other.execute(f"CREATE SCHEMA {migrations.PG_SCHEMA}")
        other.execute(
            f"CREATE TABLE {migrations.PG_SCHEMA}.{migrations.LEDGER} (component text NOT NULL, "
            "name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL, "
            "PRIMARY KEY (component, name))"
        )
        other.execute(f"SET LOCAL search_path = {migrations.PG_SCHEMA}")
        other.execute(first.sql.encode("utf-8"))
        checksum = migrations.SchemaFile(first.component, first.name, first_sql).checksum
        other.execute(
            f"INSERT INTO {migrations.LEDGER} VALUES (%s, %s, %s, now())",
            (first.component, first.name, checksum),
        )
        other.commit()
    thread.join(120)
    assert not thread.is_alive()
    return files, outcome[0]


def test_a_file_another_applier_did_meanwhile_is_skipped_and_the_rest_applied(pg_empty_url):
    import psycopg

    first_sql = migrations.schema_files(dialect="postgres")[0].sql
    files, applied = _apply_while_another_applier_does_the_first_file(pg_empty_url, first_sql)
    assert isinstance(applied, list)
    assert [f.key for f in applied] == [f.key for f in files[1:]]
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        assert {s.state for s in migrations.status(conn)} == {"applied"}


def test_a_file_another_applier_did_meanwhile_from_an_edited_copy_is_refused(pg_empty_url):
    import psycopg

    first_sql = migrations.schema_files(dialect="postgres")[0].sql
    files, outcome = _apply_while_another_applier_does_the_first_file(
        pg_empty_url, first_sql + "\n-- edited elsewhere"
    )
    assert isinstance(outcome, SchemaChecksumError)
    assert f"schema file {files[0].key} changed since it was applied" in str(outcome)
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        states = {s.key: s.state for s in migrations.status(conn)}
    assert states[files[0].key] == "edited"
    assert {states[f.key] for f in files[1:]} == {"pending"}  # nothing applied after the refusal


def test_a_role_that_cannot_read_the_ledger_is_told_it_lacks_a_privilege(pg_empty_url):
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    with psycopg.connect(pg_empty_url, autocommit=True) as admin:
        migrations.apply(admin)
        role = f"r_{uuid.uuid4().hex[:10]}"
        admin.execute(f"CREATE ROLE {role} LOGIN")
    parts = urlsplit(pg_empty_url)
    as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    try:
        with psycopg.connect(as_role, autocommit=True) as conn, pytest.raises(StoreError) as err:
            migrations.status(conn)
        said = str(err.value)
        assert f"exists in this database, but the PostgreSQL role {role} lacks privileges" in said
        assert f'GRANT USAGE ON SCHEMA flowdesk TO "{role}"' in str(err.value)
    finally:
        with psycopg.connect(pg_empty_url, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


# -- what doctor checks: the applied schema's objects and its own records --


def _applied(path: Path):
    conn = open_connection(path)
    migrations.apply(conn)
    return conn


def test_missing_objects_is_empty_on_a_whole_schema_and_names_each_lost_object(tmp_path: Path):
    conn = _applied(tmp_path / "f.db")
    try:
        assert migrations.missing_objects(conn) == []
        conn.execute("DROP TRIGGER runs_delete_checkpoints")
        conn.execute("DROP INDEX waits_deadline")
        conn.execute("ALTER TABLE digest_files DROP COLUMN kind")
        assert migrations.missing_objects(conn) == [
            "column digest_files.kind",
            "index waits_deadline",
            "trigger runs_delete_checkpoints",
        ]
        conn.execute("DROP TABLE waits")  # its indexes go with it; no column of it is named
        lost = migrations.missing_objects(conn)
        assert "table waits" in lost and "index waits_run" in lost
        assert not [x for x in lost if x.startswith("column waits.")]
        assert lost == sorted(lost)
    finally:
        conn.close()


def test_missing_objects_says_nothing_while_a_schema_file_is_pending(tmp_path: Path):
    """A file not applied yet is `db apply`'s to create (status reports it),
    not a lost object."""
    conn = open_connection(tmp_path / "p.db")
    try:
        migrations.apply(conn, migrations.schema_files()[:-1])
        assert migrations.missing_objects(conn) == []
    finally:
        conn.close()


def test_the_schema_records_dropped_from_flowdesk_tables_is_named_not_read_as_empty(
    tmp_path: Path,
):
    conn = _applied(tmp_path / "f.db")
    try:
        conn.execute(f"DROP TABLE {migrations.LEDGER}")
        for db, named in (("", "the database holds"), ("/d/f.db", "the database /d/f.db holds")):
            with pytest.raises(SchemaRecordsLostError) as err:
                migrations.missing_objects(conn) if not db else migrations.verify(conn, db=db)
            said = str(err.value)
            assert said.startswith(f"{named} Flowdesk's tables but not its record of the schema")
            assert f"(table {migrations.LEDGER}): it was dropped outside Flowdesk" in said
            assert said.endswith(
                "Restore the file from a backup (stop every Flowdesk process using it "
                "first); nothing was changed"
            )
        with pytest.raises(SchemaRecordsLostError):
            migrations.apply(conn)
        assert conn.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    finally:
        conn.close()


def test_an_empty_file_has_no_records_and_every_file_pending(tmp_path: Path):
    conn = open_connection(tmp_path / "e.db")
    try:
        assert {s.state for s in migrations.status(conn)} == {"pending"}
        assert migrations.missing_objects(conn) == []
    finally:
        conn.close()
