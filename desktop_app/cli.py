"""The ``flowdesk`` command line (argparse).

``flowdesk`` with no command launches the app. Every command takes
``--db PATH`` (default: ``flowdesk.db`` in the user data dir). Exit codes:
0 success; 1 a run failed or a Flowdesk error; 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from desktop_app import __version__
from desktop_app.errors import ConfigError, FlowdeskError, InputError, RunLeasedError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _progress(p: tuple[int, int] | None) -> str:
    return "-" if p is None else f"{p[0]}/{p[1]}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowdesk",
        description="Durable runs of local AI agents and multi-step jobs. "
        "With no command, launches the app.",
    )
    parser.add_argument("--version", action="version", version=f"flowdesk {__version__}")
    parser.add_argument("--db", type=Path, help="SQLite file (default: user data dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("app", help="launch the terminal app (the default)")

    db = sub.add_parser("db", help="the database schema")
    dbsub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    dbsub.add_parser("apply", help="apply pending schema files and record them in the ledger")
    dbsub.add_parser("status", help="show which schema files are applied")

    run = sub.add_parser("run", help="run a flow headless")
    runsub = run.add_subparsers(dest="flow", metavar="FLOW", required=True)
    dg = runsub.add_parser("digest", help="summarise every file of a folder into a report")
    dg.add_argument("--folder", required=True, type=Path, help="folder to read")
    dg.add_argument("--out", required=True, type=Path, help="folder for digest.md")
    dg.add_argument("--quiet", action="store_true", help="no progress output")
    dg.add_argument(
        "--model",
        action="store_true",
        help="summaries from the configured model (an agent run per file)",
    )

    start = sub.add_parser("start", help="run any registered flow headless")
    start.add_argument("flow", help="flow name (see `flowdesk flows`)")
    start.add_argument("--input", default="{}", help="the flow's input state as JSON")
    start.add_argument("--flow-key", help="single flight: return the live run with this key")

    sub.add_parser("flows", help="list registered flows (built-in and your own)")

    runs = sub.add_parser("runs", help="list runs")
    runs.add_argument("--status", action="append", help="only runs with this status (repeatable)")
    runs.add_argument("--limit", type=int, default=50, help="newest N runs (default 50)")
    runs.add_argument("--json", action="store_true", help="one JSON object per line")
    runs.add_argument("--tenant", help="only runs of this tenant")
    runs.add_argument("--session", help="only runs of this session")

    show = sub.add_parser("show", help="a run's steps and checkpoints")
    show.add_argument("run_id")

    res = sub.add_parser("resume", help="resume a run, or every interrupted run with --all")
    group = res.add_mutually_exclusive_group(required=True)
    group.add_argument("run_id", nargs="?")
    group.add_argument("--all", action="store_true", help="resume every pending run")

    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id")

    sub.add_parser("waiting", help="runs waiting, and what each waits for")

    answer = sub.add_parser("answer", help="answer a run waiting for input")
    answer.add_argument("run_id")
    answer.add_argument("value", help="the answer (text, or JSON with --json)")
    answer.add_argument("--wait-id", help="which question, when several are pending")
    answer.add_argument("--json", action="store_true", help="parse VALUE as JSON")

    sig = sub.add_parser("signal", help="send a signal (stored, delivered to a waiting run)")
    sig.add_argument("name")
    sig.add_argument("key")
    sig.add_argument("--payload", default="null", help="JSON payload (default null)")
    sig.add_argument("--dedupe-key", help="a second send with this key is a no-op")

    ask = sub.add_parser("ask", help="ask an agent (the configured model) a question")
    ask.add_argument("question", nargs="?", help="the question (omit with --resume)")
    ask.add_argument(
        "--tools",
        choices=["none", "files"],
        default="none",
        help="files: let the agent read and list files under --folder",
    )
    ask.add_argument("--folder", type=Path, default=Path("."), help="root for --tools files")
    ask.add_argument("--resume", metavar="RUN_ID", help="resume an interrupted agent run")
    ask.add_argument("--answer", help="with --resume: answer the agent's question")

    exp = sub.add_parser("export", help="runs, checkpoints and domain tables to JSON or CSV")
    exp.add_argument("--out", type=Path, required=True, help="folder for the files")
    exp.add_argument("--format", choices=["json", "csv"], default="json")
    exp.add_argument("--table", action="append", help="only this table (repeatable)")

    sub.add_parser("doctor", help="check the database, disk, keyring and model provider")

    secrets = sub.add_parser("secrets", help="API keys in the system keyring")
    secsub = secrets.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    sset = secsub.add_parser("set", help="store a secret (read from stdin or a prompt)")
    sset.add_argument("name", help="e.g. model_api_key")
    sdel = secsub.add_parser("delete", help="remove a secret")
    sdel.add_argument("name")

    agent = sub.add_parser(
        "agent", help="the engine without UI: resume work, fire deadlines, deliver signals"
    )
    agent.add_argument("--poll", type=float, default=1.0, help="seconds between passes")
    return parser


def _settings(args: argparse.Namespace) -> Any:
    from desktop_app.config import load_settings

    return load_settings(db_path=args.db)


def _print_progress(quiet: bool) -> Any:
    from desktop_app.flow.events import RunProgress, StepFinished

    last = [0.0]

    def listener(event: object) -> None:
        if quiet:
            return
        if isinstance(event, RunProgress):
            now = time.monotonic()
            if now - last[0] >= 0.5 or event.done == event.total:
                last[0] = now
                print(f"  {event.done}/{event.total}", file=sys.stderr, flush=True)
        elif isinstance(event, StepFinished):
            r = event.result
            extra = f": {r.error}" if r.error else ""
            print(f"step {r.name} {r.status} ({r.duration_ms:.0f} ms){extra}", file=sys.stderr)

    return listener


def cmd_db(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import apply_schema, schema_status

    settings = _settings(args)
    if args.db_command == "apply":
        report = apply_schema(settings)
        if report.applied:
            for key in report.applied:
                print(f"applied {key}")
        else:
            print("schema is up to date")
        print(f"database: {report.path}")
        return EXIT_OK
    for st in schema_status(settings):
        print(f"{st.state:8} {st.key}  {_when(st.applied_at)}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine
    from desktop_app.flow import EventBus
    from desktop_app.flows.digest import DigestState, check_input
    from desktop_app.store.sqlite import SqliteCheckpointStore

    settings = _settings(args)
    given = check_input(args.folder, args.out)
    events = EventBus()
    events.subscribe(_print_progress(args.quiet))
    engine = build_engine(settings, events=events)
    if args.model:
        from desktop_app.agent import Agent
        from desktop_app.bootstrap import build_model
        from desktop_app.flows.digest import agent_summarizer, build_digest_flow
        from desktop_app.store.agent_runs import SqliteAgentStore

        model = build_model(settings)
        if model is None:
            raise ConfigError(
                "--model needs a configured model: set FLOWDESK_MODEL__BASE_URL and "
                "FLOWDESK_MODEL__MODEL"
            )
        store = engine.store
        assert isinstance(store, SqliteCheckpointStore)
        agent = Agent("digest-summary", model, SqliteAgentStore(store))
        engine.register(build_digest_flow(summarizer=agent_summarizer(agent)))
    result = engine.run("digest", DigestState(folder=given.folder, out=given.out))
    print(f"run {result.run_id} {result.status}")
    if result.status == "completed":
        print(f"report: {result.state.report_path}")
        return EXIT_OK
    print(f"error: {result.error}", file=sys.stderr)
    return EXIT_FAILED


def cmd_start(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from desktop_app.bootstrap import build_engine

    try:
        given = json.loads(args.input)
    except json.JSONDecodeError as exc:
        raise InputError(f"--input is not JSON: {exc}") from exc
    engine = build_engine(_settings(args))
    try:
        result = engine.run(args.flow, given, flow_key=args.flow_key)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise InputError(f"--input does not fit flow {args.flow!r}: {problems}") from exc
    print(f"run {result.run_id} {result.status}")
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
    return EXIT_FAILED if result.status in ("failed", "timed_out") else EXIT_OK


def cmd_flows(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import load_flows

    for f in load_flows(_settings(args)):
        print(f"{f.name:16} {f.version:24} {len(f.steps)} steps")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import open_sqlite_store

    store = open_sqlite_store(_settings(args))
    runs = store.list_runs(
        statuses=args.status,
        newest_first=True,
        limit=args.limit,
        tenant_id=args.tenant,
        session_id=args.session,
    )[::-1]
    if args.json:
        for r in runs:
            print(
                json.dumps(
                    {
                        "run_id": r.run_id,
                        "flow": r.flow_name,
                        "status": r.status,
                        "progress": r.progress,
                        "created_at": r.created_at,
                        "updated_at": r.updated_at,
                        "error": r.error,
                    }
                )
            )
        return EXIT_OK
    if not runs:
        print("no runs")
        return EXIT_OK
    print(f"{'RUN':32}  {'FLOW':10} {'STATUS':10} {'PROGRESS':>11}  {'STARTED':19}  UPDATED")
    for r in runs:
        print(
            f"{r.run_id:32}  {r.flow_name:10} {r.status:10} {_progress(r.progress):>11}  "
            f"{_when(r.created_at)}  {_when(r.updated_at)}"
        )
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import open_sqlite_store

    store = open_sqlite_store(_settings(args))
    run = store.get_run(args.run_id)
    cp = store.latest(args.run_id)
    print(f"run {run.run_id}  flow {run.flow_name} ({run.flow_version})  status {run.status}")
    if run.error:
        print(f"error: {run.error}")
    print("steps:")
    for rec in cp.steps.values():
        extra = f" iteration {rec.iteration}" if rec.iteration else ""
        err = f"  {rec.error}" if rec.error else ""
        print(f"  {rec.step_id:16} {rec.status:12} attempts {rec.attempts}{extra}{err}")
    history = store.history(args.run_id)
    print(f"checkpoints: {len(history)}")
    shown = history if len(history) <= 12 else history[:5] + history[-5:]
    for i, info in enumerate(shown):
        if len(history) > 12 and i == 5:
            print(f"  … {len(history) - 10} more")
        print(f"  {info.id}  {info.status:10} {info.step_id:16} {_when(info.created_at)}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine
    from desktop_app.flow import EventBus

    events = EventBus()
    events.subscribe(_print_progress(False))
    engine = build_engine(_settings(args), events=events)
    if args.all:
        report = engine.recover()
        if not report:
            print("no interrupted runs")
        failed = 0
        for run, outcome in report:
            if isinstance(outcome, RunLeasedError):  # a live peer runs it: not a failure
                print(f"run {run.run_id} not resumed here: {outcome}")
            elif isinstance(outcome, BaseException):
                failed += 1
                print(f"run {run.run_id} not resumed: {outcome}")
            else:
                failed += outcome.status == "failed"
                print(f"run {run.run_id} {outcome.status}")
        return EXIT_FAILED if failed else EXIT_OK
    result = engine.resume(args.run_id)
    print(f"run {result.run_id} {result.status}")
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
    return EXIT_OK if result.status in ("completed", "waiting") else EXIT_FAILED


def cmd_cancel(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine

    run = build_engine(_settings(args)).cancel(args.run_id)
    print(f"run {run.run_id} {run.status}")
    return EXIT_OK


def cmd_waiting(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine

    engine = build_engine(_settings(args))
    runs = engine.waiting()
    if not runs:
        print("no waiting runs")
    now = time.time()
    for run in runs:
        print(f"run {run.run_id}  flow {run.flow_name}")
        waits = engine.waits(run.run_id)
        if not waits and run.error:
            print(f"  paused for an operator: {run.error}  (flowdesk resume {run.run_id})")
        for w in waits:
            what = {
                "input": f"input: {json.dumps(w.prompt)}",
                "signal": f"signal {w.name} {w.key}",
                "event": f"event {w.name}",
                "timer": "timer",
            }[w.kind]
            due = "" if w.deadline_at is None else f"  deadline in {w.deadline_at - now:,.0f} s"
            print(f"  {w.wait_id}  {what}{due}")
    return EXIT_OK


def cmd_answer(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine

    try:
        value = json.loads(args.value) if args.json else args.value
    except json.JSONDecodeError as exc:
        raise InputError(f"--json was given but VALUE is not JSON: {exc}") from exc
    engine = build_engine(_settings(args))
    result = engine.resume_with(args.run_id, value, wait_id=args.wait_id)
    delivered = _dispatcher(engine).dispatch()  # side effects the answer released
    print(f"run {result.run_id} {result.status}")
    if delivered:
        print(f"{delivered} outbox intent(s) delivered")
    return EXIT_OK if result.status in ("completed", "waiting") else EXIT_FAILED


def cmd_signal(args: argparse.Namespace) -> int:
    from desktop_app.bootstrap import build_engine

    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise InputError(f"--payload is not JSON: {exc}") from exc
    engine = build_engine(_settings(args))
    signal_id = engine.signal(args.name, args.key, payload, dedupe_key=args.dedupe_key)
    print(f"signal {signal_id} stored")
    return EXIT_OK


def cmd_agent(args: argparse.Namespace) -> int:
    import signal as signals
    import threading

    from desktop_app.bootstrap import build_engine

    engine = build_engine(_settings(args))
    stop = threading.Event()

    def on_term(signum: int, _frame: object) -> None:
        print(f"flowdesk agent: signal {signum}, stopping after the current step", file=sys.stderr)
        engine.stop()
        stop.set()

    signals.signal(signals.SIGTERM, on_term)
    signals.signal(signals.SIGINT, on_term)
    print(
        f"flowdesk agent: serving {args.db or 'the default database'} as {engine.owner}",
        file=sys.stderr,
    )
    dispatcher = _dispatcher(engine)
    from desktop_app.config import recovery_policy

    settings = _settings(args)
    engine.serve(
        stop,
        poll_s=args.poll,
        on_tick=dispatcher.dispatch,
        only=lambda run: recovery_policy(settings, run.flow_name) == "auto",
    )
    engine.store.close()
    return EXIT_OK


def _dispatcher(engine: Any) -> Any:
    """The outbox dispatcher for the built-in flows' destinations."""
    from desktop_app.flow.outbox import Dispatcher
    from desktop_app.flows import builtin_destinations

    return Dispatcher(engine.store, builtin_destinations(engine.store))


