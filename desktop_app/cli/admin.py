"""Housekeeping: ``db``, ``flows``, ``doctor``, ``export``, ``secrets``,
``agent``, ``app`` and ``completion``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from desktop_app.cli import stop_signals
from desktop_app.cli.common import Ctx
from desktop_app.cli.output import (
    EXIT_FAILED,
    EXIT_OK,
    damaged_run_hints,
    emit_all,
    emit_one,
    iso,
    version_refusal,
    when,
)
from desktop_app.errors import (
    CopySourceBusyError,
    CopyTargetNotEmptyError,
    DatabaseMissingError,
    DiskFullError,
    FlowdeskError,
    InputError,
    SecretsError,
    has_secret,
    redact,
    redact_urls,
)
from desktop_app.textsafe import shell_quote
from desktop_app.words import plural

if TYPE_CHECKING:
    from desktop_app.config import Settings


def dispatcher(engine: Any) -> Any:
    """The outbox dispatcher for the built-in flows' destinations."""
    from desktop_app.flow.outbox import Dispatcher
    from desktop_app.flows import builtin_destinations

    return Dispatcher(engine.store, builtin_destinations(engine.store))


def deliver_outbox(engine: Any) -> int:
    """Deliver every outbox intent of this scope that can be delivered now
    (``sending`` ones left by a killed process are reconciled first, so none
    is delivered twice); returns how many were delivered. Passes repeat
    until one delivers nothing (a pass takes at most 100 intents)."""
    outbox = dispatcher(engine)
    total = 0
    while delivered := outbox.dispatch():
        total += delivered
    return total


def cmd_db(ctx: Ctx) -> int:
    from desktop_app.bootstrap import apply_schema, schema_status

    if ctx.args.db_command == "copy":
        return cmd_db_copy(ctx)
    if ctx.args.db_command == "apply":
        report = apply_schema(ctx.settings)
        if report.applied:
            for key in report.applied:
                print(f"applied {key}")
        else:
            print("schema is up to date")
        print(f"database: {report.path}")
        return EXIT_OK
    states = schema_status(ctx.settings)
    if ctx.args.output != "text":
        emit_all(
            ctx.args.output,
            [{"key": st.key, "state": st.state, "applied_at": iso(st.applied_at)} for st in states],
        )
        return EXIT_OK
    print(f"{'STATE':8} {'SCHEMA FILE':40} APPLIED (UTC)")
    for st in states:
        print(f"{st.state:8} {st.key:40} {when(st.applied_at)}")
    return EXIT_OK


