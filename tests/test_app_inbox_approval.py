"""The inbox approves (``y``) or declines (``n``) an agent run's tool call in
place, with the tools the run recorded (a real MCP server subprocess) and the
configured model (a scripted model server on 127.0.0.1); the call's side
effect (a line in the notes server's log) is counted."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk
from tests.test_tool_approval import (
    append,
    as_printed,
    lines,
    notes_config,
    require,
    stored_run,
)


def app_with_the_model(monkeypatch: pytest.MonkeyPatch, url: str | None) -> Any:
    """The app on the settings ``FLOWDESK_CONFIG`` names, the schema
    applied, its model the scripted server at ``url`` (``None``: none set)."""
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings

    if url is not None:
        monkeypatch.setenv("FLOWDESK_MODEL__BASE_URL", url)
        monkeypatch.setenv("FLOWDESK_MODEL__MODEL", "m")
    settings = load_settings()
    bootstrap.apply_schema(settings)
    return FlowdeskApp(settings, flows=[])


async def the_approval_in_the_inbox(pilot: Any) -> Any:
    """The inbox opened, its one item an agent's tool call waiting for
    approval, selected; returns the inbox screen."""
    from tests.app_support import open_inbox

    screen = await open_inbox(pilot)
    (item,) = screen.items
    assert item.approval
    return screen


async def _answer_in_inbox(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    with_model: bool = True,
    then: Callable[[list[str], dict[str, str]], None] | None = None,
) -> tuple[list[str], list[str], str, int]:
    """Start an agent run that waits for approval of ``notes__append``, then
    press ``key`` on it in the inbox: (log lines, notices, run status, model requests)."""
    require("mcp")
    from tests.app_support import messages, settle, wait_until

    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    top = f"db_path = {json.dumps(str(db))}"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]', top=top)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    with ChatServer() as server:
        env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [append("milk"), ("json", completion("Noted."))]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
        assert asked.returncode == 0, asked.stderr
        app = app_with_the_model(monkeypatch, server.url if with_model else None)
        async with app.run_test(size=(200, 45)) as pilot:
            screen = await the_approval_in_the_inbox(pilot)
            await pilot.press(key)
            await pilot.press(key)  # a second press while it runs answers nothing more
            await wait_until(pilot, lambda: not screen.answering, timeout=60)
            await settle(pilot)
            shown = messages(app)
        if then is not None:  # with the model server still up
            then(shown, env)
        requests = len(server.requests)
    return lines(log), shown, stored_run(db).status, requests


async def test_y_in_the_inbox_approves_an_agent_tool_call_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, shown, status, requests = await _answer_in_inbox(tmp_path, monkeypatch, "y")
    assert log == ["milk"]  # the approved call ran exactly once
    assert status == "done"
    assert requests == 2
    assert any("done: Noted." in m for m in shown), shown
    assert not any("command line" in m for m in shown), shown


async def test_n_in_the_inbox_declines_an_agent_tool_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, shown, status, _ = await _answer_in_inbox(tmp_path, monkeypatch, "n")
    assert log == []  # declined: nothing ran
    assert status == "done"
    assert any("done: Noted." in m for m in shown), shown


async def test_y_without_a_model_says_so_and_shows_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWDESK_MODEL__BASE_URL", raising=False)
    monkeypatch.delenv("FLOWDESK_MODEL__MODEL", raising=False)
    ran: list[str] = []

    def run_the_command(shown: list[str], env: dict[str, str]) -> None:
        assert lines(tmp_path / "notes.log") == []  # nothing ran in the app
        said = [m for m in shown if "No model" in m]
        pinned = r" yes --wait-id approval/1:[0-9a-f]{12}`$"
        assert said and all(re.search(pinned, m) for m in said), shown
        command = said[-1].rsplit("`", 2)[-2]
        assert command.startswith("flowdesk answer ")
        done = as_printed(command, env)  # run exactly as printed
        assert done.returncode == 0, done.stderr
        ran.append(done.stdout)

    log, _, status, _ = await _answer_in_inbox(
        tmp_path, monkeypatch, "y", with_model=False, then=run_the_command
    )
    assert ran and "Noted." in ran[0]
    assert log == ["milk"] and status == "done"
