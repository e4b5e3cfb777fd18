"""Smoke test of the real `flowdesk` command in a real terminal (tmux):
launch on a fresh HOME, start a digest from the form, see it complete, quit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from tests.tmux_support import exit_code, home_env, launch, need_tmux, screen, tmux, wait_for

pytestmark = pytest.mark.usefixtures("tmux_available")


@pytest.fixture
def tmux_available() -> None:
    need_tmux()


def test_real_binary_in_tmux(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Note\n\nA first sentence. A second one.\n")
    session = f"flowdesk-smoke-{os.getpid()}"
    done = tmp_path / "exit-code"
    launch(session, home_env(home), done)
    try:
        # the app says so once its database is open (a loaded machine paints late)
        wait_for(session, "press n to start one", timeout=90)
        tmux("send-keys", "-t", session, "n")
        wait_for(session, "Folder to read")
        # typed at once, as a person does when the form shows: keys that reach
        # the form before its field has the focus go into the field all the same
        tmux("send-keys", "-t", session, "-l", str(docs))
        # the field shows the end of a long path: wait for its last two parts
        wait_for(session, f"{docs.parent.name}/{docs.name}")
        tmux("send-keys", "-t", session, "Enter")
        wait_for(session, "completed", timeout=60)
        tmux("send-keys", "-t", session, "q")
        assert exit_code(done) == "0"
    finally:
        tmux("kill-session", "-t", session)
    assert (tmp_path / "docs-digest" / "digest.md").read_text().startswith("# Digest of docs")
    db = home / "data" / "flowdesk" / "flowdesk.db"
    assert db.exists() and oct(db.stat().st_mode & 0o777) == "0o600"


def progress_of(shown: str) -> tuple[int, int] | None:
    """``(done, total)`` of the digest row on screen (``None`` when not shown)."""
    for line in shown.splitlines():
        if "digest" in line:
            match = re.search(r"(\d+)/(\d+)", line)
            if match:
                return int(match.group(1)), int(match.group(2))
    return None


def wait_progress(session: str, check, timeout: float = 60, bar: bool = False) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The first on-screen ``(done, total)`` that passes ``check`` (with
    ``bar``: on a screen that also draws the progress bar)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session)
        got = progress_of(shown)
        if got is not None and check(got) and (not bar or "█" in shown):
            return got
        time.sleep(0.1)
    raise AssertionError(f"progress never matched; screen:\n{screen(session)}")


def app_pid(session: str) -> int:
    """The flowdesk process of the session (the pane's shell runs it)."""
    shell = tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip()
    children = subprocess.run(
        ["pgrep", "-P", shell], capture_output=True, text=True, check=False
    ).stdout.split()
    assert children, f"no flowdesk process under {shell}"
    return int(children[0])


@pytest.mark.slow
def test_progress_bar_moves_survives_kill_9_and_continues_after_relaunch(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    docs = tmp_path / "many"
    docs.mkdir()
    files = 3000
    for i in range(files):
        (docs / f"n{i:05d}.txt").write_text(f"Note {i}. Something to say.\n")
    env = home_env(home)
    first, second = f"flowdesk-bar-{os.getpid()}", f"flowdesk-bar2-{os.getpid()}"
    done = tmp_path / "exit-code"
    launch(first, env, done)
    try:
        wait_for(first, "press n to start one", timeout=90)  # the database is open
        tmux("send-keys", "-t", first, "n")
        wait_for(first, "Folder to read")
        tmux("send-keys", "-t", first, "-l", str(docs))  # typed as soon as the form shows
        wait_for(first, docs.name)  # typed into the field before it is submitted
        tmux("send-keys", "-t", first, "Enter")
        a = wait_progress(first, lambda p: 0 < p[0] < p[1])
        b = wait_progress(first, lambda p: a[0] < p[0] < p[1], bar=True)  # the bar moves
        os.kill(app_pid(first), signal.SIGKILL)  # mid-run, no goodbye
        killed_at = b[0]
    finally:
        tmux("kill-session", "-t", first)
    # the first session may have been the tmux server's last: launch tries
    # again a new-session lost to the exiting server (it showed an empty
    # screen here for the whole wait, 2 runs in ~18)
    launch(second, env, tmp_path / "exit-code-2")
    try:
        # launch recovery resumes the run; its bar goes on from where it was
        resumed = wait_progress(second, lambda p: p[0] >= killed_at and p[1] == b[1])
        assert resumed[1] == b[1]
        # the resumed run's row reaches the whole count and says completed
        assert wait_progress(second, lambda p: p == (b[1], b[1]), timeout=120) == (b[1], b[1])
        wait_for(second, "completed", timeout=120)
        tmux("send-keys", "-t", second, "q")
        assert exit_code(tmp_path / "exit-code-2") == "0"
    finally:
        tmux("kill-session", "-t", second)
    report = (tmp_path / "many-digest" / "digest.md").read_text()
    assert report.count("n0") >= files  # every file once, none lost or doubled
