"""The composition root: settings → database backend → stores → engine.

The one module that names a storage backend. It reads the database string
(``--db`` / ``db_path``: a file path or a URL), picks the backend, and hands
the CLI and the app a :class:`Services` object; nothing else imports apsw or
names a ``Sqlite*`` class (outside ``desktop_app/store/``).

Public API:

* :func:`open_services` → :class:`Services` (settings, database string,
  checkpoint store, agent store, engine, flow-load problems,
  ``resolve_run_id``) for commands that need the database.
* :func:`parse_database` → :class:`Database` (which backend, which path).
* :func:`apply_schema`, :func:`schema_status`, :func:`load_flows`,
  :func:`load_flows_report`, :func:`build_model`.
* Kept for the app until it takes :class:`Services`: :func:`build_engine`,
  :func:`open_sqlite_store`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import unquote, urlsplit

from desktop_app.config import Settings, default_db_path, max_turns
from desktop_app.errors import BackendUnavailableError, ConfigError, FlowdeskError, redact
from desktop_app.extras import install_command
from desktop_app.flow import CompiledFlow, Engine, EventBus, ExecutionContext
from desktop_app.flows import builtin_flows
from desktop_app.private import make_private_dirs
from desktop_app.store import migrations
from desktop_app.store.backend import Backend, StoreOptions
from desktop_app.store.connection import open_connection
from desktop_app.store.protocol import AgentLog, CheckpointStore
from desktop_app.store.runids import RunRef, resolve_run_id
from desktop_app.words import plural

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from desktop_app.agent.openai_compat import OpenAICompatibleModel
    from desktop_app.store.sqlite.store import SqliteCheckpointStore


@dataclass(frozen=True)
class Database:
    """A parsed database string.

    Attributes:
        text: the string as given (a URL survives intact: ``postgresql://alice@db/x``).
        backend: ``"sqlite"`` or ``"postgres"`` (the optional extra).
        path: the SQLite file (empty for PostgreSQL).
    """

    text: str
    backend: Literal["sqlite", "postgres"]
    path: Path

    @property
    def url(self) -> str:
        """The PostgreSQL URL (``backend == "postgres"``), as given."""
        return self.text

    @property
    def shown(self) -> str:
        """For messages: the file path, or the URL without its password."""
        if self.backend == "postgres":
            from desktop_app.store.postgres.sql import redact

            return redact(self.text)
        return str(self.path)


#: a libpq keyword/value connection string ("host=db dbname=x password=..."):
#: it starts with one of libpq's connection keywords and "="
_CONNINFO = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslpassword|service"
    r"|connect_timeout|options|application_name|target_session_attrs)\s*=",
    re.IGNORECASE,
)

#: URL schemes of backends that are planned as optional extras
_EXTRA_BACKENDS = {"postgresql": "postgres", "postgres": "postgres"}


def parse_database(text: str) -> Database:
    """Pick the backend from a database string.

    ``/path/to/file.db``, ``~/x.db`` (expanded by the settings) and
    ``sqlite:///abs/path.db`` (percent-encoded, as any URL's path:
    ``sqlite:///my%20notes.db``) are SQLite files; ``postgresql://`` and
    ``postgres://`` URLs are PostgreSQL (psycopg is imported only then).

    Raises:
        BackendUnavailableError: a URL of a backend that is not installed
            (``postgresql://``: ``pip install 'flowdesk[postgres]'``) or not
            known, or a ``sqlite:`` URL naming no file or with a query or
            fragment; a ``ConfigError``, so the CLI exits 2.
        ConfigError: ``text`` is empty (or only spaces).
    """
    if not text.strip():
        raise ConfigError(
            "the database path is empty; give a file path with --db (e.g. --db ~/flowdesk.db) "
            "or set db_path in the settings"
        )
    if "://" not in text:
        if _CONNINFO.match(text):
            # libpq's keyword form ("host=db password=..."): not a file name, and
            # never echoed (it may hold a password)
            raise ConfigError(
                "the database looks like a libpq keyword string (host=... dbname=...); "
                "Flowdesk takes a PostgreSQL database as a URL: "
                "--db postgresql://USER@HOST:PORT/DBNAME, with the password in "
                "PGPASSWORD or ~/.pgpass (never on a command line)"
            )
        return Database(text, "sqlite", Path(text))
    scheme = urlsplit(text).scheme.lower().split("+")[0]
    if scheme == "sqlite":
        rest = text.split("://", 1)[1]
        if "?" in rest or "#" in rest:
            # a URL's query or fragment: SQLite URL options are not taken, and
            # a file named "f.db?mode=ro" is never what was meant
            raise BackendUnavailableError(
                f"{redact(text)!r} has a query (?...) or fragment (#...), which Flowdesk does "
                "not take in a sqlite:/// URL; write the file's path alone (in a URL, a ? or # "
                "in a file name is written %3F or %23)"
            )
        if not rest or rest == "/":
            raise BackendUnavailableError(
                f"{redact(text)!r} names no file; write sqlite:///absolute/path.db or just the path"
            )
        # a URL's path is percent-encoded (sqlite:///my%20notes.db is "my notes.db")
        return Database(text, "sqlite", Path(unquote(rest)).expanduser())
    if scheme in _EXTRA_BACKENDS:
        import importlib.util

        if importlib.util.find_spec("psycopg") is not None:
            return Database(text, "postgres", Path())
        extra = _EXTRA_BACKENDS[scheme]
        raise BackendUnavailableError(
            f"the database {redact(text)!r} needs the PostgreSQL backend, which is not installed: "
            f"{install_command(extra)} (or give a SQLite file path with --db)"
        )
    raise BackendUnavailableError(
        f"unknown database URL scheme {scheme!r} in {redact(text)!r}; give a PostgreSQL URL "
        "(postgresql://USER@HOST:PORT/DBNAME) or a SQLite file path (or sqlite:///path) "
        "with --db or db_path"
    )


def _sqlite_path(settings: Settings) -> Path:
    return parse_database(settings.db_path).path


#: backend name (``Database.backend``) -> the package whose ``BACKEND`` serves it
_BACKEND_PACKAGES = {"sqlite": "desktop_app.store.sqlite", "postgres": "desktop_app.store.postgres"}


def backend_of(db: Database) -> Backend:
    """The :class:`~desktop_app.store.backend.Backend` of ``db``'s backend
    package, imported now (psycopg loads only for a PostgreSQL URL)."""
    import importlib

    backend: Backend = importlib.import_module(_BACKEND_PACKAGES[db.backend]).BACKEND
    return backend


def _target(db: Database) -> str:
    """What the backend opens: the SQLite file's path, or the URL."""
    return db.url if db.backend == "postgres" else str(db.path)


def store_options(settings: Settings, *, owner: str | None = None) -> StoreOptions:
    """The settings a backend opens its stores with (``owner``: the
    PostgreSQL ``application_name``, default ``flowdesk``)."""
    return StoreOptions(
        scope=settings.scope,
        synchronous=settings.synchronous,
        busy_timeout_s=settings.busy_timeout_s,
        fullfsync=settings.fullfsync,
        create=False,
        application_name=owner or "flowdesk",
        pooler=settings.postgres.pooler,
        listen_url=settings.postgres.listen_url,
        reconnect_max_s=settings.postgres.reconnect_max_s,
        connect_wait_s=settings.postgres.connect_wait_s,
    )


def _postgres_url(settings: Settings) -> str | None:
    db = parse_database(settings.db_path)
    return db.url if db.backend == "postgres" else None


def on_postgres(db: str) -> bool:
    """Whether ``db`` names a PostgreSQL database (``False`` for a file or
    for text that names no backend at all)."""
    try:
        return parse_database(db).backend == "postgres"
    except FlowdeskError:
        return False


def executes_runs(settings: Settings) -> bool:
    """Whether the app executes runs itself: always on a SQLite file; on a
    shared PostgreSQL database only when told to (``settings.worker``:
    ``FLOWDESK_WORKER=1``), since workers execute them; otherwise it
    observes, submits, answers and signals."""
    return _postgres_url(settings) is None or settings.worker


@dataclass(frozen=True)
class FlowProblem:
    """A configured flow that could not be loaded: where it was named and why."""

    source: str
    error: ConfigError


@dataclass
class FlowLoad:
    """:func:`load_flows_report`'s result: the flows that loaded and the problems."""

    flows: list[CompiledFlow[Any]]
    problems: list[FlowProblem] = field(default_factory=list)


@dataclass
class Services:
    """What the CLI and the app get from the composition root.

    Attributes:
        settings: the effective settings.
        database: the database string as given (path or URL).
        checkpoints: the flow-run store (the store protocol).
        agents: the agent-run store over the same database.
        engine: the engine over ``checkpoints`` with the loaded flows.
        flow_problems: configured flows that failed to load (the rest work).
    """

    settings: Settings
    database: str
    checkpoints: CheckpointStore
    #: the agent-run log of the same backend (SQLite or PostgreSQL)
    agents: AgentLog
    engine: Engine
    flow_problems: list[FlowProblem] = field(default_factory=list)

    def resolve_run_id(self, prefix: str) -> RunRef:
        """A full id or unique prefix of a flow run, agent run or LangGraph
        thread of this scope → :class:`RunRef` (an exact id of any kind wins
        over a prefix of another, see :mod:`desktop_app.store.runids`).

        Raises:
            UnknownRunError, AmbiguousRunIdError (both ``InputError``).
            StoreError: the database cannot be read.
        """
        from desktop_app.integrations.langgraph.threads import ThreadIds

        threads = None
        if "sql" in self.checkpoints.capabilities:  # where LangGraph threads are kept
            threads = ThreadIds(self.checkpoints, self.settings.scope)
        return resolve_run_id(self.checkpoints, self.agents, prefix, threads)

    def close(self) -> None:
        """Close the database connection (the engine must be idle)."""
        self.checkpoints.close()


def open_services(
    settings: Settings,
    *,
    flows: list[CompiledFlow[Any]] | None = None,
    events: EventBus | None = None,
    executes: bool = True,
) -> Services:
    """Open the database named by ``settings.db_path`` and wire the engine.

    ``flows`` replaces the configured ones; otherwise built-in, entry-point and
    ``settings.flows`` flows are loaded, and one that fails is reported in
    ``Services.flow_problems`` while the rest work. ``executes``: whether the
    engine executes runs (a headless command does; the app asks
    :func:`executes_runs`); see ``Engine(executes=...)``.

    Raises:
        BackendUnavailableError: the database URL's backend is not installed.
        SchemaMissingError (names ``flowdesk db apply``), DatabaseOpenError,
        SchemaChecksumError, SchemaTooNewError, StoreError.
    """
    from desktop_app.observability import instrument_engine

    load = FlowLoad(flows) if flows is not None else load_flows_report(settings)
    db = parse_database(settings.db_path)
    backend = backend_of(db)
    checkpoints = backend.open(_target(db), store_options(settings))
    engine = _engine(checkpoints, flows=load.flows, events=events, executes=executes)
    instrument_engine(engine)  # runs and steps traced when OTLP export is set up
    agents = backend.agent_log(checkpoints)
    register_modes(engine, settings, agents)
    return Services(
        settings=settings,
        database=settings.db_path,
        checkpoints=checkpoints,
        agents=agents,
        engine=engine,
        flow_problems=load.problems,
    )


def register_modes(engine: Engine, settings: Settings, agents: AgentLog) -> None:
    """Register the built-in flows' other modes on ``engine``
    (:meth:`Engine.register_variant`), so every process that registers
    flows (``resume``, ``resume --all``, ``flowdesk agent``, the app)
    resumes their runs: ``digest --model`` over the settings' model
    (:func:`digest_with_model`, built only when such a run goes on). Only
    when the registered ``digest`` is the built-in one."""
    from desktop_app.flows.digest import model_version

    digest = engine.flows.get("digest")
    version = model_version()
    if digest is None or version not in digest.variants:
        return
    engine.register_variant("digest", version, lambda: digest_with_model(settings, agents))


def digest_with_model(settings: Settings, agents: AgentLog) -> CompiledFlow[Any]:
    """The ``digest`` flow in model mode (``digest --model``): one agent run
    per file, logged in ``agents``, with the settings' model and the
    ``digest-summary`` agent's system prompt when ``[agents.digest-summary]``
    sets one.

    Raises:
        ConfigError: no model is configured (names ``FLOWDESK_MODEL__BASE_URL``,
            ``FLOWDESK_MODEL__MODEL`` and the settings file's ``[model]``).
        SecretsError, KeyFileError: the API key cannot be read.
    """
    from desktop_app.agent import Agent
    from desktop_app.flows.digest import agent_summarizer, build_digest_flow

    model = build_model(settings)
    if model is None:
        raise ConfigError(
            "a digest run started with --model summarises with the configured model, and no "
            "model is configured here: set FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL "
            "(or base_url and model under [model] in the settings file), then resume it"
        )
    own = settings.agents.get("digest-summary")
    system = own.system if own is not None else None
    agent = Agent(
        "digest-summary",
        model,
        agents,
        system=system,
        max_turns=max_turns(settings, "digest-summary"),
        ask_user=False,
    )
    return build_digest_flow(summarizer=agent_summarizer(agent))


def _engine(
    store: CheckpointStore,
    *,
    flows: list[CompiledFlow[Any]],
    events: EventBus | None = None,
    executes: bool = True,
) -> Engine:
    """An engine over ``store``; on a store declaring ``database_clock`` its
    clock follows the database's (deadlines and wait times compared across
    machines; leases are decided in SQL by the database's clock anyway)."""
    if "database_clock" not in store.capabilities:
        return Engine(store, flows=flows, events=events, executes=executes)
    from desktop_app.flow.worker import ServerClock
    from desktop_app.store.protocol import ServerTime

    clock = ServerClock(cast(ServerTime, store).server_time)
    return Engine(store, flows=flows, events=events, clock=clock, executes=executes)


#: a W3C ``traceparent``: version, trace id, parent span id, flags (a later
#: version may add fields after a dash)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def run_context(settings: Settings, environ: Mapping[str, str] | None = None) -> ExecutionContext:
    """The execution context of a run this process starts: the settings'
    ``[context]`` ids and, when ``TRACEPARENT`` is set (W3C trace context,
    as a calling tool exports it), its trace id, so the run's spans join the
    caller's trace; without it the run gets a trace id of its own.

    Raises:
        ConfigError: ``TRACEPARENT`` is set and is not a W3C traceparent
            (``00-<32 hex>-<16 hex>-<2 hex>``, ids not all zeros, version
            not ``ff``); nothing was started.
    """
    ids = settings.context.model_dump()
    given = (environ if environ is not None else os.environ).get("TRACEPARENT")
    if given:
        m = _TRACEPARENT.fullmatch(given.strip())
        if m is None or m[1] == "ff" or not m[2].strip("0") or not m[3].strip("0"):
            raise ConfigError(
                f"TRACEPARENT {given!r} is not a W3C traceparent (00-<32 hex trace id>-<16 "
                "hex parent id>-<2 hex flags>, lowercase, ids not all zeros): unset it, or set "
                "it to the traceparent of the span this run belongs to; nothing was started"
            )
        ids["trace_id"] = m[2]
    return ExecutionContext(**ids)


def open_checkpoint_store(settings: Settings) -> CheckpointStore:
    """The settings' checkpoint store, SQLite or PostgreSQL (verified, never applied)."""
    db = parse_database(settings.db_path)
    return backend_of(db).open(_target(db), store_options(settings))


@dataclass
class SchemaReport:
    """What :func:`apply_schema` did: the files applied now (maybe none)."""

    path: Path | str
    applied: list[str]


def apply_schema(settings: Settings) -> SchemaReport:
    """Apply pending schema files to the settings' database (creating it, mode 0600;
    on PostgreSQL the tables go into schema ``flowdesk``, under an advisory lock).

    Raises:
        DatabaseOpenError, SchemaChecksumError, SchemaTooNewError, StoreError.
    """
    db = parse_database(settings.db_path)
    if db.backend == "sqlite" and db.path == default_db_path():
        # the default location is ours to create (mode 0700); a --db folder is the user's
        make_private_dirs(db.path.parent)
    applied = backend_of(db).apply_schema(_target(db), store_options(settings))
    return SchemaReport(db.shown if db.backend == "postgres" else db.path, [f.key for f in applied])


def schema_status(settings: Settings) -> list[migrations.SchemaStatus]:
    """Status of every schema file in the settings' database."""
    db = parse_database(settings.db_path)
    return backend_of(db).schema_status(_target(db), store_options(settings))


def app_schema(settings: Settings) -> SchemaReport:
    """What the app does with the schema at launch: apply it to a SQLite file
    (its own); on PostgreSQL only verify it (DDL rights on a shared server
    are an operator's decision: ``flowdesk --db URL db apply``).

    Raises:
        SchemaMissingError, SchemaChecksumError, SchemaTooNewError, plus
        :func:`apply_schema`'s errors.
    """
    db = parse_database(settings.db_path)
    if db.backend == "sqlite":
        return apply_schema(settings)
    backend_of(db).verify_schema(_target(db), store_options(settings))
    return SchemaReport(db.shown, [])


def open_sqlite_store(settings: Settings) -> SqliteCheckpointStore:
    """Open the verified store (raises SchemaMissingError naming ``flowdesk db apply``)."""
    from desktop_app.store.sqlite import BACKEND

    return BACKEND.open(str(_sqlite_path(settings)), store_options(settings))


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
        ConfigError: a module path cannot be imported or gives no flow (the first one).
    """
    load = load_flows_report(settings)
    if load.problems:
        raise load.problems[0].error
    return load.flows


@functools.cache
def flow_entry_points() -> tuple[EntryPoint, ...]:
    """The ``flowdesk.flows`` entry points of the installed distributions
    (not loaded), read once per process: finding them reads the metadata of
    every installed distribution (~20 ms in a virtualenv of 150 packages),
    and a package installed while a process runs is not importable in it
    consistently anyway (the next process sees it)."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group="flowdesk.flows"))


def load_flows_report(settings: Settings) -> FlowLoad:
    """Like :func:`load_flows`, but a flow that fails to load (import error,
    exception at import, not a compiled flow) is reported in
    ``FlowLoad.problems`` and the others still load. Never raises for a
    configured flow."""
    import importlib

    load = FlowLoad(builtin_flows())
    sources: list[tuple[str, Any]] = [
        (f"entry point {ep.name!r}", ep.load) for ep in flow_entry_points()
    ]
    for spec in settings.flows:
        module_name, _, attr = spec.partition(":")

        def get(module_name: str = module_name, attr: str = attr) -> Any:
            module = importlib.import_module(module_name)
            return getattr(module, attr) if attr else module

        sources.append((f"flow {spec!r}", get))
    modules = {f"flow {spec!r}": spec.partition(":")[0] for spec in settings.flows}
    for where, get in sources:
        try:
            obj = get()
            load.flows += _flows_from(obj, where)
        except ConfigError as exc:
            load.problems.append(FlowProblem(where, exc))
        except Exception as exc:  # the user's module failed to import: report it, go on
            load.problems.append(
                FlowProblem(where, ConfigError(_load_failure(where, exc, modules.get(where))))
            )
    return load


def _load_failure(where: str, exc: Exception, module: str | None) -> str:
    """What went wrong loading ``where``: a module that is not there gets
    the import hint; a module that was found but raised while importing (or
    an attribute it lacks) gets the real exception, type, message and the
    ``file:line`` it came from, since no import path would fix that.
    ``module``: the module the settings name (``None`` for an entry point)."""
    import sys
    import traceback

    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and (module is None or module == missing or module.startswith(missing + ".")):
        return (
            f"cannot load {where} from settings: {type(exc).__name__}: {exc}; use "
            "'package.module:attr' and make sure the package is importable "
            "(on sys.path or installed in this environment)"
        )
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and f.filename != __file__  # the user's code, not ours
    ]
    if frames:
        at = f" at {frames[-1].filename}:{frames[-1].lineno}"
    else:  # raised here: the module imported, but lacks the attribute named
        found = getattr(sys.modules.get(module or ""), "__file__", None)
        at = f" (in {found})" if found else ""
    return f"cannot load {where} from settings: {type(exc).__name__}: {exc}{at}"


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
    from desktop_app.secrets import api_key_hint, model_api_key

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
        stream=cfg.stream,
        key_hint=api_key_hint(cfg),
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
    if _postgres_url(settings) is not None:  # the app: executes only when told to
        engine = _engine(
            open_checkpoint_store(settings),
            flows=chosen,
            events=events,
            executes=executes_runs(settings),
        )
    else:
        engine = _engine(open_sqlite_store(settings), flows=chosen, events=events)
    instrument_engine(engine)  # on PostgreSQL too: its runs were never traced
    return engine


def inspect_database(settings: Settings) -> dict[str, Any]:
    """What ``flowdesk doctor`` reports about the open database:
    ``journal_mode`` (``wal``), ``behind``: the runs whose record is older
    than their newest checkpoint (:func:`runs_behind`'s list),
    ``synchronous`` (``OFF``/``NORMAL``/``FULL``/``EXTRA``, as the
    connection applies it), ``missing``: the schema's
    tables, columns, indexes and triggers the file lacks although every
    schema file is applied (``"index waits_run, table waits"``; ``""``:
    none; see
    :func:`~desktop_app.store.migrations.missing_objects`) and
    ``quick_check``: ``ok``, or
    SQLite's first problem followed by how many more it listed (``… (and 3
    more problems)``), or, when the damage stopped the check itself, what
    SQLite said (``database disk image is malformed``). A damaged file is a
    finding here, never an error.

    Raises:
        BackendUnavailableError, DatabaseOpenError, StoreError: the file
        cannot be opened or its settings read.
    """
    import apsw

    conn = open_connection(_sqlite_path(settings), create=False, synchronous=settings.synchronous)
    try:
        journal = str(conn.execute("PRAGMA journal_mode").fetchall()[0][0])
        level = int(str(conn.execute("PRAGMA synchronous").fetchall()[0][0]))
        try:
            rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
            # one problem a line; the "*** in database main ***" heading is not one
            problems = [
                ln for r in rows for ln in r.splitlines() if ln and not ln.startswith("***")
            ]
        except apsw.CorruptError as exc:  # the damage stopped the check part-way
            problems = [str(exc)]
        # a damaged file first: what it lacks may be what the damage hides
        missing = migrations.missing_objects(conn) if problems in ([], ["ok"]) else []
        behind = [] if missing or problems not in ([], ["ok"]) else runs_behind(conn)
    finally:
        conn.close()
    check = problems[0] if problems else "ok"
    if len(problems) > 1:
        check += f" (and {plural(len(problems) - 1, 'more problem')})"
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[level]
    return {
        "journal_mode": journal,
        "synchronous": sync,
        "quick_check": check,
        "missing": ", ".join(missing),
        "behind": behind,
    }


#: runs not ended whose row names an older revision than their newest checkpoint
_RUNS_BEHIND = (
    "SELECT r.run_id, r.revision, m.top FROM runs r JOIN "
    "(SELECT run_id, max(revision) AS top FROM checkpoints GROUP BY run_id) m "
    "ON m.run_id = r.run_id WHERE m.top > r.revision "
    "AND r.status IN ('pending', 'running', 'waiting', 'failed') "
    "ORDER BY r.created_at, r.run_id"
)


def runs_behind(conn: Any) -> list[tuple[str, int, int]]:
    """Runs not ended whose record (``runs.revision``) is older than their
    newest checkpoint, oldest run first: ``(run_id, record's revision, newest
    checkpoint's)``. Flowdesk moves both in one transaction, so only a change
    made outside it leaves one: every command then reads the older
    checkpoint, and a save meets the newer one (``RevisionConflictError``);
    ``cancel`` ends such a run without a save (an ended one is not listed)."""
    return [(str(r), int(a), int(b)) for r, a, b in conn.execute(_RUNS_BEHIND)]