def cmd_ask(args: argparse.Namespace) -> int:
    from desktop_app.agent import Agent
    from desktop_app.agent.tools import file_tools
    from desktop_app.bootstrap import build_model, open_sqlite_store
    from desktop_app.store.agent_runs import SqliteAgentStore

    settings = _settings(args)
    model = build_model(settings)
    if model is None:
        raise ConfigError(
            "no model is configured: set FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL "
            "(or [model] base_url/model in the settings file), and store a key with "
            "`flowdesk secrets set model_api_key` if the server needs one"
        )
    tools = []
    if args.tools == "files":
        if not args.folder.is_dir():
            raise InputError(f"--folder {args.folder} is not a folder")
        tools = file_tools(args.folder)
    agent = Agent(
        "ask",
        model,
        SqliteAgentStore(open_sqlite_store(settings)),
        tools,
        system="You answer questions about the user's files. Be brief.",
    )
    if args.resume:
        if args.answer is not None:
            res = agent.resume_input(args.resume, args.answer)
            events = []
        else:
            events = list(agent.resume_stream(args.resume))
            res = events[-1].response  # type: ignore[assignment]
    else:
        if not args.question:
            raise InputError("give a question, or --resume RUN_ID")
        events = []
        for ev in agent.stream(args.question):
            if ev.kind == "delta":
                print(ev.text, end="", flush=True)
            elif ev.kind == "tool_start":
                print(f"\n[{ev.tool}…]", file=sys.stderr, flush=True)
            events.append(ev)
        print()
        res = events[-1].response  # type: ignore[assignment]
    assert res is not None
    if res.status == "done":
        if args.resume:
            print(res.text)
        print(f"run {res.run_id} done", file=sys.stderr)
        return EXIT_OK
    if res.status == "input_required":
        print(f"the agent asks: {res.question}")
        print(f"answer with: flowdesk ask --resume {res.run_id} --answer TEXT", file=sys.stderr)
        return EXIT_OK
    print(
        f"run {res.run_id} {res.status}: {res.error}  (flowdesk ask --resume {res.run_id})",
        file=sys.stderr,
    )
    return EXIT_FAILED


