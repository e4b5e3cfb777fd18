"""``flowdesk undo`` of a tidy whose moves are still queued in the outbox.

A tidy run completes once its moves are queued; a dispatcher makes them
later. The undo withdraws the moves not made (a compare-and-set on each
intent's status) before moving back the ones made, so no dispatcher (the
killed CLI's successor, another CLI, the app) makes a move after the undo.
Real files, real SQLite, real processes (kill -9, two racers released at
one instant).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows.tidy import DESTINATION, FileMover, build_tidy_flow
from desktop_app.runs_view import MAY_HAVE_BEEN_MADE
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk
from tests.line_racer import CLI_RACER, LineRacer
from tests.tidy_folders import fill, tidied, top_files

WORKER = str(REPO / "tests" / "tidy_cli_worker.py")


def worker(*args: str, go: Path | None = None, **kw: str) -> subprocess.Popen[str]:
    opts = [f"--go={go}"] if go else []
    opts += [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    return cli_forkserver.popen(
        [sys.executable, WORKER, *opts, "--", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def killed_mid_delivery(db: Path, folder: Path, tmp_path: Path, **pause: str) -> str:
    """``run tidy`` over ``folder`` (300 files), then ``answer RUN yes`` in a
    process killed with SIGKILL where ``pause`` stops its mover
    (``pause_after`` or ``pause_after_move``, see tests/tidy_cli_worker.py);
    returns the run id."""
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    assert started.stdout.splitlines()[-1] == f"run {run_id} waiting", started.stderr
    paused = tmp_path / "paused"
    answer = worker("--db", str(db), "answer", run_id, "yes", paused=paused, **pause)
    try:
        while not paused.exists():
            assert answer.poll() is None, answer.communicate()
            subprocess.run(["sleep", "0.05"], check=True)
    finally:
        os.kill(answer.pid, signal.SIGKILL)
        answer.communicate()
    return run_id


def test_undo_after_a_kill_mid_delivery_withdraws_the_moves_not_made(tmp_path):
    db, folder = tmp_path / "t.db", tmp_path / "dl5"
    files = fill(folder, 300)
    run_id = killed_mid_delivery(db, folder, tmp_path, pause_after="60")
    # 60 moves made, the 61st marked sending
    assert len(top_files(folder)) == 240 and len(tidied(folder)) == 60

    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))
    # the 61st move began: it may have been made (its outcome is unknown)
    assert "completed" in line
    assert line.endswith("· 239 moves queued  · 1 move may have been made"), line
    shown = flowdesk(db, "show", run_id).stdout.splitlines()[0]
    assert "status completed · 239 moves queued (not made yet) · 1 move may have" in shown
    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert as_json["undelivered"] == 240

    undo = flowdesk(db, "undo", run_id)
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert undo.stdout.splitlines()[0] == (
        f"tidy run {run_id}: 60 moved back, 240 queued moves withdrawn (never made)"
    )
    resumed = flowdesk(db, "resume", "--all")
    assert resumed.returncode == 0 and "delivered" not in resumed.stdout, resumed.stdout
    assert top_files(folder) == files and tidied(folder) == []
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == []

    again = flowdesk(db, "undo", run_id)  # running it again changes nothing
    assert again.returncode == 0
    assert again.stdout.splitlines()[0] == f"tidy run {run_id}: 0 moved back, 300 already back"
    assert top_files(folder) == files
    line = next(x for x in flowdesk(db, "runs").stdout.splitlines() if x.startswith(run_id))
    assert "queued" not in line, line


@pytest.mark.slow
def test_an_undo_and_a_dispatcher_released_at_one_instant_leave_every_file_back(tmp_path):
    """20 rounds: a run with 40 queued moves, then ``flowdesk undo`` and a
    dispatcher of the built-in destinations (as the app runs one) in two
    processes released together (the undo staggered by 0-40 ms so the
    rounds interleave differently: a warm dispatcher makes 40 moves in
    about 50 ms). Whatever the interleaving, every file
    ends back and a later dispatcher has nothing to deliver. The two are
    processes kept across rounds (tests/cli_racer.py), each round a run of
    its own."""
    db = tmp_path / "race.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    store = open_store(db)
    engine = Engine(store, flows=[build_tidy_flow()], clock=ManualClock())
    mixes: list[tuple[int, int]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = {what: LineRacer(CLI_RACER, env=env) for what in ("undo", "deliver")}
    try:
        for r in range(20):
            folder = tmp_path / f"dl{r}"
            files = fill(folder, 40)
            run_id = engine.run("tidy", {"folder": str(folder)}).run_id
            assert engine.resume_with(run_id, "yes").status == "completed"
            go = str(tmp_path / f"go{r}")
            undo_argv = ["--db", str(db), "undo", run_id, "-o", "json"]
            racers["undo"].task(r, go=go, do="cli", args=undo_argv, delay=r % 5 / 100)
            racers["deliver"].task(r, go=go, do="dispatch", args=[str(db)])
            Path(go).touch()
            undo, deliver = racers["undo"].told(r), racers["deliver"].told(r)
            assert undo["code"] == 0 and deliver["code"] == 0, (undo, deliver)
            report = json.loads(undo["out"])
            assert report["left"] == [] and report["in_flight"] == []
            assert report["moved_back"] + report["withdrawn"] == 40, report
            mixes.append((report["moved_back"], report["withdrawn"]))
            later = Dispatcher(store, {DESTINATION: FileMover(store)})
            assert later.dispatch() == 0  # nothing of the run is left to send
            assert top_files(folder) == files and tidied(folder) == [], (r, report, deliver)
        for racer in racers.values():
            racer.close()
    finally:
        for racer in racers.values():
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    assert store.undelivered_intents() == {}
    print("moved back / withdrawn per round:", mixes)
    store.close()


def test_undo_after_a_kill_between_a_move_and_its_mark_moves_that_file_back(tmp_path):
    """The process making the moves is killed after it moved the 61st file
    and before it recorded the move: the undo asks the file system, finds
    the move made, and moves it back with the 60 others (it was withdrawn as
    'never made' and stayed in the kind folder)."""
    db, folder = tmp_path / "t.db", tmp_path / "dl6"
    files = fill(folder, 300)
    run_id = killed_mid_delivery(db, folder, tmp_path, pause_after_move="60")
    # 61 files moved, the 61st not recorded
    assert len(top_files(folder)) == 239 and len(tidied(folder)) == 61

    undo = flowdesk(db, "undo", run_id)
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert undo.stdout.splitlines()[0] == (
        f"tidy run {run_id}: 61 moved back, 239 queued moves withdrawn (never made)"
    )
    store = open_store(db)
    try:  # the outbox says the 61st move was made, not withdrawn
        marks = dict(store.conn.execute("SELECT status, count(*) FROM outbox GROUP BY status"))
    finally:
        store.close()
    assert marks == {"delivered": 61, "failed": 239}
    resumed = flowdesk(db, "resume", "--all")
    assert resumed.returncode == 0 and "delivered" not in resumed.stdout, resumed.stdout
    assert top_files(folder) == files and tidied(folder) == []


def test_show_of_a_tidy_whose_mover_died_names_the_command_that_makes_its_moves(tmp_path):
    """``answer`` killed mid-delivery leaves a completed tidy with moves
    queued and no process making them: ``show`` says which command makes
    them, and that command, run exactly as printed, moves every file once."""
    db, folder = tmp_path / "t.db", tmp_path / "dl9"
    files = fill(folder, 300)
    run_id = killed_mid_delivery(db, folder, tmp_path, pause_after="60")
    assert len(top_files(folder)) == 240  # 60 moves made, the 61st marked sending

    shown = flowdesk(db, "show", run_id).stdout.splitlines()
    # the 61st was being moved: it may have been (it is not called queued)
    assert shown[0].endswith(
        "status completed · 239 moves queued (not made yet) · 1 move may have been made "
        f"({MAY_HAVE_BEEN_MADE})"
    ), shown[0]
    hint = shown[1]
    assert hint.startswith(
        "its 240 moves not delivered are settled by the next delivery, which looks up "
        "first the 1 that may have been made and makes only what was not: "
    ), hint
    command = hint.split(": ", 1)[1].split(" settles them now")[0]
    assert command == f"flowdesk --db {db} resume --all", hint
    # one file listed as one that may have moved (the counts line says 1 too)
    assert sum(x.startswith("  ") and "may have moved" in x for x in shown) == 1, shown
    assert any(x.startswith("300 files:") and ", 1 may have moved" in x for x in shown), shown
    made = as_printed(command, env=dict(os.environ))
    assert made.returncode == 0, made.stdout + made.stderr
    assert top_files(folder) == {} and sorted(p.name for p in tidied(folder)) == sorted(files)
    assert {p.name: p.read_text() for p in tidied(folder)} == files  # each moved once, intact
    after = flowdesk(db, "show", run_id).stdout.splitlines()
    assert after[0].endswith("status completed") and "next delivery" not in after[1]


def test_show_of_a_tidy_killed_between_a_move_and_its_mark_says_the_file_may_have_moved(
    tmp_path,
):
    """The 61st file was moved, then the process killed before it recorded
    the move: ``show`` lists it as one that may have moved (not "queued (not
    moved yet)"), and its hint, run as printed, looks it up (found moved:
    recorded, not moved again) and makes the 239 others."""
    db, folder = tmp_path / "t.db", tmp_path / "dl10"
    files = fill(folder, 300)
    run_id = killed_mid_delivery(db, folder, tmp_path, pause_after_move="60")
    assert len(top_files(folder)) == 239 and len(tidied(folder)) == 61
    shown = flowdesk(db, "show", run_id).stdout.splitlines()
    assert "· 239 moves queued (not made yet) · 1 move may have been made" in shown[0]
    (line,) = [x for x in shown if x.startswith("  ") and "may have moved" in x]
    name = line.split()[0]
    assert name in {p.name for p in tidied(folder)}  # it did move
    assert "queued (not moved yet)" not in line
    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    (entry,) = [f for f in as_json["files"] if f["outcome"] == "sending"]
    assert entry["name"] == name
    command = shown[1].split(": ", 1)[1].split(" settles them now")[0]
    made = as_printed(command, env=dict(os.environ))
    assert made.returncode == 0, made.stdout + made.stderr
    assert top_files(folder) == {} and {p.name: p.read_text() for p in tidied(folder)} == files
    after = flowdesk(db, "show", run_id).stdout
    assert "may have" not in after and "queued" not in after, after
