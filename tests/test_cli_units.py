"""Small pure pieces of the command line and the composition root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.bootstrap import parse_database
from desktop_app.cli.output import Hints, iso
from desktop_app.errors import BackendUnavailableError, ConfigError
from tests import cli_forkserver
from tests.cli_support import install_hint


def test_iso_is_utc_with_milliseconds():
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_780_000_000.25) == "2026-05-28T20:26:40.250Z"
    assert iso(None) is None


def test_hints_repeat_db_and_scope_quoted():
    assert Hints(None, None).cmd("resume --all") == "flowdesk resume --all"
    assert (
        Hints("/my notes/f.db", "work").cmd("runs")
        == "flowdesk --db '/my notes/f.db' --scope work runs"
    )


def test_database_strings_pick_a_backend(monkeypatch):
    import importlib.util

    assert parse_database("/x/f.db").path == Path("/x/f.db")
    assert parse_database("sqlite:///x/f.db").path == Path("/x/f.db")
    # a URL's path is percent-encoded; a query or fragment is refused, not a file name
    assert parse_database("sqlite:///x/my%20notes%3F.db").path == Path("/x/my notes?.db")
    for url in ("sqlite:///x/f.db?mode=ro", "sqlite:///x/f.db#top"):
        with pytest.raises(BackendUnavailableError, match="%3F or %23"):
            parse_database(url)
    if importlib.util.find_spec("psycopg") is not None:
        pg = parse_database("postgresql://alice@db/x")
        assert (pg.backend, pg.url) == ("postgres", "postgresql://alice@db/x")
    real = importlib.util.find_spec
    monkeypatch.setattr(  # a machine without the flowdesk[postgres] extra
        importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a)
    )
    with pytest.raises(BackendUnavailableError) as info:
        parse_database("postgresql://alice@db/x")
    assert isinstance(info.value, ConfigError)  # exit code 2
    assert "'postgresql://alice@db/x'" in str(info.value)
    assert f"not installed: {install_hint('postgres')} (or give" in str(info.value)
    with pytest.raises(BackendUnavailableError, match="unknown database URL scheme 'mysql'"):
        parse_database("mysql://db/x")


def test_cli_package_names_no_backend():
    """Nothing in desktop_app/cli imports apsw or names a Sqlite class."""
    root = Path(__file__).resolve().parents[1] / "desktop_app" / "cli"
    for path in root.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "apsw" not in text and "Sqlite" not in text, path


def test_python_m_and_entry_point_both_work():
    out = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("flowdesk ")
    script = Path(sys.executable).parent / "flowdesk"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "watch" in out.stdout and "Exit codes" in out.stdout


def test_a_percent_encoded_sqlite_url_names_the_decoded_file_and_its_hint_runs(tmp_path):
    """``--db sqlite:///…/my%20notes.db`` is the file ``my notes.db`` (not one
    named with ``%20``); the ``db apply`` hint printed for it is run as
    printed and creates that file, 0600."""
    import os
    import re

    from tests.cli_support import as_printed, flowdesk

    url = f"sqlite://{tmp_path.as_posix()}/my%20notes.db"
    missing = flowdesk(url, "runs")
    assert missing.returncode == 1, missing.stderr
    (hint,) = re.findall(r"`(flowdesk --db [^`]* db apply)`", missing.stderr)
    applied = as_printed(hint, env=dict(os.environ))
    assert applied.returncode == 0, applied.stderr
    made = tmp_path / "my notes.db"
    assert made.exists() and not list(tmp_path.glob("*%20*"))
    assert made.stat().st_mode & 0o777 == 0o600
    assert flowdesk(url, "runs").returncode == 0
    refused = flowdesk(url + "?mode=ro", "runs")
    assert refused.returncode == 2 and "%3F or %23" in refused.stderr
