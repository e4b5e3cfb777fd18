"""Secrets in URLs (an MCP server's, the model provider's) and the model's
API key never reach the terminal or the log file: the password of
``user:password@`` and the values of secret query parameters (``api_key``,
``token``, ...) show as ``***``; ``flowdesk doctor`` checks the provider with
the key the agent sends and says when it is refused or cannot be read.
Real ``flowdesk`` processes, real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from desktop_app.errors import redact
from tests.chat_server import ChatServer
from tests.cli_support import flowdesk

MCP_PASS = "TRYOUT-MCPPASS-888"
MCP_TOKEN = "TRYOUT-MCPTOKEN-777"
URL_PASS = "TRYOUT-URLPASS-66"
URL_KEY = "TRYOUT-URLKEY-55"
KEY = "TRYOUT-MODELKEY-4f9a1c0e7b2d"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flowdesk_log() -> str:
    path = Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"
    return path.read_text() if path.exists() else ""


def written(db: Path) -> bytes:
    """Every byte of the database and the files beside it (WAL, locks)."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*") if p.is_file())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://bob:pw@127.0.0.1:1/mcp", "http://bob:***@127.0.0.1:1/mcp"),
        ("https://bob@host/mcp", "https://bob@host/mcp"),  # no password: nothing to mask
        ("http://h/mcp?api_key=k&x=1", "http://h/mcp?api_key=***&x=1"),
        ("http://h/v1?API-Key=k", "http://h/v1?API-Key=***"),
        ("http://h/v1?apikey=k&key=k2", "http://h/v1?apikey=***&key=***"),
        (
            "http://h/?token=t&Access_Token=a&auth=x",
            "http://h/?token=***&Access_Token=***&auth=***",
        ),
        ("http://h/?password=p&secret=s", "http://h/?password=***&secret=***"),
        ("http://h/?sig=s&Signature=s2", "http://h/?sig=***&Signature=***"),
        (  # names ending in a secret word
            "http://h/?client_secret=c&X-Amz-Signature=z&refresh_token=r&X-Amz-Date=d",
            "http://h/?client_secret=***&X-Amz-Signature=***&refresh_token=***&X-Amz-Date=d",
        ),
        ("http://h/?monkey=m&page=2&sslkey=/k", "http://h/?monkey=m&page=2&sslkey=/k"),
        ("http://[::1/x?token=t", "http://***"),  # too malformed to take apart
        ("/home/me/f.db", "/home/me/f.db"),
    ],
)
def test_redact_masks_the_password_and_secret_parameters_of_any_url(url, shown):
    assert redact(url) == shown


def test_redact_urls_masks_each_url_in_a_text_and_keeps_the_rest():
    from desktop_app.errors import redact_urls

    text = (
        "cannot reach (http://bob:pw@127.0.0.1:1/mcp?token=t): see https://h/v1?key=k. "
        "Then retry http://plain/x, or postgresql://me:s3cret@db/flow"
    )
    assert redact_urls(text) == (
        "cannot reach (http://bob:***@127.0.0.1:1/mcp?token=***): see https://h/v1?key=***. "
        "Then retry http://plain/x, or postgresql://me:***@db/flow"
    )


def test_a_log_line_with_a_url_secret_is_masked_in_the_log_file(tmp_path):
    """The log file's filter masks URL secrets in any record, whoever logs it."""
    from desktop_app.config import load_settings
    from desktop_app.observability import setup_logging

    path = setup_logging(load_settings(db_path=tmp_path / "f.db"))
    assert path is not None
    logging.getLogger("desktop_app.test").warning(
        "fetching %s failed", f"http://bob:{MCP_PASS}@127.0.0.1:1/x?api_key={MCP_TOKEN}"
    )
    for handler in logging.getLogger("desktop_app").handlers:
        handler.flush()
    text = path.read_text()
    assert "fetching http://bob:***@127.0.0.1:1/x?api_key=*** failed" in text
    assert MCP_PASS not in text and MCP_TOKEN not in text


