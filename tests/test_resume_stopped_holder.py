"""A new user's report: a run whose process was stopped with Ctrl-Z showed
`running`, and `resume` said only that a live process executes it and to
wait, for as long as the process stays stopped. The refusal says the
process is stopped and how to let it go on; that command (``kill -CONT
PID``), run as printed, does, and the run completes with each step's side
effect once. Real SQLite file; the holder is a real `flowdesk resume`
process stopped with SIGSTOP."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.process_state import process_state
from desktop_app.store.write_gate import LOCK_SUFFIX, describe_holder
from tests import cli_forkserver, sigterm_flows
from tests.cli_support import REPO, flowdesk
from tests.test_agent_sigterm import lines, status, submit, wait_for

ENV = {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}


def stopped_mid_step(db_path: Path, sink: Path, gate: Path) -> tuple[str, subprocess.Popen[str]]:
    """A run of ``effects`` whose executing `flowdesk resume` process is
    stopped (SIGSTOP) in step ``s1``, before its side effect (it waits
    for ``gate``): ``(run_id, that process)``.

    SIGSTOP cannot be caught: one that lands while the process holds the
    database's write lock (a commit of another of its threads, or the few
    milliseconds the write gate keeps its turn after one) keeps it held,
    and every other writer gets "stayed locked ... held by pid P,
    stopped" (the write gate's own tests). These tests are of a run held
    by a stopped process, not of a stopped writer: the process is
    continued and stopped again until it holds no write lock."""
    run_id = submit(str(db_path), sink, gate)
    holder = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db_path), "resume", run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
        start_new_session=True,  # a stopped child outside the test's process group
    )
    wait_for(lambda: ["begin", "s1", "1", str(holder.pid)] in lines(sink), "s1 never began")
    lock = Path(f"{db_path}{LOCK_SUFFIX}")
    for _ in range(100):
        holder.send_signal(signal.SIGSTOP)
        wait_for(lambda: process_state(holder.pid) in (b"T", b"t"), "the holder did not stop")
        if f"held by pid {holder.pid} " not in (describe_holder(lock) or ""):
            return run_id, holder
        holder.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("the holder held the write lock at each of 100 stops")


def continue_as_printed(said: str, gate: Path, holder: subprocess.Popen[str]) -> str:
    """Open the stopped holder's step (``gate``) and let it go on with the
    ``kill -CONT PID`` that ``said`` prints, run as printed; its stderr
    once it has exited."""
    command = re.search(r"`(kill -CONT \d+)`", said)
    assert command is not None, said
    gate.touch()
    subprocess.run(shlex.split(command.group(1)), check=True)  # as printed
    _, err = holder.communicate(timeout=60)
    return err


@pytest.mark.scenario("S112")
def test_resume_of_a_run_held_by_a_stopped_process_says_how_to_continue_it(
    db_path: Path, tmp_path: Path
) -> None:
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    run_id, holder = stopped_mid_step(db_path, sink, gate)
    try:
        refused = flowdesk(db_path, "resume", run_id, env=ENV)
        assert refused.returncode == 1, refused.stdout
        said = (
            f"Its process {holder.pid} runs nothing now: it is stopped (SIGSTOP or Ctrl-Z): "
            f"resume it with `kill -CONT {holder.pid}` (or `fg` in its shell)"
        )
        assert said in refused.stderr, refused.stderr
        err = continue_as_printed(refused.stderr, gate, holder)
        assert holder.returncode == 0, err
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert status(str(db_path), run_id) == "completed"
    effects = Counter(w[1] for w in lines(sink) if w[0] == "effect")
    assert effects == Counter(sigterm_flows.STEPS), effects


@pytest.mark.scenario("S112")
def test_cancel_of_a_run_held_by_a_stopped_process_says_its_step_in_flight_ends(
    db_path: Path, tmp_path: Path
) -> None:
    """The third tryout's report: `cancel` of a run whose process was
    stopped mid-step said only "run R canceled"; once continued, the
    process finished the step and its side effect was made. The cancel says
    the step in flight runs to its end once the process goes on, and
    nothing after it runs; the test continues it as printed and counts."""
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    run_id, holder = stopped_mid_step(db_path, sink, gate)
    try:
        canceled = flowdesk(db_path, "cancel", run_id, env=ENV)
        assert canceled.returncode == 0, canceled.stderr
        assert canceled.stdout.splitlines()[0] == f"run {run_id} canceled", canceled.stdout
        said = canceled.stdout.splitlines()[1]
        assert (
            said.startswith("the process executing it (")
            and (
                "stops before its next step; its step s1 is in flight: it runs to its end (what it "
                "does stays done) and nothing after it runs; that process is stopped (SIGSTOP or "
                f"Ctrl-Z): resume it with `kill -CONT {holder.pid}` (or `fg` in its shell), and "
                "does so once it goes on"
            )
            in said
        ), said
        continue_as_printed(said, gate, holder)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert status(str(db_path), run_id) == "canceled"
    effects = Counter(w[1] for w in lines(sink) if w[0] == "effect")
    assert effects == Counter(["s0", "s1"]), effects  # s1 ran to its end; nothing after it


@pytest.mark.scenario("S112")
def test_show_of_a_run_held_by_a_stopped_process_says_it_moves_not_and_how_to_continue(
    db_path: Path, tmp_path: Path
) -> None:
    """The last tryout's report: `show` of a run whose process was stopped
    said `status running` and nothing else, as for a run moving on. It says
    that process runs nothing now and how to let it go on (text and JSON);
    the printed `kill -CONT`, run as printed, lets the run complete, each
    step's side effect once, and `show` then says nothing of a holder. The
    `runs` table says it too (it said `running` only)."""
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    run_id, holder = stopped_mid_step(db_path, sink, gate)
    try:
        shown = flowdesk(db_path, "show", run_id, env=ENV)
        assert shown.returncode == 0, shown.stderr
        said = (
            f"running: its process {holder.pid} runs nothing now: it is stopped (SIGSTOP or "
            f"Ctrl-Z): resume it with `kill -CONT {holder.pid}` (or `fg` in its shell)"
        )
        assert said in shown.stdout.splitlines(), shown.stdout
        as_json = flowdesk(db_path, "show", run_id, "--output", "json", env=ENV)
        assert json.loads(as_json.stdout)["holder_stopped"] == holder.pid, as_json.stdout
        # the runs table (a tryout: it said `running` only) and its JSON
        [row] = [x for x in flowdesk(db_path, "runs", env=ENV).stdout.splitlines() if run_id in x]
        assert row.endswith(f"  · its process {holder.pid} is stopped (see show)"), row
        [listed] = json.loads(flowdesk(db_path, "runs", "-o", "json", env=ENV).stdout)
        assert listed["holder_stopped"] == holder.pid
        err = continue_as_printed(shown.stdout, gate, holder)
        assert holder.returncode == 0, err
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    after = flowdesk(db_path, "show", run_id, env=ENV)
    assert "status completed" in after.stdout and "runs nothing now" not in after.stdout
    assert (
        json.loads(flowdesk(db_path, "show", run_id, "-o", "json").stdout)["holder_stopped"] is None
    )
    effects = Counter(w[1] for w in lines(sink) if w[0] == "effect")
    assert effects == Counter(sigterm_flows.STEPS), effects


@pytest.mark.scenario("S112")
async def test_the_app_says_a_run_is_held_by_a_stopped_process(
    db_path: Path, tmp_path: Path
) -> None:
    """The app's side panel and the run's header said `running` of a run
    whose process was stopped: they say, as `show` does, that it runs
    nothing now and how to let it go on (the app on the same real file)."""
    from textual.widgets import Static

    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.app_support import settle, wait_until
    from tests.test_app_detail import open_detail

    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    run_id, holder = stopped_mid_step(db_path, sink, gate)
    said = (
        f"its process {holder.pid} runs nothing now: it is stopped (SIGSTOP or Ctrl-Z): "
        f"resume it with `kill -CONT {holder.pid}` (or `fg` in its shell)"
    )
    try:
        app = FlowdeskApp(load_settings(db_path=db_path))
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(pilot)
            screen = app.runs_screen
            await wait_until(pilot, lambda: screen.table.selected_run_id() == run_id)
            await wait_until(pilot, lambda: said in " ".join(screen.summary.text.split()))
            detail = await open_detail(pilot, run_id)
            header = str(detail.query_one("#run-header", Static).render())
            assert f"running — {said}" in " ".join(header.split()), header
    finally:
        gate.touch()
        holder.send_signal(signal.SIGCONT)
        holder.communicate(timeout=60)
    assert status(str(db_path), run_id) == "completed"
