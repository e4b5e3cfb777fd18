"""The inbox answers an agent run's ``ask_user`` question (``enter``, an
answer field) and the run continues as ``flowdesk ask --resume RUN --answer
TEXT`` continues it: a run started by the real ``flowdesk ask`` command, the
model a scripted server on 127.0.0.1 (tests/chat_server.py), a real SQLite
file. With no model set up the inbox says so and prints the command, which
is run exactly as printed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.screens.ask import AskScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.cli.output import Hints
from desktop_app.config import load_settings
from tests.app_support import messages, settle, wait_until
from tests.chat_server import ChatServer, completion
from tests.cli_support import as_printed, flowdesk
from tests.test_agent_ask_user import tool_answers
from tests.test_cli_agent_resume import agent_status

ASKS = [
    ("json", completion("", [{"id": "q", "name": "ask_user", "args": {"question": "Which?"}}])),
    ("json", completion("Then the red one.")),
]


def started_asking(db: Path, server: ChatServer) -> tuple[str, dict[str, str]]:
    """``flowdesk ask`` run until its agent asks "Which?": the run id and the
    environment with the model set up."""
    env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
    server.script = list(ASKS)
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    asked = flowdesk(db, "ask", "pick one for me", env=env)
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == "the agent asks: Which?"
    (run_id,) = [w.split()[1] for w in asked.stderr.splitlines() if w.startswith("run ")]
    (row,) = [r for r in flowdesk(db, "runs", env=env).stdout.splitlines() if run_id in r]
    assert " 1 turn " in row, row  # one model request so far, said in the singular
    return run_id, env


async def answer_red(app: FlowdeskApp, pilot) -> InboxScreen:
    """In the inbox: enter on the agent's question, type ``red``, enter."""
    await settle(pilot)
    await pilot.press("i")
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, InboxScreen)
    (item,) = screen.items
    assert (item.kind, item.prompt, item.approval) == ("agent", "Which?", False)
    assert item.how(app.hints) == "enter answer"
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, AskScreen)
    await pilot.press(*"red", "enter")
    assert f"Answering agent run {item.run_id[:8]}…" in messages(app)
    await wait_until(pilot, lambda: not screen.answering, timeout=60)
    await settle(pilot)
    return screen


async def test_enter_in_the_inbox_answers_an_agents_question_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "f.db"
    with ChatServer() as server:
        run_id, _ = started_asking(db, server)
        monkeypatch.setenv("FLOWDESK_MODEL__BASE_URL", server.url)
        monkeypatch.setenv("FLOWDESK_MODEL__MODEL", "m")
        settings = load_settings(db_path=db)
        bootstrap.apply_schema(settings)
        app = FlowdeskApp(settings, flows=[], hints=Hints(str(db), None))
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(pilot)  # the database is open (g says so while it opens)
            # the agent runs screen points at the inbox, which answers it
            await pilot.press("g")
            await settle(pilot)
            assert isinstance(app.screen, AgentRunsScreen)
            app.screen.resume_run(run_id)
            await settle(pilot)
            said = f"Agent run {run_id[:8]} waits for an answer: press i (the inbox), then enter"
            assert messages(app, "warning")[-1] == f"{said} to answer it."
            await pilot.press("escape")
            screen = await answer_red(app, pilot)
            assert f"Agent run {run_id[:8]} done: Then the red one." in messages(app)
            assert screen.items == []
            assert not messages(app, "error")
        # one more model request, shown the answer as `ask --resume --answer` shows it
        assert len(server.requests) == 2
        assert tool_answers(server.requests[1]) == ["Human input: red"]
    assert agent_status(db, run_id) == "done"


async def test_with_no_model_the_inbox_prints_the_command_that_answers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWDESK_MODEL__BASE_URL", raising=False)
    monkeypatch.delenv("FLOWDESK_MODEL__MODEL", raising=False)
    db = tmp_path / "my notes.db"  # a space: the printed command quotes it
    with ChatServer() as server:
        run_id, env = started_asking(db, server)
        settings = load_settings(db_path=db)
        app = FlowdeskApp(settings, flows=[], hints=Hints(str(db), None))
        async with app.run_test(size=(160, 45)) as pilot:
            await answer_red(app, pilot)
            said = [m for m in messages(app, "warning") if m.startswith("No model")]
        assert len(server.requests) == 1  # the app sent nothing
        assert agent_status(db, run_id) == "input_required"
        pinned = f"ask --resume {run_id} --answer red --wait-id ask/1:q`"
        assert said and said[-1].endswith(pinned), said
        command = said[-1].rsplit("`", 2)[-2]
        done = as_printed(command, env)  # exactly as printed
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Then the red one."
        assert tool_answers(server.requests[1]) == ["Human input: red"]
    assert agent_status(db, run_id) == "done"
