"""Agent runs from the command line: ``ask``, and resuming/canceling an agent run.

What a model or a tool wrote (answer text, tool names, questions, errors) is
printed through :func:`desktop_app.textsafe.visible_controls`: an escape
sequence in it shows as ``\\x1b]0;...`` instead of retitling the window,
clearing the screen or writing the clipboard."""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.cli.common import Ctx
from desktop_app.cli.output import EXIT_FAILED, EXIT_OK, Hints
from desktop_app.errors import ConfigError, FlowdeskError, InputError
from desktop_app.textsafe import shell_quote, visible_controls

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from desktop_app.agent import Agent
    from desktop_app.agent.recovery import ToolSources
    from desktop_app.agent.runtime import AgentEvent
    from desktop_app.bootstrap import Services
    from desktop_app.config import Settings

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


def system_prompt(settings: Settings, name: str, tools: list[Any]) -> str:
    """The system prompt a new run of agent ``name`` starts with:
    ``[agents.NAME] system`` from the settings, or else one that names the
    tools it has (``tools``: objects with a ``name``) and no others."""
    own = settings.agents.get(name)
    if own is not None and own.system is not None:
        return own.system
    names = sorted({str(t.name) for t in tools})
    has = (
        f"You can call these tools: {', '.join(names)}; call one when the question needs it."
        if names
        else "You have no tools: answer from what you know, and do not claim to have "
        "looked anything up."
    )
    ask = "To ask the user something, call ask_user."
    return f"You answer the user's questions. {has} {ask} Be brief."


def agent_for(
    sv: Services,
    name: str,
    tools: list[Any] | None = None,
    sources: ToolSources | None = None,
    owner: str | None = None,
) -> Agent:
    """An :class:`Agent` named ``name`` over the services' agent store, with
    the configured model (or one that refuses calls when none is configured)
    and :func:`system_prompt`; a run it starts records ``sources`` (where
    ``tools`` came from). ``owner``: its lease owner (``host:pid:nonce``),
    one that already holds a run's lease
    (:func:`~desktop_app.agent.recovery.claimed_run`), or a new one
    when ``None``."""
    from desktop_app.agent import Agent
    from desktop_app.bootstrap import build_model
    from desktop_app.config import max_turns

    model: Any = build_model(sv.settings) or _NoModel()
    recorded = None if sources is None or sources.empty else sources.to_json()
    system = system_prompt(sv.settings, name, tools or [])
    return Agent(
        name,
        model,
        sv.agents,
        tools or [],
        system=system,
        max_turns=max_turns(sv.settings, name),
        tool_sources=recorded,
        owner=owner,
    )


def _connecting(name: str) -> None:
    """Says on stderr that an MCP server is being started or reached (a
    stdio server can take many seconds); stdout stays the answer alone."""
    print(f"connecting to MCP server {visible_controls(name)}…", file=sys.stderr, flush=True)


def _print_events(
    ctx: Ctx, events: Iterator[AgentEvent], run_id: str | None = None
) -> tuple[Any, bool]:
    """Prints an agent run's events as they come (text on stdout, tool
    lines on stderr); returns its final response and whether text was printed.
    ``run_id``: of a new run, hinted once it is stored."""
    last = None
    streamed = False
    for ev in events:
        if ev.kind == "started" and run_id:  # stored: from now on it can be resumed
            ctx.current_run = run_id
            again = ctx.hints.cmd(f"resume {run_id}")
            print(f"run {run_id} (if interrupted: {again})", file=sys.stderr, flush=True)
        elif ev.kind == "delta":  # ESC is shown as \x1b: a sequence split over
            # deltas stays visible, each part on its own
            print(visible_controls(ev.text), end="", flush=True)
            streamed = streamed or bool(ev.text)
        elif ev.kind == "tool_start":
            print(f"\n[{visible_controls(str(ev.tool))}…]", file=sys.stderr, flush=True)
        last = ev
    if streamed:
        print()
    assert last is not None and last.response is not None
    return last.response, streamed


