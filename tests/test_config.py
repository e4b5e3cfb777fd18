"""Settings: FLOWDESK_* env vars, a TOML file in the config dir, --db override."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.config import config_file, default_db_path, load_settings
from desktop_app.errors import ConfigError


def test_defaults_use_platform_dirs(monkeypatch, tmp_path):
    settings = load_settings()
    assert settings.db_path == str(default_db_path())  # a string: a path or a database URL
    assert Path(settings.db_path).name == "flowdesk.db"
    assert str(settings.db_path).startswith(str(Path.home()))
    assert settings.synchronous == "FULL"
    assert not Path(settings.db_path).exists()  # computing the default creates nothing


def test_toml_file_then_env_then_arguments(monkeypatch, tmp_path):
    cfg = Path(config_file())
    cfg.write_text('synchronous = "NORMAL"\nbusy_timeout_s = 3\n[model]\nmodel = "llama3"\n')
    s = load_settings()
    assert (s.synchronous, s.busy_timeout_s, s.model.model) == ("NORMAL", 3, "llama3")
    monkeypatch.setenv("FLOWDESK_SYNCHRONOUS", "EXTRA")
    monkeypatch.setenv("FLOWDESK_MODEL__BASE_URL", "http://127.0.0.1:11434/v1")
    s = load_settings()
    assert s.synchronous == "EXTRA" and s.model.base_url == "http://127.0.0.1:11434/v1"
    s = load_settings(db_path=tmp_path / "x.db")
    assert s.db_path == str(tmp_path / "x.db")


def test_invalid_setting_names_the_field(monkeypatch):
    monkeypatch.setenv("FLOWDESK_SYNCHRONOUS", "SOMETIMES")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "synchronous" in str(info.value)


def test_config_file_can_be_moved(monkeypatch, tmp_path):
    other = tmp_path / "elsewhere.toml"
    other.write_text("scope = 'work'\n")
    monkeypatch.setenv("FLOWDESK_CONFIG", str(other))
    assert load_settings().scope == "work"


def test_importing_flowdesk_has_no_side_effects(tmp_path):
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    code = (
        "import desktop_app, desktop_app.config, desktop_app.cli, desktop_app.flow, "
        "desktop_app.flows.digest, desktop_app.store.sqlite.store; "
        "desktop_app.config.load_settings()"
    )
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert list(home.iterdir()) == []


def test_engine_modules_never_load_apsw_or_textual():
    """flow/ must not import apsw (only store.sqlite does) nor textual."""
    import subprocess
    import sys

    code = (
        "import sys, desktop_app.flow, desktop_app.store.memory.store, desktop_app.flows.digest; "
        "print(sorted(m for m in ('apsw', 'textual', 'sqlite3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
