"""What the app opens at launch, in one place: schema, engine, UI reader,
agent store and outbox dispatcher.

This is the app's only use of :mod:`desktop_app.bootstrap` (and the only
module of the app that knows which backend the agent store comes from), so
moving to a different composition root is one edit here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app import bootstrap
from desktop_app.config import Settings
from desktop_app.flow import CompiledFlow, Engine, EventBus
from desktop_app.flow.clock import Clock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows import builtin_destinations
from desktop_app.store.agent_runs import SqliteAgentStore
from desktop_app.store.protocol import CheckpointStore

SchemaReport = bootstrap.SchemaReport
#: The agent-run log the app reads (one name, so the backend is chosen here only).
AgentStore = SqliteAgentStore


@dataclass
class AppServices:
    """Everything the app reads and writes through.

    Attributes:
        schema: the schema files applied at launch (maybe none).
        engine: the one engine of this process (its store is shared by the
            app's worker threads, serialised by the store).
        reader: a second connection for the UI thread (reads only).
        agents: the agent-run log over the engine's store.
        dispatcher: delivers outbox intents (the one ``flowdesk agent`` runs).
    """

    schema: bootstrap.SchemaReport
    engine: Engine
    reader: CheckpointStore
    agents: AgentStore
    dispatcher: Dispatcher

    def close(self) -> None:
        """Close both connections (a run still being driven stops at its next save)."""
        self.engine.stop()
        self.engine.store.close()
        self.reader.close()


def open_services(
    settings: Settings,
    *,
    flows: list[CompiledFlow[Any]] | None,
    events: EventBus,
    clock: Clock | None = None,
) -> AppServices:
    """Apply the schema (on PostgreSQL: verify it, never apply) and open
    everything (call in a worker thread).

    Raises:
        FlowdeskError subclasses (database cannot be opened, schema too new...).
    """
    report = bootstrap.app_schema(settings)
    engine = bootstrap.build_engine(settings, flows=flows, events=events)
    if clock is not None:
        engine.clock = clock
    try:
        reader = bootstrap.open_checkpoint_store(settings)
    except BaseException:
        engine.store.close()
        raise
    store = engine.store
    agents = bootstrap.agent_store(store)
    dispatcher = Dispatcher(store, builtin_destinations(store), clock=engine.clock)
    return AppServices(report, engine, reader, agents, dispatcher)
