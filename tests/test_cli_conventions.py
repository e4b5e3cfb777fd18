"""The command line's conventions, as a user and a script meet them: one
output switch (``-o text|json|jsonl``) on every read command, ``watch`` as a
JSON stream, ``answer --value-json``, ``show`` naming what a run waits for
with commands that run as printed, ``replay`` and ``fork``, ``run tidy``,
``runs --status interrupted``, a near miss named (``--foldr``, ``--bd``,
``start digst``) and flow names completed. Real processes, real SQLite
files in ``tmp_path``."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from desktop_app.cli import build_parser
from desktop_app.cli.parser import run_statuses
from desktop_app.runs_view import INTERRUPTED
from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk
from tests.cli_wait_flows import FLOWS_ENV
from tests.digest_corpus import make_corpus

APPROVAL = '["desktop_app.examples.approval:approval"]'


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: ``flowdesk`` (the console script of this environment)
    first on PATH, this checkout importable."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        **extra,
    }


def as_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command line Flowdesk printed, through bash, exactly as printed."""
    assert command.startswith("flowdesk "), command
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120
    )


def printed(text: str, verb: str) -> str:
    """The command after ``<verb> with: `` in ``show``'s output."""
    found = re.search(rf"^\s+{re.escape(verb)} with: (flowdesk .+)$", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def lines_of(out: subprocess.CompletedProcess[str]) -> list[Any]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


# -- one output switch ---------------------------------------------------------


def test_every_read_command_takes_o_text_json_jsonl(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    rid = started.stdout.splitlines()[0]
    lists = [["runs"], ["waiting"], ["flows"], ["db", "status"]]
    for args in lists:
        doc = flowdesk(db, *args, "-o", "json", env=env)
        assert doc.returncode == 0, (args, doc.stderr)
        array = json.loads(doc.stdout)  # one document: an indented array
        assert isinstance(array, list) and array and doc.stdout.startswith("[\n  {"), args
        assert lines_of(flowdesk(db, *args, "-o", "jsonl", env=env)) == array, args
        # the older --json is -o jsonl, byte for byte
        old = flowdesk(db, *args, "--json", env=env)
        assert old.stdout == flowdesk(db, *args, "--output", "jsonl", env=env).stdout, args
        text = flowdesk(db, *args, env=env)
        assert text.returncode == 0 and not text.stdout.startswith(("[", "{")), args
    waiting = json.loads(flowdesk(db, "waiting", "-o", "json", env=env).stdout)
    assert [w["kind"] for w in waiting[0]["waits"]] == ["input"]
    one = flowdesk(db, "show", rid, "-o", "json", env=env)
    detail = json.loads(one.stdout)
    assert detail["run_id"] == rid and one.stdout.startswith("{\n  ")
    assert lines_of(flowdesk(db, "show", rid, "-o", "jsonl", env=env)) == [detail]
    doctor = flowdesk(db, "doctor", "-o", "json", env=env)
    assert json.loads(doctor.stdout)["ok"] is True, doctor.stdout
    bad = flowdesk(db, "runs", "-o", "yaml", env=env)
    assert bad.returncode == 2 and "invalid choice: 'yaml'" in bad.stderr


def test_watch_streams_json_until_the_run_ends(tmp_path: Path) -> None:
    """``watch RUN -o jsonl`` prints one object per change as it happens: the
    run waiting, then (answered by another process) its end; exit 0."""
    db, folder = tmp_path / "f.db", tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    assert flowdesk(db, "db", "apply").returncode == 0
    rid = flowdesk(db, "run", "tidy", "--folder", str(folder)).stdout.splitlines()[0]
    watch = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "watch", rid, "-o", "jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())  # streamed before the run changes
        assert (first["run_id"], first["status"]) == (rid, "waiting")
        assert flowdesk(db, "answer", rid, "yes").returncode == 0
        rest = [json.loads(line) for line in watch.stdout]  # until watch exits
        assert watch.wait(timeout=60) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert rest[-1]["status"] == "completed" and rest[-1]["progress"] == [1, 1]
    pretty = flowdesk(db, "watch", rid, "-o", "json")
    assert pretty.returncode == 0 and json.loads(pretty.stdout)["status"] == "completed"


def test_answer_value_json_is_the_new_spelling_and_old_json_says_so(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    rid = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env).stdout.split()[
        0
    ]
    old = flowdesk(db, "answer", rid, '"yes"', "--json", env=env)
    assert old.returncode == 2
    assert "--json is no longer an option here" in old.stderr and "--value-json" in old.stderr
    (row,) = lines_of(flowdesk(db, "runs", "-o", "jsonl", env=env))
    assert row["status"] == "waiting"  # nothing was answered
    new = flowdesk(db, "answer", rid, '"yes"', "--value-json", env=env)
    assert new.returncode == 0, new.stderr
    (row,) = lines_of(flowdesk(db, "waiting", "-o", "jsonl", env=env))
    assert [w["kind"] for w in row["waits"]] == ["signal"]  # the JSON string was the answer


# -- show: what a run waits for, and the command that moves it on -----------------


def test_show_names_each_wait_and_its_command_runs_as_printed(tmp_path: Path) -> None:
    db = tmp_path / "my notes.db"  # a space: the printed --db must be quoted
    # a POSIX TZ rule (no time zone database needed): IST, 5 h 30 min east of UTC
    env = user_env(FLOWDESK_FLOWS=FLOWS_ENV, TZ="IST-5:30")
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "every_wait", "--input", '{"order": "o 1"}', env=env)
    rid = started.stdout.splitlines()[0]
    db_arg = shlex.quote(str(db))

    shown = flowdesk(db, "show", rid[:8], env=env).stdout
    (wait,) = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)["waits"]
    ist = timezone(timedelta(hours=5, minutes=30))
    local = datetime.fromisoformat(wait["deadline_at"]).astimezone(ist)
    assert f'an answer (step approve, wait {rid}:approve:0): "Ship this order?"' in shown
    assert re.search(
        rf"deadline {local:%Y-%m-%d %H:%M:%S} IST \(local\), {wait['deadline_at']} \(UTC\), "
        r"in 23h 5\dm",
        shown,
    ), shown
    command = printed(shown, "answer")
    assert command == f"flowdesk --db {db_arg} answer {rid} yes --wait-id approve:0"
    assert command == wait["command"]
    assert as_printed(command, env).returncode == 0

    shown = flowdesk(db, "show", rid, env=env).stdout
    assert "signal 'paid' with key 'o 1' (step payment" in shown and "deadline " in shown
    command = printed(shown, "send it")
    assert command == f"flowdesk --db {db_arg} signal paid 'o 1'"
    sent = as_printed(command, env)
    assert sent.returncode == 0, sent.stderr
    assert f"delivered to run {rid} (now waiting)" in sent.stdout  # the run that took it

    shown = flowdesk(db, "show", rid, env=env).stdout
    assert "an event of type 'order-shipped' (step shipping" in shown
    command = printed(shown, "publish it")
    assert command == f"flowdesk --db {db_arg} publish order-shipped"
    published = as_printed(command, env)
    assert published.returncode == 0 and f"for 1 waiting run: {rid}" in published.stdout
    again = as_printed(command, env)  # nobody waits now: it says so, and what a wait takes
    assert again.returncode == 0 and "no run waits for event 'order-shipped' now" in again.stderr
    assert "only one published after its wait began" in again.stderr

    shown = flowdesk(db, "show", rid, env=env).stdout
    assert "a timer (step cool_off" in shown and re.search(r"fires .+ IST \(local\)", shown)
    command = printed(shown, "fire it once due")
    assert command == f"flowdesk --db {db_arg} resume {rid}"
    for _ in range(200):  # the timer is 0.3 s: the command fires it once due
        assert as_printed(command, env).returncode == 0
        shown = flowdesk(db, "show", rid, env=env).stdout
        if "status completed" in shown:
            break
        time.sleep(0.05)
    assert shown.splitlines()[0].endswith("status completed") and "waits for:" not in shown


