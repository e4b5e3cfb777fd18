"""Durable agent runs: model turns and tool calls, checkpointed in SQLite.

Semantics follow go-micro's durable agent (``agent/checkpoint.go``,
``askLocked``), with these choices:

* Every message is appended as it happens (user, assistant, tool), so bytes
  per turn grow with the new messages, not the conversation.
* A tool result is stored with its tool message in one transaction, keyed by
  ``"<tool>:<canonical JSON input>"``; an identical call later in the same run
  (also after a restart, with a freshly built agent) reuses it instead of
  running the tool again. Another run never sees it.
* A read-only tool (``read_only``: ``@tool(read_only=True)``, the file tools,
  an MCP tool annotated ``readOnlyHint``) is keyed by its place in the run
  instead, ``"<tool>:<canonical JSON input>#<n>"`` with ``n`` the call's
  1-based number among the run's tool calls: a later identical call is sent
  again (a read after a write sees the write), while a resume finds the
  completed call at the same place and does not send it again.
* A tool with ``at_most_once`` (an MCP tool, see :mod:`desktop_app.agent.mcp`)
  whose call started but got no answer is never sent again: neither after a
  crash (its result was never saved) nor when its server died or did not
  answer in time (:class:`~desktop_app.errors.McpOutcomeUnknownError`). Its
  outcome is recorded as unknown (:func:`~desktop_app.agent.messages.outcome_unknown`),
  not as a failure: the model and ``show`` say so, and an identical later
  call in the run is answered from that record.
* A tool source with a tool list (an MCP server) has that list recorded in
  the run's tool journal on the first drive; a later drive on which a tool
  the run called is gone or takes other input fails the run (``error_type``
  ``McpToolsChangedError``, logged with the run id); changed descriptions,
  annotations or unused tools do not. A resume with other MCP servers or
  other own tools than the run recorded (a server missing or added) is
  refused before anything changes (:class:`~desktop_app.errors.AgentToolsChangedError`,
  naming the recorded tools); the run stays resumable with its own.
* A cancel by another process (:meth:`Agent.cancel`, ``flowdesk cancel``)
  is seen by the process executing the run at each turn boundary, before
  each tool call and before a model reply is committed (a read), and every
  write of that process is refused once the run is canceled
  (:class:`~desktop_app.errors.AgentRunCanceledError`, checked with its
  lease in the write's transaction), so no tool call starts after the
  cancel is committed and a canceled run is never finished over. It stops
  there and ends ``canceled``. A tool call in flight when the cancel lands
  runs to its end; its result is recorded, the response says so, and
  nothing after it runs. The cancel is a compare-and-set on the status it
  read (``AgentLog.update``'s ``expect_status``): a run the executing
  process ended meanwhile keeps its end, and the cancel raises
  ``RunStateError`` ("already done").
* Each drive is an OpenTelemetry span ``invoke_agent <name>`` in the trace id
  of the run's context, with ``chat <model>`` and ``execute_tool <tool>``
  children (see :mod:`desktop_app.flow.tracing`).
* Resuming a ``done`` run returns the saved answer without calling the model.
* The built-in ``ask_user`` tool pauses the run ``input_required``; plain
  ``resume`` refuses; ``resume_input(run_id, text)`` answers and continues.
  A call without a ``question`` string does not pause: the model is told
  its arguments are invalid, as for any tool (``tools.ask_user_refusal``).
* A call of a tool that requires approval (see
  :mod:`desktop_app.agent.approvals`) pauses the run ``input_required`` with
  the exact tool and arguments as its question; ``resume_input(run_id,
  "yes")`` journals the approval (bound to the call's place, name and
  arguments) and makes that call once, ``"no"`` tells the model the person
  declined. Such a call is at most once, and a call with other arguments is
  asked about again.
* Provider errors are classified by type: retryable ones (5xx, reset,
  timeout) are retried with backoff; a 429 stores the provider's Retry-After
  as ``retry_at`` and ends the call ``rate_limited`` (``resume_due`` continues
  it after that time); anything else ends ``failed``.
* ``timeout_s`` is a per-run deadline (status ``timeout``), ``ttl_s`` a
  time-to-live (status ``expired``); both are stored at creation.
* An agent run is leased like a flow run: the process that executes it holds
  the run's lease (renewed every ``lease_ttl_s / 3`` by a heartbeat thread,
  released when the call returns); another process that resumes it meanwhile
  gets :class:`~desktop_app.errors.AgentRunLeasedError` and runs nothing. A
  lease whose owner died on this host is taken over at once, one whose owner
  is alive on this host never, one of another host's owner after it expires;
  a takeover is a compare-and-set on that owner, so of two processes taking
  one run over at once one wins and the other runs nothing. Every write of
  the executing process checks it still holds the lease.

Message contents and tool results may hold personal data: they stay in the
SQLite file (mode 0600) and are never logged above DEBUG, and never with
their content.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from desktop_app.agent import drives
from desktop_app.agent.approvals import (
    ApprovalJournal,
    ApprovalRequest,
    declined_result,
    parse_decision,
    pending_approval,
    require_wait,
    requires_approval,
)
from desktop_app.agent.leases import claim_agent_run, holding_agent_run
from desktop_app.agent.messages import (
    INVALID_ARGUMENTS,
    AssistantReply,
    Message,
    ToolCall,
    invalid_arguments_answer,
    outcome_unknown,
)
from desktop_app.agent.models import ChatModel
from desktop_app.agent.tools import (
    ASK_USER,
    LISTING_PREFIX,
    TOOL_SOURCES_KEY,
    TOOLSET_KEY,
    AgentTool,
    ToolListing,
    ask_user_refusal,
    ask_user_schema,
)
from desktop_app.errors import (
    AgentError,
    AgentRunCanceledError,
    AgentRunLeasedError,
    AgentRunStatusChangedError,
    AgentToolsChangedError,
    CheckpointNotFoundError,
    InputRequiredError,
    McpError,
    McpOutcomeUnknownError,
    McpToolsChangedError,
    ProviderError,
    RateLimitedError,
    RunStateError,
    StoreError,
    iso_utc,
    moved_to,
)
from desktop_app.flow import tracing
from desktop_app.flow.children import register_child_kind
from desktop_app.flow.clock import Clock, default_clock
from desktop_app.flow.context import ExecutionContext, StepContext
from desktop_app.flow.owners import holding, new_owner
from desktop_app.flow.retry import Backoff
from desktop_app.store.leases_log import log_agent_takeover
from desktop_app.store.protocol import (
    AGENT_ENDED,
    AGENT_TERMINAL,
    AgentLog,
    AgentRun,
    AgentStatus,
    CheckpointStore,
)

log = logging.getLogger(__name__)


def set_status_unless_terminal(
    store: AgentLog,
    run_id: str,
    now: float,
    status: AgentStatus,
    error: str | None,
    terminal: Sequence[str],
) -> None:
    """Set agent run ``run_id``'s ``status`` and ``error`` (a cancel or a
    pause by the user, from any process) unless the run is ``terminal``:
    a compare-and-set on the status read (``AgentLog.update``'s
    ``expect_status``), read again and retried when another process changed
    it to another non-terminal status meanwhile. ``now``: UTC epoch seconds.

    Raises:
        RunStateError: the run is (or became, before this write) one of
            ``terminal``: ``agent run <id> is already <status>``; nothing
            was changed.
        CheckpointNotFoundError: no such run.
    """
    while True:
        run = store.get(run_id)
        if run.status in terminal:
            raise RunStateError(f"agent run {run_id} is already {run.status}")
        try:
            store.update(run_id, now, expect_status=run.status, status=status, error=error)
        except AgentRunStatusChangedError:  # changed since the read: decide again
            continue
        return


class _Canceled(Exception):  # the drive's internal stop signal; it never escapes
    """The run was canceled (``flowdesk cancel``, :meth:`Agent.cancel`) while
    this process executed it: the drive stops here. ``in_flight``: the tool
    whose call was running when the cancel landed (it ran; its result is
    recorded), else ``None``."""

    def __init__(self, reason: str | None, in_flight: str | None = None) -> None:
        self.reason = reason or "canceled"
        self.in_flight = in_flight
        super().__init__(self.reason)

    def said(self) -> str:
        """What the canceled run's response says: the cancel's reason, and
        what this process did about it."""
        if self.in_flight is None:
            return f"{self.reason}; this process stopped before its next model or tool call"
        return (
            f"{self.reason} while the call to {self.in_flight} was in flight: that call ran "
            "to its end (its result is recorded, whatever it did stays done) and nothing "
            "after it ran"
        )


@dataclass(frozen=True)
class AgentResponse:
    """Where an agent run stands after a call returned.

    Attributes:
        run_id: the agent run (resume it with this id).
        status: ``done``, ``input_required``, ``failed``, ``rate_limited``, ...
        text: the final answer when ``done``.
        question: what the agent asks when ``input_required`` (for a tool
            call waiting for approval, :meth:`ApprovalRequest.question`).
        error: why it failed, timed out or was rate limited.
        retry_at: for ``rate_limited``: UTC epoch seconds after which to resume.
        approval: the tool call waiting for a person's yes or no, when the
            run is ``input_required`` for that.
    """

    run_id: str
    status: AgentStatus
    text: str | None = None
    question: str | None = None
    error: str | None = None
    retry_at: float | None = None
    approval: ApprovalRequest | None = None


@dataclass(frozen=True)
class AgentEvent:
    """A streamed event: ``started`` (the new run is stored: from now on it
    can be resumed by its id), ``delta`` (text), ``tool_start``/``tool_end``
    (with ``reused`` when a stored result answered), or ``done`` (with
    ``response``)."""

    kind: Literal["started", "delta", "tool_start", "tool_end", "done"]
    text: str = ""
    tool: str | None = None
    reused: bool = False
    response: AgentResponse | None = None


def answer_writes(pending_call: dict[str, Any], text: str) -> dict[str, Any]:
    """What answering ``text`` to an agent run's ``pending_call`` writes to the
    run (the keyword arguments of ``AgentLog.update``): an approval's
    decision as its journal row (``tool``), or an ``ask_user`` answer as the
    tool message the model reads (``messages``).

    Raises:
        ApprovalAnswerError: an approval answered with neither yes nor no.
    """
    request = pending_approval(pending_call)
    if request is not None:  # yes or no to a tool call, journaled before the call
        return {"tool": ApprovalJournal.row(request, parse_decision(text))}
    call = ToolCall.from_json(pending_call)
    answer = Message("tool", f"Human input: {text}", tool_call_id=call.id, name=ASK_USER)
    return {"messages": [answer.to_json()]}


class Agent:
    """An agent whose runs are durable in the Flowdesk SQLite file.

    Args:
        name: the agent's name (runs record it).
        model: a :class:`~desktop_app.agent.models.ChatModel`.
        store: the agent-run store (shares the file with flows).
        tools: :class:`~desktop_app.agent.tools.Tool` or
            :class:`~desktop_app.agent.mcp.McpTool` objects; ``ask_user`` is built in.
        system: an optional system prompt.
        max_turns: model turns per run before it fails.
        timeout_s: per-run deadline, seconds from creation (status ``timeout``).
        ttl_s: time-to-live, seconds from creation (status ``expired``).
        retries: retries of a retryable provider error within one call.
        backoff: wait between those retries.
        clock: time source (UTC epoch seconds); default: on SQLite the
            system clock checked against the database's file system clock
            (:func:`~desktop_app.flow.clock.default_clock`), so a process
            whose clock is more than ``SKEW_TOLERANCE_S`` off writes nothing
            into the run (``ClockSkewError``), else the system clock.
        owner: this process's lease owner id (default ``host:pid:random``).
        lease_ttl_s: seconds an agent run's lease lasts without renewal.
        tool_sources: where ``tools`` came from, as JSON text (see
            :class:`~desktop_app.agent.recovery.ToolSources`: a folder and MCP
            server names, never a secret); recorded with each run this agent
            creates, in the same transaction, so any process can resume the
            run with the same tools.
        ask_user: offer the model the built-in ``ask_user`` tool; ``False``
            for an agent no person is there to answer (a flow step's child:
            the digest's per-file summaries), where a call to it is answered
            as an unknown tool and the run goes on.
    """

    def __init__(
        self,
        name: str,
        model: ChatModel,
        store: AgentLog,
        tools: Sequence[AgentTool] = (),
        *,
        system: str | None = None,
        max_turns: int = 20,
        timeout_s: float | None = None,
        ttl_s: float | None = None,
        retries: int = 2,
        backoff: Backoff | None = None,
        clock: Clock | None = None,
        owner: str | None = None,
        lease_ttl_s: float = 30.0,
        tool_sources: str | None = None,
        ask_user: bool = True,
    ) -> None:
        self.name = name
        self.owner = owner or new_owner()
        self.lease_ttl_s = lease_ttl_s
        self.model = model
        self.store = store
        self.tools = {t.name: t for t in tools}
        self.system = system
        self.max_turns = max_turns
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.retries = retries
        self.backoff = backoff or Backoff(initial_s=1.0, max_s=20.0)
        # on SQLite checked against the database's file system clock: a
        # process whose clock is skewed writes nothing into the run
        self.clock = clock or default_clock(store)
        self.tool_sources = tool_sources
        self.ask_user = ask_user

    # -- starting ----------------------------------------------------------

    def _create(
        self,
        message: str,
        run_id: str | None,
        parent_run_id: str | None,
        context: ExecutionContext | None,
        *,
        leased: bool = True,
    ) -> str:
        rid = run_id or uuid.uuid4().hex
        now = self.clock.now()
        ctx = (context or ExecutionContext()).for_run(rid)
        first = ([Message("system", self.system)] if self.system else []) + [
            Message("user", message)
        ]
        self.store.create(
            AgentRun(
                run_id=rid,
                agent=self.name,
                status="running",
                input=message,
                created_at=now,
                updated_at=now,
                parent_run_id=parent_run_id,
                deadline_at=now + self.timeout_s if self.timeout_s else None,
                expires_at=now + self.ttl_s if self.ttl_s else None,
                context=ctx.model_dump(),
                lease_owner=self.owner if leased else None,
                lease_expires_at=now + self.lease_ttl_s if leased else None,
            ),
            [m.to_json() for m in first],
            None
            if self.tool_sources is None
            else (TOOL_SOURCES_KEY, "tool_sources", "completed", self.tool_sources),
        )
        if leased:
            log.info("agent %s: run %s started (owner %s)", self.name, rid, self.owner)
        else:
            log.info("agent %s: run %s stored for a worker (by %s)", self.name, rid, self.owner)
        return rid

    def create(
        self,
        message: str,
        *,
        run_id: str | None = None,
        context: ExecutionContext | None = None,
    ) -> str:
        """Store a new run of ``message`` (this agent's system prompt and
        recorded tool sources with it) without driving it: no model call, no
        tool. It is left ``running`` with no lease, as a run interrupted before
        its first model call, so the next ``flowdesk agent`` pass (or
        ``flowdesk resume RUN``) drives it. For a process that executes
        nothing (the app on PostgreSQL hands a question to the workers).

        Returns:
            str: the run id (``run_id``, or a new uuid4 hex).

        Raises:
            StoreError: the run could not be stored (also when ``run_id`` exists).
        """
        return self._create(message, run_id, None, context, leased=False)

    def ask(
        self,
        message: str,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        context: ExecutionContext | None = None,
    ) -> AgentResponse:
        """Start a run and drive it until it answers, asks, fails or is rate limited.

        With ``run_id`` of an existing run, that run is resumed instead
        (a flow step that re-executes reattaches to its child run).
        """
        return _drain(
            self.stream(
                message, run_id=run_id, parent_run_id=parent_run_id, context=context, _stream=False
            )
        )

    def stream(
        self,
        message: str,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        context: ExecutionContext | None = None,
        _stream: bool = True,
    ) -> Iterator[AgentEvent]:
        """Like :meth:`ask`, yielding text deltas and tool events as they happen."""
        if run_id is not None and self._exists(run_id):
            yield from self._resume(run_id, _stream)
            return
        rid = self._create(message, run_id, parent_run_id, context)
        yield AgentEvent("started")
        yield from self._drive(rid, _stream)

    def _exists(self, run_id: str) -> bool:
        try:
            self.store.get(run_id)
        except AgentError:
            return False
        except Exception:
            return False
        return True

    # -- resuming ----------------------------------------------------------

    def resume(self, run_id: str) -> AgentResponse:
        """Continue a run: a ``done`` run returns its saved answer with no
        model call; an unfinished one re-enters with its saved input and
        completed tool history.

        Raises:
            InputRequiredError: the run waits for a person (use ``resume_input``).
            RunStateError: the run is canceled, timed out, expired, or rate
                limited until a later time.
        """
        return _drain(self._resume(run_id, False))

    def resume_stream(self, run_id: str) -> Iterator[AgentEvent]:
        """:meth:`resume`, streamed; completed tools are not replayed."""
        return self._resume(run_id, True)

    def _resume(self, run_id: str, stream: bool) -> Iterator[AgentEvent]:
        run = self.store.get(run_id)
        if run.status == "done":
            yield AgentEvent("done", response=AgentResponse(run_id, "done", run.response))
            return
        if run.status == "input_required":
            question = pending_question(run)  # None: no question recorded (edited by hand)
            raise InputRequiredError(
                f"agent run {run_id} waits for an answer"
                + ("" if question is None else f" to {question!r}")
                + "; use resume_input(run_id, text)"
            )
        if run.status == "rate_limited" and run.retry_at and self.clock.now() < run.retry_at:
            raise RunStateError(
                f"agent run {run_id} is rate limited until {iso_utc(run.retry_at)}; "
                "resume it after that"
            )
        if run.status in ("canceled", "timeout", "expired"):
            raise RunStateError(f"agent run {run_id} is {run.status}; it cannot be resumed")
        if run.status == "failed" and run.error_type == "MaxTurns" and run.turns >= self.max_turns:
            # going on would end it again at once, asking the model nothing
            from desktop_app.config import max_turns_variable

            variable = max_turns_variable(run.agent)
            raise RunStateError(
                f"agent run {run_id} took {run.turns} turns with no answer and may take "
                f"{self.max_turns}; raise the agent's max_turns above {run.turns} to resume it "
                f"(max_turns under [agents.{run.agent}] in the settings"
                + (f", {variable}" if variable else "")
                + "; Agent(max_turns=…) in a program)"
            )
        self._refuse_other_tools(run_id)
        self._claim(run)
        self.store.update(run_id, self.clock.now(), owner=self.owner, status="running", error=None)
        yield from self._drive(run_id, stream)

    def resume_input(self, run_id: str, text: str, *, wait_id: str | None = None) -> AgentResponse:
        """Answer the question of an ``input_required`` run and continue it.

        For a tool call waiting for approval, ``text`` is yes or no: the
        decision is journaled with the end of the wait, in one transaction,
        before the call is made (see :mod:`desktop_app.agent.approvals`).

        Args:
            run_id: the agent run.
            text: the answer (yes or no for an approval).
            wait_id: what the person answers, as
                :func:`~desktop_app.agent.approvals.agent_wait_id` named it
                when they read it (``None``: whatever the run waits on now).
                Given, the answer is refused when the run waits on something
                else, checked again once the run's lease is taken (another
                process that answered in between is seen).

        Raises:
            AgentRunLeasedError: another live process took the answer a
                moment ago and executes the run (nothing was run here).
            RunStateError: the run does not wait for input, or (``wait_id``
                given) waits on something else than ``wait_id`` (nothing
                was answered).
            ApprovalAnswerError: an approval answered with neither yes nor no
                (nothing changed; the run still waits).
        """
        return _drain(self._resume_input(run_id, text, False, wait_id))

    def resume_input_stream(
        self, run_id: str, text: str, *, wait_id: str | None = None
    ) -> Iterator[AgentEvent]:
        """:meth:`resume_input`, streamed (text deltas and tool events)."""
        return self._resume_input(run_id, text, True, wait_id)

    def record_input(self, run_id: str, text: str, *, wait_id: str | None = None) -> None:
        """Record the answer to an ``input_required`` run's question, durably,
        without continuing it: the run is ``running`` with the answer (an
        approval's decision journaled, an ``ask_user`` answer as its tool
        message), held by this agent's owner until released. Called before a
        run's MCP servers start, so a crash or a server that cannot start
        leaves the answer recorded: the next ``resume`` (or ``flowdesk
        agent``) goes on with it and makes an approved call once.

        Raises:
            As :meth:`resume_input`, before anything changed.
        """
        self._record_input(run_id, text, wait_id)

    def _resume_input(
        self, run_id: str, text: str, stream: bool, wait_id: str | None = None
    ) -> Iterator[AgentEvent]:
        self._record_input(run_id, text, wait_id, check_tools=True)
        yield from self._drive(run_id, stream)

    def _record_input(
        self, run_id: str, text: str, wait_id: str | None, *, check_tools: bool = False
    ) -> None:
        run = self.store.get(run_id)
        if wait_id is not None:
            require_wait(run, wait_id)
        if run.status != "input_required" or run.pending_call is None:
            holder = run.lease_owner
            if (
                run.status == "running"
                and holder is not None
                and holder != self.owner
                and holding(holder, run.lease_expires_at, self.clock.now()) == "held"
            ):  # answered a moment ago, and another process is carrying it on
                raise AgentRunLeasedError(run.run_id, holder, run.lease_expires_at)
            raise RunStateError(
                f"agent run {run_id} is not waiting for input (status {run.status!r})"
            )
        written = answer_writes(run.pending_call, text)
        if check_tools:
            self._refuse_other_tools(run_id)
        self._claim(run)
        if wait_id is not None:  # answered elsewhere between the read and the lease?
            try:
                require_wait(self.store.get(run_id), wait_id)
            except RunStateError:
                self.store.release(run_id, self.owner)
                raise
        self.store.update(
            run_id,
            self.clock.now(),
            owner=self.owner,
            status="running",
            pending_call=None,
            **written,
        )

    def pending(self) -> list[AgentRun]:
        """Runs of this agent that are not terminal (running, paused,
        input_required, failed), oldest first."""
        return [r for r in self.store.list(agent=self.name) if r.status not in AGENT_TERMINAL]

    def resume_pending(self) -> tuple[str | None, BaseException | None]:
        """Resume pending runs (not paused or waiting for input) oldest first;
        stop at the first error and return ``(run_id, error)``; ``(None, None)``."""
        for run in self.pending():
            if run.status in ("paused", "input_required"):
                continue
            try:
                res = self.resume(run.run_id)
            except AgentError as exc:
                return run.run_id, exc
            if res.status == "failed":
                return run.run_id, AgentError(res.error or "failed")
        return None, None

    def resume_due(self) -> list[AgentResponse]:
        """Resume ``rate_limited`` runs whose stored retry time has passed."""
        now = self.clock.now()
        out = []
        for run in self.store.list(statuses=("rate_limited",), agent=self.name):
            if run.retry_at is not None and run.retry_at <= now:
                out.append(self.resume(run.run_id))
        return out

    def pause(self, run_id: str) -> None:
        """Mark a run ``paused``; it is listed as pending and resumed on request.

        Raises:
            RunStateError: the run is already terminal (done, canceled, ...),
                also when its executing process ended it a moment before
                this write (nothing was changed).
            CheckpointNotFoundError: no such run.
            AgentRunLeasedError: ``db copy`` moved the run to PostgreSQL
                (nothing was changed here; its message says where).
        """
        run = self.store.get(run_id)
        if run.status not in AGENT_ENDED and moved_to(run.lease_owner) is not None:
            raise AgentRunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        set_status_unless_terminal(
            self.store, run_id, self.clock.now(), "paused", None, AGENT_ENDED
        )

    def cancel(self, run_id: str) -> None:
        """Mark a run ``canceled`` (terminal), also a ``rate_limited`` one (which
        would otherwise go on once its time came). A process executing it
        stops before its next model or tool call (see the module's notes).

        The status is set as a compare-and-set on the status read: a run its
        executing process ends (``done``...) between that read and the write
        keeps what it ended with, and this raises.

        Raises:
            RunStateError: the run has ended (done, canceled, timeout,
                expired), also when its executing process ended it a moment before
                this write (nothing was changed: its last tool call and
                reply happened and stand).
            CheckpointNotFoundError: no such run.
            AgentRunLeasedError: ``db copy`` moved the run to PostgreSQL
                (nothing was changed here; its message says where).
        """
        run = self.store.get(run_id)
        if run.status not in AGENT_ENDED and moved_to(run.lease_owner) is not None:
            raise AgentRunLeasedError(run_id, run.lease_owner or "?", run.lease_expires_at)
        set_status_unless_terminal(
            self.store, run_id, self.clock.now(), "canceled", "canceled by user", AGENT_ENDED
        )

    # -- the loop ------------------------------------------------------------

    def _schemas(self) -> list[dict[str, Any]]:
        schemas = [t.schema() for t in self.tools.values()]
        return [*schemas, ask_user_schema()] if self.ask_user else schemas

    def _finish(self, run: AgentRun, status: AgentStatus, **fields: Any) -> AgentEvent:
        self.store.update(run.run_id, self.clock.now(), owner=self.owner, status=status, **fields)
        log.info("agent %s: run %s ended %s", self.name, run.run_id, status)
        response = AgentResponse(
            run.run_id,
            status,
            text=fields.get("response"),
            error=fields.get("error"),
            retry_at=fields.get("retry_at"),
        )
        return AgentEvent("done", response=response)

    def _claim(self, run: AgentRun) -> None:
        """Take the run's lease before anything of it runs, or raise
        ``AgentRunLeasedError`` (nothing run). A run another owner holds is
        taken as a compare-and-set on that very owner, as the flow engine
        does: at once when its process on this host exited, never while it
        is alive on this host (whatever the clocks say), and, for an owner on
        another host, only once its lease has expired. Of two processes
        taking over one dead owner's run at once, exactly one wins."""
        took = claim_agent_run(self.store, run, self.owner, self.lease_ttl_s, self.clock.now())
        if took is not None:
            log_agent_takeover(self.name, run.run_id, self.owner, took)
        log.info("agent %s: run %s resumed (status was %s)", self.name, run.run_id, run.status)

    def _drive(self, run_id: str, stream: bool) -> Generator[AgentEvent, None, None]:
        """Execute the run while holding its lease; the lease is renewed by a
        heartbeat thread and released when the run stops here."""
        with holding_agent_run(self.store, run_id, self.owner, self.lease_ttl_s, self.clock):
            yield from self._drive_traced(run_id, stream)

    def _drive_traced(self, run_id: str, stream: bool) -> Generator[AgentEvent, None, None]:
        """One pass over a run, inside its span (``invoke_agent <name>``, in
        the trace id of the run's context)."""
        run = self.store.get(run_id)
        span = tracing.start_agent_span(self.name, run_id, run.context.get("trace_id"))
        status: str | None = None
        try:
            try:
                for event in self._drive_turns(run_id, stream, span):
                    if event.response is not None:
                        status = event.response.status
                    yield event
            except (_Canceled, AgentRunCanceledError) as exc:  # canceled by another process
                # (seen on a read, or a write the store refused): it stays canceled
                stop = (
                    exc if isinstance(exc, _Canceled) else _Canceled(self.store.get(run_id).error)
                )
                log.info("agent %s: run %s canceled while executing here", self.name, run_id)
                status = "canceled"
                yield AgentEvent(
                    "done", response=AgentResponse(run_id, "canceled", error=stop.said())
                )
        finally:
            bad = status not in ("done", "input_required", None)
            tracing.end_span(
                span,
                error=status if bad else None,
                attributes={"flowdesk.status": status or "interrupted"},
            )

    def _refuse_other_tools(self, run_id: str) -> None:
        """Refuse to continue a run with other tools than it recorded, before
        anything of it changes (no claim, no status, no journal row).

        What the run recorded: at creation where its tools come from
        (:data:`TOOL_SOURCES_KEY`: a folder, MCP server names), and on its
        first drive the names of its own tools (:data:`TOOLSET_KEY`) and the
        tool list of each MCP server (:data:`LISTING_PREFIX`). A run with
        recorded sources must get exactly their MCP servers (none missing,
        none more), no own tools unless they name a folder, and then the
        names it recorded (and, with :attr:`tool_sources` set, the same
        sources). A run without (started by Python code) must get the own
        tool names and MCP servers it recorded on its first drive. A run
        that recorded none of these (no tools) takes what it is given. What
        changed in a server's tools is checked on the drive
        (:meth:`ToolListing.check_listing`).

        Raises:
            AgentToolsChangedError: the tools differ (the message names the
                tools the run recorded and how to resume it with them).
        """
        journal = {r.tool_key: r for r in self.store.tool_results(run_id)}
        toolset = journal.get(TOOLSET_KEY)
        recorded_names = None if toolset is None else sorted(json.loads(toolset.result or "[]"))
        listings = sorted(k for k in journal if k.startswith(LISTING_PREFIX))
        stored_sources = journal.get(TOOL_SOURCES_KEY)
        sources = None if stored_sources is None else json.loads(stored_sources.result or "{}")
        names, given = self._own_tool_names(), self._listing_keys()
        want_names: list[str] | None = None
        want: list[str] | None = None
        if sources is not None:  # what it was started with (rows a wrong resume of an
            # older Flowdesk left beside them do not count)
            want = sorted(LISTING_PREFIX + str(n) for n in sources.get("mcp") or ())
            # the names a folder gives are known once it was driven
            want_names = recorded_names if sources.get("folder") is not None else []
        elif listings or recorded_names is not None:  # driven with tools: these are its tools
            want_names, want = recorded_names or [], listings
        other_sources = (
            self.tool_sources is not None
            and sources is not None
            and json.loads(self.tool_sources) != sources
        )
        if (
            (want_names is None or want_names == names)
            and (want is None or want == given)
            and not other_sources
        ):
            return
        had = _tools_in_words(want_names if want_names is not None else [], want or [])
        how = (
            f"flowdesk ask --resume {run_id} with the --tools/--folder and --mcp options it "
            "was started with"
        )
        if sources is not None:  # `flowdesk resume` reconnects what it recorded
            had = _sources_in_words(sources)
            how = f"flowdesk resume {run_id} reconnects them"
        raise AgentToolsChangedError(
            f"agent run {run_id} was started with {had} (recorded when it started) but is "
            f"resumed with {_tools_in_words(names, given)}; nothing was changed and it can "
            f"still be resumed with the same tools ({how})"
        )

    def _listing_keys(self) -> list[str]:
        """The recorded-list keys of this agent's tool sources (its MCP servers), sorted."""
        return sorted(
            {
                source.listing_key
                for tool in self.tools.values()
                if isinstance(source := getattr(tool, "server", None), ToolListing)
            }
        )

    def _own_tool_names(self) -> list[str]:
        """The names of this agent's tools that no :class:`ToolListing` (an MCP
        server, whose list is recorded and compared on its own) provides, sorted."""
        return sorted(
            name
            for name, tool in self.tools.items()
            if not isinstance(getattr(tool, "server", None), ToolListing)
        )

    def _check_listings(self, run_id: str) -> str | None:
        """Record each tool source's list in the run (first drive), or compare
        it with the recorded one; the first difference, or ``None``. The first
        drive of an agent with tools also records their names (see
        :meth:`_refuse_other_tools`)."""
        own = self._own_tool_names()
        if own and self.store.tool_result(run_id, TOOLSET_KEY) is None:
            names = json.dumps(own)
            self.store.update(
                run_id, self.clock.now(), tool=(TOOLSET_KEY, "toolset", "completed", names)
            )
        seen: set[str] = set()
        used = {
            str(call["name"])
            for m in self.store.messages(run_id)
            if m["role"] == "assistant"
            for call in m.get("tool_calls") or ()
        }
        for tool in self.tools.values():
            source = getattr(tool, "server", None)
            if not isinstance(source, ToolListing) or source.listing_key in seen:
                continue
            seen.add(source.listing_key)
            stored = self.store.tool_result(run_id, source.listing_key)
            if stored is None:
                self.store.update(
                    run_id,
                    self.clock.now(),
                    tool=(source.listing_key, source.listing_tool, "completed", source.listing()),
                )
                continue
            problem = source.check_listing(stored.result or "[]", used)
            if problem is not None:
                return problem
        return None  # a server the run recorded and was not given is refused before (resume)

    def _drive_turns(
        self, run_id: str, stream: bool, span: Any
    ) -> Generator[AgentEvent, None, None]:
        problem = self._check_listings(run_id)
        if problem is not None:
            log.warning("agent run %s failed: %s", run_id, problem)
            run = self.store.get(run_id)
            yield self._finish(
                run, "failed", error=problem, error_type=McpToolsChangedError.__name__
            )
            return
        while True:
            run = self._not_canceled(run_id)  # a turn's boundary
            now = self.clock.now()
            if run.expires_at is not None and now >= run.expires_at:
                yield self._finish(run, "expired", error="the run's time-to-live passed")
                return
            if run.deadline_at is not None and now >= run.deadline_at:
                yield self._finish(run, "timeout", error="the run's deadline passed")
                return
            messages = [Message.from_json(m) for m in self.store.messages(run_id)]
            pending = _unanswered_calls(messages)
            if pending:
                for position, call in pending:
                    self._not_canceled(run_id)  # before each tool call
                    if call.name == ASK_USER and self.ask_user:
                        refusal = ask_user_refusal(call.arguments)
                        if refusal is not None:  # malformed: the model is told, no pause
                            bad = Message("tool", refusal, tool_call_id=call.id, name=ASK_USER)
                            self.store.update(
                                run_id, self.clock.now(), owner=self.owner, messages=[bad.to_json()]
                            )
                            continue
                        question = str(call.arguments["question"])
                        self.store.update(
                            run_id,
                            self.clock.now(),
                            owner=self.owner,
                            status="input_required",
                            # its place among the run's calls: the question's id
                            # (agent_wait_id) is new for each question, whatever
                            # call ids the model reuses
                            pending_call={**call.to_json(), "place": position},
                        )
                        yield AgentEvent(
                            "done",
                            response=AgentResponse(run_id, "input_required", question=question),
                        )
                        return
                    request = self._undecided(run_id, call, position)
                    if request is not None:
                        self.store.update(
                            run_id,
                            self.clock.now(),
                            owner=self.owner,
                            status="input_required",
                            pending_call={**call.to_json(), "approval": request.to_json()},
                        )
                        yield AgentEvent(
                            "done",
                            response=AgentResponse(
                                run_id,
                                "input_required",
                                question=request.question(),
                                approval=request,
                            ),
                        )
                        return
                    yield AgentEvent("tool_start", tool=call.name)
                    reused = self._run_tool(run_id, call, position, span)
                    yield AgentEvent("tool_end", tool=call.name, reused=reused)
                continue
            last = messages[-1]
            if last.role == "assistant":  # answered; the crash came before 'done' was saved
                yield self._finish(run, "done", response=last.content)
                return
            if run.turns >= self.max_turns:
                yield self._finish(
                    run,
                    "failed",
                    error=f"no answer after {run.turns} turns",
                    error_type="MaxTurns",
                )
                return
            reply: AssistantReply | None = None
            model_name = str(getattr(self.model, "model", type(self.model).__name__))
            model_span = tracing.start_child_span(
                span,
                f"chat {model_name}",
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": model_name,
                    "flowdesk.run_id": run_id,
                    "flowdesk.turn": run.turns + 1,
                },
            )
            model_error: str | None = "interrupted"
            try:
                if stream:
                    for delta in self._call_streaming(messages):
                        if delta.reply is not None:
                            reply = delta.reply
                        elif delta.text:
                            yield AgentEvent("delta", text=delta.text)
                else:
                    reply = self._call(messages)
                model_error = None
            except RateLimitedError as exc:
                model_error = type(exc).__name__
                yield self._finish(
                    run,
                    "rate_limited",
                    error=str(exc),
                    error_type="RateLimited",
                    retry_at=self.clock.now() + exc.retry_after_s,
                )
                return
            except ProviderError as exc:
                model_error = type(exc).__name__
                yield self._finish(run, "failed", error=str(exc), error_type=type(exc).__name__)
                return
            finally:
                tracing.end_span(model_span, error=model_error)
            assert reply is not None
            self._not_canceled(run_id)  # canceled during the model call: its reply is dropped
            self.store.update(
                run_id,
                self.clock.now(),
                owner=self.owner,
                messages=[reply.message().to_json()],
                turns=run.turns + 1,
            )

    def _not_canceled(self, run_id: str) -> AgentRun:
        """The run as stored now; raises :class:`_Canceled` when another
        process (``flowdesk cancel``) canceled it meanwhile, so this process
        makes no further model or tool call and writes nothing more, and
        :class:`~desktop_app.agent.drives.DriveStopped` when the app that
        drives it quits (:func:`~desktop_app.agent.drives.stop_all`)."""
        if drives.stop_asked():
            raise drives.DriveStopped(run_id)
        run = self.store.get(run_id)
        if run.status == "canceled":
            raise _Canceled(run.error)
        return run

    def _call(self, messages: list[Message]) -> AssistantReply:
        reply: AssistantReply = self._with_retries(
            lambda: self.model.complete(messages, self._schemas())
        )
        return reply

    def _call_streaming(self, messages: list[Message]) -> Iterator[Any]:
        # a stream is retried only before its first delta arrived
        deltas = self._with_retries(
            lambda: _first_and_rest(self.model.stream(messages, self._schemas()))
        )
        yield from deltas

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            try:
                return call()
            except RateLimitedError:
                raise
            except ProviderError as exc:
                attempt += 1
                if not exc.retryable or attempt > self.retries:
                    raise
                log.debug("agent %s: retryable provider error %s", self.name, type(exc).__name__)
                self.clock.sleep(self.backoff.delay(attempt))

    def _run_tool(self, run_id: str, call: ToolCall, position: int, parent: Any = None) -> bool:
        """Run (or reuse) one tool call, the run's ``position``-th (1-based);
        store its result and tool message together, inside an
        ``execute_tool <name>`` span under ``parent``."""
        span = tracing.start_child_span(
            parent,
            f"execute_tool {call.name}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "flowdesk.run_id": run_id,
            },
        )
        reused = False
        try:
            # current while it runs: the spans its tool makes (the MCP SDK's
            # request span, which also carries it to the server) are its children
            with tracing.current(span):
                reused = self._run_tool_once(run_id, call, position)
        finally:
            tracing.end_span(span, attributes={"flowdesk.tool.reused": reused})
        return reused

    def _journal_key(self, call: ToolCall, position: int) -> str:
        tool = self.tools.get(call.name)
        # a read-only call is reused only at its own place (a resume), never by a later call
        return f"{call.key}#{position}" if tool is not None and tool.read_only else call.key

    def _undecided(self, run_id: str, call: ToolCall, position: int) -> ApprovalRequest | None:
        """The approval ``call`` (the run's ``position``-th) waits for: its tool
        requires approval, the call would run (no saved result answers it, it
        was not started before a crash) and nobody decided on this very call
        yet; else ``None``."""
        tool = self.tools.get(call.name)
        if tool is None or not requires_approval(tool) or INVALID_ARGUMENTS in call.arguments:
            return None  # an unknown tool or broken arguments: answered, never made
        if self.store.tool_result(run_id, self._journal_key(call, position)) is not None:
            return None  # answered from the journal, or started once: never run again
        request = ApprovalRequest.of(call.name, call.arguments, position)
        journal = ApprovalJournal(self.store, run_id, self.clock, self.owner)
        return request if journal.decision(request) is None else None

    def _run_tool_once(self, run_id: str, call: ToolCall, position: int) -> bool:
        now = self.clock.now()
        tool = self.tools.get(call.name)
        key = self._journal_key(call, position)
        stored = self.store.tool_result(run_id, key)
        if stored is not None and stored.status == "completed":
            self.store.mark_reused(run_id, key)
            msg = Message(
                "tool", stored.result or "", tool_call_id=call.id, name=call.name, reused=True
            )
            self.store.update(run_id, now, owner=self.owner, messages=[msg.to_json()])
            return True
        if INVALID_ARGUMENTS in call.arguments:  # no JSON object: no call, and no question
            content = invalid_arguments_answer(call.name, call.arguments[INVALID_ARGUMENTS])
            msg = Message("tool", content, tool_call_id=call.id, name=call.name)
            self.store.update(run_id, now, owner=self.owner, messages=[msg.to_json()])
            return False
        approval = tool is not None and requires_approval(tool)
        if approval and stored is None:
            request = ApprovalRequest.of(call.name, call.arguments, position)
            decided = ApprovalJournal(self.store, run_id, self.clock, self.owner).decision(request)
            if decided is not True:  # declined (None never reaches here: the run pauses)
                msg = Message(
                    "tool", declined_result(call.name), tool_call_id=call.id, name=call.name
                )
                self.store.update(run_id, now, owner=self.owner, messages=[msg.to_json()])
                return False
        ran = False  # whether this process sent the call (and so had it in flight)
        if tool is None:
            content = json.dumps({"error": f"unknown tool {call.name!r}"})
        elif (
            stored is not None
            and stored.status == "in_progress"
            and (tool.at_most_once or approval)
        ):
            # started before a crash, result never saved: it may have taken effect
            content = outcome_unknown(
                f"the call to {call.name} was interrupted before its result was "
                "saved; it was not repeated, so whether it took effect is unknown"
            )
        else:
            self.store.update(
                run_id, now, owner=self.owner, tool=(key, call.name, "in_progress", None)
            )
            ran = True
            try:
                content = tool.call(call.arguments)
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: the caller says what was cut
                exc.tool_in_flight = (  # type: ignore[attr-defined]
                    call.name,
                    bool(tool.at_most_once or approval),
                )
                raise
            except McpOutcomeUnknownError as exc:
                log.warning("agent run %s: %s", run_id, exc)
                content = (
                    outcome_unknown(
                        f"{exc}; the call was sent and may have taken effect; it is not "
                        "repeated, so whether it took effect is unknown"
                    )
                    if tool.at_most_once
                    else json.dumps({"error": f"{type(exc).__name__}: {exc}"})
                )
            except Exception as exc:  # a tool error is an answer the model can read
                if isinstance(exc, McpError):  # our own words: no arguments, no results
                    log.warning("agent run %s: %s", run_id, exc)
                content = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        msg = Message("tool", content, tool_call_id=call.id, name=call.name)
        messages = [msg.to_json()]
        row = (key, call.name, "completed", content)
        try:
            self.store.update(
                run_id, self.clock.now(), owner=self.owner, messages=messages, tool=row
            )
        except AgentRunCanceledError:
            if not ran:
                raise
            # the cancel landed while the call ran: what it did is recorded (the run is
            # canceled, so no other process executes it), and nothing after it runs
            self.store.update(run_id, self.clock.now(), messages=messages, tool=row)
            log.warning(
                "agent run %s: canceled while the call to %s was in flight; it ran, nothing "
                "after it runs", run_id, call.name,
            )  # fmt: skip
            raise _Canceled(self.store.get(run_id).error, in_flight=call.name) from None
        return False