@pytest.mark.scenario("S114")
def test_an_mcp_server_url_with_secrets_is_masked_on_stderr_in_the_log_and_the_database(
    tmp_path,
):
    """The tryout: `ask --mcp` with a server that cannot be reached printed
    and logged its URL as written, password and ?api_key= included."""
    pytest.importorskip("mcp")
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    port = free_port()  # nothing listens there
    config = tmp_path / "config.toml"
    config.write_text(
        f'[mcp_servers.userinfo]\nurl = "http://bob:{MCP_PASS}@127.0.0.1:{port}/mcp"\n'
        f'[mcp_servers.query]\nurl = "http://127.0.0.1:{port}/mcp?api_key={MCP_TOKEN}"\n'
    )
    env = {
        "FLOWDESK_CONFIG": str(config),
        "FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9/v1",  # never reached
        "FLOWDESK_MODEL__MODEL": "m",
    }
    shown = {
        "userinfo": f"(http://bob:***@127.0.0.1:{port}/mcp)",
        "query": f"(http://127.0.0.1:{port}/mcp?api_key=***)",
    }
    printed = ""
    for name, where in shown.items():
        out = flowdesk(db, "ask", "x", "--mcp", name, env=env)
        printed += out.stdout + out.stderr
        assert out.returncode == 1, out.stdout + out.stderr
        said = f"cannot connect to MCP server '{name}' {where}: ConnectError"
        assert said in out.stderr, out.stderr
        logged = [ln for ln in flowdesk_log().splitlines() if said in ln]
        assert logged and " WARNING desktop_app.agent.mcp " in logged[-1], flowdesk_log()
    seen = printed + flowdesk_log()
    for secret in (MCP_PASS, MCP_TOKEN):
        assert secret not in seen
        assert secret.encode() not in written(db)


@pytest.mark.scenario("S114")
def test_an_mcp_server_command_that_fails_shows_its_command_without_secrets(tmp_path):
    """The tryout: a command server that failed to start printed its whole
    argument list, a ``--header "Authorization: Bearer ..."`` and a
    ``--token`` value included (the log masked the bearer token only)."""
    pytest.importorskip("mcp")
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    config = tmp_path / "config.toml"
    argv = [
        sys.executable,
        "-c",
        "import sys; sys.exit(3)",
        "--token",
        "TRYOUT-TOK-1",
        "--api-key=TRYOUT-KEY-2",
        "--header",
        "Authorization: Bearer TRYOUT-BEARER-3",
        f"http://u:{MCP_PASS}@127.0.0.1:9/x",
        # a re-tryout's: an environment assignment, other auth schemes, a key
        # header, a token in a URL's fragment
        "GITHUB_PERSONAL_ACCESS_TOKEN=TRYOUT-ENV-4",
        "--header",
        "Authorization: Basic TRYOUT-BASIC-5",
        "-H",
        "X-Api-Key: TRYOUT-XKEY-6",
        "http://127.0.0.1:9/mcp#token=TRYOUT-FRAG-7",
        "-H",
        "Content-Type: application/json",
    ]
    config.write_text(f"[mcp_servers.broken]\ncommand = {json.dumps(argv)}\ntimeout_s = 20\n")
    env = {
        "FLOWDESK_CONFIG": str(config),
        "FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9/v1",  # never reached
        "FLOWDESK_MODEL__MODEL": "m",
    }
    out = flowdesk(db, "ask", "x", "--mcp", "broken", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        "--token *** --api-key=*** --header Authorization: *** "
        "http://u:***@127.0.0.1:9/x GITHUB_PERSONAL_ACCESS_TOKEN=*** --header Authorization: "
        "*** -H X-Api-Key: *** http://127.0.0.1:9/mcp#token=*** -H Content-Type: "
        "application/json`"
    ) in out.stderr, out.stderr
    seen = out.stdout + out.stderr + flowdesk_log()
    for secret in (
        "TRYOUT-TOK-1",
        "TRYOUT-KEY-2",
        "TRYOUT-BEARER-3",
        MCP_PASS,
        "TRYOUT-ENV-4",
        "TRYOUT-BASIC-5",
        "TRYOUT-XKEY-6",
        "TRYOUT-FRAG-7",
    ):
        assert secret not in seen, secret
        assert secret.encode() not in written(db)


