"""The tmux harness itself: a launch right after the tmux server lost its
last session starts its session all the same.

A tmux server exits once its last session is killed; a ``new-session``
that reaches it while it exits is lost ("server exited unexpectedly"). The
kill -9 smoke test kills its first session and relaunches at once, and so
watched an empty screen for its whole wait about one time in ten (2 of ~18
runs of the suite). Here a server of the test's own (``TMUX_TMPDIR``) loses
its only session and a launch follows at once, round after round."""

from __future__ import annotations

import pytest

from tests.tmux_support import launch, need_tmux, tmux

ROUNDS = 40


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    """A tmux server of this test's own: its socket lives under ``tmp_path``."""
    need_tmux()
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))
    yield
    tmux("kill-server")


def test_a_launch_right_after_the_servers_last_session_was_killed_starts(tmp_path, own_server):
    started = 0
    for i in range(ROUNDS):
        launch(f"a{i}", "", tmp_path / f"a{i}", program="sleep 60")
        tmux("kill-session", "-t", f"a{i}")  # its only session: the server exits
        launch(f"b{i}", "", tmp_path / f"b{i}", program="sleep 60")
        started += f"b{i}" in tmux("ls", "-F", "#S").split()
        tmux("kill-session", "-t", f"b{i}")
    assert started == ROUNDS


def test_a_launch_tmux_refuses_for_another_reason_fails_at_once(tmp_path, own_server):
    launch("same", "", tmp_path / "one", program="sleep 60")
    with pytest.raises(AssertionError, match="tmux did not start session same: duplicate session"):
        launch("same", "", tmp_path / "two", program="sleep 60")
