"""The ``flowdesk`` argument parser: argparse, with argcomplete completion.

argparse stays (rather than click/typer/cyclopts): the commands are flat
options over one shared ``--db``, argparse already gives the README's exit
code 2 for usage errors, and argcomplete completes argparse parsers as they
are (``flowdesk completion bash``), including run ids from the database.
The size of the old module was its handlers, not its parser; those now live
in small modules next to this one.

Conventions every command follows:

* ``-o text|json|jsonl`` on every read command (:func:`_output`, as the
  Temporal CLI's ``--output``); the older ``--json`` stays as ``-o jsonl``.
* A mistyped option or command is named with the nearest valid one
  (:class:`Parser`, :mod:`difflib` over the parser's own option strings
  and commands): ``--foldr`` → ``did you mean '--folder'?``.
* An option that was renamed fails with the new spelling (:class:`Renamed`):
  ``answer --json`` is ``answer --value-json``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from desktop_app import __version__
from desktop_app.cli.output import OUTPUTS

RUN_ID_HELP = "a run id or a unique prefix of it (the 8 characters the app shows are enough)"


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors name the option or command the
    user meant when one argument is a near miss of a valid one (``--foldr``
    → ``--folder``, ``--bd`` → ``--db``, ``wach`` → ``watch``), by
    :func:`difflib.get_close_matches` over this parser's own option strings
    and subcommands; a global option given after the command (``runs --db
    x``) is told to go before it. Other errors keep argparse's message. Exit
    code 2 as always. Subparsers are of this class too (``add_subparsers``
    uses the parent's class)."""

    _given: list[str]

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        super().error(near_miss(self, getattr(self, "_given", [])) or message)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def near_miss(parser: argparse.ArgumentParser, given: Sequence[str]) -> str | None:
    """The first argument of ``given`` (the arguments ``parser`` was given)
    that is neither an option, a command nor one of an option's choices at
    its place, with the nearest valid spelling; ``None`` when each is valid
    or no spelling is near (argparse's own message then stands)."""
    import difflib

    here, above = parser, set[str]()
    tokens = iter(given)
    for token in tokens:
        if token == "--":
            return None
        options = here._option_string_actions
        if not token.startswith("-") or token[1:2].isdigit():
            commands = _commands(here)
            if token in commands:
                above |= set(options)
                here = commands[token]
            elif commands:
                near = difflib.get_close_matches(token, list(commands), n=1)
                if near:
                    return f"unknown command {token!r}; did you mean {near[0]!r}?"
            continue
        name = token.split("=", 1)[0]
        known = name[:2] if not name.startswith("--") else name
        action = options.get(known) or next(
            (a for o, a in options.items() if name.startswith("--") and o.startswith(name)), None
        )
        if action is not None:
            value = token.partition("=")[2] if "=" in token else None
            if action.nargs != 0 and value is None and known == name:
                value = next(tokens, None)  # its value, whatever it looks like
            choices = [str(c) for c in action.choices or ()]
            if value is not None and choices and value not in choices:
                near = difflib.get_close_matches(value, choices, n=1)
                if near:
                    return f"{name} {value!r} is not one of its choices; did you mean {near[0]!r}?"
            continue
        if name in above:
            return f"{name} is an option of flowdesk itself: give it before the command"
        near = difflib.get_close_matches(name, [o for o in options if o.startswith("--")], n=1)
        if near:
            return f"unrecognized option {name!r}; did you mean {near[0]!r}?"
        return None
    return None


