"""The agent conversation view: Markdown text, tool calls, tool results and
reused results as distinct blocks (Pilot and snapshots at 80x24 and 160x50)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Markdown

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.widgets.conversation import ConversationView
from desktop_app.config import load_settings
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle

RUN_ID = "a1" * 16
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Find **x** in my notes"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}],
    },
    {"role": "tool", "content": "x is in a.md", "name": "lookup", "tool_call_id": "c1"},
    {
        "role": "tool",
        "content": "x is in a.md",
        "name": "lookup",
        "tool_call_id": "c2",
        "reused": True,
    },
    {"role": "assistant", "content": "# Found\n\n- `a.md` mentions **x**"},
]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def make_app(tmp_path: Path, messages: list[dict[str, Any]] = MESSAGES) -> FlowdeskApp:
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    store = open_store(settings.db_path)
    try:
        agents = SqliteAgentStore(store)
        at = 1_767_225_600.0
        agents.create(AgentRun(RUN_ID, "helper", "running", "Find x", at, at), messages[:1])
        agents.update(RUN_ID, at + 5, messages=messages[1:], status="done", response="Found")
    finally:
        store.close()
    return FlowdeskApp(settings)


async def open_conversation(pilot: Pilot[None]) -> None:
    await settle(pilot)
    app = pilot.app
    assert isinstance(app, FlowdeskApp)
    app.sub_title = "t.db"
    app.runs_screen.status_line.say("")
    await pilot.press("g")
    await settle(pilot)
    await pilot.press("enter")
    await settle(pilot)
    await pilot.pause()


async def test_messages_are_distinct_blocks_with_markdown(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 50)) as pilot:
        await open_conversation(pilot)
        screen = app.screen
        assert isinstance(screen, AgentRunsScreen)
        view = screen.query_one(ConversationView)
        assert view.kinds == ["user", "assistant", "tool-result", "reused-result", "assistant"]
        assert len(view.query(Markdown)) == 1  # the answer's text; the user's is shown as typed
        calls = [str(w.render()) for w in view.query(".tool-call")]
        assert calls == ['→ tool call lookup {"q":"x"} [id c1]']
        titles = [str(w.render()) for w in view.query(".block-title")]
        assert "#4 tool result lookup (reused: not called again) [call c2]" in titles


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_conversation_snapshot(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=open_conversation)


ESCAPES = "\x1b]0;title\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07"


async def test_escape_sequences_in_model_and_tool_text_are_shown_not_sent(
    tmp_path: Path,
) -> None:
    hostile: list[dict[str, Any]] = [
        {"role": "user", "content": "Find x"},
        {
            "role": "assistant",
            "content": f"**bold** {ESCAPES}",
            "tool_calls": [{"id": "c1", "name": f"look{ESCAPES}", "arguments": {"q": ESCAPES}}],
        },
        {
            "role": "tool",
            "content": f"found {ESCAPES}",
            "name": f"look{ESCAPES}",
            "tool_call_id": "c1",
        },
        {"role": "assistant", "content": f"# Done {ESCAPES}\n\n- item {ESCAPES}"},
    ]
    app = make_app(tmp_path, hostile)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_conversation(pilot)
        view = app.screen.query_one(ConversationView)
        assert view.kinds == ["user", "assistant", "tool-result", "assistant"]
        shown = "\n".join(
            strip.text
            for w in view.query("*")
            if w.size.area and not w.children
            for strip in w.render_lines(Region(0, 0, w.size.width, w.size.height))
        )
    assert "\x1b" not in shown and "\x07" not in shown
    visible = "\\x1b]0;title\\x07\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07"
    assert f"found {visible}" in shown  # the tool result
    assert f"result look{visible}" in shown  # its title, with the tool's name
    assert f"Done {visible}" in shown and f"item {visible}" in shown  # through Markdown
    assert "→ tool call look\\x1b" in shown


async def test_a_run_of_hundreds_of_turns_shows_its_question_and_its_last_messages(
    tmp_path: Path,
) -> None:
    """A run that looped for hundreds of turns (a tryout's 2,759) mounted a
    widget per message and the app stopped answering for minutes: the first
    message and the last 100 are shown, and a line counts those between."""
    from desktop_app.app.widgets.conversation import SHOWN_LAST

    looping: list[dict[str, Any]] = [{"role": "user", "content": "Find x"}]
    for n in range(300):
        looping += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"c{n}", "name": "nope", "arguments": {}}],
            },
            {"role": "tool", "content": "unknown tool", "name": "nope", "tool_call_id": f"c{n}"},
        ]
    app = make_app(tmp_path, looping)
    async with app.run_test(size=(120, 50)) as pilot:
        await open_conversation(pilot)
        view = app.screen.query_one(ConversationView)
        assert len(view.kinds) == 1 + SHOWN_LAST == 101
        (note,) = [str(w.render()) for w in view.query(".skipped")]
        assert note == (
            "… 500 messages (#2 to #501) not shown here: the app shows the first and the last 100"
        )
        titles = [str(w.render()) for w in view.query(".block-title")]
        assert titles[0] == "#1 user" and titles[1].startswith("#502 ")
        assert titles[-1] == "#601 tool result nope [call c299]"