def _tools_in_words(names: Sequence[str], listings: Sequence[str]) -> str:
    """``the tools lookup, other and those of MCP server notes``, ``none``."""
    servers = [k.removeprefix(LISTING_PREFIX) for k in listings]
    parts = [f"the tools {', '.join(names)}"] if names else []
    if servers:
        of = f"MCP server{'s' if len(servers) > 1 else ''} {', '.join(servers)}"
        parts.append(f"{'those' if names else 'the tools'} of {of}")
    return " and ".join(parts) or "none"


def _sources_in_words(sources: dict[str, Any]) -> str:
    """Recorded tool sources (``{"folder", "mcp"}``) in words: ``the file
    tools over /x and the tools of MCP server notes``, ``no tools``."""
    parts = []
    if sources.get("folder") is not None:
        parts.append(f"the file tools over {sources['folder']}")
    servers = [str(n) for n in sources.get("mcp") or ()]
    if servers:
        parts.append(
            f"the tools of MCP server{'s' if len(servers) > 1 else ''} {', '.join(servers)}"
        )
    return " and ".join(parts) or "no tools"


def pending_question(run: AgentRun) -> str | None:
    """The question an ``input_required`` agent run asks (its pending
    ``ask_user`` call, or :meth:`ApprovalRequest.question` of a call waiting
    for approval), or ``None`` when it recorded none (no pending call, or
    one without a question: a row edited by hand)."""
    request = pending_approval(run.pending_call)
    if request is not None:
        return request.question()
    question = (run.pending_call or {}).get("arguments", {}).get("question")
    return None if question is None else str(question)