def _run_ids(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete: ids of the newest runs in the database the command names."""
    try:
        from desktop_app.bootstrap import open_checkpoint_store
        from desktop_app.config import given, load_settings

        store = open_checkpoint_store(
            load_settings(
                db_path=given(parsed_args.db),
                scope=given(getattr(parsed_args, "scope", None)),
            )
        )
        try:
            ids = [r.run_id for r in store.list_runs(newest_first=True, limit=200)]
        finally:
            store.close()
    except Exception:  # completion never prints a traceback into the shell
        return []
    return [i for i in ids if i.startswith(prefix)]


def _flow_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """argcomplete: the names of the flows ``start`` can run (built-in and
    configured ones, loaded as ``flowdesk flows`` does: only on this Tab)."""
    try:
        from desktop_app.bootstrap import load_flows_report
        from desktop_app.config import given, load_settings

        settings = load_settings(
            db_path=given(parsed_args.db),
            scope=given(getattr(parsed_args, "scope", None)),
        )
        names = sorted({f.name for f in load_flows_report(settings).flows})
    except Exception:  # completion never prints a traceback into the shell
        return []
    return [n for n in names if n.startswith(prefix)]


def _run_id(p: argparse.ArgumentParser, *, nargs: str | None = None) -> None:
    action = p.add_argument("run_id", nargs=nargs, metavar="RUN", help=RUN_ID_HELP)
    action.completer = _run_ids  # type: ignore[attr-defined]


#: the largest whole number SQLite and PostgreSQL (bigint) store: a bigger
#: ``runs --limit`` was an OverflowError traceback in the query
MAX_WHOLE = 2**63 - 1


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 and at most :data:`MAX_WHOLE`
    (else a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number (1 or more)")
    if value > MAX_WHOLE:
        raise argparse.ArgumentTypeError(f"{value} is too big (at most {MAX_WHOLE})")
    return value


#: the longest pause ``--poll``/``--interval`` take (a day): a wait longer
#: than the platform's timer (``inf``, ``1e300``) was a traceback
MAX_SECONDS = 86400.0


def seconds(text: str) -> float:
    """argparse type: a pause in seconds, more than 0 and at most a day
    (:data:`MAX_SECONDS`), else a usage error (exit 2). ``0`` (a loop that
    never pauses, a core kept busy), a negative number, ``nan`` and ``inf``
    are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:  # False for nan too
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds above 0 and at most {MAX_SECONDS:g} (a day)"
        )
    return value


def run_statuses() -> list[str]:
    """Every status ``runs --status`` accepts: flow run statuses, then the
    agent run statuses that are not flow statuses too, a LangGraph thread's
    ``answered``, then ``interrupted`` and ``moved``
    (:data:`desktop_app.runs_view.INTERRUPTED` and
    :data:`~desktop_app.runs_view.MOVED`, shown, never stored; spelt here
    because runs_view loads the engine's owners module)."""
    from typing import get_args

    from desktop_app.store.records import RUN_STATUSES, AgentStatus  # stdlib only: no store

    agent_only = (s for s in get_args(AgentStatus) if s not in RUN_STATUSES)
    # "answered": a LangGraph thread's (integrations.langgraph.threads.ANSWERED)
    return [*RUN_STATUSES, *agent_only, "answered", "interrupted", "moved"]


def _output(p: argparse.ArgumentParser) -> None:
    """``-o text|json|jsonl`` (Temporal's convention) and the older ``--json``."""
    p.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="text",
        help="text (the default), json (one indented document; a list is an array) or "
        "jsonl (one compact object per line); times in JSON are ISO-8601 UTC",
    )
    p.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const="jsonl",
        help="the same as -o jsonl (kept for scripts written before -o)",
    )


class Renamed(argparse.Action):
    """An option that was renamed: giving it is a usage error (exit 2) that
    says what to give instead; it takes no value and is hidden from help."""

    def __init__(self, option_strings: list[str], dest: str, *, instead: str, **_: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help=argparse.SUPPRESS)
        self.instead = instead

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"{option_string} is no longer an option here: {self.instead}")


@functools.cache
def shared_parser() -> argparse.ArgumentParser:
    """:func:`build_parser`'s parser, built once per process and shared by
    every :func:`~desktop_app.cli.main` call in it (parsing does not change
    it; building it is ~15 ms of argparse and gettext per call, which a
    process that runs many commands, as the tests' fork server does, would
    otherwise pay at each)."""
    return build_parser()


