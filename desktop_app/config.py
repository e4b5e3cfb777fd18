"""Settings: pydantic-settings, from ``FLOWDESK_*`` env vars and a TOML file.

Sources, highest priority first: constructor arguments (the CLI's ``--db``),
environment variables (``FLOWDESK_DB_PATH``, ``FLOWDESK_SYNCHRONOUS``, nested
fields with ``__``: ``FLOWDESK_MODEL__BASE_URL``), then the TOML file at
``<platformdirs user config dir>/flowdesk/config.toml`` (moved with
``FLOWDESK_CONFIG=/path/to/config.toml``), then defaults.

Nothing here touches the disk at import time; :func:`default_db_path` only
computes a path. API keys are never written in the settings file: they live
in keyring, or (without one) in ``FLOWDESK_MODEL__API_KEY`` or a 0600 file
named by ``model.api_key_file`` (see :mod:`desktop_app.secrets`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from desktop_app.textsafe import shell_quote

APP_NAME = "flowdesk"


def config_file() -> Path:
    """The TOML settings file: ``$FLOWDESK_CONFIG`` or the platform config dir."""
    moved = os.environ.get("FLOWDESK_CONFIG")
    if moved:
        return Path(moved).expanduser()
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def default_db_path() -> Path:
    """``flowdesk.db`` in the platformdirs user data dir (not created here)."""
    return Path(platformdirs.user_data_dir(APP_NAME)) / "flowdesk.db"


#: what a scope may be (an empty one is refused)
SCOPE_RULE = (
    "a scope is a name of at least one character, not all spaces (e.g. 'default', "
    "'work'); an empty one is refused"
)

_UNSET_VAR = re.compile(r"\$(\w+|\{\w+\})")


class GivenValue(str):
    """A setting's value given on the command line (``--db``, ``--scope``),
    passed to :func:`load_settings` as an override: the shell has already
    expanded it, so it is used as given: ``$VARS`` are not expanded again
    (``--db '/x/a$b.db'`` is that file), only a leading ``~`` (which
    ``--db=~/x.db`` leaves to Flowdesk) is your home. The one settings
    error about it, an empty ``--scope``, names the option, never the
    settings file."""


def given(value: str | None) -> GivenValue | None:
    """A command-line option's ``value`` as a :class:`GivenValue`, or
    ``None`` when the option was not given."""
    return None if value is None else GivenValue(value)


def expand_path(value: Any) -> Any:
    """``~`` and ``$VARS`` expanded in a file path; a database URL
    (``scheme://...``) is returned unchanged, and a :class:`GivenValue`
    (a command-line option the shell expanded) gets only a leading ``~``
    expanded.

    Raises:
        ValueError: the path names an environment variable that is not set
            (pydantic reports it as an invalid setting naming the field).
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, GivenValue):
        return value if "://" in value else os.path.expanduser(str(value))
    if not isinstance(value, str) or "://" in value:
        return value
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = _UNSET_VAR.search(expanded)
    if unset:
        raise ValueError(f"environment variable {unset.group(1).strip('{}')} is not set")
    return expanded


#: A file path with ``~`` and ``$VARS`` expanded, or a database URL kept intact.
PathOrURL = Annotated[str, BeforeValidator(expand_path)]


#: a request's timeout in seconds: above 0, at most a day, finite (``inf``,
#: ``nan``, ``-1`` or ``1e300`` were accepted here and were a traceback,
#: leaving an interrupted agent run behind, at the first connection: the
#: socket refuses them)
MAX_REQUEST_S = 86400.0
RequestSeconds = Annotated[float, Field(gt=0, le=MAX_REQUEST_S, allow_inf_nan=False)]