def test_show_of_a_run_paused_for_an_operator_says_why_and_resume_runs_as_printed(
    tmp_path: Path,
) -> None:
    db, needed = tmp_path / "f.db", tmp_path / "needed.txt"
    env = user_env(FLOWDESK_FLOWS=FLOWS_ENV)
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    given = json.dumps({"needs": str(needed)})
    rid = flowdesk(db, "start", "paused", "--input", given, env=env).stdout.splitlines()[0]
    shown = flowdesk(db, "show", rid, env=env).stdout
    assert shown.splitlines()[0].endswith("status waiting")
    assert (
        f"an operator: paused after step 'read_it' failed: RuntimeError: {needed} is not there yet"
        in shown
    )
    command = printed(shown, "continue")
    assert command == f"flowdesk --db {db} resume {rid}"
    needed.write_text("here")
    resumed = as_printed(command, env)
    assert resumed.returncode == 0 and resumed.stdout.splitlines()[-1] == f"run {rid} completed"


# -- replay and fork ---------------------------------------------------------------


def test_resume_of_a_canceled_run_prints_the_replay_that_runs_it_again(tmp_path: Path) -> None:
    """A tryout: ``resume`` of a canceled run said "Replay or fork it from a
    checkpoint" with no command, where every other refusal prints one. It
    prints the ``replay`` (and the ``show`` that lists the checkpoints)
    with the user's ``--db`` and ``--scope``; pasted, the replay starts a
    new run of it from its start."""
    folder = tmp_path / "my runs"
    folder.mkdir()
    db = folder / "f.db"
    env = user_env(FLOWDESK_FLOWS=APPROVAL)
    scoped = ["--scope", "team a"]
    assert flowdesk(db, *scoped, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, *scoped, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    rid = started.stdout.split()[0]
    assert flowdesk(db, *scoped, "cancel", rid, env=env).returncode == 0
    refused = flowdesk(db, *scoped, "resume", rid, env=env)
    assert refused.returncode != 0
    assert f"run {rid} is canceled; it cannot be resumed" in refused.stderr
    (replay, show) = re.findall(r"`(flowdesk [^`]+)`", refused.stderr)
    assert replay.endswith(f"replay {rid}") and "'team a'" in replay, refused.stderr
    again = as_printed(replay, env)
    assert again.returncode == 0, again.stderr
    new = again.stdout.splitlines()[0]
    assert new != rid and again.stdout.splitlines()[-1] == f"run {new} waiting"
    listed = as_printed(show, env)
    assert listed.returncode == 0 and f"{rid}:" in listed.stdout, listed.stdout + listed.stderr


def test_replay_and_fork_start_new_runs_from_a_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    rid = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env).stdout.split()[
        0
    ]
    assert flowdesk(db, "answer", rid, "yes", env=env).returncode == 0
    assert flowdesk(db, "signal", "paid", "o-1", env=env).returncode == 0
    assert flowdesk(db, "resume", rid, env=env).returncode == 0
    source = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)
    assert source["status"] == "completed"

    replayed = flowdesk(db, "replay", rid[:8], env=env)  # from its start: asks again
    assert replayed.returncode == 0, replayed.stderr
    new = replayed.stdout.splitlines()[0]
    assert re.fullmatch(r"[0-9a-f]{32}", new) and new != rid
    assert replayed.stdout.splitlines()[-1] == f"run {new} waiting"
    row = json.loads(flowdesk(db, "show", new, "-o", "json", env=env).stdout)
    assert row["parent_run_id"] == rid and [w["step_id"] for w in row["waits"]] == ["approve"]

    after_answer = next(c["id"] for c in source["checkpoints"] if c["step_id"] == "payment")
    forked = flowdesk(db, "fork", after_answer, "--changes", '{"order": "o-2"}', env=env)
    assert forked.returncode == 0, forked.stderr
    fork_id = forked.stdout.splitlines()[0]
    row = json.loads(flowdesk(db, "show", fork_id, "-o", "json", env=env).stdout)
    assert [(w["name"], w["key"]) for w in row["waits"]] == [("paid", "o-2")]  # the new order
    after = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)
    assert after["checkpoints"] == source["checkpoints"]  # the source is untouched

    for args, text in [
        (
            ["fork", rid, "--changes", '{"oder": "o-3"}'],
            "did you mean 'order'? Nothing was created.",
        ),
        (["fork", rid, "--changes", '{"order": 5}'], "order: Input should be a valid string"),
        (["fork", rid, "--changes", "{}"], "replay"),
        (["replay", f"{rid}:99"], "has no checkpoint 99; it keeps revisions 0 to"),
        (["replay", f"{rid}:x"], "must be a number"),
        (["replay", "ffffffff"], "no run ffffffff"),
    ]:
        out = flowdesk(db, *args, env=env)
        assert out.returncode == 2 and text in out.stderr, (args, out.stderr)
    runs = lines_of(flowdesk(db, "runs", "-o", "jsonl", env=env))
    assert len(runs) == 3  # refused forks and replays started nothing


