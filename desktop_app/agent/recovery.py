"""Resuming interrupted agent runs with the tools they were started with.

An agent run started with tools (``flowdesk ask --tools files --folder DIR``,
``--mcp NAME``) records where they came from (:class:`ToolSources`, under
:data:`~desktop_app.agent.tools.TOOL_SOURCES_KEY` in its tool journal, in
the transaction that creates it): the folder and the names of the MCP
servers, never a server's command, URL or environment (which may hold
secrets); those are read from the settings again when the run resumes.

An agent run is *interrupted* when it is ``running`` and no live process
executes it: its lease is free (Ctrl-C released it), its owner was a process
on this host that no longer exists (``kill -9``), or its lease expired (a
process elsewhere). :func:`recover_agent_runs` resumes those, one at a time;
``flowdesk resume --all``, ``flowdesk agent`` and the app's launch recovery
call it. Agent runs of a flow step (``parent_run_id`` set) are left to their
parent: its step reattaches to them when the flow run resumes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.agent.tools import TOOL_SOURCES_KEY, AgentTool, file_tools
from desktop_app.errors import ConfigError, FlowdeskError, InputError, RunStateError
from desktop_app.extras import install_command
from desktop_app.flow.owners import lease_abandoned
from desktop_app.store.protocol import AgentLog, AgentRun

if TYPE_CHECKING:
    from desktop_app.agent.runtime import AgentResponse
    from desktop_app.config import Settings


@dataclass(frozen=True)
class ToolSources:
    """Where an agent run's tools come from.

    Attributes:
        folder: the folder of the file tools (``--tools files --folder DIR``),
            absolute, or ``None``.
        mcp: names of MCP servers in the settings' ``[mcp_servers]`` (``--mcp NAME``).
        pydantic_ai: the name of the registered Pydantic AI agent that runs
            this run, tools and model included
            (:mod:`desktop_app.integrations.pydantic_ai`), or ``None`` for a
            run of Flowdesk's own :class:`~desktop_app.agent.runtime.Agent`.
    """

    folder: Path | None = None
    mcp: tuple[str, ...] = ()
    pydantic_ai: str | None = None

    @property
    def empty(self) -> bool:
        """No tools besides the built-in ``ask_user``."""
        return self.folder is None and not self.mcp and self.pydantic_ai is None

    def to_json(self) -> str:
        """The JSON text stored with the run: ``{"folder": ..., "mcp": [...]}``,
        plus ``"pydantic_ai": NAME`` for a Pydantic AI agent's run."""
        folder = None if self.folder is None else str(self.folder)
        data: dict[str, Any] = {"folder": folder, "mcp": list(self.mcp)}
        if self.pydantic_ai is not None:
            data["pydantic_ai"] = self.pydantic_ai
        return json.dumps(data)

    @classmethod
    def of_run(cls, store: AgentLog, run_id: str) -> ToolSources:
        """The sources agent run ``run_id`` recorded (none when it recorded none)."""
        stored = store.tool_result(run_id, TOOL_SOURCES_KEY)
        if stored is None:
            return cls()
        data = json.loads(stored.result or "{}")
        folder = data.get("folder")
        return cls(
            None if folder is None else Path(folder),
            tuple(data.get("mcp") or ()),
            data.get("pydantic_ai"),
        )


