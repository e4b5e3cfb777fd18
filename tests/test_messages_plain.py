"""Messages a new user reads, said plainly: a server that is down (no "?."),
a misspelt PostgreSQL scheme (names postgresql://), a missing schema (said
briefly, not all its file names; the db apply it names runs as printed),
the app on a PostgreSQL database without the schema (no "usable file"),
and a worker's routine contention with a peer (logged at debug level, not
printed to a person)."""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from desktop_app.errors import SchemaMissingError
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from tests.cli_support import as_printed, flowdesk


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_that_is_down_is_said_without_doubled_punctuation(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://team@127.0.0.1:{_free_port()}/teamdb"
    down = flowdesk(url, "runs", env={"HOME": str(tmp_path)})
    assert down.returncode == 1, down.stderr
    said = down.stderr
    assert f"cannot connect to PostgreSQL at {url}: " in said, said
    assert "Check the URL, that the server is up" in said
    assert not re.search(r"[?.!]\.", said.replace("...", "")), said  # libpq's "?" then ours


def test_a_misspelt_scheme_names_postgresql_and_never_the_password(tmp_path: Path) -> None:
    bad = flowdesk("postgresq://team:s3cretPW@db.internal/teamdb", "runs")
    assert bad.returncode == 2, bad.stderr
    assert "unknown database URL scheme 'postgresq'" in bad.stderr
    assert "postgresql://USER@HOST:PORT/DBNAME" in bad.stderr
    assert "s3cretPW" not in bad.stderr


def test_a_missing_schema_is_said_briefly(tmp_path: Path) -> None:
    files = migrations.schema_files()
    conn = open_connection(tmp_path / "empty.db")
    try:
        with pytest.raises(SchemaMissingError) as err:
            migrations.verify(conn)
        said = str(err.value)
        assert said.startswith(
            f"the database has no Flowdesk schema yet ({len(files)} schema files to apply); "
        )
        assert files[0].key not in said and files[-1].key not in said  # not every name
        migrations.apply(conn, files[:-5])
        with pytest.raises(SchemaMissingError) as err:
            migrations.verify(conn)
        assert str(err.value).startswith(
            f"the database is missing 5 of Flowdesk's {len(files)} schema files "
            f"({files[-5].key} to {files[-1].key}); "
        )
    finally:
        conn.close()


@pytest.mark.postgres
def test_runs_on_an_empty_postgres_database_names_a_db_apply_that_runs(
    pg_empty_url: str,
) -> None:
    refused = flowdesk(pg_empty_url, "runs")
    assert refused.returncode != 0
    assert "the database has no Flowdesk schema yet" in refused.stderr
    assert "core/0001" not in refused.stderr
    command = re.search(r"run `(flowdesk [^`]+)`", refused.stderr)
    assert command is not None, refused.stderr
    assert command.group(1) == f"flowdesk --db {pg_empty_url} db apply"
    applied = as_printed(command.group(1), dict(os.environ))
    assert applied.returncode == 0, applied.stderr
    assert flowdesk(pg_empty_url, "runs").returncode == 0


@pytest.mark.postgres
async def test_the_app_on_postgres_without_the_schema_does_not_ask_for_a_usable_file(
    pg_empty_url: str,
) -> None:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.app_support import settle

    app = FlowdeskApp(load_settings(db_path=pg_empty_url))
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.startup_error is not None
        assert "db apply" in app.startup_error
        said = app.runs_screen.status_line.message
        assert "usable file" not in said, said
        assert said.startswith("Nothing was changed. Quit with q, do what the message says")


def test_a_worker_logs_a_run_a_peer_holds_at_debug_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """`flowdesk agent` (worker=True) does not print "... Wait for it" for an
    agent run a live peer took a moment ago; `resume --all` still says it."""
    from desktop_app.agent import recovery
    from desktop_app.cli.ask import recover_agents
    from desktop_app.cli.output import Hints
    from desktop_app.config import load_settings
    from desktop_app.errors import AgentRunLeasedError

    run = SimpleNamespace(run_id="ar-1")
    leased = AgentRunLeasedError("ar-1", f"{socket.gethostname()}:1:abc", None)

    def peer_took_it(_store, _settings, _model, _now, on_result=None, skip=None):  # type: ignore[no-untyped-def]
        on_result(run, leased)
        return [(run, leased)]

    monkeypatch.setattr(recovery, "recover_agent_runs", peer_took_it)
    sv = SimpleNamespace(settings=load_settings(db_path=tmp_path / "f.db"), agents=None)
    with caplog.at_level(logging.DEBUG, logger="desktop_app.cli.ask"):
        assert recover_agents(sv, set(), worker=True, hints=Hints(None, None)) == (1, 0)  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in debug] == [
        f"agent run ar-1 is held by a live peer: {socket.gethostname()}:1:abc"
    ]
    assert recover_agents(sv, set(), hints=Hints(None, None)) == (1, 0)  # type: ignore[arg-type]
    assert "agent run ar-1 not resumed here: " in capsys.readouterr().out