# -- run tidy, near misses, completion ------------------------------------------------


def test_run_tidy_works_like_run_digest(tmp_path: Path) -> None:
    db, folder = tmp_path / "f.db", tmp_path / "Downloads"
    folder.mkdir()
    (folder / "paper.pdf").write_bytes(b"pdf")
    assert flowdesk(db, "db", "apply").returncode == 0
    missing = flowdesk(db, "run", "tidy", "--folder", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    rid = started.stdout.splitlines()[0]
    assert started.returncode == 0 and started.stdout.splitlines()[-1] == f"run {rid} waiting"
    hint = started.stderr.rpartition("the command that answers it: ")[2].strip()
    shown = as_printed(hint, user_env())
    assert shown.returncode == 0 and "move 1 file into subfolders" in shown.stdout
    assert (
        printed(shown.stdout, "answer")
        == f"flowdesk --db {db} answer {rid} yes --wait-id approve:0"
    )
    again = flowdesk(db, "run", "tidy", "--folder", str(folder))  # single flight per folder
    assert again.stdout.splitlines()[0] == rid and "waiting already" in again.stderr
    assert flowdesk(db, "answer", rid, "yes").returncode == 0
    assert (folder / "Documents").is_dir() and not (folder / "paper.pdf").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "digest", "--foldr", "x", "--out", "y"], "did you mean '--folder'?"),
        (["--bd", "x.db", "runs"], "unrecognized option '--bd'; did you mean '--db'?"),
        (["runs", "--limt", "3"], "unrecognized option '--limt'; did you mean '--limit'?"),
        (["wach"], "unknown command 'wach'; did you mean 'watch'?"),
        (["run", "tidyy", "--folder", "x"], "unknown command 'tidyy'; did you mean 'tidy'?"),
        (["runs", "--db", "x.db"], "--db is an option of flowdesk itself: give it before"),
        (["runs", "--status", "interupted"], "did you mean 'interrupted'?"),
        (["runs", "-o", "jsnl"], "-o 'jsnl' is not one of its choices; did you mean 'jsonl'?"),
        (["runs", "--zzz"], "unrecognized arguments: --zzz"),  # nothing near: argparse's words
    ],
)
def test_a_near_miss_names_what_was_meant(argv: list[str], said: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_start_names_the_flow_meant_and_completion_offers_flow_names(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    out = flowdesk(db, "start", "digst", env=env)
    assert out.returncode == 2 and "did you mean 'digest'?" in out.stderr
    answer = tmp_path / "completions"
    line = f"flowdesk --db {db} start "
    done = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={
            **os.environ,
            **env,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_SHELL": "bash",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        },
    )
    assert done.returncode == 0, done.stderr
    words = answer.read_text().split()
    assert sorted(w for w in words if not w.startswith("-")) == ["approval", "digest", "tidy"]


# -- runs --status interrupted --------------------------------------------------------


def test_runs_status_filters_on_the_status_shown_interrupted_included(tmp_path: Path) -> None:
    from tests.test_interrupted_runs import ENV, kill9, start_gated

    assert INTERRUPTED in run_statuses()
    db = tmp_path / "f.db"
    make_corpus(tmp_path / "docs", 2)
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    done = flowdesk(
        db,
        "run",
        "digest",
        "--folder",
        str(tmp_path / "docs"),
        "--out",
        str(tmp_path / "o"),
        env=ENV,
    )
    assert done.returncode == 0, done.stderr
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    dead, dead_id = start_gated(db, tmp_path / "a")
    kill9(dead)
    alive, alive_id = start_gated(db, tmp_path / "b")
    try:

        def ids(*status: str) -> list[str]:
            args = [a for s in status for a in ("--status", s)]
            return [
                r["run_id"] for r in lines_of(flowdesk(db, "runs", *args, "-o", "jsonl", env=ENV))
            ]

        assert ids("interrupted") == [dead_id]
        assert ids("running") == [alive_id]  # the dead one shows interrupted, not running
        assert sorted(ids("running", "interrupted")) == sorted([dead_id, alive_id])
        assert len(ids("completed")) == 1
        table = flowdesk(db, "runs", "--status", "interrupted", env=ENV).stdout.splitlines()
        assert len(table) == 2 and table[1].split()[3] == "interrupted"
    finally:
        (tmp_path / "b" / "gate").touch()
        alive.wait(timeout=60)
        assert alive.stdout is not None
        alive.stdout.close()


def test_show_of_an_agent_run_asking_prints_its_answer_command(tmp_path: Path) -> None:
    from tests.chat_server import ChatServer, completion

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [
            ("ask_user_if_offered", "Which folder?", "unused"),
            ("json", completion("The notes folder, then.")),
        ]
        env = user_env(FLOWDESK_MODEL__BASE_URL=server.url, FLOWDESK_MODEL__MODEL="m")
        asked = flowdesk(db, "ask", "what should I read?", env=env)
        assert asked.returncode == 0 and "the agent asks: Which folder?" in asked.stdout
        rid = asked.stderr.split()[1]
        shown = flowdesk(db, "show", rid, env=env).stdout
        assert 'an answer: "Which folder?"' in shown
        command = printed(shown, "answer")
        # a free-text question: the command `waiting` prints, not `answer RUN yes`
        waiting = flowdesk(db, "waiting", env=env).stdout
        assert command.startswith(
            f"flowdesk --db {db} ask --resume {rid} --answer TEXT --wait-id ask/1:"
        )
        assert f"({command})" in waiting
        (wait,) = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)["waits"]
        assert wait["command"] == command
        answered = as_printed(command, env)
        assert answered.returncode == 0, answered.stderr
        assert "The notes folder, then." in answered.stdout
        (sent,) = [m for m in server.requests[-1]["body"]["messages"] if m["role"] == "tool"]
        assert "TEXT" in sent["content"]  # the text in place of TEXT reached the model
    shown = flowdesk(db, "show", rid, env=env).stdout
    assert shown.splitlines()[0].endswith("turns 2") and "waits for:" not in shown
