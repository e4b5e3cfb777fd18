"""Logs and OpenTelemetry export, set up once per process from the settings.

* Logs go to ``flowdesk.log`` in the platformdirs user log folder
  (``~/.local/state/flowdesk/log/`` on Linux), rotated by
  :class:`logging.handlers.RotatingFileHandler` (1 MiB, 5 old files kept),
  created mode 0600, at ``settings.log_level``. Flowdesk logs ids and
  statuses, never message contents, tool inputs or secrets; a filter also
  masks the values of the process's known secrets, and the password and
  secret query parameters of any URL, should one reach a record.
* Spans are exported over OTLP/HTTP when the standard
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
  set and ``OTEL_SDK_DISABLED`` is not ``true``. Everything else follows
  the OpenTelemetry SDK's own environment handling (headers, timeout,
  compression, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, batch
  sizes): Flowdesk only builds ``OTLPSpanExporter()`` and a batch processor.
  Needs ``pip install 'flowdesk[otel]'``; without it a warning says so. The
  SDK's own log records (a collector that does not answer: "Transient error
  ... retrying") go to the log file, not the terminal; at exit the spans
  still queued get :data:`EXIT_FLUSH_S` seconds to leave, then the export
  stops (the SDK's own exit hook retried an unreachable collector for up to
  its 10 s timeout after every command), and a command says on stderr that
  they were not exported.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import io
import logging
import logging.handlers
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import platformdirs

from desktop_app.config import APP_NAME, Settings
from desktop_app.errors import redact_urls
from desktop_app.extras import install_command
from desktop_app.private import make_private_dirs

log = logging.getLogger(__name__)

#: libraries whose log records go to Flowdesk's log file, never to the terminal
LIBRARY_LOGGERS = ("psycopg", "opentelemetry")
#: loggers whose warnings a command also prints on stderr as they happen: the
#: person at the terminal acts on them (a Ctrl-C that waits for a Pydantic AI
#: tool call in flight to end says so, and how to stop at once)
STDERR_LOGGERS = ("desktop_app.integrations.pydantic_ai.durability",)

LOG_FILE = "flowdesk.log"

#: seconds the spans still queued at exit get to reach the collector (the
#: SDK's exit hook waits up to the export timeout, 10 s by default, with
#: retries, when the collector is down or slow)
EXIT_FLUSH_S = 3.0
_lock = threading.Lock()
_done: dict[str, Any] = {}
_secrets: set[str] = set()


def log_dir() -> Path:
    """The platformdirs user log folder for Flowdesk (not created here)."""
    return Path(platformdirs.user_log_dir(APP_NAME))


#: one part of a key's type prefix (``sk-``, then ``proj-`` of
#: ``sk-proj-``, ``ghp_``): a provider may echo the key without it
_KEY_PREFIX = re.compile(r"[A-Za-z]{1,10}[-_]")


def mask_secret(value: str | None) -> None:
    """Never write ``value`` to the log file, nor in a provider's error
    (:func:`redact` replaces it with ``***``), nor what follows the first
    or second part of its type prefix (``sk-``, ``sk-proj-``, ``ghp_``: a
    provider echoing the key without it) when that is 8 characters or more.
    Values under 4 characters are ignored (masking them would garble
    ordinary text)."""
    if value and len(value) >= 4:
        _secrets.add(value)
        at = 0
        for _ in range(2):
            prefix = _KEY_PREFIX.match(value, at)
            if prefix is None or len(value) - prefix.end() < 8:
                break
            at = prefix.end()
            _secrets.add(value[at:])


#: a bearer token (``Authorization: Bearer xxx``) and an ``sk-``-style API key
_TOKENS = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+|\bsk-[A-Za-z0-9_-]{6,}")


def redact(text: str) -> str:
    """``text`` with every secret masked: each value given to
    :func:`mask_secret` (the configured API key) becomes ``***``, a bearer
    token ``Bearer ***``, an ``sk-...`` key ``sk-***``, and the password and
    secret query parameters of each URL in it ``***``
    (:func:`desktop_app.errors.redact_urls`).

    The one masking function: log records go through it, and so does a
    provider's error text before it is stored, printed or exported (a 401
    that echoes the key).

    Args:
        text: any text (str).

    Returns:
        str: the text with the secrets masked; unchanged when it has none.
    """
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = redact_urls(text)
    return _TOKENS.sub(lambda m: f"{m[1]} ***" if m[1] else "sk-***", text)


class _SecretMask(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = redact(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose files are mode 0600 (created so, or made so: one
    an older version or another program left readable), shared by every
    process of the user: a process that finds the file rotated by another
    since it opened it (renamed to ``.1``) opens the new one, as
    :class:`logging.handlers.WatchedFileHandler` does, instead of writing
    on into the old file and rotating it again (a tryout: a long-lived
    ``flowdesk agent`` pushed a 1 KiB current log to ``.1``)."""

    #: the descriptor of ``flowdesk.log.lock``, opened at the first record
    _lock_fd: int | None = None

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            if os.fstat(fd).st_mode & 0o777 != 0o600:
                os.fchmod(fd, 0o600)
        except OSError:  # not ours to change: written to as it is
            pass
        stream = open(fd, "a", encoding=self.encoding, errors=self.errors)  # noqa: SIM115
        assert isinstance(stream, io.TextIOWrapper)
        return stream

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record``, rotating first when it would pass ``maxBytes``:
        under an exclusive ``flock`` on ``flowdesk.log.lock`` that every
        process writing this log takes, so one process rotates and the
        others follow it (two rotating at once lost lines and pushed nearly
        empty files out of the five kept, a second tryout found)."""
        locked = None
        try:
            if self._lock_fd is None:
                self._lock_fd = os.open(
                    f"{self.baseFilename}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
                )
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            locked = self._lock_fd
        except OSError:  # no lock to be had (a read-only folder): as one process
            pass
        try:
            self._follow()
            super().emit(record)
        finally:
            if locked is not None:
                fcntl.flock(locked, fcntl.LOCK_UN)

    def _follow(self) -> None:
        """Open the file anew when its path names another one than the one
        open here (another process rotated it)."""
        stream = self.stream
        if stream is None:
            return
        try:
            now = os.stat(self.baseFilename)
            mine = os.fstat(stream.fileno())
            moved = (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino)
        except OSError:  # renamed and not made again yet, or closed
            moved = True
        if moved:
            stream.close()
            self.stream = self._open()

    def close(self) -> None:
        super().close()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None


def setup_logging(settings: Settings) -> Path | None:
    """Send Flowdesk's logs to the rotating file at ``settings.log_level``;
    returns the file's path. Idempotent (a second call changes only the level).

    A log folder that cannot be created or written is not fatal: a warning
    on stderr names it and the reason, and ``None`` is returned (no log file
    for this process)."""
    with _lock:
        root = logging.getLogger("desktop_app")
        root.setLevel(settings.log_level)
        handler = _done.get("log_handler")
        if handler is None:
            folder = log_dir()
            try:
                make_private_dirs(folder)
                handler = _PrivateRotatingFileHandler(
                    folder / LOG_FILE, maxBytes=1024 * 1024, backupCount=5, encoding="utf-8"
                )
            except OSError as exc:
                if "log_warned" not in _done:
                    _done["log_warned"] = True
                    print(
                        f"flowdesk: cannot write the log file in {folder} "
                        f"({exc.strerror or exc}); this command keeps no log. Fix the "
                        "folder's permissions (or XDG_STATE_HOME)",
                        file=sys.stderr,
                    )
                return None
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s")
            )
            handler.addFilter(_SecretMask())
            root.addHandler(handler)
            # psycopg's pool warns from its own threads ("error connecting")
            # while a server is unreachable; without a handler Python prints
            # that on stderr, in the middle of the lines Flowdesk writes there
            for name in LIBRARY_LOGGERS:
                library = logging.getLogger(name)
                library.addHandler(handler)
                library.propagate = False
            _done["log_handler"] = handler
        handler.setLevel(settings.log_level)
        return Path(handler.baseFilename)


def warnings_on_stderr() -> None:
    """Print the warnings of :data:`STDERR_LOGGERS` on stderr as ``flowdesk:
    MESSAGE`` (they still reach the log file). For a command, never the app
    (its screen is the terminal). Idempotent."""
    with _lock:
        if "stderr_handler" in _done:
            return
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("flowdesk: %(message)s"))
        handler.addFilter(_SecretMask())
        for name in STDERR_LOGGERS:
            logging.getLogger(name).addHandler(handler)
        _done["stderr_handler"] = handler


def otlp_requested() -> bool:
    """Whether the environment names an OTLP endpoint and does not disable
    the SDK (``OTEL_SDK_DISABLED=true``, any case, as the SDK reads it); the
    SDK reads the values itself."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return any(os.environ.get(n) for n in names)