def cmd_db_copy(ctx: Ctx) -> int:
    """``flowdesk db copy --from FILE --to URL`` (see :mod:`desktop_app.store.postgres.copy`)."""
    from desktop_app.bootstrap import parse_database

    # --from is parsed as --db is (one place): a path or a percent-encoded sqlite:/// URL
    source = parse_database(ctx.args.source)
    if source.backend != "sqlite":
        raise InputError(
            f"--from must be a SQLite file (a path or a sqlite:/// URL), not "
            f"{redact(source.text)!r}: db copy moves the runs of a SQLite file into an empty "
            "PostgreSQL database: give the SQLite file the runs are in with --from (its path, "
            "or sqlite:///absolute/path.db) and the PostgreSQL database with --to"
        )
    target = parse_database(ctx.args.target)
    if target.backend != "postgres":
        raise InputError(
            f"--to must be a PostgreSQL URL (postgresql://USER@HOST:PORT/DBNAME), not "
            f"{redact(target.text)!r}: db copy moves a SQLite file's runs into PostgreSQL"
        )
    from desktop_app.integrations.langgraph.threads import saver_line
    from desktop_app.store.postgres.copy import copy_sqlite_to_postgres

    try:
        report = copy_sqlite_to_postgres(source.path, target.url)
    except CopyTargetNotEmptyError as exc:  # what it holds: `runs` on it, as the user wrote it
        mine = ctx.settings.scope
        # `runs` lists one scope: the user's own as they gave it, any other by name
        looks = [
            ctx.hints.cmd("runs", db=target.text, scope=None if s == mine else s)
            for s in exc.scopes or (mine,)
        ]
        print(f"flowdesk: {exc.for_command(*looks)}", file=sys.stderr)
        return EXIT_FAILED
    except CopySourceBusyError as exc:  # the same command again, as the user gave it
        ctx.hints.password_left_out |= has_secret(target.text)  # the note says to give it
        again = ctx.hints.cmd(
            f"db copy --from {shell_quote(ctx.args.source)} "
            f"--to {shell_quote(redact(target.text, mask=None))}"
        )
        print(f"flowdesk: {exc.for_command(again)}", file=sys.stderr)
        return EXIT_FAILED
    for table, n in report.rows.items():
        print(f"{table}: {plural(n, 'row')}")
    print(f"copied {report.summary()} from {source.path} to {target.shown}")
    mine = ctx.settings.scope

    def scoped(scopes: list[str]) -> list[str | None]:
        """Each scope as a hint names it (``None``: the user's own, as they
        gave it), the user's own first; a worker or ``runs`` sees one scope."""
        return sorted((None if s == mine else s for s in scopes), key=lambda s: s is not None)

    def listing(scopes: list[str], n: int) -> str:
        """``(`flowdesk --db F runs` shows them moved)``: one ``runs`` per scope."""
        looks = [f"`{ctx.hints.cmd('runs', db=ctx.args.source, scope=s)}`" for s in scoped(scopes)]
        return (
            f"({' and '.join(looks)} {'shows' if len(looks) == 1 else 'show'} "
            f"{'it' if n == 1 else 'them'} moved)"
        )

    if report.moved:  # the file's processes leave them to the target's workers
        print(
            f"marked {plural(len(report.moved), 'unfinished run')} moved in {source.path}: no "
            f"process on it executes {'it' if len(report.moved) == 1 else 'them'} again "
            f"{listing(report.scopes_of('runs', 'agent_runs', moved=True), len(report.moved))}"
        )
    if report.moved_intents:  # the target's dispatchers deliver them, the file's never
        from desktop_app.runs_view import MOVED_DELIVERY

        n = len(report.moved_intents)
        print(
            f"marked {plural(n, 'queued side effect')} (outbox "
            f"{'intent' if n == 1 else 'intents'} not delivered yet) moved in {source.path}: "
            f"no dispatcher on it sends {'it' if n == 1 else 'them'}; a dispatcher of "
            f"{target.shown} does ({MOVED_DELIVERY})"
        )
    if report.moved_threads:  # their checkpointer on the file refuses them now
        n = len(report.moved_threads)
        print(
            f"marked {plural(n, 'unfinished LangGraph thread')} moved in {source.path}: a "
            f"checkpointer on it no longer continues {'it' if n == 1 else 'them'} "
            f"{listing(report.scopes_of('langgraph_threads', moved=True), n)}"
        )
    if report.langgraph_threads:  # no worker runs a graph: each thread's program does
        ctx.hints.password_left_out |= has_secret(target.text)
        print(
            "next, for the LangGraph threads: a worker does not continue them; each one's "
            "own program does, running graph.invoke with its checkpointer opened on the "
            "new database:"
        )
        for s in scoped(report.scopes_of("langgraph_threads")):
            line = saver_line(redact(target.text, mask=None), ctx.hints.scope if s is None else s)
            print(f"  {line}")
    if report.runs or report.agent_runs or not report.langgraph_threads:
        # a worker serves one scope: one for each scope the copied runs are in
        workers = scoped(report.scopes_of("runs", "agent_runs")) or [None]
        print(f"next, on each worker machine{'' if len(workers) == 1 else ', one per scope'}:")
        for s in workers:  # the command alone on its line: pasted, it runs
            print(f"  {ctx.hints.cmd('agent', db=target.text, scope=s)}")
    return EXIT_OK


def cmd_flows(ctx: Ctx) -> int:
    from desktop_app.bootstrap import load_flows_report

    load = load_flows_report(ctx.settings)
    if ctx.args.output != "text":
        emit_all(
            ctx.args.output,
            [
                {"name": f.name, "version": f.version, "steps": len(f.steps), "ok": True}
                for f in load.flows
            ]
            + [
                {"name": None, "source": p.source, "ok": False, "error": str(p.error)}
                for p in load.problems
            ],
        )
    else:
        print(f"{'FLOW':16} {'VERSION':24} STEPS")
        for f in load.flows:
            print(f"{f.name:16} {f.version:24} {len(f.steps)}")
        for p in load.problems:
            print(f"flowdesk: {p.error}", file=sys.stderr)
    return EXIT_FAILED if load.problems else EXIT_OK


