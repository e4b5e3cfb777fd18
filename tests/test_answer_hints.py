"""What ``flowdesk answer`` and ``show`` tell a person answering a
question, each command run as printed.

A new user's tryout found ``answer`` to a run asking two questions at once
saying "answer one with wait_id=..." (the Python keyword, not the CLI's
``--wait-id``) and exiting 1 (bad input exits 2). The runs are started and
answered by the real CLI over a real SQLite file (flows:
:mod:`tests.hint_flows`).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.store.sqlite.store import open_store
from tests import hint_flows
from tests.cli_support import as_printed, flowdesk

REPO = Path(__file__).resolve().parents[1]


def user_env() -> dict[str, str]:
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "FLOWDESK_FLOWS": hint_flows.FLOWS_ENV,
        "PYTHONPATH": os.pathsep.join(paths),
    }


def started(db: Path, flow: str, env: dict[str, str], *scope: str) -> str:
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    out = flowdesk(db, *scope, "start", flow, "--input", "{}", env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[0]


def test_an_answer_to_two_questions_at_once_names_the_command_for_each(tmp_path: Path) -> None:
    env = user_env()
    db = tmp_path / "d.db"
    scope = ("--scope", "team")
    run_id = started(db, "two", env, *scope)

    refused = flowdesk(db, *scope, "answer", run_id, "gift wrap", env=env)
    assert refused.returncode == 2, refused.stderr  # bad input, as the README's exit codes say
    assert "wait_id=" not in refused.stderr
    assert "nothing was answered" in refused.stderr
    commands = re.findall(r"^  \"(\w+)\?\": (flowdesk .*)$", refused.stderr, re.M)
    base = f"flowdesk --db {db} --scope team answer {run_id} 'gift wrap' --wait-id"
    assert commands == [
        ("gift", f"{base} {shlex.quote('ask/gift:0')}"),
        ("wrap", f"{base} {shlex.quote('ask/wrap:0')}"),
    ], refused.stderr

    (_, gift), (_, wrap) = commands
    first = as_printed(gift, env)
    assert first.returncode == 0, first.stderr
    assert f"run {run_id} waiting" in first.stdout  # the other question is still open
    second = as_printed(wrap, env)
    assert second.returncode == 0, second.stderr
    assert f"run {run_id} completed" in second.stdout
    store = open_store(db, scope="team")
    try:
        notes = Engine(store, flows=[hint_flows.two]).get(run_id).notes
    finally:
        store.close()
    assert sorted(notes) == ["gift:gift wrap", "wrap:gift wrap"]


def test_an_answer_to_the_only_question_needs_no_wait_id(tmp_path: Path) -> None:
    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "typed", env)
    answered = flowdesk(db, "answer", run_id, "yes", env=env)
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} waiting" in answered.stdout  # on to its next question


def test_the_printed_answer_run_late_answers_nothing_else(tmp_path: Path) -> None:
    """Two people read ``show``'s command for ``typed``'s first question; one
    runs it, the run asks its next question; the other runs the same printed
    command after: it carries the question's wait id, so it is refused, and
    the next question stays unanswered for someone who read it."""
    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "typed", env)
    _, command = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    assert command.endswith(f"answer {run_id} yes --wait-id approve:0"), command
    first = as_printed(command, env)
    assert first.returncode == 0, first.stderr
    assert f"run {run_id} waiting" in first.stdout

    late = as_printed(command, env)
    assert late.returncode == 1, late.stderr
    assert "first answer stands" in late.stderr, late.stderr
    note, then = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    assert note == "the word after the run id is the answer: any text"
    assert then != command
    store = open_store(db)
    try:
        state = Engine(store, flows=[hint_flows.typed]).get(run_id)
    finally:
        store.close()
    assert (state.approved, state.note) == (True, None)


def test_a_question_taking_only_some_words_prints_one_of_them_and_it_runs(tmp_path: Path) -> None:
    """``sized`` takes ``small`` or ``large``: the printed command answers
    with the first of them (``yes`` would be refused), and runs as printed."""
    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "sized", env)
    note, command = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    assert note == "the word after the run id is the answer: small or large (nothing else is taken)"
    assert command.endswith(f"answer {run_id} small --wait-id size:0"), command
    answered = as_printed(command, env)
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} completed" in answered.stdout


def note_and_command(shown: str) -> tuple[str, str]:
    """The one pending question's note (what the answer may be) and the
    command ``show`` prints for it."""
    lines = [ln.strip() for ln in shown.splitlines()]
    (at,) = [i for i, ln in enumerate(lines) if ln.startswith("answer with: ")]
    return lines[at - 1], lines[at].removeprefix("answer with: ")


def test_show_says_what_each_question_takes_by_the_type_of_its_field(tmp_path: Path) -> None:
    """``typed`` asks for a bool (``approved``), a str (``note``), an int
    (``count``) in turn; each note matches what the engine takes, and the
    command printed for the bool and the str works as printed."""
    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "typed", env)

    note, command = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    assert note == "the word after the run id is the answer: yes or no (nothing else is taken)"
    maybe = flowdesk(db, "answer", run_id, "maybe", env=env)
    assert maybe.returncode == 2, maybe.stderr  # "any text" it is not
    assert "valid boolean" in maybe.stderr
    answered = as_printed(command, env)
    assert answered.returncode == 0, answered.stderr

    note, command = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    assert note == "the word after the run id is the answer: any text"
    answered = as_printed(command, env)
    assert answered.returncode == 0, answered.stderr

    note, _ = note_and_command(flowdesk(db, "show", run_id, env=env).stdout)
    takes = "JSON that fits its type (int), with --value-json"
    assert note == f"the word after the run id is the answer: {takes}"
    word = flowdesk(db, "answer", run_id, "many", env=env)
    assert word.returncode == 2, word.stderr
    counted = flowdesk(db, "answer", run_id, "3", "--value-json", env=env)
    assert counted.returncode == 0, counted.stderr
    assert f"run {run_id} completed" in counted.stdout

    store = open_store(db)
    try:
        state = Engine(store, flows=[hint_flows.typed]).get(run_id)
    finally:
        store.close()
    assert (state.approved, state.note, state.count) == (True, "yes", 3)


def test_with_two_questions_the_answer_is_said_to_follow_the_run_id(tmp_path: Path) -> None:
    """The command ends with ``--wait-id ID``: its last word is not the answer."""
    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "two", env)
    shown = flowdesk(db, "show", run_id, env=env).stdout
    assert "the last word is the answer" not in shown
    assert shown.count("the word after the run id is the answer: yes, no or any text") == 2


def test_an_answer_that_meets_a_run_another_process_just_took_says_nothing_was_answered(
    tmp_path: Path,
) -> None:
    """Two answers at nearly the same instant: the loser can find the run still
    ``waiting`` but leased by the winner, which is recording its answer. A
    tryout's loser was told "held by a live process ... Wait for it; ... the
    run can be resumed at once", which never said its answer was not
    recorded. It says so, and what to look at; once the winner's answer is
    in, the loser is told that one stands. (The window is made here as it is
    in the race: the run waiting, its lease held by a live process, this
    test's own.)"""
    import socket
    import sqlite3

    env = user_env()
    db = tmp_path / "d.db"
    run_id = started(db, "typed", env)
    owner = f"{socket.gethostname()}:{os.getpid()}:abcdef"  # alive: this process
    with sqlite3.connect(db) as lite:
        lite.execute(
            "UPDATE runs SET lease_owner=?, lease_expires_at=9e9 WHERE run_id=?", (owner, run_id)
        )
    lite.close()
    refused = flowdesk(db, "answer", run_id, "no", env=env)
    assert refused.returncode == 1, refused.stderr
    said = refused.stderr.strip()
    assert said.startswith(
        f"flowdesk: run {run_id} was taken a moment ago by another process ({owner}), which "
        "goes on with it: your answer was not recorded, nothing was answered here"
    ), said
    assert "resumed" not in said
    hint = re.search(r"`(flowdesk [^`]+)` says", said)
    assert hint, said
    shown = as_printed(hint.group(1), env)
    assert shown.returncode == 0 and f"run {run_id} " in shown.stdout


@pytest.mark.slow
def test_two_answers_released_at_one_instant_one_stands_and_the_other_is_told_so(
    tmp_path: Path,
) -> None:
    """The tryout's race, 20 rounds: ``answer RUN yes`` and ``answer RUN no``
    from two processes at one instant, each for the question it read
    (``--wait-id``). Exactly one answer is recorded (the run goes on with
    it, to its next question); the other exits 1 saying its answer was not
    the one taken, in words that never offer to resume the run (the
    tryout's loser was told to wait and resume)."""
    from tests.line_racer import CLI_RACER, LineRacer

    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    racers = {word: LineRacer(CLI_RACER, env=env) for word in ("yes", "no")}
    losers: list[str] = []
    try:
        for rnd in range(20):
            run_id = started(db, "typed", env)
            go = tmp_path / f"go{rnd}"
            # pinned to the question both read, as `show -o json` names it
            pinned = ["--wait-id", f"{run_id}:approve:0"]
            for word, racer in racers.items():
                args = ["--db", str(db), "answer", run_id, word, *pinned]
                racer.task(rnd, go=str(go), do="cli", args=args)
            go.touch()
            told = {word: racer.told(rnd) for word, racer in racers.items()}
            won = [w for w, t in told.items() if t["code"] == 0]
            assert len(won) == 1, told
            (lost,) = [t for t in told.values() if t["code"] != 0]
            assert lost["code"] == 1, lost
            err = lost["err"]
            said = "nothing was answered" in err or "the first answer stands" in err
            assert said and "resumed" not in err, lost
            losers.append(lost["err"])
            store = open_store(db)
            try:  # the winner's answer, in its question's field; the loser's nowhere
                state = store.latest(run_id).state
            finally:
                store.close()
            assert state["approved"] is (won == ["yes"]), (told, state)
            assert state["note"] is None, (told, state)  # not taken for the next question
    finally:
        for racer in racers.values():
            racer.close()
