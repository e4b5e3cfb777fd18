"""``FlowdeskAgent``: an existing Pydantic AI agent whose runs are Flowdesk agent runs.

A run is a row of Flowdesk's agent-run journal (:class:`~desktop_app.store.protocol.AgentLog`),
the one Flowdesk's own :class:`~desktop_app.agent.runtime.Agent` writes: the
prompt as its input and first message, one assistant message per model
request and one tool message per tool call (so ``flowdesk show``, the app's
conversation view and its tool results show it like any agent run), the
unit results under ``pydantic_ai/...`` keys (see
:mod:`desktop_app.integrations.pydantic_ai.durability`), a lease like every
agent run, and, in the transaction that creates it, the registered agent's
name (:class:`~desktop_app.agent.recovery.ToolSources`), so ``flowdesk
resume``, ``flowdesk agent`` and the app's launch recovery resume it with
that agent (:mod:`desktop_app.integrations.pydantic_ai.registry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.run import AgentRunResult
from pydantic_core import to_json

from desktop_app.agent.approvals import (
    ApprovalJournal,
    ApprovalRequest,
    answer_commands,
    declined_result,
    parse_decision,
    pending_approval,
    require_wait,
)
from desktop_app.agent.drives import driving
from desktop_app.agent.leases import claim_agent_run, holding_agent_run
from desktop_app.agent.messages import Message
from desktop_app.agent.recovery import ToolSources, record_approval
from desktop_app.agent.runtime import set_status_unless_terminal
from desktop_app.agent.tools import TOOL_SOURCES_KEY
from desktop_app.errors import (
    AgentError,
    AgentRunCanceledError,
    CheckpointNotFoundError,
    ConfigError,
    InputError,
    InputRequiredError,
    RevisionConflictError,
    RunStateError,
)
from desktop_app.flow import tracing
from desktop_app.flow.clock import Clock, default_clock
from desktop_app.flow.context import ExecutionContext
from desktop_app.flow.owners import new_owner
from desktop_app.integrations.pydantic_ai.durability import CURRENT, FlowdeskDurability, RunJournal
from desktop_app.store.leases_log import log_agent_takeover
from desktop_app.store.protocol import AgentLog, AgentRun, AgentStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowdeskRunResult:
    """How a durable run ended.

    Attributes:
        run_id: the Flowdesk agent run (resume it with this id).
        status: ``done``, or ``input_required`` when a tool call waits for a
            person's approval (a run that raised keeps ``failed`` with the
            error; an interrupted one stays ``running``).
        output: the agent's output when ``done``; when ``input_required``,
            Pydantic AI's ``DeferredToolRequests`` whose ``approvals`` hold the
            tool call waiting for a yes or no (as a Pydantic AI run that
            ends at a tool requiring approval outputs it).
        text: the output as stored in the run (a string as is, anything
            else as JSON).
        result: Pydantic AI's ``AgentRunResult`` when ``done``.
        question: when ``input_required``: what the person is asked.
        approval: when ``input_required``: the tool call waiting for a yes or no.
        executed: model requests and tool calls this call ran.
        replayed: those it answered from the journal (done before a crash).
    """

    run_id: str
    status: AgentStatus
    output: Any = None
    text: str | None = None
    result: AgentRunResult[Any] | None = None
    question: str | None = None
    approval: ApprovalRequest | None = None
    executed: int = 0
    replayed: int = 0


class FlowdeskAgent:
    """A Pydantic AI agent whose runs are durable Flowdesk agent runs.

    Args:
        agent: the ``pydantic_ai.Agent`` (it needs a ``name``: it names the
            runs' durable steps and the registration ``flowdesk agent`` and
            launch recovery resume them with). Not modified: the durability
            capability is added to each run.
        store: the agent-run store (``Services.agents`` of
            :func:`desktop_app.bootstrap.open_services`; SQLite or PostgreSQL).
        owner: this process's lease owner id (default ``host:pid:random``).
        lease_ttl_s: seconds a run's lease lasts without renewal.
        clock: time source (UTC epoch seconds).

    Raises:
        ConfigError: the agent has no name.
    """

    def __init__(
        self,
        agent: PydanticAgent[Any, Any],
        store: AgentLog,
        *,
        owner: str | None = None,
        lease_ttl_s: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        if not agent.name:
            raise ConfigError(
                "a Pydantic AI agent made durable with Flowdesk needs a name: "
                "Agent(..., name='my_agent'); it identifies the run's steps and how a "
                "resumed run finds its agent"
            )
        self.agent = agent
        self.name: str = agent.name
        self.store = store
        self.owner = owner or new_owner()
        self.lease_ttl_s = lease_ttl_s
        self.clock = clock or default_clock(store)  # checked on SQLite, as an Agent's
        self.durability = FlowdeskDurability(name=self.name)
        #: the ``flowdesk`` commands its errors print, with the database and
        #: scope of ``store`` (a URL without its password), so they run as printed
        self.hints = _hints_of(store)

    @classmethod
    def open(cls, agent: PydanticAgent[Any, Any], db: str | None = None) -> FlowdeskAgent:
        """Over the database of the Flowdesk settings (``db`` overrides
        ``db_path``: a SQLite file or a ``postgresql://`` URL), schema checked.

        Raises:
            SchemaMissingError: the schema is not applied (``flowdesk db apply``).
        """
        from desktop_app.bootstrap import open_services
        from desktop_app.config import load_settings

        settings = load_settings(**({"db_path": db} if db is not None else {}))
        return cls(agent, open_services(settings, flows=[]).agents)

    # -- running -------------------------------------------------------------

    def run_sync(self, prompt: str, **kwargs: Any) -> FlowdeskRunResult:
        """:meth:`run` in a new event loop."""
        return asyncio.run(self.run(prompt, **kwargs))

    async def run(
        self,
        prompt: str,
        *,
        run_id: str | None = None,
        deps: Any = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
        context: ExecutionContext | None = None,
    ) -> FlowdeskRunResult:
        """Start a durable run of ``prompt`` and drive it to its end.

        With ``run_id`` of an existing run, that run is resumed instead (the
        same call again after a crash); one that waits for a tool call's
        approval returns the same ``input_required`` result the call that
        reached the wait returned (replayed from the journal: nothing runs),
        until the approval is answered (``flowdesk answer``, the inbox,
        :meth:`resume` with ``answer``). The
        run is stored (and resumable by its id) before the first model
        request. ``event_stream_handler`` receives Pydantic AI's stream
        events as they arrive (text deltas from a streamed model request,
        tool calls and results), as with Temporal and DBOS.

        Raises:
            InputError: ``run_id`` names a run of another prompt (nothing
                ran: the run id is the run's idempotency key, as a DBOS
                workflow id is).
            Whatever the agent raises (the run is then ``failed`` with it);
            AgentRunLeasedError when a live process drives ``run_id`` (a
            ``flowdesk agent`` worker, the app, another call): nothing ran
            here; call again once it is done or waits;
            AgentRunCanceledError when the run is canceled (``flowdesk
            cancel``, :meth:`cancel`) while this drives it: it stays
            ``canceled``, no model request or tool call starts after the
            cancel, and a tool call in flight ran to its end with its result
            recorded (the error's ``in_flight`` names it).
        """
        if run_id is not None and self._exists(run_id):
            existing = self.store.get(run_id)
            if existing.input != prompt:  # the run id is the run's idempotency key
                raise InputError(
                    f"agent run {run_id} exists with another prompt ({existing.input!r}); "
                    "nothing ran. The same call (the same prompt) goes on with it; start a "
                    "new prompt with a new run_id"
                )
            if existing.status == "input_required":  # as the first call returned it
                return await self._still_waiting(existing, deps, event_stream_handler)
            return await self.resume(run_id, deps=deps, event_stream_handler=event_stream_handler)
        rid = run_id or uuid.uuid4().hex
        now = self.clock.now()
        ctx = (context or ExecutionContext()).for_run(rid)
        try:
            self._create(rid, prompt, now, ctx)
        except RevisionConflictError:
            if run_id is None or not self._exists(run_id):
                raise
            # the same call at the same instant elsewhere created it first: as
            # a call after it (another prompt refused, a live driver leased)
            return await self.run(
                prompt,
                run_id=run_id,
                deps=deps,
                event_stream_handler=event_stream_handler,
                context=context,
            )
        log.info("agent %s: run %s started (owner %s)", self.name, rid, self.owner)
        return await self._drive(self.store.get(rid), deps, event_stream_handler)

    def _create(self, rid: str, prompt: str, now: float, ctx: ExecutionContext) -> None:
        """Store run ``rid`` of ``prompt``, leased to this process (raises
        RevisionConflictError when the id exists)."""
        self.store.create(
            AgentRun(
                run_id=rid,
                agent=self.name,
                status="running",
                input=prompt,
                created_at=now,
                updated_at=now,
                context=ctx.model_dump(),
                lease_owner=self.owner,
                lease_expires_at=now + self.lease_ttl_s,
            ),
            [Message("user", prompt).to_json()],
            (
                TOOL_SOURCES_KEY,
                "tool_sources",
                "completed",
                ToolSources(pydantic_ai=self.name).to_json(),
            ),
        )

    async def resume(
        self,
        run_id: str,
        *,
        answer: str | None = None,
        wait_id: str | None = None,
        deps: Any = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
    ) -> FlowdeskRunResult:
        """Drive run ``run_id`` again from its journal: the agent runs its
        code again from the start and every model request and tool call
        that completed before returns its stored result; the rest run. A
        ``done`` run replays to its output without running anything. A run
        waiting for approval (``input_required``) needs ``answer``: yes or no
        (:func:`~desktop_app.agent.approvals.parse_decision`), journaled with
        the end of the wait before the call is made, as Flowdesk's own agent
        runs do (:mod:`desktop_app.agent.approvals`). ``wait_id``: the
        approval the person answered
        (:func:`~desktop_app.agent.approvals.agent_wait_id` of what they read).
        The answer goes to the approval read here, and only if the run still
        waits on it once its lease is taken: answered elsewhere meanwhile, it
        is refused and nothing changes.

        Raises:
            InputRequiredError: the run waits for approval and no ``answer``
                was given; its message names the ``flowdesk answer`` command
                (with the ``--db``/``--scope`` of this agent's store).
            ApprovalAnswerError: ``answer`` is neither yes nor no (nothing changed).
            RunStateError: the run is canceled, timed out or expired, or not
                a run of this agent; or the approval answered (``wait_id``,
                else the one read here) was answered elsewhere.
            AgentRunLeasedError: a live process drives it.
            AgentRunCanceledError: it was canceled while this drove it (see :meth:`run`).
            JournalMismatchError: the agent now asks for other tool calls
                than the run recorded.
        """
        run = self.store.get(run_id)
        if run.agent != self.name or ToolSources.of_run(self.store, run_id).pydantic_ai is None:
            raise RunStateError(
                f"agent run {run_id} is a run of {run.agent!r}, not of the Pydantic AI agent "
                f"{self.name!r}; resume it with its own agent"
            )
        if run.status in ("canceled", "timeout", "expired"):
            raise RunStateError(f"agent run {run_id} is {run.status}; it cannot be resumed")
        if answer is not None and wait_id is not None:
            require_wait(run, wait_id)
        request = pending_approval(run.pending_call) if run.status == "input_required" else None
        if answer is not None and request is None:
            raise RunStateError(f"agent run {run_id} waits for no answer (status {run.status!r})")
        if request is not None and answer is None:
            yes, no = (self.hints.cmd(c) for c in answer_commands(run_id, request.key))
            raise InputRequiredError(
                f"agent run {run_id} waits for an answer: {request.question()}; answer it "
                f"with `{yes}` or `{no}` (or resume it here with answer='yes' or 'no')"
            )
        if run.status != "done":
            if answer is not None:
                parse_decision(answer)  # neither yes nor no: refused before the lease
            took = claim_agent_run(self.store, run, self.owner, self.lease_ttl_s, self.clock.now())
            if took is not None:
                log_agent_takeover(self.name, run_id, self.owner, took)
            log.info("agent %s: run %s resumed (status was %s)", self.name, run_id, run.status)
            if request is not None and answer is not None:
                try:  # answered elsewhere between the read and the lease? refused
                    record_approval(
                        self.store,
                        run_id,
                        answer,
                        owner=self.owner,
                        wait_id=request.key,
                        now=self.clock.now(),
                    )
                except RunStateError:
                    self.store.release(run_id, self.owner)
                    raise
            else:
                self.store.update(
                    run_id, self.clock.now(), owner=self.owner, status="running", error=None
                )
        return await self._drive(self.store.get(run_id), deps, event_stream_handler)

    async def _still_waiting(
        self, run: AgentRun, deps: Any, handler: EventStreamHandler[Any] | None
    ) -> FlowdeskRunResult:
        """``run`` again on a run that waits for an approval: its result as
        the call that reached the wait returned it, replayed from the journal
        under the run's lease (a run answered meanwhile goes on)."""
        if run.agent != self.name or ToolSources.of_run(self.store, run.run_id).pydantic_ai is None:
            raise RunStateError(
                f"agent run {run.run_id} is a run of {run.agent!r}, not of the Pydantic AI agent "
                f"{self.name!r}; resume it with its own agent"
            )
        claim_agent_run(self.store, run, self.owner, self.lease_ttl_s, self.clock.now())
        return await self._drive(self.store.get(run.run_id), deps, handler)

    def resume_sync(self, run_id: str, **kwargs: Any) -> FlowdeskRunResult:
        """:meth:`resume` in a new event loop."""
        return asyncio.run(self.resume(run_id, **kwargs))

    def cancel(self, run_id: str) -> None:
        """Mark a run ``canceled`` (terminal; it is never resumed), as a
        compare-and-set on the status read: a run its executing process
        ends between that read and the write keeps what it ended with.

        Raises:
            RunStateError: the run is already done, failed, canceled, timed
                out or expired (also when it became so a moment before this
                write; nothing was changed).
            CheckpointNotFoundError: no such run.
        """
        set_status_unless_terminal(
            self.store,
            run_id,
            self.clock.now(),
            "canceled",
            "canceled by user",
            ("done", "failed", "canceled", "timeout", "expired"),
        )

    def runs(self, statuses: Sequence[str] | None = None) -> list[AgentRun]:
        """This agent's runs (optionally of these statuses), oldest first."""
        return self.store.list(statuses=statuses, agent=self.name)

    # -- the drive -------------------------------------------------------------

    def _exists(self, run_id: str) -> bool:
        try:
            self.store.get(run_id)
        except CheckpointNotFoundError:
            return False
        return True

    async def _drive(
        self, run: AgentRun, deps: Any, handler: EventStreamHandler[Any] | None
    ) -> FlowdeskRunResult:
        """Drive ``run`` inside its span (``invoke_agent <name>`` in the trace
        id of its context, as a Flowdesk agent run's; current while it runs,
        so the agent's own instrumentation nests under it), ended with the
        run's status (``interrupted`` when it stopped before an end)."""
        span = tracing.start_agent_span(self.name, run.run_id, run.context.get("trace_id"))
        status = "interrupted"
        try:
            # the app's quit stops it once its unit in flight ended, and waits
            # until its lease is given back (the store closes after it)
            with driving(), tracing.current(span):
                result = await self._drive_held(run, deps, handler)
            status = result.status
            return result
        except AgentRunCanceledError:
            status = "canceled"
            raise
        except Exception:
            status = "failed"
            raise
        finally:
            tracing.end_span(
                span,
                error=status if status == "failed" else None,
                attributes={"flowdesk.status": status},
            )

    async def _drive_held(
        self, run: AgentRun, deps: Any, handler: EventStreamHandler[Any] | None
    ) -> FlowdeskRunResult:
        journal = RunJournal(
            self.store, run.run_id, self.owner, self.clock, run.created_at, turns=run.turns
        )
        finished = run.status == "done"
        token = CURRENT.set(journal)
        try:
            held = (
                contextlib.nullcontext()  # a done run only replays: no lease, no write
                if finished
                else holding_agent_run(
                    self.store, run.run_id, self.owner, self.lease_ttl_s, self.clock
                )
            )
            with held:
                try:
                    outcome = await self._segments(run, deps, handler)
                except Exception as exc:
                    ended = "canceled" if isinstance(exc, AgentRunCanceledError) else "failed"
                    log.info("agent %s: run %s ended %s", self.name, run.run_id, ended)
                    # canceled meanwhile: it stays canceled (every write here is refused)
                    if not finished and not isinstance(exc, AgentRunCanceledError):
                        self.store.update(
                            run.run_id,
                            self.clock.now(),
                            owner=self.owner,
                            status="failed",
                            error=f"{type(exc).__name__}: {exc}",
                            error_type=type(exc).__name__,
                        )
                    raise
                if isinstance(outcome, tuple):
                    request, part = outcome
                    self.store.update(
                        run.run_id,
                        self.clock.now(),
                        owner=self.owner,
                        status="input_required",
                        pending_call={
                            "name": request.tool,
                            "arguments": dict(request.arguments),
                            "approval": request.to_json(),
                        },
                    )
                    log.info("agent %s: run %s ended input_required", self.name, run.run_id)
                    return FlowdeskRunResult(
                        run.run_id,
                        "input_required",
                        DeferredToolRequests(approvals=[part]),
                        question=request.question(),
                        approval=request,
                        executed=journal.executed,
                        replayed=journal.replayed,
                    )
                text = _as_text(outcome.output)
                if not finished:
                    self.store.update(
                        run.run_id, self.clock.now(), owner=self.owner, status="done", response=text
                    )
                    log.info("agent %s: run %s ended done", self.name, run.run_id)
        finally:
            CURRENT.reset(token)
        return FlowdeskRunResult(
            run.run_id,
            "done",
            outcome.output,
            text,
            outcome,
            executed=journal.executed,
            replayed=journal.replayed,
        )

    async def _segments(
        self, run: AgentRun, deps: Any, handler: EventStreamHandler[Any] | None
    ) -> AgentRunResult[Any] | tuple[ApprovalRequest, ToolCallPart]:
        """Run the agent until it answers, or until a tool call needs a
        decision nobody has journaled yet (returned, with its Pydantic AI part).

        A tool that requires approval (Pydantic AI's ``requires_approval``)
        ends a Pydantic AI run with ``DeferredToolRequests``; each of its
        calls becomes an :class:`~desktop_app.agent.approvals.ApprovalRequest`
        (its place: its number among the conversation's tool calls) whose
        decision is looked up in the run's journal, and the agent goes on
        with those decisions (``DeferredToolResults``: approved, or denied
        with :func:`~desktop_app.agent.approvals.declined_result`), all in
        this drive, so a replay takes the same path.

        Raises:
            AgentError: the agent deferred a call for external execution
                (``CallDeferred``), which a Flowdesk run cannot answer.
        """
        decisions = ApprovalJournal(self.store, run.run_id, self.clock, self.owner)
        history: list[ModelMessage] | None = None
        answers: DeferredToolResults | None = None
        journal = CURRENT.get()
        assert journal is not None
        while True:
            journal.segment += 1
            result = await self.agent.run(
                None if history is not None else run.input,
                message_history=history,
                deferred_tool_results=answers,
                output_type=self._output_type,
                deps=deps,
                capabilities=[self.durability],
                event_stream_handler=handler,
            )
            requests = result.output
            if not isinstance(requests, DeferredToolRequests):
                return result
            if requests.calls:
                names = ", ".join(sorted({c.tool_name for c in requests.calls}))
                raise AgentError(
                    f"agent run {run.run_id}: the agent deferred {names} for external execution, "
                    "which a Flowdesk run cannot answer; make it a tool that runs, or one that "
                    "requires approval"
                )
            history = result.all_messages()
            places = _tool_call_places(history)
            approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
            for part in requests.approvals:
                request = ApprovalRequest.of(
                    part.tool_name, part.args_as_dict(), places[part.tool_call_id]
                )
                decided = decisions.decision(request)
                if decided is None:
                    return request, part
                approvals[part.tool_call_id] = decided or ToolDenied(
                    declined_result(part.tool_name)
                )
            answers = DeferredToolResults(approvals=approvals)

    @property
    def _output_type(self) -> Any:
        """The agent's output type, with ``DeferredToolRequests`` added (how
        Pydantic AI ends a run at a tool call that needs approval)."""
        spec = self.agent.output_type
        specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        return specs if DeferredToolRequests in specs else [*specs, DeferredToolRequests]


def _tool_call_places(messages: list[ModelMessage]) -> dict[str, int]:
    """Each tool call's 1-based number among the conversation's tool calls, by call id."""
    ids = [
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]
    return {call_id: n for n, call_id in enumerate(ids, start=1)}


def _as_text(output: Any) -> str:
    return output if isinstance(output, str) else to_json(output).decode()


def _hints_of(store: AgentLog) -> Any:
    """The CLI's :class:`~desktop_app.cli.output.Hints` for ``store``'s
    database and scope: ``--db`` always (a program's database need not be
    the one a shell's settings name; a URL without its password), ``--scope``
    unless it is ``default``."""
    from desktop_app.cli.output import Hints

    db = getattr(store, "path", None)  # SQLite: the file
    if db is None:
        db = getattr(getattr(store, "checkpoints", None), "db", None)  # PostgreSQL: the URL
    scope = getattr(store, "scope", "default")
    return Hints(None if db is None else str(db), None if scope == "default" else scope)
