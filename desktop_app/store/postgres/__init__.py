"""The PostgreSQL backend (psycopg 3 + psycopg_pool), for ``postgresql://`` URLs.

Modules: :mod:`.store` (the :class:`~desktop_app.store.protocol.CheckpointStore`),
:mod:`.agent_runs` (the agent-run log), :mod:`.sql` (connections, errors,
``?`` placeholders for domain SQL), :mod:`.notify` (NOTIFY/LISTEN, worker
liveness), :mod:`.copy` (``flowdesk db copy``), :mod:`.doctor` (``flowdesk
doctor``'s checks). Exports :data:`BACKEND`, what :mod:`desktop_app.bootstrap`
picks for a ``postgresql://`` URL; importing this package loads psycopg.
"""

from __future__ import annotations

from typing import cast

from desktop_app.store import migrations
from desktop_app.store.backend import StoreOptions
from desktop_app.store.postgres.agent_runs import PostgresAgentStore
from desktop_app.store.postgres.store import (
    PostgresCheckpointStore,
    apply_postgres_schema,
    open_postgres_store,
    postgres_schema_status,
    verify_postgres_schema,
)
from desktop_app.store.protocol import AgentLog, CheckpointStore


class PostgresBackend:
    """:class:`~desktop_app.store.backend.Backend` of a PostgreSQL server
    (``database``: a ``postgresql://`` URL; the tables live in schema ``flowdesk``)."""

    name = "postgres"
    capabilities = PostgresCheckpointStore.capabilities

    def open(self, database: str, options: StoreOptions) -> PostgresCheckpointStore:
        return open_postgres_store(
            database,
            scope=options.scope,
            application_name=options.application_name[:63],
            pooler=options.pooler,
            listen_url=options.listen_url,
            reconnect_max_s=options.reconnect_max_s,
            connect_wait_s=options.connect_wait_s,
        )

    def agent_log(self, store: CheckpointStore) -> AgentLog:
        return PostgresAgentStore(cast(PostgresCheckpointStore, store))

    def apply_schema(self, database: str, options: StoreOptions) -> list[migrations.SchemaFile]:
        return apply_postgres_schema(database)

    def schema_status(self, database: str, options: StoreOptions) -> list[migrations.SchemaStatus]:
        return postgres_schema_status(database)

    def verify_schema(self, database: str, options: StoreOptions) -> None:
        verify_postgres_schema(database)


#: the PostgreSQL backend
BACKEND = PostgresBackend()

__all__ = [
    "BACKEND",
    "PostgresAgentStore",
    "PostgresBackend",
    "PostgresCheckpointStore",
    "open_postgres_store",
]