@contextmanager
def connected_tools(
    settings: Settings,
    sources: ToolSources,
    run_id: str | None = None,
    *,
    on_connect: Callable[[str], None] | None = None,
) -> Iterator[list[AgentTool]]:
    """The tools of ``sources``: the file tools over its folder (those named in
    ``[file_tools] require_approval`` wait for approval) and the tools of each
    named MCP server (read from ``settings``, opened here and closed when the
    block ends; ``on_connect(name)`` is called as each is opened; one that
    cannot be opened is logged with ``run_id``, the agent run they are for).

    Raises:
        InputError: the folder does not exist (any more).
        ConfigError: an MCP server name is not in the settings.
        McpError: a server cannot be started or reached.
    """
    from desktop_app.agent.mcp import open_servers

    tools: list[AgentTool] = []
    if sources.folder is not None:
        if not sources.folder.is_dir():
            raise InputError(
                f"{sources.folder} is not a folder: the file tools (--tools files --folder) "
                "need it; restore it, or cancel the run with `flowdesk cancel RUN`"
            )
        tools += file_tools(sources.folder, require_approval=settings.file_tools.require_approval)
    servers = (
        open_servers(settings, sources.mcp, run_id, on_connect=on_connect) if sources.mcp else []
    )
    try:
        yield tools + [t for s in servers for t in s.tools()]
    finally:
        for server in servers:
            server.close()


def resume_pydantic_ai(
    store: AgentLog,
    settings: Settings,
    run_id: str,
    answer: str | None = None,
    *,
    wait_id: str | None = None,
    owner: str | None = None,
    resume_hint: str = "flowdesk resume RUN",
) -> AgentResponse:
    """Resume a run of a Pydantic AI agent (its :class:`ToolSources` names
    one) with the registered agent of that name, ``answer`` being yes or no
    to the tool call it waits to have approved, ``wait_id`` the approval
    answered (refused once the run waits on another)
    (:func:`desktop_app.integrations.pydantic_ai.registry.resume_registered`).

    The run's lease is taken first (:func:`claimed_run`, unless ``owner``
    holds it), so of two processes resuming it at once the losing one loads
    and starts nothing of the agent. With ``answer``, the
    answer is then recorded (:func:`record_approval`) before the registered agent is
    loaded and started (its module, the function that builds it, its MCP
    toolsets): a crash there, or an agent not registered here, leaves the
    answer recorded (the run ``running``, interrupted), and the next resume
    (``flowdesk resume``, a ``flowdesk agent`` pass) makes an approved call
    once. ``owner``: the lease owner that already holds the run (a caller
    that recorded the answer itself), else a new one. ``resume_hint``: the
    command that resumes the run, named when the answer was recorded but
    the run could not go on.

    Raises:
        ConfigError: the ``pydantic-ai`` extra is not installed (checked
            first: nothing recorded), or the agent is not registered (an
            answer is recorded by then; the error's note says so).
        RunStateError, ApprovalAnswerError, AgentRunLeasedError: as
            :func:`record_approval` and :func:`claimed_run` (nothing recorded).
    """
    try:
        from desktop_app.integrations.pydantic_ai.registry import resume_registered
    except ImportError as exc:
        raise ConfigError(
            f"agent run {run_id} was started by a Pydantic AI agent; install Flowdesk with "
            f"its extra ({install_command('pydantic-ai')}) to resume it"
        ) from exc
    if answer is None and owner is not None:
        return resume_registered(store, settings, run_id, owner=owner)
    if answer is None:  # taken before the agent is loaded and started, as a Flowdesk agent's
        with claimed_run(store, run_id) as held:
            return resume_registered(store, settings, run_id, owner=held)
    with claimed_run(store, run_id) as held:
        record_approval(store, run_id, answer, owner=held, wait_id=wait_id)
        try:
            return resume_registered(store, settings, run_id, owner=held)
        except FlowdeskError as exc:
            exc.add_note(
                "your answer was recorded: the run goes on with it once its agent can be "
                f"loaded and started here: run {resume_hint} then (a running `flowdesk agent` "
                "where it is registered does it on its own)"
            )
            raise