def test_a_provider_error_naming_the_base_url_masks_its_secrets(tmp_path):
    """A reply that is not JSON names model.base_url to check: printed,
    logged and stored with the run, its password and ?api-key= masked."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [("raw", "<html>not json</html>")]
        port = server.url.split(":")[2].split("/")[0]
        base_url = f"http://u:{URL_PASS}@127.0.0.1:{port}/v1"
        env = {"FLOWDESK_MODEL__BASE_URL": base_url, "FLOWDESK_MODEL__MODEL": "m"}
        out = flowdesk(db, "ask", "hello", "--no-stream", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"check that model.base_url (http://u:***@127.0.0.1:{port}/v1/)" in out.stderr
    run_id = out.stderr.split()[1]
    shown = flowdesk(db, "show", run_id)
    seen = out.stdout + out.stderr + shown.stdout + shown.stderr + flowdesk_log()
    assert URL_PASS not in seen and URL_PASS.encode() not in written(db)


def test_a_base_url_with_a_query_asks_after_its_path_and_a_401_echoing_its_secrets_is_masked(
    tmp_path,
):
    """A re-tryout: ``model.base_url`` ``http://alice:PW@host/v1?token=T``
    asked ``/v1?token=T/chat/completions`` (the path after the query), and
    its password went out as a ``Basic`` header that a provider's 401
    echoed, stored with the run, shown and exported unmasked."""
    import base64

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    basic = base64.b64encode(f"alice:{URL_PASS}".encode()).decode()
    with ChatServer() as server:
        server.script = [
            ("status", 401, {}, f"Incorrect API key provided: Basic {basic} (token {URL_KEY})")
        ]
        port = server.url.split(":")[2].split("/")[0]
        base_url = f"http://alice:{URL_PASS}@127.0.0.1:{port}/v1?token={URL_KEY}"
        env = {"FLOWDESK_MODEL__BASE_URL": base_url, "FLOWDESK_MODEL__MODEL": "m"}
        out = flowdesk(db, "ask", "hello", "--no-stream", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    (request,) = server.requests
    assert request["path"] == f"/v1/chat/completions?token={URL_KEY}"
    assert "Incorrect API key provided: Basic *** (token ***)" in out.stderr, out.stderr
    run_id = out.stderr.split()[1]
    shown = flowdesk(db, "show", run_id)
    exported = flowdesk(db, "export", "--out", str(tmp_path / "x"))
    assert exported.returncode == 0, exported.stderr
    files = "".join(p.read_text() for p in (tmp_path / "x").iterdir())
    seen = out.stdout + out.stderr + shown.stdout + shown.stderr + flowdesk_log() + files
    for secret in (URL_PASS, URL_KEY, basic):
        assert secret not in seen, secret
        assert secret.encode() not in written(db)


def test_doctor_masks_the_secrets_of_the_model_base_url(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    port = free_port()  # nothing listens there
    for base_url, shown in (
        (f"http://u:{URL_PASS}@127.0.0.1:{port}/v1", f"http://u:***@127.0.0.1:{port}/v1"),
        (
            f"http://127.0.0.1:{port}/v1?api-key={URL_KEY}",
            f"http://127.0.0.1:{port}/v1?api-key=***",
        ),
    ):
        env = {"FLOWDESK_MODEL__BASE_URL": base_url, "FLOWDESK_MODEL__MODEL": "m"}
        out = flowdesk(db, "doctor", env=env)
        assert out.returncode == 1
        assert f"BAD  model provider     {shown}: ConnectError" in out.stdout, out.stdout
        as_json = flowdesk(db, "doctor", "-o", "json", env=env)
        (check,) = (
            c for c in json.loads(as_json.stdout)["checks"] if c["check"] == "model provider"
        )
        assert check["status"] == "bad" and check["detail"].startswith(f"{shown}: ConnectError")
        seen = out.stdout + out.stderr + as_json.stdout + as_json.stderr + flowdesk_log()
        assert URL_PASS not in seen and URL_KEY not in seen


class _KeyedModels(BaseHTTPRequestHandler):
    """``GET /v1/models``: 200 with the server's key as a bearer token (or
    with none when it wants none), else 401."""

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, KeyedServer)
        got = self.headers.get("Authorization")
        server.seen.append(got)
        ok = server.key is None or got == f"Bearer {server.key}"
        body = b'{"data": [{"id": "m"}]}' if ok else b'{"error": "invalid api key"}'
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class KeyedServer(ThreadingHTTPServer):
    def __init__(self, key: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _KeyedModels)
        self.key = key
        self.seen: list[str | None] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextlib.contextmanager
def serving(key: str | None) -> Iterator[KeyedServer]:
    """A :class:`KeyedServer` answering in a thread of this process."""
    server = KeyedServer(key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def models() -> Iterator[KeyedServer]:
    """A provider on 127.0.0.1 that accepts only :data:`KEY`."""
    with serving(KEY) as server:
        yield server


def _doctor(db: Path, server: KeyedServer, **env: str) -> tuple[str, str, int]:
    """``flowdesk doctor``'s model provider line, everything it printed, and its exit status."""
    out = flowdesk(
        db,
        "doctor",
        env={"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m", **env},
    )
    (line,) = [ln for ln in out.stdout.splitlines() if "model provider" in ln]
    return line, out.stdout + out.stderr, out.returncode


