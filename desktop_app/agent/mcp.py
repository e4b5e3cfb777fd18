"""Tools of Model Context Protocol servers for agents, through the official
``mcp`` Python SDK (``pip install 'flowdesk[mcp]'``).

A server is configured in the settings file::

    [mcp_servers.notes]
    command = ["python", "-m", "my_notes_server"]     # stdio: started as a subprocess

    [mcp_servers.search]
    url = "http://127.0.0.1:8000/mcp"                 # streamable HTTP

and used with ``flowdesk ask --mcp notes`` or in code::

    with McpServer.from_settings("notes", settings.mcp_servers["notes"]) as server:
        agent = Agent("ask", model, store, server.tools())

Each server tool becomes an :class:`McpTool` named ``<server>__<tool>``.
Calls are journaled like every other tool (name + canonical JSON input): a
completed result is reused after a crash, and a call that was started but
never answered (the process died, the server died, no answer in time) is not
sent again (``at_most_once``): its outcome is recorded as unknown. Only a tool
the server marks read-only, or idempotent *and* not destructive
(``destructiveHint: false``; the MCP default is destructive), is sent again
after a crash. A tool named in the server's ``require_approval`` (or a
destructive one, with ``approve_destructive = true``) waits for a person's
"yes" to each call's exact arguments (see :mod:`desktop_app.agent.approvals`).
The server's tool list is fetched once when the connection opens and recorded
in each agent run; a run resumed against a server on which a tool the run used
is gone or takes other input fails with
:class:`~desktop_app.errors.McpToolsChangedError` naming each such tool and
what changed (annotations, descriptions and tools the run never used may
change).

The SDK is asynchronous; :class:`McpServer` holds one client session open on
an asyncio loop in a background thread and offers blocking calls, so the
synchronous agent loop can use it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from desktop_app.agent.messages import canonical_json
from desktop_app.agent.tool_schemas import schema_changes
from desktop_app.agent.tools import LISTING_PREFIX
from desktop_app.errors import (
    ConfigError,
    McpError,
    McpOutcomeUnknownError,
    redact,
    redact_argv,
    redact_urls,
)
from desktop_app.extras import install_command
from desktop_app.private import make_private_dirs

if TYPE_CHECKING:
    from desktop_app.config import McpServerSettings, Settings

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# JSON-RPC error codes the SDK raises for a request that got no answer
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from anyio task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _said(exc: BaseException) -> str:
    """``TypeName: message`` of an error from the SDK or httpx, with the
    secrets of any URL it quotes masked (an HTTP error names the server's
    URL, ``user:password@`` and ``?api_key=`` included)."""
    return redact_urls(f"{type(exc).__name__}: {exc}")


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as text for the model: text blocks joined by
    newlines (structured content as JSON when there is no text; other blocks
    described by type); an ``is_error`` result as ``{"error": text}``."""
    parts: list[str] = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            parts.append(block.text)
        else:
            parts.append(json.dumps({"content": getattr(block, "type", "unknown")}))
    text = "\n".join(parts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, default=str)
    if result.is_error:
        return json.dumps({"error": text or "the tool reported an error"})
    return text