def cmd_doctor(ctx: Ctx) -> int:

    from desktop_app.bootstrap import parse_database

    settings = ctx.settings
    database = parse_database(settings.db_path)
    path = database.path
    checks: list[dict[str, Any]] = []

    def line(ok: bool | None, what: str, detail: str) -> None:
        """ok True, a problem False, a warning None (reported, not a failure)."""
        status = {True: "ok", False: "bad", None: "warn"}[ok]
        checks.append({"check": what, "status": status, "detail": detail})
        if ctx.args.output == "text":
            mark = {True: "ok  ", False: "BAD ", None: "warn"}[ok]
            print(f"{mark} {what:18} {detail}")

    apply_hint = ctx.hints.cmd("db apply", db=ctx.hints.db or str(path))
    if database.backend == "postgres":
        from desktop_app.store.postgres.doctor import postgres_checks

        pooler = ctx.settings.postgres.pooler
        for ok, what, detail in postgres_checks(database.url, pooler=pooler):
            line(ok, what, detail)
        path = Path.home()  # the free-disk check below is this machine's
    else:
        _sqlite_checks(ctx, line, path, apply_hint)
    _machine_checks(ctx, line, path)
    import time

    ok = not any(c["status"] == "bad" for c in checks)
    if ctx.args.output != "text":
        emit_one(
            ctx.args.output,
            {
                "ok": ok,
                "database": database.shown,
                "checked_at": iso(time.time()),
                "checks": checks,
            },
        )
    return EXIT_OK if ok else EXIT_FAILED


def _sqlite_checks(ctx: Ctx, line: Any, path: Path, apply_hint: str) -> None:
    import stat

    from desktop_app.bootstrap import inspect_database

    settings = ctx.settings
    line(
        path.exists(),
        "database",
        f"{path}" + ("" if path.exists() else f" (missing: run `{apply_hint}`)"),
    )
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        line(
            mode & 0o077 == 0,
            "file mode",
            f"{mode:04o}"
            + ("" if mode & 0o077 == 0 else f" (others can read it: chmod 600 {path})"),
        )
        line(True, "size", f"{path.stat().st_size:,} bytes")
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
        line(
            writable,
            "writable",
            "yes (file and folder)"
            if writable
            else f"no: Flowdesk needs to write {path} and create its -wal/-shm files in "
            f"{path.parent} (check permissions, or a read-only mount)",
        )
        try:
            from desktop_app.bootstrap import schema_status

            bad = [s for s in schema_status(settings) if s.state != "applied"]
            line(
                not bad,
                "schema",
                "all applied" if not bad else ", ".join(f"{s.key} {s.state}" for s in bad),
            )
            info = inspect_database(settings)
            line(info["journal_mode"] == "wal", "journal mode", info["journal_mode"])
            line(True, "synchronous", f"{info['synchronous']} (setting: {settings.synchronous})")
            check = info["quick_check"]
            line(
                check == "ok",
                "quick_check",
                check
                if check == "ok"
                else f"{check}: the file is corrupt. Restore it from a backup (stop every "
                "Flowdesk process using it first); Flowdesk cannot repair it, and commands "
                "that read a damaged page stop, saying the database is corrupt",
            )
            gone = info["missing"]
            if check == "ok":  # looked for in a file with no damage only
                line(
                    not gone,
                    "schema objects",
                    "all present"
                    if not gone
                    else f"missing {gone}: dropped outside Flowdesk, and `db apply` does not "
                    "create them again (its records say the schema is applied). Restore the "
                    "file from a backup (stop every Flowdesk process using it first)",
                )
            if check == "ok" and not gone:
                _say_runs_behind(ctx, line, info["behind"])
        except FlowdeskError as exc:
            if isinstance(exc, DiskFullError):  # no run was stopped: doctor again, with --db
                exc = exc.for_command(ctx.hints.cmd("doctor"), paused=False)
            line(False, "open", str(exc))


#: runs behind their checkpoints that doctor names one by one
BEHIND_SHOWN = 5


def _say_runs_behind(ctx: Ctx, line: Any, behind: list[tuple[str, int, int]]) -> None:
    """The ``run records`` check: runs whose record is older than their
    newest checkpoint (:func:`desktop_app.bootstrap.runs_behind`), each with
    the replay that goes on from that checkpoint as a new run."""
    if not behind:
        line(True, "run records", "no run's record is behind its checkpoints")
        return
    each = "; ".join(
        f"run {run_id}: record at revision {rev}, newest checkpoint {top} (go on from it as "
        f"a new run: `{ctx.hints.cmd(f'replay {run_id}:{top}')}`, then end this one: "
        f"`{ctx.hints.cmd(f'cancel {run_id}')}`)"
        for run_id, rev, top in behind[:BEHIND_SHOWN]
    )
    more = len(behind) - BEHIND_SHOWN
    line(
        False,
        "run records",
        f"{plural(len(behind), 'run')} not ended behind "
        f"{'its' if len(behind) == 1 else 'their'} checkpoints, changed outside Flowdesk: "
        "commands read an older checkpoint and cannot save (another writer saved first, "
        "they say). Restore the file from a backup (stop every Flowdesk process using it "
        f"first), or, oldest first: {each}"
        + (f"; and {plural(more, 'more run')} (listed here as these end)" if more > 0 else ""),
    )


