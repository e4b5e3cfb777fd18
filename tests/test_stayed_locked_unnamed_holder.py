"""What the README says of "stayed locked": a holder outside Flowdesk's
write gate (here a Python ``sqlite3`` shell in a process of its own,
holding the file's write lock in an open transaction) is not named; the
message says only that the file stayed locked (a real SQLite file, real
processes)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.cli_support import flowdesk
from tests.lock_holder import write_lock_held
from tests.timer_flows import FLOWS_ENV

#: the tests' environment: the approver flow, a short busy timeout (seconds)
ENV = {"FLOWDESK_FLOWS": FLOWS_ENV, "FLOWDESK_BUSY_TIMEOUT_S": "0.5"}


def waiting_approver(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """A database holding an ``approver`` run waiting for its answer:
    ``(db, env, run_id)``."""
    db = tmp_path / "s.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    started = flowdesk(db, "start", "approver", "--input", json.dumps({"order": "z"}), env=ENV)
    assert started.returncode == 0, started.stderr
    return db, ENV, started.stdout.split()[0]


def test_a_sqlite3_shell_holding_the_lock_is_not_named(tmp_path: Path) -> None:
    db, env, run_id = waiting_approver(tmp_path)
    with write_lock_held(db) as holder:
        out = flowdesk(db, "cancel", run_id, env=env)
    assert out.returncode == 1, out.stderr
    assert "stayed locked by another process past the busy timeout" in out.stderr, out.stderr
    assert "held by" not in out.stderr and str(holder.pid) not in out.stderr, out.stderr
    assert flowdesk(db, "cancel", run_id, env=env).returncode == 0  # free again


def test_a_run_whose_save_stayed_locked_is_resumed_as_printed_not_started_again(
    tmp_path: Path,
) -> None:
    """The file stays locked while ``start``'s step ends: its save fails, and
    the run (stored, interrupted) is to be resumed, not started again. The
    error said only "Retry", and a user who ran ``start`` again got a second
    run (a tryout's). The printed ``resume`` finishes the one run."""
    from tests.cli_support import as_printed, spawn
    from tests.gated_flows import FLOWS_ENV as GATED

    db = tmp_path / "s.db"
    env = {"FLOWDESK_FLOWS": GATED, "FLOWDESK_BUSY_TIMEOUT_S": "0.5"}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    live = spawn(
        "--db", str(db), "start", "gated", "--input", json.dumps({"dir": str(tmp_path)}), env=env
    )
    assert live.stdout is not None
    run_id = live.stdout.readline().strip()
    while not (tmp_path / "gate.runs").exists():  # its step is under way
        assert live.poll() is None, live.communicate(timeout=60)
        time.sleep(0.02)
    with write_lock_held(db):
        (tmp_path / "go").touch()  # the step ends; its save meets the lock
        _, err = live.communicate(timeout=120)
    assert live.returncode == 1, err
    assert "stayed locked by another process past the busy timeout" in err, err
    (hint,) = [x.removeprefix("resume with: ") for x in err.splitlines() if x.startswith("resume")]
    assert hint == f"flowdesk --db {db} resume {run_id}"
    # the step's result was not saved: said, not only "nothing was written"
    assert f"run {run_id} stands at its last saved checkpoint: the step it was in runs " in err
    resumed = as_printed(hint, {**os.environ, **env})
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} completed" in resumed.stdout
    listed = json.loads(flowdesk(db, "runs", "-o", "json", env=env).stdout)
    assert [r["run_id"] for r in listed] == [run_id]  # one run, not a second one


def test_an_answer_that_met_the_lock_prints_the_answer_again_not_a_resume(
    tmp_path: Path,
) -> None:
    """``answer`` while another process holds the file's write lock: nothing
    was answered, so the hint is the same ``answer`` (a tryout: it printed
    ``resume RUN``, which found the run still waiting and answered nothing).
    Run as printed once the lock is gone, it answers the question."""
    from tests.cli_support import as_printed

    db, env, run_id = waiting_approver(tmp_path)
    with write_lock_held(db):
        out = flowdesk(db, "answer", run_id, "yes", env=env)
    assert out.returncode == 1, out.stderr
    assert "stayed locked by another process past the busy timeout" in out.stderr, out.stderr
    assert "resume with" not in out.stderr, out.stderr
    (hint,) = [
        x.removeprefix("nothing was answered; answer again with: ")
        for x in out.stderr.splitlines()
        if x.startswith("nothing was answered")
    ]
    assert hint.startswith(f"flowdesk --db {db} answer {run_id} yes --wait-id "), hint
    waiting = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)
    assert waiting["status"] == "waiting"  # the answer was not recorded
    answered = as_printed(hint, {**os.environ, **env})
    assert answered.returncode == 0, answered.stderr
    done = json.loads(flowdesk(db, "show", run_id, "-o", "json", env=env).stdout)
    assert done["status"] == "completed", done
