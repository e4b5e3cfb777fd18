"""Every hint works pasted exactly as printed, whatever the ids hold: a
shell hint run through bash, a Python hint through Python. Ids with
non-ASCII letters and emoji, control characters (ESC, newline, tab) and a
bidi override (U+202E); a database path given as ``$HOME/...`` in
``FLOWDESK_DB_PATH``; a foreground run stopped with SIGTERM; the ``runs``
table after emoji and 300-character thread ids."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TypedDict

import pytest
from rich.cells import cell_len

from tests import cli_forkserver, sigterm_flows
from tests.cli_support import REPO, flowdesk, interrupted_at
from tests.digest_corpus import make_corpus

APPROVAL = json.dumps(["desktop_app.examples.approval:approval"])
CLI = (sys.executable, "-m", "desktop_app.cli")
LG_WORKER = str(REPO / "tests" / "langgraph_worker.py")
#: characters that must never reach a terminal raw (tab and newline only inside a hint)
RAW = ("\x1b", "\u202e", "\x9b")


def in_bash(
    hint: str, *, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The hint pasted into bash as printed (``flowdesk`` is this checkout)."""
    assert hint.startswith("flowdesk "), hint
    return subprocess.run(
        ["bash", "-c", hint],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={
            **os.environ,
            **(env or {}),
            "LC_ALL": "C.UTF-8",  # bash's \u escapes need a UTF-8 locale
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(REPO),
        },
    )


def hint_after(text: str, label: str) -> str:
    """The command printed after ``label`` on its line (up to a closing backtick)."""
    m = re.search(re.escape(label) + r"`?(flowdesk [^`\n]+)", text)
    assert m is not None, (label, text)
    return m.group(1)


