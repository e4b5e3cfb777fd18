"""Pydantic AI agents for the integration tests (S96), importable by the
test worker and, registered in settings, by the ``flowdesk`` command.

The model is OpenAI-compatible at ``PAI_TEST_URL`` (a scripted server on
127.0.0.1, tests/chat_server.py). Every tool call appends a line to the file
``PAI_TEST_LOG`` (fsync'd) before it returns, so a test counts executions
across processes. ``PAI_TEST_KILL=tool:Q`` SIGKILLs the process inside the
call ``lookup(Q)``, after its line is written; ``PAI_TEST_GATE=Q:PATH``
holds that call there (a call in flight) until the file PATH exists (also
``delete(Q)``).
``PAI_TEST_RENAMED=1`` names ``lookup`` ``find`` (an agent whose code
changed since its run started). ``PAI_TEST_KILL=load`` SIGKILLs the
process as ``make_helper`` builds the agent (a registration loading),
``PAI_TEST_KILL=startup`` as a run enters its toolsets (as its MCP
servers start); each writes ``load``/``startup`` to ``PAI_TEST_LOG`` first.
``PAI_TEST_MCP=1`` adds the
notes MCP server (tests/mcp_notes_server.py, stdio) as toolset ``notes``,
appending to ``PAI_TEST_LOG`` too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

REPO = Path(__file__).resolve().parents[1]


def _log(line: str) -> None:
    with open(os.environ["PAI_TEST_LOG"], "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class _KilledAtStartUp(WrapperToolset[None]):
    """A toolset whose start-up (entered as a run starts, as an MCP server
    is started) SIGKILLs the process: ``PAI_TEST_KILL=startup``."""

    async def __aenter__(self) -> _KilledAtStartUp:
        _log("startup")
        os.kill(os.getpid(), signal.SIGKILL)
        return self


def make_helper() -> Agent[None, str]:
    """The agent ``helper``: tools ``lookup(q)`` and ``delete(name)`` (which
    requires approval; ``PAI_TEST_KILL=delete:NAME`` kills inside it), and
    the notes MCP server when ``PAI_TEST_MCP`` is set."""
    if os.environ.get("PAI_TEST_KILL") == "load":  # the agent's own start-up: built
        _log("load")
        os.kill(os.getpid(), signal.SIGKILL)
    model = OpenAIChatModel(
        "scripted", provider=OpenAIProvider(base_url=os.environ["PAI_TEST_URL"], api_key="test")
    )
    toolsets = []
    if os.environ.get("PAI_TEST_MCP"):
        from fastmcp.client.transports import StdioTransport
        from pydantic_ai.mcp import MCPToolset

        transport = StdioTransport(
            sys.executable,
            ["-m", "tests.mcp_notes_server", os.environ["PAI_TEST_LOG"], "stdio"],
            cwd=str(REPO),
        )
        toolsets.append(MCPToolset(transport, id="notes"))
    if os.environ.get("PAI_TEST_KILL") == "startup":
        toolsets.append(_KilledAtStartUp(FunctionToolset(id="startup")))
    agent = Agent(model, name="helper", instructions="Look things up.", toolsets=toolsets)

    # PAI_TEST_RENAMED=1: the agent's code changed since, its tool renamed
    @agent.tool_plain(name="find" if os.environ.get("PAI_TEST_RENAMED") else None)
    def lookup(q: str) -> str:
        """Look something up."""
        _log(f"tool {q}")
        if os.environ.get("PAI_TEST_KILL") == f"tool:{q}":
            os.kill(os.getpid(), signal.SIGKILL)
        held, _, gate = os.environ.get("PAI_TEST_GATE", "").partition(":")
        while held == q and not Path(gate).exists():
            time.sleep(0.01)  # in flight until the test opens the gate
        return f"result for {q}"

    @agent.tool_plain(requires_approval=True)
    def delete(name: str) -> str:
        """Delete something (a person approves each call first)."""
        _log(f"delete {name}")
        if os.environ.get("PAI_TEST_KILL") == f"delete:{name}":
            os.kill(os.getpid(), signal.SIGKILL)
        held, _, gate = os.environ.get("PAI_TEST_GATE", "").partition(":")
        while held == name and not Path(gate).exists():
            time.sleep(0.01)  # in flight until the test opens the gate
        return f"deleted {name}"

    return agent
