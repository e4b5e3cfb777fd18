"""API keys without a keyring: ``FLOWDESK_MODEL__API_KEY`` or a 0600 file named
in settings, with the keyring backend forced to fail (tests/conftest.py).
The key reaches the provider's ``Authorization`` header and nothing else:
not SQLite, not logs, not the settings' repr, not a command line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import keyring
import pytest

from desktop_app.agent import Agent
from desktop_app.bootstrap import build_model, open_sqlite_store
from desktop_app.config import config_file, load_settings
from desktop_app.errors import KeyFileError, SecretsError
from desktop_app.secrets import get_secret, model_api_key, read_key_file, set_secret
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests.chat_server import ChatServer, completion
from tests.file_keyring import installed
from tests.test_app_inbox_settings import MemoryKeyring

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-4f9a1c0e7b2d-not-a-real-key"


def key_file(tmp_path: Path, mode: int, text: str = KEY + "\n") -> Path:
    path = tmp_path / "keys" / "model.key"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def config(text: str) -> Path:
    path = config_file()  # the default settings file (conftest: under XDG_CONFIG_HOME)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_keyring_backend_is_forced_to_fail():
    assert type(keyring.get_keyring()).__module__ == "keyring.backends.fail"
    assert get_secret("model_api_key") is None  # no keyring: no secret, not a crash


def test_storing_without_a_keyring_says_what_to_do_instead():
    with pytest.raises(SecretsError) as info:
        set_secret("model_api_key", KEY)
    message = str(info.value)
    assert "FLOWDESK_MODEL__API_KEY" in message and "api_key_file" in message
    assert "chmod 600" in message
    assert "keyring --list-backends" not in message  # not a command on PATH
    assert KEY not in message


def test_the_environment_variable_gives_the_key(monkeypatch):
    monkeypatch.setenv("FLOWDESK_MODEL__API_KEY", KEY)
    settings = load_settings()
    key = model_api_key(settings.model)
    assert key is not None and key.get_secret_value() == KEY
    assert KEY not in repr(settings) and KEY not in str(settings.model_dump())
    assert KEY not in repr(key)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_key_file_only_the_owner_can_read_gives_the_key(tmp_path, mode):
    path = key_file(tmp_path, mode)
    config(f'[model]\napi_key_file = "{path}"\n')
    key = model_api_key(load_settings().model)
    assert key is not None and key.get_secret_value() == KEY  # newline stripped


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_file_others_can_read_is_refused_with_the_chmod_to_run(tmp_path, mode):
    path = key_file(tmp_path, mode)
    config(f'[model]\napi_key_file = "{path}"\n')
    with pytest.raises(KeyFileError) as info:
        model_api_key(load_settings().model)
    assert f"chmod 600 {path}" in str(info.value)
    assert f"{mode:04o}" in str(info.value)
    assert KEY not in str(info.value)


def test_a_missing_or_empty_key_file_is_refused(tmp_path):
    with pytest.raises(KeyFileError, match="does not exist"):
        read_key_file(tmp_path / "nope.key")
    with pytest.raises(KeyFileError, match="empty"):
        read_key_file(key_file(tmp_path, 0o600, "\n"))
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_key_file(tmp_path)


def test_a_key_written_in_the_settings_file_is_refused(tmp_path):
    path = config(f'[model]\napi_key = "{KEY}"\n')
    with pytest.raises(SecretsError) as info:
        model_api_key(load_settings().model)
    assert str(path) in str(info.value) and KEY not in str(info.value)


def test_the_variable_and_a_key_file_together_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWDESK_MODEL__API_KEY", KEY)
    config(f'[model]\napi_key_file = "{key_file(tmp_path, 0o600)}"\n')
    with pytest.raises(SecretsError, match="keep one"):
        model_api_key(load_settings().model)


def all_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_the_key_reaches_the_provider_and_not_sqlite_or_logs(tmp_path, monkeypatch, caplog):
    db = tmp_path / "f.db"
    caplog.set_level(logging.DEBUG)
    with ChatServer() as server:
        server.script = [("json", completion("Hello from the model."))]
        monkeypatch.setenv("FLOWDESK_MODEL__API_KEY", KEY)
        monkeypatch.setenv("FLOWDESK_MODEL__BASE_URL", server.url)
        monkeypatch.setenv("FLOWDESK_MODEL__MODEL", "m")
        settings = load_settings(db_path=db)
        from desktop_app.store import migrations
        from desktop_app.store.connection import open_connection

        conn = open_connection(db)
        migrations.apply(conn)
        conn.close()
        model = build_model(settings)
        store = open_sqlite_store(settings)
        agent = Agent("ask", model, SqliteAgentStore(store), [])
        res = agent.ask("say hello")
        assert res.status == "done" and res.text == "Hello from the model."
        store.close()
    (request,) = server.requests
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY.encode() not in all_bytes(db)
    assert b"say hello" in all_bytes(db)  # the run was stored: the check looks at real data
    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert KEY not in logged


def test_flowdesk_ask_uses_a_key_file_and_prints_no_key(tmp_path):
    db = tmp_path / "f.db"
    path = key_file(tmp_path, 0o600)
    cfg = tmp_path / "config.toml"
    env = {**os.environ, "FLOWDESK_CONFIG": str(cfg)}
    with ChatServer() as server:
        cfg.write_text(
            f'[model]\nbase_url = "{server.url}"\nmodel = "m"\napi_key_file = "{path}"\n'
        )
        server.script = [("json", completion("Keyless box, keyed call."))]
        cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db)]
        assert subprocess.run([*cmd, "db", "apply"], env=env, timeout=120).returncode == 0
        out = subprocess.run(
            [*cmd, "ask", "hello?"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
        )
        assert out.returncode == 0, out.stderr
        assert "Keyless box, keyed call." in out.stdout
        assert KEY not in " ".join(cmd) + out.stdout + out.stderr  # nothing on a command line
        (request,) = server.requests
        assert request["headers"]["Authorization"] == f"Bearer {KEY}"

        path.chmod(0o644)  # now readable by others: refused before any call
        bad = subprocess.run(
            [*cmd, "ask", "hello?"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
        )
        assert bad.returncode != 0 and f"chmod 600 {path}" in bad.stderr
        assert "Traceback" not in bad.stderr and KEY not in bad.stdout + bad.stderr
        assert len(server.requests) == 1
    assert KEY.encode() not in all_bytes(db)


# -- a key that is more than a key (a privacy tryout: it reached SQLite whole) ------


@pytest.mark.scenario("S114")
@pytest.mark.parametrize(
    ("source", "text", "said"),
    [
        ("file", f"# my openai key\n{KEY}\n", "holds 2 lines; an API key is one line"),
        ("file", f"{KEY}\nsecond\n", "holds 2 lines"),
        ("variable", f"{KEY}\nline2", "holds 2 lines"),
        ("variable", f"{KEY} extra", "has a space or tab inside it (character 36)"),
        ("variable", f"{KEY}é", "has a character an HTTP header cannot carry (character 36"),
        ("file", f"{KEY}\x01\n", "has a character an HTTP header cannot carry"),
        ("file", "# only a comment\n", "holds a comment (a line starting with #), not a key"),
    ],
    ids=[
        "file-comment",
        "file-two-keys",
        "var-newline",
        "var-space",
        "var-accent",
        "file-ctrl",
        "file-only-comment",
    ],
)
def test_flowdesk_ask_refuses_a_key_that_is_not_one_token_and_sends_and_stores_nothing(
    tmp_path, source, text, said
):
    """A key file with a comment line, a variable with a line break in it
    or a key with a non-ASCII character: ``ask`` printed the key whole in
    the transport's error (``Illegal header value b'Bearer # my openai
    key\\ntok-...'``), stored it in the run's error and exported it, or
    ended in a traceback. Refused before any request, naming the source and
    what is wrong, never the key."""
    db = tmp_path / "f.db"
    cfg = tmp_path / "config.toml"
    env = {**os.environ, "FLOWDESK_CONFIG": str(cfg)}
    with ChatServer() as server:
        settings = f'[model]\nbase_url = "{server.url}"\nmodel = "m"\n'
        if source == "file":
            path = key_file(tmp_path, 0o600, text)
            settings += f'api_key_file = "{path}"\n'
            where = f"the API key file {path}"
        else:
            env["FLOWDESK_MODEL__API_KEY"] = text
            where = "FLOWDESK_MODEL__API_KEY"
        cfg.write_text(settings)
        server.script = [("json", completion("never sent"))]
        cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db)]
        assert subprocess.run([*cmd, "db", "apply"], env=env, timeout=120).returncode == 0
        out = subprocess.run(
            [*cmd, "ask", "hello?"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
        )
        assert out.returncode == 1, (out.returncode, out.stderr)
        assert f"{where} {said}" in out.stderr and "nothing was sent" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert KEY not in out.stdout + out.stderr
        assert server.requests == []
    assert KEY.encode() not in all_bytes(db)


class Ring(MemoryKeyring):
    """An in-memory keyring whose ``set_password`` can fail the way a
    backend's own error type does (not a ``KeyringError``), quoting what
    it was given."""

    fail = False

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.fail:
            raise RuntimeError(f"D-Bus said no to {password}")
        super().set_password(service, username, password)

    def get_password(self, service: str, username: str) -> str | None:
        if self.fail:
            raise RuntimeError("D-Bus is gone")
        return super().get_password(service, username)


@pytest.fixture
def ring():
    with installed(Ring()) as ring:
        yield ring


def test_a_key_with_a_line_break_is_not_stored_in_the_keyring(ring):
    with pytest.raises(SecretsError) as info:
        set_secret("model_api_key", f"# comment\n{KEY}")
    assert str(info.value) == (
        "the secret for 'model_api_key' holds 2 lines; an API key is one line: write the key "
        "alone, with no comment or other line; nothing was stored"
    )
    assert ring.store == {}


@pytest.mark.scenario("S114")
def test_a_keyring_entry_that_is_not_one_token_is_refused_before_a_request(ring):
    ring.store[("flowdesk", "model_api_key")] = f"{KEY} {KEY}"  # stored by another tool
    with pytest.raises(SecretsError) as info:
        model_api_key(load_settings().model)
    assert str(info.value) == (
        "the keyring entry 'model_api_key' has a space or tab inside it (character 36); an "
        "API key has none; nothing was sent: store it again with `flowdesk secrets set "
        "model_api_key`"
    )


def test_a_keyring_backend_failing_its_own_way_says_so_without_the_key(ring):
    ring.fail = True
    with pytest.raises(SecretsError) as info:
        set_secret("model_api_key", KEY)
    assert "the keyring backend failed (RuntimeError: D-Bus said no to ***)" in str(info.value)
    assert KEY not in str(info.value) and info.value.__cause__ is None
    assert info.value.__suppress_context__  # no traceback chain to print the value
    with pytest.raises(SecretsError) as read:  # reading: a typed error, not a traceback
        model_api_key(load_settings().model)
    assert str(read.value).startswith(
        "cannot read secret 'model_api_key': the keyring backend failed (RuntimeError: "
        "D-Bus is gone); without a keyring, give the key in the FLOWDESK_MODEL__API_KEY"
    )


@pytest.mark.scenario("S114")
@pytest.mark.parametrize(
    "given", [[KEY], ["--value", KEY], [f"--key={KEY}"]], ids=["key", "--value", "--key="]
)
def test_secrets_set_refuses_a_key_on_the_command_line_without_echoing_it(tmp_path, given):
    db = tmp_path / "f.db"
    cli = [sys.executable, "-m", "desktop_app.cli", "--db", str(db)]
    out = subprocess.run(
        [*cli, "secrets", "set", "model_api_key", *given],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 2, out.stderr
    assert KEY not in out.stdout + out.stderr
    assert "never on the command line" in out.stderr and "nothing was stored" in out.stderr
    assert f"`flowdesk --db {db} secrets set model_api_key`" in out.stderr


def test_secrets_set_under_a_name_the_model_does_not_read_says_which_it_reads(tmp_path):
    """A tryout: ``secrets set bogus_name`` stored the key with no word
    that the model reads another entry (``model.api_key_name``)."""
    env = {
        **os.environ,
        "PYTHON_KEYRING_BACKEND": "tests.test_app_inbox_settings.MemoryKeyring",
    }
    cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(tmp_path / "f.db")]
    for name, note in [("model_api_key", False), ("modle_api_key", True)]:
        out = subprocess.run(
            [*cmd, "secrets", "set", name],
            input=KEY + "\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"stored {name} in the keyring\n"
        said = (
            "note: the model's key is read from 'model_api_key' (model.api_key_name), not "
            f"'{name}'; set api_key_name = \"{name}\" in the [model] section of the settings "
            "file to use this one\n"
        )
        assert out.stderr == (said if note else ""), out.stderr
