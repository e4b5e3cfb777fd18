"""A flow run canceled from another process while `flowdesk start` executes
it: the executing command stops and exits 1 (a script must not take a
canceled run for a success), and its printed hint runs as printed.
Real processes, a real SQLite file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk, spawn
from tests.interrupted_flows import FLOWS_ENV
from tests.polling import until


def test_a_run_canceled_elsewhere_ends_its_command_with_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    env = {"FLOWDESK_FLOWS": FLOWS_ENV}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started, gate = tmp_path / "started", tmp_path / "gate"
    state = json.dumps({"started": str(started), "gate": str(gate)})
    running = spawn("--db", str(db), "start", "gated", "--input", state, env=env)
    try:
        assert running.stdout is not None
        run_id = running.stdout.readline().strip()
        until(started.exists, "the run's step to start")
        canceled = flowdesk(db, "cancel", run_id, env=env)
        assert canceled.returncode == 0, canceled.stderr
        # the step the cancel cut off reads as canceled, not as still running
        steps = flowdesk(db, "show", run_id, env=env).stdout.split("steps:", 1)[1]
        hold = next(line.split() for line in steps.splitlines() if line.split()[:1] == ["hold"])
        assert hold[1] == "canceled", steps
        gate.write_text("")  # the step returns; the executing process finds the cancel
        out, err = running.communicate(timeout=120)
    finally:
        running.kill()
        running.wait()
    assert running.returncode == 1, (out, err)
    assert f"run {run_id} canceled" in out
    hint = err.split("what it did: ", 1)[1].splitlines()[0]
    assert hint == f"flowdesk --db {db} show {run_id}"
    shown = as_printed(hint, {**os.environ, **env})
    assert shown.returncode == 0, shown.stderr
    assert "canceled" in shown.stdout
    store = open_store(db)
    try:
        assert store.get_run(run_id).status == "canceled"
        assert "finish" not in store.latest(run_id).steps  # nothing after the cancel ran
    finally:
        store.close()
