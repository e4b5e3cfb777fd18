"""A small stdio MCP server (the SDK's low-level ``Server``) whose tool results
take every shape a ``CallToolResult`` can take, for the kill tests of
``desktop_app/agent/mcp.py``.

    python -m tests.mcp_shapes_server

Its tool list comes in two pages (the second asked for with the cursor
``"page-2"``; any other cursor is refused, as the specification says, with
the JSON-RPC error ``-32602``). Tools, with what each call returns:

* ``two_texts``: the text blocks ``"one"`` and ``"two"``;
* ``picture``: an image block, then the text ``"a cat"``;
* ``only_picture``: an image block and structured content (ignored: there is
  a block);
* ``structured``: no block, the structured content ``{"b": 2, "a": [1]}``;
* ``nothing``: no block, no structured content;
* ``refuse``: ``is_error`` with the text ``"bad input"``;
* ``refuse_silently``: ``is_error`` with no block and structured content;
* ``refuse_empty``: ``is_error`` with nothing at all;
* ``rpc_error``: a JSON-RPC error ``-32602`` ``"no such row"``;
* ``hang``: never answers;
* ``die``: the server exits (code 3) without answering;
* ``echo``: the text of ``json.dumps(arguments, sort_keys=True)``.

Annotations: ``two_texts`` read-only, ``picture`` idempotent and not
destructive, ``only_picture`` idempotent only, ``structured`` not
destructive only; the others none. Descriptions: ``"Tool NAME."`` except
``nothing``, which has none.

``SHAPES_MODE=crash``: writes ``shapes: cannot start, no licence`` on stderr
and exits 3 before serving; ``SHAPES_MODE=empty``: no tools at all;
``SHAPES_MODE=endless``: every page of the tool list names a next page (0.05 s
apart), and the 100th is refused: the list never ends within a few seconds; ``SHAPES_MODE=mute``:
never reads its input nor answers (``SHAPES_MARK`` is written first).
``SHAPES_MARK`` names a file the server writes its working folder, process id
and ``SHAPES_ECHO`` (an environment variable) to when it starts.
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__" and os.environ.get("SHAPES_MARK"):
    # first, before the SDK's imports (~1 s, several under load): a client
    # that gives up on a slow start still finds which process it started
    with open(os.environ["SHAPES_MARK"], "w", encoding="utf-8") as _mark:
        json.dump(
            {"cwd": os.getcwd(), "echo": os.environ.get("SHAPES_ECHO"), "pid": os.getpid()},
            _mark,
        )

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PNG = "iVBORw0KGgo="
FIRST_PAGE = ("two_texts", "picture", "only_picture", "structured", "nothing")
SECOND_PAGE = ("refuse", "refuse_silently", "refuse_empty", "rpc_error", "hang", "die", "echo")
MODE = os.environ.get("SHAPES_MODE", "")
HINTS = {
    "two_texts": types.ToolAnnotations(read_only_hint=True),
    "picture": types.ToolAnnotations(idempotent_hint=True, destructive_hint=False),
    "only_picture": types.ToolAnnotations(idempotent_hint=True),
    "structured": types.ToolAnnotations(destructive_hint=False),
}


def _tool(name: str) -> types.Tool:
    schema: dict = {"type": "object", "properties": {}}
    if name == "echo":
        schema = {"type": "object", "properties": {"word": {"type": "string"}}}
    return types.Tool(
        name=name,
        description=None if name == "nothing" else f"Tool {name}.",
        input_schema=schema,
        annotations=HINTS.get(name),
    )


async def list_tools(ctx, params) -> types.ListToolsResult:
    cursor = None if params is None else params.cursor
    if MODE == "empty":
        return types.ListToolsResult(tools=[])
    if MODE == "endless":
        page = int(cursor or "0")
        if page >= 100:
            raise MCPError(-32602, "the list ends here")
        await anyio.sleep(0.05)
        return types.ListToolsResult(tools=[], next_cursor=str(page + 1))
    if cursor is None:
        return types.ListToolsResult(tools=[_tool(n) for n in FIRST_PAGE], next_cursor="page-2")
    if cursor == "page-2":
        return types.ListToolsResult(tools=[_tool(n) for n in SECOND_PAGE])
    raise MCPError(-32602, f"unknown cursor {cursor!r}")


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


async def call_tool(ctx, params) -> types.CallToolResult:
    name = params.name
    image = types.ImageContent(type="image", data=PNG, mime_type="image/png")
    if name == "two_texts":
        return types.CallToolResult(content=[_text("one"), _text("two")])
    if name == "picture":
        return types.CallToolResult(content=[image, _text("a cat")])
    if name == "only_picture":
        return types.CallToolResult(content=[image], structured_content={"ignored": True})
    if name == "structured":
        return types.CallToolResult(content=[], structured_content={"b": 2, "a": [1]})
    if name == "nothing":
        return types.CallToolResult(content=[])
    if name == "refuse":
        return types.CallToolResult(content=[_text("bad input")], is_error=True)
    if name == "refuse_silently":
        return types.CallToolResult(content=[], structured_content={"x": 1}, is_error=True)
    if name == "refuse_empty":
        return types.CallToolResult(content=[], is_error=True)
    if name == "rpc_error":
        raise MCPError(-32602, "no such row")
    if name == "hang":
        await anyio.sleep_forever()
    if name == "die":
        os._exit(3)
    if name == "echo":
        return types.CallToolResult(content=[_text(json.dumps(params.arguments, sort_keys=True))])
    raise MCPError(-32602, f"unknown tool {name}")


server = Server("shapes", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    print("shapes: starting", file=sys.stderr, flush=True)
    if MODE == "mute":
        time.sleep(120)
        sys.exit(0)
    if MODE == "crash":
        print("shapes: cannot start, no licence", file=sys.stderr, flush=True)
        sys.exit(3)
    anyio.run(main)
