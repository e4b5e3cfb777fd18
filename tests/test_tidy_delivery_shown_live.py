"""`show` and `runs` of a tidy run whose moves a live process is making.

While an `answer` delivers the moves it queued, another process's `show`
and `runs` once said of the move being made "may have been made (... its
process stopped, or the call failed midway)" although that process was
running. A move whose claimant is alive is said to be being made by that
process (pid and host); once the process is gone (kill -9) the move is
again one that may have been made, its outcome unknown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from desktop_app.runs_view import MAY_HAVE_BEEN_MADE
from tests.cli_support import flowdesk
from tests.test_tidy_undo_queued import worker
from tests.tidy_folders import fill


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "t.db")


def _row(db: str, run_id: str) -> str:
    listed = flowdesk(db, "runs")
    assert listed.returncode == 0, listed.stderr
    return next(x for x in listed.stdout.splitlines() if x.startswith(run_id))


@pytest.mark.scenario("S102")
def test_a_move_a_live_answer_is_making_is_said_being_made_by_it(db, tmp_path):
    folder = tmp_path / "dl"
    fill(folder, 5)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    paused = tmp_path / "paused"
    # the answer makes 2 moves, then holds the 3rd (its intent `sending`)
    answer = worker("--db", db, "answer", run_id, "yes", paused=paused, pause_after="2")
    try:
        while not paused.exists():
            assert answer.poll() is None, answer.communicate()
            subprocess.run(["sleep", "0.05"], check=True)
        who = f"process {answer.pid} on host {socket.gethostname()}"
        shown = flowdesk(db, "show", run_id)
        assert shown.returncode == 0, shown.stderr
        head, delivery = shown.stdout.splitlines()[:2]
        assert head.endswith(
            "status completed · 2 moves queued (not made yet) · 1 move being made now by "
            f"{who} (its outcome is recorded when that process ends the send)"
        ), head
        assert delivery == f"its 3 moves not delivered are being delivered now by {who}"
        assert "may have been made" not in shown.stdout, shown.stdout
        assert "resume --all" not in shown.stdout, shown.stdout
        # and its file reads as being moved, not as one that may have moved
        assert "1 being moved now (by a live process)" in shown.stdout, shown.stdout
        assert "may have moved" not in shown.stdout, shown.stdout
        row = _row(db, run_id)
        assert row.endswith(f"· 2 moves queued  · 1 move being made now by {who}"), row
        as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
        assert as_json["sending"] == 1
        ((owner, n),) = as_json["being_made"].items()
        assert n == 1 and owner.startswith(f"{socket.gethostname()}:{answer.pid}:")
        assert [f["outcome"] for f in as_json["files"]].count("moving") == 1
    finally:
        os.kill(answer.pid, signal.SIGKILL)
        answer.communicate()
    # its process gone, the move's outcome is unknown: said so again
    shown = flowdesk(db, "show", run_id)
    head = shown.stdout.splitlines()[0]
    assert head.endswith(
        f"status completed · 2 moves queued (not made yet) · 1 move may have been made "
        f"({MAY_HAVE_BEEN_MADE})"
    ), head
    assert "being made now" not in shown.stdout and "being delivered now" not in shown.stdout
    assert "1 may have moved" in shown.stdout and "being moved now" not in shown.stdout
    assert _row(db, run_id).endswith("· 2 moves queued  · 1 move may have been made")
    assert json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)["being_made"] == {}