def _sources(ctx: Ctx) -> ToolSources:
    """The tool sources the command line gives: ``--tools files`` (under
    ``--folder``) and every ``--mcp NAME`` server from the settings.

    Raises:
        InputError: ``--folder`` is not a folder, or is given without
            ``--tools files`` (it would be ignored).
    """
    from desktop_app.agent.recovery import ToolSources

    folder = None
    given: Path | None = getattr(ctx.args, "folder", None)
    if getattr(ctx.args, "tools", "none") == "files":
        root = given if given is not None else Path(".")
        if not root.is_dir():
            raise InputError(f"--folder {root} is not a folder")
        folder = root.resolve()
    elif given is not None:
        raise InputError(
            f"--folder {given} is the root of --tools files, which was not asked for; "
            "add --tools files, or leave --folder out"
        )
    return ToolSources(folder, tuple(getattr(ctx.args, "mcp", None) or ()))


def unknown_outcome_line(sv: Services, hints: Hints, run_id: str) -> str | None:
    """What to say of agent run ``run_id``'s tool calls whose outcome is
    unknown (sent and never finished: cut off by a stop, or timed out;
    never repeated): "its call to X has an unknown outcome ... check ...
    `show RUN` lists it", or ``None`` when it has none."""
    from desktop_app.agent.messages import unknown_outcome_tools

    unknown = unknown_outcome_tools(sv.agents.tool_results(run_id))
    if not unknown:
        return None
    shown = f"`{hints.cmd(f'show {run_id}')}`"
    return (
        f"its call to {visible_controls(', '.join(unknown))} has an unknown outcome "
        "(it was sent and did not finish: cut off, or timed out; not repeated, so check "
        f"where it acts whether it was made): {shown} lists it"
    )


def _finish(ctx: Ctx, sv: Services, res: Any, printed: bool) -> int:
    unknown = unknown_outcome_line(sv, ctx.hints, res.run_id)
    if unknown is not None:  # said plainly by every command that resumes the run
        print(f"flowdesk: {unknown}", file=sys.stderr)
    if printed and res.status not in ("done", "input_required"):  # stdout has part of a reply
        print(
            "the text printed on stdout above is part of a reply that did not finish: it is "
            "not the answer, and none of it was kept",
            file=sys.stderr,
        )
    if res.status == "done":
        if not printed:
            print(visible_controls(res.text))
        print(f"run {res.run_id} done", file=sys.stderr)
        return EXIT_OK
    if res.status == "input_required":
        print(f"the agent asks: {visible_controls(str(res.question))}")
        for line in answer_lines(sv, ctx.hints, res):
            print(line, file=sys.stderr)
        return EXIT_OK
    if res.status == "canceled":  # by `flowdesk cancel` while this process executed it
        error = visible_controls(str(res.error))
        print(f"run {res.run_id} canceled: {error}", file=sys.stderr)
        return EXIT_FAILED
    from desktop_app.cli.waits import agent_next

    run = sv.agents.get(res.run_id)
    no_stream = bool(getattr(ctx.args, "no_stream", False))
    then = agent_next(ctx.hints, run, no_stream=no_stream) or ctx.hints.cmd(f"resume {res.run_id}")
    error = visible_controls(str(res.error))
    if res.status == "rate_limited" and run.retry_at is not None:
        print(f"run {res.run_id} rate_limited: {error}; {then}", file=sys.stderr)
        return EXIT_FAILED
    print(f"run {res.run_id} {res.status}: {error}  ({then})", file=sys.stderr)
    return EXIT_FAILED


def answer_lines(sv: Services, hints: Hints, res: Any) -> list[str]:
    """How to answer agent run ``res`` (an ``AgentResponse`` that is
    ``input_required``), with the user's ``--db``/``--scope``: ``approve
    with:`` and ``decline with:`` for a tool call waiting for approval,
    ``answer with:`` for an ``ask_user`` question; each with ``--wait-id``."""
    from desktop_app.agent.approvals import agent_wait_id, answer_commands, ask_command

    if res.approval is not None:
        yes, no = answer_commands(res.run_id, res.approval.key)
        return [f"approve with: {hints.cmd(yes)}", f"decline with: {hints.cmd(no)}"]
    asked = agent_wait_id(sv.agents.get(res.run_id).pending_call)
    return [f"answer with: {hints.cmd(ask_command(res.run_id, asked))}"]