def record_approval(
    store: AgentLog,
    run_id: str,
    answer: str,
    *,
    owner: str,
    wait_id: str | None = None,
    now: float | None = None,
) -> None:
    """Record, durably and without continuing it, ``answer`` (yes or no) to
    the tool call a Pydantic AI agent's run waits to have approved, as
    ``FlowdeskAgent.resume`` does: the decision journaled with the end of the
    wait in one write, a declined call's tool message (what the model is
    told) with it; the run is then ``running``. Call it holding the run's
    lease as ``owner`` (:func:`claimed_run`), before the agent is loaded or
    started, so a crash there leaves the answer recorded.

    Args:
        wait_id: the approval the person answered
            (:func:`~desktop_app.agent.approvals.agent_wait_id`); ``None``:
            whatever the run waits on as read here, under the lease.
        now: UTC epoch seconds of the write (default: the store's
            :func:`~desktop_app.flow.clock.default_clock`).

    Raises:
        RunStateError: the run waits for no approval, or (``wait_id``) waits
            on another one: answered elsewhere; nothing recorded.
        ApprovalAnswerError: ``answer`` is neither yes nor no (nothing recorded).
        LeaseLostError: ``owner`` does not hold the run.
        ClockSkewError: ``now`` not given and this process's clock is off
            the database's (nothing recorded).
    """
    from desktop_app.agent.approvals import (
        ApprovalJournal,
        declined_result,
        parse_decision,
        pending_approval,
        require_wait,
    )
    from desktop_app.agent.messages import Message
    from desktop_app.flow.clock import default_clock

    run = store.get(run_id)
    if wait_id is not None:
        require_wait(run, wait_id)
    request = pending_approval(run.pending_call) if run.status == "input_required" else None
    if request is None:
        raise RunStateError(f"agent run {run_id} waits for no answer (status {run.status!r})")
    approved = parse_decision(answer)
    declined = []
    if not approved:  # the declined call's answer is a turn, as Flowdesk's own agent writes it
        calls = [
            call
            for m in store.messages(run_id)
            if m.get("role") == "assistant"
            for call in m.get("tool_calls", [])
        ]
        call = calls[request.place - 1] if 0 < request.place <= len(calls) else {}
        call_id = call.get("id") if call.get("name") == request.tool else None
        content = declined_result(request.tool)
        declined = [Message("tool", content, tool_call_id=call_id, name=request.tool).to_json()]
    store.update(  # the decision is journaled with the end of the wait
        run_id,
        default_clock(store).now() if now is None else now,
        owner=owner,
        tool=ApprovalJournal.row(request, approved),
        status="running",
        error=None,
        pending_call=None,
        messages=declined,
    )


def pydantic_ai_unavailable(settings: Settings, sources: ToolSources) -> str | None:
    """Why a run of a Pydantic AI agent (``sources.pydantic_ai``) cannot be
    resumed with ``settings``, or ``None`` when it can (or is not such a
    run): the extra is missing, the agent is not registered (the text says
    how to register it: ``pydantic_ai_agents``, and why any registration
    failed to load)."""
    name = sources.pydantic_ai
    if name is None:
        return None
    try:
        from desktop_app.integrations.pydantic_ai.registry import registered_agents
    except ImportError:
        return (
            f"it is a run of the Pydantic AI agent {name!r}; install Flowdesk with its extra "
            f"({install_command('pydantic-ai')})"
        )
    agents, problems = registered_agents(settings)
    if name in agents:
        return None
    broken = f"; {'; '.join(problems)}" if problems else ""
    return (
        f"it is a run of the Pydantic AI agent {name!r}, which is not registered here: add "
        f'"package.module:attribute" of it to pydantic_ai_agents in the settings (or '
        """FLOWDESK_PYDANTIC_AI_AGENTS='["package.module:attribute"]', the module importable)"""
        + broken
    )


#: seconds the lease taken before starting a run's MCP servers lasts (an
#: answer's or a resume's; the agent's own lease, renewed while it runs,
#: takes over from it); a process on this host holds it for as long as it
#: lives, whatever the clocks
CLAIM_LEASE_S = 30.0


