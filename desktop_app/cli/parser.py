"""The ``flowdesk`` argument parser: argparse, with argcomplete completion.

argparse stays (rather than click/typer/cyclopts): the commands are flat
options over one shared ``--db``, argparse already gives the README's exit
code 2 for usage errors, and argcomplete completes argparse parsers as they
are (``flowdesk completion bash``), including run ids from the database.
The size of the old module was its handlers, not its parser; those now live
in small modules next to this one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from desktop_app import __version__

RUN_ID_HELP = "a run id or a unique prefix of it (the 8 characters the app shows are enough)"


def _run_ids(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete: ids of the newest runs in the database the command names."""
    try:
        from desktop_app.bootstrap import open_checkpoint_store
        from desktop_app.config import load_settings

        store = open_checkpoint_store(
            load_settings(db_path=parsed_args.db, scope=getattr(parsed_args, "scope", None))
        )
        try:
            ids = [r.run_id for r in store.list_runs(newest_first=True, limit=200)]
        finally:
            store.close()
    except Exception:  # completion never prints a traceback into the shell
        return []
    return [i for i in ids if i.startswith(prefix)]


def _run_id(p: argparse.ArgumentParser, *, nargs: str | None = None) -> None:
    action = p.add_argument("run_id", nargs=nargs, metavar="RUN", help=RUN_ID_HELP)
    action.completer = _run_ids  # type: ignore[attr-defined]


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (else a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number (1 or more)")
    return value


def run_statuses() -> list[str]:
    """Every status ``runs --status`` accepts: flow run statuses, then the
    agent run statuses that are not flow statuses too."""
    from typing import get_args

    from desktop_app.store.records import RUN_STATUSES, AgentStatus  # stdlib only: no store

    return [*RUN_STATUSES, *(s for s in get_args(AgentStatus) if s not in RUN_STATUSES)]


def _json(p: argparse.ArgumentParser, what: str = "JSON Lines, one object per line") -> None:
    p.add_argument("--json", action="store_true", help=f"{what}; times are ISO-8601 UTC")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowdesk",
        description="Durable runs of local AI agents and multi-step jobs. "
        "With no command, launches the app.",
        epilog="Exit codes: 0 ok; 1 a run failed or a Flowdesk error; 2 bad input "
        "(unknown run id or flow, missing folder, bad JSON, bad settings).",
    )
    parser.add_argument("--version", action="version", version=f"flowdesk {__version__}")
    parser.add_argument(
        "--db",
        metavar="PATH_OR_URL",
        help="the database: a SQLite file (~ and $VARS expanded) or a URL "
        "(default: flowdesk.db in the user data dir)",
    )
    parser.add_argument(
        "--scope",
        help="the scope: a named partition of runs inside one database (default 'default')",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("app", help="launch the terminal app (the default)")

    db = sub.add_parser("db", help="the database schema")
    dbsub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    dbsub.add_parser("apply", help="apply pending schema files and record them in the ledger")
    _json(dbsub.add_parser("status", help="show which schema files are applied"))
    cp = dbsub.add_parser(
        "copy",
        help="copy a SQLite database into an applied, empty PostgreSQL database "
        "(runs continue there)",
    )
    cp.add_argument("--from", dest="source", required=True, type=Path, help="the SQLite file")
    cp.add_argument("--to", dest="target", required=True, help="the postgresql:// URL")

    run = sub.add_parser("run", help="run a built-in flow headless")
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
    dg.add_argument(
        "--new",
        action="store_true",
        help="start a new run even if an interrupted run of this folder and output exists",
    )

    start = sub.add_parser("start", help="run any registered flow headless")
    start.add_argument("flow", help="flow name (see `flowdesk flows`)")
    start.add_argument("--input", default="{}", help="the flow's input state as JSON")
    start.add_argument("--input-file", type=Path, help="read the input JSON from this file")
    start.add_argument("--flow-key", help="single flight: return the live run with this key")
    start.add_argument(
        "--new",
        action="store_true",
        help="built-in flows: start a new run even if an interrupted one has this input",
    )

    _json(sub.add_parser("flows", help="list registered flows (built-in and your own)"))

    runs = sub.add_parser(
        "runs", help="list flow runs, agent runs and LangGraph threads, newest first"
    )
    runs.add_argument(
        "--status",
        action="append",
        choices=run_statuses(),
        metavar="STATUS",
        help=f"only runs with this status (repeatable): {', '.join(run_statuses())}",
    )
    runs.add_argument(
        "--kind",
        choices=["flow", "agent", "langgraph"],
        help="only flow runs, agent runs or LangGraph threads",
    )
    runs.add_argument("--flow", help="only runs of this flow (or agent) name")
    runs.add_argument("--limit", type=positive_int, default=50, help="newest N runs (default 50)")
    runs.add_argument("--tenant", help="only runs of this tenant")
    runs.add_argument("--session", help="only runs of this session")
    runs.add_argument(
        "--children", action="store_true", help="also child agent runs (one per digest file)"
    )
    _json(runs)

    show = sub.add_parser("show", help="a run's steps and checkpoints, or an agent run's turns")
    _run_id(show)
    _json(show, "one JSON object")

    watch = sub.add_parser("watch", help="follow one run (or all runs) live until Ctrl-C")
    _run_id(watch, nargs="?")
    watch.add_argument("--interval", type=float, default=0.5, help="seconds between looks")

    res = sub.add_parser("resume", help="resume a run, or every interrupted run with --all")
    group = res.add_mutually_exclusive_group(required=True)
    act = group.add_argument("run_id", nargs="?", metavar="RUN", help=RUN_ID_HELP)
    act.completer = _run_ids  # type: ignore[attr-defined]
    group.add_argument("--all", action="store_true", help="resume every interrupted run")

    _run_id(sub.add_parser("cancel", help="cancel a flow run or an agent run"))

    undo = sub.add_parser("undo", help="move a tidy run's files back where they were")
    _run_id(undo)
    _json(undo, "one JSON object")

    _json(sub.add_parser("waiting", help="runs waiting, and what each waits for"))

    answer = sub.add_parser("answer", help="answer a run waiting for input")
    _run_id(answer)
    answer.add_argument(
        "value",
        nargs="?",
        help="the answer (text, or JSON with --json); left out, it is read from standard input",
    )
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
    act = ask.add_argument("--resume", metavar="RUN", help="resume an interrupted agent run")
    act.completer = _run_ids  # type: ignore[attr-defined]
    ask.add_argument("--answer", help="with --resume: answer the agent's question")
    ask.add_argument(
        "--no-stream",
        action="store_true",
        help="ask each turn as one reply instead of a stream (a server that cannot stream "
        "tool calls, e.g. llama.cpp's); the setting model.stream = false does it always",
    )
    ask.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME",
        help="let the agent use the tools of [mcp_servers.NAME] from the settings (repeatable)",
    )

    exp = sub.add_parser("export", help="runs, checkpoints and domain tables to JSON or CSV")
    exp.add_argument("--out", type=Path, required=True, help="folder for the files (mode 0600)")
    exp.add_argument("--format", choices=["json", "csv"], default="json")
    exp.add_argument("--table", action="append", help="only this table (repeatable)")

    doctor = sub.add_parser(
        "doctor", help="check the database, disk, flows, keyring and model provider"
    )
    _json(doctor, "one JSON object")

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
    agent.add_argument(
        "--worker",
        action="store_true",
        help="claim runs from a database shared by several workers (machines); "
        "always so on PostgreSQL",
    )
    agent.add_argument(
        "--concurrency", type=int, default=4, help="worker mode: runs executed at once"
    )

    comp = sub.add_parser(
        "completion", help="print the shell completion script (eval it in your shell's rc)"
    )
    comp.add_argument("shell", choices=["bash", "zsh", "fish", "tcsh", "powershell"])
    return parser
