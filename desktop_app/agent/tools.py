"""Tools: Python functions with typed arguments; their JSON schema comes from pydantic.

Anything with the :class:`AgentTool` shape is a tool: :class:`Tool` (a Python
function) and :class:`~desktop_app.agent.mcp.McpTool` (a tool of an MCP server).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ValidationError, create_model

from desktop_app.flows.confined import Refused, open_folder, open_regular, opened_dir

ASK_USER = "ask_user"


@runtime_checkable
class AgentTool(Protocol):
    """What an agent needs of a tool.

    Attributes:
        name: the function name the model uses (``^[a-zA-Z0-9_-]{1,64}$``).
        description: one paragraph for the model.
        at_most_once: when a call was sent but got no answer (the process
            died mid-call; for an MCP tool also its server died or timed out),
            do not send it again; its outcome is recorded as unknown
            (:func:`~desktop_app.agent.messages.outcome_unknown`) and the
            model is told so.
        read_only: the tool only reads (no side effect): a later identical
            call in the same run is sent again rather than answered from the
            journal, so a read after a write sees the write. Its result is
            still journaled, keyed by its place in the run, so a resume does
            not send a completed call again.

    A tool may also have ``requires_approval`` (bool, read with ``getattr``,
    default ``False``): each call waits for a person's "yes" to the exact
    arguments before it runs (see :mod:`desktop_app.agent.approvals`).
    """

    name: str
    description: str
    at_most_once: bool
    read_only: bool

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""

    def call(self, arguments: dict[str, Any]) -> str:
        """Run the tool; its result as text for the model."""


#: how a recorded tool list's key in a run's tool journal starts (no tool
#: name can contain "/", so it never collides with a tool call's key)
LISTING_PREFIX = "mcp/tools_list:"
#: the key under which a run's tool names are recorded on its first drive
#: (a JSON list, sorted; only for an agent with tools)
TOOLSET_KEY = "agent/toolset"
#: the key under which a run records where its tools come from, at creation
#: (a JSON object, see :class:`desktop_app.agent.recovery.ToolSources`), so
#: resuming it reconnects them by itself
TOOL_SOURCES_KEY = "agent/tool_sources"


#: how the key of a Pydantic AI run's journaled unit starts
#: (:mod:`desktop_app.integrations.pydantic_ai.durability`):
#: ``pydantic_ai/<operation name>#<n>``; a tool call's operation name holds
#: :data:`PYDANTIC_AI_CALL` (``helper__function_toolset__<id>.call_tool:lookup``,
#: ``helper__mcp_server__notes.call_tool``), a model request's does not
PYDANTIC_AI_PREFIX = "pydantic_ai/"
PYDANTIC_AI_CALL = ".call_tool"


def is_tool_call(tool_key: str) -> bool:
    """Whether a key of a run's tool journal is a tool call's, not one of the
    records kept beside them.

    The key's structure decides, never a call's arguments (which may hold
    any "/" or ":", e.g. a path or a URL):

    * a Flowdesk agent's call is ``"<tool name>:<canonical JSON arguments>"``
      (:attr:`~desktop_app.agent.messages.ToolCall.key`), with ``#<n>`` after
      it for a read-only tool; a tool name holds neither ":" nor "/";
    * the records (:data:`LISTING_PREFIX`, :data:`TOOLSET_KEY`,
      :data:`TOOL_SOURCES_KEY`, approvals ``"approval/<place>:<digest>"``)
      have a "/" before their first ":" (or no ":" at all);
    * a Pydantic AI run's unit is ``"pydantic_ai/<operation name>#<n>"``: a
      tool call when the operation name holds :data:`PYDANTIC_AI_CALL` (not
      a model request or MCP discovery).

    Args:
        tool_key: a ``ToolResult.tool_key`` of ``AgentLog.tool_results``.

    Returns:
        ``True`` for a tool call's row, ``False`` for a record's.
    """
    if tool_key.startswith(PYDANTIC_AI_PREFIX):
        operation = tool_key[len(PYDANTIC_AI_PREFIX) :].rpartition("#")[0]
        return PYDANTIC_AI_CALL in operation
    name, colon, _arguments = tool_key.partition(":")
    return bool(colon) and bool(name) and "/" not in name


@runtime_checkable
class ToolListing(Protocol):
    """A source of tools whose list is recorded in each agent run (an MCP server).

    The runtime stores ``listing()`` under ``listing_key`` (which starts
    with :data:`LISTING_PREFIX`) in the run's tool journal the first time the
    run is driven, and on every later drive asks ``check_listing`` whether
    the tools the run used are still what they were: a change that matters
    fails the run with its message instead of mixing two tools.
    """

    listing_key: str
    listing_tool: str

    def listing(self) -> str:
        """The tool list as canonical JSON."""

    def check_listing(self, recorded: str, used: Collection[str]) -> str | None:
        """``None`` when the tools named in ``used`` (the run's tool calls)
        are unchanged in what matters since ``recorded``, else what changed."""


class Tool:
    """A callable the model may use.

    Args:
        fn: a function with annotated parameters; its docstring's first
            paragraph becomes the description.
        name: defaults to the function name.
        read_only: ``True`` for a tool without side effects (see
            :attr:`AgentTool.read_only`): each call in a run is sent, none
            reuses an earlier identical call's result.
        requires_approval: ``True``: each call waits for a person to approve
            its exact arguments (see :mod:`desktop_app.agent.approvals`).

    The argument model is built with ``pydantic.create_model`` from the
    signature, so ``schema()`` is pydantic's JSON schema and ``call()``
    validates the model's arguments before running the function.
    """

    at_most_once = False

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        read_only: bool = False,
        requires_approval: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.read_only = read_only
        self.requires_approval = requires_approval
        doc = inspect.getdoc(fn) or ""
        self.description = doc.split("\n\n", 1)[0].replace("\n", " ")
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            annotation = (
                param.annotation if param.annotation is not inspect.Parameter.empty else Any
            )
            default = param.default if param.default is not inspect.Parameter.empty else ...
            fields[pname] = (annotation, default)
        self.args_model: type[BaseModel] = create_model(f"{self.name}_args", **fields)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def call(self, arguments: dict[str, Any]) -> str:
        """Validate ``arguments`` and run the tool; the result as text (JSON for
        non-strings). Invalid arguments come back as an error text for the model."""
        try:
            args = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            return json.dumps({"error": f"invalid arguments: {exc.errors()[0]['msg']}"})
        out = self.fn(**{k: getattr(args, k) for k in type(args).model_fields})
        return out if isinstance(out, str) else json.dumps(out, default=str)


@overload
def tool(
    fn: Callable[..., Any], *, read_only: bool = False, requires_approval: bool = False
) -> Tool: ...
@overload
def tool(
    *, read_only: bool = False, requires_approval: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    read_only: bool = False,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: ``@tool def create(name: str) -> str: ...`` for a tool with
    side effects (an identical later call in a run reuses the first result),
    ``@tool(read_only=True) def search(query: str) -> str: ...`` for one
    without (every call is sent; see :attr:`AgentTool.read_only`),
    ``@tool(requires_approval=True) def delete(path: str) -> str: ...`` for one
    whose every call a person approves first (see
    :mod:`desktop_app.agent.approvals`)."""
    if fn is None:
        return lambda f: Tool(f, read_only=read_only, requires_approval=requires_approval)
    return Tool(fn, read_only=read_only, requires_approval=requires_approval)


def ask_user_schema() -> dict[str, Any]:
    """The built-in ``ask_user`` tool: the run pauses ``input_required``."""
    return {
        "type": "function",
        "function": {
            "name": ASK_USER,
            "description": "Ask the user a question and wait for the answer.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
            },
        },
    }