@contextmanager
def claimed_run(store: AgentLog, run_id: str) -> Iterator[str]:
    """Hold agent run ``run_id``'s lease while the block runs (the
    :class:`~desktop_app.agent.runtime.Agent` that answers or resumes it is
    given the yielded owner): taken before the run's MCP servers start, so of
    two processes answering or resuming it at once (``flowdesk answer``,
    ``flowdesk resume``, the app, ``flowdesk agent`` workers) the losing one
    is refused having started nothing and called no tool. Renewed every
    ``CLAIM_LEASE_S / 3`` seconds while the block runs (a slow server start
    does not let it expire), released when the block ends (the run's driving
    releases it first); the run is left as it was when nothing ran.

    A run taken over from a dead or expired owner is logged so
    (``agent NAME: run ID: OWNER takes it over from OLD (owner gone)``).

    Yields:
        str: the lease owner (``host:pid:nonce``).

    Raises:
        AgentRunLeasedError: another live process holds the run (an answer
            or a resume taken a moment ago, say); nothing was run.
        CheckpointNotFoundError: no such run.
        ClockSkewError: this process's clock is off the database's file
            system clock (SQLite, :func:`~desktop_app.flow.clock.default_clock`);
            nothing was taken or run.
    """

    from desktop_app.agent.leases import claim_agent_run, holding_agent_run
    from desktop_app.flow.clock import default_clock
    from desktop_app.flow.owners import new_owner
    from desktop_app.store.leases_log import log_agent_takeover

    owner = new_owner()
    clock = default_clock(store)  # a skewed clock takes nothing (ClockSkewError)
    run = store.get(run_id)
    took = claim_agent_run(store, run, owner, CLAIM_LEASE_S, clock.now())
    if took is not None:  # logged as Agent logs its own takeovers
        log_agent_takeover(run.agent, run_id, owner, took)
    # renewed while the block runs: an npx server's start-up can outlast the
    # lease, and a worker on another host would take an expired one over
    with holding_agent_run(store, run_id, owner, CLAIM_LEASE_S, clock):
        yield owner


def goes_on(run: AgentRun, now: float) -> bool:
    """Whether resuming ``run`` (as read under its lease) would drive it,
    calling its model and tools: ``False`` for a run that is done (its saved
    answer is returned), waits for an answer, has ended, or is rate limited
    until after ``now`` (UTC epoch s) (those are refused); its MCP servers
    are started only when it goes on."""
    if run.status in ("done", "input_required", "canceled", "timeout", "expired"):
        return False
    return not (run.status == "rate_limited" and (run.retry_at or 0.0) > now)


