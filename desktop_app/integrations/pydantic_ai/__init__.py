"""Durable Pydantic AI agents on Flowdesk (the ``flowdesk[pydantic-ai]`` extra).

Wrap an existing :class:`pydantic_ai.Agent` in :class:`FlowdeskAgent`: each
model request and each tool call (function tools and MCP toolsets) of its
runs is a journaled step of a Flowdesk agent run, in the same store (SQLite
or PostgreSQL) and the same journal as Flowdesk's own agent runs. The
integration is built, as Pydantic AI's Temporal, DBOS and Prefect
integrations are, on its public durable-execution interface
(``pydantic_ai.durable_exec``): :class:`FlowdeskDurability` is a
``BaseDurabilityCapability`` whose operation backend is the run's journal.

Only this package imports ``pydantic_ai``.
"""

from desktop_app.integrations import missing_extra

try:  # every module of this package imports it: said once, here, when it is missing
    import pydantic_ai  # noqa: F401
except ModuleNotFoundError as exc:
    raise missing_extra(
        exc, "pydantic-ai", "Flowdesk's Pydantic AI integration", "pydantic_ai"
    ) from exc

from desktop_app.integrations.pydantic_ai.agent import FlowdeskAgent, FlowdeskRunResult
from desktop_app.integrations.pydantic_ai.durability import FlowdeskDurability, JournalMismatchError

__all__ = ["FlowdeskAgent", "FlowdeskDurability", "FlowdeskRunResult", "JournalMismatchError"]
