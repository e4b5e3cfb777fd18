"""Wiring shared by the CLI, the app and the headless agent: settings → store → engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.config import Settings, default_db_path
from desktop_app.errors import ConfigError
from desktop_app.flow import CompiledFlow, Engine, EventBus
from desktop_app.flows import builtin_flows
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite import SqliteCheckpointStore, open_store

if TYPE_CHECKING:
    from desktop_app.agent.openai_compat import OpenAICompatibleModel


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
    if path == default_db_path():
        # the default location is ours to create (mode 0700); a --db folder is the user's
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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
        create=False,
    )


def _flows_from(obj: Any, where: str) -> list[CompiledFlow[Any]]:
    if callable(obj) and not isinstance(obj, CompiledFlow):
        obj = obj()
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    bad = [i for i in items if not isinstance(i, CompiledFlow)]
    if bad:
        raise ConfigError(
            f"{where} gave {type(bad[0]).__name__}, not a compiled flow; point it at "
            "FlowBuilder(...).compile() (or a function or list of them)"
        )
    return list(items)


def load_flows(settings: Settings) -> list[CompiledFlow[Any]]:
    """Built-in flows, then ``flowdesk.flows`` entry points, then ``settings.flows``.

    Raises:
        ConfigError: a module path cannot be imported or gives no flow.
    """
    import importlib
    from importlib.metadata import entry_points

    flows = builtin_flows()
    for ep in entry_points(group="flowdesk.flows"):
        flows += _flows_from(ep.load(), f"entry point {ep.name!r}")
    for spec in settings.flows:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
            obj = getattr(module, attr) if attr else module
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"cannot load flow {spec!r} from settings: {exc}; use 'package.module:attr' "
                "and make sure the package is importable"
            ) from exc
        flows += _flows_from(obj, f"flow {spec!r}")
    return flows


def build_model(settings: Settings) -> OpenAICompatibleModel | None:
    """The configured OpenAI-compatible model, or ``None`` when none is set up.

    The API key comes from :func:`desktop_app.secrets.model_api_key`
    (``FLOWDESK_MODEL__API_KEY``, a 0600 ``model.api_key_file``, else keyring:
    ``flowdesk secrets set model_api_key``); a missing key is fine for local
    servers.

    Raises:
        SecretsError: the keyring cannot be read, or the key is misplaced.
        KeyFileError: the key file is missing, empty or readable by others.
    """
    from desktop_app.agent.openai_compat import OpenAICompatibleModel
    from desktop_app.observability import mask_secret
    from desktop_app.secrets import model_api_key

    cfg = settings.model
    if not cfg.base_url or not cfg.model:
        return None
    key = model_api_key(cfg)
    if key is not None:
        mask_secret(key.get_secret_value())  # never in the log file
    return OpenAICompatibleModel(
        cfg.base_url,
        cfg.model,
        api_key=None if key is None else key.get_secret_value(),
        timeout_s=cfg.timeout_s,
    )


def build_engine(
    settings: Settings,
    *,
    flows: list[CompiledFlow[Any]] | None = None,
    events: EventBus | None = None,
) -> Engine:
    """An engine over the settings' database with the built-in flows registered
    (its runs and steps traced when OTLP export is set up)."""
    from desktop_app.observability import instrument_engine

    chosen = flows if flows is not None else load_flows(settings)
    store = open_sqlite_store(settings)
    engine = Engine(store, flows=chosen, events=events)
    instrument_engine(engine)
    return engine
