"""A Pydantic AI agent's run in the app (S96): launch recovery resumes the
run a SIGKILL interrupted with the registered agent (no Flowdesk model set
up), and the conversation view shows it as any agent run."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.widgets.conversation import ConversationView
from desktop_app.config import Settings, load_settings
from tests.app_support import messages, open_inbox, settle, wait_until
from tests.chat_server import ChatServer
from tests.test_app_conversation import open_conversation
from tests.test_pydantic_ai import SCRIPT, lines, worker
from tests.test_pydantic_ai import requests_made as requests_seen


def registered(db: Path) -> Settings:
    """Settings of a new database ``db`` (its schema applied) where the agent
    ``helper`` (tests/pydantic_ai_agents.py) is registered."""
    settings = load_settings(
        db_path=db, pydantic_ai_agents=["tests.pydantic_ai_agents:make_helper"]
    )
    bootstrap.apply_schema(settings)
    return settings


def waiting_for_delete(db: Path, log: Path, server: ChatServer) -> tuple[str, dict[str, str]]:
    """A run of ``delete x`` (``DELETE_X`` scripted on ``server``) that waits
    for a person to approve ``delete(x)``: its id, and the environment the
    process that goes on with it needs (the model server, the tool log)."""
    from tests.test_pydantic_ai import DELETE_X

    env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
    server.script = list(DELETE_X)
    first = worker(db, env, "run", "delete x")
    assert first.returncode == 0, first.stderr
    return first.stdout.split()[1], env


@pytest.mark.scenario("S96")
@pytest.mark.slow
async def test_launch_recovery_resumes_a_killed_pydantic_ai_run_shown_as_a_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, log = tmp_path / "t.db", tmp_path / "tool.log"
    settings = registered(db)
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = list(SCRIPT)
        first = worker(db, {**env, "PAI_TEST_KILL": "tool:b"}, "run", "find a then b")
        assert first.returncode == -signal.SIGKILL, first.stderr
        for name, value in env.items():  # the registered agent is built in this process
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(120, 50)) as pilot:
            await wait_until(pilot, lambda: any("Resumed" in m for m in messages(app)), timeout=60)
            await settle(pilot)
            assert "Resumed 1 run: 1 completed, 0 failed" in messages(app)
            await open_conversation(pilot)
            screen = app.screen
            assert isinstance(screen, AgentRunsScreen)
            view = screen.query_one(ConversationView)
            assert view.kinds == [
                "user",
                "assistant",  # its tool call lookup(a)
                "tool-result",
                "assistant",  # lookup(b)
                "tool-result",
                "assistant",
            ]
            calls = [str(w.render()) for w in view.query(".tool-call")]
            assert calls[0].startswith('→ tool call lookup {"q":"a"}')
        assert len(server.requests) == 3
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}


@pytest.mark.scenario("S96")
async def test_y_in_the_inbox_approves_a_pydantic_ai_call_with_no_flowdesk_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent brings its own model: the inbox continues its run as
    ``flowdesk answer RUN yes`` does, with no ``[model]`` set up."""

    monkeypatch.delenv("FLOWDESK_MODEL__BASE_URL", raising=False)
    monkeypatch.delenv("FLOWDESK_MODEL__MODEL", raising=False)
    db, log = tmp_path / "t.db", tmp_path / "tool.log"
    settings = load_settings(
        db_path=db, pydantic_ai_agents=["tests.pydantic_ai_agents:make_helper"]
    )
    assert settings.model.base_url is None
    bootstrap.apply_schema(settings)
    with ChatServer() as server:
        run_id, env = waiting_for_delete(db, log, server)
        for name, value in env.items():  # the registered agent is built in this process
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(160, 45)) as pilot:
            screen = await open_inbox(pilot)
            (item,) = screen.items
            assert item.approval and item.run_id == run_id
            await pilot.press("y")
            await wait_until(pilot, lambda: not screen.answering, timeout=60)
            await settle(pilot)
            said = messages(app)
            assert f"Agent run {run_id[:8]} done: x is deleted" in said, said
            assert not any("No model" in m for m in said), said
            assert screen.items == []
        assert len(server.requests) == 2  # the first request was not sent again
    assert lines(log) == ["delete x"]  # approved once, made once