class ModelSettings(BaseSettings):
    """The OpenAI-compatible model provider (the key itself lives in keyring,
    or without one in an environment variable or a 0600 file).

    Attributes:
        base_url: e.g. ``http://127.0.0.1:11434/v1`` (Ollama).
        model: the model name.
        timeout_s: seconds per request (above 0, at most a day).
        api_key_name: the keyring entry holding the key (``flowdesk secrets set NAME``).
        api_key: the key itself, from the ``FLOWDESK_MODEL__API_KEY``
            environment variable only (a key written in the settings file is
            refused); a :class:`~pydantic.SecretStr`, masked in ``repr``.
        api_key_file: a file holding the key (one line), mode 0600 (checked);
            ``~`` is expanded.
        stream: ask for streamed replies (the answer shows as it is
            written); ``false`` (``FLOWDESK_MODEL__STREAM=false``) asks each
            turn as one reply, for servers that cannot stream tool calls
            (llama.cpp's llama-cpp-python server); ``flowdesk ask --no-stream``
            turns it off for one command.
    """

    base_url: str | None = None
    model: str | None = None
    timeout_s: RequestSeconds = 60.0
    api_key_name: str = "model_api_key"
    api_key: SecretStr | None = None
    api_key_file: PathOrURL | None = None
    stream: bool = True

    model_config = SettingsConfigDict(extra="forbid")

    @property
    def configured(self) -> bool:
        """Whether a model is set up (``base_url`` and ``model`` both set)."""
        return bool(self.base_url and self.model)


class McpServerSettings(BaseSettings):
    """One MCP server whose tools agents may use (``[mcp_servers.NAME]``).

    Give exactly one of ``command`` (stdio: the server is started as a
    subprocess) or ``url`` (streamable HTTP, e.g. ``http://127.0.0.1:8000/mcp``).

    Attributes:
        command: program and arguments, e.g. ``["uvx", "mcp-server-git"]``.
        url: the server's streamable-HTTP endpoint.
        env: extra environment variables for a ``command`` server. Such a
            server gets only the MCP SDK's default environment (``HOME``,
            ``PATH``, ``USER``, ``SHELL``, ``TERM``, ``LOGNAME``), these, and
            those named in ``env_passthrough``.
        env_passthrough: names of variables of Flowdesk's own environment to
            pass to a ``command`` server when set (e.g. ``["MEMORY_FILE_PATH"]``);
            ``env`` wins over them.
        cwd: working folder for a ``command`` server.
        timeout_s: seconds to wait for the server to start or answer a request.
        require_approval: names of this server's tools (as the server names
            them, e.g. ``["write_file"]``) whose every call a person approves
            first (see :mod:`desktop_app.agent.approvals`); a name the server
            does not have is an error when it connects.
        approve_destructive: every destructive tool of this server needs
            approval too: one not annotated ``readOnlyHint: true`` whose
            ``destructiveHint`` is not ``false`` (the MCP specification's
            default for an unannotated tool is destructive).
    """

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    env_passthrough: list[str] = Field(default_factory=list)
    cwd: Path | None = None
    timeout_s: RequestSeconds = 60.0
    require_approval: list[str] = Field(default_factory=list)
    approve_destructive: bool = False

    def server_env(self) -> dict[str, str]:
        """What a ``command`` server gets besides the SDK's defaults: the
        ``env_passthrough`` variables this process has, then ``env``."""
        passed = {k: os.environ[k] for k in self.env_passthrough if k in os.environ}
        return passed | self.env


class FileToolsSettings(BaseSettings):
    """The built-in file tools of ``flowdesk ask --tools files`` (``[file_tools]``).

    Attributes:
        require_approval: which of them (``read_file``, ``list_folder``) wait
            for a person's yes to each call's exact arguments (see
            :mod:`desktop_app.agent.approvals`); another name is an error
            when the settings load.
    """

    require_approval: list[Literal["read_file", "list_folder"]] = Field(default_factory=list)

    model_config = SettingsConfigDict(extra="forbid")


#: the most model turns one agent run may be given (a run of thousands of
#: turns is a model in a loop, and its conversation grows with each)
MAX_TURNS_CAP = 1000


