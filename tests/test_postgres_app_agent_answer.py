"""On PostgreSQL the app executes nothing of an agent run it answers (a new
user's report: ``y`` in the inbox ran the approved Pydantic AI tool call,
and the rest of the run, in the app's own process, with the laptop's
credentials). The answer is saved and the run handed to the workers, and
the app says so; a real ``flowdesk agent`` worker then makes the call, once.
Real server, real app (Textual's pilot), real worker process, the model a
scripted server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TypeVar

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.ask import AskScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.config import load_settings
from tests import cli_forkserver
from tests.app_support import messages, settle, wait_until
from tests.chat_server import ChatServer, completion
from tests.cli_support import REPO, flowdesk, stop_agent
from tests.test_app_inbox_agent_answer import ASKS
from tests.test_pydantic_ai import DELETE_X, lines, worker

pytestmark = pytest.mark.postgres
AGENTS = '["tests.pydantic_ai_agents:make_helper"]'
RID = "0123456789abcdef" * 2
HANDED = "Agent run {} is answered and saved; a worker (flowdesk agent) executes it."


def agent_run(url: str, run_id: str):
    from desktop_app.bootstrap import open_services

    services = open_services(load_settings(db_path=url), flows=[])
    try:
        return services.agents.get(run_id)
    finally:
        services.close()


def serve_until_done(url: str, run_id: str, env: dict[str, str], err: Path) -> None:
    """A real ``flowdesk --db URL agent`` worker, stopped once the run is done."""
    with err.open("w") as out:
        agent = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", url, "agent", "--poll", "0.2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **env},
        )
    try:
        deadline = time.monotonic() + 90
        while agent_run(url, run_id).status != "done":
            assert time.monotonic() < deadline, err.read_text()
            assert agent.poll() is None, err.read_text()
            time.sleep(0.1)
    finally:
        stop_agent(agent)


S = TypeVar("S")


async def opened(app: FlowdeskApp, pilot, key: str, kind: type[S]) -> S:
    """The screen ``key`` opens once the app's engine is open."""
    await settle(pilot)
    await wait_until(pilot, lambda: app.engine is not None, timeout=30)
    await pilot.press(key)
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, kind)
    return screen


