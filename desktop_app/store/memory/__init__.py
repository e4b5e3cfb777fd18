"""The in-memory backend: runs, checkpoints and agent runs in process
memory, for tests and for trying the engine (no ``sql``: domain writes are
refused; no ``processes``: nothing outlives the process).

Modules: :mod:`.store` (the :class:`~desktop_app.store.protocol.CheckpointStore`),
:mod:`.agent_runs` (the agent-run log). Exports :data:`BACKEND`, where
``database`` names a memory space (stores opened on the same name share their
data, like two connections to one file). Imports no SQL library.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, cast

from desktop_app.store.backend import StoreOptions
from desktop_app.store.memory.agent_runs import InMemoryAgentLog
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import AgentLog, CheckpointStore

if TYPE_CHECKING:  # migrations loads apsw
    from desktop_app.store.migrations import SchemaFile, SchemaStatus


class MemoryBackend:
    """:class:`~desktop_app.store.backend.Backend` in process memory; it has
    no schema (the schema calls do nothing)."""

    name = "memory"
    capabilities = InMemoryCheckpointStore.capabilities

    def __init__(self) -> None:
        # one agent log per space and scope, kept while the space lives
        self._logs: weakref.WeakKeyDictionary[object, dict[str, InMemoryAgentLog]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def open(self, database: str, options: StoreOptions) -> InMemoryCheckpointStore:
        return InMemoryCheckpointStore(scope=options.scope, space=database or None)

    def agent_log(self, store: CheckpointStore) -> AgentLog:
        space = cast(InMemoryCheckpointStore, store)._space
        with self._lock:
            logs = self._logs.setdefault(space, {})
            return logs.setdefault(store.scope, InMemoryAgentLog(scope=store.scope))

    def apply_schema(self, database: str, options: StoreOptions) -> list[SchemaFile]:
        return []

    def schema_status(self, database: str, options: StoreOptions) -> list[SchemaStatus]:
        return []

    def verify_schema(self, database: str, options: StoreOptions) -> None:
        return None


#: the in-memory backend
BACKEND = MemoryBackend()

__all__ = ["BACKEND", "InMemoryAgentLog", "InMemoryCheckpointStore", "MemoryBackend"]
