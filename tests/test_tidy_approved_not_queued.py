"""``show`` of a tidy killed while its approved moves were being queued.

A new user's tryout: after ``answer RUN yes`` the process queueing the
moves was killed (or the disk filled); ``show`` read "… 430 planned (waits
for approval)" though the run was interrupted, its waits ``[]`` and the
person had approved, and ``show -o json`` called those files ``planned``.
Now they read "approved, not queued yet (queued when the run resumes:
<command>)", the JSON gives them the outcome ``approved``, and the printed
command, run as printed, moves every file once. A real ``kill -9``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.app.previews import tidy_preview
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk
from tests.tidy_folders import fill, tidied, top_files

N = 1500


def shown_resume(db: Path, run_id: str, counts: str) -> str:
    """The resume command ``show`` prints in the line of a tidy whose files
    are approved but not all queued: ``COUNTS approved, not queued yet
    (queued when the run resumes: `CMD`)``; it says nothing waits for approval."""
    shown = flowdesk(db, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "waits for approval" not in shown.stdout, shown.stdout
    m = re.search(
        re.escape(counts) + r" approved, not queued yet \(queued when the run resumes: "
        r"`(?P<cmd>[^`]+)`\)$",
        shown.stdout,
        re.M,
    )
    assert m, shown.stdout
    return m["cmd"]


def queued(db: Path, run_id: str) -> int:
    store = open_store(db)
    try:
        return store.undelivered_intents().get(run_id, 0)
    finally:
        store.close()


@pytest.mark.slow
def test_a_tidy_killed_mid_queueing_shows_its_files_approved_and_the_printed_resume_moves_each_once(
    tmp_path,
):
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, N)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    answer = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "answer", run_id, "yes"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        while queued(db, run_id) < 300:
            assert answer.poll() is None
            time.sleep(0.01)
    finally:
        os.kill(answer.pid, signal.SIGKILL)
        answer.wait()
    q = queued(db, run_id)
    assert 300 <= q < N
    assert tidied(folder) == []  # delivery comes after the run: nothing moved yet
    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))
    assert "interrupted" in line, line

    cmd = shown_resume(db, run_id, f"1,500 files: {q:,} queued (not moved yet), {N - q:,}")
    assert cmd == f"flowdesk --db {db} resume {run_id}"

    as_json = flowdesk(db, "show", run_id, "-o", "json")
    got = json.loads(as_json.stdout)
    outcomes = Counter(f["outcome"] for f in got["files"])
    assert outcomes == {"queued": q, "approved": N - q}, outcomes
    says = {f["says"] for f in got["files"] if f["outcome"] == "approved"}
    assert says == {f"approved, not queued yet (queued when the run resumes: `{cmd}`)"}

    store = open_store(db)
    try:  # the app's tidy table (the inbox and answer screens' preview)
        preview = tidy_preview(store, run_id)
    finally:
        store.close()
    assert Counter(row[2] for row in preview.rows) == {"queued": q, "approved": N - q}

    out = tmp_path / "export"
    exported = flowdesk(db, "export", "--out", str(out), "--table", "tidy_moves")
    assert exported.returncode == 0, exported.stderr
    rows = json.loads((out / "tidy_moves.json").read_text())
    assert Counter((r["status"], r["reason"]) for r in rows) == {
        ("queued", None): q,
        ("planned", "approved, not queued yet"): N - q,
    }

    resumed = as_printed(cmd, dict(os.environ), timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    moved = tidied(folder)
    assert top_files(folder) == {}
    assert len(moved) == N  # each once: a second move would be renamed " (1)"
    assert sorted(p.name for p in moved) == sorted(files)
    assert all(p.read_text() == files[p.name] for p in moved)
    shown = flowdesk(db, "show", run_id).stdout
    assert f"1,500 files: {N:,} moved" in shown, shown


def test_rows_of_a_run_approved_before_rows_recorded_it_read_approved():
    """A run a Flowdesk approved before rows recorded approvals: a row was
    queued, so its rows still ``planned`` are approved; a run whose rows
    record nothing of the kind still waits for approval."""
    from desktop_app.flows.tidy_outcomes import outcome_counts, outcomes_of
    from desktop_app.store.domain.tidy import TidyMove

    def row(name: str, status: str = "planned", key: str | None = None) -> TidyMove:
        return TidyMove(
            f"/d/{name}", f"/d/Other/2026-12/{name}", "other", "2026-12", status, None, key
        )

    legacy = [row("a", "queued", "k1"), row("b"), row("c")]
    assert outcome_counts(outcomes_of(legacy), {"approved": " (resume)"}) == (
        "3 files: 1 queued (not moved yet), 2 approved, not queued yet (resume)"
    )
    waiting = [row("a"), row("b")]
    assert outcome_counts(outcomes_of(waiting)) == "2 files: 2 planned (waits for approval)"


#: ``flowdesk ARGS`` whose answer's process is killed (SIGKILL) the moment
#: the answer is saved, before the question's step runs again
_KILLED_AFTER_THE_ANSWER = (
    "import os, signal, sys\n"
    "from desktop_app.flow.engine import Engine\n"
    "given = Engine.resume_with\n"
    "def killed(self, run_id, value, *, wait_id=None, on_saved=None):\n"
    "    def saved():\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return given(self, run_id, value, wait_id=wait_id, on_saved=saved)\n"
    "Engine.resume_with = killed\n"
    "from desktop_app.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_a_tidy_killed_right_after_its_approval_was_saved_shows_its_files_approved(tmp_path):
    """A new tryout approved in the app and killed it 50 ms later: the
    answer was saved, the approve step had not run again (its rows still
    ``planned``), and ``show`` said "N planned (waits for approval)" while
    ``waiting`` said nothing waits. The files read approved, not queued yet,
    with the resume that queues them; that command, run as printed, moves
    each file once."""
    n = 40
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, n)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "run", "tidy", "--folder", str(folder)).stdout.splitlines()[0]
    killed = cli_forkserver.run(
        ["--db", str(db), "answer", run_id, "yes"], code=_KILLED_AFTER_THE_ANSWER, cwd=REPO
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "no waiting runs" in flowdesk(db, "waiting").stdout
    cmd = shown_resume(db, run_id, f"{n} files: {n}")
    store = open_store(db)
    try:  # the app's tidy table says the same
        preview = tidy_preview(store, run_id)
    finally:
        store.close()
    assert Counter(row[2] for row in preview.rows) == {"approved": n}
    resumed = as_printed(cmd, dict(os.environ))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    moved = tidied(folder)
    assert len(moved) == n and sorted(p.name for p in moved) == sorted(files)