def wait_for(predicate, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- a: a LangGraph resume hint is Python source for any thread id ----------


@pytest.mark.slow
def test_the_resume_hint_of_an_emoji_thread_killed_mid_run_runs_in_python(
    db_path: Path, tmp_path: Path
) -> None:
    thread = "thr ünï/🎉"
    counts = tmp_path / "counts.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, LG_WORKER, str(db_path), str(counts), thread]
    first = subprocess.Popen([*argv, "--hang", "c"], cwd=REPO, env=env, text=True)
    try:
        wait_for(lambda: counts.exists() and "work:c" in counts.read_text(), "the hang")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    hints = []
    for command in (["show", thread], ["resume", "--all"]):
        out = flowdesk(db_path, *command)
        assert out.returncode == 0, out.stderr
        assert "\\ud83c" not in out.stdout  # a JSON surrogate pair is not Python
        m = re.search(r'continues it with (graph\.invoke\(None, .*durability="sync"\))', out.stdout)
        assert m is not None, out.stdout
        hints.append(m.group(1))
    assert hints[0] == hints[1]
    assert "\\U0001f389" in hints[0] and hints[0].isascii()
    # the program runs the hint as printed: the graph goes on to its question
    second = subprocess.run(
        [*argv, "--call", hints[0]], cwd=REPO, env=env, text=True, capture_output=True, timeout=120
    )
    assert second.returncode == 0, second.stderr
    got = json.loads(second.stdout.splitlines()[-1])
    assert got["interrupts"][0]["question"] == "approve these results?"
    assert Counter(counts.read_text().split())["plan"] == 1


# -- b, g: thread ids with ESC, emoji or 300 characters --------------------


class Asked(TypedDict, total=False):
    answer: str


def one_question_graph(saver):  # type: ignore[no-untyped-def]
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def ask(state: Asked) -> Asked:
        return {"answer": interrupt("ship it?")}

    g = StateGraph(Asked)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


def test_waiting_threads_with_odd_ids_answer_as_printed_and_runs_stays_aligned(
    db_path: Path,
) -> None:
    from desktop_app.integrations.langgraph import FlowdeskSaver

    esc, party, long = "rel\x1b[31m-43", "🎉🎉 party", "x" * 300
    with FlowdeskSaver.open(db_path) as saver:
        graph = one_question_graph(saver)
        for thread in (esc, party, long):
            graph.invoke({}, {"configurable": {"thread_id": thread}}, durability="sync")

    waiting = flowdesk(db_path, "waiting")
    assert waiting.returncode == 0, waiting.stderr
    assert not any(c in waiting.stdout for c in RAW), waiting.stdout
    assert "langgraph thread rel\\x1b[31m-43\n" in waiting.stdout
    hints = re.findall(r"answer it \(the answer on standard input\): (.+)", waiting.stdout)
    hint = next(h for h in hints if "rel" in h)
    assert "answer $'rel\\x1b[31m-43' -" in hint, hint
    answered = in_bash(hint, stdin="yes\n")
    assert answered.returncode == 0, answered.stderr
    assert "langgraph thread rel\\x1b[31m-43 answered" in answered.stdout
    go_on = re.search(r"its program runs (graph\.invoke\(.+\))\n", answered.stdout)
    assert go_on is not None, answered.stdout
    with FlowdeskSaver.open(db_path) as saver:  # its program runs the printed call
        done = eval(go_on.group(1), {"graph": one_question_graph(saver)})
    assert done == {"answer": "yes"}

    for hint in hints:  # the others, run as printed too
        if "rel" not in hint:
            assert in_bash(hint, stdin="no\n").returncode == 0

    listed = flowdesk(db_path, "runs")
    assert listed.returncode == 0, listed.stderr
    assert not any(c in listed.stdout for c in RAW), listed.stdout
    header, *rows = listed.stdout.splitlines()
    assert len(rows) == 3
    kind_at = header.index("KIND")
    for row in rows:  # KIND starts at the same terminal column on every line
        head = row[: row.index("langgraph")]
        assert cell_len(head) == kind_at, (row, head)
        assert cell_len(row) <= cell_len(header) + 20, row
    assert any("rel\\x1b[31m-43" in r for r in rows)
    (cut,) = [r for r in rows if r.startswith("xxx")]
    assert "…" in cut and long not in cut
    shown = flowdesk(db_path, "show", long)
    assert f"langgraph thread {long}  status" in shown.stdout  # the full id in show


# -- c: a signal key with control characters and a bidi override ----------


def test_a_signal_key_with_controls_is_printed_quoted_and_sent_as_printed(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    order = "o-é\u202e\u001b[31m\n\t"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", json.dumps({"order": order}), env=env)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.split()[0]
    assert flowdesk(db, "answer", rid, "yes", env=env).returncode == 0
    quoted = "$'o-é\\xe2\\x80\\xae\\x1b[31m\\n\\t'"  # U+202E as its UTF-8 bytes

    shown = flowdesk(db, "show", rid, env=env)
    assert shown.returncode == 0, shown.stderr
    assert not any(c in shown.stdout for c in (*RAW, "\t")), shown.stdout
    send = hint_after(shown.stdout, "send it with: ")
    assert send == f"flowdesk --db {db} signal paid {quoted}", send
    waiting = flowdesk(db, "waiting", env=env)
    assert not any(c in waiting.stdout for c in (*RAW, "\t")), waiting.stdout
    assert f"signal paid {quoted}" in waiting.stdout, waiting.stdout

    sent = in_bash(send, env=env)  # pasted into bash: the key is the order's, byte for byte
    assert sent.returncode == 0, sent.stderr
    assert "no run waits for signal" not in sent.stderr, sent.stderr
    assert flowdesk(db, "resume", "--all", env=env).returncode == 0
    row = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)
    assert row["status"] == "completed", row


# -- d: FLOWDESK_DB_PATH with $HOME ----------------------------------------


def test_hints_name_the_expanded_database_path_of_flowdesk_db_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "FLOWDESK_DB_PATH": "$HOME/z.db", "FLOWDESK_FLOWS": APPROVAL}
    missing = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "runs"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert missing.returncode == 1, missing.stderr
    apply = hint_after(missing.stderr, "run ")
    assert apply == f"flowdesk --db {home / 'z.db'} db apply", missing.stderr
    # pasted in another shell, without the variable: the same file
    plain = {"HOME": str(home), "FLOWDESK_FLOWS": APPROVAL, "FLOWDESK_DB_PATH": ""}
    assert in_bash(apply, env=plain).returncode == 0
    assert (home / "z.db").exists()
    started = in_bash('flowdesk start approval --input \'{"order": "o-1"}\'', env=env)
    assert started.returncode == 0, started.stderr
    assert "--db '$HOME" not in started.stderr
    show = hint_after(started.stderr, "it waits; what for, and the command that answers it: ")
    shown = in_bash(show, env=plain)
    assert shown.returncode == 0, shown.stderr
    answer = hint_after(shown.stdout, "answer with: ")
    assert answer.startswith(f"flowdesk --db {home / 'z.db'} answer "), answer
    assert in_bash(answer, env=plain).returncode == 0


