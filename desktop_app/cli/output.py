"""How the command line prints: times, durations, JSON, hints, progress.

* Times: ISO-8601 UTC (``2026-12-01T11:25:43.120Z``) in ``--json`` output,
  ``2026-12-01 11:25:43`` in tables (also UTC).
* Durations: ``23h 59m``, ``4m 10s``, ``12s`` (never ``86,399 s``;
  :func:`desktop_app.words.duration`).
* ``-o text|json|jsonl`` (:data:`OUTPUTS`, as the Temporal CLI's
  ``--output``): ``json`` is one indented JSON document (a list is an
  array), ``jsonl`` one compact object per line; ``watch`` streams one
  document per change in either. ``--json`` is kept as ``-o jsonl``.
* Hints (:class:`Hints`) repeat the ``--db`` and ``--scope`` the user gave
  (also as ``FLOWDESK_DB_PATH``/``FLOWDESK_SCOPE``), so copying one reads
  the same database; never a password.
* Progress: one updating line with rate and ETA (rich) on a terminal, plain
  ``done/total`` lines otherwise; ``NO_COLOR`` turns colour off.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from desktop_app.textsafe import shell_quote
from desktop_app.words import duration

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: the run this command executed was taken over by another process (a
#: ``flowdesk agent`` worker), which goes on with it: neither done nor failed
EXIT_TAKEN_OVER = 3


def iso(ts: float | None) -> str | None:
    """UTC epoch seconds → ISO-8601 UTC with milliseconds and ``Z``; ``None`` stays."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def when(ts: float | None) -> str:
    """UTC epoch seconds → ``YYYY-MM-DD HH:MM:SS`` (UTC) for tables; ``-`` for none."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def due_in(deadline_at: float, now: float) -> str:
    """``in 23h 59m`` or ``passed 5s ago`` (:func:`~desktop_app.words.duration`)."""
    left = deadline_at - now
    return f"in {duration(left)}" if left >= 0 else f"passed {duration(-left)} ago"


def progress_text(p: tuple[int, int] | None) -> str:
    return "-" if p is None else f"{p[0]}/{p[1]}"


def emit(obj: Any) -> None:
    """One JSON document (or JSON Lines row) on stdout."""
    print(json.dumps(obj, ensure_ascii=False, default=str))


#: what ``-o``/``--output`` accepts; ``text`` (tables, sentences) is the default
OUTPUTS = ("text", "json", "jsonl")


def emit_one(output: str, obj: Any) -> None:
    """One object as ``output`` asks (``json``: indented; ``jsonl``: one
    line), flushed at once (``watch`` streams)."""
    indent = 2 if output == "json" else None
    print(json.dumps(obj, ensure_ascii=False, default=str, indent=indent), flush=True)


def emit_all(output: str, rows: list[Any]) -> None:
    """A list as ``output`` asks: ``json`` one indented array, ``jsonl``
    one compact object per line (nothing for no rows)."""
    if output == "json":
        print(json.dumps(rows, ensure_ascii=False, default=str, indent=2))
        return
    for row in rows:
        emit(row)


class Hints:
    """Builds every command the CLI suggests, so that it runs as printed.

    The one rule: a hint carries the database and scope the user picked for
    this command, as ``--db``/``--scope`` (a file's path made absolute, so the
    hint works from any folder), whether they came as options or
    as ``FLOWDESK_DB_PATH``/``FLOWDESK_SCOPE`` (often given for one command
    only: ``FLOWDESK_DB_PATH=x.db flowdesk ...``); a database or scope from
    the settings file is left out (the next command reads the same file).
    A PostgreSQL URL's password is never printed: the hint gives the URL
    without it (libpq then reads ``PGPASSWORD`` or ``~/.pgpass``), and
    :attr:`password_left_out` says so, for the note :data:`PASSWORD_NOTE`.
    """

    def __init__(self, db: str | None, scope: str | None) -> None:
        self.db = db
        self.scope = scope
        #: a hint printed the database URL without its password
        self.password_left_out = False

    @classmethod
    def of(cls, db: str | None, scope: str | None, environ: Mapping[str, str]) -> Hints:
        """Hints for a command given ``--db db --scope scope`` (``None``:
        not given) in the environment ``environ``. ``FLOWDESK_DB_PATH`` is
        given as the path Flowdesk uses: ``~`` and ``$VARS`` expanded, as the
        settings expand it (``--db`` takes its value literally, so a hint
        with ``--db '$HOME/z.db'`` would name another file)."""
        env_db = environ.get("FLOWDESK_DB_PATH") or None
        if db is None and env_db is not None:
            import contextlib

            from desktop_app.config import expand_path

            # an unset $VAR: the settings refuse it (exit 2) before any hint is printed
            with contextlib.suppress(ValueError):
                env_db = str(expand_path(env_db))
        return cls(
            db if db is not None else env_db,
            scope if scope is not None else environ.get("FLOWDESK_SCOPE") or None,
        )

    def cmd(self, rest: str, *, db: str | None = None, scope: str | None = None) -> str:
        """``flowdesk --db '/my db' resume --all``, quoted for a POSIX shell;
        ``db`` names another database than the user's (``db copy``'s target),
        ``scope`` another scope than the user's."""
        parts = ["flowdesk"]
        db = db if db is not None else self.db
        if db is not None:
            parts += ["--db", shell_quote(self._runnable_db(db))]
        scope = scope if scope is not None else self.scope
        if scope is not None:
            parts += ["--scope", shell_quote(scope)]
        return " ".join([*parts, rest])

    def _runnable_db(self, db: str) -> str:
        """``db`` as a hint prints it: a file path made absolute (a hint
        pasted in another folder, or another terminal, names the same file;
        ``--db o.db`` from ``/work`` prints ``--db /work/o.db``), a URL
        without its password."""
        from desktop_app.errors import has_secret, redact

        if "://" not in db:
            return os.path.abspath(db)
        if not has_secret(db):
            return db

        self.password_left_out = True
        return redact(db, mask=None)


