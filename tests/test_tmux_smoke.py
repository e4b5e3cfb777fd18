"""Smoke test of the real `flowdesk` command in a real terminal (tmux):
launch on a fresh HOME, start a digest from the form, see it complete, quit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
BIN = Path(sys.executable).with_name("flowdesk")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(session: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session)
        if text in shown:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared; screen:\n{screen(session)}")


@pytest.mark.skipif(not BIN.exists(), reason="the flowdesk console script is not installed")
def test_real_binary_in_tmux(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Note\n\nA first sentence. A second one.\n")
    session = f"flowdesk-smoke-{os.getpid()}"
    env = f"HOME={home} XDG_DATA_HOME={home}/data XDG_CONFIG_HOME={home}/config TERM=xterm-256color"
    done = tmp_path / "exit-code"
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "120",
        "-y",
        "40",
        f"env {env} {BIN}; echo $? > {done}",
    )
    try:
        wait_for(session, "New digest")
        tmux("send-keys", "-t", session, "n")
        wait_for(session, "older")  # the form asks for a folder
        tmux("send-keys", "-t", session, "-l", str(docs))  # the output folder defaults
        tmux("send-keys", "-t", session, "Enter")
        wait_for(session, "completed", timeout=60)
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
    finally:
        tmux("kill-session", "-t", session)
    assert (tmp_path / "docs-digest" / "digest.md").read_text().startswith("# Digest of docs")
    db = home / "data" / "flowdesk" / "flowdesk.db"
    assert db.exists() and oct(db.stat().st_mode & 0o777) == "0o600"
