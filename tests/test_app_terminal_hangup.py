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
import signal
import struct
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk


def _app_on_a_pty(tmp_path: Path) -> tuple[Any, int, Path]:
    """The app (a process of its own, in a session of its own: the pty is
    not its controlling terminal) on a real 100x30 pseudo-terminal: its
    process, the terminal's master side, and its log file."""
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
    return proc, master, Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"


def _drain_until(master: int, check: Callable[[], bool], what: str) -> None:
    """Read (and drop) what the app draws until ``check()`` holds; fails
    after 60 s."""
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, what
        if select.select([master], [], [], 0.1)[0]:
            try:
                os.read(master, 65536)
            except OSError:  # EIO: the app closed the terminal (it quit)
                time.sleep(0.05)


def _up(log: Path) -> Callable[[], bool]:
    """Whether the app's engine runs (logged once it opened the database)."""
    return lambda: "database opened" in (log.read_text() if log.exists() else "")


def test_the_app_quits_when_its_terminal_is_hung_up(tmp_path: Path):
    proc, master, log = _app_on_a_pty(tmp_path)
    try:
        _drain_until(master, _up(log), "the app did not open the database in 60 s")
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
    proc, master, log = _app_on_a_pty(tmp_path)
    try:
        _drain_until(master, _up(log), "up")
        os.write(master, b"\x1a")  # Ctrl-Z
        _drain_until(master, lambda: _state(proc.pid) == "T", "stopped by Ctrl-Z")
        os.kill(proc.pid, signal.SIGCONT)  # `fg`
        _drain_until(master, lambda: _state(proc.pid) != "T", "going on after SIGCONT")
        os.write(master, b"q")
        _drain_until(master, lambda: proc.poll() is not None, "quit with q")
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
