"""Agent runs are under the clock-skew check flow runs have: a ``flowdesk``
process whose clock is an hour off the SQLite database's file system clock
(real processes under ``faketime``, a real model server on 127.0.0.1)
writes nothing into an agent run, either way: ``flowdesk ask`` creates no
run and asks the model nothing, and an answer to a run waiting for one is
refused before its lease is taken, the run left waiting as it was; the same
answer from an honest clock then goes on. Before, agent runs were dated with
the process's own clock, unchecked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.bootstrap import open_services
from desktop_app.config import load_settings
from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_support import REPO, flowdesk
from tests.faketime_support import skewed_env
from tests.test_clock_skew_sqlite import _need_faketime  # noqa: F401  (autouse: skip without it)

WAY = {"+1h": "ahead of", "-1h": "behind"}


def skewed(
    offset: str, db: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """``flowdesk --db DB ARGS`` in a process whose clock is ``offset`` off."""
    return cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env, **skewed_env(offset)},
        timeout=120,
    )


def agent_runs(db: Path) -> list[tuple[str, str, float, str | None]]:
    """``(run id, status, updated_at, lease owner)`` of every agent run in ``db``."""
    sv = open_services(load_settings(db_path=str(db)), flows=[])
    try:
        return [(r.run_id, r.status, r.updated_at, r.lease_owner) for r in sv.agents.list()]
    finally:
        sv.close()


def refused(done: subprocess.CompletedProcess[str], offset: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "clock is 1 h 0 min" in done.stderr, done.stderr
    assert f"{WAY[offset]} the clock of the file system holding" in done.stderr, done.stderr
    assert "nothing was written" in done.stderr, done.stderr


@pytest.mark.parametrize("offset", list(WAY))
def test_a_skewed_clock_writes_nothing_into_an_agent_run(tmp_path: Path, offset: str) -> None:
    db = tmp_path / "a.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        # a new agent run from a skewed clock: none is created, the model is not asked
        refused(skewed(offset, db, env, "ask", "pick one"), offset)
        assert agent_runs(db) == [] and server.requests == []
        # a run waiting for an answer, asked with an honest clock
        call = [{"id": "q", "name": "ask_user", "args": {"question": "Which?"}}]
        server.script = [("json", completion("", call)), ("json", completion("The red one."))]
        asked = flowdesk(db, "ask", "pick one", env=env)
        assert asked.returncode == 0, asked.stderr
        (before,) = agent_runs(db)
        run_id = before[0]
        assert before[1] == "input_required"
        # its answer from a skewed clock: refused, the run as it was, no lease left
        refused(skewed(offset, db, env, "answer", run_id, "red"), offset)
        assert agent_runs(db) == [before]
        assert len(server.requests) == 1
        # the same answer from an honest clock goes on
        honest = flowdesk(db, "answer", run_id, "red", env=env)
        assert honest.returncode == 0, honest.stderr
        assert "The red one." in honest.stdout
    assert [r[1] for r in agent_runs(db)] == ["done"]