def _flush_at_exit(provider: Any, exporter: Any, *, tell: bool) -> None:
    """The queued spans get :data:`EXIT_FLUSH_S` to reach the collector: the
    provider shuts down (exporting them) in a thread this waits for that
    long (the SDK's own waits ignore their timeouts); then the exporter is
    shut down, which stops its retries, and what is left is dropped. With
    ``tell``, a line on stderr says how many spans its exports failed to
    send (or that one is still unanswered). A Ctrl-C
    while it waits ends the wait (no traceback: the work is done)."""
    done = threading.Thread(target=provider.shutdown, name="flowdesk-otel-exit", daemon=True)
    try:
        done.start()
        done.join(EXIT_FLUSH_S)
        if done.is_alive():
            exporter.shutdown()  # its retries stop; an export in flight fails
            done.join(0.5)
    except KeyboardInterrupt:
        return
    if exporter.lost or done.is_alive():  # refused, unreachable, or still no answer
        what = f"{exporter.lost} span(s)" if exporter.lost and not done.is_alive() else "spans"
        log.warning("%s not exported: the collector did not accept them", what)
        if tell:
            print(
                f"flowdesk: {what} not exported: the OTLP collector did not accept them within "
                f"{EXIT_FLUSH_S:g} s (is it running at OTEL_EXPORTER_OTLP_ENDPOINT? the log "
                "says why)",
                file=sys.stderr,
            )