def _machine_checks(ctx: Ctx, line: Any, path: Path) -> None:
    import shutil

    from desktop_app.bootstrap import load_flows_report

    settings = ctx.settings
    free = shutil.disk_usage(path.parent if path.parent.exists() else Path.home()).free
    line(free > 100 * 2**20, "free disk", f"{free / 2**30:,.1f} GiB")
    load = load_flows_report(settings)
    line(
        not load.problems,
        "flows",
        f"{len(load.flows)} loaded ({', '.join(f.name for f in load.flows)})"
        + "".join(f"; {p.error}" for p in load.problems),
    )
    try:
        import keyring

        backend = keyring.get_keyring()
        name = f"{type(backend).__module__}.{type(backend).__name__}"
        usable = "fail" not in name
        line(
            True if usable else None,
            "keyring",
            name
            if usable
            else f"{name}: no keyring here, so `secrets set` cannot store an API key (local "
            "models need none); give a key in the FLOWDESK_MODEL__API_KEY environment "
            "variable or in a 0600 file named by model.api_key_file",
        )
    except Exception as exc:  # report, never crash the doctor
        line(False, "keyring", f"{type(exc).__name__}: {exc}")
    cfg = settings.model
    if cfg.base_url and cfg.model:
        ok, detail = _model_provider_check(settings, cfg.base_url)
        line(ok, "model provider", detail)
    else:
        line(True, "model provider", "not configured (FLOWDESK_MODEL__BASE_URL, __MODEL)")


def _model_provider_check(settings: Settings, base_url: str) -> tuple[bool, str]:
    """The doctor's ``model provider`` check: ``GET {base_url}/models`` by
    the model the agent uses (:func:`desktop_app.bootstrap.build_model`:
    its key, the base URL's query), so a key the provider refuses is found
    here and not at the first question.

    Args:
        settings: the effective settings; base_url: ``model.base_url`` (set,
            with ``model.model``).

    Returns:
        tuple[bool, str]: whether the check passed, and what it found, with
        the URL's password and secret parameters masked and never the key:
        bad when the key cannot be read (the error's own message, which says
        what to do), when the provider cannot be reached or answers 5xx, and
        when it refuses the key (HTTP 401/403: where the key comes from).
        A provider that answers with no key set is fine (a local server).
    """
    import httpx

    from desktop_app.bootstrap import build_model
    from desktop_app.secrets import api_key_hint

    where = redact(base_url)
    try:
        model = build_model(settings)
    except SecretsError as exc:  # a KeyFileError too; neither message holds the key
        return False, f"{where}: the API key cannot be read: {exc}"
    except httpx.InvalidURL as exc:
        return False, redact_urls(f"{where}: {type(exc).__name__}: {exc}")
    assert model is not None  # base_url and model are set
    try:
        code = model.probe()
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return False, redact_urls(f"{where}: {type(exc).__name__}: {exc}")
    finally:
        model.close()
    if code in (401, 403):
        if not model.has_key:
            return False, (
                f"{where} HTTP {code}: the provider wants an API key and none is set; "
                f"{api_key_hint(settings.model)}"
            )
        return False, (
            f"{where} HTTP {code}: the provider refused the API key "
            f"({api_key_hint(settings.model)}); give it a key this provider accepts"
        )
    return code < 500, f"{where} HTTP {code}"


def cmd_export(ctx: Ctx) -> int:
    import subprocess

    from desktop_app.bootstrap import parse_database

    a = ctx.args
    database = parse_database(ctx.settings.db_path)
    if database.backend != "postgres" and not Path(database.path).is_file():
        # as every other command says it (exit 1, the `db apply` hint with --db)
        raise DatabaseMissingError(str(database.path))
    cmd = [
        sys.executable,
        "-m",
        "desktop_app.export",
        database.url if database.backend == "postgres" else str(database.path),
        str(a.out),
        "--format",
        a.format,
        "--scope",  # only this scope's runs, as `runs` lists them
        ctx.settings.scope,
        "--doctor",  # printed when a table is missing: with the user's --db
        ctx.hints.cmd("doctor"),
    ]
    for table in a.table or []:
        cmd += ["--table", table]
    # its own process: sqlite-utils (stdlib sqlite3) never shares one with the engine
    return subprocess.run(cmd, check=False).returncode


