"""The SQLite backend (apsw): one WAL-mode file per database.

Modules: :mod:`.store` (the :class:`~desktop_app.store.protocol.CheckpointStore`),
:mod:`.agent_runs` (the agent-run log over the same connection). Exports
:data:`BACKEND`, what :mod:`desktop_app.bootstrap` picks for a file path or
a ``sqlite:///`` URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from desktop_app.store import migrations
from desktop_app.store.backend import StoreOptions
from desktop_app.store.connection import open_connection
from desktop_app.store.protocol import AgentLog, CheckpointStore
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store


class SqliteBackend:
    """:class:`~desktop_app.store.backend.Backend` of SQLite files
    (``database``: the file's path)."""

    name = "sqlite"
    capabilities = SqliteCheckpointStore.capabilities

    def open(self, database: str, options: StoreOptions) -> SqliteCheckpointStore:
        return open_store(
            Path(database),
            scope=options.scope,
            synchronous=options.synchronous,
            busy_timeout_s=options.busy_timeout_s,
            fullfsync=options.fullfsync,
            create=options.create,
        )

    def agent_log(self, store: CheckpointStore) -> AgentLog:
        return SqliteAgentStore(cast(SqliteCheckpointStore, store))

    def apply_schema(self, database: str, options: StoreOptions) -> list[migrations.SchemaFile]:
        conn = open_connection(
            Path(database),
            synchronous=options.synchronous,
            busy_timeout_s=options.busy_timeout_s,
            fullfsync=options.fullfsync,
        )
        try:
            return migrations.apply(conn)
        finally:
            conn.close()

    def schema_status(self, database: str, options: StoreOptions) -> list[migrations.SchemaStatus]:
        conn = open_connection(
            Path(database),
            synchronous=options.synchronous,
            busy_timeout_s=options.busy_timeout_s,
            create=False,
        )
        try:
            return migrations.status(conn)
        finally:
            conn.close()

    def verify_schema(self, database: str, options: StoreOptions) -> None:
        conn = open_connection(Path(database), busy_timeout_s=options.busy_timeout_s, create=False)
        try:
            migrations.verify(conn, db=database)
        finally:
            conn.close()


#: the SQLite backend
BACKEND = SqliteBackend()

__all__ = ["BACKEND", "SqliteAgentStore", "SqliteBackend", "SqliteCheckpointStore", "open_store"]