class AskUserArguments(BaseModel):
    """The arguments of the built-in ``ask_user`` tool (its schema's ``required``)."""

    question: str


def ask_user_refusal(arguments: dict[str, Any]) -> str | None:
    """The tool answer (JSON text) a model gets for an ``ask_user`` call whose
    arguments do not validate (``question`` missing or not a string), as for
    any tool's (:meth:`Tool.call`): ``{"error": "invalid arguments: question:
    Field required; ..."}``; ``None`` when they validate."""
    try:
        AskUserArguments.model_validate(arguments)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        return json.dumps(
            {
                "error": f"invalid arguments: {where}: {first['msg']}; call ask_user with "
                '{"question": "<what to ask the user>"}'
            }
        )
    return None


def file_tools(
    root: str | Path, max_bytes: int = 64 * 1024, *, require_approval: Collection[str] = ()
) -> list[Tool]:
    """``read_file`` and ``list_folder`` confined to the folder ``root``.

    Paths are walked with :mod:`desktop_app.flows.confined`, as the digest
    reads files: one component at a time from the folder's descriptor, no
    symbolic link followed anywhere (a subfolder swapped for a link to
    elsewhere mid-run is refused, not followed), files opened non-blocking and
    read only when they are regular files (a FIFO, socket or device is
    refused at once, never waited on), and at most ``max_bytes`` bytes read
    (a 2 GB file costs 64 KiB, not 2 GB).

    Args:
        root: the folder (str or Path; resolved once, here).
        max_bytes: the most ``read_file`` reads of one file, in bytes.
        require_approval: names of these tools (``read_file``,
            ``list_folder``) whose every call a person approves first
            (settings: ``[file_tools] require_approval``).

    Returns:
        The two tools. A refused or failing path is a tool answer, never an
        exception: ``{"error": "..."}`` naming the path and why.
    """
    base = Path(root).resolve()

    def relative(path: str) -> str:
        p = PurePosixPath(path)
        if p.is_absolute():
            if not p.is_relative_to(base):
                raise Refused(f"{path!r} is outside {base}")
            p = p.relative_to(base)
        return str(p)  # "./a" is "a", "" and "." are the folder

    def problem(path: str, exc: Refused | OSError) -> str:
        why = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
        return json.dumps(
            {
                "error": f"{path!r} cannot be read: {why}; only files and folders inside {base} "
                "are readable, and no symbolic link is followed"
            }
        )

    def read_file(path: str) -> str:
        """Read a text file under the folder (first 64 KiB)."""
        try:
            with opened_dir(base) as top:
                fd, _ = open_regular(top, relative(path))
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(max_bytes)
        except (Refused, OSError) as exc:
            return problem(path, exc)
        return data.decode("utf-8", errors="replace")

    def list_folder(path: str = ".") -> str:
        """List the entries of a folder under the root."""
        try:
            with opened_dir(base) as top:
                fd = open_folder(top, relative(path))
            try:
                with os.scandir(fd) as it:
                    entries = sorted(
                        e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in it
                    )
            finally:
                os.close(fd)
        except (Refused, OSError) as exc:
            return problem(path, exc)
        return "\n".join(entries)

    return [
        Tool(fn, read_only=True, requires_approval=fn.__name__ in require_approval)
        for fn in (read_file, list_folder)
    ]
