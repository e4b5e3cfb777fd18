"""Commands that start the published MCP servers the tests use.

``mcp-server-time`` and ``mcp-server-git`` come from PyPI (the ``test``
extra); ``@modelcontextprotocol/server-memory`` and ``server-filesystem``
from npm, pinned in ``tests/mcp_servers/package-lock.json`` and installed by
``make test-servers`` (which ``make test`` runs). A server that is not
installed skips its test, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

NODE_BIN = Path(__file__).resolve().parent / "mcp_servers" / "node_modules" / ".bin"


def _missing(what: str) -> None:
    message = f"{what} is not installed (make test-servers / pip install -e '.[test]')"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def python_server(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` for a server installed from PyPI."""
    if importlib.util.find_spec(module) is None:
        _missing(module)
    return [sys.executable, "-m", module, *args]


def node_server(name: str, *args: str) -> list[str]:
    """The npm server ``@modelcontextprotocol/server-NAME`` with ``ARGS``."""
    program = NODE_BIN / f"mcp-server-{name}"
    if not program.exists():
        _missing(f"@modelcontextprotocol/server-{name}")
    return [str(program), *args]