def moved_hint(hints: Hints, moved_to: str, run_id: str) -> str:
    """``flowdesk --db postgresql://host/db show RUN``: the run ``db copy``
    moved to ``moved_to`` (a URL without its password), shown there, with the
    user's ``--scope`` (the copy keeps every run's scope)."""
    return hints.cmd(f"show {shell_quote(run_id)}", db=moved_to)


def moved_waiting(hints: Hints, moved_to: str, run_id: str) -> str:
    """What ``waiting`` and the app's inbox say of a run, agent run or thread
    that waited when ``db copy`` moved it to ``moved_to`` (a URL without its
    password): the file cannot know what became of it there since, so it
    says when it waited, where it is answered, and the command that shows it
    there."""
    return (
        f"moved to {moved_to} by flowdesk db copy while it waited: it is answered there, "
        f"not here (see it there: {moved_hint(hints, moved_to, run_id)})"
    )


def moved_line(hints: Hints, run_id: str, owner: str | None) -> str | None:
    """What ``show`` says of a run ``db copy`` moved (its lease ``owner`` says
    so), with the command that shows it there; ``None`` for any other run."""
    from desktop_app.errors import moved_to

    where = moved_to(owner)
    if where is None:
        return None
    return (
        f"moved to {where} by flowdesk db copy: its workers there execute it, nothing on "
        f"this database does; see it there: {moved_hint(hints, where, run_id)}"
    )


def moved_json(hints: Hints, run_id: str, owner: str | None) -> dict[str, str] | None:
    """``show -o json``'s ``moved`` of a run ``db copy`` moved (its lease
    ``owner`` says so): ``{"to": URL, "command": "flowdesk --db URL show
    RUN"}`` (the URL without its password), the one command offered for it
    (none on this database: each would be refused); ``None`` for any other
    run."""
    from desktop_app.errors import moved_to

    where = moved_to(owner)
    if where is None:
        return None
    return {"to": where, "command": moved_hint(hints, where, run_id)}


#: what ``show`` says under a wait of a run ``db copy`` moved, in place of a command
MOVED_WAIT = "    answered where the run moved (see above), not on this database"


def version_refusal(hints: Hints, exc: Any) -> str:
    """A ``FlowVersionMismatchError`` (``exc``) as the CLI says it: the
    refusal (:attr:`~desktop_app.errors.FlowVersionMismatchError.what`), then
    what works from here, each command with the user's ``--db``/``--scope``:
    restore the flow's old code and ``resume RUN`` (the run goes on where it
    stopped), ``cancel RUN``, or ``resume RUN --onto-current`` (a new run of
    the new version goes on from the step it stopped at, when that step still
    exists; the app's launch report offers the same)."""
    rid = exc.run_id
    return (
        f"{exc.what} Its flow changed since it started ({exc.change}). To finish it, "
        "restore the "
        "flow's code as it was then (what makes version "
        f"{exc.stored}) and run `{hints.cmd(f'resume {rid}')}`; to end it: "
        f"`{hints.cmd(f'cancel {rid}')}`; to continue it as a new run of the new version "
        "from the step it stopped at (when that step still exists; this run is then canceled "
        f"as superseded): `{hints.cmd(f'resume {rid} --onto-current')}`."
    )


