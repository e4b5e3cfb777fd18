"""LangGraph on Flowdesk (the ``flowdesk[langgraph]`` extra).

:class:`FlowdeskSaver` is a LangGraph checkpointer over Flowdesk's store;
:mod:`.threads` reads its threads for the CLI and the app without importing
LangGraph. Only :mod:`.saver` imports LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from desktop_app.integrations.langgraph.saver import FlowdeskSaver

__all__ = ["FlowdeskSaver"]


def __getattr__(name: str) -> Any:
    if name == "FlowdeskSaver":
        from desktop_app.integrations.langgraph.saver import FlowdeskSaver

        return FlowdeskSaver
    raise AttributeError(name)
