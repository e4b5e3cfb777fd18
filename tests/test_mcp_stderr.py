"""A stdio MCP server started without an error log gets the process's
stderr of *now*: the MCP SDK's own default is the ``sys.stderr`` of when
it was imported, which a program that swapped its streams back (a test
session that ended, a full-screen app that captured them) has closed.

A real subprocess, and a real MCP server in it (tests/mcp_notes_server.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import cli_forkserver

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import io, sys
swapped = io.TextIOWrapper(io.BufferedWriter(io.FileIO(sys.argv[2], "w")))
sys.stderr = swapped
import mcp.client.stdio  # binds its default errlog to the swapped stream
sys.stderr = sys.__stderr__
swapped.close()
from desktop_app.agent.mcp import McpServer
command = [sys.executable, "-m", "tests.mcp_notes_server", sys.argv[1], "stdio"]
with McpServer("notes", command=command, timeout_s=20) as server:
    print(sorted(t.name for t in server.tools()))
"""


def test_a_stdio_server_starts_after_the_stderr_the_sdk_saw_was_closed(tmp_path):
    out = cli_forkserver.run_argv(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "notes.log"), str(tmp_path / "old.err")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "notes__append" in out.stdout, out.stdout
