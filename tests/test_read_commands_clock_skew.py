"""Read commands that judge time say once that this computer's clock is
skewed, and judge deadlines by the database's clock (the file system's,
which ``faketime`` does not move) as the write commands do: real
``flowdesk`` processes under ``faketime``, a real SQLite file. Under
``faketime +2d``, ``waiting`` said "too late to answer … time it out now
with: resume" of a question due in an hour (and ``resume`` would refuse
from that clock); a clock a day behind showed a passed deadline as due.
Each hint shown is then run as printed with the system clock (as the
warning says) and does what it says; from the skewed clock it is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk
from tests.faketime_support import libfaketime, skewed_env
from tests.polling import until
from tests.timer_flows import FLOWS_ENV

ENV = {"FLOWDESK_FLOWS": json.dumps([*json.loads(FLOWS_ENV), "tests.timer_flows:hour_asker"])}
WARNING = "flowdesk: warning: this computer's clock is "


@pytest.fixture(autouse=True)
def _need_faketime() -> None:
    libfaketime()


def skewed(offset: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **ENV, **skewed_env(offset)},
        timeout=120,
    )


def skewed_hint(offset: str, hint: str) -> subprocess.CompletedProcess[str]:
    """A printed hint run as printed, but from a clock ``offset`` off."""
    return cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", *hint.split()[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **ENV, **skewed_env(offset)},
        timeout=120,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    assert flowdesk(path, "db", "apply", env=ENV).returncode == 0
    return path


def start(db: Path, flow: str) -> str:
    out = flowdesk(db, "start", flow, "--input", json.dumps({"order": "z3"}), env=ENV)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


def warned_once(out: subprocess.CompletedProcess[str], way: str) -> None:
    assert out.returncode == 0, out.stderr
    assert out.stderr.count(WARNING) == 1, out.stderr
    assert f" {way} the clock of the file system holding " in out.stderr, out.stderr
    assert "may be a few seconds off" in out.stderr
    assert "refuse to run from this clock" in out.stderr


def status(db: Path, run_id: str) -> str:
    out = flowdesk(db, "show", run_id, "-o", "json", env=ENV)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["status"])


def test_a_clock_ahead_does_not_call_a_question_due_in_an_hour_too_late(db: Path) -> None:
    run_id = start(db, "hour_asker")
    for command in (["waiting"], ["show", run_id], ["runs"]):
        out = skewed("+2d", db, *command)
        warned_once(out, "2 d 0 h 0 min 0 s ahead of")
        assert "too late" not in out.stdout, out.stdout
    waiting = skewed("+2d", db, "waiting")
    assert re.search(r"deadline in (59m|1h)", waiting.stdout), waiting.stdout
    shown = skewed("+2d", db, "show", run_id)
    hint = re.search(r"answer with: (flowdesk .*)", shown.stdout)
    assert hint, shown.stdout
    refused = skewed_hint("+2d", hint.group(1))  # what the warning says: refused from there
    assert refused.returncode != 0 and "nothing was written" in refused.stderr, refused.stderr
    assert status(db, run_id) == "waiting"
    answered = as_printed(hint.group(1), {**os.environ, **ENV})  # the system clock
    assert answered.returncode == 0, answered.stderr
    assert status(db, run_id) == "completed"


def test_a_clock_behind_shows_a_passed_deadline_as_passed(db: Path) -> None:
    run_id = start(db, "asker")

    def passed() -> bool:
        return "too late to answer" in flowdesk(db, "waiting", env=ENV).stdout

    until(passed, "the asker's deadline to pass by the system clock")
    out = skewed("-1d", db, "waiting")
    warned_once(out, "1 d 0 h 0 min 0 s behind")
    assert "too late to answer" in out.stdout and "deadline passed" in out.stdout, out.stdout
    hint = re.search(r"time it out now with: (flowdesk .*)", out.stdout)
    assert hint, out.stdout
    refused = skewed_hint("-1d", hint.group(1))
    assert refused.returncode != 0 and "nothing was written" in refused.stderr, refused.stderr
    assert status(db, run_id) == "waiting"
    timed_out = as_printed(hint.group(1), {**os.environ, **ENV})
    assert timed_out.returncode in (0, 1), timed_out.stderr
    assert status(db, run_id) == "timed_out"


def test_a_right_clock_prints_no_warning(db: Path) -> None:
    run_id = start(db, "slow_asker")
    for command in (["waiting"], ["show", run_id], ["runs"]):
        out = flowdesk(db, *command, env=ENV)
        assert out.returncode == 0, out.stderr
        assert WARNING not in out.stderr
