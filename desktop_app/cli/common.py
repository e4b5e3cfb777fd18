"""What every command handler shares: settings, services, hints, warnings."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, cast

from desktop_app.cli import stop_signals
from desktop_app.cli.output import Hints
from desktop_app.errors import FlowdeskError, InputError
from desktop_app.textsafe import shell_quote

if TYPE_CHECKING:
    from desktop_app.bootstrap import Services
    from desktop_app.config import Settings
    from desktop_app.flow import CompiledFlow, EventBus
    from desktop_app.store.runids import RunRef


def parse_json(text: str, what: str) -> Any:
    """``text`` given as ``what`` (``--input``, ``--payload``...) parsed as
    JSON (RFC 8259): every JSON value the CLI reads goes through here.

    Raises:
        InputError: not JSON, a number that is not finite (``NaN``,
            ``Infinity``, or ``1e999``, which reads as infinity: JSON has
            no such numbers, and a checkpoint could not hold them as JSON),
            a whole number longer than Python converts (4,300 digits:
            ``sys.get_int_max_str_digits``), or nested deeper than Python's
            recursion limit (about 1,000 levels) allows (exit 2).
    """
    import json
    import math

    def refuse(literal: str) -> Any:
        raise InputError(
            f"{what} holds {literal}, which is not a JSON number (JSON numbers are finite); "
            "give a finite number, or a string"
        )

    def finite(literal: str) -> float:
        value = float(literal)
        return value if math.isfinite(value) else refuse(f"{literal} (beyond a float's range)")

    def whole(literal: str) -> int:
        try:
            return int(literal)
        except ValueError:  # longer than int() converts: CVE-2020-10735's limit
            raise InputError(
                f"{what} holds a whole number of {len(literal.lstrip('-')):,} digits, more than "
                f"the {sys.get_int_max_str_digits():,} Flowdesk reads; give it as a string"
            ) from None

    try:
        return json.loads(text, parse_constant=refuse, parse_float=finite, parse_int=whole)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON: {exc}") from exc
    except RecursionError:
        raise InputError(
            f"{what} is nested too deeply (more than about {sys.getrecursionlimit()} levels "
            "of arrays or objects); give a flatter JSON value"
        ) from None


#: bytes past which a value does not go into a printed command: a terminal
#: line holds 4,096 (Linux's canonical-mode line buffer), so a longer one
#: cannot be pasted whole; such a hint names a ``--...-file`` option instead
PASTE_LIMIT = 4096


def pasteable(text: str) -> bool:
    """Whether ``text`` fits in a command a user can paste (:data:`PASTE_LIMIT`)."""
    return len(text.encode("utf-8", "surrogatepass")) <= PASTE_LIMIT


def value_arg(text: str, what: str, path: str | None = None) -> tuple[str, str]:
    """A signal's ``what`` (``"key"`` or ``"payload"``) for a printed
    command, and a note for the hint (``""`` when none is needed): ``text``
    quoted when :func:`pasteable`; else ``--WHAT-file PATH`` with the file
    it was read from (``path``), or with the placeholder ``WHAT_FILE`` and
    a note that says what to put in it."""
    if pasteable(text):
        return shell_quote(text), ""
    if path not in (None, "-"):
        return f"--{what}-file {shell_quote(str(path))}", ""
    size = len(text.encode("utf-8", "surrogatepass"))
    holder = f"{what.upper()}_FILE"
    return (
        f"--{what}-file {holder}",
        f"{holder} holding the {what} ({size:,} bytes, too long to paste)",
    )


def read_text_option(path: str, option: str) -> str:
    """The text of ``option``'s file ``path`` (UTF-8), or of standard input
    for ``-``: for a value too long for a command line (Linux refuses one
    argument over 128 KiB: "Argument list too long").

    Raises:
        InputError: the file cannot be read, or is not UTF-8 (exit 2).
    """
    from pathlib import Path

    try:
        if path == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(path).expanduser().read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {option} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        where = "standard input" if path == "-" else path
        raise InputError(f"{option}: {where} is not UTF-8 text ({exc.reason})") from exc


def json_option(text: str | None, path: str | None, option: str, default: str) -> Any:
    """The JSON value of ``--OPTION TEXT`` or ``--OPTION-file PATH`` (``-``:
    standard input), ``default`` when neither is given.

    Raises:
        InputError: both are given, the file cannot be read, or the value
            is not JSON (:func:`parse_json`) (exit 2).
    """
    if path is None:
        return parse_json(default if text is None else text, option)
    if text is not None:
        raise InputError(f"give {option} or {option}-file, not both")
    return parse_json(read_text_option(path, f"{option}-file"), f"{option}-file")


log = logging.getLogger(__name__)


def _other_scopes(sv: Services, prefix: str) -> list[tuple[str, str]]:
    """``(scope, run_id)`` of the flow and agent runs of other scopes than
    this command's whose id starts with ``prefix`` (at most 2 read: one is
    named, several are not)."""
    scope, n = sv.settings.scope, len(prefix)

    def query(tx: Any) -> list[tuple[str, str]]:
        rows = tx.fetchall(
            "SELECT scope, run_id FROM runs WHERE substr(run_id, 1, ?) = ? AND scope <> ? "
            "UNION SELECT scope, run_id FROM agent_runs "
            "WHERE substr(run_id, 1, ?) = ? AND scope <> ? LIMIT 2",
            (n, prefix, scope, n, prefix, scope),
        )
        return [(str(a), str(b)) for a, b in rows]

    return sv.checkpoints.query(query)


def read_answer() -> str:
    """The answer typed on (or piped into) standard input, without its final
    newline. Raises InputError when there is none."""
    if sys.stdin.isatty():
        print("answer: ", end="", flush=True)
        text = sys.stdin.readline()
    else:
        text = sys.stdin.read()
    text = text.removesuffix("\n")
    if not text:
        raise InputError("no answer given: put it after the run id, or type it on standard input")
    return text


class Ctx:
    """One command's context: its arguments, settings (loaded once), hints."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.hints = Hints.of(getattr(args, "db", None), getattr(args, "scope", None), os.environ)
        self._settings: Settings | None = None
        #: the run being executed, for the Ctrl-C hint
        self.current_run: str | None = None
        #: :attr:`current_run` is an agent run (it has no steps to run again)
        self.current_is_agent = False
        #: what a command was given and, the disk being full, did not save
        #: (a clause: "the answer was not saved (run R still waits for it)");
        #: the disk-full message then names the same command again
        self.unsaved: str | None = None
        #: the run completed and, the disk being full, only its side effects
        #: are left ("1,362 moves are queued"): the disk-full message says so
        self.queued: str | None = None
        #: the command that continues after Ctrl-C when it is not resuming a
        #: run (``watch`` watches again)
        self.continue_with: str | None = None
        #: an ``answer`` not saved yet: the command that gives it again
        #: (pinned to its question); Ctrl-C until it is saved prints it
        self.unanswered: str | None = None
        #: the skewed-clock warning was printed (once per command)
        self._skew_said = False
        #: the databases this command opened (:meth:`fold_wal`)
        self._opened: list[Services] = []

    def fold_wal(self) -> None:
        """Once the command is done, copy the commits it left in a SQLite
        file's write-ahead log into the file itself (the SQLite store's
        ``fold_wal``; a store without one has nothing to fold), so a plain
        copy of the file holds them (a tryout: after `start` or `answer` the
        ``-wal`` held every commit, and a copy of the file alone had none
        of its runs). Not for a database whose engine still
        executes a run (a step that outlived a Ctrl-C)."""
        opened, self._opened = self._opened, []
        for services in opened:
            fold = getattr(services.checkpoints, "fold_wal", None)
            if fold is None or services.engine.executing():
                continue
            with contextlib.suppress(Exception):  # tidying, never the command's outcome
                fold()

    def on_interrupt(self) -> tuple[str, str]:
        """What continues what Ctrl-C stopped: ``(command, what it does)``,
        the command after ``flowdesk`` and its ``--db``/``--scope``: the
        ``answer`` again while the answer was not saved (:attr:`unanswered`;
        "to answer (nothing was answered ...)"), else ``resume RUN`` for the
        run being executed, else :attr:`continue_with`, else ``resume
        --all`` ("to continue")."""
        if self.unanswered is not None:
            said = "nothing was answered: the stop came before the answer was saved"
            return self.unanswered, f"to answer ({said})"
        if self.current_run is not None:
            return f"resume {self.current_run}", self._continue_it()
        return self.continue_with or "resume --all", "to continue"

    @property
    def on_postgres(self) -> bool:
        """Whether ``--db`` (or the settings) names a PostgreSQL database."""
        from desktop_app.bootstrap import parse_database

        return parse_database(self.settings.db_path).backend == "postgres"

    def _continue_it(self) -> str:
        """What ``resume RUN`` does for the run a stop cut off: on
        PostgreSQL a running worker (``flowdesk agent``) takes an
        interrupted run over on its own, within a second, and the resume
        then finds it held: said, so the refusal is not a surprise (a team
        tryout)."""
        if not self.on_postgres:
            return "to continue"
        return (
            "to continue it here if no worker has taken it over (a `flowdesk agent` running "
            "on this database picks an interrupted run up on its own; `show` names who holds it)"
        )

    @property
    def settings(self) -> Settings:
        """The effective settings (``--db``/``--scope`` beat env and file).

        Raises:
            ConfigError: an invalid or unknown setting, or (any command but
                the app) a ``FLOWDESK_CONFIG`` naming no file (exit 2).
        """
        if self._settings is None:
            from desktop_app.config import check_config_file, given, load_settings
            from desktop_app.observability import setup, warnings_on_stderr

            command = self.args.command not in (None, "app")
            if command:  # the app's Settings screen creates it
                check_config_file()
            self._settings = load_settings(
                db_path=given(self.args.db), scope=given(self.args.scope)
            )
            setup(self._settings, command=command)  # log file, OTLP export
            if command:  # the app's screen is the terminal
                warnings_on_stderr()
            log.info("command %s started (pid %d)", self.args.command or "app", os.getpid())
        return self._settings

    def judged_now(self, sv: Services) -> float:
        """The time a read command judges deadlines, ages and leases by (UTC
        epoch seconds): the store's (on PostgreSQL the database's clock).
        On SQLite, while this computer's clock is more than
        :data:`~desktop_app.flow.clock.SKEW_TOLERANCE_S` off the clock of the
        file system holding the database (``faketime``, a clock set by hand),
        that file system's time instead (:func:`~desktop_app.flow.clock.reading`,
        the clock the write commands check theirs against), with a warning
        on stderr, once per command: the skew, that the times shown may be a
        few seconds off, and that the commands that write (the ones shown)
        refuse to run from this clock. Never raises for the skew."""
        from desktop_app.flow.clock import reading, skew_error

        clock = sv.engine.clock
        skew = skew_error(clock)
        if skew is None:
            return sv.checkpoints.now()
        if not self._skew_said:
            self._skew_said = True
            print(
                f"flowdesk: warning: this computer's clock is {skew.off()}, so the times "
                "shown here (due in, deadlines passed, too late) are judged by that file "
                "system's clock instead and may be a few seconds off; the commands that "
                "write (answer, resume, cancel, start...) refuse to run from this clock: "
                "run them with the system clock (without faketime, FAKETIME or LD_PRELOAD) "
                "or set the system clock right",
                file=sys.stderr,
            )
        return reading(clock)

    def services(
        self,
        *,
        events: EventBus | None = None,
        flows: list[CompiledFlow[Any]] | None = None,
        worker: bool = False,
    ) -> Services:
        """Open the database through the composition root; report (on
        stderr) each configured flow that failed to load; the rest work.
        On a database server, a wait for it is said once; ``worker``: the
        process waits out the server's outages (``flowdesk agent``), where
        a command gives up once (``ServerOutages.on_unreachable``'s
        ``give_up_once``)."""
        from desktop_app.bootstrap import open_services, parse_database
        from desktop_app.store.protocol import ServerOutages

        services = open_services(self.settings, events=events, flows=flows)
        self._opened.append(services)
        stop_signals.watch(services.engine.events)
        for problem in services.flow_problems:
            print(f"flowdesk: warning: {problem.error} (other flows work)", file=sys.stderr)
        store = services.checkpoints
        if "server_outages" in store.capabilities:  # a wait for the server is said
            where = parse_database(services.database).shown
            said: list[bool] = []

            def waiting(_exc: FlowdeskError) -> None:
                if not said:  # once a command
                    said.append(True)
                    print(
                        f"flowdesk: the database server ({where}) cannot be reached; "
                        "waiting for it to come back (Ctrl-C stops)",
                        file=sys.stderr,
                        flush=True,
                    )

            cast(ServerOutages, store).on_unreachable(waiting, give_up_once=not worker)
        return services

    def resolve(self, sv: Services, prefix: str) -> RunRef:
        """A run id or unique prefix → the run (flow or agent run, or a
        LangGraph thread: ``kind == "langgraph"``), with hints that repeat
        this command's ``--db``/``--scope``. An exact id of any kind wins
        over a prefix match of another (a thread ``8c09`` over a run
        ``8c09d34e…``); a prefix that several ids start with is refused,
        naming them all (:meth:`Services.resolve_run_id`).

        Raises:
            UnknownRunError, AmbiguousRunIdError (exit 2).
        """
        from desktop_app.errors import UnknownRunError

        try:
            return sv.resolve_run_id(prefix)
        except UnknownRunError as exc:
            elsewhere = _other_scopes(sv, prefix)
            if len(elsewhere) == 1:  # the run is there: the command that shows it there
                (scope, run_id), *_ = elsewhere
                there = Hints(self.hints.db, scope).cmd(f"show {run_id}")
                raise UnknownRunError(
                    f"{exc}; it is a run of scope {scope!r} (a scope is a named set of runs "
                    f"inside one database): `{there}` shows it"
                ) from exc
            raise UnknownRunError(
                f"{exc} (a scope is a named set of runs inside one database: pick another "
                f"with --scope or FLOWDESK_SCOPE); list the runs with `{self.hints.cmd('runs')}`"
            ) from exc