def cmd_secrets(args: argparse.Namespace) -> int:
    import getpass

    from desktop_app.secrets import delete_secret, set_secret

    if args.secrets_command == "delete":
        delete_secret(args.name)
        print(f"deleted {args.name}")
        return EXIT_OK
    value = getpass.getpass(f"{args.name}: ") if sys.stdin.isatty() else sys.stdin.readline()
    value = value.strip()
    if not value:
        raise InputError("empty secret; nothing stored")
    set_secret(args.name, value)
    print(f"stored {args.name} in the keyring")  # never echo the value
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    import subprocess

    settings = _settings(args)
    cmd = [
        sys.executable,
        "-m",
        "desktop_app.export",
        str(settings.db_path),
        str(args.out),
        "--format",
        args.format,
    ]
    for table in args.table or []:
        cmd += ["--table", table]
    # its own process: sqlite-utils (stdlib sqlite3) never shares one with apsw
    return subprocess.run(cmd, check=False).returncode


def cmd_doctor(args: argparse.Namespace) -> int:
    import shutil
    import stat

    from desktop_app.bootstrap import schema_status
    from desktop_app.store.connection import open_connection

    settings = _settings(args)
    path = Path(settings.db_path)
    problems = 0

    def line(ok: bool | None, what: str, detail: str) -> None:
        """ok True, a problem False, a warning None (reported, not a failure)."""
        nonlocal problems
        problems += ok is False
        mark = {True: "ok  ", False: "BAD ", None: "warn"}[ok]
        print(f"{mark} {what:18} {detail}")

    line(
        path.exists(),
        "database",
        f"{path}" + ("" if path.exists() else f" (missing: run `flowdesk --db {path} db apply`)"),
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
        try:
            states = schema_status(settings)
            bad = [s for s in states if s.state != "applied"]
            line(
                not bad,
                "schema",
                "all applied" if not bad else ", ".join(f"{s.key} {s.state}" for s in bad),
            )
            conn = open_connection(path, create=False, synchronous=settings.synchronous)
            journal = str(conn.execute("PRAGMA journal_mode").fetchall()[0][0])
            level = int(str(conn.execute("PRAGMA synchronous").fetchall()[0][0]))
            sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[level]
            check = str(conn.execute("PRAGMA quick_check").fetchall()[0][0])
            conn.close()
            line(journal == "wal", "journal mode", journal)
            line(True, "synchronous", f"{sync} (setting: {settings.synchronous})")
            line(check == "ok", "quick_check", check)
        except FlowdeskError as exc:
            line(False, "open", str(exc))
    free = shutil.disk_usage(path.parent if path.parent.exists() else Path.home()).free
    line(free > 100 * 2**20, "free disk", f"{free / 2**30:,.1f} GiB")
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
            else f"{name}: no keyring here, so API keys cannot be stored (local models need none)",
        )
    except Exception as exc:  # report, never crash the doctor
        line(False, "keyring", f"{type(exc).__name__}: {exc}")
    cfg = settings.model
    if cfg.base_url and cfg.model:
        import httpx

        try:
            resp = httpx.get(cfg.base_url.rstrip("/") + "/models", timeout=3)
            line(
                resp.status_code < 500, "model provider", f"{cfg.base_url} HTTP {resp.status_code}"
            )
        except httpx.HTTPError as exc:
            line(False, "model provider", f"{cfg.base_url}: {type(exc).__name__}: {exc}")
    else:
        line(True, "model provider", "not configured (FLOWDESK_MODEL__BASE_URL, __MODEL)")
    return EXIT_FAILED if problems else EXIT_OK


def cmd_app(args: argparse.Namespace) -> int:
    from desktop_app.app.main import FlowdeskApp

    app = FlowdeskApp(_settings(args))
    app.run()
    return app.return_code or EXIT_OK


COMMANDS = {
    "app": cmd_app,
    "db": cmd_db,
    "run": cmd_run,
    "runs": cmd_runs,
    "start": cmd_start,
    "flows": cmd_flows,
    "show": cmd_show,
    "resume": cmd_resume,
    "cancel": cmd_cancel,
    "waiting": cmd_waiting,
    "answer": cmd_answer,
    "signal": cmd_signal,
    "agent": cmd_agent,
    "ask": cmd_ask,
    "export": cmd_export,
    "doctor": cmd_doctor,
    "secrets": cmd_secrets,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowdesk`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    handler = COMMANDS[args.command or "app"]
    try:
        return handler(args)
    except BrokenPipeError:  # `flowdesk runs | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (InputError, ConfigError) as exc:
        print(f"flowdesk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FlowdeskError as exc:
        print(f"flowdesk: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("flowdesk: interrupted; run `flowdesk resume --all` to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
