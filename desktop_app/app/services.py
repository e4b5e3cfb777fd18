"""What the app opens at launch, in one place: schema, engine, UI reader,
agent store and outbox dispatcher.

This is the app's only use of :mod:`desktop_app.bootstrap`: everything comes
from :func:`desktop_app.bootstrap.open_services` (the composition root that
picks the backend from the database string), so the app names no backend
class and runs no SQL of its own.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from desktop_app.agent import Agent
from desktop_app.config import Settings, max_turns
from desktop_app.flow import CompiledFlow, Engine, EventBus
from desktop_app.flow.clock import Clock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flow.worker import ServerClock
from desktop_app.flows import builtin_destinations
from desktop_app.store.protocol import ChangePush, CheckpointStore, ServerOutages, ServerTime
from desktop_app.store.records import AgentRun, ToolResult

if TYPE_CHECKING:  # bootstrap (and with it the backends) is imported when the app opens
    from desktop_app import bootstrap

#: Seconds a read of the UI's store waits for a connection to a database
#: server before it fails (tried once): the screens read on the UI thread,
#: which never freezes for the pool's ``postgres.connect_wait_s`` (30 s)
#: during a server's outage.
UI_WAIT_S = 1.0


class AgentStore(Protocol):
    """What the app reads of the agent-run log (any backend's agent store)."""

    def get(self, run_id: str) -> AgentRun:
        """The run's row (``AgentLog.get``); raises CheckpointNotFoundError."""

    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> builtins.list[AgentRun]:
        """Runs, optionally only those in ``statuses`` or of ``agent`` (``AgentLog.list``)."""

    def list_page(self, *, offset: int, limit: int) -> builtins.list[AgentRun]:
        """Runs newest first, ``limit`` from ``offset`` (``AgentLog.list_page``)."""

    def messages(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """The run's conversation, oldest first (``AgentLog.messages``)."""

    def tool_results(self, run_id: str) -> builtins.list[ToolResult]:
        """The run's durable tool calls (``AgentLog.tool_results``)."""


@dataclass
class AppServices:
    """Everything the app reads and writes through.

    Attributes:
        schema: the schema files applied at launch (maybe none).
        services: the composition root's :class:`~desktop_app.bootstrap.Services`
            (settings, database string, checkpoints, agents, engine,
            ``resolve_run_id``); its engine is the one engine of this process
            (its store is shared by the app's worker threads, serialised by the store).
        reader: a second connection for the UI thread (reads only).
        reader_agents: the agent-run log over ``reader`` (reads only).
        dispatcher: delivers outbox intents (the one ``flowdesk agent`` runs).
        flow_problems: configured flows that failed to load, as text (the rest work).
    """

    schema: bootstrap.SchemaReport
    services: bootstrap.Services
    reader: CheckpointStore
    reader_agents: AgentStore
    dispatcher: Dispatcher
    flow_problems: list[str] = field(default_factory=list)
    _unwatch: Callable[[], None] | None = None

    def watch_changes(self, on_change: Callable[[], None]) -> bool:
        """Have ``on_change()`` called (from another thread) soon after any
        process commits a change the runs table shows, when the store pushes
        changes (the ``push`` capability: PostgreSQL). ``False`` when it does
        not (SQLite: polling ``data_version`` is all there is, and is cheap).

        Raises:
            StoreError: the store could not open its listening session.
        """
        if "push" not in self.reader.capabilities:
            return False
        self._unwatch = cast(ChangePush, self.reader).watch_changes(on_change)
        return True

    @property
    def engine(self) -> Engine:
        return self.services.engine

    @property
    def agents(self) -> AgentStore:
        return self.services.agents

    @property
    def database(self) -> str:
        return self.services.database

    def agent(self, name: str, model: Any) -> Agent:
        """An agent whose runs are logged in this database (tools: none),
        with its ``max_turns`` from the settings."""
        turns = max_turns(self.services.settings, name)
        return Agent(name, model, self.services.agents, max_turns=turns)

    def model(self) -> Any:
        """The configured chat model, or ``None`` when none is set up.

        Raises:
            SecretsError, KeyFileError (the API key cannot be read).
        """
        from desktop_app import bootstrap

        return bootstrap.build_model(self.services.settings)

    def close(self) -> None:
        """Close both connections (a run still being driven stops at its next save)."""
        self.engine.stop()
        if self._unwatch is not None:
            self._unwatch()
        self.services.close()
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
    from desktop_app import bootstrap

    report = bootstrap.app_schema(settings)
    # on PostgreSQL the workers execute runs, unless FLOWDESK_WORKER=1
    executes = bootstrap.executes_runs(settings)
    services = bootstrap.open_services(settings, flows=flows, events=events, executes=executes)
    if clock is not None:
        services.engine.clock = clock
    try:
        # the UI's own connection: no flows, its engine is never driven
        ui = bootstrap.open_services(settings, flows=[])
    except BaseException:
        services.close()
        raise
    if "server_outages" in ui.checkpoints.capabilities:
        cast(ServerOutages, ui.checkpoints).stop_waiting(UI_WAIT_S)
    clock_of = services.engine.clock
    if isinstance(clock_of, ServerClock) and "database_clock" in ui.checkpoints.capabilities:
        # the screens read the engine's clock on the UI thread: its samples
        # go through the UI's store, which waits UI_WAIT_S, not the pool's
        # 30 s per try, for a server that cannot be reached
        clock_of.probe = cast(ServerTime, ui.checkpoints).server_time
    store = services.checkpoints
    dispatcher = Dispatcher(store, builtin_destinations(store), clock=services.engine.clock)
    problems = [str(p.error) for p in services.flow_problems]
    return AppServices(report, services, ui.checkpoints, ui.agents, dispatcher, problems)
