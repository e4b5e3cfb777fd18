"""Small pure pieces of the command line and the composition root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.bootstrap import parse_database
from desktop_app.cli.output import Hints, iso
from desktop_app.errors import BackendUnavailableError, ConfigError


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
    assert "pip install 'flowdesk[postgres]'" in str(info.value)
    with pytest.raises(BackendUnavailableError, match="unknown database URL scheme 'mysql'"):
        parse_database("mysql://db/x")


def test_cli_package_names_no_backend():
    """Nothing in desktop_app/cli imports apsw or names a Sqlite class."""
    root = Path(__file__).resolve().parents[1] / "desktop_app" / "cli"
    for path in root.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "apsw" not in text and "Sqlite" not in text, path


def test_python_m_and_entry_point_both_work():
    out = subprocess.run(
        [sys.executable, "-m", "desktop_app.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("flowdesk ")
    script = Path(sys.executable).parent / "flowdesk"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "watch" in out.stdout and "Exit codes" in out.stdout