class AgentSettings(BaseSettings):
    """One agent's own settings (``[agents.NAME]``; ``ask`` is the agent of
    ``flowdesk ask``, ``digest-summary`` the one of ``digest --model``).

    Attributes:
        system: the system prompt its new runs start with (a run keeps the
            one it started with). Unset: ``ask`` says which tools it has
            (or that it has none); ``digest-summary`` sends none.
        max_turns: model turns a run may take before it ends ``failed``
            with no answer (20). A run that used them resumes once this is
            raised above the turns it took (as ``FLOWDESK_AGENTS__ASK__MAX_TURNS``
            for ``ask``); at most :data:`MAX_TURNS_CAP`.
    """

    system: str | None = None
    max_turns: int = Field(default=20, ge=1, le=MAX_TURNS_CAP)

    model_config = SettingsConfigDict(extra="forbid")


def max_turns_variable(agent: str) -> str | None:
    """The environment variable that sets agent ``agent``'s ``max_turns``
    (``FLOWDESK_AGENTS__ASK__MAX_TURNS``), or ``None`` for a name no
    variable can spell as the settings read it back (``digest-summary``:
    a shell takes no ``-`` in a name, and upper-case letters would be read
    as lower case)."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", agent):
        return f"FLOWDESK_AGENTS__{agent.upper()}__MAX_TURNS"
    return None


def max_turns(settings: Settings, agent: str) -> int:
    """The model turns a run of ``agent`` may take (``[agents.NAME] max_turns``,
    20 unless set)."""
    own = settings.agents.get(agent)
    if own is not None:
        return own.max_turns
    # the field's default: AgentSettings() would read MAX_TURNS from the environment
    return int(AgentSettings.model_fields["max_turns"].default)


class ContextSettings(BaseSettings):
    """The execution context ids of the runs this process starts (``[context]``,
    ``FLOWDESK_CONTEXT__TENANT_ID``...): a flow run (``run``, ``start``, the
    app) and an agent run (``ask``, the app's ask). A run started by a
    program gets the context it passes; a child run inherits its parent's.
    The trace id comes from ``TRACEPARENT`` (W3C trace context) when it is
    set, else each run gets its own (:func:`desktop_app.bootstrap.run_context`).

    Attributes:
        tenant_id, user_id, session_id, correlation_id: ``None`` (the
            default) leaves that id out.
    """

    tenant_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    correlation_id: str | None = None

    model_config = SettingsConfigDict(extra="forbid")


class PostgresSettings(BaseSettings):
    """How Flowdesk reaches a PostgreSQL ``db_path`` (``[postgres]``).

    Attributes:
        pooler: ``"none"`` (``db_path`` reaches the server directly or through
            a session-mode pooler) or ``"transaction"`` (through a
            transaction-mode pooler such as PgBouncer ``pool_mode =
            transaction``: every transaction may land on another server
            connection, so Flowdesk never sends LISTEN or a liveness lock
            through it).
        listen_url: a direct ``postgresql://`` URL to the same server, for
            LISTEN (push) and a worker's liveness lock. Without it behind a
            transaction pooler, workers and the app poll, and a dead worker's
            runs are taken over when their lease expires (30 s).
        reconnect_max_s: the longest wait, in seconds, between two tries to
            reach a server that went away: the connection pool's reconnect
            attempts, a worker's liveness/LISTEN session's, and a worker's
            passes while the database cannot be reached (each wait grows
            exponentially with jitter up to this). A worker keeps trying for
            as long as it runs, whatever the outage's length.
        connect_wait_s: how long, in seconds, one try of a transaction waits
            for a pooled connection before it fails (the store tries a
            transaction a few times, then reports the server unreachable).
    """

    pooler: Literal["none", "transaction"] = "none"
    listen_url: str | None = None
    reconnect_max_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    connect_wait_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)

    model_config = SettingsConfigDict(extra="forbid")

    @field_validator("listen_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("listen_url must be a postgresql:// URL")
        return value


class Settings(BaseSettings):
    """Flowdesk settings.

    Attributes:
        db_path: the database: a SQLite file path (``~`` and ``$VARS``
            expanded) or a database URL (``postgresql://...``, kept intact;
            :mod:`desktop_app.bootstrap` picks the backend from it); default
            :func:`default_db_path`.
        synchronous: SQLite ``synchronous``; ``FULL`` (default) survives power
            loss without re-running a finished step; ``NORMAL`` is faster but a
            commit may roll back after power loss.
        fullfsync: also ``PRAGMA fullfsync`` (macOS: flush the drive cache).
        busy_timeout_s: seconds to wait for another process's write lock.
        scope: the store scope runs are saved under: a name of at least one
            character that is not all spaces (``default``, ``work``, ``team a``);
            any other character is allowed (hints quote it for the shell).
            An empty one (``FLOWDESK_SCOPE=``, ``--scope ''``) is refused:
            it would be a scope of its own that no hint could name.
        recover_on_launch: resume interrupted runs when the app starts.
        worker: the app executes runs on a PostgreSQL database as on a SQLite
            file (launch recovery, and the runs it starts, resumes or
            answers): ``FLOWDESK_WORKER=1``. Off (the default), the app on
            PostgreSQL only saves them and the workers (``flowdesk agent``)
            execute them. Ignored on a SQLite file (the app always executes
            there) and by headless commands (they execute what they start).
        recovery: per flow name, what launch recovery does with its interrupted
            runs: ``auto`` (resume them; the default), ``ask`` (list them and
            let the user resume each), ``off`` (leave them alone).
        flows: your own flows, as ``"package.module:attribute"`` (a compiled
            flow, a list of them, or a function returning either); flows are
            also found through the ``flowdesk.flows`` entry-point group.
        pydantic_ai_agents: your Pydantic AI agents whose durable runs
            ``flowdesk resume``, ``flowdesk agent`` and launch recovery may
            resume, as ``"package.module:attribute"`` (a named
            ``pydantic_ai.Agent``, a list of them, or a function returning
            either); also found through the ``flowdesk.pydantic_ai``
            entry-point group (see :mod:`desktop_app.integrations.pydantic_ai`).
        model: the model provider section.
        log_level: level of the rotating log file ``flowdesk.log`` in the
            platformdirs user log folder (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``).
        mcp_servers: MCP servers by name (``flowdesk ask --mcp NAME``).
        file_tools: the built-in file tools (``flowdesk ask --tools files``).
        agents: per agent name, its own settings (its system prompt).
        postgres: how a ``postgresql://`` ``db_path`` is reached (a pooler).
        context: the execution context ids of the runs this process starts.
        theme: the app's Textual theme (``textual-dark``, ``nord``...; the
            command palette's "Change theme"); the app saves it here when
            it is changed. ``None``: Textual's default.
    """

    model_config = SettingsConfigDict(
        env_prefix="FLOWDESK_",
        env_nested_delimiter="__",
        extra="forbid",  # a misspelt key is an error naming the nearest valid one
    )

    db_path: PathOrURL = Field(default_factory=lambda: str(default_db_path()))
    synchronous: Literal["NORMAL", "FULL", "EXTRA"] = "FULL"
    fullfsync: bool = False
    busy_timeout_s: float = Field(default=10.0, gt=0)
    scope: str = "default"
    recover_on_launch: bool = True
    worker: bool = False
    recovery: dict[str, Literal["auto", "ask", "off"]] = Field(default_factory=dict)
    flows: list[str] = Field(default_factory=list)
    pydantic_ai_agents: list[str] = Field(default_factory=list)
    model: ModelSettings = Field(default_factory=ModelSettings)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    mcp_servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    file_tools: FileToolsSettings = Field(default_factory=FileToolsSettings)
    agents: dict[str, AgentSettings] = Field(default_factory=dict)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    theme: str | None = None

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: object) -> object:
        """``debug`` is ``DEBUG`` (as ``logging`` and most tools take it)."""
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("scope")
    @classmethod
    def _named_scope(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(SCOPE_RULE)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=config_file()),
        )


#: ``FLOWDESK_*`` variables that are not settings: the settings file's path,
#: and the test suite's seeds (``FLOWDESK_TEST_*`` is the test suite's too)
NON_SETTING_VARS = ("FLOWDESK_CONFIG", "FLOWDESK_FAULT_SEED")
ENV_PREFIX = "FLOWDESK_"


def known_env_vars() -> list[str]:
    """Every ``FLOWDESK_*`` variable Flowdesk reads: one per setting, one per
    field of a nested section (``FLOWDESK_MODEL__BASE_URL``), and
    :data:`NON_SETTING_VARS`. Names are upper case (env names are matched
    case-insensitively)."""
    names = list(NON_SETTING_VARS)
    for name, field in Settings.model_fields.items():
        var = f"{ENV_PREFIX}{name.upper()}"
        names.append(var)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names += [f"{var}__{sub.upper()}" for sub in field.annotation.model_fields]
    return names


def check_environment(environ: dict[str, str] | None = None) -> None:
    """Refuse a ``FLOWDESK_*`` variable Flowdesk does not read (a misspelt
    one would be ignored silently), naming the nearest valid one (difflib),
    as an unknown key in the settings file is refused.

    Raises:
        ConfigError: an unknown ``FLOWDESK_*`` variable (exit 2).
    """
    from desktop_app.errors import ConfigError

    env = os.environ if environ is None else environ
    known = known_env_vars()
    dict_sections = {
        f"{ENV_PREFIX}{n.upper()}__"
        for n, f in Settings.model_fields.items()
        if getattr(f.annotation, "__origin__", None) is dict
    }
    for var in sorted(env):
        upper = var.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        if upper.startswith(f"{ENV_PREFIX}TEST_") or any(
            upper.startswith(d) for d in dict_sections
        ):
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"valid: {', '.join(known)}"
        raise ConfigError(f"unknown environment variable {var} ({hint}); rename or unset it")


def check_config_file(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a ``FLOWDESK_CONFIG`` that names no settings file: a path that
    does not exist (a typo would be ignored silently, the command running
    without the settings meant for it) or a folder. The default path may be
    missing (no settings yet). The command line checks this; the app does
    not, since its Settings screen creates the file (and its folder).

    Args:
        environ: the environment to read (``os.environ`` when ``None``).

    Raises:
        ConfigError: naming the file and what to do (exit 2).
    """
    from desktop_app.errors import ConfigError

    moved = (os.environ if environ is None else environ).get("FLOWDESK_CONFIG")
    if not moved:
        return
    path = Path(moved).expanduser()
    default = Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"
    if path.is_dir():
        raise ConfigError(
            f"FLOWDESK_CONFIG names {path}, a folder; point it at a TOML file "
            f"(e.g. {path / 'config.toml'}) or unset it"
        )
    if not path.exists():
        raise ConfigError(
            f"FLOWDESK_CONFIG names {path}, which does not exist; fix the path, create the "
            f"file (an empty one is fine), or unset FLOWDESK_CONFIG to use {default}"
        )


def _unparsable_variable(exc: Exception) -> str:
    """What :class:`pydantic_settings.SettingsError` ``exc`` (a ``FLOWDESK_*``
    variable of a list or table setting that is not JSON) means, for a
    person: the variable, why, and the shape it takes. The value is never
    repeated (it may hold a secret: an MCP server's ``env``)."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = match[1] if match else ""
    var = f"{ENV_PREFIX}{field.upper()}"
    given = sorted(v for v in os.environ if v.upper() == var or v.upper().startswith(var + "__"))
    names = ", ".join(given) or var
    why = f"not valid JSON: {exc.__cause__}" if exc.__cause__ is not None else str(exc)
    info = Settings.model_fields.get(field)
    origin = getattr(info.annotation if info else None, "__origin__", None)
    if origin is list:
        example = "mypkg.agents:agent" if field == "pydantic_ai_agents" else "mypkg.flows:approval"
        shape = f"""a JSON list, e.g. {var}='["{example}"]'"""
    elif origin is dict:
        shape = f"a JSON object, e.g. {var}='{{}}', or one variable per key ({var}__NAME__KEY)"
    else:
        shape = f"a JSON object, or one variable per key ({var}__KEY)"
    return f"{names}: {why}; it takes {shape}; fix or unset it"


def load_settings(**overrides: object) -> Settings:
    """Build :class:`Settings`; ``overrides`` (non-None) beat every other source.

    Raises:
        ConfigError: a setting is invalid (the message names it), the
            settings file is unreadable, not UTF-8 text or not TOML (a NUL
            byte included), a ``FLOWDESK_*`` environment variable is
            unknown (:func:`check_environment`) or
            a list- or table-valued one is not JSON (``FLOWDESK_FLOWS='["x"'``).
    """
    import tomllib

    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from desktop_app.errors import ConfigError

    check_environment()
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)  # type: ignore[arg-type]
    except SettingsError as exc:  # a FLOWDESK_* variable that must hold JSON does not
        raise ConfigError(f"invalid settings ({_unparsable_variable(exc)})") from exc
    except OSError as exc:
        raise ConfigError(
            f"cannot read the settings file {config_file()}: {exc.strerror or exc}; fix its "
            "permissions or point FLOWDESK_CONFIG at another file"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the settings file {config_file()} is not text (byte {exc.start} is not UTF-8: "
            "is it a binary file?); fix it or point FLOWDESK_CONFIG at another file"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"the settings file {config_file()} is not valid TOML ({exc}); fix it or point "
            "FLOWDESK_CONFIG at another file"
        ) from exc
    except ValidationError as exc:
        errors = exc.errors()
        scope = clean.get("scope")
        if isinstance(scope, GivenValue) and any(e["loc"] == ("scope",) for e in errors):
            raise ConfigError(
                f"--scope {shell_quote(scope)} is not a scope ({SCOPE_RULE}); give a scope's "
                "name, or "
                "leave --scope out for the scope 'default'"
            ) from exc
        in_env = [v for v in os.environ if v.upper() == "FLOWDESK_SCOPE"]
        if in_env and any(e["loc"] == ("scope",) for e in errors):
            raise ConfigError(
                f"{in_env[0]}={shell_quote(os.environ[in_env[0]])} is not a scope "
                f"({SCOPE_RULE}); set it "
                f"to a scope's name, or unset it (`unset {in_env[0]}`) for the scope 'default'"
            ) from exc
        problems = "; ".join(describe_error(e, Settings) for e in errors)
        raise ConfigError(f"invalid settings ({problems}); {_where_to_fix(errors)}") from exc


def _where_to_fix(errors: list[Any]) -> str:
    """Where the invalid values of ``errors`` (pydantic's) were set: the
    ``FLOWDESK_*`` variables holding them (named, with their values), the
    settings file for the rest when there is one."""
    variables: dict[str, None] = {}
    for error in errors:
        loc = [str(p) for p in error["loc"]]
        for end in range(len(loc), 0, -1):  # ("flows", 0): FLOWDESK_FLOWS
            wanted = "FLOWDESK_" + "__".join(loc[:end]).upper()
            named = [v for v in os.environ if v.upper() == wanted]
            if named:
                variables[named[0]] = None
                break
    said = []
    if variables:
        shown = ", ".join(f"{v}={shell_quote(os.environ[v])}" for v in variables)
        said.append(f"set by {shown}: fix or unset it")
    if len(variables) < len(errors):
        path = config_file()
        said.append(f"fix {path}" if path.is_file() else "fix the FLOWDESK_* variables")
    return "; ".join(said)


def nearest_key(key: str, model: type[BaseModel]) -> str | None:
    """The field of ``model`` closest to a misspelt ``key`` (difflib), or ``None``."""
    close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.5)
    return close[0] if close else None


def describe_error(error: Any, model: type[BaseModel]) -> str:
    """One pydantic error as ``path: message``; an unknown key names the
    nearest valid one (``unknown key 'db_pth' (did you mean 'db_path'?)``)."""
    loc = [str(p) for p in error["loc"]]
    where = ".".join(loc)
    if error["type"] != "extra_forbidden":
        return f"{where}: {error['msg']}"
    owner: type[BaseModel] = model
    for part in loc[:-1]:  # walk into nested sections ([model] ...)
        field = owner.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        owner = annotation
    hint = nearest_key(loc[-1], owner)
    valid = ", ".join(owner.model_fields)
    suggestion = f" (did you mean {hint!r}?)" if hint else f" (valid keys: {valid})"
    return f"unknown key {where!r}{suggestion}"


def recovery_policy(settings: Settings, flow_name: str) -> str:
    """``auto``, ``ask`` or ``off`` for a flow's interrupted runs at launch."""
    return settings.recovery.get(flow_name, "auto")
