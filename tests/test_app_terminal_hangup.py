"""The app on a real terminal: it quits when the terminal goes away without
a SIGHUP to it, and Ctrl-Z stops it.

Found by hand: ``make run`` inside ``script``; the ``script`` was killed.
The kernel sends SIGHUP to the session's leader only (``make``), so the app
got no signal: every read of its hung-up terminal returned end-of-file,
Textual's input thread looped on it at ~60% of a core, and the app went on
for ever, unseen, its engine holding its runs. Here the app runs on a real
pseudo-terminal in a session of its own (the terminal is not its
controlling one: closing it sends no signal), and the test closes the
terminal's other end as a crashing terminal emulator does.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time
from pathlib import Path

from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk


def test_the_app_quits_when_its_terminal_is_hung_up(tmp_path: Path):
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
    )
    os.close(slave)
    log = Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"
    deadline = time.monotonic() + 60
    try:
        # the app is up once its engine runs (logged), drawing on the terminal
        while "database opened" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the app did not open the database in 60 s"
            if select.select([master], [], [], 0.1)[0]:
                os.read(master, 65536)
        assert proc.poll() is None
    finally:
        os.close(master)  # the terminal emulator is gone
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "the terminal went away (hung up): quitting as on q" in log.read_text()


def _state(pid: int) -> str:
    """The process's state letter from ``/proc`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_ctrl_z_stops_the_app_and_sigcont_brings_it_back(tmp_path: Path):
    """Found by a tryout: Ctrl-Z in the app did nothing (the README says it
    stops it, as it stops a shell command)."""
    import signal

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
    )
    os.close(slave)
    log = Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"

    def drain_until(check, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 60
        while not check():
            assert time.monotonic() < deadline, what
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)
                except OSError:  # EIO: the app closed the terminal (it quit)
                    time.sleep(0.05)

    try:
        drain_until(lambda: "database opened" in (log.read_text() if log.exists() else ""), "up")
        os.write(master, b"\x1a")  # Ctrl-Z
        drain_until(lambda: _state(proc.pid) == "T", "stopped by Ctrl-Z")
        os.kill(proc.pid, signal.SIGCONT)  # `fg`
        drain_until(lambda: _state(proc.pid) != "T", "going on after SIGCONT")
        os.write(master, b"q")
        drain_until(lambda: proc.poll() is not None, "quit with q")
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
