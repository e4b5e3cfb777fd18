"""The one error tree of Flowdesk.

Every error Flowdesk raises derives from :class:`FlowdeskError` and carries a
message that says what to do next. Control-flow signals that must never be
swallowed by ``except Exception`` (cancellation, interrupts) live in
``desktop_app.flow.signals`` and derive from ``BaseException`` instead, as
DBOS does for its cancel errors.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from datetime import UTC, datetime

from desktop_app.process_state import STOPPED, stopped_pid
from desktop_app.textsafe import one_line, quoted, shell_quote
from desktop_app.words import plural


def iso_utc(ts: float, timespec: str = "seconds") -> str:
    """UTC epoch seconds as ISO-8601 UTC to the second (``2026-12-01T11:25:43Z``;
    ``timespec="milliseconds"``: ``…43.120Z``), the way a time appears in a
    message a person reads. A time past what :mod:`datetime` can show (a
    lease set "forever", ``1e12``) is given as its epoch seconds, never an
    error inside an error message."""
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return f"{ts:.0f} (UTC epoch seconds)"


#: query parameters whose value is a secret, masked wherever a URL is shown
#: (``?password=...`` as well as ``user:password@``): libpq's (a database
#: URL) and those that carry a credential in an HTTP URL (an MCP server's, a
#: model provider's). Compared case-insensitively and without ``-``/``_``
#: (``API-Key``, ``api_key`` and ``apikey`` are one name); a name ending in
#: one of :data:`SECRET_SUFFIXES` is a secret too (``client_secret``,
#: ``X-Amz-Signature``, ``refresh_token``)
SECRET_PARAMS = frozenset(
    {
        "password",
        "sslpassword",
        "passwd",
        "pwd",
        "pass",
        "api_key",
        "key",
        "token",
        "access_token",
        "auth",
        "authorization",
        "secret",
        "sig",
        "signature",
        "credential",
        "credentials",
    }
)
#: endings of a query parameter's name that make it a secret (compared as
#: :data:`SECRET_PARAMS` is)
SECRET_SUFFIXES = ("password", "passwd", "secret", "token", "apikey", "signature")


def _squeezed(name: str) -> str:
    """A parameter name as :data:`SECRET_PARAMS` compares it: decoded,
    lower case, without ``-``, ``_`` and surrounding spaces."""
    from urllib.parse import unquote

    return unquote(name).strip().lower().replace("-", "").replace("_", "")


_SECRET_NAMES = frozenset(_squeezed(name) for name in SECRET_PARAMS)


def secret_param(name: str) -> bool:
    """Whether the query parameter ``name`` (str, as written in a URL:
    ``api_key``, ``API-Key``, ``X-Amz-Signature``) holds a secret: one of
    :data:`SECRET_PARAMS`, or a name ending in one of :data:`SECRET_SUFFIXES`."""
    squeezed = _squeezed(name)
    return squeezed in _SECRET_NAMES or squeezed.endswith(SECRET_SUFFIXES)


def has_secret(url: str) -> bool:
    """Whether the URL ``url`` (str: a database's, an MCP server's, a model
    provider's) holds a secret: a password in its ``user:password@`` part or
    a query parameter that :func:`secret_param` names (``?password=...``,
    ``&api_key=...``). ``False`` for a file path."""
    from urllib.parse import urlsplit

    if "://" not in url:
        return False
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            return True
    except ValueError:  # a malformed netloc (bad port, bracket): treat it as holding one
        return True
    params = [*parts.query.split("&"), *parts.fragment.split("&")]  # `#token=...` too
    return any(secret_param(param.partition("=")[0]) for param in params if param)


def redact(url: str, mask: str | None = "***") -> str:
    """A URL without its secrets: a database URL, an MCP server's or a model
    provider's (the one function every message, log line and screen uses).

    Args:
        url: a URL (``postgresql://alice:pw@db/x?sslpassword=k``,
            ``http://bob:pw@host/mcp?api_key=k``) or anything else (a file
            path: returned unchanged).
        mask: what replaces each secret in a message (``alice:***@``,
            ``?password=***``); ``None`` leaves the secrets out (``alice@``,
            the secret parameters dropped): a database URL that still
            connects (libpq then reads the password from ``PGPASSWORD`` or
            ``~/.pgpass``), for printed hints.

    Returns:
        str: the URL with the password of its ``user:password@`` part and
        the value of every query (or fragment) parameter :func:`secret_param`
        names masked or left out; a URL too malformed to take apart (an unclosed ``[``)
        keeps only its scheme (``http://***``).
    """
    from urllib.parse import urlsplit, urlunsplit

    if not has_secret(url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.partition("://")[0] + "://" + (mask or "")
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _at, hostport = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        if colon and user and mask is not None:
            user += f":{mask}"
        netloc = (user + "@" if user else "") + hostport

    def kept(text: str) -> str:
        """``text``'s ``&``-separated parameters, each kept as written
        (libpq reads "+" as "+", not a space) or its secret value masked."""
        out = []
        for param in text.split("&") if text else ():
            key = param.partition("=")[0]
            if not secret_param(key):
                out.append(param)
            elif mask is not None:
                out.append(f"{key}={mask}")
        return "&".join(out)

    # the fragment too: an OAuth-style `#access_token=...` is a secret as well
    return urlunsplit((parts.scheme, netloc, parts.path, kept(parts.query), kept(parts.fragment)))


def redact_argv(argv: Sequence[str]) -> str:
    """A command line (an MCP server's ``command``) as messages show it,
    joined by spaces, without its secrets: the value of an option whose name
    :func:`secret_param` names (``--token X``, ``--api-key=X``,
    ``--password X``), and each URL's as :func:`redact_urls` masks them.
    An environment assignment (``env GITHUB_TOKEN=X``) and an HTTP header
    (``--header "Authorization: Basic X"``, ``-H "X-Api-Key: X"``) whose name
    :func:`secret_param` calls secret are masked too; the configured keys
    in the rest are :func:`desktop_app.observability.redact`'s."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append("***")
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        if arg.startswith("-") and secret_param(name.lstrip("-")):
            if eq:
                shown.append(f"{name}=***")
            else:
                shown.append(arg)
                hide_next = True
            continue
        if eq and not arg.startswith("-") and "/" not in name and secret_param(name):
            shown.append(f"{name}=***")  # an environment assignment (`env GITHUB_TOKEN=...`)
            continue
        header, colon, _rest = arg.partition(":")
        if colon and " " not in header and "/" not in header and _secret_header(header):
            shown.append(f"{header}: ***")  # `Authorization: Basic ...`, `X-Api-Key: ...`
            continue
        shown.append(redact_urls(arg))
    return " ".join(shown)


def _secret_header(name: str) -> bool:
    """Whether an HTTP header named ``name`` carries a credential:
    ``Authorization``, ``Proxy-Authorization``, ``Cookie``, or a name
    :func:`secret_param` calls secret (``X-Api-Key``, ``X-Auth-Token``)."""
    return _squeezed(name) in ("proxyauthorization", "cookie") or secret_param(name)


#: a URL in free text: a scheme, ``://`` and what follows up to a space or a
#: quote, less the punctuation that ends a sentence or closes a parenthesis
_URL_IN_TEXT = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>`]*[^\s'"<>`.,;:!?)]""")


def redact_urls(text: str) -> str:
    """``text`` (str: a message, a log line, a library's error) with every
    URL in it passed through :func:`redact` (``***`` for each secret); the
    rest of the text unchanged."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact(m[0]), text)


class FlowdeskError(Exception):
    """Root of every Flowdesk error."""


# --- configuration -------------------------------------------------------


class ConfigError(FlowdeskError):
    """A setting is invalid or a required setting is missing."""


class InputError(FlowdeskError):
    """Input given by the user (a folder, a path, a value) is unusable."""


class FolderNotWritableError(InputError):
    """A folder a flow must change (``tidy``: move files in it, write its undo
    list there) cannot be written: read-only file system or no permission."""


class RunCannotContinueError(InputError):
    """A step found that its run cannot go on whatever is retried (a tidy
    replayed or forked from a checkpoint taken after its plan: the planned
    moves are the other run's). The step, and so the run, fails with it;
    its message says what to do instead, and the command line prints no
    ``resume`` for such a run (a resume fails the same way)."""


class ClockSkewError(FlowdeskError):
    """This process's clock disagrees with the clock of the store it writes
    to by more than the tolerance (a process started under ``faketime``, a
    clock set by hand): Flowdesk stamps checkpoints, deadlines and timers with
    it, so nothing was written. ``skew_s``: this clock minus the store's
    (seconds; negative when behind)."""

    def __init__(self, skew_s: float, where: str, tolerance_s: float) -> None:
        self.skew_s = skew_s
        self.where = where
        self.tolerance_s = tolerance_s
        super().__init__(
            f"this process's clock is {self.off()} "
            f"(more than the {tolerance_s:g} s allowed); nothing was written: a run's "
            "checkpoints, deadlines and timers would be dated wrong (an answer after its "
            "deadline taken, a timer fired early). Run the command again with the system "
            "clock (without faketime, FAKETIME or LD_PRELOAD), or set the system clock right"
        )

    def off(self) -> str:
        """``2 d 0 h 0 min 3 s ahead of the clock of WHERE``: how far off, and which way."""
        way = "ahead of" if self.skew_s > 0 else "behind"
        return f"{_span(abs(self.skew_s))} {way} the clock of {self.where}"


def _span(seconds: float) -> str:
    """``3600.2`` -> ``1 h 0 min 0 s``; ``2.5`` -> ``2.5 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    d, rest = divmod(whole, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{d} d"] if d else []
    if d or h:
        parts.append(f"{h} h")
    parts += [f"{m} min", f"{sec} s"]
    return " ".join(parts)


# --- storage -------------------------------------------------------------


class StoreError(FlowdeskError):
    """The store could not read or write; the operation did not take effect.

    Raised for a locked, full or read-only disk, a file that is not a SQLite
    database, or any other failure of the storage layer. Nothing that was
    committed before is lost.
    """


class DatabaseLockedError(StoreError):
    """Another process held the database's write lock (or Flowdesk's write
    gate) longer than the busy timeout; nothing was written. Trying again
    later may succeed; the message names the holding process when
    ``/proc/locks`` tells it, and ends with :attr:`ADVICE`."""

    #: what the message ends with: what a person can do about it
    ADVICE = " Retry, or raise FLOWDESK_BUSY_TIMEOUT_S."


class DatabaseUnreachableError(StoreError):
    """The connection to the database server was lost or could not be made
    (PostgreSQL down, restarting, or cut off; its SQLSTATE class 08, 57P01-3,
    or a pooled connection that did not come within ``postgres.connect_wait_s``);
    nothing of the transaction it cut off was committed. It heals once the
    server is back: a ``flowdesk agent`` worker keeps retrying (with backoff
    up to ``postgres.reconnect_max_s``) instead of exiting."""


class DatabaseOpenError(StoreError):
    """The database file cannot be opened (missing directory, no permission,
    not a SQLite file)."""


class ServerUnreachableAtOpenError(DatabaseOpenError, DatabaseUnreachableError):
    """The database server could not be reached when the database was
    opened (the connection refused or timed out, the server starting up or
    shutting down: libpq's own failure, SQLSTATE class 08 or 57P01-3), as
    opposed to a wrong database name or password, which no wait heals. Both
    a :class:`DatabaseOpenError` and a :class:`DatabaseUnreachableError`: a
    ``flowdesk agent`` worker starting tries again until the server is up,
    as a running one does through an outage."""


class DatabaseReadOnlyError(DatabaseOpenError):
    """The database is on a read-only file system (``EROFS``: a read-only
    mount, a read-only bind mount, a CD or a locked card): SQLite writes
    beside the file even to read it (its ``-wal`` and ``-shm`` files), so it
    could not be opened, or nothing could be written. The message says to
    copy the file to a writable folder (Flowdesk has no read-only mode)."""

    def __init__(self, path: str, said: str) -> None:
        self.path = path
        super().__init__(
            f"the database {path} is on a read-only file system (EROFS; SQLite said "
            f"{said!r}); nothing was written. Flowdesk writes beside the file even to read "
            "it (its -wal and -shm files) and has no read-only mode: copy the file (with "
            "its -wal file, if there is one) into a writable folder and open the copy "
            "(--db PATH), or remount the file system read-write."
        )


class DatabaseMissingError(DatabaseOpenError):
    """No database file at ``path`` (and the store was not asked to create
    one). The message names the command that creates it: ``flowdesk --db
    PATH db apply``, or the CLI's own hint (:meth:`for_command`, which
    repeats the ``--db`` and ``--scope`` the user gave).

    Attributes:
        path: the missing file (str); apply: the command suggested.
    """

    def __init__(self, path: str, apply: str | None = None) -> None:
        self.path = path
        self.apply = apply if apply is not None else f"flowdesk --db {shell_quote(path)} db apply"
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(folder):
            super().__init__(f"no database at {path}; run `{self.apply}` first.")
        else:  # `db apply` does not make folders: a mistyped path stays an error
            super().__init__(
                f"no database at {path}, and its folder {folder} does not exist; "
                f"create it with `mkdir -p {shell_quote(folder)}`, then run `{self.apply}`."
            )

    def for_command(self, apply: str) -> DatabaseMissingError:
        """The same error suggesting ``apply`` (as the CLI prints its hints)."""
        return DatabaseMissingError(self.path, apply)


class DatabaseNotAFileError(DatabaseOpenError, InputError):
    """``--db`` names something that is not a regular file: a folder, a
    FIFO, a socket or a device (opening a FIFO would block forever). Nothing
    was opened; bad input (exit 2)."""


class QueryRefusedError(StoreError):
    """The database refused a domain query itself (``store.query``): a table
    or column it names is missing, its SQL is wrong, it tried to write, or
    the store has no SQL. Running it again fails the same way, unlike a
    locked or unreachable database. A step's ``ctx.query`` turns it into
    :class:`DomainReadError`, so the step fails under its ``on_error`` policy
    instead of stopping the run."""


class NoSessionError(StoreError):
    """A PostgreSQL feature that needs a session of its own (LISTEN, a
    worker's liveness lock) was asked for while the database goes through a
    transaction-mode pooler and no direct URL (``postgres.listen_url``) is set."""


class DatabaseCorruptError(StoreError):
    """SQLite found the database file damaged (``database disk image is
    malformed``: a page overwritten or cut off on disk). Raised by whatever
    read or write met the damage, which wrote nothing (what the command
    committed before it met the damage stays). Only a backup gives the lost
    rows back: ``export`` stops at the damage too, and a resume meets it
    again, so the command line prints ``doctor``, not ``resume``.

    Attributes:
        path: the database file (str, ``""`` when unknown).
        detail: what SQLite said (str).
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        where = f" ({path})" if path else ""
        super().__init__(
            f"the database{where} is corrupt: {detail}. Restore it from a backup; what met "
            "the damage wrote nothing."
        )


class WalMissingError(StoreError):
    """The database's ``-wal`` file was deleted while the database was in use,
    so SQLite reports a bare "disk I/O error"; nothing was written."""


#: free space a paused run needs to resume (bytes): room for the database's
#: write-ahead log to grow to its checkpoint size (1000 pages of 4 KiB) plus
#: 1 MiB for the step's own output
RESUME_SPACE_BYTES = 1000 * 4096 + 2**20


def _amount(n_bytes: int) -> str:
    """``5 MiB`` (whole MiB, rounded up), or ``120 KiB`` below one MiB."""
    if n_bytes >= 2**20:
        return f"{-(-n_bytes // 2**20)} MiB"
    return f"{-(-n_bytes // 1024)} KiB"


class DiskFullError(StoreError):
    """A disk is full (ENOSPC): nothing more was written and nothing committed
    is lost. By default the message is the one for a run: it stopped at its
    last checkpoint, shown ``interrupted`` (stored ``running``, no process
    holding it; never ``failed``), and ``flowdesk resume --all`` continues it
    once space is free. The command line
    names the exact command to run instead (:meth:`for_command`), and a
    command that executes no run says nothing of a stopped run.

    When what the user gave was not saved at all (an answer: the run still
    waits for it), ``unsaved`` says so and ``then`` is the same command again.

    Attributes:
        where: what could not be written (the database, its ``-shm`` index...).
        needed_bytes: free space resuming needs (bytes).
        unsaved: what was not saved, as a clause (``"the answer was not
            saved (run R still waits for it)"``), or ``None``.

    ``again``, when given, is what to do once space is free, in words
    (``"answer it again"``: the app, where no command is typed), instead
    of running ``then``.
    """

    def __init__(
        self,
        where: str,
        needed_bytes: int = RESUME_SPACE_BYTES,
        *,
        then: str = "flowdesk resume --all",
        paused: bool = True,
        unsaved: str | None = None,
        again: str | None = None,
        queued: str | None = None,
    ) -> None:
        self.where = where
        self.needed_bytes = needed_bytes
        self.unsaved = unsaved
        after = f"run `{then}`" if again is None else again
        free = f"Free at least {_amount(needed_bytes)} on that disk, then {after}."
        if queued is not None:
            text = (
                f"the disk holding {where} is full; the run completed and {queued}, to be "
                f"made by `{then}` (nothing saved before is lost). {free}"
            )
        elif unsaved is not None:
            text = (
                f"the disk holding {where} is full, so {unsaved}; nothing saved before is "
                f"lost. {free}"
            )
        elif paused:
            text = (
                f"the disk holding {where} is full; nothing more was written and the run "
                f"stopped at its last saved step, shown as interrupted (nothing lost). {free}"
            )
        else:
            text = (
                f"the disk holding {where} is full (no space left on the device); nothing "
                f"more was written and nothing saved before is lost. {free}"
            )
        super().__init__(text)

    def stopping_no_run(self, again: str) -> DiskFullError:
        """The same error for a caller that was executing no run (opening a
        store, a delivery pass), ending with ``again``: what follows once
        space is free, in words."""
        return DiskFullError(self.where, self.needed_bytes, paused=False, again=again)

    def for_command(
        self, then: str, *, paused: bool, unsaved: str | None = None, queued: str | None = None
    ) -> DiskFullError:
        """The same error ending with ``then``, the command to run once space
        is free; ``paused``: a run was executing and stopped (else the
        command executes no run, e.g. ``db apply``, and is itself ``then``);
        ``unsaved``: what the command was given and did not save (then
        ``then`` is the command again); ``queued``: the run completed and
        only its side effects are left (``"1,362 moves are queued"``), which
        ``then`` makes."""
        return DiskFullError(
            self.where, self.needed_bytes, then=then, paused=paused, unsaved=unsaved, queued=queued
        )

    @staticmethod
    def of_step(exc: BaseException, run_id: str, step_id: str) -> DiskFullError | None:
        """The pause for a step that failed with ENOSPC/EDQUOT, else None."""
        import errno

        if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
        name = exc.filename or "its output"
        return DiskFullError(f"{name} (run {run_id}, step {step_id})")


class CommitUnknownError(StoreError):
    """The connection to PostgreSQL dropped during COMMIT (or during a
    statement that commits by itself) and whether the transaction landed
    could not be found out: the server stayed unreachable
    while the store asked (on new connections) for
    ``RESOLVE_TIMEOUT_S``, still held the transaction open, or no longer
    knows it. Nothing is assumed either way: resuming the run once the
    server is back goes on from what the server kept (a step whose commit
    landed does not run again).

    Attributes:
        where: the database URL without its password.
        xid: the transaction id (``pg_current_xact_id()``), as text; ``None``
            for a statement that commits by itself (an append sent with no
            ``BEGIN``), whose id the client never heard.
        reason: why the outcome is unknown.
    """

    def __init__(self, where: str, xid: str | None, reason: str, *, what: str = "") -> None:
        self.where = where
        self.xid = xid
        self.reason = reason
        dropped = (
            f"dropped during COMMIT and whether transaction {xid} landed"
            if xid is not None
            else f"dropped during {what}, a statement that commits by itself, and whether it landed"
        )
        super().__init__(
            f"the connection to PostgreSQL ({where}) {dropped} is unknown: {reason}. Nothing is "
            "assumed; once the server is back, resume the run: it goes on from what the server "
            "kept."
        )


class SchemaError(StoreError):
    """The database schema is missing, edited since it was applied, or newer
    than this version of Flowdesk."""


class SchemaMissingError(SchemaError):
    """The file has no (or not all of the) Flowdesk schema; run ``flowdesk db apply``."""


class SchemaMissingDiskFullError(SchemaMissingError):
    """The database lacks schema files and the disk holding it is full:
    applying them (``db apply``, or a launch that applies them) stopped
    there, and would stop again. The message says the disk is full, what
    to free, and the ``db apply`` command to run after.

    Attributes:
        path: the database file (str); free_bytes: free space on its disk
        (bytes, for this user); needed_bytes: what to free at least (bytes).
    """

    def __init__(self, missing: str, path: str, free_bytes: int, apply: str) -> None:
        self.path, self.free_bytes = path, free_bytes
        self.needed_bytes = RESUME_SPACE_BYTES
        need = f"{self.needed_bytes / 2**20:.0f} MiB"
        super().__init__(
            f"{missing}, and the disk holding {path} is full ({free_bytes // 1024} KiB free), "
            f"so applying them stops there. Free at least {need} on that disk, then run "
            f"`{apply}`."
        )


class SchemaChecksumError(SchemaError):
    """An applied schema file differs from the one recorded in the ledger."""


class SchemaTooNewError(SchemaError):
    """The file holds schema files this version of Flowdesk does not know."""


class SchemaRecordsLostError(SchemaError):
    """The file holds Flowdesk's tables but not its record of the schema
    files applied (the ledger table): dropped outside Flowdesk. ``db apply``
    cannot tell what is applied (it would create tables that exist), so
    nothing is applied or opened; only a backup gives the records back."""


class SchemaObjectMissingError(SchemaError):
    """A table of Flowdesk's schema is gone from a database whose records say
    the schema is applied: dropped outside Flowdesk (by hand, by another
    program). ``db apply`` does not create it again (its records say every
    file is applied) and a resume would meet the same gap, so the command
    line prints ``doctor``, which lists everything missing, not ``resume``.
    What met the gap wrote nothing; only a backup gives the rows back.

    Attributes:
        table: the missing table's name (str).
    """

    def __init__(self, table: str, where: str = "", *, pooler_note: bool = False) -> None:
        self.table = table
        at = f" ({where})" if where else ""
        pooler = (
            " If --db goes through a transaction-mode pooler (PgBouncer) and `doctor` finds "
            'nothing missing, set postgres.pooler = "transaction" instead.'
            if pooler_note
            else ""
        )
        super().__init__(
            f"the database{at} has no table {table}, which Flowdesk's schema creates: it was "
            "dropped outside Flowdesk, and `db apply` does not create it again (its records "
            "say the schema is applied); nothing more was written. Restore the database from "
            "a backup (stop every Flowdesk process using it first); `doctor` lists everything "
            f"missing.{pooler}"
        )


class DuplicateWaitIdError(StoreError):
    """A checkpoint given to the store carries two or more waits with one
    wait id (``Wait.wait_id`` keys the ``waits`` table; an answer or a
    signal names the one wait it resolves by it). The caller's bug, not
    another writer's save: nothing was written, and writing the same
    checkpoint again fails the same way. Give each wait of a run its own
    id (the driver's read ``RUN:STEP:N``).

    Attributes:
        run_id: the checkpoint's run.
        revision: the checkpoint's revision.
        wait_id: the id two of its waits share.
    """

    def __init__(self, run_id: str, revision: int, wait_id: str, count: int) -> None:
        self.run_id = run_id
        self.revision = revision
        self.wait_id = wait_id
        super().__init__(
            f"run {run_id}: checkpoint revision {revision} carries {count} waits with wait id "
            f"{wait_id!r}; each wait of a run needs an id of its own, so nothing was saved "
            "(a bug in the code that built the checkpoint, not another writer's save)"
        )


class CopyTargetNotEmptyError(StoreError):
    """``flowdesk db copy``: the target database already holds runs; nothing
    was copied (copy into a freshly applied database).

    Attributes:
        where: the target, its password masked (:func:`redact`).
        runs: flow runs it holds (all scopes).
        agent_runs: agent runs it holds (all scopes).
        scopes: the scopes those runs are in, sorted (``runs`` lists one
            scope: the command that shows them needs ``--scope``).
    """

    def __init__(
        self, where: str, runs: int, agent_runs: int, scopes: tuple[str, ...] = ()
    ) -> None:
        self.where, self.runs, self.agent_runs = where, runs, agent_runs
        self.scopes = scopes
        held = [plural(runs, "flow run"), plural(agent_runs, "agent run")]
        self.held = " and ".join(h for h, n in zip(held, (runs, agent_runs), strict=True) if n)
        super().__init__(
            f"{where} already holds {self.held}; nothing was copied. Copy into a new, empty "
            "database once db apply has created its tables there."
        )

    def for_command(self, *looks: str) -> str:
        """The message with the commands that list what the target holds
        (``looks``: ``flowdesk --db URL --scope S runs`` with the user's URL,
        its password left out, one per scope in :attr:`scopes`)."""
        said = str(self).removesuffix(".")
        return f"{said}; see what it holds with " + " and ".join(f"`{c}`" for c in looks)


class CopySourceBusyError(StoreError):
    """``flowdesk db copy``: live processes of this host hold runs of the
    source file (a lease, a running LangGraph thread or an outbox intent
    being sent); nothing was copied, since a worker on the target would run
    them while those processes still do.

    Attributes:
        source: the source file.
        held: one line per held run, ``run R (flow F, scope S): process PID
            on host H (owner O)``, at most :data:`SHOWN` of them.
        count: how many runs are held in all.
    """

    SHOWN = 5

    def __init__(self, source: str, held: list[str]) -> None:
        self.source, self.count = source, len(held)
        self.held = tuple(held[: self.SHOWN])
        more = f"; and {self.count - self.SHOWN} more" if self.count > self.SHOWN else ""
        # a flow or agent run is continued by a worker on the target, a
        # LangGraph thread by its own program (no worker runs a graph)
        threads = sum(line.startswith(THREAD_NOUN) for line in held)
        runs = self.count - threads
        stopped = []
        if runs:
            stopped.append(
                "a stopped run is copied as interrupted and the first worker continues it"
            )
        if threads:
            stopped.append(
                f"a stopped {THREAD_NOUN} is copied as interrupted and its own program continues "
                "it, with its checkpointer opened on the new database"
            )
        there = (
            "a worker on the target"
            if not threads
            else "their program on the target"
            if not runs
            else "a worker or program on the target"
        )
        super().__init__(
            f"{source}: {plural(self.count, 'run is', 'runs are')} executing in a live process "
            f"of this host: {'; '.join(self.held)}{more}. Nothing was copied: {there} "
            "would run them while that process still does. Let them finish, or stop "
            f"that process (Ctrl-C in its terminal; {'; '.join(stopped)}), then copy again."
        )

    def for_command(self, again: str) -> str:
        """The message with the command that copies again (``again``)."""
        return f"{str(self).removesuffix('.')}: `{again}`"


#: how a LangGraph thread is named in ``db copy``'s lines
THREAD_NOUN = "LangGraph thread"


class CopySourceChangedError(CopySourceBusyError):
    """``flowdesk db copy``: runs of the source file changed after the copy
    read them (a process of the file resumed, answered or canceled them
    meanwhile), so they could not be marked moved as copied; nothing was
    copied (the copy would hold them as they were, and both places would
    run them).

    Attributes: as :class:`CopySourceBusyError`; ``held`` are lines ``run R
    (flow run)`` / ``run R (agent run)``.
    """

    def __init__(self, source: str, changed: list[str]) -> None:
        self.source, self.count = source, len(changed)
        self.held = tuple(changed[: self.SHOWN])
        more = f"; and {self.count - self.SHOWN} more" if self.count > self.SHOWN else ""
        it = "it" if self.count == 1 else "them"
        StoreError.__init__(  # not CopySourceBusyError's words: no live holder is known
            self,
            f"{source}: {plural(self.count, 'run')} changed while the copy read {it} (a "
            f"process of that file resumed, answered or canceled {it} meanwhile): "
            f"{'; '.join(self.held)}{more}. Nothing was copied: the copy would hold {it} as "
            "before that change. Let that process finish, or stop it, then copy again.",
        )


class CopySourceMovedError(StoreError):
    """``flowdesk db copy``: an earlier copy moved unfinished runs of the
    source file to PostgreSQL, whose workers execute them; copying them again
    would run them in two places, so nothing was copied.

    Attributes:
        source: the source file.
        moved: one line per moved run, ``run R (flow run): moved to URL``,
            at most :data:`CopySourceBusyError.SHOWN` of them.
        count: how many in all.
    """

    def __init__(self, source: str, moved: list[str]) -> None:
        self.source, self.count = source, len(moved)
        self.moved = tuple(moved[: CopySourceBusyError.SHOWN])
        extra = self.count - CopySourceBusyError.SHOWN
        more = f"; and {extra} more" if extra > 0 else ""
        super().__init__(
            f"{source}: {plural(self.count, 'unfinished run')} moved already, by an earlier "
            f"db copy: {'; '.join(self.moved)}{more}. Nothing was copied: the workers of that "
            "database execute them, and a second copy would run them in two places."
        )


class CheckpointNotFoundError(FlowdeskError):
    """No run or checkpoint with the given id exists in this scope."""


class RevisionConflictError(FlowdeskError):
    """Another writer saved this revision of the run first (compare-and-append lost)."""


class DuplicateFlowKeyError(RevisionConflictError):
    """A live run with this flow key exists already (single flight)."""


class LeaseLostError(RevisionConflictError):
    """This process no longer holds the run's lease: another process took the
    run over, or the lease could not be renewed within its TTL (this process
    can no longer prove it holds it). Nothing more of the run is committed
    here; the run stays resumable wherever it is resumed."""


class AgentRunStatusChangedError(RevisionConflictError):
    """An agent-run update conditioned on the status its caller read
    (``AgentLog.update(..., expect_status=...)``) found the run in another
    status: another process changed it between that read and this write
    (its executing process finished it, say). Nothing was written; read the
    run again and decide anew.

    Attributes:
        run_id: the agent run.
        expected: the status the update was conditioned on.
        actual: the run's status when the update was refused.
    """

    def __init__(self, run_id: str, expected: str, actual: str) -> None:
        self.run_id, self.expected, self.actual = run_id, expected, actual
        super().__init__(
            f"agent run {run_id} is {actual}, no longer {expected}: another process changed it "
            "meanwhile; nothing was written"
        )


#: statuses of a flow run or an agent run that ended: nothing runs it again
ENDED_RUN_STATUSES = frozenset({"completed", "canceled", "timed_out", "done", "timeout", "expired"})


#: how the lease owner of a run ``db copy`` moved to PostgreSQL starts, in the
#: file it left: ``moved to postgresql://host/db`` (never expires, no host)
MOVED_PREFIX = "moved to "
#: when a moved run's lease expires: 9999-12-31T23:59:59Z, i.e. never (a
#: finite time every date type shows and stores; ``inf`` is not one)
MOVED_EXPIRES_AT = 253402300799.0


def moved_to(owner: str | None) -> str | None:
    """The database ``db copy`` moved a run to (``postgresql://host/db``,
    no password) when ``owner``, its lease owner in the file it left, says
    so (``moved to URL``), else ``None``."""
    if owner is None or not owner.startswith(MOVED_PREFIX):
        return None
    return owner[len(MOVED_PREFIX) :]


class RunLeasedError(FlowdeskError):
    """Another live process holds the run's lease (or held it a moment ago);
    it is not executed here.

    Attributes:
        run_id, owner (``host:pid:nonce``), expires_at (UTC epoch seconds, or
        ``None`` when the run has no lease any more), run_status (the run's
        status when it was refused, when known: an ended one, ``completed``
        say, is told as such instead of a live holder), moved_to (the
        database ``db copy`` moved the run to, ``postgresql://host/db``
        without a password, or ``None``).
    """

    noun = "run"

    def __init__(
        self, run_id: str, owner: str, expires_at: float | None, status: str | None = None
    ) -> None:
        self.run_id = run_id
        self.owner = owner
        self.expires_at = expires_at
        self.run_status = status
        self.moved_to = moved_to(owner)
        if self.moved_to is not None:
            super().__init__(
                f"{self.noun} {run_id} moved to {self.moved_to} (flowdesk db copy): its "
                "workers there execute it, so nothing runs it from this database. Nothing was "
                f"run here; go on with it with --db {self.moved_to}."
            )
            return
        if status in ENDED_RUN_STATUSES:
            super().__init__(
                f"{self.noun} {run_id} is {status}: another process ended it a moment ago. "
                "Nothing was run here."
            )
            return
        if expires_at is None and status is not None:
            super().__init__(
                f"{self.noun} {run_id} was taken by another process a moment ago, which "
                f"holds it no more (it is {status} now). Nothing was run here; resume it "
                "again to go on with it."
            )
            return
        if (pid := stopped_pid(owner)) is not None:
            after = (
                f"Its process {pid} runs nothing now: it is {STOPPED.format(pid=pid)}; if it "
                "ends without finishing the run, the run can be resumed at once."
            )
        elif owner.partition(":")[0] == socket.gethostname():  # its liveness decides
            after = (
                "Wait for it; if that process ends without finishing it, the run can be "
                "resumed at once."
            )
        else:
            at = "" if expires_at is None else f", at {iso_utc(expires_at)}"
            after = (
                f"Wait for it; if that machine or process is gone, the run can be resumed "
                f"when its lease runs out{at}."
            )
        super().__init__(
            f"{self.noun} {run_id} is held by a live process: it is being executed by "
            f"{owner}. Nothing was run here. {after}"
        )


class AgentRunLeasedError(RunLeasedError):
    """Another live process is executing the agent run; it is not executed here."""

    noun = "agent run"


class ThreadMovedError(RunLeasedError):
    """The checkpointer (``FlowdeskSaver``) on a SQLite file, or ``flowdesk
    answer`` there, met a LangGraph thread that ``flowdesk db copy`` moved to
    PostgreSQL: its program continues it there, so nothing on this file loads,
    stores or answers it (its nodes would run in both places). Nothing was
    run or written here.

    Attributes:
        run_id: the thread id.
        moved_to: the database it moved to (``postgresql://host/db``, no
            password).
        saver_line: the line that opens the checkpointer there
            (``FlowdeskSaver.open('postgresql://host/db', scope='s')``), the
            one ``db copy`` printed.
        owner, expires_at, run_status: as :class:`RunLeasedError`.
    """

    noun = THREAD_NOUN

    def __init__(self, thread_id: str, owner: str, saver_line: str) -> None:
        self.run_id, self.owner = thread_id, owner
        self.expires_at, self.run_status = MOVED_EXPIRES_AT, None
        self.moved_to = moved_to(owner)
        self.saver_line = saver_line
        FlowdeskError.__init__(
            self,
            f"{THREAD_NOUN} {one_line(thread_id)} moved to {self.moved_to} (flowdesk db copy): "
            "its program continues it there, so nothing loads, stores or answers it in this "
            "database (its nodes would run in both places). Nothing was run here; open its "
            f"checkpointer on the new database and run the graph there: {saver_line}",
        )


class CheckpointDecodeError(FlowdeskError):
    """A stored checkpoint cannot be decoded into the flow's state.

    Attributes:
        run_id: the run whose checkpoint failed.
        revision: the checkpoint revision (int).
        field_path: dotted path of the offending field, or ``""`` when the
            whole record is malformed.

    ``mendable``: the stored value of a field the model still has no longer
    fits its type; a fork of this very checkpoint that gives the field a
    new value goes on from it (``Engine.fork`` applies a dict of changes to
    the stored state before decoding it), and the message says so: that
    clause is :attr:`mend` (``""`` when not mendable).
    ``advice``: what to do instead of those (the message's last clause).
    """

    def __init__(
        self,
        run_id: str,
        revision: int,
        field_path: str,
        reason: str,
        *,
        mendable: bool = False,
        advice: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.revision = revision
        self.field_path = field_path
        self.reason = reason
        where = f" at field {field_path!r}" if field_path else ""
        earlier = ", or replay or fork the run from an earlier checkpoint" if revision else ""
        top = field_path.split(".")[0]
        self.mend = (
            f"fork this checkpoint ({run_id}:{revision}) with {top!r} changed to a value "
            "that fits (`flowdesk fork` with `--changes`, `Engine.fork` with a dict)"
            if mendable and top
            else ""
        )
        if advice is None:
            mend = f"; or {self.mend}" if self.mend else ""
            advice = f"change the model back to what the run stored{earlier}{mend}"
        super().__init__(
            f"checkpoint of run {run_id} revision {revision} cannot be decoded{where}: "
            f"{reason}. Nothing ran from it: the state stored there no longer fits the "
            f"flow's state model; {advice}."
        )


class CheckpointCorruptError(CheckpointDecodeError):
    """A stored row's bytes no longer match the checksum written with it.

    Raised for a checkpoint row (``revision`` is its revision) and for an
    agent message row (``revision`` is the message's sequence number).

    Attributes:
        run_id: the run (str).
        revision: the corrupt row's revision (int).
        readable: the newest revision of the run below ``revision`` that
            still reads back intact (int), the one to replay or fork from;
            ``None`` when none does or it is not known (an agent message).
        run_status: the run's status when it is known (str or ``None``): a
            run that ended (``canceled``, ``completed``...) is not offered a
            cancel.
        missing: the row is not there at all (deleted outside Flowdesk: the
            run's later checkpoints, or the run's own row, name it), rather
            than changed.
        backup: what a backup would restore (``"the file"``; ``"the
            database"`` on PostgreSQL).
    """

    def __init__(
        self,
        run_id: str,
        revision: int,
        what: str = "checkpoint",
        *,
        readable: int | None = None,
        run_status: str | None = None,
        missing: bool = False,
        backup: str = "the file",
    ) -> None:
        self.what = what
        self.run_id = run_id
        self.revision = revision
        self.readable = readable
        self.run_status = run_status
        self.missing = missing
        self.field_path = ""
        self.reason = "row missing" if missing else "checksum mismatch"
        ended = run_status in ENDED_RUN_STATUSES
        if what != "checkpoint":
            advice = f"Restore {backup} from a backup, or fork the run from an earlier revision."
        elif readable is not None:
            advice = (
                f"Restore {backup} from a backup, or replay the run from revision {readable}, "
                "its latest intact checkpoint before the damaged one"
                + ("." if ended else ", or cancel it (its damaged state is not read).")
            )
        else:
            advice = f"Restore {backup} from a backup" + (
                "." if ended else ", or cancel the run (no earlier checkpoint of it is intact)."
            )
        done = f"The run is {run_status}" if ended else "The run cannot go on from it"
        damage = (
            "is missing: it was deleted outside Flowdesk (the run's own record or its later "
            "checkpoints, which build on it, name it)"
            if missing
            else "was changed outside Flowdesk: its bytes no longer match the checksum stored "
            "with it"
        )
        FlowdeskError.__init__(
            self,
            f"{what} of run {run_id} revision {revision} {damage}. {done} "
            f"(other runs are not affected). {advice}",
        )


class ThreadCorruptError(CheckpointCorruptError):
    """A stored row of a LangGraph thread (a checkpoint, a channel value or a
    pending write) no longer matches the checksum written with it.
    ``run_id`` is the thread id, ``revision`` -1, ``where`` names the row."""

    def __init__(self, thread_id: str, where: str) -> None:
        FlowdeskError.__init__(
            self,
            f"{where} of LangGraph thread {thread_id} was changed outside Flowdesk: its bytes "
            "no longer match the checksum stored with it. Nothing was handed to LangGraph "
            "(other threads are not affected). Restore the file from a backup, or continue "
            "the thread from an earlier checkpoint (its checkpoint_id in the config).",
        )
        self.what = where
        self.run_id = thread_id
        self.revision = -1
        self.readable = None
        self.run_status = None
        self.field_path = where
        self.reason = "checksum mismatch"


# --- flows and runs ------------------------------------------------------


class FlowError(FlowdeskError):
    """Base of errors about flow definitions and runs."""


class FlowDefinitionError(FlowError):
    """A flow failed to compile; ``problems`` lists every problem found."""

    def __init__(self, flow_name: str, problems: list[str]) -> None:
        self.flow_name = flow_name
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"flow {flow_name!r} is invalid:\n{lines}")


class FlowVersionMismatchError(FlowError):
    """The run was started under another version of its flow (its steps were
    added, removed or renamed since): nothing was run.

    Attributes:
        run_id: the run refused.
        stored: the fingerprinted flow version the run was started under.
        current: the version of the flow registered in this process.

    The message (:attr:`what`, then what an engine's user can do) names the
    :class:`~desktop_app.flow.Engine` methods; the CLI and the app say it
    with their own commands and keys.
    """

    def __init__(self, run_id: str, stored: str, current: str) -> None:
        self.run_id = run_id
        self.stored = stored
        self.current = current
        super().__init__(
            f"{self.what} To finish it, register the flow's code of version {stored} again "
            "and resume it; otherwise end it (Engine.cancel or Engine.fail_run) or continue it "
            "as a new run of the new version (Engine.fork_onto_current)."
        )

    @property
    def what(self) -> str:
        """The refusal's first sentence: the run, both versions, nothing run."""
        return (
            f"run {self.run_id} was started under flow version {self.stored} but the flow is "
            f"now {self.current}; nothing was run."
        )

    @property
    def change(self) -> str:
        """What changed, as far as the two versions tell: a version is the
        ``version`` given to ``FlowBuilder`` (before the ``+``) and a digest
        of the flow's shape (its steps, their kinds, edges, routes and state
        fields) that includes it, so a new given version changes the digest
        whether or not the shape changed."""
        given = self.stored.partition("+")[0], self.current.partition("+")[0]
        if given[0] != given[1]:
            return (
                f"the version its FlowBuilder gives changed ({given[0]} to {given[1]}); its "
                "steps, their kinds, edges, routes or state fields may have changed too"
            )
        return "its steps, their kinds, edges or routes, or its state's fields changed"


class UnknownFlowError(FlowError):
    """No flow with this name is registered."""


class RunStateError(FlowError):
    """The run is in a status that does not allow the requested operation
    (for example resuming a canceled run)."""


class InputPendingError(RunStateError):
    """A resume found the run waiting for a person's answer: it goes on with
    ``Engine.resume_with`` (``flowdesk answer``), not ``resume``.

    Attributes:
        run_id; wait_ids: the pending input waits' ids.
    """

    def __init__(self, run_id: str, wait_ids: list[str]) -> None:
        self.run_id = run_id
        self.wait_ids = wait_ids
        super().__init__(
            f"run {run_id} waits for input ({', '.join(wait_ids)}); "
            "answer it with resume_with(run_id, value, wait_id=...)"
        )


class StepFailedError(FlowError):
    """A step failed after its last attempt and the run is now ``failed``."""

    def __init__(self, run_id: str, step_id: str, attempts: int, cause: str) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.attempts = attempts
        super().__init__(
            f"run {run_id}: step {step_id!r} failed after {plural(attempts, 'attempt')}: {cause}"
        )


class RouteError(FlowError):
    """A route function raised, or picked a target it did not declare.

    A route is the flow's own code, run on the state a step left, so it is
    not retried (``retryable = False``): the step it routes from fails under
    its ``on_error`` policy, or an answer that would have led there is
    refused with nothing changed. Fix the flow, then resume the run.
    """

    retryable = False

    def __init__(self, flow_name: str, step_id: str, cause: BaseException) -> None:
        self.flow_name = flow_name
        self.step_id = step_id
        super().__init__(
            f"flow {flow_name!r}: the route from step {step_id!r} failed: "
            f"{type(cause).__name__}: {cause}"
        )


class WaitError(FlowError):
    """An answer or signal does not fit the run's pending waits."""


class WaitKeyError(WaitError):
    """A signal wait's key function returned something that is not a
    non-empty string, so no signal could ever reach the wait. Not retried
    (``retryable = False``): the step fails under its ``on_error`` policy."""

    retryable = False


class WaitPayloadError(WaitError):
    """A signal's or event's payload does not fit the wait step's ``into``
    field. The wait refuses such a signal or event and goes on waiting (the
    reason is kept in the run's ``meta["refused_signals"]`` or
    ``meta["refused_events"]``); ``Engine.signal`` and ``Engine.publish``
    refuse one before storing it (:class:`SignalPayloadError`,
    :class:`EventPayloadError`) when they know a waiting run's flow. Not
    retried (``retryable = False``) where it is raised otherwise.

    Attributes:
        problem: why, in one line (``[1,2] does not fit: Input should be a
            valid dictionary``).
    """

    retryable = False

    def __init__(self, message: str, problem: str = "") -> None:
        self.problem = problem or message
        super().__init__(message)


class WaitAlreadyResolvedError(WaitError):
    """The wait was answered already; the first answer stands."""


class StepTimeoutError(FlowError):
    """One attempt of a step ran past its ``timeout_s``; retryable."""

    retryable = True

    def __init__(self, step_id: str, timeout_s: float) -> None:
        self.step_id = step_id
        self.timeout_s = timeout_s
        super().__init__(f"step {step_id!r} timed out after {timeout_s:g} s")


class FanInConflictError(FlowError):
    """Two parallel branches wrote the same field and no reducer was declared."""

    retryable = False


class StateNotStorableError(FlowError):
    """A step returned a value the checkpoint cannot store (not JSON data,
    too deeply nested, a lock, a socket...); not retryable: fix the step."""

    retryable = False

    def __init__(self, step_id: str, field: str, reason: str) -> None:
        self.step_id = step_id
        self.field = field
        self.reason = reason
        super().__init__(
            f"step {step_id!r} returned a value for state field {field!r} that cannot be "
            f"stored: {reason}. Return JSON data (str, int, float, bool, None, lists and "
            f"dicts of them, or pydantic models of them), then resume the run"
        )


class DomainReadError(FlowError):
    """A step's domain query (``ctx.query``) was refused by the database
    (:class:`QueryRefusedError`: a missing table or column, wrong SQL, a
    write in a read-only query). The step fails under its ``on_error``
    policy with the database's words (as a failed :class:`DomainWriteError`
    does) instead of stopping the run as a failed save would; not retryable.
    A database that is only locked or unreachable still stops the run, which
    resumes later (a :class:`StoreError`, as for a save)."""

    retryable = False


class DomainWriteError(FlowError):
    """A step's domain write (``ctx.write``) failed when its checkpoint
    committed: a constraint of a domain table refused it (UNIQUE, CHECK,
    NOT NULL, FOREIGN KEY), its table is missing, or the write itself
    raised. Nothing of the step was saved; the step fails under its
    ``on_error`` policy. Not retryable (``retryable = False``): the same
    write fails the same way. A lost compare-and-append on the run's own
    tables is a :class:`RevisionConflictError`, never this.

    Attributes:
        table: the domain table written, or None when unknown.
        constraint: the constraint refused, as the database names it (the
            constraint's name on PostgreSQL; on SQLite a CHECK's name or
            expression, or ``table.column`` for UNIQUE and NOT NULL), or
            None for a failure that is not a constraint violation.
        kind: ``"unique"``, ``"check"``, ``"not null"``, ``"foreign key"``,
            ``"primary key"``, another constraint kind, or None.
    """

    retryable = False

    def __init__(
        self, table: str | None, constraint: str | None, kind: str | None, detail: str
    ) -> None:
        self.table = table
        self.constraint = constraint
        self.kind = kind
        where = f"table {table!r}" if table else "a domain table"
        if constraint is not None:
            what = f"violates {(kind or 'a').upper()} constraint {constraint!r} of {where}"
            fix = "the step's write or the rows it conflicts with"
        else:
            what = f"into {where} failed"
            fix = "the step's write or its table (was it dropped or altered?)"
        super().__init__(
            f"the step's domain write {what} ({detail}); nothing of the step was saved. "
            f"Fix {fix}, then resume the run"
        )


class TransactionControlError(DomainWriteError):
    """A step's domain write ran a statement that would end, open or split
    the transaction its checkpoint commits in (``COMMIT``, ``END``,
    ``ROLLBACK``, ``BEGIN``, ``SAVEPOINT``, ``RELEASE``; on PostgreSQL also
    ``ABORT``, ``START TRANSACTION``, ``PREPARE TRANSACTION``), alone or
    inside a multi-statement string. Refused before the database runs it,
    so nothing of the step is saved; the step fails under its ``on_error``
    policy like any refused domain write. Not retryable.

    Attributes:
        statement: the refused statement's keyword(s), upper case
            (``"COMMIT"``, ``"ROLLBACK"``, ``"START TRANSACTION"``).
        table, constraint, kind: None (see :class:`DomainWriteError`).
    """

    def __init__(self, statement: str) -> None:
        self.statement = statement
        self.table = None
        self.constraint = None
        self.kind = None
        FlowError.__init__(
            self,
            f"a domain write cannot end or open the transaction ({statement} ...): "
            "Flowdesk commits the step's writes with its checkpoint; remove the "
            "statement, then resume the run",
        )


class ParallelBranchesError(FlowError):
    """Branches of a parallel step failed after their own retries; names each.

    Attributes:
        step_id: the parallel step.
        errors: ``{branch: "<ErrorType>: <message>"}`` in declared order.
    """

    retryable = False  # every branch already applied its own retry policy

    def __init__(self, step_id: str, errors: dict[str, str]) -> None:
        self.step_id = step_id
        self.errors = errors
        listed = "; ".join(f"{name}: {msg}" for name, msg in errors.items())
        super().__init__(f"parallel step {step_id!r}: {len(errors)} branch(es) failed: {listed}")


# --- agents and model providers -------------------------------------------


class PayloadNotStorableError(InputError):
    """A signal's or event's payload, or an answer, that no checkpoint could
    hold (nested too deeply, not JSON data, a string that is not valid
    UTF-8): refused before anything is stored, so no waiting run fails on it
    later. Send a flatter payload of plain JSON data.

    Attributes:
        what: what was refused (``"signal 'go' payload"``).
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        super().__init__(
            f"the {what} cannot be stored: {reason}; nothing was sent. Send plain JSON data "
            "(valid UTF-8 strings, numbers, lists, objects) nested at most 200 levels deep"
        )


class UnfitPayloadError(InputError):
    """A signal or event whose payload a run waiting for it cannot take (it
    does not fit the wait step's ``into`` field): refused where it is sent,
    before anything is stored, so no wait has to refuse it later. Send a
    payload of the type the message names.

    Attributes:
        run_id: the (first) waiting run that cannot take it.
        step_id: its wait step.
        expected: the type the step's field declares (``dict[str, Any] | None``).
    """

    #: what the sender does, now and done (``("send", "sent")``)
    verbs: tuple[str, str] = ("send", "sent")

    def __init__(
        self, what: str, run_id: str, step_id: str, expected: str, cause: str, more: str = ""
    ) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.expected = expected
        do, done = self.verbs
        super().__init__(
            f"{what} was not {done}: run {run_id} waits for it at step {step_id!r}, which "
            f"takes a payload of type {expected}; {cause}{more}. Nothing was stored; "
            f"{do} a payload of type {expected}"
        )


class DedupeKeyReusedError(InputError):
    """A signal sent with a ``dedupe_key`` already used for another request
    (another name, key or payload): refused, nothing stored (as Stripe
    refuses a different request under a used idempotency key). A send of
    the same name, key and payload again is a duplicate, not this error.

    Attributes:
        dedupe_key: the key given.
        signal_id: the signal first sent with it.
        name: that signal's name.
        key: that signal's key.
    """

    def __init__(
        self, dedupe_key: str, signal_id: int, name: str, key: str, sent: tuple[str, str]
    ) -> None:
        self.dedupe_key = dedupe_key
        self.signal_id = signal_id
        self.name = name
        self.key = key
        if sent == (name, key):
            differs = "with another payload"
        else:
            differs = f"not for signal {quoted(sent[0])} with key {quoted(sent[1])}"
        super().__init__(
            f"dedupe key {quoted(dedupe_key)} was already used for signal {quoted(name)} "
            f"with key {quoted(key)} "
            f"(signal {signal_id}), {differs}: nothing was sent. A dedupe key names one "
            "request; give this signal a dedupe key of its own (or none)"
        )


class SignalPayloadError(UnfitPayloadError):
    """A signal whose payload the run waiting for it cannot take (see
    :class:`UnfitPayloadError`); nothing was stored."""

    def __init__(
        self, name: str, key: str, run_id: str, step_id: str, expected: str, cause: str
    ) -> None:
        super().__init__(
            f"signal {quoted(name)} with key {quoted(key)}", run_id, step_id, expected, cause
        )


class EventPayloadError(UnfitPayloadError):
    """An event whose payload a run waiting for its type cannot take (see
    :class:`UnfitPayloadError`); nothing was published. An event goes to
    every run waiting for its type, so one that any of them cannot take is
    refused, even when others could take it.

    Attributes:
        unfit: every waiting run that cannot take it, as ``(run_id,
            step_id, expected type)``, the first one first.
    """

    verbs = ("publish", "published")

    def __init__(self, event_type: str, unfit: list[tuple[str, str, str]], cause: str) -> None:
        self.unfit = unfit
        (run_id, step_id, expected), others = unfit[0], unfit[1:]
        more = "".join(
            f"; run {r} cannot take it either (step {s!r}, type {t})" for r, s, t in others
        )
        super().__init__(f"event {event_type!r}", run_id, step_id, expected, cause, more)


class AgentError(FlowdeskError):
    """Base of agent-run errors."""


class InputRequiredError(AgentError):
    """The agent run waits for a person; answer with ``resume_input(run_id, text)``."""


class ApprovalAnswerError(InputError):
    """The answer to a tool-call approval is neither yes nor no; nothing was
    recorded and the run still waits: answer yes or no."""


class AgentRunCanceledError(AgentError):
    """The agent run was canceled (``flowdesk cancel``) while this process
    executed it: a write of its executing process (one that names its lease
    owner) is refused, nothing of it is written, and the process stops.

    Attributes:
        run_id: the agent run.
        in_flight: the tool whose call was running when the cancel landed
            (it ran to its end and its result is recorded), else ``None``.
    """

    def __init__(self, run_id: str, in_flight: str | None = None) -> None:
        self.run_id, self.in_flight = run_id, in_flight
        said = f"agent run {run_id} was canceled while this process executed it"
        if in_flight is None:
            said += "; nothing more of it is written here"
        else:
            said += (
                f", while its call to {in_flight} was in flight: that call ran to its end (its "
                "result is recorded, whatever it did stays done) and nothing after it ran"
            )
        super().__init__(said)


class AgentToolsChangedError(AgentError):
    """An agent run is resumed with other tools than it was started with
    (for example without ``--tools files``); nothing was changed: resume it
    with the same tools."""


class ProviderError(AgentError):
    """The model provider failed. ``retryable`` says whether trying again may help
    (classified by type and HTTP status, never by words in a message)."""

    retryable = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ProviderUnavailableError(ProviderError):
    """5xx, a reset connection: retryable."""

    retryable = True


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time: retryable."""

    retryable = True


class RateLimitedError(ProviderError):
    """429: retry after ``retry_after_s`` seconds (the provider's Retry-After)."""

    retryable = True

    def __init__(self, message: str, *, retry_after_s: float, status: int = 429) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, status=status)


class MalformedReplyError(ProviderError):
    """The provider's reply is not the chat-completions shape; not retried
    automatically (a paid call that keeps failing the same way)."""


class NotJsonReplyError(MalformedReplyError):
    """The provider answered (HTTP 2xx) with a body that is not JSON at all
    (an HTML page, a proxy's text, a broken server): no chat completion,
    streamed or not. The message quotes the body (secrets masked) and says
    what to check: that ``model.base_url`` is an OpenAI-compatible API.
    Not retried automatically."""


class EmptyReplyError(MalformedReplyError):
    """The model answered with no text and no tool call (a reply cut at the
    token limit, withheld by a content filter, or a small model that said
    nothing). Not taken for the agent's answer and not retried
    automatically; the run fails and may be asked again."""


class ToolCallStreamingError(MalformedReplyError):
    """A streamed reply to a request with tools came back in a way that means
    the server cannot stream tool calls (llama-cpp-python's OpenAI-compatible
    server: no server-sent events, an error event, a tool call cut short, or
    no tool call where the stream said it would call one). Not retried; turn
    streaming off (``flowdesk ask --no-stream`` or ``model.stream = false``)."""


class SecretsError(FlowdeskError):
    """The keyring cannot store or read a secret (locked, missing backend)."""


class KeyFileError(SecretsError):
    """The API key file named in settings (``model.api_key_file``) is missing,
    empty, not a regular file, or readable by other users (``chmod 600`` it)."""


# --- run ids and backends (command line, app) -------------------------------


class UnknownRunError(CheckpointNotFoundError, InputError):
    """No flow run or agent run has this id (or id prefix) in the scope."""


class AmbiguousRunIdError(InputError):
    """A run-id prefix matches more than one run; ``matches`` lists them."""

    def __init__(self, prefix: str, matches: list[str]) -> None:
        self.prefix = prefix
        self.matches = list(matches)
        shown = ", ".join(self.matches[:10]) + (" ..." if len(self.matches) > 10 else "")
        super().__init__(
            f"run id prefix {prefix!r} matches {len(self.matches)} runs ({shown}); "
            "give more characters"
        )


class BackendUnavailableError(ConfigError):
    """The database string names a backend that is not installed or not known."""


class McpError(AgentError):
    """An MCP server cannot be started, reached or used (the message names the
    server from the ``[mcp_servers.NAME]`` settings and what to check)."""


class McpToolsChangedError(McpError):
    """A tool an agent run used is gone from its MCP server, or its input
    schema changed, since the run started; the run is not continued with a
    different tool (the message names each tool and what changed)."""


class McpOutcomeUnknownError(McpError):
    """A tool call was sent to an MCP server and no answer came (the server
    died or did not answer in time): it may have taken effect. The agent
    records the call's outcome as unknown and does not send it again."""
