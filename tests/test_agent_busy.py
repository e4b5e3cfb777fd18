"""``flowdesk agent`` when another process holds the SQLite file's write
lock past the agent's busy timeout (a CLI run stopped with SIGSTOP in its
transaction): the agent logs the "stayed locked" error, naming the holder,
and tries again at its next poll instead of exiting; once the holder lets
go it completes its run. And Ctrl-Z on a foreground command goes through
the gate's SIGTSTP handler. Real processes on a real SQLite file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests import cli_forkserver, sigterm_flows
from tests.cli_support import REPO, flowdesk
from tests.test_agent_sigterm import BOUND_S, lines, status, submit, wait_for
from tests.test_write_gate import state

WORKER = Path(__file__).resolve().parent / "write_gate_worker.py"


def test_the_agent_outlives_a_busy_timeout_names_the_holder_and_completes_its_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    err = tmp_path / "agent.err"
    env = {
        **os.environ,
        "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV,
        "FLOWDESK_BUSY_TIMEOUT_S": "0.3",
    }
    with err.open("w") as out:
        agent = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "agent", "--poll", "0.2"],
            stdout=subprocess.DEVNULL,
            stderr=out,
            cwd=REPO,
            env=env,
        )
    holder = None
    try:
        wait_for(lambda: "flowdesk agent:" in err.read_text(), "the agent never started")
        run_id = submit(str(db), sink, gate)
        # the agent waits in step s1 (for the file `gate`), outside a transaction
        wait_for(lambda: ["begin", "s1", "1", str(agent.pid)] in lines(sink), "s1 never began")
        holder = cli_forkserver.popen(
            [sys.executable, str(WORKER), "hold", str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        holder.send_signal(signal.SIGSTOP)
        gate.touch()  # s1 ends: saving it, and every poll after, meets the lock
        log = Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"

        def locked_said() -> int:
            text = log.read_text() if log.exists() else ""
            return text.count(f"held by pid {holder.pid} (")

        # several busy timeouts in a row, and the agent still serves
        wait_for(lambda: locked_said() >= 3, "the agent never logged the locked error")
        assert agent.poll() is None, err.read_text()
        assert "stopped (SIGSTOP or Ctrl-Z): resume it with `kill -CONT" in log.read_text()
        holder.kill()  # its transaction rolls back; the lock is free
        holder.wait(timeout=BOUND_S)
        wait_for(lambda: status(str(db), run_id) == "completed", "the run never completed")
        assert agent.poll() is None, err.read_text()
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=BOUND_S) == 0, err.read_text()
    finally:
        for p in (agent, holder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    effects = [w[1] for w in lines(sink) if w[0] == "effect"]
    assert set(effects) == set(sigterm_flows.STEPS), effects
    assert Counter(effects)["s0"] == 1


def caught_signals(pid: int) -> int:
    """The mask of signals ``pid`` handles (``SigCgt`` in ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigCgt line")


def test_ctrl_z_stops_a_foreground_command_through_the_gates_handler_and_fg_goes_on(
    tmp_path: Path,
) -> None:
    """``flowdesk start`` (a foreground command) handles SIGTSTP (the gate's
    give-back), stops for real on it, and after SIGCONT completes its run."""
    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    env = {**os.environ, "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV}
    given = json.dumps({"sink": str(sink), "gate": str(gate)})
    cmd = [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "start", "effects"]
    proc = subprocess.Popen(
        [*cmd, "--input", given],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
        process_group=0,  # a job of its own, as a shell makes it
    )
    try:
        wait_for(lambda: ["begin", "s1", "1", str(proc.pid)] in lines(sink), "s1 never began")
        assert caught_signals(proc.pid) & (1 << (signal.SIGTSTP - 1))
        proc.send_signal(signal.SIGTSTP)
        wait_for(lambda: state(proc.pid) in "Tt", "Ctrl-Z never stopped it")
        proc.send_signal(signal.SIGCONT)
        gate.touch()
        _, err = proc.communicate(timeout=BOUND_S)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    effects = [w[1] for w in lines(sink) if w[0] == "effect"]
    assert Counter(effects) == dict.fromkeys(sigterm_flows.STEPS, 1), effects