def answer_command(ctx: Ctx, run: Any) -> str:
    """The command that answers agent run ``run`` (an ``AgentRun`` waiting
    for input), with the user's ``--db``/``--scope``: ``answer RUN yes
    --wait-id ID`` for a tool call waiting for approval (yes or no), ``ask
    --resume RUN --answer TEXT --wait-id ID`` for an ``ask_user`` question
    (any text); each refused once the run waits on something else."""
    from desktop_app.agent.approvals import (
        agent_wait_id,
        answer_commands,
        ask_command,
        pending_approval,
    )

    request = pending_approval(run.pending_call)
    if request is not None:
        return ctx.hints.cmd(answer_commands(run.run_id, request.key)[0])
    return ctx.hints.cmd(ask_command(run.run_id, agent_wait_id(run.pending_call)))


def refuse_early(
    ctx: Ctx, sv: Services, run_id: str, answer: str | None, wait_id: str | None = None
) -> None:
    """Refuse, before any MCP server is started and anything of the run
    changes, what resuming agent run ``run_id`` (answering it with
    ``answer``) with the tools this command line gives would refuse later.

    Raises:
        RunStateError: an answer for a run that waits for none (done,
            failed, canceled...), or (``wait_id`` given: ``answer --wait-id``)
            waits on another question than ``wait_id``; a run that is
            canceled, timed out or expired, or a resume of one rate limited
            until a later time.
        InputRequiredError: a plain resume of a run waiting for an answer
            (the message gives the command that answers it).
        ApprovalAnswerError: an approval answered with neither yes nor no.
        AgentRunLeasedError: a live process executes the run, or ``db
            copy`` moved it to PostgreSQL (whatever it waits for).
        AgentToolsChangedError: ``--tools``/``--folder``/``--mcp`` differ from
            the tools the run recorded when it started (the message gives
            the command that resumes it with them).
    """
    from desktop_app.agent.approvals import parse_decision, pending_approval
    from desktop_app.agent.recovery import ToolSources
    from desktop_app.agent.runtime import pending_question
    from desktop_app.errors import (
        AgentRunLeasedError,
        AgentToolsChangedError,
        InputRequiredError,
        RunStateError,
        iso_utc,
        moved_to,
    )
    from desktop_app.flow.owners import holding

    run = sv.agents.get(run_id)
    now = sv.checkpoints.now()
    show = ctx.hints.cmd(f"show {run_id}")
    if run.status in ("canceled", "timeout", "expired"):
        raise RunStateError(
            f"agent run {run_id} is {run.status}; it cannot be resumed or answered (`{show}` "
            "says what it did)"
        )
    holder = run.lease_owner
    if moved_to(holder) is not None:  # db copy moved it: before what it waits for
        raise AgentRunLeasedError(run_id, str(holder), run.lease_expires_at)
    if run.status == "running" and holding(holder, run.lease_expires_at, now) == "held":
        # a live process executes it (or was answered a moment ago and carries it on)
        raise AgentRunLeasedError(run_id, str(holder), run.lease_expires_at)
    if answer is None and run.status == "rate_limited" and (run.retry_at or 0.0) > now:
        raise RunStateError(
            f"agent run {run_id} is rate limited until {iso_utc(run.retry_at or 0.0)}; resume "
            "it after that"
        )
    if answer is not None:  # wait_id: answered elsewhere since it was read?
        _refuse_unasked(ctx, run, now, wait_id)
    if answer is None and run.status == "input_required":
        asked = pending_question(run)  # None: no question recorded (edited by hand)
        question = "" if asked is None else f" to {visible_controls(repr(asked))}"
        raise InputRequiredError(
            f"agent run {run_id} waits for an answer{question}; answer it with: "
            f"{answer_command(ctx, run)}"
        )
    if answer is not None and pending_approval(run.pending_call) is not None:
        parse_decision(answer)  # neither yes nor no: ApprovalAnswerError, nothing changed
    given, recorded = _sources(ctx), ToolSources.of_run(sv.agents, run_id)
    if given.empty or recorded.empty or given == recorded or run.status == "done":
        return
    again = ctx.hints.cmd(
        f"resume {run_id}" if answer is None else f"answer {run_id} {shell_quote(answer)}"
    )
    raise AgentToolsChangedError(
        f"agent run {run_id} was started with {_in_words(recorded)} (recorded when it "
        f"started), not with {_in_words(given)}; nothing was changed and it can still be "
        f"resumed with its own tools: {again}"
    )


