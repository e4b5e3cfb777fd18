"""Chat messages and tool calls (the chat-completions shapes), as JSON-able data."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators: the identity of a tool input."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: the one argument of a tool call whose arguments the model wrote as no
#: JSON object (their text, as sent): the call is not made, and the model is
#: told (:func:`invalid_arguments_answer`) instead of the run failing
INVALID_ARGUMENTS = "__flowdesk_invalid_arguments__"


def invalid_arguments_answer(tool: str, raw: Any) -> str:
    """What the model is told of a call to ``tool`` whose arguments were not
    a JSON object (``raw``: their text): an error it can read and correct."""
    shown = str(raw)[:200]
    return json.dumps(
        {
            "error": f"the arguments of this call to {tool} are not a JSON object ({shown!r}); "
            "it was not made: call it again with its arguments as one JSON object"
        },
        ensure_ascii=False,
    )


def outcome_unknown(why: str) -> str:
    """The tool answer for a call that may or may not have taken effect (sent,
    then the process or the server died, or no answer came in time): JSON
    ``{"error": why, "outcome": "unknown"}``. The call is not sent again; the
    model reads ``why``, people see "outcome unknown" (:func:`is_outcome_unknown`)."""
    return json.dumps({"error": why, "outcome": "unknown"}, ensure_ascii=False)


def call_status(status: str, result: str | None, cut_off: bool) -> str:
    """A journaled tool call's status as ``show`` and the app say it:
    ``unknown`` for an :func:`outcome_unknown` result, ``cut off`` for a
    call still ``in_progress`` of a run no process executes (``cut_off``:
    it shows ``interrupted``; its resume records the outcome unknown), else
    ``status``."""
    if is_outcome_unknown(result):
        return "unknown"
    return "cut off" if cut_off and status == "in_progress" else status


def is_outcome_unknown(content: str | None) -> bool:
    """Whether a tool answer (a tool message's content, a journaled result)
    is one of :func:`outcome_unknown`'s."""
    if not content or not content.startswith("{"):
        return False
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return (
        isinstance(data, dict)
        and set(data) == {"error", "outcome"}
        and (data["outcome"] == "unknown")
    )


def unknown_outcome_tools(results: Iterable[Any]) -> list[str]:
    """The tools of a run's journaled calls (``ToolResult`` rows, as
    ``AgentLog.tool_results`` returns them) whose outcome is unknown: sent,
    then interrupted before their result was saved, and not repeated
    (:func:`is_outcome_unknown` of their result). What ``flowdesk show``
    lists as ``unknown``, the app's launch report and ``resume`` count."""
    return [str(r.tool) for r in results if is_outcome_unknown(r.result)]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for: ``id`` (from the model), ``name``, ``arguments``."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``"<name>:<canonical JSON input>"``: identical calls share one result."""
        return f"{self.name}:{canonical_json(self.arguments)}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(str(data["id"]), str(data["name"]), dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class Message:
    """One message of a conversation.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: text (may be empty for an assistant message with tool calls).
        tool_calls: for assistant messages.
        tool_call_id / name: for tool messages: which call this answers.
        reused: for tool messages: the result came from an earlier identical call.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reused: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.reused:
            out["reused"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=tuple(ToolCall.from_json(c) for c in data.get("tool_calls", [])),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            reused=bool(data.get("reused", False)),
        )


@dataclass(frozen=True)
class AssistantReply:
    """What a model returns for one turn: text and/or tool calls."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def message(self) -> Message:
        return Message("assistant", self.content, self.tool_calls)


@dataclass(frozen=True)
class StreamDelta:
    """A piece of a streamed turn: text as it arrives; the last one carries the
    whole assembled reply in ``reply``."""

    text: str = ""
    reply: AssistantReply | None = None
