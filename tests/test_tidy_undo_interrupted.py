"""An undo killed mid-way: `show` says how many files are back, that the undo
was interrupted, and the command that finishes it (run here as printed).

A tryout found `show` after a `kill -9` of `flowdesk undo` reporting every
file `moved` (526 of 600 were back): the undo recorded the files it put back
only once it had moved them all. It now records them in batches as it goes,
and records in `tidy_undos` when it began and when it finished. Real files,
real SQLite, a real `flowdesk undo` process paused mid-way and killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

from desktop_app.flows.tidy_undo import BACK_BATCH
from tests.cli_support import as_printed, flowdesk
from tests.test_tidy_undo_queued import worker
from tests.tidy_folders import fill, tidied, top_files


def test_show_after_a_kill_mid_undo_says_how_many_are_back_and_how_to_finish(tmp_path):
    db, folder = tmp_path / "t.db", tmp_path / "dl"
    files = fill(folder, 200)
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder))
    run_id = started.stdout.splitlines()[0]
    assert flowdesk(db, "answer", run_id, "yes").returncode == 0
    assert top_files(folder) == {} and len(tidied(folder)) == 200

    paused = tmp_path / "paused"
    undo = worker("--db", str(db), "undo", run_id, undo_pause_after="60", paused=paused)
    try:
        while not paused.exists():  # 60 files moved back, the 61st not yet
            assert undo.poll() is None, undo.communicate()
            subprocess.run(["sleep", "0.05"], check=True)
        assert len(top_files(folder)) == 60
        # its process is alive: the undo is under way, not interrupted
        live = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)["undo"]
        assert live["state"] == "under_way" and live["finished_at"] is None, live
        shown = flowdesk(db, "show", run_id).stdout
        assert "being undone since" in shown and "interrupted" not in shown, shown
    finally:
        os.kill(undo.pid, signal.SIGKILL)
        undo.communicate()
    assert len(top_files(folder)) == 60 and len(tidied(folder)) == 140

    as_json = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    state = as_json["undo"]
    assert state["state"] == "interrupted" and state["finished_at"] is None, state
    back, still = state["back"], state["still_moved"]
    # recorded in batches: every file recorded back is back, and at most the
    # last batch moved back is still recorded moved
    assert back + still == 200 and 60 - BACK_BATCH < back <= 60, state
    outcomes = [f["outcome"] for f in as_json["files"]]
    assert outcomes.count("back") == back and outcomes.count("moved") == still
    for f in as_json["files"]:
        if f["outcome"] == "back":  # what show says is back is back
            assert (folder / f["name"]).read_text() == files[f["name"]]

    text = flowdesk(db, "show", run_id).stdout
    assert f"200 files: {still} moved, {back} moved back by undo" in text, text
    (line,) = [x for x in text.splitlines() if x.startswith("undo interrupted")]
    assert f"its process stopped with {back} of 200 files back and {still} still moved" in line
    (command,) = re.findall(r"`([^`]+)` finishes it", line)
    finished = as_printed(command, env=dict(os.environ))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"tidy run {run_id}: 140 moved back, 60 already back" in finished.stdout
    assert top_files(folder) == files and tidied(folder) == []

    done = json.loads(flowdesk(db, "show", run_id, "-o", "json").stdout)
    assert done["undo"]["state"] == "finished" and done["undo"]["finished_at"] is not None
    assert {f["outcome"] for f in done["files"]} == {"back"}
    text = flowdesk(db, "show", run_id).stdout
    assert "200 files: 200 moved back by undo" in text
    assert "200 files moved back" in text and "interrupted" not in text, text
