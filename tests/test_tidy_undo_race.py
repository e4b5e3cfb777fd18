"""Two ``flowdesk undo`` of one tidy run at once (and an undo racing a
dispatcher) each tell the truth.

A tryout ran two undos of one 3,000-file tidy at the same instant: every
file came back, but one undo printed "left f267.txt: …/f267.txt is taken;
left at …/Documents/2026-12/f267.txt (move the file at …/f267.txt away and
run the undo again)" for a file the other undo had just moved back (the
folder it named was gone), and bare "No such file or directory" lines. The
advice would have had the person move a correct file away.

An undo now claims the run's undo as the outbox claims a move: one live
claimant at a time (``tidy_undos``' owner; a second undo waits for it to
end, then finds those files back), a dead claimant's claim taken over and
every file looked up where it is. Real files, real SQLite, real processes
released at one instant by a GO file, kill -9 for the crash; every hint an
undo prints is run here as printed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows.tidy import DESTINATION, FileMover, build_tidy_flow
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import REPO, as_printed, flowdesk
from tests.line_racer import CLI_RACER, LineRacer
from tests.test_tidy_undo_queued import worker
from tests.tidy_folders import fill, tidied, top_files

#: what an undo must never print of a file another undo moved back
FALSE_ADVICE = re.compile(r"is taken|away and run|No such file|Errno")
FILES = 24


def _summary(out: str, run_id: str) -> dict[str, int]:
    """The counts of an undo's first line (``tidy run R: 30 moved back, …``)."""
    first = out.splitlines()[0]
    assert first.startswith(f"tidy run {run_id}: "), out
    counts = {"moved back": 0, "already back": 0, "withdrawn": 0}
    for part in first.split(": ", 1)[1].split(", "):
        number, _, what = part.partition(" ")
        key = "withdrawn" if "withdrawn" in what else what
        assert key in counts, (part, out)
        counts[key] = int(number.replace(",", ""))
    return counts


@pytest.mark.slow
def test_two_undos_and_a_dispatcher_released_at_one_instant_tell_the_truth(tmp_path):
    """20 rounds: two undos of one tidy (its moves made in even rounds, still
    queued with a dispatcher racing in odd ones) released at one instant.
    Every file ends at its old place with its text, no undo lists a file as
    a problem or prints advice to move a file away, and each file is counted
    moved back (or withdrawn) by exactly one of them."""
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    store = open_store(db)
    engine = Engine(store, flows=[build_tidy_flow()], clock=ManualClock())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = {what: LineRacer(CLI_RACER, env=env) for what in ("a", "b", "deliver")}
    waited = 0
    try:
        for r in range(20):
            folder = tmp_path / f"dl{r}"
            files = fill(folder, FILES)
            run_id = engine.run("tidy", {"folder": str(folder)}).run_id
            assert engine.resume_with(run_id, "yes").status == "completed"
            racing_dispatch = r % 2 == 1
            if not racing_dispatch:  # every move made before the undos
                Dispatcher(store, {DESTINATION: FileMover(store)}).dispatch(limit=FILES)
                assert top_files(folder) == {} and len(tidied(folder)) == FILES
            go = str(tmp_path / f"go{r}")
            argv = ["--db", str(db), "undo", run_id]
            racers["a"].task(r, go=go, do="cli", args=argv)
            racers["b"].task(r, go=go, do="cli", args=argv, delay=r % 4 / 200)
            if racing_dispatch:
                racers["deliver"].task(r, go=go, do="dispatch", args=[str(db)])
            Path(go).touch()
            told = [racers["a"].told(r), racers["b"].told(r)]
            if racing_dispatch:
                assert racers["deliver"].told(r)["code"] == 0
            for undo in told:
                said = undo["out"] + undo["err"]
                assert undo["code"] == 0, (r, said)
                assert not FALSE_ADVICE.search(said), (r, said)
                assert "  left " not in said, (r, said)
                waited += "was under way" in said
            counts = [_summary(undo["out"], run_id) for undo in told]
            for c in counts:  # each undo accounts for every file of the run
                assert sum(c.values()) == FILES, (r, told)
            made = sum(c["moved back"] + c["withdrawn"] for c in counts)
            assert made == FILES, (r, told)  # each file by exactly one undo
            assert Dispatcher(store, {DESTINATION: FileMover(store)}).dispatch() == 0
            assert top_files(folder) == files and tidied(folder) == [], (r, told)
            assert [p for p in folder.iterdir() if p.is_dir()] == [], r
        for racer in racers.values():
            racer.close()
    finally:
        for racer in racers.values():
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    store.close()
    print(f"rounds where one undo waited for the other: {waited}")