def setup_tracing(*, tell_at_exit: bool = False) -> bool:
    """Install an SDK tracer provider exporting over OTLP/HTTP when
    :func:`otlp_requested`; returns whether spans are exported. Idempotent.
    Spans still queued are flushed when the process exits normally, for at
    most :data:`EXIT_FLUSH_S` seconds (``tell_at_exit``: a line on stderr
    says when they could not all be sent; a command, never the app)."""
    with _lock:
        if "tracing" in _done:
            return bool(_done["tracing"])
        _done["tracing"] = False
        if not otlp_requested():
            return False
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

            from desktop_app.flow.tracing import ROOT_TRACE_ID, RunTraceIds

            class _Ids(RandomIdGenerator, RunTraceIds):
                """Random ids, but a run's root span takes the run's trace id."""

                def generate_trace_id(self) -> int:
                    return ROOT_TRACE_ID.get(0) or super().generate_trace_id()

            class _Exporter(OTLPSpanExporter):
                """The SDK's OTLP/HTTP exporter, counting the spans of the
                exports that failed (said at exit)."""

                lost = 0

                def export(self, spans: Any) -> SpanExportResult:
                    result = super().export(spans)
                    if result is not SpanExportResult.SUCCESS:
                        self.lost += len(spans)
                    return result

        except ImportError:
            log.warning("OTLP endpoint set but OpenTelemetry is not installed")
            print(
                "flowdesk: OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry exporter "
                f"is not installed, so no spans are exported: {install_command('otel')}",
                file=sys.stderr,
            )
            return False
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: APP_NAME}))
        provider = TracerProvider(resource=resource, shutdown_on_exit=False, id_generator=_Ids())
        exporter = _Exporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        flush = functools.partial(_flush_at_exit, provider, exporter, tell=tell_at_exit)
        atexit.register(flush)
        _done["flush"] = flush
        trace.set_tracer_provider(provider)
        log.info("exporting spans over OTLP/HTTP as service %s", resource.attributes[SERVICE_NAME])
        _done["tracing"] = True
        return True


def flush_before_hard_exit() -> None:
    """What the exit hooks do for spans, now, for a process about to leave
    by ``os._exit`` (which runs none: ``flowdesk agent`` past its grace):
    the open spans end ``interrupted`` and the queued ones get
    :data:`EXIT_FLUSH_S` to leave (a line says when they did not)."""
    flush = _done.pop("flush", None)
    if flush is None:
        return
    atexit.unregister(flush)
    tracing = sys.modules.get("desktop_app.flow.tracing")
    if tracing is not None:
        tracing.end_open_spans()
    flush()


def setup(settings: Settings, *, command: bool = False) -> None:
    """Logs and tracing for this process (see the module docstring);
    ``command``: a command, not the app (its terminal may be told things)."""
    setup_logging(settings)
    setup_tracing(tell_at_exit=command)


def instrument_engine(engine: Any) -> None:
    """Record the engine's runs and steps as spans when tracing is exported."""
    if _done.get("tracing"):
        from desktop_app.flow.tracing import trace_engine

        trace_engine(engine)
