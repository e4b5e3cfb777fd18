"""Agent runs from the command line: ``ask``, and resuming/canceling an agent run.

What a model or a tool wrote (answer text, tool names, questions, errors) is
printed through :func:`desktop_app.textsafe.visible_controls`: an escape
sequence in it shows as ``\\x1b]0;...`` instead of retitling the window,
clearing the screen or writing the clipboard."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx
from desktop_app.cli.output import EXIT_FAILED, EXIT_OK
from desktop_app.errors import ConfigError, InputError
from desktop_app.textsafe import visible_controls

if TYPE_CHECKING:
    from desktop_app.agent import Agent
    from desktop_app.agent.recovery import ToolSources
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


def agent_for(
    sv: Services, name: str, tools: list[Any] | None = None, sources: ToolSources | None = None
) -> Agent:
    """An :class:`Agent` named ``name`` over the services' agent store, with
    the configured model (or one that refuses calls when none is configured);
    a run it starts records ``sources`` (where ``tools`` came from)."""
    from desktop_app.agent import Agent
    from desktop_app.bootstrap import build_model

    model: Any = build_model(sv.settings) or _NoModel()
    recorded = None if sources is None or sources.empty else sources.to_json()
    return Agent(name, model, sv.agents, tools or [], system=SYSTEM, tool_sources=recorded)


def _sources(ctx: Ctx) -> ToolSources:
    """The tool sources the command line gives: ``--tools files`` (under
    ``--folder``) and every ``--mcp NAME`` server from the settings.

    Raises:
        InputError: ``--folder`` is not a folder.
    """
    from desktop_app.agent.recovery import ToolSources

    folder = None
    if getattr(ctx.args, "tools", "none") == "files":
        if not ctx.args.folder.is_dir():
            raise InputError(f"--folder {ctx.args.folder} is not a folder")
        folder = ctx.args.folder.resolve()
    return ToolSources(folder, tuple(getattr(ctx.args, "mcp", None) or ()))


def _finish(ctx: Ctx, res: Any, printed: bool) -> int:
    if res.status == "done":
        if not printed:
            print(visible_controls(res.text))
        print(f"run {res.run_id} done", file=sys.stderr)
        return EXIT_OK
    if res.status == "input_required":
        print(f"the agent asks: {visible_controls(str(res.question))}")
        if res.approval is not None:
            from desktop_app.agent.approvals import answer_commands

            yes, no = answer_commands(res.run_id)
            print(f"approve with: {ctx.hints.cmd(yes)}", file=sys.stderr)
            print(f"decline with: {ctx.hints.cmd(no)}", file=sys.stderr)
            return EXIT_OK
        hint = ctx.hints.cmd(f"ask --resume {res.run_id} --answer TEXT")
        print(f"answer with: {hint}", file=sys.stderr)
        return EXIT_OK
    hint = ctx.hints.cmd(f"resume {res.run_id}")
    error = visible_controls(str(res.error))
    print(f"run {res.run_id} {res.status}: {error}  ({hint})", file=sys.stderr)
    return EXIT_FAILED


def resume_agent_run(ctx: Ctx, sv: Services, run_id: str, answer: str | None) -> int:
    """Continue an agent run (answering its question with ``answer``) with
    the tools it recorded when it started, or with those this command line
    gives (``ask --resume RUN --tools/--mcp``)."""
    from desktop_app.agent.recovery import ToolSources, connected_tools, resume_pydantic_ai
    from desktop_app.bootstrap import build_model

    if ToolSources.of_run(sv.agents, run_id).pydantic_ai is not None:
        ctx.current_run = run_id
        resumed = resume_pydantic_ai(sv.agents, sv.settings, run_id, answer)
        return _finish(ctx, resumed, printed=False)
    if build_model(sv.settings) is None:
        raise ConfigError(NO_MODEL)
    given = _sources(ctx)
    sources = ToolSources.of_run(sv.agents, run_id) if given.empty else given
    ctx.current_run = run_id
    with connected_tools(sv.settings, sources, run_id) as tools:
        agent = agent_for(sv, sv.agents.get(run_id).agent, tools)
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
    if a.no_stream:  # for this command only; the setting stays as it is
        sv.settings.model.stream = False
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
    from desktop_app.agent.recovery import connected_tools

    sources = _sources(ctx)
    run_id = uuid.uuid4().hex
    with connected_tools(sv.settings, sources) as tools:
        agent = agent_for(sv, "ask", tools, sources)
        events = []
        for ev in agent.stream(a.question, run_id=run_id):
            if ev.kind == "started":  # stored: from now on it can be resumed by its id
                ctx.current_run = run_id
                again = ctx.hints.cmd(f"resume {run_id}")
                print(f"run {run_id} (if interrupted: {again})", file=sys.stderr, flush=True)
            elif ev.kind == "delta":  # ESC is shown as \x1b: a sequence split over
                # deltas stays visible, each part on its own
                print(visible_controls(ev.text), end="", flush=True)
            elif ev.kind == "tool_start":
                print(f"\n[{visible_controls(str(ev.tool))}…]", file=sys.stderr, flush=True)
            events.append(ev)
    print()
    res = events[-1].response
    assert res is not None
    return _finish(ctx, res, printed=True)


def recover_agents(sv: Services, skip: set[str] | None = None) -> tuple[int, int]:
    """Resume every interrupted agent run with the tools it recorded
    (``resume --all``, ``flowdesk agent``), printing one line per run.

    Args:
        skip: ids of runs not to try (``flowdesk agent`` passes the ones that
            could not be resumed before, so each is reported once); runs
            that fail or cannot be resumed are added to it.

    Returns:
        ``(runs tried, runs that failed or could not be resumed)``; a run a
        live process took meanwhile is not a failure.
    """
    import time

    from desktop_app.agent.recovery import recover_agent_runs
    from desktop_app.bootstrap import build_model
    from desktop_app.errors import AgentRunLeasedError

    failed = 0

    def report(run: Any, outcome: Any) -> None:
        nonlocal failed
        bad = True
        if isinstance(outcome, AgentRunLeasedError):  # a live peer runs it: not a failure
            bad = False
            print(
                f"agent run {run.run_id} not resumed here: {visible_controls(str(outcome))}",
                flush=True,
            )
        elif isinstance(outcome, BaseException):
            print(
                f"agent run {run.run_id} not resumed: {visible_controls(str(outcome))}", flush=True
            )
        else:
            bad = outcome.status not in ("done", "input_required")
            print(f"agent run {run.run_id} {outcome.status}", flush=True)
        failed += bad
        if bad and skip is not None:
            skip.add(run.run_id)

    model: Any = build_model(sv.settings) or _NoModel()
    report_ = recover_agent_runs(
        sv.agents, sv.settings, model, time.time(), on_result=report, skip=skip
    )
    return len(report_), failed
