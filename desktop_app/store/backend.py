"""What a storage backend hands the composition root: one :class:`Backend`
object per backend package (``desktop_app.store.sqlite.BACKEND``,
``desktop_app.store.postgres.BACKEND``, ``desktop_app.store.memory.BACKEND``).

``desktop_app.bootstrap`` picks the package by the database string's scheme
(a file path or ``sqlite:///`` -> ``sqlite``; ``postgresql://`` ->
``postgres``), imports it only then (psycopg loads only for a PostgreSQL
URL), and asks its ``BACKEND`` for the stores; it never names a store class.
A third-party backend is a package exporting the same kind of object.

Imports no SQL library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from desktop_app.store.protocol import AgentLog, CheckpointStore

if TYPE_CHECKING:
    from desktop_app.store.migrations import SchemaFile, SchemaStatus


@dataclass(frozen=True)
class StoreOptions:
    """How to open a store: the settings the built-in backends read (each
    reads its own and ignores the others').

    Attributes:
        scope: runs saved under one scope are invisible from another.
        synchronous: SQLite's ``PRAGMA synchronous`` (``OFF``/``NORMAL``/``FULL``/``EXTRA``).
        busy_timeout_s: SQLite: how long a writer waits for the file's lock, seconds.
        fullfsync: SQLite on macOS: ``F_FULLFSYNC`` on every commit.
        create: SQLite: a missing file is refused as a database without the
            schema (``SchemaMissingError``) when true, as a missing database
            (``DatabaseMissingError``) when false; nothing is created either
            way (``apply_schema`` creates it).
        application_name: PostgreSQL: shown in ``pg_stat_activity`` (at most 63 characters).
        pooler: PostgreSQL: ``"transaction"`` behind a transaction-mode pooler (PgBouncer).
        listen_url: PostgreSQL: a direct URL for LISTEN and liveness locks.
        reconnect_max_s: PostgreSQL: the longest wait between two reconnect tries, seconds.
        connect_wait_s: PostgreSQL: how long one try of a transaction waits
            for a pooled connection, seconds.
    """

    scope: str = "default"
    synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "FULL"
    busy_timeout_s: float = 10.0
    fullfsync: bool = False
    create: bool = False
    application_name: str = "flowdesk"
    pooler: Literal["none", "transaction"] = "none"
    listen_url: str | None = None
    reconnect_max_s: float = 5.0
    connect_wait_s: float = 30.0


class Backend(Protocol):
    """One storage backend (one package's ``BACKEND``).

    Attributes:
        name: the backend's name (``"sqlite"``, ``"postgres"``, ``"memory"``).
        capabilities: what its stores declare (:data:`~desktop_app.store.protocol.CAPABILITIES`).
    """

    name: str
    capabilities: frozenset[str]

    def open(self, database: str, options: StoreOptions) -> CheckpointStore:
        """A verified store on ``database`` (a file path, a URL, or a memory
        space's name). Raises DatabaseOpenError, SchemaMissingError (naming
        ``flowdesk db apply``), SchemaChecksumError, SchemaTooNewError, StoreError."""
        ...

    def agent_log(self, store: CheckpointStore) -> AgentLog:
        """The agent-run log over ``store``'s database (``store`` opened by :meth:`open`)."""
        ...

    def apply_schema(self, database: str, options: StoreOptions) -> list[SchemaFile]:
        """Apply the pending schema files; returns those applied."""
        ...

    def schema_status(self, database: str, options: StoreOptions) -> list[SchemaStatus]:
        """The state of every schema file in ``database``."""
        ...

    def verify_schema(self, database: str, options: StoreOptions) -> None:
        """Refuse a schema that is missing, edited or newer (SchemaMissingError,
        SchemaChecksumError, SchemaTooNewError)."""
        ...
