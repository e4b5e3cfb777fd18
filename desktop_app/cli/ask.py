"""Agent runs from the command line: ``ask``, and resuming/canceling an agent run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx
from desktop_app.cli.output import EXIT_FAILED, EXIT_OK
from desktop_app.errors import ConfigError, InputError

if TYPE_CHECKING:
    from desktop_app.agent import Agent
    from desktop_app.bootstrap import Services

SYSTEM = "You answer questions about the user's files. Be brief."
NO_MODEL = (
    "no model is configured: set FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL "
    "(or [model] base_url/model in the settings file), and store a key with "
    "`flowdesk secrets set model_api_key` if the server needs one"
)


class _NoModel:
    """Stands in for the model where none is configured and none is needed
    (canceling an agent run); a call raises the usual configuration error."""

    def complete(self, *_: Any, **__: Any) -> Any:
        raise ConfigError(NO_MODEL)

    def stream(self, *_: Any, **__: Any) -> Iterator[Any]:
        raise ConfigError(NO_MODEL)


def agent_for(sv: Services, name: str, tools: list[Any] | None = None) -> Agent:
    """An :class:`Agent` named ``name`` over the services' agent store, with
    the configured model (or one that refuses calls when none is configured)."""
    from desktop_app.agent import Agent
    from desktop_app.bootstrap import build_model

    model: Any = build_model(sv.settings) or _NoModel()
    return Agent(name, model, sv.agents, tools or [], system=SYSTEM)


def _tools(ctx: Ctx) -> list[Any]:
    """The agent's tools: ``--tools files`` (under ``--folder``) and the tools
    of every ``--mcp NAME`` server from the settings."""
    from desktop_app.agent.mcp import mcp_tools
    from desktop_app.agent.tools import file_tools

    tools: list[Any] = []
    if getattr(ctx.args, "tools", "none") == "files":
        if not ctx.args.folder.is_dir():
            raise InputError(f"--folder {ctx.args.folder} is not a folder")
        tools = list(file_tools(ctx.args.folder))
    return tools + mcp_tools(ctx.settings, getattr(ctx.args, "mcp", None) or [])


def _finish(ctx: Ctx, res: Any, printed: bool) -> int:
    if res.status == "done":
        if not printed:
            print(res.text)
        print(f"run {res.run_id} done", file=sys.stderr)
        return EXIT_OK
    if res.status == "input_required":
        print(f"the agent asks: {res.question}")
        hint = ctx.hints.cmd(f"ask --resume {res.run_id} --answer TEXT")
        print(f"answer with: {hint}", file=sys.stderr)
        return EXIT_OK
    hint = ctx.hints.cmd(f"resume {res.run_id}")
    print(f"run {res.run_id} {res.status}: {res.error}  ({hint})", file=sys.stderr)
    return EXIT_FAILED


def resume_agent_run(ctx: Ctx, sv: Services, run_id: str, answer: str | None) -> int:
    """Continue an agent run (answering its question with ``answer``)."""
    from desktop_app.bootstrap import build_model

    if build_model(sv.settings) is None:
        raise ConfigError(NO_MODEL)
    agent = agent_for(sv, sv.agents.get(run_id).agent, _tools(ctx))
    res: Any
    if answer is not None:
        res = agent.resume_input(run_id, answer)
    else:
        res = list(agent.resume_stream(run_id))[-1].response
    return _finish(ctx, res, printed=False)


def cmd_ask(ctx: Ctx) -> int:
    from desktop_app.bootstrap import build_model

    a = ctx.args
    sv = ctx.services(flows=[])
    if a.resume:
        ref = ctx.resolve(sv, a.resume)
        if ref.kind != "agent":
            raise InputError(
                f"run {ref.run_id} is a flow run, not an agent run; use "
                f"{ctx.hints.cmd('resume ' + ref.run_id)}"
            )
        return resume_agent_run(ctx, sv, ref.run_id, a.answer)
    if not a.question:
        raise InputError("give a question, or --resume RUN")
    if build_model(sv.settings) is None:
        raise ConfigError(NO_MODEL)
    agent = agent_for(sv, "ask", _tools(ctx))
    events = []
    for ev in agent.stream(a.question):
        if ev.kind == "delta":
            print(ev.text, end="", flush=True)
        elif ev.kind == "tool_start":
            print(f"\n[{ev.tool}…]", file=sys.stderr, flush=True)
        events.append(ev)
    print()
    res = events[-1].response
    assert res is not None
    return _finish(ctx, res, printed=True)