def resume_with_recorded_tools(
    store: AgentLog,
    settings: Settings,
    model: Any,
    run: AgentRun,
    answer: str | None = None,
    *,
    no_model: str = "no model is set up",
    wait_id: str | None = None,
) -> AgentResponse:
    """Continue agent run ``run`` with the tools it recorded
    (:meth:`ToolSources.of_run`, connected by :func:`connected_tools`):
    ``Agent.resume``. The run's lease is taken first (:func:`claimed_run`),
    before any MCP server starts: a process that loses the run to another
    starts none and calls no tool; one that finds it done, waiting or
    ended once it holds it (:func:`goes_on`) starts none either. With
    ``answer`` (its question's answer, or ``yes``/``no`` to the tool call it
    waits to have approved), the answer is then recorded
    (``Agent.record_input``) before any MCP server starts, so a crash or a
    server that cannot start leaves it recorded and the next resume goes on
    with it. A Pydantic AI agent's run is resumed by its registered agent
    (:func:`resume_pydantic_ai`), model included.

    ``wait_id`` (with ``answer``): what the person answered
    (:func:`~desktop_app.agent.approvals.agent_wait_id` of the question they
    read); the answer is refused when the run waits on something else now:
    checked on the run as stored when this is called, and again once the
    run's lease is taken (``Agent.resume_input``, ``FlowdeskAgent.resume``).

    Raises:
        ConfigError: ``model`` is ``None`` (``no_model`` says why) for a run
            of Flowdesk's own agent, an MCP server is not in the settings, or
            the Pydantic AI agent is not registered.
        InputError: the recorded folder is gone.
        McpError: an MCP server cannot be started or reached.
        ApprovalAnswerError: ``answer`` is not yes or no for an approval.
        AgentRunLeasedError: a live process executes the run.
        RunStateError: ``wait_id`` given and the run no longer waits on it,
            or an answer to a run that waits for none (answered elsewhere;
            nothing was answered).
    """
    import time

    from desktop_app.agent.approvals import require_wait
    from desktop_app.agent.runtime import Agent
    from desktop_app.config import max_turns

    if wait_id is not None:
        require_wait(run, wait_id)
    sources = ToolSources.of_run(store, run.run_id)
    if sources.pydantic_ai is not None:
        return resume_pydantic_ai(store, settings, run.run_id, answer, wait_id=wait_id)
    if model is None:
        raise ConfigError(f"agent run {run.run_id} needs a model: {no_model}")
    turns = max_turns(settings, run.agent)

    def agent(tools: list[Any], owner: str) -> Agent:
        return Agent(run.agent, model, store, tools, owner=owner, max_turns=turns)

    if answer is None:
        # the resume takes the run before any server starts: a losing one starts none
        with claimed_run(store, run.run_id) as owner:
            if not goes_on(store.get(run.run_id), time.time()):
                # done (by the process that had it a moment ago), waiting or
                # ended: answered or refused as it stands, no server started
                return agent([], owner).resume(run.run_id)
            with connected_tools(settings, sources, run.run_id) as tools:
                return agent(tools, owner).resume(run.run_id)
    # the answer takes the run before any server starts: a losing answer starts none
    with claimed_run(store, run.run_id) as owner:
        now = store.get(run.run_id)
        if wait_id is not None:
            require_wait(now, wait_id)  # answered elsewhere a moment ago
        if now.status != "input_required" or now.pending_call is None:
            raise RunStateError(
                f"agent run {run.run_id} is not waiting for input (status {now.status!r})"
            )
        # recorded before any server starts: a crash or a server that cannot
        # start leaves the answer recorded, and the next resume goes on with it
        agent([], owner).record_input(run.run_id, answer, wait_id=wait_id)
        with connected_tools(settings, sources, run.run_id) as tools:
            return agent(tools, owner).resume(run.run_id)


def interrupted_agent_runs(store: AgentLog, now: float) -> list[AgentRun]:
    """Top-level agent runs left ``running`` with no live process executing
    them (``owners.lease_abandoned`` at ``now``, UTC epoch seconds: lease
    free, owner dead on this host, or another host's lease expired), and
    ``rate_limited`` ones whose stored time to resume (the provider's
    ``Retry-After``) has come, oldest first."""
    return [
        run
        for run in store.list(statuses=("running", "rate_limited"))
        if run.parent_run_id is None
        and lease_abandoned(run.lease_owner, run.lease_expires_at, now)
        and (run.status == "running" or (run.retry_at is not None and run.retry_at <= now))
    ]