def build_parser() -> argparse.ArgumentParser:
    """A new parser of every ``flowdesk`` command and option."""
    parser = Parser(
        prog="flowdesk",
        description="Durable runs of local AI agents and multi-step jobs. "
        "With no command, launches the app.",
        epilog="Exit codes: 0 ok; 1 a run failed or a Flowdesk error; 2 bad input "
        "(unknown run id or flow, missing folder, bad JSON, bad settings); 3 the run was "
        "taken over by another process, which goes on with it.",
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
    _output(dbsub.add_parser("status", help="show which schema files are applied"))
    cp = dbsub.add_parser(
        "copy",
        help="copy a SQLite database into an applied, empty PostgreSQL database "
        "(runs continue there)",
    )
    cp.add_argument(
        "--from",
        dest="source",
        required=True,
        help="the SQLite file: a path or a sqlite:/// URL (as --db takes it)",
    )
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
        help="start a new run; an unfinished run of this folder and output is canceled",
    )

    td = runsub.add_parser(
        "tidy",
        help="move a folder's top-level files into <Kind>/<YYYY-MM>/ once you approve",
    )
    td.add_argument("--folder", required=True, type=Path, help="folder to tidy")
    td.add_argument("--quiet", action="store_true", help="no progress output")
    td.add_argument(
        "--new",
        action="store_true",
        help="start a new run; an unfinished run of this folder is canceled",
    )

    start = sub.add_parser("start", help="run any registered flow headless")
    act = start.add_argument("flow", help="flow name (see `flowdesk flows`)")
    act.completer = _flow_names  # type: ignore[attr-defined]
    start.add_argument("--input", help="the flow's input state as JSON (default {})")
    start.add_argument(
        "--input-file", metavar="PATH", help="read the input JSON from this file (-: stdin)"
    )
    start.add_argument("--flow-key", help="single flight: return the live run with this key")
    start.add_argument(
        "--new",
        action="store_true",
        help="start a new run; an unfinished one with this input (or --flow-key) is canceled",
    )

    _output(sub.add_parser("flows", help="list registered flows (built-in and your own)"))

    runs = sub.add_parser(
        "runs", help="list flow runs, agent runs and LangGraph threads, newest first"
    )
    runs.add_argument(
        "--status",
        action="append",
        choices=run_statuses(),
        metavar="STATUS",
        help="only runs shown with this status (repeatable; 'interrupted': no process "
        "executes them any more; 'moved': db copy moved them to PostgreSQL): "
        f"{', '.join(run_statuses())}",
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
    _output(runs)

    show = sub.add_parser(
        "show",
        help="a run's steps, checkpoints and what it waits for (with the command that "
        "answers it), or an agent run's turns",
    )
    _run_id(show)
    _output(show)

    watch = sub.add_parser("watch", help="follow one run (or all runs) live until Ctrl-C")
    _run_id(watch, nargs="?")
    watch.add_argument("--interval", type=seconds, default=0.5, help="seconds between looks")
    _output(watch)

    res = sub.add_parser("resume", help="resume a run, or every interrupted run with --all")
    group = res.add_mutually_exclusive_group(required=True)
    act = group.add_argument("run_id", nargs="?", metavar="RUN", help=RUN_ID_HELP)
    act.completer = _run_ids  # type: ignore[attr-defined]
    group.add_argument("--all", action="store_true", help="resume every interrupted run")
    res.add_argument(
        "--onto-current",
        action="store_true",
        help="for a run whose flow changed since it started: continue it as a new run of the "
        "flow's current version from the step it stopped at (which must still exist); the run "
        "itself is canceled as superseded",
    )

    _run_id(sub.add_parser("cancel", help="cancel a flow run or an agent run"))

    checkpoint_help = (
        "RUN (from its start: its first kept checkpoint) or RUN:REVISION, a checkpoint "
        "as `show RUN` lists them; RUN may be a unique prefix"
    )
    replay = sub.add_parser(
        "replay",
        help="run a flow run again as a new run, from its start or one of its checkpoints",
    )
    act = replay.add_argument("checkpoint", metavar="CHECKPOINT", help=checkpoint_help)
    act.completer = _run_ids  # type: ignore[attr-defined]
    replay.add_argument("--quiet", action="store_true", help="no progress output")
    fork = sub.add_parser(
        "fork", help="like replay, with some of the run's state fields changed first"
    )
    act = fork.add_argument("checkpoint", metavar="CHECKPOINT", help=checkpoint_help)
    act.completer = _run_ids  # type: ignore[attr-defined]
    fork.add_argument(
        "--changes",
        required=True,
        metavar="JSON",
        help='the state fields to change, a JSON object: \'{"order": "o-2"}\' '
        "(validated before the new run exists)",
    )
    fork.add_argument("--quiet", action="store_true", help="no progress output")

    undo = sub.add_parser("undo", help="move a tidy run's files back where they were")
    _run_id(undo)
    undo.add_argument(
        "--wait",
        type=seconds,
        default=30.0,
        help="seconds to wait for a move being made, or another undo of the run, to end "
        "(default 30)",
    )
    _output(undo)

    _output(sub.add_parser("waiting", help="runs waiting, and what each waits for"))

    answer = sub.add_parser("answer", help="answer a run waiting for input")
    _run_id(answer)
    answer.add_argument(
        "value",
        help="the answer (text, or JSON with --value-json); - reads it from standard input",
    )
    answer.add_argument(
        "--wait-id",
        help="the question this answers, as the printed answer commands give it (show; "
        "waiting --json gives the id): refused, nothing answered, once the run asks "
        "another one; without it "
        "the answer goes to the one question the run asks when the command reads it",
    )
    answer.add_argument("--value-json", action="store_true", help="parse VALUE as JSON")
    answer.add_argument(
        "--json",
        action=Renamed,
        instead="to parse VALUE as JSON give --value-json (--json and -o choose the "
        "output format of read commands)",
    )

    sig = sub.add_parser("signal", help="send a signal (stored, delivered to a waiting run)")
    sig.add_argument("name")
    sig.add_argument("key", nargs="?", help="the key the waiting run names (or --key-file)")
    sig.add_argument(
        "--key-file",
        metavar="PATH",
        help="read the key from this file, one final newline dropped (-: stdin)",
    )
    sig.add_argument("--payload", help="JSON payload (default null)")
    sig.add_argument(
        "--payload-file", metavar="PATH", help="read the JSON payload from this file (-: stdin)"
    )
    sig.add_argument(
        "--dedupe-key",
        help="idempotency key: a second send with this key, name, key and payload is a "
        "duplicate (nothing stored); with another name, key or payload it is refused",
    )

    pub = sub.add_parser("publish", help="publish an event (every run waiting on its type gets it)")
    pub.add_argument("type", help="the event type")
    pub.add_argument("--payload", help="JSON payload (default null)")
    pub.add_argument(
        "--payload-file", metavar="PATH", help="read the JSON payload from this file (-: stdin)"
    )

    ask = sub.add_parser("ask", help="ask an agent (the configured model) a question")
    ask.add_argument("question", nargs="?", help="the question (omit with --resume)")
    ask.add_argument(
        "--tools",
        choices=["none", "files"],
        default="none",
        help="files: let the agent read and list files under --folder",
    )
    ask.add_argument(
        "--folder", type=Path, help="root for --tools files (default: the current folder)"
    )
    act = ask.add_argument("--resume", metavar="RUN", help="resume an interrupted agent run")
    act.completer = _run_ids  # type: ignore[attr-defined]
    ask.add_argument("--answer", help="with --resume: answer the agent's question")
    ask.add_argument(
        "--wait-id",
        help="with --answer: the question this answers, as the printed commands give it; "
        "refused, nothing answered, once the run asks another one",
    )
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
    _output(doctor)

    secrets = sub.add_parser("secrets", help="API keys in the system keyring")
    secsub = secrets.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    sset = secsub.add_parser("set", help="store a secret (read from stdin or a prompt)")
    sset.add_argument("name", help="e.g. model_api_key")
    # anything after the name (the key, `--value KEY`, `--key=KEY`) is
    # refused without being echoed (argparse's own "unrecognized arguments"
    # error would print it)
    sset.add_argument("value", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    sdel = secsub.add_parser("delete", help="remove a secret")
    sdel.add_argument("name")

    agent = sub.add_parser(
        "agent", help="the engine without UI: resume work, fire deadlines, deliver signals"
    )
    agent.add_argument("--poll", type=seconds, default=1.0, help="seconds between passes")
    agent.add_argument(
        "--worker",
        action="store_true",
        help="claim runs from a database shared by several workers (machines); "
        "always so on PostgreSQL",
    )
    agent.add_argument(
        "--grace",
        type=seconds,
        default=30.0,
        help="on SIGTERM or Ctrl-C, seconds the steps in flight have to finish before "
        "the agent exits anyway (their runs then keep their leases: a peer takes them "
        "over as after a crash)",
    )
    agent.add_argument(
        "--concurrency",
        type=positive_int,
        default=4,
        help="worker mode: runs executed at once",
    )

    comp = sub.add_parser(
        "completion", help="print the shell completion script (eval it in your shell's rc)"
    )
    comp.add_argument("shell", choices=["bash", "zsh", "fish", "tcsh", "powershell"])
    return parser
