"""The real ``flowdesk`` command in a real terminal: tmux sessions, what
they show, keys sent as a person types them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).with_name("flowdesk")


def need_tmux() -> None:
    """Skip without tmux or the console script; under ``CI=true`` fail
    instead (``.ci/run`` installs tmux)."""
    missing = [
        what
        for what, ok in (("tmux", shutil.which("tmux")), ("flowdesk script", BIN.exists()))
        if not ok
    ]
    if missing:
        message = f"{' and '.join(missing)} not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(session: str, *texts: str, timeout: float = 30) -> str:
    """The screen once every one of ``texts`` shows on it at once
    (``AssertionError`` with the screen after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session)
        if all(text in shown for text in texts):
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{texts!r} never all appeared; screen:\n{screen(session)}")


def keys(session: str, *names: str) -> None:
    """Send tmux key names (``Enter``, ``C-s``, ``F1``) or single characters."""
    tmux("send-keys", "-t", session, *names)


def home_vars(home: Path) -> dict[str, str]:
    """The environment variables of a person whose home is ``home``."""
    return {
        "HOME": str(home),
        "XDG_DATA_HOME": f"{home}/data",
        "XDG_CONFIG_HOME": f"{home}/config",
        "TERM": "xterm-256color",
    }


def home_env(home: Path) -> str:
    """:func:`home_vars` in ``env`` syntax (for the tmux command line)."""
    return " ".join(f"{k}={v}" for k, v in home_vars(home).items())


#: what a tmux client says when the server it reached was exiting: a server
#: exits once its last session is gone, and a command sent meanwhile is lost
SERVER_GONE = ("server exited unexpectedly", "lost server", "no server running")
#: launches lost that way tried again before the test fails
LAUNCH_TRIES = 20
#: the variables that decide which Flowdesk the app imports and where its
#: bytecode goes: a session's environment is the tmux server's, copied from
#: whichever process started the server (another test run, another checkout)
PYTHON_VARS = ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")


def python_env() -> str:
    """This process's :data:`PYTHON_VARS`, as ``env`` arguments (``-u`` for
    those it does not set), so the app runs the code under test."""
    unset = [f"-u {k}" for k in PYTHON_VARS if k not in os.environ]
    given = [f"{k}={shlex.quote(os.environ[k])}" for k in PYTHON_VARS if k in os.environ]
    return " ".join(unset + given)


def launch(
    session: str,
    env: str,
    done: Path,
    size: tuple[int, int] = (120, 40),
    program: str | None = None,
) -> None:
    """Start the app (or ``program``) in a detached tmux session of ``size``
    (columns, rows); its exit code lands in ``done``.

    A tmux server exits once its last session is killed, and a
    ``new-session`` that reaches it meanwhile is lost with it ("server
    exited unexpectedly"): a test that kills its session and launches at
    once (a relaunch after ``kill -9``), or any test launching right after
    another's ``kill-session``, then watched an empty screen until its wait
    ran out. Such a launch is tried again (a new server starts), up to
    :data:`LAUNCH_TRIES` times; any other refusal fails the test with tmux's
    own words."""
    command = f"env {python_env()} {env} {program or BIN}; echo $? > {done}"
    said = ""
    for _ in range(LAUNCH_TRIES):
        made = subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
             command],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if made.returncode == 0:
            return
        said = made.stderr.strip()
        if not any(gone in said for gone in SERVER_GONE):
            break
        time.sleep(0.1)
    raise AssertionError(f"tmux did not start session {session}: {said}")


def exit_code(done: Path, timeout: float = 20) -> str:
    """The app's exit code once it has quit (the shell's ``echo $? > done``
    creates the file before it writes the code: an empty file is not yet
    the code, so it is read again until it holds one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done.exists() and (code := done.read_text().strip()):
            return code
        time.sleep(0.2)
    assert done.exists(), "the app did not quit"
    return done.read_text().strip()
