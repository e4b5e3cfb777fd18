"""Secrets in URLs (an MCP server's, the model provider's) and the model's
API key never reach the terminal or the log file: the password of
``user:password@`` and the values of secret query parameters (``api_key``,
``token``, ...) show as ``***``; ``flowdesk doctor`` checks the provider with
the key the agent sends and says when it is refused or cannot be read.
Real ``flowdesk`` processes, real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from desktop_app.errors import redact

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
