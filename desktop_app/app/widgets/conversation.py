"""An agent run's conversation as distinct blocks: assistant text rendered
as Markdown, what a person typed (user and system text) shown literally as
typed (``__init__.py`` stays ``__init__.py``), tool calls, tool results and
reused results (a result journaled earlier and not called again) each with
their own look; a call whose outcome is unknown (sent, then no answer) says
so in its title.

Every text shown comes from a model or a tool: its control characters are
shown as escapes (:func:`desktop_app.textsafe.visible_controls`) before Rich
or the Markdown parser sees them, so none reaches the terminal raw."""

from __future__ import annotations

from typing import Any

from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Markdown, Static

from desktop_app.agent.messages import canonical_json, is_outcome_unknown
from desktop_app.app.format import json_text
from desktop_app.textsafe import visible_controls


def block_kind(message: dict[str, Any]) -> str:
    """``user``, ``assistant``, ``system``, ``tool-result`` or ``reused-result``."""
    role = str(message.get("role", "?"))
    if role == "tool":
        return "reused-result" if message.get("reused") else "tool-result"
    return role if role in ("user", "assistant", "system") else "other"


def message_blocks(index: int, message: dict[str, Any], limit: int) -> list[Widget]:
    """The widgets of one message: a title, its content, one block per tool call."""
    kind = block_kind(message)
    role = str(message.get("role", "?"))
    title = f"#{index} {visible_controls(role)}"
    if role == "tool":
        title += f" result {visible_controls(str(message.get('name') or '?'))}"
        if message.get("reused"):
            title += " (reused: not called again)"
        if is_outcome_unknown(message.get("content")):
            title += " (outcome unknown: not repeated)"
        if message.get("tool_call_id"):
            title += f" [call {visible_controls(str(message['tool_call_id']))}]"
    content = visible_controls(json_text(message.get("content")))
    if len(content) > limit:
        content = content[:limit] + "…"
    blocks: list[Widget] = [Static(title, classes="block-title", markup=False)]
    if content:
        if kind == "assistant":
            blocks.append(Markdown(content, classes="block-text"))
        else:
            blocks.append(Static(content, classes="block-text", markup=False))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            arguments = canonical_json(call.get("arguments") or {})
            text = f"→ tool call {call.get('name', '?')} {arguments} [id {call.get('id', '?')}]"
            blocks.append(Static(visible_controls(text), classes="tool-call", markup=False))
    return [Vertical(*blocks, classes=f"block {kind}")]


#: messages shown after a run's first one (its question); those between are counted
SHOWN_LAST = 100


class ConversationView(Vertical):
    """The messages of one agent run, as blocks (see the module docstring)."""

    DEFAULT_CSS = """
    ConversationView {
        height: auto;
    }
    ConversationView .block {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: thick $primary;
    }
    ConversationView .block.user {
        border-left: thick $accent;
    }
    ConversationView .block.tool-result {
        border-left: thick $success;
    }
    ConversationView .block.reused-result {
        border-left: thick $secondary;
        color: $text-muted;
    }
    ConversationView .block-title {
        text-style: bold;
    }
    ConversationView .tool-call {
        color: $warning;
    }
    ConversationView Markdown {
        margin: 0;
        padding: 0;
    }
    """

    async def show(self, messages: list[dict[str, Any]], limit: int) -> None:
        """Replace the blocks with ``messages`` (content cut at ``limit``
        characters): the first (the question) and the last
        :data:`SHOWN_LAST`, with a line saying how many between them are not
        shown (a run of hundreds of turns mounted thousands of widgets, and
        the app stopped answering keys for minutes)."""
        await self.remove_children()
        widgets: list[Widget] = []
        skipped = max(0, len(messages) - 1 - SHOWN_LAST)
        for i, message in enumerate(messages, 1):
            if 1 < i <= 1 + skipped:
                if i == 2:
                    widgets.append(
                        Static(
                            f"… {skipped:,} messages (#2 to #{1 + skipped:,}) not shown here: "
                            f"the app shows the first and the last {SHOWN_LAST:,}",
                            classes="skipped",
                            markup=False,
                        )
                    )
                continue
            widgets.extend(message_blocks(i, message, limit))
        await self.mount_all(widgets)

    @property
    def kinds(self) -> list[str]:
        """The kind of each block shown, in order (for tests)."""
        return [next(c for c in b.classes if c != "block") for b in self.query(".block").results()]
