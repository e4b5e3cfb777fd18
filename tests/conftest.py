"""Shared fixtures. Tests never touch the user's real config, data or keyring."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A failing keyring unless a test opts into an in-memory one (STYLE.md).
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))  # the log folder
    monkeypatch.setenv("FLOWDESK_CONFIG", str(home / "flowdesk-config.toml"))
    for var in list(os.environ):
        if var.startswith("FLOWDESK_") and var != "FLOWDESK_CONFIG":
            monkeypatch.delenv(var, raising=False)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A database file with the schema applied (created, mode 0600)."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection

    path = tmp_path / "flowdesk.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return path


@pytest.fixture
def sqlite_store(db_path: Path):
    from desktop_app.store.sqlite import open_store

    store = open_store(db_path)
    yield store
    store.close()