@pytest.mark.scenario("S96")
async def test_y_where_the_agent_is_not_registered_records_the_approval_and_says_how_to_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``y`` in the inbox records the approval before the agent is looked
    for; where it is not registered the app says the answer is recorded and
    names the resume that goes on with it, and that command, run as shown
    where the agent is registered, makes the call once."""
    import os

    from desktop_app.app.screens.inbox import InboxScreen
    from tests.cli_support import as_printed
    from tests.test_pydantic_ai import REGISTERED

    db, log = tmp_path / "t.db", tmp_path / "tool.log"
    settings = load_settings(db_path=db)  # no pydantic_ai_agents
    bootstrap.apply_schema(settings)
    with ChatServer() as server:
        run_id, env = waiting_for_delete(db, log, server)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(pilot)
            await pilot.press("i")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, InboxScreen)
            await wait_until(pilot, lambda: len(screen.items) == 1, timeout=30)
            await pilot.press("y")
            await wait_until(pilot, lambda: not screen.answering, timeout=60)
            await settle(pilot)
            (said,) = messages(app, "error")
        start = f"Agent run {run_id[:8]}: your answer is recorded, but the run cannot go on here: "
        assert said.startswith(start), said
        assert "which is not registered" in said, said
        resume = f"flowdesk resume {run_id}"  # the app's database is the settings' one
        assert said.endswith(f"; it goes on with it at `{resume}` (or a `flowdesk agent` pass)")
        assert lines(log) == []
        user = {**os.environ, **env, **REGISTERED, "FLOWDESK_DB_PATH": str(db)}
        resumed = as_printed(resume, user)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "x is deleted"
        assert len(server.requests) == 2
    assert lines(log) == ["delete x"]  # approved once, made once


@pytest.mark.scenario("S96")
async def test_q_while_an_approved_call_runs_waits_for_it_and_saves_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quitting the app while the call a person approved runs: the app lets
    the call end and saves its result before it closes the database, so the
    next resume goes on with that result (not "outcome unknown"), and the
    call is made once."""
    from tests.test_pydantic_ai import agent_runs

    db, log, gate = tmp_path / "t.db", tmp_path / "tool.log", tmp_path / "gate"
    settings = registered(db)
    with ChatServer() as server:
        run_id, env = waiting_for_delete(db, log, server)
        for name, value in {**env, "PAI_TEST_GATE": f"x:{gate}"}.items():
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(160, 45)) as pilot:
            await open_inbox(pilot)
            await pilot.press("y")
            await wait_until(pilot, lambda: lines(log) == ["delete x"], timeout=60)
            opener = threading.Timer(1.0, gate.touch)  # the call ends a second after q
            opener.start()
            await pilot.press("q")
        opener.join()
        assert len(server.requests) == 1  # it stopped once the call ended: no request after it
        ((run, messages_, tools),) = agent_runs(db)
        assert run.status == "running"  # interrupted by the quit: the next launch goes on
        (deleted,) = [t for t in tools if t.tool == "delete"]
        assert deleted.status == "completed"
        assert json.loads(deleted.result or "")["output"]["result"] == "deleted x"
        assert messages_[-1]["content"] == "deleted x"

        monkeypatch.delenv("PAI_TEST_GATE")
        resumed = worker(db, env, "resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
        assert "done executed=1 replayed=2 output=x is deleted" in resumed.stdout
        assert requests_seen(server)[-1] == ["deleted x"]  # its result, not "unknown"
    assert lines(log) == ["delete x"]  # approved once, made once


@pytest.mark.scenario("S96")
async def test_r_resumes_a_pydantic_ai_run_interrupted_while_the_app_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's report: `r` on a Pydantic AI agent's interrupted run said
    it "uses tools set up on the command line" and to resume it from a
    shell; the README says `r` resumes agent runs, and the run needs no
    tools but its registered agent's. It resumes it with that agent (no
    Flowdesk model set up), the call cut off made again and the one done
    before not."""
    db, log = tmp_path / "t.db", tmp_path / "tool.log"
    settings = registered(db)
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        for name, value in env.items():  # the registered agent is built in this process
            monkeypatch.setenv(name, value)
        app = FlowdeskApp(settings)
        async with app.run_test(size=(120, 50)) as pilot:
            await wait_until(pilot, lambda: app.services is not None, timeout=60)
            await settle(pilot)
            # killed after the app's launch, which found nothing to recover
            server.script = list(SCRIPT)
            first = worker(db, {**env, "PAI_TEST_KILL": "tool:b"}, "run", "find a then b")
            assert first.returncode == -signal.SIGKILL, first.stderr
            await open_conversation(pilot)
            screen = app.screen
            assert isinstance(screen, AgentRunsScreen)
            (run_id,) = [r.run_id for r in screen.runs]
            await pilot.press("r")
            done = f"Agent run {run_id[:8]} done: a and b are found"
            await wait_until(pilot, lambda: done in messages(app), timeout=60)
            assert f"Resuming agent run {run_id[:8]}…" in messages(app)
            assert not any("command line" in m for m in messages(app)), messages(app)
            assert not messages(app, "error")
        assert len(server.requests) == 3
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}
