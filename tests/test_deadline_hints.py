"""The hints around a question whose deadline passed, each run as printed.

A new user's tryout found two that did not work: a timed-out run said
``resume with: flowdesk resume RUN``, which is refused (a timed-out run
cannot be resumed, exit 1); and ``show`` offered ``answer RUN yes`` next to
``deadline … passed 4s ago``, which exits 1 and times the run out. The runs
are started and moved on by the real CLI over a real SQLite file; the
question's deadline (``tests.hint_flows.SOON_S`` after it is asked) passes
on the real clock.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

from tests.cli_support import as_printed, flowdesk
from tests.hint_flows import FLOWS_ENV
from tests.polling import until

REPO = Path(__file__).resolve().parents[1]


def user_env() -> dict[str, str]:
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "FLOWDESK_FLOWS": FLOWS_ENV, "PYTHONPATH": os.pathsep.join(paths)}


def hint(stream: str, label: str) -> str:
    """The command on the line ``<label>: <command>`` of ``stream``."""
    (line,) = [ln.strip() for ln in stream.splitlines() if ln.strip().startswith(label + ": ")]
    return line.removeprefix(label + ": ")


def past_deadline(db: Path, env: dict[str, str]) -> str:
    """A ``soon`` run whose question's deadline has passed (it still waits:
    nothing woke it since)."""
    started = flowdesk(db, "start", "soon", "--input", "{}", env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    shown = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)
    (wait,) = shown["waits"]
    deadline = datetime.fromisoformat(wait["deadline_at"].replace("Z", "+00:00")).timestamp()
    until(lambda: time.time() > deadline + 0.05, "the question's deadline passes")
    return run_id


def test_a_timed_out_run_offers_show_and_a_replay_that_work_not_resume(tmp_path: Path) -> None:
    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    run_id = past_deadline(db, env)

    woken = flowdesk(db, "resume", run_id, env=env)
    assert woken.returncode == 1, woken.stderr
    assert f"run {run_id} timed_out" in woken.stdout
    assert "resume with" not in woken.stderr, woken.stderr
    show = hint(woken.stderr, "what it did")
    replay = hint(woken.stderr, "run it again from its start, as a new run")
    assert show == f"flowdesk --db {db} show {run_id}"
    assert replay == f"flowdesk --db {db} replay {run_id}"

    shown = as_printed(show, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].endswith("status timed_out"), shown.stdout
    assert f"error: wait {run_id}:approve:0 timed out" in shown.stdout

    again = as_printed(replay, env)
    assert again.returncode == 0, again.stderr
    new_id = again.stdout.splitlines()[0]
    assert new_id != run_id
    assert f"run {new_id} waiting" in again.stdout  # it asks its question again
    left = flowdesk(db, "show", run_id, "-o", "json", env=env)
    assert json.loads(left.stdout)["status"] == "timed_out"  # the source is left as it was


def test_a_question_past_its_deadline_offers_no_answer_but_the_command_that_times_it_out(
    tmp_path: Path,
) -> None:
    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    run_id = past_deadline(db, env)
    now_label = "time it out now with"

    shown = flowdesk(db, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "answer with" not in shown.stdout and f"answer {run_id}" not in shown.stdout
    assert "too late to answer: its deadline passed, so the next wake-up" in shown.stdout
    from_show = hint(shown.stdout, now_label)
    waiting = flowdesk(db, "waiting", env=env)
    assert waiting.returncode == 0, waiting.stderr
    assert "too late to answer: its deadline passed" in waiting.stdout
    (wait,) = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)["waits"]
    assert from_show == hint(waiting.stdout, now_label) == wait["command"]
    assert from_show == f"flowdesk --db {db} resume {run_id}"

    timed_out = as_printed(from_show, env)
    assert timed_out.returncode == 1, timed_out.stderr  # a run that timed out is not a success
    assert f"run {run_id} timed_out" in timed_out.stdout
    assert f"error: wait {run_id}:approve:0 timed out" in timed_out.stderr
    after = flowdesk(db, "show", run_id, env=env)
    assert after.stdout.splitlines()[0].endswith("status timed_out"), after.stdout
    assert "waits for:" not in after.stdout


def test_a_question_before_its_deadline_still_offers_its_answer(tmp_path: Path) -> None:
    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "typed", "--input", "{}", env=env)
    run_id = started.stdout.splitlines()[0]
    shown = flowdesk(db, "show", run_id, env=env)
    assert "too late" not in shown.stdout and "time it out" not in shown.stdout
    answered = as_printed(hint(shown.stdout, "answer with"), env)
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} waiting" in answered.stdout  # on to its next question


def test_a_signal_wait_past_its_deadline_offers_no_signal_but_the_wake_up(tmp_path: Path) -> None:
    """A signal sent after the deadline does not complete the wait, so
    ``show`` stops offering ``signal``; the wake-up it offers instead, run
    as printed, times the run out (no signal came in time), and a signal
    sent afterwards changes nothing."""
    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    for _ in range(5):  # a show slower than the 0.5 s deadline (load) is a lost race
        started = flowdesk(db, "start", "paid", "--input", "{}", env=env)
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.splitlines()[0]
        before = flowdesk(db, "show", run_id, env=env)
        if "too late to signal" not in before.stdout:
            break
    assert f"send it with: flowdesk --db {db} signal payment o-1" in before.stdout, before.stdout
    (wait,) = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)["waits"]
    deadline = datetime.fromisoformat(wait["deadline_at"].replace("Z", "+00:00")).timestamp()
    until(lambda: time.time() > deadline + 0.05, "the wait's deadline passes")

    shown = flowdesk(db, "show", run_id, env=env)
    assert "too late to signal: its deadline passed" in shown.stdout, shown.stdout
    assert "send it with:" not in shown.stdout
    wake = hint(shown.stdout, "wake it now with")
    assert wake == f"flowdesk --db {db} resume {run_id}"
    woken = as_printed(wake, env)
    assert woken.returncode == 1 and f"run {run_id} timed_out" in woken.stdout, woken.stdout
    late = flowdesk(db, "signal", "payment", "o-1", env=env)
    assert late.returncode == 0, late.stderr
    ended = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)
    assert ended["status"] == "timed_out"


def test_an_answer_that_times_the_run_out_prints_show_and_replay_as_resume_does(
    tmp_path: Path,
) -> None:
    """A tryout: ``answer RUN yes`` after the deadline exited 1 saying only
    "timed out before the answer came; the run is now timed_out", with no
    next step. It prints what ``resume`` prints then, and each works as printed."""
    env = user_env()
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    run_id = past_deadline(db, env)

    late = flowdesk(db, "answer", run_id, "yes", env=env)
    assert late.returncode == 1, late.stderr
    assert "timed out before the answer came (its deadline " in late.stderr
    assert "by the later of this process's clock and the database's); the run is now timed_out" in (
        late.stderr
    )
    show = hint(late.stderr, "what it did")
    replay = hint(late.stderr, "run it again from its start, as a new run")
    assert show == f"flowdesk --db {db} show {run_id}"
    assert replay == f"flowdesk --db {db} replay {run_id}"

    shown = as_printed(show, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].endswith("status timed_out"), shown.stdout
    again = as_printed(replay, env)
    assert again.returncode == 0, again.stderr
    assert f"run {again.stdout.splitlines()[0]} waiting" in again.stdout
