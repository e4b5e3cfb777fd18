"""Running the real `flowdesk` command in a subprocess, for CLI tests."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def flowdesk(
    db: Path | str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``flowdesk --db DB ARGS...`` run from this checkout (``python -m
    desktop_app.cli``), stdout and stderr captured as text.

    Args:
        env: variables set over this process's environment.
        timeout: seconds before the subprocess is killed (the test then fails).
    """
    return subprocess.run(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def default_sigint() -> None:
    """``preexec_fn`` for a child a test sends Ctrl-C (SIGINT): a shell that
    starts the suite in the background hands its children SIGINT ignored,
    and Python then never raises KeyboardInterrupt; restore the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def as_printed(
    command: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a suggested command exactly as printed (``flowdesk`` is this checkout)."""
    argv = shlex.split(command)
    assert argv[0] == "flowdesk", command
    return subprocess.run(
        [sys.executable, "-m", "desktop_app.cli", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )
