"""A small MCP server for tests (the official SDK's MCPServer, formerly FastMCP).

    python -m tests.mcp_notes_server LOG stdio
    python -m tests.mcp_notes_server LOG http     # prints "PORT <n>" once it listens

Tools: ``append(text)`` appends one line to LOG (fsynced, then ``APPENDED <text>``
on stderr) and returns the number of lines; ``append_and_hang(text)`` appends, then never answers (a
call in flight when the client dies). ``NOTES_VARIANT=2`` adds a tool
``count`` (a changed tool list); ``NOTES_VARIANT=escapes`` a tool ``banner``
whose result holds terminal escape sequences (:data:`ESCAPES`);
``NOTES_VARIANT=read`` a tool ``line_count`` annotated ``readOnlyHint: true``;
``NOTES_VARIANT=tagged`` gives ``append`` a second, required argument ``tag``
(a changed input schema); ``NOTES_VARIANT=approve`` the tools ``erase(text)``
annotated ``destructiveHint: true`` (appends ``erase <text>``) and
``tag(text)`` annotated ``destructiveHint: false`` (appends ``tag <text>``),
for approval by annotation; ``NOTES_VARIANT=gate`` a tool
``append_at_gate(text)`` that appends, then answers only once the file
``NOTES_GATE`` exists (a call in flight for as long as a test needs). With
``NOTES_PIDFILE`` set the server writes its
process id there when it starts.
"""

from __future__ import annotations

import os
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

LOG = sys.argv[1]
server = MCPServer("notes")
if os.environ.get("NOTES_PIDFILE"):  # for a test that kills this server mid-call
    with open(os.environ["NOTES_PIDFILE"], "w", encoding="utf-8") as pidfile:
        pidfile.write(str(os.getpid()))


def _append(text: str) -> int:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    print(f"APPENDED {text}", file=sys.stderr, flush=True)  # after the fsync
    with open(LOG, encoding="utf-8") as f:
        return sum(1 for _ in f)


if os.environ.get("NOTES_VARIANT") == "tagged":

    @server.tool()
    def append(text: str, tag: str) -> str:
        """Append a tagged line to the notes log."""
        return f"appended; {_append(f'{tag}: {text}')} lines"

else:

    @server.tool()
    def append(text: str) -> str:
        """Append a line to the notes log."""
        return f"appended; {_append(text)} lines"


@server.tool()
async def append_and_hang(text: str) -> str:
    """Append a line, then never answer."""
    _append(text)
    await anyio.sleep_forever()
    return "unreachable"


if os.environ.get("NOTES_VARIANT") == "2":

    @server.tool()
    def count() -> str:
        """How many lines the log has."""
        with open(LOG, encoding="utf-8") as f:
            return str(sum(1 for _ in f))


#: what ``banner`` returns: set the window title (OSC 0), clear the screen
#: (CSI 2J), write the clipboard (OSC 52)
ESCAPES = "\x1b]0;mcp-title\x07\x1b[2J\x1b]52;c;bWNw\x07"

if os.environ.get("NOTES_VARIANT") == "escapes":

    @server.tool()
    def banner() -> str:
        """The notes' banner."""
        return f"{ESCAPES}banner"


if os.environ.get("NOTES_VARIANT") == "read":

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def line_count() -> str:
        """How many lines the log has (reads only)."""
        if not os.path.exists(LOG):
            return "0"
        with open(LOG, encoding="utf-8") as f:
            return str(sum(1 for _ in f))


if os.environ.get("NOTES_VARIANT") == "approve":

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def erase(text: str) -> str:
        """Erase a note (destructive)."""
        return f"erased; {_append(f'erase {text}')} lines"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def tag(text: str) -> str:
        """Tag a note (only adds)."""
        return f"tagged; {_append(f'tag {text}')} lines"


if os.environ.get("NOTES_VARIANT") == "gate":

    @server.tool()
    async def append_at_gate(text: str) -> str:
        """Append a line, then answer once the file NOTES_GATE exists."""
        _append(text)
        while not os.path.exists(os.environ["NOTES_GATE"]):
            await anyio.sleep(0.05)
        return "appended at the gate"


if __name__ == "__main__":
    if sys.argv[2] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        app = server.streamable_http_app(host="127.0.0.1")
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
