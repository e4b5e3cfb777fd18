"""The Flowdesk durability capability for Pydantic AI, over an agent run's journal.

Built, as Pydantic AI's guide for building a new durable-execution engine
asks (shipped in its source beside ``pydantic_ai.durable_exec``), on the
public ``pydantic_ai.durable_exec`` surface: a
``BaseDurabilityCapability`` subclass with a declared
``DurabilityEngineSpec`` and a ``CallableOperationBackend`` (here the journal
tier, ``JournalCallableOperationBackend``) whose ``execute`` runs one durable
unit. Flowdesk is a JSON-journal engine (as Restate or Absurd), so it uses
``JSON_CODEC``: every unit's result is reduced to JSON before it is stored.

A unit is one model request, one tool call (function, MCP or dynamic
toolset), or one MCP discovery (``get_tools``, ``get_instructions``). Each is
identified by its operation name (Pydantic AI's stable journal names,
``<agent>__model.request``, ``<agent>__function_toolset__<id>.call_tool:<tool>``,
``<agent>__mcp_server__<id>.call_tool``...) and its 1-based number among the
run's units of that name, as DBOS and Prefect identify steps by sequence:
``pydantic_ai/<name>#<n>`` in the run's tool journal
(:meth:`~desktop_app.store.protocol.AgentLog.tool_result`). When the run is
driven again (a resume after a crash, in any process), Pydantic AI runs the
agent's code again from the start and every unit already journaled returns
its stored result instead of running: no completed model request is sent
again and no completed tool call runs again. A unit that started but whose
result was never saved runs again (at least once, as a Temporal activity or
a DBOS step), except a call of a tool that requires approval: the person
approved one call, so it is made at most once and the model is told its
outcome is unknown (as :mod:`desktop_app.agent.approvals` does for
Flowdesk's own tools). Tool calls run one at a time inside a run
(``sequential_tools_in_durable_context``), so the numbering is the same on
every replay.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    conversation_id_from_run_id,
)

from desktop_app.agent.messages import (
    Message,
    ToolCall,
    canonical_json,
    is_outcome_unknown,
    outcome_unknown,
)
from desktop_app.agent.tools import PYDANTIC_AI_PREFIX
from desktop_app.errors import AgentError, AgentRunCanceledError
from desktop_app.flow.clock import Clock
from desktop_app.store.protocol import AgentLog

#: how the tool-journal key of a Pydantic AI unit starts (no tool name of
#: Flowdesk's own agent contains "/", so the keys never collide)
KEY_PREFIX = PYDANTIC_AI_PREFIX

log = logging.getLogger(__name__)


class JournalMismatchError(AgentError):
    """A resumed run asked for another tool call than the one its journal
    recorded at that place: the agent's code, tools or prompt changed since
    the run started (or it did not make a call the journal recorded: a
    tool renamed or removed). Nothing was run; the run is ``failed`` and
    resumes from its journal with the agent it was started with
    (:data:`MISMATCH_ADVICE`)."""


#: what a :class:`JournalMismatchError` tells to do (``flowdesk cancel``
#: refuses a failed run, so it is not offered)
MISMATCH_ADVICE = (
    "the run is failed; resume it with the agent (code, tools, prompt) it was started with, "
    "which goes on from its journal"
)


@dataclass
class RunJournal:
    """The journal of the one run being driven in this task.

    Attributes:
        store: the agent-run store.
        run_id: the agent run.
        owner: this process's lease owner (every write checks it still holds it).
        clock: UTC epoch seconds.
        created_at: when the run was created (UTC epoch s): the start of its ``timeout=``.
        turns: model requests the run made so far (counted across processes).
        executed: units this drive ran; ``replayed``: units it answered from the journal.
        segment: which Pydantic AI run of this drive is going on (1-based; a
            run continued after tool approvals is a new Pydantic AI run).
    """

    store: AgentLog
    run_id: str
    owner: str
    clock: Clock
    created_at: float
    turns: int = 0
    executed: int = 0
    replayed: int = 0
    segment: int = 0
    _numbers: dict[str, int] = field(default_factory=dict)
    #: the units the run's journal held when this drive reached its first
    #: one (key -> what it was: a tool's name, a model request), and the
    #: keys this drive has reached since
    _recorded: dict[str, str] | None = None
    _reached: set[str] = field(default_factory=set)

    async def unit(
        self,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
    ) -> object:
        """Answer one durable unit from the journal, or run ``body`` and save
        its result (with the conversation message it adds) in one transaction.

        A run canceled by another process (``flowdesk cancel``) is seen
        before the unit runs (a read) and by every write here (refused in
        its transaction), so no model request or tool call starts after the
        cancel is committed. A model reply that arrives after it is dropped;
        a tool call in flight when it lands runs to its end and its result
        is recorded (with no owner: the run is canceled, no process executes
        it), as Flowdesk's own agent runs do.

        Raises:
            JournalMismatchError: a tool call at this place differs from the recorded one.
            LeaseLostError: another process took the run over (nothing written).
            AgentRunCanceledError: the run was canceled (``in_flight``: the
                tool whose call ran when the cancel landed, else ``None``).
        """
        number = self._numbers.get(name, 0) + 1
        self._numbers[name] = number
        key = f"{KEY_PREFIX}{name}#{number}"
        call = _tool_call(operation_id, cache_key)
        label = call.name if call is not None else _label(operation_id, name)
        if self._recorded is None:
            self._recorded = {
                r.tool_key: r.tool
                for r in self.store.tool_results(self.run_id)
                if r.tool_key.startswith(KEY_PREFIX)
            }
        self._reached.add(key)
        stored = self.store.tool_result(self.run_id, key)
        done = stored is not None and stored.status == "completed"
        if stored is not None and done and is_outcome_unknown(stored.result):
            self.store.mark_reused(self.run_id, key)  # decided before: told the same again
            self.replayed += 1
            return {"result": stored.result, "kind": "tool_return"}
        if stored is not None and done:
            record = json.loads(stored.result or "{}")
            given = None if call is None else canonical_json(call.arguments)
            if given is not None and record.get("input") != given:
                raise JournalMismatchError(
                    f"agent run {self.run_id} recorded call {number} of {label} with the input "
                    f"{record.get('input')} but now calls it with {given}; {MISMATCH_ADVICE}"
                )
            self.store.mark_reused(self.run_id, key)
            self.replayed += 1
            return record.get("output")
        if call is not None and stored is not None and _needs_approval(cache_key):
            # an approved call that started but never saved its result may have
            # taken effect: the person approved one call, so it is not made again;
            # recorded as Flowdesk's own runtime records it, so `show` and the
            # app say "outcome unknown" instead of a call left in progress
            content = outcome_unknown(
                f"the call to {call.name} was interrupted before its result was saved; it "
                "was not repeated, so whether it took effect is unknown"
            )
            told = {"result": content, "kind": "tool_return"}
            self.store.update(
                self.run_id,
                self.clock.now(),
                owner=self.owner,
                messages=[_tool_message(call, told).to_json()],
                tool=(key, label, "completed", content),
            )
            return told
        if isinstance(operation_id, ModelRequestId):
            self._check_nothing_skipped(label)
        if self.store.get(self.run_id).status == "canceled":  # `flowdesk cancel` meanwhile
            raise AgentRunCanceledError(self.run_id)  # no model request or tool call after it
        if call is not None:  # counts the attempt; a crash leaves it in_progress
            self.store.update(
                self.run_id,
                self.clock.now(),
                owner=self.owner,
                tool=(key, label, "in_progress", None),
            )
        if call is None:
            output, stopping = await body(), False
        else:
            output, stopping = await _to_its_end(body(), self.run_id, label)
        record = {"output": output}
        if call is not None:
            record["input"] = canonical_json(call.arguments)
        fields: dict[str, Any] = {}
        messages: list[dict[str, Any]] = []
        if isinstance(operation_id, ModelRequestId):
            self.turns += 1
            fields["turns"] = self.turns
            messages.append(_assistant_message(output).to_json())
        elif call is not None:
            messages.append(_tool_message(call, output).to_json())
        row = (key, label, "completed", json.dumps(record))
        try:
            self.store.update(
                self.run_id,
                self.clock.now(),
                owner=self.owner,
                messages=messages,
                tool=row,
                **fields,
            )
        except AgentRunCanceledError:
            if call is None:
                raise  # a model reply that came after the cancel is dropped
            # the cancel landed while the call ran: what it did is recorded (the run is
            # canceled, so no other process executes it), and nothing after it runs
            self.store.update(self.run_id, self.clock.now(), messages=messages, tool=row)
            raise AgentRunCanceledError(self.run_id, in_flight=label) from None
        self.executed += 1
        if stopping:  # its result is saved: now the cancel that came meanwhile goes on
            raise asyncio.CancelledError
        return output

    def _check_nothing_skipped(self, label: str) -> None:
        """Before a new model request (not answered from the journal): a
        faithful resume has reached every unit the journal held by then
        (each model request waits for the tool calls of the reply before
        it). A recorded tool call it did not reach means the agent took
        another path: a tool renamed or removed (Pydantic AI answers the
        model's call of an unknown tool with a retry prompt, and the run
        would go on with another tool, the recorded call's effect made
        already or its outcome unknown).

        Raises:
            JournalMismatchError: recorded units this drive did not reach;
                nothing of the new request was sent.
        """
        recorded = self._recorded or {}
        skipped = sorted(k for k in recorded if k not in self._reached)
        if not skipped:
            return
        names = ", ".join(dict.fromkeys(recorded[k] for k in skipped))
        raise JournalMismatchError(
            f"agent run {self.run_id} recorded a call to {names} that the resumed agent did "
            f"not make before its next {label}: its code, tools or prompt changed since the run "
            "started, and going on would mix two runs (nothing more was sent or called); "
            f"{MISMATCH_ADVICE}"
        )


async def _to_its_end(call: Awaitable[object], run_id: str, label: str) -> tuple[object, bool]:
    """``(await call, False)``; but when the task awaiting it is canceled
    while the call runs (Ctrl-C: ``asyncio.run`` cancels its main task; a
    caller's timeout), the call is let run to its end first, so that its
    result is saved and a resume does not make it again: ``(its result,
    True)``, and the caller raises ``CancelledError`` once it saved it. A
    tool runs in a thread or as a coroutine; neither could be stopped
    half-way without leaving its outcome unknown. A second Ctrl-C (which
    ``asyncio.run`` raises as ``KeyboardInterrupt`` at once) stops without
    saving it (a tool's thread still ends first: the interpreter joins it):
    the call is then made again on resume (at least once).

    Raises:
        CancelledError: canceled, and the call itself was canceled or
            raised meanwhile (nothing to save).
        whatever the call raises, when nothing canceled the caller.
    """
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task), False
    except asyncio.CancelledError:
        if task.done():  # it ended as the cancel came: its result, if any, is saved
            if task.cancelled() or task.exception() is not None:
                raise
            return task.result(), True
        log.warning(
            "stopping agent run %s once its call to %s in flight ends (its result is then "
            "saved and not made again on resume); Ctrl-C again stops without saving it (the call "
            "is then made again on resume)",
            run_id,
            label,
        )
    try:
        return await task, True
    except Exception:
        raise asyncio.CancelledError from None  # nothing to save: the cancel goes on


#: the journal of the run this task drives (``None`` outside a Flowdesk run:
#: there the capability is transparent, as DBOS's outside a workflow)
CURRENT: ContextVar[RunJournal | None] = ContextVar("flowdesk_pydantic_ai_run", default=None)


class FlowdeskOperationBackend(JournalCallableOperationBackend[None]):
    """Runs each durable unit through the current run's :class:`RunJournal`."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        journal = CURRENT.get()
        if journal is None:  # only reached inside a run (in_durable_context)
            return await body()
        return await journal.unit(operation_id, name, body, cache_key)


@dataclass(init=False, kw_only=True)
class FlowdeskDurability(BaseDurabilityCapability[Any]):
    """Capability that makes a Pydantic AI agent's runs durable in Flowdesk's store.

    :class:`~desktop_app.integrations.pydantic_ai.agent.FlowdeskAgent` adds
    it to each run it drives; outside such a run it changes nothing. The
    agent's model, name and toolsets are discovered by Pydantic AI
    (``BaseDurabilityCapability.for_agent``); every leaf toolset needs an
    ``id`` (a function toolset of the agent's own tools has one), as with
    Temporal, DBOS and Prefect.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="Flowdesk",
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",  # one MCP session per run, opened inside a unit
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        sequential_tools_in_durable_context=True,
        # a toolset passed to run() would bypass the journal: refused inside a run
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
    )

    @property
    def in_durable_context(self) -> bool:
        return CURRENT.get() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        return FlowdeskOperationBackend(
            agent_name=self.name,
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )

    def get_default_run_id(self) -> str | None:
        """The Flowdesk run id (``<id>:<n>`` for the n-th Pydantic AI run of a
        drive that went on after approvals: Pydantic AI wants one id per run)."""
        journal = CURRENT.get()
        if journal is None:
            return None
        return journal.run_id if journal.segment <= 1 else f"{journal.run_id}:{journal.segment}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        journal = CURRENT.get()
        if journal is None:
            return None
        return datetime.fromtimestamp(journal.created_at, UTC)


def _tool_call(operation_id: DurableOperationId, cache_key: tuple[object, ...]) -> ToolCall | None:
    """The tool call a ``call_tool`` unit makes (name, arguments and the
    model's call id, from the unit's cache identity ``(name, args, ctx, tool)``)."""
    if not isinstance(operation_id, ToolsetCallToolId) or len(cache_key) < 3:
        return None
    name, args, ctx = cache_key[0], cache_key[1], cache_key[2]
    call_id = getattr(ctx, "tool_call_id", None) or ""
    return ToolCall(str(call_id), str(name), dict(args) if isinstance(args, dict) else {})


def _needs_approval(cache_key: tuple[object, ...]) -> bool:
    """Whether a ``call_tool`` unit calls a tool that requires approval (its
    definition's kind is ``unapproved``)."""
    tool = cache_key[3] if len(cache_key) > 3 else None
    return getattr(getattr(tool, "tool_def", None), "kind", None) == "unapproved"


def _label(operation_id: DurableOperationId, name: str) -> str:
    if isinstance(operation_id, ModelRequestId):
        return "model.request_stream" if operation_id.streaming else "model.request"
    return name.rsplit("__", 1)[-1]  # "notes.get_tools", "event_stream_handler"


def _assistant_message(output: object) -> Message:
    """The conversation's assistant message for a journaled ``ModelResponse``
    (its JSON form): text parts joined, tool-call parts as tool calls."""
    parts = output.get("parts", []) if isinstance(output, dict) else []
    text: list[str] = []
    calls: list[ToolCall] = []
    for part in parts:
        kind = part.get("part_kind")
        if kind == "text":
            text.append(str(part.get("content") or ""))
        elif kind in ("tool-call", "builtin-tool-call", "native-tool-call"):
            args = part.get("args")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args else {}
                except ValueError:
                    args = {"_raw": args}
            calls.append(
                ToolCall(
                    str(part.get("tool_call_id") or ""),
                    str(part.get("tool_name") or ""),
                    args if isinstance(args, dict) else {"_value": args},
                )
            )
    return Message("assistant", "".join(text), tuple(calls))


def _tool_message(call: ToolCall, output: object) -> Message:
    """The conversation's tool message for a journaled tool result."""
    result: object = output
    if isinstance(output, dict) and output.get("kind") == "tool_return":
        result = output.get("result")
    content = result if isinstance(result, str) else json.dumps(result, default=str)
    return Message("tool", content, tool_call_id=call.id, name=call.name)