def _refuse_unasked(ctx: Ctx, run: Any, now: float, wait_id: str | None = None) -> None:
    """Refuse an answer to agent run ``run`` (an ``AgentRun``) when it waits
    for none, or (``wait_id`` given) waits on another question.

    Raises:
        RunStateError: it is not ``input_required`` with a pending question,
            or waits on another question than ``wait_id``; nothing was answered.
    """
    from desktop_app.agent.approvals import require_wait
    from desktop_app.errors import RunStateError
    from desktop_app.runs_view import display_status

    if run.status != "input_required" or run.pending_call is None:
        raise RunStateError(
            f"agent run {run.run_id} is {display_status(run, now)}, not waiting for an "
            f"answer; nothing was answered (`{ctx.hints.cmd(f'show {run.run_id}')}` says "
            "what it did)"
        )
    if wait_id is not None:
        require_wait(run, wait_id)


def _in_words(sources: ToolSources) -> str:
    """``the file tools over /x and the tools of MCP server notes``."""
    parts = []
    if sources.folder is not None:
        parts.append(f"the file tools over {sources.folder}")
    if sources.mcp:
        s = "s" if len(sources.mcp) > 1 else ""
        parts.append(f"the tools of MCP server{s} {', '.join(sources.mcp)}")
    if sources.pydantic_ai is not None:
        parts.append(f"the Pydantic AI agent {sources.pydantic_ai}")
    return visible_controls(" and ".join(parts) or "no tools")


