"""Every screen of the real app, reached and used by its keys in a real
80x24 terminal (tmux), with a tidy waiting for approval and a finished
digest: what each screen offers is on screen, the tidy is approved from the
inbox and its files move, and ``q`` quits cleanly."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.tmux_support import (
    BIN,
    exit_code,
    home_env,
    home_vars,
    keys,
    launch,
    need_tmux,
    screen,
    tmux,
    wait_for,
)


def cli(home: Path, *args: str) -> str:
    env = {**os.environ, **home_vars(home)}
    env.pop("FLOWDESK_DB", None)
    done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def close(session: str) -> None:
    """Escape back to the runs screen (its own footer shows again); the
    next key waits for it, or the terminal reads escape and that key as one
    alt-key."""
    keys(session, "Escape")
    wait_for(session, "n New digest", "Runs 1-2")


def rows(session: str) -> int:
    return len(screen(session).splitlines())


@pytest.mark.slow
def test_every_screen_is_reached_and_used_at_80x24(tmp_path: Path) -> None:
    need_tmux()
    home, downloads, notes = tmp_path / "home", tmp_path / "dl", tmp_path / "notes"
    for folder in (home, downloads, notes):
        folder.mkdir()
    for i in range(3):
        (downloads / f"report{i}.pdf").write_text("pdf")
    (notes / "a.md").write_text("# Plans\n\nWe ship on Friday.\n")
    cli(home, "db", "apply")
    cli(home, "run", "tidy", "--folder", str(downloads))  # waits for approval
    cli(home, "run", "digest", "--folder", str(notes), "--out", str(tmp_path / "out"))
    session, done = f"flowdesk-80x24-{os.getpid()}", tmp_path / "exit-code"
    launch(session, home_env(home), done, size=(80, 24))
    try:
        wait_for(session, "1 run is waiting", timeout=90)
        wait_for(session, "Runs 1-2")
        wait_for(session, "F1 Help")  # the footer's way to every key
        assert rows(session) == 24

        # help lists the screen's keys and scrolls to its last one
        keys(session, "F1")
        wait_for(session, "Keys — database")
        keys(session, "PageDown", "PageDown", "PageDown")
        wait_for(session, "Previous page")
        close(session)

        # the inbox: the question with its deadline and time left
        keys(session, "i")
        wait_for(session, "Time left", "Deadline", "y Approve", "(Documents 3)")
        close(session)

        # the answer dialog of the tidy (second row): its plan, and Yes, No,
        # Send and Close all on screen
        keys(session, "Down")
        keys(session, "a")
        shown = wait_for(session, "planned")
        buttons = next(line for line in shown.splitlines() if "Yes" in line)
        assert all(word in buttons for word in ("Yes", "No", "Send", "Close")), shown
        close(session)

        # the run's detail and its tabs
        keys(session, "Enter")
        wait_for(session, "Checkpoints", "Flow tidy")
        close(session)

        # settings: Save on screen
        keys(session, "C-s")
        wait_for(session, "Save settings")
        close(session)

        # agent runs
        keys(session, "g")
        wait_for(session, "No agent runs yet")
        close(session)

        # the two start forms, their Start and Cancel on screen; what is typed
        # with the key that opens one (one read of the terminal) goes into it
        for key, title in (("s", "Start a flow"), ("n", "Folder to read")):
            tmux("send-keys", "-t", session, "-l", f"{key}~/typed")
            shown = wait_for(session, title, "Cancel", "F1 Help", "~/typed")
            assert any("Start" in line and "Cancel" in line for line in shown.splitlines()), shown
            close(session)

        # approve the tidy from the inbox (its plan was shown above): files move
        keys(session, "i")
        wait_for(session, "Time left")
        keys(session, "y")
        deadline = time.monotonic() + 60
        while not list(downloads.glob("Documents/*/report0.pdf")):
            assert time.monotonic() < deadline, f"nothing moved; screen:\n{screen(session)}"
            time.sleep(0.2)
        close(session)
        keys(session, "q")
        assert exit_code(done) == "0"
    finally:
        tmux("kill-session", "-t", session)
    assert sorted(p.name for p in downloads.rglob("*.pdf")) == [
        "report0.pdf", "report1.pdf", "report2.pdf"
    ]  # fmt: skip
    assert not list(downloads.glob("*.pdf"))  # all three moved, none left or doubled