def recover_agent_runs(
    store: AgentLog,
    settings: Settings,
    model: Any,
    now: float,
    *,
    on_result: Callable[[AgentRun, AgentResponse | BaseException], None] | None = None,
    skip: Collection[str] | None = None,
    no_model: str = "no model is set up",
) -> list[tuple[AgentRun, AgentResponse | BaseException]]:
    """Resume every interrupted agent run (:func:`interrupted_agent_runs`)
    with the tools it recorded, one after another.

    Args:
        store: the agent-run store.
        settings: the settings (MCP servers are looked up by name here).
        model: the chat model to continue Flowdesk's own agent runs with, or
            ``None`` when none is set up (those runs are then reported with
            ``no_model``, why there is none; a Pydantic AI agent's run brings
            its own model and is resumed all the same).
        now: the store's "now" (UTC epoch seconds) that decides expiry.
        on_result: called with each run and its outcome as it finishes.
        skip: ids of runs to leave alone.

    Returns:
        ``(run, outcome)`` per interrupted run, oldest first: the
        :class:`~desktop_app.agent.runtime.AgentResponse`, or the error that
        kept it from resuming (``AgentRunLeasedError`` when a live process
        took it meanwhile, ``ConfigError``/``McpError``/``InputError`` when its
        tools cannot be connected or its Pydantic AI agent is not
        registered). One run's error never stops the others.
    """
    report: list[tuple[AgentRun, AgentResponse | BaseException]] = []
    for run in interrupted_agent_runs(store, now):
        if skip is not None and run.run_id in skip:
            continue
        outcome: AgentResponse | BaseException
        try:
            outcome = resume_with_recorded_tools(store, settings, model, run, no_model=no_model)
        except Exception as exc:  # reported with the run; the others still resume
            outcome = exc
        report.append((run, outcome))
        if on_result is not None:
            on_result(run, outcome)
    return report


def hand_answer_to_workers(
    store: AgentLog,
    run: AgentRun,
    answer: str,
    *,
    owner: str,
    now: float,
    wait_id: str | None = None,
    lease_ttl_s: float = 30.0,
) -> None:
    """Store ``answer`` to what agent run ``run`` waits for (``yes``/``no``
    to the tool call it waits to have approved, or its ``ask_user``
    question's answer), exactly as continuing it here would journal it, and
    hand the run to the workers instead of executing it: it is left
    ``running`` with its lease released, so a worker (``flowdesk agent``)
    resumes it with the tools it recorded, as after a crash right after the
    answer. For a process that executes nothing (the app on PostgreSQL).

    Args:
        owner: the lease owner id the answer is written under (held only
            while it is written).
        now: UTC epoch seconds (the store's time).
        wait_id: the question the person answered
            (:func:`~desktop_app.agent.approvals.agent_wait_id`); refused when
            the run waits on another by now.

    Raises:
        ApprovalAnswerError: ``answer`` is neither yes nor no to an approval
            (nothing stored).
        RunStateError: the run waits for no answer, or (``wait_id``) waits
            on another one now; nothing stored.
        AgentRunLeasedError: a live process executes the run.
        StoreError: the answer could not be stored.
    """
    import logging

    from desktop_app.agent.approvals import agent_wait_id, pending_approval, require_wait
    from desktop_app.agent.leases import claim_agent_run
    from desktop_app.agent.runtime import answer_writes

    run_id = run.run_id
    if wait_id is not None:
        require_wait(run, wait_id)
    if run.status != "input_required" or run.pending_call is None:
        raise RunStateError(f"agent run {run_id} is not waiting for input (status {run.status!r})")
    pydantic_ai = ToolSources.of_run(store, run_id).pydantic_ai is not None
    if pending_approval(run.pending_call) is None and pydantic_ai:
        raise RunStateError(f"agent run {run_id} waits for no answer Flowdesk can give")
    written = answer_writes(run.pending_call, answer)
    asked = str(agent_wait_id(run.pending_call))
    claim_agent_run(store, run, owner, lease_ttl_s, now)
    try:
        if pydantic_ai:  # as FlowdeskAgent.resume writes it (a declined call's turn too)
            record_approval(store, run_id, answer, owner=owner, wait_id=asked, now=now)
        else:
            # answered elsewhere between the read and the lease?
            require_wait(store.get(run_id), asked)
            store.update(
                run_id, now, owner=owner, status="running", error=None, pending_call=None, **written
            )
    finally:
        store.release(run_id, owner)  # the workers (woken on PostgreSQL) take it from here
    logging.getLogger(__name__).info(
        "agent run %s answered by %s and handed to the workers", run_id, owner
    )