class McpTool:
    """One tool of an MCP server, with the :class:`~desktop_app.agent.tools.AgentTool` shape.

    Attributes:
        name: ``<server>__<tool>`` (what the model calls).
        tool_name: the tool's name on its server.
        input_schema: the server's JSON schema for the arguments.
        at_most_once: ``False`` only when the server annotates the tool
            ``readOnlyHint: true``, or ``idempotentHint: true`` together with
            ``destructiveHint: false`` (a destructive tool is at most once even
            when idempotent: re-sending ``write_file`` after a crash would
            write back a file deleted meanwhile; absent hints take the MCP
            defaults, not idempotent and destructive).
        read_only: the server annotates the tool ``readOnlyHint: true``: each
            call in a run is sent again (see :attr:`AgentTool.read_only`).
        destructive: as the MCP specification reads the annotations: not
            read-only and ``destructiveHint`` not ``false`` (default ``true``).
        requires_approval: the server's settings name the tool in
            ``require_approval``, or set ``approve_destructive`` and the tool
            is destructive.
    """

    def __init__(self, server: McpServer, spec: Mapping[str, Any]) -> None:
        self.server = server
        self.tool_name = str(spec["name"])
        self.name = f"{server.name}__{self.tool_name}"
        if not _NAME.match(self.name):
            raise McpError(
                f"MCP server {server.name!r} has a tool {self.tool_name!r} whose name "
                f"{self.name!r} is not a valid function name (letters, digits, _ and -, at "
                "most 64); rename the server in [mcp_servers] to something shorter"
            )
        self.description = str(spec.get("description") or "")
        self.input_schema: dict[str, Any] = dict(spec.get("input_schema") or {"type": "object"})
        hints = spec.get("annotations") or {}
        self.read_only = bool(hints.get("read_only_hint"))
        harmless_again = hints.get("idempotent_hint") and not hints.get("destructive_hint", True)
        self.at_most_once = not (self.read_only or harmless_again)
        self.destructive = not self.read_only and hints.get("destructive_hint") is not False
        self.requires_approval = self.tool_name in server.require_approval or (
            server.approve_destructive and self.destructive
        )

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema (the server's input schema as is)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def call(self, arguments: dict[str, Any]) -> str:
        """Call the tool on its server and return its result as text.

        Raises:
            McpOutcomeUnknownError: the call was sent and no answer came.
            McpError: the server is not connected, ``arguments`` are not JSON
                text (nothing is sent), or the server answered with an error
                (the agent turns each into an error text for the model).
        """
        return self.server.call_tool(self.tool_name, arguments)


class McpServer:
    """A connection to one MCP server (stdio subprocess or streamable HTTP).

    Args:
        name: the settings name (``[mcp_servers.NAME]``); prefixes tool names.
        command: program and arguments of a stdio server.
        url: endpoint of a streamable-HTTP server.
        env: extra environment variables for a stdio server (it gets the
            SDK's default environment, ``HOME``, ``PATH``, ``USER`` and a few
            more, plus these; nothing else of this process's environment).
        cwd: working folder for a stdio server.
        timeout_s: seconds to wait for start-up and for each request.
        errlog: file for a stdio server's stderr (appended, created 0600);
            ``None``: this process's stderr.
        require_approval: the server's tools (its own names) whose calls a
            person approves first.
        approve_destructive: every destructive tool's calls too.

    Use as a context manager (or :meth:`open` / :meth:`close`).

    Raises:
        ConfigError: neither or both of ``command`` and ``url``.
        McpError: (from :meth:`open`) the ``mcp`` package is missing or the
            server cannot be started or reached.
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout_s: float = 60.0,
        errlog: Path | None = None,
        require_approval: Sequence[str] = (),
        approve_destructive: bool = False,
    ) -> None:
        if bool(command) == bool(url):
            raise ConfigError(
                f"[mcp_servers.{name}] needs exactly one of command = [...] (a stdio server) "
                'or url = "http://..." (streamable HTTP)'
            )
        self.name = name
        self.command = list(command or [])
        self.url = url
        self.env = dict(env or {})
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.errlog = errlog
        self.require_approval = frozenset(require_approval)
        self.approve_destructive = approve_destructive
        self.listing_key = f"{LISTING_PREFIX}{name}"
        self.listing_tool = f"mcp:{name}"
        self._specs: list[dict[str, Any]] = []
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(
        cls, name: str, cfg: McpServerSettings, errlog: Path | None = None
    ) -> McpServer:
        """A server from its ``[mcp_servers.NAME]`` section."""
        return cls(
            name,
            command=cfg.command,
            url=cfg.url,
            env=cfg.server_env(),
            cwd=cfg.cwd,
            timeout_s=cfg.timeout_s,
            errlog=errlog,
            require_approval=cfg.require_approval,
            approve_destructive=cfg.approve_destructive,
        )

    def _where(self) -> str:
        """The command of a stdio server, or the URL of an HTTP one, with
        their secrets masked (:func:`desktop_app.errors.redact_argv`,
        :func:`~desktop_app.errors.redact`, and the bearer tokens and keys
        :func:`desktop_app.observability.redact` masks), as messages show it."""
        from desktop_app.observability import redact as masked

        if self.command:
            return f"`{masked(redact_argv(self.command))}`"
        return redact(str(self.url))

    # -- lifecycle -----------------------------------------------------------

    def open(self) -> McpServer:
        """Start (stdio) or connect (HTTP), then fetch the tool list once.

        Raises:
            McpError: as the class says.
            ConfigError: ``require_approval`` names a tool the server does
                not have (a misspelt name would otherwise let calls run
                unapproved); the connection is closed.
        """
        try:
            import mcp  # noqa: F401
        except ImportError as exc:
            raise McpError(f"MCP servers need the mcp package: {install_command('mcp')}") from exc
        self._thread = threading.Thread(
            target=self._thread_main, name=f"mcp-{self.name}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(self.timeout_s):
            raise McpError(
                f"MCP server {self.name!r} ({self._where()}) did not start within "
                f"{self.timeout_s:g} s; check it runs on its own, or raise timeout_s"
            )
        if self._error is not None:
            leaf = _leaf(self._error)
            where = f" (its stderr is in {self.errlog})" if self.errlog and self.command else ""
            raise McpError(
                f"cannot connect to MCP server {self.name!r} ({self._where()}): "
                f"{_said(leaf)}; check [mcp_servers.{self.name}] in the "
                f"settings{where}"
            ) from leaf
        missing = sorted(self.require_approval - {str(s["name"]) for s in self._specs})
        if missing:
            self.close()
            have = ", ".join(sorted(str(s["name"]) for s in self._specs)) or "none"
            raise ConfigError(
                f"[mcp_servers.{self.name}] require_approval names {', '.join(missing)}, "
                f"which the server does not have (its tools: {have}); correct the names"
            )
        return self

    def close(self) -> None:
        """Close the session (a stdio server process is ended by the SDK)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(self.timeout_s)

    def __enter__(self) -> McpServer:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _target(self, errlog: Any) -> Any:
        if self.url:
            return self.url
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command[0],
            args=self.command[1:],
            env=self.env or None,
            cwd=str(self.cwd) if self.cwd else None,
        )
        # the SDK's own default is the sys.stderr of when it was imported,
        # which may be closed by now (a test session that ended, an app that
        # swapped its streams back): the server's stderr goes to today's
        return stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to open() (or to the calls in flight)
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        from mcp import Client

        errlog = None
        if self.errlog is not None and self.command:
            make_private_dirs(self.errlog.parent)
            fd = os.open(self.errlog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            errlog = open(fd, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
        try:
            await self._serve(Client(self._target(errlog), read_timeout_seconds=self.timeout_s))
        finally:
            if errlog is not None:
                errlog.close()

    async def _serve(self, connection: Any) -> None:
        async with connection as client:
            specs: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                specs += [t.model_dump(exclude_none=True) for t in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
            self._specs = specs
            log.info("MCP server %s connected: %d tools", self.name, len(specs))
            self._client = client
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()

    # -- use -------------------------------------------------------------------

    def tools(self) -> list[McpTool]:
        """The server's tools as agent tools (from the list fetched at open)."""
        return [McpTool(self, spec) for spec in self._specs]

    def listing(self) -> str:
        """The tool list fetched at open: canonical JSON of name, description,
        input schema and annotations of each tool, sorted by name."""
        keep = ("name", "description", "input_schema", "annotations")
        items = sorted(
            ({k: s[k] for k in keep if k in s} for s in self._specs), key=lambda s: s["name"]
        )
        return canonical_json(items)

    def check_listing(self, recorded: str, used: Collection[str]) -> str | None:
        """Whether a run that recorded ``recorded`` (a :meth:`listing`) may go
        on with the list fetched at open.

        Args:
            recorded: the listing stored in the run when it started.
            used: the tools the run called, as the model names them
                (``<server>__<tool>``); other servers' names are ignored.

        Returns:
            ``None`` when each tool of this server the run used is still
            offered with an input schema that accepts the same arguments
            (descriptions, titles, annotations and tools the run never used
            may change), else a sentence naming each such tool and what
            changed (``removed``, or the changed schema paths).
        """
        before = {t["name"]: t for t in json.loads(recorded)}
        now = {s["name"]: s for s in self._specs}
        problems: list[str] = []
        for name in sorted(before):
            full = f"{self.name}__{name}"
            if full not in used:
                continue
            if name not in now:
                problems.append(f"{full} was removed")
                continue
            paths = schema_changes(before[name].get("input_schema"), now[name].get("input_schema"))
            if paths:
                problems.append(f"{full} takes other input (input_schema: {', '.join(paths)})")
        if not problems:
            return None
        return (
            f"tools of MCP server {self.name!r} that this run used changed since it started: "
            f"{'; '.join(problems)}; the run is not continued with different tools: start a "
            "new run, or restore the server's previous version and resume"
        )

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` with ``arguments``; its result as text (see :func:`result_text`).

        Args:
            tool: the tool's name on its server.
            arguments: the call's arguments; they must be JSON text (no
                lone surrogates, NaN or infinities, only JSON types).

        Raises:
            McpError: not open, ``arguments`` are not JSON text (nothing is
                sent), or the server answered with a JSON-RPC error.
            McpOutcomeUnknownError: the call was sent and no answer came
                within ``timeout_s`` s, or the connection ended first.
        """
        loop, client = self._loop, self._client
        if loop is None or client is None or loop.is_closed():
            why = ""
            if self._error is not None:
                leaf = _leaf(self._error)
                why = f": the connection ended with {_said(leaf)}"
            raise McpError(f"MCP server {self.name!r} is not connected{why}")
        try:
            # what the SDK would fail on after the call was journaled as sent:
            # a lone surrogate (valid JSON "\ud800" from a model) ended the
            # stdio connection for every later call, a value that is not JSON
            # was reported as "no answer"; NaN was sent as null
            json.dumps(arguments, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise McpError(
                f"the arguments for {tool!r} of MCP server {self.name!r} are not JSON text "
                f"({type(exc).__name__}: {exc}); nothing was sent"
            ) from exc
        future: Future[Any] = asyncio.run_coroutine_threadsafe(
            client.call_tool(tool, arguments, read_timeout_seconds=self.timeout_s), loop
        )
        try:
            result = future.result(self.timeout_s + 5)
        except FutureTimeout as exc:
            future.cancel()
            raise McpOutcomeUnknownError(
                f"MCP server {self.name!r} did not answer {tool!r} within {self.timeout_s:g} s"
            ) from exc
        except Exception as exc:
            leaf = _leaf(exc)
            code = getattr(getattr(leaf, "error", None), "code", None)
            if code == _REQUEST_TIMEOUT:
                raise McpOutcomeUnknownError(
                    f"MCP server {self.name!r} did not answer {tool!r} within {self.timeout_s:g} s"
                ) from leaf
            if code == _CONNECTION_CLOSED:
                raise McpOutcomeUnknownError(
                    f"MCP server {self.name!r} closed the connection before answering {tool!r} "
                    "(the server died or hung up)"
                ) from leaf
            if code is None:  # a transport error: sent, then no answer came
                raise McpOutcomeUnknownError(
                    f"MCP server {self.name!r} gave no answer to {tool!r}: {_said(leaf)}"
                ) from leaf
            raise McpError(  # the server answered with a JSON-RPC error
                f"MCP server {self.name!r} failed on {tool!r}: {_said(leaf)}"
            ) from leaf
        return result_text(result)


def open_servers(
    settings: Settings,
    names: Sequence[str],
    run_id: str | None = None,
    *,
    on_connect: Callable[[str], None] | None = None,
) -> list[McpServer]:
    """Open the named ``[mcp_servers]`` (for ``flowdesk ask --mcp NAME`` and the app);
    a stdio server's stderr goes to ``mcp-NAME.log`` in the log folder;
    ``on_connect(name)`` is called before each is started or reached. A
    server that cannot be started or reached is logged (``flowdesk.log``)
    with ``run_id``, the agent run the servers are opened for.

    The caller closes them (``for s in servers: s.close()``).

    Raises:
        ConfigError: a name is not in the settings (the message lists those that are).
        McpError: a server cannot be started or reached (those already open are closed).
    """
    unknown = [n for n in names if n not in settings.mcp_servers]
    if unknown:
        known = ", ".join(sorted(settings.mcp_servers)) or "none"
        raise ConfigError(
            f"no MCP server {unknown[0]!r} in the settings (configured: {known}); add "
            f'[mcp_servers.{unknown[0]}] with command = [...] or url = "..."'
        )
    from desktop_app.observability import log_dir

    opened: list[McpServer] = []
    try:
        for name in names:
            cfg = settings.mcp_servers[name]
            if on_connect is not None:
                on_connect(name)
            errlog = log_dir() / f"mcp-{name}.log"
            opened.append(McpServer.from_settings(name, cfg, errlog).open())
    except BaseException as exc:
        for server in opened:
            server.close()
        if isinstance(exc, McpError):
            log.warning("agent run %s: %s", run_id or "(not started)", exc)
        raise
    return opened


def describe_tools(servers: Sequence[McpServer]) -> list[dict[str, Any]]:
    """For the app's agent view: one row per MCP tool, ``{"server", "tool",
    "name", "description", "at_most_once"}`` (``name`` is what the model calls)."""
    return [
        {
            "server": s.name,
            "tool": t.tool_name,
            "name": t.name,
            "description": t.description,
            "at_most_once": t.at_most_once,
        }
        for s in servers
        for t in s.tools()
    ]


def mcp_tools(settings: Settings, names: Sequence[str]) -> list[McpTool]:
    """The tools of the named ``[mcp_servers]``, for a command that runs one
    agent and exits (``flowdesk ask --mcp NAME``): the servers stay open until
    the process exits, then are closed.

    Raises:
        ConfigError, McpError: as :func:`open_servers`.
    """
    import atexit

    servers = open_servers(settings, names) if names else []
    for server in servers:
        atexit.register(server.close)
    return [t for s in servers for t in s.tools()]


def recorded_tools(results: Sequence[Any]) -> list[dict[str, Any]]:
    """For the app's agent view of one run: the MCP tools recorded in it.

    Args:
        results: the run's tool journal, ``AgentLog.tool_results(run_id)``
            (:class:`~desktop_app.store.sqlite.agent_runs.ToolResult` rows).

    Returns:
        ``{"server", "tool", "name", "description"}`` per tool of each MCP
        server's list as recorded when the run started (no server is
        contacted); journal rows whose ``tool_key`` starts with
        :data:`LISTING_PREFIX` are these lists, every other row is a tool call.
    """
    rows: list[dict[str, Any]] = []
    for result in results:
        if not result.tool_key.startswith(LISTING_PREFIX):
            continue
        server = result.tool_key[len(LISTING_PREFIX) :]
        for spec in json.loads(result.result or "[]"):
            rows.append(
                {
                    "server": server,
                    "tool": spec["name"],
                    "name": f"{server}__{spec['name']}",
                    "description": spec.get("description", ""),
                }
            )
    return rows
