"""Wiring shared by the CLI, the app and the headless agent: settings → store → engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.config import Settings
from desktop_app.flow import CompiledFlow, Engine, EventBus
from desktop_app.flows import builtin_flows
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite import SqliteCheckpointStore, open_store


@dataclass
class SchemaReport:
    """What :func:`apply_schema` did: the files applied now (maybe none)."""

    path: Path
    applied: list[str]


def apply_schema(settings: Settings) -> SchemaReport:
    """Apply pending schema files to the settings' database (creating it, mode 0600).

    Raises:
        DatabaseOpenError, SchemaChecksumError, SchemaTooNewError, StoreError.
    """
    path = Path(settings.db_path)
    conn = open_connection(
        path,
        synchronous=settings.synchronous,
        busy_timeout_s=settings.busy_timeout_s,
        fullfsync=settings.fullfsync,
    )
    try:
        applied = migrations.apply(conn)
    finally:
        conn.close()
    return SchemaReport(path, [f.key for f in applied])


def schema_status(settings: Settings) -> list[migrations.SchemaStatus]:
    """Status of every schema file in the settings' database."""
    conn = open_connection(
        settings.db_path,
        synchronous=settings.synchronous,
        busy_timeout_s=settings.busy_timeout_s,
        create=False,
    )
    try:
        return migrations.status(conn)
    finally:
        conn.close()


def open_sqlite_store(settings: Settings) -> SqliteCheckpointStore:
    """Open the verified store (raises SchemaMissingError naming ``flowdesk db apply``)."""
    return open_store(
        settings.db_path,
        scope=settings.scope,
        synchronous=settings.synchronous,
        busy_timeout_s=settings.busy_timeout_s,
        fullfsync=settings.fullfsync,
    )


def build_engine(
    settings: Settings,
    *,
    flows: list[CompiledFlow[Any]] | None = None,
    events: EventBus | None = None,
) -> Engine:
    """An engine over the settings' database with the built-in flows registered."""
    store = open_sqlite_store(settings)
    return Engine(store, flows=flows if flows is not None else builtin_flows(), events=events)