def _key_file(tmp_path: Path, mode: int, text: str = KEY + "\n") -> Path:
    path = tmp_path / "model.key"
    path.write_text(text)
    path.chmod(mode)
    return path


def _settings(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.scenario("S114")
def test_doctor_sends_the_configured_key_and_says_when_the_provider_refuses_it(tmp_path, models):
    """The tryout: doctor asked /models with no key, so a refused key read
    ``ok  model provider ... HTTP 401``."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    good_file = _key_file(tmp_path, 0o600)
    for env in (
        {"FLOWDESK_MODEL__API_KEY": KEY},
        {"FLOWDESK_CONFIG": _settings(tmp_path, f'[model]\napi_key_file = "{good_file}"\n')},
    ):
        line, printed, code = _doctor(db, models, **env)
        assert line == f"ok   model provider     {models.url} HTTP 200", printed
        assert KEY not in printed
    assert models.seen[-2:] == [f"Bearer {KEY}"] * 2  # the agent's header, both ways

    line, printed, code = _doctor(db, models, FLOWDESK_MODEL__API_KEY="TRYOUT-WRONG-KEY")
    assert line == (
        f"BAD  model provider     {models.url} HTTP 401: the provider refused the API key "
        "(the key comes from the FLOWDESK_MODEL__API_KEY environment variable); give it a "
        "key this provider accepts"
    )
    assert code == 1 and "TRYOUT-WRONG-KEY" not in printed

    wrong_file = _key_file(tmp_path, 0o600, "TRYOUT-WRONG-KEY\n")
    line, printed, code = _doctor(
        db, models, FLOWDESK_CONFIG=_settings(tmp_path, f'[model]\napi_key_file = "{wrong_file}"\n')
    )
    assert line == (
        f"BAD  model provider     {models.url} HTTP 401: the provider refused the API key "
        f"(the key comes from the file {wrong_file} (model.api_key_file)); give it a key this "
        "provider accepts"
    )
    assert code == 1 and "TRYOUT-WRONG-KEY" not in printed

    line, printed, code = _doctor(db, models)  # no key at all
    assert line == (
        f"BAD  model provider     {models.url} HTTP 401: the provider wants an API key and "
        "none is set; `flowdesk secrets set model_api_key` sets the key"
    )
    assert code == 1


def test_doctor_says_why_the_key_cannot_be_read(tmp_path, models):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    loose = _key_file(tmp_path, 0o644)
    line, printed, code = _doctor(
        db, models, FLOWDESK_CONFIG=_settings(tmp_path, f'[model]\napi_key_file = "{loose}"\n')
    )
    assert line == (
        f"BAD  model provider     {models.url}: the API key cannot be read: the API key file "
        f"{loose} can be read by other users (mode 0644); run `chmod 600 {loose}` and try again"
    )
    assert code == 1 and KEY not in printed

    in_settings = _settings(tmp_path, f'[model]\napi_key = "{KEY}"\n')
    line, printed, code = _doctor(db, models, FLOWDESK_CONFIG=in_settings)
    assert line.startswith(
        f"BAD  model provider     {models.url}: the API key cannot be read: the settings file "
        f"{in_settings} holds the API key (model.api_key); remove it from there"
    )
    assert code == 1 and KEY not in printed

    line, printed, code = _doctor(
        db, models, PYTHON_KEYRING_BACKEND="tests.file_keyring.LockedKeyring"
    )
    assert line.startswith(
        f"BAD  model provider     {models.url}: the API key cannot be read: cannot read secret "
        "'model_api_key' from the keyring (KeyringLocked: the keyring is locked); unlock your "
        "keyring, or without a keyring, give the key in the FLOWDESK_MODEL__API_KEY"
    ), line
    assert code == 1
    assert not models.seen  # none of these asked the provider with no key or a wrong one


def test_doctor_with_no_key_and_a_provider_that_wants_none_is_fine(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    with serving(None) as server:
        line, _printed, _code = _doctor(db, server)
    assert line == f"ok   model provider     {server.url} HTTP 200"
    assert server.seen == [None]  # no Authorization header
