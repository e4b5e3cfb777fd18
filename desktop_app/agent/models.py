"""The :class:`ChatModel` protocol and the deterministic :class:`ScriptedModel`."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from desktop_app.agent.messages import AssistantReply, Message, StreamDelta, ToolCall


@runtime_checkable
class ChatModel(Protocol):
    """Messages and tool schemas in, one assistant turn out.

    ``tools`` are OpenAI-style function schemas
    (``{"type": "function", "function": {"name", "description", "parameters"}}``).
    Errors are :class:`~desktop_app.errors.ProviderError` subclasses.
    """

    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> AssistantReply: ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> Iterator[StreamDelta]:
        """Yield text deltas; the last delta carries the assembled reply."""


class ScriptedModel:
    """A deterministic model driven by a script of turns (tests, offline demo).

    Each call returns the next scripted :class:`AssistantReply` (or raises the
    next scripted exception). ``calls`` counts calls, ``seen`` keeps the
    messages each call received.

    Args:
        turns: replies (or exceptions) in order; a ``str`` is a plain text reply,
            a ``dict`` ``{"tool": name, "args": {...}}`` (or a list of them) is a
            turn of tool calls.
    """

    def __init__(self, turns: Sequence[Any]) -> None:
        self.turns = list(turns)
        self.calls = 0
        self.seen: list[list[Message]] = []
        self._lock = threading.Lock()

    @staticmethod
    def _reply(turn: Any, index: int) -> AssistantReply:
        if isinstance(turn, AssistantReply):
            return turn
        if isinstance(turn, str):
            return AssistantReply(turn)
        calls = turn if isinstance(turn, list) else [turn]
        return AssistantReply(
            "",
            tuple(
                ToolCall(c.get("id", f"call_{index}_{i}"), c["tool"], dict(c.get("args", {})))
                for i, c in enumerate(calls)
            ),
        )

    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> AssistantReply:
        with self._lock:
            index = self.calls
            self.calls += 1
            self.seen.append(list(messages))
        if index >= len(self.turns):
            raise RuntimeError(f"ScriptedModel: no scripted turn {index + 1}")
        turn = self.turns[index]
        if isinstance(turn, BaseException):
            raise turn
        return self._reply(turn, index)

    def stream(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> Iterator[StreamDelta]:
        reply = self.complete(messages, tools)
        words = reply.content.split(" ")
        for i, word in enumerate(words):
            if word:
                yield StreamDelta(word if i == 0 else " " + word)
        yield StreamDelta("", reply)