# -- e: SIGTERM stops a foreground run as Ctrl-C does -----------------------


def _stopped_by_sigterm(proc: subprocess.Popen[str]) -> str:
    """SIGTERM to ``proc``; its exit (143) and the hint it printed."""
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert "Traceback" not in err, err
    return hint_after(err, "flowdesk: stopped by SIGTERM; run ")


@pytest.mark.slow
def test_sigterm_of_run_digest_prints_the_resume_hint_and_it_finishes_the_run(
    tmp_path: Path,
) -> None:
    db, docs, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "out"
    make_corpus(docs, 3000)
    assert flowdesk(db, "db", "apply").returncode == 0
    proc = subprocess.Popen(
        [*CLI, "--db", str(db), "run", "digest", "--folder", str(docs), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    rid = proc.stdout.readline().strip()  # printed once the run is stored
    assert re.fullmatch(r"[0-9a-f]{32}", rid), rid
    line = "-"
    while line and not re.match(r"\s*\d+/\d+", line):  # the first progress line: files under way
        line = proc.stderr.readline()
    assert line, "run digest ended before any progress"
    hint = _stopped_by_sigterm(proc)
    assert hint == f"flowdesk --db {db} resume {rid}"
    row = json.loads(flowdesk(db, "show", rid, "-o", "json").stdout)
    assert row["status"] == "interrupted", row
    resumed = in_bash(hint)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {rid} completed" in resumed.stdout
    assert (out / "digest.md").exists()


def _digest_until_progress(args: list[str]) -> subprocess.Popen[str]:
    """``flowdesk ARGS`` (a fresh interpreter with Ctrl-C's handler) once
    it has printed its first progress line (files under way)."""
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=cli_forkserver.default_sigint,
    )
    assert proc.stderr is not None
    line = "-"
    while line and not re.match(r"\s*\d+/\d+", line):
        line = proc.stderr.readline()
    assert line, "it ended before any progress"
    return proc


@pytest.mark.slow
def test_ctrl_c_on_resume_all_stops_every_run_it_drives_and_its_hint_finishes_them(
    tmp_path: Path,
) -> None:
    """Found by a tryout: Ctrl-C on ``resume --all`` driving two runs (on
    threads of its own) waited for both to run to their end, then said
    "interrupted"; the hint it printed then found nothing to resume."""
    db, docs = tmp_path / "f.db", tmp_path / "docs"
    make_corpus(docs, 3000)
    assert flowdesk(db, "db", "apply").returncode == 0
    for out in ("out-a", "out-b"):  # two digests, each stopped at its start
        proc = _digest_until_progress(
            ["--db", str(db), "run", "digest", "--folder", str(docs), "--out", str(tmp_path / out)]
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        proc.communicate()
    proc = _digest_until_progress(["--db", str(db), "resume", "--all"])
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not (tmp_path / "out-a" / "digest.md").exists()  # stopped, not run to their ends
    assert not (tmp_path / "out-b" / "digest.md").exists()
    hint = hint_after(err, "flowdesk: interrupted; run ")
    assert hint == f"flowdesk --db {db} resume --all"
    resumed = in_bash(hint)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count(" completed") == 2, resumed.stdout
    assert all((tmp_path / out / "digest.md").exists() for out in ("out-a", "out-b"))


def test_sigterm_cuts_the_step_in_flight_which_runs_once_more_only_on_resume(
    tmp_path: Path,
) -> None:
    db, sink, gate = tmp_path / "e.db", tmp_path / "effects.log", tmp_path / "gate"
    env = {"FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    given = json.dumps({"sink": str(sink), "gate": str(gate)})
    proc = subprocess.Popen(
        [*CLI, "--db", str(db), "start", "effects", "--input", given],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
    )
    wait_for(lambda: sink.exists() and "begin s1" in sink.read_text(), "s1 in flight")
    hint = _stopped_by_sigterm(proc)
    assert "effect s1" not in sink.read_text()  # cut off before its side effect
    gate.touch()
    resumed = in_bash(hint, env=env)
    assert resumed.returncode == 0, resumed.stderr
    effects = Counter(line.split()[1] for line in sink.read_text().splitlines() if "effect" in line)
    assert effects == Counter({"s0": 1, "s1": 1, "s2": 1, "s3": 1})


@pytest.mark.parametrize(
    ("sig", "said"),
    [("SIGTERM", "stopped by SIGTERM"), ("SIGINT", "interrupted")],
)
def test_a_stop_dropped_inside_a_finalizer_still_stops_the_run_at_its_next_step(
    tmp_path: Path, sig: str, said: str
) -> None:
    # CPython runs a signal's handler wherever the main thread is, finalizers
    # included, and drops what it raises there: the run went on to its end
    db, sink = tmp_path / "d.db", tmp_path / "effects.log"
    env = {"FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    (tmp_path / "gate").touch()  # s1 does not wait
    given = json.dumps({"sink": str(sink), "gate": str(tmp_path / "gate"), "signal": sig})
    done = subprocess.run(
        [*CLI, "--db", str(db), "start", "dropped", "--input", given],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        timeout=120,
        preexec_fn=cli_forkserver.default_sigint,  # Ctrl-C's handler, as in a shell
    )
    assert "Exception ignored" in done.stderr  # the first raise was dropped, as set up
    assert done.returncode == 128 + signal.Signals[sig], done.stderr
    hint = hint_after(done.stderr, f"flowdesk: {said}; run ")
    effects = [line.split()[1] for line in sink.read_text().splitlines() if "effect" in line]
    assert effects == ["s0"]  # stopped at s0's end, before s1 began
    resumed = in_bash(hint, env=env)
    assert resumed.returncode == 0, resumed.stderr
    effects = [line.split()[1] for line in sink.read_text().splitlines() if "effect" in line]
    assert effects == ["s0", "s1", "s2", "s3"]


def test_ctrl_c_while_flowdesk_is_still_loading_ends_it_without_a_traceback() -> None:
    """Found by a tryout: Ctrl-C in the first 0.2-0.35 s of a command (while
    Python loads it) printed a KeyboardInterrupt traceback. A fresh
    interpreter, as the console script starts; the interrupt raised while
    one of the command line's modules is being imported."""
    code = (
        "import sys\n"
        "def trace(frame, event, arg):\n"
        "    if event == 'call' and frame.f_code.co_name == '<module>' and "
        "frame.f_globals.get('__name__') == 'desktop_app.cli.output':\n"
        "        sys.settrace(None)\n"
        "        raise KeyboardInterrupt\n"
        "sys.settrace(trace)\n"
        "sys.argv = ['flowdesk', 'flows']\n"
        "from desktop_app.launcher import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "flowdesk: interrupted while starting; nothing was done\n"


def test_ctrl_c_while_reading_the_command_line_and_again_while_stopping_is_said_once(
    tmp_path: Path,
) -> None:
    """Ctrl-C while the command line is read: a message, not a traceback;
    a second Ctrl-C while a command stops (here, when it stops its progress
    line) is ignored: the stop's message and hint are printed, no traceback."""
    early = interrupted_at("parse_args", ["--db", str(tmp_path / "f.db"), "flows"])
    assert early.returncode == 130, early.stderr
    assert early.stderr == "flowdesk: interrupted while starting; nothing was done\n"
    db, docs, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "out"
    make_corpus(docs, 5)
    assert flowdesk(db, "db", "apply").returncode == 0
    argv = ["--db", str(db), "run", "digest", "--folder", str(docs), "--out", str(out)]
    code = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal\n"
        "import desktop_app.cli as cli\n"
        "stop_progress = cli.stop_progress\n"
        "def second_ctrl_c():  # the stop's first clean-up step, a second Ctrl-C in it\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    stop_progress()\n"
        "cli.stop_progress = second_ctrl_c\n"
        "def trace(frame, event, arg):\n"
        "    if event == 'call' and frame.f_code.co_name == 'summarize_one':\n"
        "        sys.settrace(None)\n"
        "        raise KeyboardInterrupt\n"
        "sys.settrace(trace)\n"
        f"sys.exit(cli.main({argv!r}))\n"
    )
    twice = cli_forkserver.run_code(code, env={**os.environ}, cwd=REPO, timeout=120)
    assert twice.returncode == 130, twice.stderr
    assert "Traceback" not in twice.stderr and "KeyboardInterrupt" not in twice.stderr
    hint = hint_after(twice.stderr, "flowdesk: interrupted; run ")
    assert in_bash(hint).returncode == 0
    assert (out / "digest.md").exists()


def test_ctrl_c_before_a_run_is_stored_prints_the_same_command_and_it_starts_it(
    tmp_path: Path,
) -> None:
    """Found by a tryout: Ctrl-C in ``run digest`` before its run was stored
    printed ``resume --all``, which resumed whatever other run waited."""
    db, docs, out = tmp_path / "f.db", tmp_path / "docs", tmp_path / "out"
    make_corpus(docs, 5)
    assert flowdesk(db, "db", "apply").returncode == 0
    argv = ["--db", str(db), "run", "digest", "--folder", str(docs), "--out", str(out)]
    stopped = interrupted_at("execute_new_run", argv)
    assert stopped.returncode == 130, stopped.stderr
    hint = hint_after(stopped.stderr, "flowdesk: interrupted; run ")
    assert hint == f"flowdesk --db {db} run digest --folder {docs} --out {out}"
    done = in_bash(hint)
    assert done.returncode == 0, done.stderr
    assert (out / "digest.md").exists()


def test_ctrl_c_in_undo_prints_the_undo_and_it_moves_every_file_back(tmp_path: Path) -> None:
    """Found by a tryout: Ctrl-C in ``undo`` printed ``resume --all``, which
    resumed other runs and left the undo half done."""
    db, folder = tmp_path / "u.db", tmp_path / "dl"
    folder.mkdir()
    for name in ("a.txt", "b.jpg"):
        (folder / name).write_text(name)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(folder)})).stdout
    run_id = run_id.split()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    assert not (folder / "a.txt").exists()  # moved
    stopped = interrupted_at("undo_tidy_run", ["--db", str(db), "undo", run_id])
    assert stopped.returncode == 130, stopped.stderr
    hint = hint_after(stopped.stderr, "flowdesk: interrupted; run ")
    assert hint == f"flowdesk --db {db} undo {run_id}"
    done = in_bash(hint, stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert (folder / "a.txt").exists() and (folder / "b.jpg").exists()  # back


@pytest.mark.parametrize("where", ["give_answer", "_go_on"])
def test_ctrl_c_in_an_answer_prints_the_command_that_carries_on_from_there(
    tmp_path: Path, where: str
) -> None:
    """Ctrl-C in ``answer`` before the answer is saved (``give_answer``):
    nothing was answered, and ``resume`` would find the run still waiting,
    so the hint is the answer again, pinned to its question; after it is
    saved (the run going on: ``_go_on``), ``resume``. Each hint, run as
    printed, moves the tidy's files once. The KeyboardInterrupt is raised
    when that function is called, as Ctrl-C raises it there."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    folder.mkdir()
    for name in ("a.txt", "b.jpg", "c.txt"):
        (folder / name).write_text(name)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "tidy", "--input", json.dumps({"folder": str(folder)}))
    run_id = started.stdout.split()[0]
    stopped = interrupted_at(where, ["--db", str(db), "answer", run_id, "yes"])
    assert stopped.returncode == 130, stopped.stderr
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == ["a.txt", "b.jpg", "c.txt"]
    if where == "give_answer":
        hint = hint_after(stopped.stderr, "flowdesk: interrupted; run ")
        assert hint == f"flowdesk --db {db} answer {run_id} yes --wait-id approve:0", hint
        assert "to answer (nothing was answered" in stopped.stderr
    else:
        hint = hint_after(stopped.stderr, "flowdesk: interrupted; run ")
        assert hint == f"flowdesk --db {db} resume {run_id}", hint
    done = in_bash(hint)
    assert done.returncode == 0, done.stderr
    moved = sorted(p.name for p in folder.rglob("*") if p.is_file() and p.parent != folder)
    assert moved == ["a.txt", "b.jpg", "c.txt"]  # each moved, once
    assert [p.name for p in folder.iterdir() if p.is_file()] == [
        f".flowdesk-tidy-undo-{run_id}.json"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "plain-1",
        "my file",
        "it's",
        "a\\b",
        "thr ünï/🎉",
        "rel\x1b[31m-43",
        "o-é\u202e\x1b[31m\n\t",
        "\x7f\x85\u200b\U000e0001x",
        os.fsdecode(b"caf\xe9"),  # an undecodable byte in a file name (surrogateescape)
    ],
)
@pytest.mark.parametrize("locale", ["env -i", "C.UTF-8", "C"])
def test_shell_quote_gives_back_the_string_through_bash(text: str, locale: str) -> None:
    """In any locale: under ``env -i bash`` (cron, ssh, systemd) bash passes
    a ``\\u202e`` escape on as those six characters, so a non-ASCII character
    is quoted as its UTF-8 bytes, which bash decodes everywhere."""
    from desktop_app.textsafe import shell_quote

    quoted = shell_quote(text)
    assert quoted.isprintable(), quoted
    assert "\\u" not in quoted and "\\U" not in quoted, quoted
    script = f"printf %s {quoted}"
    if locale == "env -i":
        argv = ["env", "-i", "bash", "-c", script]
        env: dict[str, str] | None = None
    else:
        argv, env = ["bash", "-c", script], {**os.environ, "LANG": locale, "LC_ALL": locale}
    echoed = subprocess.run(argv, capture_output=True, timeout=30, env=env)
    assert echoed.stdout == os.fsencode(text)


def test_hints_quote_shell_arguments_in_one_place_only() -> None:
    """``textsafe.shell_quote`` is the one quoting of hints: a ``shlex.quote``
    elsewhere would print control characters raw (or as inert ``'\\x1b'``)."""
    elsewhere = [
        str(path.relative_to(REPO))
        for path in (REPO / "desktop_app").rglob("*.py")
        if path.name != "textsafe.py"
        and re.search(r"shlex\.(quote|join)\(", path.read_text(encoding="utf-8"))
    ]
    assert elsewhere == []


def test_an_answer_that_leaves_the_run_waiting_again_says_what_for_and_it_runs_as_printed(
    tmp_path: Path,
) -> None:
    """``answer`` that leaves the run waiting (the README's approval: then a
    payment signal) printed only "run X waiting", where ``start`` says how to
    see what it waits for; now it says so too, and the commands it leads to
    work as printed, up to the run's completion."""
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": APPROVAL}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[0]
    answered = flowdesk(db, "answer", run_id, "yes", env=env)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.splitlines()[0] == f"run {run_id} waiting"
    show = hint_after(answered.stderr, "it waits; what for, and the command that answers it: ")
    assert show == f"flowdesk --db {db} show {run_id}"
    shown = flowdesk(db, *show.split()[3:], env=env)
    assert shown.returncode == 0, shown.stderr
    send = hint_after(shown.stdout, "send it with: ")
    assert send == f"flowdesk --db {db} signal paid o-1", shown.stdout
    sent = flowdesk(db, *send.split()[3:], "--payload", '{"amount": 3}', env=env)
    assert sent.returncode == 0, sent.stderr
    resumed = flowdesk(db, "resume", "--all", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert flowdesk(db, "show", run_id, env=env).stdout.splitlines()[0].endswith("completed")


@pytest.mark.slow
@pytest.mark.postgres
def test_sigterm_on_postgres_says_a_worker_may_take_the_run_over_and_its_hint_finishes_it(
    tmp_path: Path, pg_url: str
) -> None:
    """A team tryout: on PostgreSQL the SIGTERM hint said only "run resume
    to continue", and a worker had taken the run over a second later, so
    the resume as printed was refused as held. It says a worker may have
    taken it over and that ``show`` names who holds it; with none there,
    the hint, run as printed, finishes the run."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    make_corpus(docs, 3000)
    proc = _digest_until_progress(
        ["--db", pg_url, "run", "digest", "--folder", str(docs), "--out", str(out)]
    )
    assert proc.stdout is not None
    rid = proc.stdout.readline().strip()
    shown = flowdesk(pg_url, "show", rid)  # while it runs: who holds it, by name
    assert (
        f"running: being executed by process {proc.pid} on host {socket.gethostname()} (owner "
    ) in shown.stdout, shown.stdout
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert (
        "` to continue it here if no worker has taken it over (a `flowdesk agent` running on "
        "this database picks an interrupted run up on its own; `show` names who holds it)"
    ) in err, err
    hint = hint_after(err, "flowdesk: stopped by SIGTERM; run ")
    assert hint.startswith(f"flowdesk --db {pg_url} resume "), hint
    resumed = in_bash(hint)
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "digest.md").exists()
