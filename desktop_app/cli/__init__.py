# PYTHON_ARGCOMPLETE_OK
"""The ``flowdesk`` command line.

``flowdesk`` with no command launches the app. Every command takes
``--db PATH_OR_URL`` (default: ``flowdesk.db`` in the user data dir) and
``--scope NAME``. Exit codes (the README's): 0 success; 1 a run failed or a
Flowdesk error; 2 bad input: an unknown or ambiguous run id, an unknown flow
name, a missing folder, bad JSON, an invalid or unknown setting, a usage
error; 3 the run it executed was taken over by another process, which goes
on with it (:func:`taken_over`); 130 interrupted (Ctrl-C); 143 stopped by
SIGTERM (``kill PID``) in a command that executes runs, with the same hint
as Ctrl-C.

Modules: :mod:`.parser` (argparse + argcomplete), :mod:`.output` (times,
JSON, hints, progress), :mod:`.runs` (runs, show, watch, waiting, resume,
cancel), :mod:`.start` (run, start, answer, signal, publish), :mod:`.branch`
(replay, fork), :mod:`.waits` (what ``show`` says a run waits for),
:mod:`.ask` (agent runs), :mod:`.admin` (db, flows, doctor, export, secrets, agent, app,
completion). The database is opened only through :mod:`desktop_app.bootstrap`.

Start-up: this module and the parser import no more than the standard
library, :mod:`desktop_app.errors`, the output helpers and the run statuses
(:mod:`desktop_app.store.records`, standard library only), so ``--version``,
``--help`` and shell completion answer before pydantic, asyncio, textual,
the stores or the engine load; a command's handler module is imported only
when that command runs (:func:`handler`).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from desktop_app.cli import stop_signals
from desktop_app.cli.common import Ctx
from desktop_app.cli.output import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TAKEN_OVER,
    EXIT_USAGE,
    PASSWORD_NOTE,
    damaged_run_hints,
    moved_hint,
    stop_progress,
    version_refusal,
)
from desktop_app.cli.parser import build_parser, shared_parser
from desktop_app.cli.stop_signals import Terminated
from desktop_app.errors import (
    CheckpointCorruptError,
    CommitUnknownError,
    ConfigError,
    DatabaseCorruptError,
    DatabaseMissingError,
    DiskFullError,
    FlowdeskError,
    FlowVersionMismatchError,
    InputError,
    LeaseLostError,
    RevisionConflictError,
    RunLeasedError,
    SchemaObjectMissingError,
    StoreError,
    UnknownFlowError,
    redact,
)
from desktop_app.textsafe import shell_join, visible_controls

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "handler",
    "main",
]

#: command -> its handler, ``module.function`` in this package: imported only
#: when the command runs (see :func:`handler`)
COMMANDS: dict[str, str] = {
    "app": "admin.cmd_app",
    "db": "admin.cmd_db",
    "run": "start.cmd_run",
    "runs": "runs.cmd_runs",
    "start": "start.cmd_start",
    "flows": "admin.cmd_flows",
    "show": "runs.cmd_show",
    "watch": "runs.cmd_watch",
    "resume": "runs.cmd_resume",
    "cancel": "runs.cmd_cancel",
    "replay": "branch.cmd_replay",
    "fork": "branch.cmd_fork",
    "undo": "runs.cmd_undo",
    "waiting": "runs.cmd_waiting",
    "answer": "start.cmd_answer",
    "signal": "start.cmd_signal",
    "publish": "start.cmd_publish",
    "agent": "admin.cmd_agent",
    "ask": "ask.cmd_ask",
    "export": "admin.cmd_export",
    "doctor": "admin.cmd_doctor",
    "secrets": "admin.cmd_secrets",
    "completion": "admin.cmd_completion",
}


def handler(command: str) -> Callable[[Ctx], int]:
    """The handler of ``command`` (a key of :data:`COMMANDS`), importing its
    module now. Raises KeyError for a command that is not in :data:`COMMANDS`."""
    module, function = COMMANDS[command].split(".")
    handle: Callable[[Ctx], int] = getattr(
        importlib.import_module(f"{__name__}.{module}"), function
    )
    return handle


#: errors that mean the user's input was wrong: exit 2
BAD_INPUT = (InputError, ConfigError, UnknownFlowError)
#: commands that execute runs they print no id of: a full disk pauses those runs
RESUMING = ("answer", "agent", "ask", "app")


#: commands that store a new run: Ctrl-C before it is stored prints the
#: command itself again (``resume --all`` would resume whatever else waits)
MAKES_A_RUN = ("run", "start", "replay", "fork")

#: commands that execute runs in the foreground: SIGTERM (``kill PID``, a
#: service manager stopping them) stops them as Ctrl-C does
FOREGROUND = (
    "run",
    "start",
    "resume",
    "replay",
    "fork",
    "answer",
    "signal",
    "publish",
    "undo",
    "ask",
)


def _stop_on_sigterm(command: str) -> None:
    """Make SIGTERM stop ``command`` as Ctrl-C does when it executes runs
    (:data:`FOREGROUND`), and ``agent`` until it serves (it then installs
    its own handlers; the app has its own). Only the main thread can
    install a handler: elsewhere nothing changes."""
    if command in FOREGROUND or command == "agent":
        stop_signals.install()
        # Ctrl-Z gives the SQLite write gate back before stopping, so other
        # processes' writers go on meanwhile (the app: Textual's own handler)
        from desktop_app.store.write_gate import stop_gives_back_the_gate

        stop_gives_back_the_gate()


def command_again(argv: Sequence[str]) -> str:
    """The command line after the global ``--db``/``--scope`` options (which
    :class:`~desktop_app.cli.output.Hints` adds back), quoted for a shell:
    what to run again (``db apply``), a URL's password masked."""
    rest = list(argv)
    while rest and rest[0].split("=", 1)[0] in ("--db", "--scope"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return shell_join(redact(arg) for arg in rest)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowdesk`` console script; returns the exit code."""
    parser = shared_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (else argcomplete is idle)
        try:
            import argcomplete

            argcomplete.autocomplete(parser)  # answers the shell's request, then exits
        except ImportError:  # completion is a convenience; the command works without it
            pass
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
        ctx = Ctx(args)
        _stop_on_sigterm(args.command or "app")
    except KeyboardInterrupt as exc:  # before the command began: nothing was done
        print("flowdesk: interrupted while starting; nothing was done", file=sys.stderr)
        return 128 + exc.args[0] if isinstance(exc, Terminated) else 130
    code = EXIT_FAILED
    command = args.command or "app"
    try:
        # its module imported inside _handle: a SIGTERM or Ctrl-C landing
        # while it loads stops the command as one that lands later does
        code = _handle(ctx, lambda c: handler(command)(c), argv)
        return code
    finally:
        ctx.fold_wal()
        logging.getLogger(__name__).info("command %s exited %d", command, code)
        if ctx.hints.password_left_out:
            print(f"flowdesk: {PASSWORD_NOTE}", file=sys.stderr)


def _untranslated_store_error(ctx: Ctx, exc: Exception) -> FlowdeskError | None:
    """The typed error for a database error that reached the command line
    untranslated (a read outside the stores' guards: "database disk image
    is malformed" becomes :class:`~desktop_app.errors.DatabaseCorruptError`
    naming the file; see ``desktop_app.store.connection.untranslated``),
    else ``None``."""
    from desktop_app.bootstrap import parse_database
    from desktop_app.store import migrations
    from desktop_app.store.connection import untranslated

    try:
        database = parse_database(ctx.settings.db_path)
        path = None if database.backend == "postgres" else database.path
    except FlowdeskError:
        path = None
    translated = untranslated(exc, path)
    if translated is not None and (gone := migrations.dropped_table(str(exc))):
        return SchemaObjectMissingError(gone, str(path or ""))
    return translated


def taken_over(ctx: Ctx, run_id: str, exc: LeaseLostError) -> str:
    """What ``run``, ``start`` or ``resume`` says when another process (a
    ``flowdesk agent`` worker) took over the run it executed, its lease
    having lapsed (the database unreachable for longer than the lease's
    TTL, a server restart): who holds the run now (read afresh), that it
    goes on there, that the step in flight here may run again there, and
    the ``show`` command that follows it (with the user's ``--db``/``--scope``).
    ``exc``'s own words when the run cannot be read now."""
    try:
        sv = ctx.services()
        try:
            ref = sv.resolve_run_id(run_id)
            row: Any = (
                sv.agents.get(run_id) if ref.kind == "agent" else sv.checkpoints.get_run(run_id)
            )
        finally:
            sv.close()
    except FlowdeskError:
        return f"{exc}; see it with `{ctx.hints.cmd(f'show {run_id}')}`"
    holder = getattr(row, "lease_owner", None)
    status = str(getattr(row, "status", ""))
    who = f"another process ({holder})" if holder else "another process"
    if status in ("", "pending", "running", "waiting"):
        there, again = "it goes on there", "runs again there"
    else:  # it ended there already
        there, again = f"it went on there and is {status} now", "ran again there"
    return (
        f"run {run_id} was taken over by {who} after this process lost its hold on it "
        "(its lease could not be renewed in time: the database connection was lost, the "
        f"server restarted or the file stayed locked); {there}, and this command stops "
        f"without executing more of it. The step this process had in flight {again} "
        "(steps run at least once; side effects queued through the outbox are sent "
        f"once). Follow the run with: {ctx.hints.cmd(f'show {run_id}')}"
    )


def _say(exc: BaseException) -> None:
    """Print a Flowdesk error as ``flowdesk: MESSAGE``, then each note a
    command added to it (``exc.add_note``: what the error means for what
    the user asked, such as an answer not recorded) on a line of its own.
    Control characters show as escapes (:func:`visible_controls`): a message
    repeats what it was given (a run id, a flow or file name), and an escape
    sequence in it must not clear the screen or retitle the window."""
    print(f"flowdesk: {visible_controls(str(exc))}", file=sys.stderr)
    for note in getattr(exc, "__notes__", ()):
        print(visible_controls(str(note)), file=sys.stderr)


def tool_cut_off(name: str, at_most_once: bool) -> str:
    """What the stop did to an agent's tool call ``name`` in flight: one
    made at most once (approved, or ``at_most_once``) is never sent again,
    so its outcome stays unknown and the person checks it; another is made
    again by the resume."""
    if at_most_once:
        return (
            f"its call to {name} was in flight: whether it was made is unknown. The resume "
            "records it so and does not make it again; check where it acts whether it "
            "was made"
        )
    return f"its call to {name} was in flight; the resume makes it again"


def _say_resume(ctx: Ctx, *, unsaved_step: bool = False) -> bool:
    """Print ``resume with: flowdesk … resume RUN`` (the user's ``--db`` and
    ``--scope``) when the command was executing a run, which is stored and
    stopped where it was; whether it did. An ``answer`` whose answer was not
    saved yet prints that ``answer`` command again instead (a resume would
    find the run still waiting). ``unsaved_step``: the error stopped a
    write (the file locked, an I/O error), so the run stands at its last
    saved checkpoint and the step it was in runs again when resumed: said."""
    if ctx.unanswered is not None:
        print(
            f"nothing was answered; answer again with: {ctx.hints.cmd(ctx.unanswered)}",
            file=sys.stderr,
        )
        return True
    if ctx.current_run is None:
        return False
    if unsaved_step and not ctx.current_is_agent:
        print(
            f"run {ctx.current_run} stands at its last saved checkpoint: the step it was in "
            "runs again when it resumes (steps run at least once)",
            file=sys.stderr,
        )
    print(f"resume with: {ctx.hints.cmd('resume ' + ctx.current_run)}", file=sys.stderr)
    return True


def _say_damaged(ctx: Ctx, exc: StoreError) -> None:
    """After :class:`~desktop_app.errors.DatabaseCorruptError` or
    :class:`~desktop_app.errors.SchemaObjectMissingError` (``exc``): the
    ``doctor`` command that checks the whole file, or lists every missing
    table (the user's ``--db``), and the run the command executed, if any,
    as stopped where it was (a resume would meet the damage again: no
    ``resume`` is printed)."""
    if ctx.current_run is not None:
        print(
            f"run {ctx.current_run} stopped at its last checkpoint that was saved",
            file=sys.stderr,
        )
    said = (
        "list what is missing"
        if isinstance(exc, SchemaObjectMissingError)
        else "check the whole file"
    )
    print(f"{said} with: {ctx.hints.cmd('doctor')}", file=sys.stderr)


def _handle(ctx: Ctx, command_fn: Callable[[Ctx], int], argv: Sequence[str]) -> int:
    """Run ``command_fn`` (for the command line ``argv``); a Flowdesk error or
    Ctrl-C becomes its message and exit code."""
    if ctx.args.command in (*MAKES_A_RUN, "agent"):
        # Ctrl-C before its run is stored, or before the agent serves: the same again
        ctx.continue_with = command_again(argv)
    try:
        return command_fn(ctx)
    except BrokenPipeError:  # `flowdesk runs | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except BAD_INPUT as exc:
        _say(exc)
        return EXIT_USAGE
    except DiskFullError as exc:
        stop_progress()
        command = ctx.args.command or "app"
        if ctx.unsaved is not None:  # nothing of it was saved: the same command again
            exc = exc.for_command(
                ctx.hints.cmd(command_again(argv)), paused=False, unsaved=ctx.unsaved
            )
            print(f"flowdesk: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if ctx.current_run is not None and ctx.queued is not None:  # only its effects left
            then = ctx.hints.cmd(f"resume {ctx.current_run}")
            print(
                f"flowdesk: {exc.for_command(then, paused=False, queued=ctx.queued)}",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if ctx.current_run is not None:
            then, paused = f"resume {ctx.current_run}", True
        elif command in RESUMING:
            then, paused = "resume --all", True
        else:  # `resume RUN` again, or a command that executes no run (`db apply`)
            then, paused = command_again(argv), command == "resume"
        exc = exc.for_command(ctx.hints.cmd(then), paused=paused)
        print(f"flowdesk: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except CommitUnknownError as exc:
        stop_progress()
        print(f"flowdesk: {exc}", file=sys.stderr)
        if ctx.unanswered is not None and ctx.current_run is not None:
            # the answer's own commit: it may have landed, so no "nothing was answered"
            run = ctx.current_run
            print(
                f"whether the answer was saved is unknown: `{ctx.hints.cmd(f'show {run}')}` "
                f"says whether the run still waits for it; if it does, answer again with: "
                f"{ctx.hints.cmd(ctx.unanswered)}",
                file=sys.stderr,
            )
        elif not _say_resume(ctx):
            print(f"see what landed with: {ctx.hints.cmd('runs')}", file=sys.stderr)
        return EXIT_FAILED
    except DatabaseMissingError as exc:  # the hint with the user's --db and --scope
        print(f"flowdesk: {exc.for_command(ctx.hints.cmd('db apply'))}", file=sys.stderr)
        return EXIT_FAILED
    except FlowVersionMismatchError as exc:  # what works from the CLI, as commands
        print(f"flowdesk: {version_refusal(ctx.hints, exc)}", file=sys.stderr)
        return EXIT_FAILED
    except RunLeasedError as exc:
        _say(exc)
        if exc.moved_to is not None:  # db copy moved it: where to look at it now
            there = moved_hint(ctx.hints, exc.moved_to, exc.run_id)
            print(f"see it there: {there}", file=sys.stderr)
        return EXIT_FAILED
    except LeaseLostError as exc:
        stop_progress()
        if ctx.current_run is None:
            _say(exc)
            return EXIT_FAILED
        print(f"flowdesk: {taken_over(ctx, ctx.current_run, exc)}", file=sys.stderr)
        return EXIT_TAKEN_OVER
    except CheckpointCorruptError as exc:  # what works on the damaged run, as commands
        stop_progress()
        _say(exc)
        for line in damaged_run_hints(ctx.hints, exc):
            print(line, file=sys.stderr)
        return EXIT_FAILED
    except (DatabaseCorruptError, SchemaObjectMissingError) as exc:  # a resume meets it again
        stop_progress()
        _say(exc)
        _say_damaged(ctx, exc)
        return EXIT_FAILED
    except StoreError as exc:  # locked, unreachable, an I/O error: nothing of it saved
        stop_progress()
        _say(exc)
        _say_resume(ctx, unsaved_step=True)  # the run is stored: `start` again would make another
        return EXIT_FAILED
    except FlowdeskError as exc:
        _say(exc)
        if type(exc) is RevisionConflictError:  # not a lease's or a flow key's
            print(
                "if no other process works on this run, its record and its checkpoints "
                f"disagree (changed outside Flowdesk): `{ctx.hints.cmd('doctor')}` checks",
                file=sys.stderr,
            )
        return EXIT_FAILED
    except Exception as exc:
        translated = _untranslated_store_error(ctx, exc)
        if translated is None:  # a bug: its traceback, as before
            raise
        stop_progress()
        print(f"flowdesk: {translated}", file=sys.stderr)
        if isinstance(translated, (DatabaseCorruptError, SchemaObjectMissingError)):
            _say_damaged(ctx, translated)
        else:
            _say_resume(ctx)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        stop_signals.taken()
        stop_progress()  # else the progress line is drawn again after the message
        how = "interrupted"
        if isinstance(exc, Terminated):
            how = f"stopped by {signal.Signals(exc.args[0]).name}"
        command, what = ctx.on_interrupt()
        print(f"flowdesk: {how}; run `{ctx.hints.cmd(command)}` {what}", file=sys.stderr)
        in_flight = getattr(exc, "tool_in_flight", None)  # set by the agent's runtime
        if in_flight is not None:
            print(f"flowdesk: {tool_cut_off(*in_flight)}", file=sys.stderr)
        return 128 + exc.args[0] if isinstance(exc, Terminated) else 130