#: printed (on stderr) after a command whose hints left a database password out
PASSWORD_NOTE = (
    "the commands suggested above leave out the database password: give it "
    "with PGPASSWORD or ~/.pgpass (libpq's own places), never on a command line"
)


def no_color() -> bool:
    """``NO_COLOR`` set to anything non-empty (https://no-color.org)."""
    return bool(os.environ.get("NO_COLOR"))


#: progress displays drawing now (rich ``Progress``); stopped before a last message
_LIVE_BARS: list[Any] = []


def stop_progress() -> None:
    """Stop every progress display still drawing (its refresh thread would
    redraw the line after a final message, e.g. on Ctrl-C), ending its line."""
    while _LIVE_BARS:
        _LIVE_BARS.pop().stop()


def step_listener(quiet: bool) -> Any:
    """An event-bus listener printing run progress and finished steps on stderr.

    On a terminal: one rich progress line (count, rate in files/s, ETA)
    updated in place. Otherwise: a ``done/total`` line at most every 0.5 s
    (and the last one), so logs stay short.
    """
    from desktop_app.flow.events import RunFinished, RunProgress, StepFinished

    tty = sys.stderr.isatty() and not quiet
    bar: Any = None
    task: Any = None
    last = [0.0]

    def start_bar(done: int, total: int) -> None:
        nonlocal bar, task
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        # soft_wrap: a line longer than the terminal (a hint printed while the
        # bar draws goes through this console) is left for the terminal to
        # wrap, never broken with a newline a copy would keep (a tryout copied
        # `flowdesk --db` and the rest of the command on the next line)
        console = Console(stderr=True, no_color=no_color(), soft_wrap=True)
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        bar.start()
        _LIVE_BARS.append(bar)
        task = bar.add_task("progress", total=total, completed=done, rate="")

    def end_bar() -> None:
        nonlocal bar
        if bar is not None:
            bar.stop()
            if bar in _LIVE_BARS:
                _LIVE_BARS.remove(bar)
            bar = None

    def listener(event: object) -> None:
        nonlocal bar
        if quiet:
            return
        if isinstance(event, RunProgress):
            if tty:
                if bar is None:
                    if event.done >= event.total:  # nothing left to watch
                        return
                    start_bar(event.done, event.total)
                speed = bar.tasks[0].speed if bar.tasks else None
                rate = f"{speed:,.0f}/s" if speed else ""
                bar.update(task, completed=event.done, total=event.total, rate=rate)
                if event.done == event.total:
                    end_bar()
                return
            now = time.monotonic()
            if now - last[0] >= 0.5 or event.done == event.total:
                last[0] = now
                print(f"  {event.done}/{event.total}", file=sys.stderr, flush=True)
        elif isinstance(event, RunFinished):  # waiting, failed, done: no more progress
            end_bar()
        elif isinstance(event, StepFinished):
            r = event.result
            extra = f": {r.error}" if r.error else ""
            line = f"step {r.name} {r.status} ({r.duration_ms:.0f} ms){extra}"
            if bar is not None:
                bar.console.print(line, markup=False, highlight=False)
            else:
                print(line, file=sys.stderr, flush=True)

    return listener


def damaged_run_hints(hints: Hints, exc: BaseException) -> list[str]:
    """The commands that work on a run whose checkpoint is damaged
    (:class:`~desktop_app.errors.CheckpointCorruptError` of a flow run's
    checkpoint), as lines to print: replay it from its newest intact
    revision below the damage (when one is left), and cancel it (while it
    has not ended: the cancel does not read the damaged state). Empty for
    any other error."""
    return [f"  {said}: {command}" for said, command in damaged_run_commands(hints, exc)]


def damaged_run_commands(hints: Hints, exc: BaseException) -> list[tuple[str, str]]:
    """:func:`damaged_run_hints` as ``(what it does, command)`` pairs (``show
    -o json`` lists the commands)."""
    from desktop_app.errors import ENDED_RUN_STATUSES, CheckpointCorruptError

    if not isinstance(exc, CheckpointCorruptError) or getattr(exc, "what", "") != "checkpoint":
        return []
    run_id, out = exc.run_id, []
    if exc.readable is not None:
        replay = hints.cmd(f"replay {run_id}:{exc.readable}")
        out.append((f"replay it from revision {exc.readable}, its last intact one", replay))
    if exc.run_status not in ENDED_RUN_STATUSES:
        out.append(("cancel it (its damaged state is not read)", hints.cmd(f"cancel {run_id}")))
    return out