def cmd_secrets(ctx: Ctx) -> int:
    import getpass

    from desktop_app.secrets import delete_secret, set_secret

    a = ctx.args
    if a.secrets_command == "delete":
        delete_secret(a.name)
        print(f"deleted {a.name}")
        return EXIT_OK
    if a.value:  # never echoed: it is a secret, now in the shell's history
        raise InputError(
            "`secrets set` takes the secret at its prompt or on stdin, never on the command "
            "line (`ps` and your shell history show a command line); nothing was stored. "
            f"Run `{ctx.hints.cmd('secrets set ' + a.name)}` and paste it at the prompt, "
            "then remove the command from your shell history"
        )
    value = getpass.getpass(f"{a.name}: ") if sys.stdin.isatty() else sys.stdin.readline()
    value = value.strip()
    if not value:
        raise InputError("empty secret; nothing stored")
    set_secret(a.name, value)
    print(f"stored {a.name} in the keyring")  # never echo the value
    reads = ctx.settings.model.api_key_name
    if a.name != reads:  # a typo, or a name for later: say which one the model reads
        print(
            f"note: the model's key is read from {reads!r} (model.api_key_name), not "
            f'{a.name!r}; set api_key_name = "{a.name}" in the [model] section of the '
            "settings file to use this one",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_agent(ctx: Ctx) -> int:
    import itertools
    import signal as signals
    import threading

    from desktop_app.bootstrap import parse_database
    from desktop_app.config import recovery_policy
    from desktop_app.store.protocol import ServerOutages

    sv = _services_once_reachable(ctx)
    engine = sv.engine
    stop = threading.Event()
    grace = ctx.args.grace
    settings = sv.settings
    as_worker = ctx.args.worker or parse_database(sv.database).backend == "postgres"
    # a worker claims every run, whatever its policy; on SQLite the agent
    # resumes only the runs whose flow's recovery setting is auto
    policy: Callable[[str], str] = (
        (lambda _flow: "auto") if as_worker else (lambda flow: recovery_policy(settings, flow))
    )
    began = say_finished_runs(engine)
    leaving = _Leaving(ctx, engine, began, policy)
    # one C call per signal: a signal landing while the handler still runs
    # for the first (it runs again, nested, at the handler's next
    # instruction) finds the first counted, so it is taken as the second
    signals_seen = itertools.count()

    def on_term(signum: int, _frame: object) -> None:
        name = signals.Signals(signum).name
        if nth := next(signals_seen):  # a second signal (or a third): no more waiting
            if nth > 1 or _executing(engine):
                leaving.keeping_leases(f"on a second {name}")
            # nothing executes a step: nothing is waited for, and the stop
            # ends in a moment with its lines (the runs it left); only a tick
            # that holds it (an outbox send in flight) is cut short
            leaving.exit_later(HURRY_S, f"{HURRY_S:g} s after the second {name}")
            return
        print(
            f"flowdesk agent: {name}, stopping after the steps in flight "
            f"(at most {grace:g} s; signal again to exit now)",
            file=sys.stderr,
            flush=True,
        )
        engine.stop()  # releases no lease: each run's is given back once its step ended
        stop.set()
        if "server_outages" in sv.checkpoints.capabilities:  # a server gone away
            cast(ServerOutages, sv.checkpoints).stop_waiting()  # does not hold the stop
        leaving.exit_later(grace, f"{grace:g} s after the signal")

    signals.signal(signals.SIGTERM, on_term)
    signals.signal(signals.SIGINT, on_term)
    if as_worker:
        return _serve_worker(ctx, sv, stop, leaving)
    where = parse_database(sv.database).shown
    print(f"flowdesk agent: serving {where} as {engine.owner}", file=sys.stderr)
    for line in moved_runs(ctx, sv):
        print(f"flowdesk agent: {line}", file=sys.stderr, flush=True)
    engine.serve(
        stop,
        poll_s=ctx.args.poll,
        on_tick=_on_tick(ctx, sv),
        only=lambda run: policy(run.flow_name) == "auto",
        on_refused=lambda run_id, exc: _refused(ctx, run_id, exc),
    )
    stop_signals.taken()  # stopped: a signal now would only cut the exit short
    try:
        say_left_runs(ctx, sv, leaving)
    finally:
        sv.close()
    return EXIT_OK


def _services_once_reachable(ctx: Ctx) -> Any:
    """``ctx.services()`` for ``flowdesk agent``, tried again while the
    database server cannot be reached: a worker started before its server
    (a machine's boot, an outage) waits for it, as a running worker does
    through an outage, instead of exiting. Says so once on stderr; the
    waits grow from 0.5 s to ``postgres.reconnect_max_s``. Ctrl-C stops it.

    Raises:
        whatever else opening the database raises (a missing schema, bad
        credentials: waiting would not heal them).
    """
    import time

    from desktop_app.errors import DatabaseUnreachableError
    from desktop_app.flow.retry import Backoff

    cap = ctx.settings.postgres.reconnect_max_s
    backoff = Backoff(initial_s=0.5, max_s=cap, jitter_s=0.0)  # as the worker reconnects
    tries = 0
    while True:
        try:
            return ctx.services(worker=True)
        except DatabaseUnreachableError as exc:
            tries += 1
            if tries == 1:
                print(
                    f"flowdesk agent: {str(exc).rstrip('.')}; trying again every {cap:g} s at "
                    "most until it can be reached (Ctrl-C stops)",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(backoff.delay(tries))


def say_finished_runs(engine: Any) -> Callable[[], dict[str, str]]:
    """``flowdesk agent: run RUN STATUS`` on stderr as each flow run this
    process executes ends (completed, failed, waiting, canceled...).

    Returns:
        a function giving the runs this process began to execute and saw no
        end of (stopped by a signal, or taken over), run id -> flow name, in
        the order it began them: what :func:`say_left_runs` checks at exit.
        A copy, safe to take in a signal handler while runs go on.
    """
    from desktop_app.flow.events import RunFinished, RunStarted

    unended: dict[str, str] = {}  # the driving threads add, the main thread reads at exit

    def seen(event: object) -> None:
        if isinstance(event, RunStarted):
            unended[event.run_id] = event.flow_name
        elif isinstance(event, RunFinished):
            unended.pop(event.run_id, None)
            print(f"flowdesk agent: run {event.run_id} {event.status}", file=sys.stderr, flush=True)

    engine.events.subscribe(seen)
    return lambda: dict(unended)  # one C call: no run added or ended half-way through


class _Leaving:
    """What a stopping ``flowdesk agent`` says of the flow runs it began and
    saw no end of, and the commands that take each further.

    Args:
        began: :func:`say_finished_runs`'s function.
        policy: a flow's name -> its ``recovery`` setting (``auto``: an
            agent serving the database resumes the run).
    """

    def __init__(
        self,
        ctx: Ctx,
        engine: Any,
        began: Callable[[], dict[str, str]],
        policy: Callable[[str], str],
    ) -> None:
        self.ctx = ctx
        self.engine = engine
        self.began = began
        self.policy = policy

    def further(self, run_id: str, flow: str) -> str:
        """What takes run ``run_id`` of ``flow`` further, its commands with
        this agent's ``--db``/``--scope``."""
        resume = self.ctx.hints.cmd(f"resume {run_id}")
        setting = self.policy(flow)
        if setting == "auto":
            return (
                f"`{self.ctx.hints.cmd('agent')}` goes on with it (or a peer serving this "
                f"database), or run `{resume}` to continue now"
            )
        return (
            f"no `flowdesk agent` resumes it (recovery.{flow} is {setting!r} in the settings): "
            f"run `{resume}` to continue"
        )

    def exit_later(self, seconds: float, when: str) -> None:
        """Start the stop's grace: a daemon thread that, if the process is
        still running ``seconds`` from now, exits it keeping its leases
        (:meth:`keeping_leases`), saying ``when``."""
        import threading
        import time

        def grace() -> None:
            time.sleep(seconds)
            self.keeping_leases(when)

        threading.Thread(target=grace, name="flowdesk-stop-grace", daemon=True).start()

    def keeping_leases(self, when: str) -> None:
        """Exit the process now (exit status 1), saying which runs still
        execute a step: their leases are not released, so no peer takes a
        run over while its step may still run here; once this process is
        gone a peer takes each over (at once on this host or from a worker
        whose liveness lock dropped, else when its lease expires) and runs
        that step again, as after ``kill -9``. Then one line per flow run it
        began and saw no end of: kept (still executing) or stopped before
        its next step, with what takes it further. Reads no database (a
        signal handler, a server that may be gone): what this process saw."""
        import logging

        from desktop_app.agent.leases import agent_runs_held

        busy = sorted(self.engine.executing())
        agents = agent_runs_held()
        said = []
        if busy:
            said.append(
                f"runs still executing a step: {', '.join(busy)}; each keeps its lease and a "
                "peer takes it over and runs that step again, as after a crash"
            )
        if agents:
            said.append(
                f"agent runs still executing: {', '.join(agents)}; each keeps its lease and a "
                "peer resumes it once this process is gone, as after a crash (a tool call in "
                "flight is not sent again unless harmless to repeat)"
            )
        what = "; ".join(said) or "no run was executing a step"
        lines = [f"exiting {when}; {what}"]
        for run_id, flow in self.began().items():
            if run_id in busy:
                lines.append(
                    f"run {run_id} ({flow}) keeps its lease; once this process is gone, "
                    f"{self.further(run_id, flow)}"
                )
            else:
                lines.append(
                    f"run {run_id} ({flow}) stopped before its next step, not finished; "
                    f"{self.further(run_id, flow)}"
                )
        for line in lines:
            print(f"flowdesk agent: {line}", file=sys.stderr, flush=True)
        logging.getLogger("desktop_app.cli").warning("flowdesk agent %s", lines[0])
        from desktop_app.observability import flush_before_hard_exit

        flush_before_hard_exit()  # os._exit runs no exit hook: the spans' are run here
        for handler in logging.getLogger("desktop_app").handlers:
            handler.flush()
        sys.stdout.flush()
        os._exit(EXIT_FAILED)


def say_left_runs(ctx: Ctx, sv: Any, leaving: _Leaving) -> None:
    """At a stopping agent's exit, one line on stderr per flow run it began
    and saw no end of (``leaving.began``) that it stopped before the run's
    next step: still unfinished and held by nobody (or, if a release
    failed, still by this process), with what takes it further
    (:meth:`_Leaving.further`). A run another process took over, or one that
    ended elsewhere, is not named. A database that cannot be read (a server
    gone away) is said, with the command that lists the interrupted runs."""
    from desktop_app.errors import CheckpointNotFoundError
    from desktop_app.runs_view import ENDED

    for run_id, flow in leaving.began().items():
        try:
            run = sv.checkpoints.get_run(run_id)
        except CheckpointNotFoundError:  # deleted on success (delete_on_success)
            continue
        except FlowdeskError as exc:
            listed = ctx.hints.cmd("runs --status interrupted")
            print(
                f"flowdesk agent: could not read which runs it stopped before their next step "
                f"({exc}); run `{listed}` once the database answers",
                file=sys.stderr,
                flush=True,
            )
            return
        if run.status in ENDED or run.lease_owner not in (None, sv.engine.owner):
            continue
        print(
            f"flowdesk agent: run {run_id} ({flow}) stopped before its next step, "
            f"not finished; {leaving.further(run_id, flow)}",
            file=sys.stderr,
            flush=True,
        )


def moved_runs(ctx: Ctx, sv: Any) -> list[str]:
    """One line per unfinished flow or agent run of this scope that ``db
    copy`` moved to PostgreSQL (its lease says ``moved to URL``): nothing
    here executes it, and the command that shows it there."""
    from desktop_app.cli.output import moved_hint
    from desktop_app.errors import moved_to
    from desktop_app.runs_view import ENDED

    runs = [
        ("run", r.run_id, r.lease_owner)
        for r in sv.checkpoints.list_runs()
        if r.status not in ENDED and r.lease_owner is not None
    ]
    runs += [
        ("agent run", r.run_id, r.lease_owner)
        for r in sv.agents.list()
        if r.status not in ENDED and r.lease_owner is not None
    ]
    out = []
    for noun, run_id, owner in runs:
        where = moved_to(owner)
        if where is not None:
            out.append(
                f"{noun} {run_id} moved to {where} by flowdesk db copy; not executed here "
                f"(see it there: {moved_hint(ctx.hints, where, run_id)})"
            )
    return out


#: seconds a stopping ``flowdesk agent`` that executes nothing is given to
#: end after a second signal before it exits at once (its clean end takes
#: milliseconds; what can hold it is a tick's outbox send)
HURRY_S = 2.0


def _executing(engine: Any) -> bool:
    """Whether this process executes a flow run's step or an agent run
    (both read without a lock: a signal handler asks)."""
    from desktop_app.agent.leases import agent_runs_held

    return bool(engine.executing()) or bool(agent_runs_held())


def _refused(ctx: Ctx, run_id: str, exc: FlowdeskError) -> None:
    """Say (on stderr, once per run: ``Engine.serve`` and ``Worker`` call it once) that
    ``flowdesk agent`` cannot go on with run ``run_id``, why, and what works."""
    from desktop_app.errors import FlowVersionMismatchError

    why: object = exc
    if isinstance(exc, FlowVersionMismatchError):  # its flow's code changed: which one runs it
        why = (
            f"{version_refusal(ctx.hints, exc)} This worker has version {exc.current}; a "
            f"worker with the flow's code of version {exc.stored} would run it (while "
            "upgrading, keep one running until such runs end)."
        )
    print(
        f"flowdesk agent: run {run_id} cannot go on here (its waits do not fire, it is not "
        f"resumed): {why}",
        file=sys.stderr,
        flush=True,
    )
    for line in damaged_run_hints(ctx.hints, exc):  # a damaged checkpoint: what works
        print(line, file=sys.stderr, flush=True)


def _on_tick(ctx: Ctx, sv: Any) -> Any:
    """What ``flowdesk agent`` does after each pass: deliver outbox intents,
    then resume interrupted agent runs with their recorded tools (a run that
    fails or cannot be resumed is reported once, not retried every pass;
    its commands carry the worker's ``--db``/``--scope``)."""
    from desktop_app.cli.ask import recover_agents

    deliver = dispatcher(sv.engine).dispatch
    reported: set[str] = set()

    def tick() -> None:
        deliver()
        recover_agents(sv, reported, worker=True, hints=ctx.hints)

    return tick


def _serve_worker(ctx: Ctx, sv: Any, stop: Any, leaving: _Leaving) -> int:
    """``flowdesk agent`` as one of several workers sharing the database:
    claims runs (SKIP LOCKED), holds its liveness lock, wakes on
    notifications (see :mod:`desktop_app.flow.worker`)."""
    from desktop_app.bootstrap import parse_database
    from desktop_app.flow.worker import Worker
    from desktop_app.store.protocol import ServerOutages

    engine, store = sv.engine, sv.checkpoints
    if "processes" not in store.capabilities:
        raise InputError(
            f"{redact(sv.database)}: this store cannot share runs between workers (processes); "
            "run `flowdesk agent` without --worker, or use a PostgreSQL database"
        )
    retry_max_s = sv.settings.postgres.reconnect_max_s

    def unreachable(exc: FlowdeskError) -> None:
        print(
            f"flowdesk agent: the database is unreachable ({exc}); retrying every "
            f"{retry_max_s:g} s at most until it is back (a signal stops the worker)",
            file=sys.stderr,
            flush=True,
        )

    def reachable(away_s: float) -> None:
        print(
            f"flowdesk agent: the database is back after {away_s:.1f} s; resuming "
            "(interrupted runs are taken over as their leases allow)",
            file=sys.stderr,
            flush=True,
        )

    worker = Worker(
        engine,
        concurrency=ctx.args.concurrency,
        poll_s=ctx.args.poll,
        on_tick=_on_tick(ctx, sv),
        on_refused=lambda run_id, exc: _refused(ctx, run_id, exc),
        retry_max_s=retry_max_s,
        on_unreachable=unreachable,
        on_reachable=reachable,
    )
    if "server_outages" in store.capabilities:  # said while a pass still waits
        cast(ServerOutages, store).on_unreachable(worker.unreachable_met)
    listener = None
    sessions = "worker_sessions" in store.capabilities
    if sessions and store.session_url is None:
        # Behind a transaction-mode pooler without postgres.listen_url: said, not silent.
        print(
            f"flowdesk agent: {parse_database(sv.database).shown} goes through a "
            "transaction-mode pooler and postgres.listen_url is not set: this worker "
            "holds no liveness lock (a peer takes its runs over only when their lease "
            f"expires) and is not woken by notifications (it polls every {ctx.args.poll:g} s)",
            file=sys.stderr,
            flush=True,
        )
    elif sessions:
        listener = store.listener(owner=engine.owner, on_lost=worker.fence)
        worker.session = listener
    where = parse_database(sv.database).shown
    print(f"flowdesk agent: worker {engine.owner} on {where}", file=sys.stderr, flush=True)
    try:
        worker.serve(stop)
        stop_signals.taken()  # stopped: a signal now would only cut the exit short
        say_left_runs(ctx, sv, leaving)
    finally:
        if listener is not None:
            listener.close()
        sv.close()
    return EXIT_OK


def cmd_app(ctx: Ctx) -> int:
    """The app; SIGINT (the terminal's Ctrl-C is a key there, so a signal
    from elsewhere) closes it and exits 130 naming the run to resume (the
    one it was executing, else every interrupted one), as other commands do."""
    import asyncio
    import signal as signals

    from desktop_app.app.main import FlowdeskApp

    app = FlowdeskApp(ctx.settings, hints=ctx.hints)
    stopped: list[list[str]] = []

    def on_sigint(_signum: int, _frame: object) -> None:
        if not stopped:
            stopped.append(app.runs.driving())
            loop = asyncio.get_running_loop()  # the app's, in this (the main) thread
            loop.call_soon_threadsafe(lambda: app.exit(return_code=130))

    signals.signal(signals.SIGINT, on_sigint)
    app.run()
    if stopped:
        ctx.current_run = stopped[0][0] if len(stopped[0]) == 1 else None
        raise KeyboardInterrupt
    return app.return_code or EXIT_OK


def cmd_completion(ctx: Ctx) -> int:
    from argcomplete.shell_integration import shellcode

    print(shellcode(["flowdesk"], shell=ctx.args.shell))
    return EXIT_OK