def resume_agent_run(
    ctx: Ctx, sv: Services, run_id: str, answer: str | None, wait_id: str | None = None
) -> int:
    """Continue an agent run (answering its question with ``answer``) with
    the tools it recorded when it started, or with those this command line
    gives (``ask --resume RUN --tools/--mcp``) when it recorded none. What
    would be refused (:func:`refuse_early`) is refused before any server is
    started; a ``done`` run prints its saved answer without starting any.
    ``wait_id`` (``answer --wait-id``, as ``waiting --json`` gives it): the
    question answered; refused, nothing answered, once the run waits on
    another (checked again after the run's lease is taken)."""
    from desktop_app.agent.recovery import (
        ToolSources,
        claimed_run,
        connected_tools,
        goes_on,
        resume_pydantic_ai,
    )
    from desktop_app.bootstrap import build_model
    from desktop_app.errors import AgentRunLeasedError

    try:
        refuse_early(ctx, sv, run_id, answer, wait_id)
    except AgentRunLeasedError as exc:
        _not_recorded(ctx, exc, run_id, answer)
        raise
    if ToolSources.of_run(sv.agents, run_id).pydantic_ai is not None:
        ctx.current_run = run_id
        try:
            resumed = resume_pydantic_ai(
                sv.agents,
                sv.settings,
                run_id,
                answer,
                wait_id=wait_id,
                resume_hint=ctx.hints.cmd(f"resume {run_id}"),
            )
        except AgentRunLeasedError as exc:  # taken before its answer is recorded
            _not_recorded(ctx, exc, run_id, answer)
            raise
        return _finish(ctx, sv, resumed, printed=False)
    run = sv.agents.get(run_id)
    if run.status == "done":  # its saved answer: no model, no tools
        res, printed = _print_events(ctx, agent_for(sv, run.agent).resume_stream(run_id))
        return _finish(ctx, sv, res, printed=printed)
    if build_model(sv.settings) is None:
        raise ConfigError(NO_MODEL)
    given = _sources(ctx)
    sources = ToolSources.of_run(sv.agents, run_id) if given.empty else given
    ctx.current_run, ctx.current_is_agent = run_id, True
    if answer is not None:  # until it is recorded, a stop prints this command again
        ctx.unanswered = _answer_again(run, answer, wait_id)
    with contextlib.ExitStack() as stack:
        # the answer or resume takes the run before any server starts: of two
        # at once, the losing one starts none and calls no tool
        try:
            owner = stack.enter_context(claimed_run(sv.agents, run_id))
        except AgentRunLeasedError as exc:
            _not_recorded(ctx, exc, run_id, answer)
            raise
        if answer is not None:
            _refuse_unasked(ctx, sv.agents.get(run_id), sv.checkpoints.now(), wait_id)
            # recorded durably before any server starts: a crash or a server that
            # cannot start leaves the answer recorded (resume goes on with it)
            recorder = agent_for(sv, run.agent, [], sources, owner)
            recorder.record_input(run_id, answer, wait_id=wait_id)
            ctx.unanswered = None
        elif not goes_on(now := sv.agents.get(run_id), sv.checkpoints.now()):
            # changed since it was read (another process resumed it a moment
            # ago): done, its saved answer; else refused as it stands; no server started
            if now.status != "done":
                refuse_early(ctx, sv, run_id, None)
            agent = agent_for(sv, run.agent, [], sources, owner)
            res, printed = _print_events(ctx, agent.resume_stream(run_id))
            return _finish(ctx, sv, res, printed=printed)
        try:
            tools = stack.enter_context(
                connected_tools(sv.settings, sources, run_id, on_connect=_connecting)
            )
        except FlowdeskError as exc:
            if answer is not None:  # recorded: the run goes on with it once its tools start
                exc.add_note(
                    "your answer was recorded: the run goes on with it once its tools can "
                    f"start: run {ctx.hints.cmd(f'resume {run_id}')} then (a running "
                    "`flowdesk agent` does it on its own)"
                )
            raise
        agent = agent_for(sv, run.agent, tools, sources, owner)
        res, printed = _print_events(ctx, agent.resume_stream(run_id))
    return _finish(ctx, sv, res, printed=printed)


def _answer_again(run: Any, answer: str, wait_id: str | None) -> str:
    """The command (for ``Hints.cmd``) that gives agent run ``run`` the same
    ``answer`` again, pinned to ``wait_id``: ``answer RUN yes --wait-id …``
    for a tool call's approval, ``ask --resume RUN --answer TEXT --wait-id
    …`` for a question (as ``waiting`` prints them)."""
    from desktop_app.agent.approvals import approval_command, ask_command, pending_approval

    if wait_id is not None and pending_approval(run.pending_call) is not None:
        return approval_command(run.run_id, wait_id, answer)
    return ask_command(run.run_id, wait_id, answer)


def _not_recorded(ctx: Ctx, exc: Exception, run_id: str, answer: str | None) -> None:
    """Add to ``exc`` (another process holds agent run ``run_id``, so
    nothing was done here) that ``answer``, if one was given, was not
    recorded, and the command that shows what that process did."""
    if answer is not None and getattr(exc, "moved_to", None) is None:  # moved: said so
        exc.add_note(
            f"your answer ({answer!r}) was not recorded: the process holding the run "
            "answered it first or is running it; what it did: "
            f"`{ctx.hints.cmd(f'show {run_id}')}`"
        )


