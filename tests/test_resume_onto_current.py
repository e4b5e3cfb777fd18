"""``flowdesk resume RUN --onto-current``: a run whose flow's code changed
since it started continues as a new run of the current version from the
step it stopped at, from the command line (the app's launch report does the
same). The hint each refusal prints is run exactly as printed; the run's
completed steps do not run again; a run a live process still holds with
the old code is left to it; a run whose step is gone is refused with
nothing changed.

The user's flow is a module of its own, rewritten as its author edits it
(the helpers of ``tests/test_changed_flow_stuck.py``; its steps wait while
``<log>.hold`` exists).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import cli_forkserver
from tests.cli_support import as_printed, flowdesk
from tests.polling import until
from tests.test_changed_flow_stuck import PAUSE_S, commands, start, status, user_db, write_flow


def onto_hint_of(db: Path, run_id: str, env: dict[str, str]) -> str:
    """The ``--onto-current`` command a refused ``resume`` prints."""
    refused = flowdesk(db, "resume", run_id, env=env)
    assert refused.returncode == 1, refused.stderr
    (hint,) = [c for c in commands(refused.stderr) if c.endswith("--onto-current")]
    return hint


def test_the_printed_onto_current_continues_the_run_on_the_new_version(tmp_path: Path) -> None:
    code, env, db = user_db(tmp_path)
    log = tmp_path / "moved.log"
    old = start(db, log, env)  # ran `prep`, sleeps in `pause`
    write_flow(code, "prepare")  # the author renames the first step
    time.sleep(PAUSE_S + 0.5)  # its timer falls due (not a timing assertion)

    hint = onto_hint_of(db, old, env)
    assert hint == f"flowdesk --db {db} resume {old} --onto-current"
    out = as_printed(hint, env)
    assert out.returncode == 0, out.stderr
    said, new, *rest = out.stdout.splitlines()
    assert said.startswith(f"run {old} canceled: superseded by run {new} on version 1+")
    assert f"run {new} completed" in rest, out.stdout
    # `prep` ran once, before the change; the new run went on from `pause`
    assert log.read_text().splitlines() == ["prep", "finish"]
    assert status(db, old, env) == "canceled"
    assert status(db, new, env) == "completed"
    shown = json.loads(flowdesk(db, "show", old, "-o", "json", env=env).stdout)
    assert f"superseded by run {new}" in (shown["error"] or "")

    # done once: the old run has ended, and the new one runs the current version
    again = flowdesk(db, "resume", old, "--onto-current", env=env)
    assert again.returncode == 2 and f"run {old} is canceled" in again.stderr, again.stderr
    (what,) = commands(again.stderr)
    assert what == f"flowdesk --db {db} show {old}"
    shown_out = as_printed(what, env)
    assert shown_out.returncode == 0 and f"superseded by run {new}" in shown_out.stdout
    current = flowdesk(db, "resume", new, "--onto-current", env=env)
    assert current.returncode == 2, current.stderr
    assert "completed" in current.stderr
    waits_run = start(db, tmp_path / "current.log", env)  # a live run of the current version
    live = flowdesk(db, "resume", waits_run, "--onto-current", env=env)
    assert live.returncode == 2 and "nothing to move onto" in live.stderr, live.stderr
    (go_on,) = commands(live.stderr)
    assert go_on == f"flowdesk --db {db} resume {waits_run}"
    assert as_printed(go_on, env).returncode == 0  # waiting or completed: exit 0
    assert log.read_text().splitlines() == ["prep", "finish"]
    assert (tmp_path / "current.log").read_text().splitlines()[0] == "prepare"


def test_a_run_whose_step_is_gone_is_refused_and_the_printed_cancel_ends_it(
    tmp_path: Path,
) -> None:
    code, env, db = user_db(tmp_path)
    log = tmp_path / "gone.log"
    run_id = start(db, log, env)
    # the author drops the pause the run sleeps in
    flow_file = code / "remind_flows.py"
    flow_file.write_text(flow_file.read_text().replace(f'    .sleep("pause", {PAUSE_S})\n', ""))
    for cached in (code / "__pycache__").glob("remind_flows.*"):
        cached.unlink()

    out = as_printed(onto_hint_of(db, run_id, env), env)
    assert out.returncode == 1, out.stderr
    assert f"run {run_id} cannot continue on remind version 1+" in out.stderr
    assert "Nothing changed" in out.stderr
    assert status(db, run_id, env) == "waiting"  # nothing changed, no new run
    runs = json.loads(flowdesk(db, "runs", "-o", "json", env=env).stdout)
    assert [r["run_id"] for r in runs] == [run_id]
    (cancel,) = commands(out.stderr)
    assert cancel == f"flowdesk --db {db} cancel {run_id}"
    ended = as_printed(cancel, env)
    assert ended.returncode == 0 and f"run {run_id} canceled" in ended.stdout, ended.stderr
    assert log.read_text().splitlines() == ["prep"]


#: an engine process with the flow's code of the moment, resuming one run
HOLDER = """
import sys
from pathlib import Path

from desktop_app.flow import Engine
from desktop_app.store.sqlite import open_store

import remind_flows

engine = Engine(open_store(Path(sys.argv[1])), flows=[remind_flows.remind])
print("resuming", flush=True)
engine.resume(sys.argv[2])
"""


def test_a_run_a_live_process_holds_is_left_to_it_until_that_process_dies(
    tmp_path: Path,
) -> None:
    """A process with the old code holds the run (inside its last step):
    the move is refused and nothing changes; once that process is killed
    (``kill -9``) the printed move takes the run over, and each step's
    effect happened once."""
    code, env, db = user_db(tmp_path)
    log = tmp_path / "held.log"
    run_id = start(db, log, env)  # ran `prep`, sleeps in `pause`
    time.sleep(PAUSE_S + 0.5)  # its timer falls due (not a timing assertion)
    hold = Path(f"{log}.hold")
    hold.touch()
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = cli_forkserver.popen(
        [sys.executable, str(script), str(db), run_id],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    hint = f"flowdesk --db {db} resume {run_id} --onto-current"
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "resuming"

        def held() -> bool:
            out = flowdesk(db, "show", run_id, "-o", "json", env=env)
            return json.loads(out.stdout)["status"] == "running"

        until(held, "the old-code process runs `finish`")
        write_flow(code, "prepare")  # the author renames the first step meanwhile
        refused = as_printed(hint, env)
        assert refused.returncode == 1, refused.stderr
        assert f"run {run_id} is held by a live process" in refused.stderr
        assert holder.poll() is None  # still in its step
        assert status(db, run_id, env) == "running"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    hold.unlink()
    assert onto_hint_of(db, run_id, env) == hint
    out = as_printed(hint, env)
    assert out.returncode == 0, out.stderr
    new = out.stdout.splitlines()[1]
    assert f"run {new} completed" in out.stdout
    assert log.read_text().splitlines() == ["prep", "finish"]