async def test_y_in_the_inbox_on_postgres_hands_the_approved_pydantic_ai_call_to_a_worker(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "tool.log"
    settings = load_settings(db_path=pg_url, pydantic_ai_agents=[AGENTS[2:-2]])
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = list(DELETE_X)
        first = worker(pg_url, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        run_id = first.stdout.split()[1]
        for name, value in env.items():  # the app could build the agent: it must not run it
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(160, 45)) as pilot:
            screen = await opened(app, pilot, "i", InboxScreen)
            (item,) = screen.items
            assert item.approval and item.run_id == run_id
            await pilot.press("y")
            await wait_until(pilot, lambda: not screen.answering, timeout=60)
            await settle(pilot)
            said = messages(app)
            handed = HANDED.format(run_id[:8])
            assert handed in said, said
            assert not messages(app, "error")
        # nothing of it ran in the app: no tool call, no model request
        assert lines(log) == []
        assert len(server.requests) == 1
        run = agent_run(pg_url, run_id)
        assert (run.status, run.lease_owner, run.pending_call) == ("running", None, None)
        serve_until_done(
            pg_url, run_id, {**env, "FLOWDESK_PYDANTIC_AI_AGENTS": AGENTS}, tmp_path / "w.log"
        )
        assert len(server.requests) == 2
    assert lines(log) == ["delete x"]  # approved once, made once, by the worker
    # the worker's log tells the run's resume and end, as it does a flow run's
    logged = (Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log").read_text()
    assert f"agent helper: run {run_id} resumed (status was running)" in logged, logged[-3000:]
    assert f"agent helper: run {run_id} ended done" in logged


async def test_an_agents_question_answered_in_the_app_on_postgres_is_continued_by_a_worker(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = list(ASKS)
        asked = flowdesk(pg_url, "ask", "pick one for me", env=env)
        assert asked.returncode == 0, asked.stderr
        (run_id,) = [w.split()[1] for w in asked.stderr.splitlines() if w.startswith("run ")]
        for name, value in env.items():  # a model is set up: the app must not call it
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(load_settings(db_path=pg_url))
        async with app.run_test(size=(160, 45)) as pilot:
            screen = await opened(app, pilot, "i", InboxScreen)
            (item,) = screen.items
            assert (item.kind, item.prompt) == ("agent", "Which?")
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, AskScreen)
            await pilot.press(*"red", "enter")
            await wait_until(pilot, lambda: not screen.answering, timeout=60)
            await settle(pilot)
            handed = HANDED.format(run_id[:8])
            assert handed in messages(app), messages(app)
        assert len(server.requests) == 1  # the app sent the model nothing
        assert agent_run(pg_url, run_id).status == "running"
        serve_until_done(pg_url, run_id, env, tmp_path / "w.log")
        assert len(server.requests) == 2
        assert any(
            m.get("content") == "Human input: red"
            for m in server.requests[1]["body"]["messages"]
            if m["role"] == "tool"
        )


async def test_resuming_an_interrupted_agent_run_in_the_app_on_postgres_leaves_it_to_a_worker(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent runs screen's resume executes nothing on PostgreSQL: it says
    a worker resumes the run, and the model is sent nothing from here."""
    from desktop_app.agent.messages import Message
    from desktop_app.app.screens.agent_runs import AgentRunsScreen
    from desktop_app.bootstrap import open_services
    from desktop_app.store.protocol import AgentRun

    services = open_services(load_settings(db_path=pg_url), flows=[])
    try:
        now = time.time()
        services.agents.create(
            AgentRun(RID, "ask", "running", "which one?", now, now),
            [Message("user", "which one?").to_json()],
        )  # left running with no lease: interrupted
    finally:
        services.close()
    with ChatServer() as server:
        monkeypatch.setenv("FLOWDESK_MODEL__BASE_URL", server.url)
        monkeypatch.setenv("FLOWDESK_MODEL__MODEL", "m")
        app = FlowdeskApp(load_settings(db_path=pg_url))
        async with app.run_test(size=(160, 45)) as pilot:
            runs = await opened(app, pilot, "g", AgentRunsScreen)
            runs.resume_run(RID)
            await settle(pilot)
            said = (
                "Agent run 01234567 is saved as it stopped; a worker (flowdesk agent) resumes it."
            )
            assert messages(app)[-1] == said, messages(app)
        assert server.requests == []
        # an app whose settings set no model says what the worker needs (a
        # tryout's run waited for ever behind "a worker resumes it")
        monkeypatch.delenv("FLOWDESK_MODEL__BASE_URL")
        monkeypatch.delenv("FLOWDESK_MODEL__MODEL")
        app = FlowdeskApp(load_settings(db_path=pg_url))
        async with app.run_test(size=(160, 45)) as pilot:
            runs = await opened(app, pilot, "g", AgentRunsScreen)
            runs.resume_run(RID)
            await settle(pilot)
            assert messages(app)[-1] == said + (
                " No model is configured here: a worker whose settings set model.base_url and "
                "model.model resumes it (one configured like this app does not)."
            ), messages(app)
    assert agent_run(pg_url, RID).status == "running"


async def test_a_question_asked_in_the_app_on_postgres_is_answered_by_a_worker(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a`` on the agent runs screen asks nothing of the model on
    PostgreSQL: the question is saved as a new run, the app says a worker
    answers it, and a real ``flowdesk agent`` worker asks its model (a
    scripted server on 127.0.0.1), once, and the run ends done with the answer."""
    from desktop_app.app.screens.agent_runs import AgentRunsScreen
    from desktop_app.bootstrap import open_services

    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [("json", completion("Blue, for calm."))]
        for name, value in env.items():  # a model is set up: the app must not call it
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(load_settings(db_path=pg_url))
        async with app.run_test(size=(160, 45)) as pilot:
            runs = await opened(app, pilot, "g", AgentRunsScreen)
            await pilot.press("a")
            await settle(pilot)
            assert isinstance(app.screen, AskScreen)
            await pilot.press(*"which colour", "enter")
            await wait_until(pilot, lambda: any("is saved" in m for m in messages(app)), 60)
            services = open_services(load_settings(db_path=pg_url), flows=[])
            try:
                (run,) = services.agents.list()
            finally:
                services.close()
            said = f"Agent run {run.run_id[:8]} is saved; a worker (flowdesk agent) answers it."
            assert messages(app)[-1] == said, messages(app)
            assert not messages(app, "error")
            # the screen shows the stored run, its question, waiting for a worker
            await wait_until(pilot, lambda: runs.row_keys == [run.run_id], 30)
        assert server.requests == []  # the app sent the model nothing
        assert (run.agent, run.status, run.input, run.lease_owner) == (
            "ask", "running", "which colour", None,
        )  # fmt: skip
        serve_until_done(pg_url, run.run_id, env, tmp_path / "w.log")
        assert len(server.requests) == 1  # the worker asked, once
        (asked,) = [
            m["content"] for m in server.requests[0]["body"]["messages"] if m["role"] == "user"
        ]
        assert asked == "which colour"
    done = agent_run(pg_url, run.run_id)
    assert (done.status, done.response) == ("done", "Blue, for calm.")