def answer_pin(sv: Services, run_id: str, given: str | None) -> str | None:
    """The wait id an answer to agent run ``run_id`` is pinned to: the
    question or call it waits on now (``given`` None), or the one
    ``--wait-id GIVEN`` names (as the printed commands give it, with or
    without the run's id before it; an approval's short form expanded,
    :func:`~desktop_app.agent.approvals.expand_wait_id`). An answer meant
    for a question someone else answered meanwhile is then refused instead
    of answering the run's next one."""
    from desktop_app.agent.approvals import agent_wait_id, expand_wait_id

    asked = agent_wait_id(sv.agents.get(run_id).pending_call)
    if given is None:
        return asked
    return expand_wait_id(given.removeprefix(f"{run_id}:"), asked)


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
        wait_id = None if a.answer is None else answer_pin(sv, ref.run_id, a.wait_id)
        return resume_agent_run(ctx, sv, ref.run_id, a.answer, wait_id=wait_id)
    if not a.question:
        raise InputError("give a question, or --resume RUN")
    if build_model(sv.settings) is None:
        raise ConfigError(NO_MODEL)
    from desktop_app.agent.recovery import connected_tools
    from desktop_app.bootstrap import run_context

    context = run_context(sv.settings)  # a bad TRACEPARENT: refused before anything
    sources = _sources(ctx)
    run_id = uuid.uuid4().hex
    with connected_tools(sv.settings, sources, on_connect=_connecting) as tools:
        agent = agent_for(sv, "ask", tools, sources)
        events = agent.stream(a.question, run_id=run_id, context=context)
        res, printed = _print_events(ctx, events, run_id)
    return _finish(ctx, sv, res, printed=printed)


def recover_agents(
    sv: Services, skip: set[str] | None = None, *, worker: bool = False, hints: Hints
) -> tuple[int, int]:
    """Resume every interrupted agent run with the tools it recorded
    (``resume --all``, ``flowdesk agent``), printing one line per run.

    Args:
        skip: ids of runs not to try (``flowdesk agent`` passes the ones that
            could not be resumed before, so each is reported once); runs
            that fail or cannot be resumed are added to it.
        worker: ``flowdesk agent`` calls it: a run a live peer holds is
            routine contention between workers, logged at debug level
            (``desktop_app.cli.ask``) instead of printed to a person, and a
            database that cannot be reached (DatabaseUnreachableError) is
            raised, not reported as the run's failure: the worker retries.
        hints: the command's :class:`~desktop_app.cli.output.Hints` (its
            ``--db``/``--scope``): a run ``db copy`` moved is printed with the
            command that shows it there, a call of unknown outcome with the
            ``show`` command that lists it.

    Returns:
        ``(runs tried, runs that failed or could not be resumed)``; a run a
        live process took meanwhile is not a failure.
    """
    import time

    from desktop_app.agent.recovery import recover_agent_runs
    from desktop_app.bootstrap import build_model
    from desktop_app.errors import AgentRunLeasedError, DatabaseUnreachableError

    failed = 0

    def report(run: Any, outcome: Any) -> None:
        nonlocal failed
        if worker and isinstance(outcome, DatabaseUnreachableError):
            # not the run's failure: the worker rides the outage out and
            # tries the run again once the database is back (never skipped)
            raise outcome
        bad = True
        if isinstance(outcome, AgentRunLeasedError):  # a live peer runs it: not a failure
            bad = False
            if worker:  # routine between workers: nothing for a person to do
                log.debug("agent run %s is held by a live peer: %s", run.run_id, outcome.owner)
                return
            print(
                f"agent run {run.run_id} not resumed here: {visible_controls(str(outcome))}",
                flush=True,
            )
            if outcome.moved_to is not None:
                from desktop_app.cli.output import moved_hint

                there = moved_hint(hints, outcome.moved_to, run.run_id)
                print(f"  see it there: {there}", flush=True)
        elif isinstance(outcome, BaseException):
            print(
                f"agent run {run.run_id} not resumed: {visible_controls(str(outcome))}", flush=True
            )
        else:
            bad = outcome.status not in ("done", "input_required")
            print(f"agent run {run.run_id} {outcome.status}", flush=True)
            unknown = unknown_outcome_line(sv, hints, run.run_id)
            if unknown is not None:
                print(f"  {unknown}", flush=True)
            if outcome.status == "input_required":  # as `resume RUN` says it
                for line in answer_lines(sv, hints, outcome):
                    print(f"  {line}", flush=True)
        failed += bad
        if bad and skip is not None:
            skip.add(run.run_id)

    model: Any = build_model(sv.settings) or _NoModel()
    report_ = recover_agent_runs(
        sv.agents, sv.settings, model, time.time(), on_result=report, skip=skip
    )
    return len(report_), failed