def test_an_undo_killed_mid_way_then_two_undos_at_once(tmp_path):
    """An undo killed with SIGKILL after 10 files, then two undos released at
    one instant: the one that claims first takes over the dead claim and
    looks every file up; the other waits for it and finds them back."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 40)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "run", "tidy", "--folder", str(folder)).stdout.splitlines()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    assert top_files(folder) == {} and len(tidied(folder)) == 40
    paused = tmp_path / "paused"
    first = worker("--db", str(db), "undo", run_id, undo_pause_after="10", paused=paused)
    try:
        while not paused.exists():
            assert first.poll() is None, first.communicate()
            subprocess.run(["sleep", "0.05"], check=True)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.communicate()
    assert len(top_files(folder)) == 10

    go = tmp_path / "go"
    both = [worker("--db", str(db), "undo", run_id, go=go) for _ in range(2)]
    for proc in both:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    go.touch()
    outs = [proc.communicate(timeout=120) for proc in both]
    counts = []
    for proc, (out, err) in zip(both, outs, strict=True):
        assert proc.returncode == 0, out + err
        assert not FALSE_ADVICE.search(out + err) and "  left " not in out, out + err
        counts.append(_summary(out, run_id))
    assert sum(c["moved back"] for c in counts) == 30, outs
    assert all(sum(c.values()) == 40 for c in counts), outs
    assert sum("took over from an undo whose process stopped" in o for o, _ in outs) == 1, outs
    assert top_files(folder) == files and tidied(folder) == []
    shown = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert shown["undo"]["state"] == "finished", shown["undo"]


def test_an_undo_that_finds_another_one_under_way_names_the_command_to_finish(tmp_path):
    """An undo paused mid-way (its process alive): a second undo that waits
    (``--wait 0.2``) for it in vain moves nothing and says which process
    holds the undo and the command to run once it has ended; that command,
    run as printed after the first one ends, finds every file back."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 30)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "run", "tidy", "--folder", str(folder)).stdout.splitlines()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    paused = tmp_path / "paused"
    first = worker("--db", str(db), "undo", run_id, undo_pause_after="10", paused=paused)
    try:
        while not paused.exists():
            assert first.poll() is None, first.communicate()
            subprocess.run(["sleep", "0.05"], check=True)
        second = flowdesk(db, "undo", run_id, "--wait", "0.2")
        assert second.returncode == 1, second.stdout + second.stderr
        assert len(top_files(folder)) == 10  # the second one moved nothing
        assert f":{first.pid}:" in second.stderr, second.stderr
        (command,) = re.findall(r"`([^`]+)`", second.stderr)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.communicate()
    again = as_printed(command, env=dict(os.environ))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _summary(again.stdout, run_id) == {"moved back": 20, "already back": 10, "withdrawn": 0}
    assert top_files(folder) == files and tidied(folder) == []


def test_an_old_place_taken_by_another_file_is_named_and_the_printed_command_finishes(
    tmp_path,
):
    """A file saved at a moved file's old place since the tidy: the undo
    leaves that one, says so, and prints the command that finishes; run as
    printed once the other file is moved away, it moves that file back."""
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 12)
    assert flowdesk(db, "db", "apply").returncode == 0
    run_id = flowdesk(db, "run", "tidy", "--folder", str(folder)).stdout.splitlines()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    (folder / "f3.txt").write_text("saved since\n")
    undo = flowdesk(db, "undo", run_id)
    assert undo.returncode == 1, undo.stdout + undo.stderr
    (left,) = [x for x in undo.stdout.splitlines() if x.startswith("  left ")]
    assert left.startswith(f"  left f3.txt: {folder / 'f3.txt'} is taken; left at "), left
    assert "move the file at" in left and "away and run the undo again" in left, left
    (command,) = re.findall(r"^then `([^`]+)` moves back what is left$", undo.stdout, re.M)
    (folder / "f3.txt").rename(tmp_path / "saved-since.txt")
    again = as_printed(command, env=dict(os.environ))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _summary(again.stdout, run_id) == {"moved back": 1, "already back": 11, "withdrawn": 0}
    assert top_files(folder) == files and tidied(folder) == []