def _first_and_rest(it: Iterator[Any]) -> Iterator[Any]:
    """Pull the first item now (so errors surface inside the retry), then the rest."""
    first = next(it)

    def rest() -> Iterator[Any]:
        yield first
        yield from it

    return rest()


def _unanswered_calls(messages: list[Message]) -> list[tuple[int, ToolCall]]:
    """Tool calls of the last assistant message that have no tool answer yet,
    each with its 1-based number among all tool calls of the conversation
    (the same on every replay of the same messages)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant":
            answered = {x.tool_call_id for x in messages[i + 1 :] if x.role == "tool"}
            before = sum(len(x.tool_calls) for x in messages[:i])
            return [
                (before + n, c) for n, c in enumerate(m.tool_calls, start=1) if c.id not in answered
            ]
    return []


def _drain(events: Iterator[AgentEvent]) -> AgentResponse:
    response: AgentResponse | None = None
    for event in events:
        if event.kind == "done":
            response = event.response
    assert response is not None
    return response


def agent_step(
    agent: Agent, message: Callable[[Any], str], into: str
) -> Callable[[Any, StepContext], dict[str, Any]]:
    """A flow step that dispatches ``agent`` and stores its answer in ``into``.

    The child run's id comes from the parent's journal
    (:meth:`StepContext.child_run_id`, first ``"<run_id>:<step_id>"``), so
    every re-execution of the step, after a crash, in a replay, a fork or a
    fork onto a new flow version, reattaches to the child it started: never
    a second agent run or model call. Canceling the parent cancels the child.

    Raises (inside the step): AgentError when the child does not finish ``done``.
    """

    _CHILD_STORES.add(agent.store)

    def step(state: Any, ctx: StepContext) -> dict[str, Any]:
        res = agent.ask(
            message(state),
            run_id=ctx.child_run_id("agent"),
            parent_run_id=ctx.run_id,
            context=ctx.context,
        )
        if res.status != "done":
            raise AgentError(
                f"agent {agent.name} run {res.run_id} ended {res.status}: "
                f"{res.error or res.question}"
            )
        return {into: res.text}

    return step


#: agent stores that agent steps were built on; a canceled parent's agent
#: children are looked up in them
_CHILD_STORES: weakref.WeakSet[AgentLog] = weakref.WeakSet()


def _cancel_agent_child(store: CheckpointStore, child_id: str, reason: str, now: float) -> None:
    """Cancel the agent run ``child_id`` of a canceled flow run, if still live.

    Raises:
        RunStateError: no agent store is open in this process, so the child
            cannot be looked up (cancel it where its agent runs).
    """
    stores = list(_CHILD_STORES)
    if not stores:
        raise RunStateError(
            f"agent run {child_id} was not canceled: no agent step is built in this "
            "process; cancel it with Agent.cancel where its agent runs"
        )
    for astore in stores:
        try:
            run = astore.get(child_id)
        except (CheckpointNotFoundError, StoreError):
            continue  # not in this (open) database, or journaled but never created
        if run.status not in AGENT_ENDED:  # a rate-limited child would go on later
            astore.update(child_id, now, status="canceled", error=reason)
        return


register_child_kind("agent", _cancel_agent_child)
