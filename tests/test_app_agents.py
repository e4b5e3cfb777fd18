"""The app's agent runs screen, driven headless with Pilot over a real SQLite file.

Agent runs are made before the app starts (like ``flowdesk ask`` in another
process), with scripted models: one run that finishes after two identical
tool calls (the second reuses the first's result) and one that asks the user.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from textual.pilot import Pilot

from desktop_app import bootstrap
from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen, conversation_text, message_lines
from desktop_app.cli.output import Hints
from desktop_app.config import Settings, load_settings
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from tests.app_support import screen_after, settle

SIZE = (140, 50)
PARENT = "f" * 32


def make_runs(settings: Settings) -> tuple[str, str, Counter[str]]:
    """A ``done`` run with a reused tool result, then an ``input_required`` run."""
    bootstrap.apply_schema(settings)
    calls: Counter[str] = Counter()

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        calls[q] += 1
        return f"result for {q} [bold]not markup[/bold]"

    store = bootstrap.open_sqlite_store(settings)
    try:
        agents = SqliteAgentStore(store)
        done = Agent(
            "helper",
            ScriptedModel(
                [
                    [
                        {"tool": "lookup", "args": {"q": "x", "n": 1}, "id": "c1"},
                        {"tool": "lookup", "args": {"n": 1, "q": "x"}, "id": "c2"},
                    ],
                    "found x",
                ]
            ),
            agents,
            [lookup],
        ).ask("look up x twice")
        assert done.status == "done"
        time.sleep(0.01)  # a later created_at: the newest run
        asking = Agent(
            "travel",
            ScriptedModel([{"tool": "ask_user", "args": {"question": "Which city?"}}]),
            agents,
        ).ask("book me a trip", parent_run_id=PARENT)
        assert asking.status == "input_required"
    finally:
        store.close()
    return done.run_id, asking.run_id, calls


async def open_screen(pilot: Pilot[None]) -> AgentRunsScreen:
    screen = await screen_after(pilot, "g", AgentRunsScreen)
    assert screen.loaded
    return screen


async def open_run(pilot: Pilot[None], screen: AgentRunsScreen, run_id: str) -> str:
    ids = [r.run_id for r in screen.runs]
    screen.table.move_cursor(row=ids.index(run_id))
    await pilot.press("enter")
    await settle(pilot)
    assert screen.shown is not None and screen.shown.run.run_id == run_id
    return screen.conversation


async def test_agent_runs_are_listed_newest_first_with_their_statuses(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    done_id, asking_id, calls = make_runs(settings)
    assert calls == {"x": 1}
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        assert [r.run_id for r in screen.runs] == [asking_id, done_id]
        assert screen.cells(asking_id)[:5] == [
            asking_id[:8],
            "travel",
            "input_required",
            "1",
            PARENT[:8],
        ]
        assert screen.cells(done_id)[:5] == [done_id[:8], "helper", "done", "2", "-"]
        assert screen.status_text == "2 agent runs, 1 waiting for you."
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, AgentRunsScreen)


async def test_a_done_run_shows_its_tool_calls_and_the_reused_result(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    done_id, _asking_id, _calls = make_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        text = await open_run(pilot, screen, done_id)
        lines = text.splitlines()
        assert f"Agent run {done_id} · agent helper · done · 2 turns" in lines
        assert "Answer: found x" in lines
        # canonical JSON arguments: sorted keys, compact
        assert '  → tool call lookup {"n":1,"q":"x"} [id c1]' in lines
        assert '  → tool call lookup {"n":1,"q":"x"} [id c2]' in lines
        assert "#3 tool result lookup [call c1]" in lines
        assert "#4 tool result lookup (reused) [call c2]" in lines
        assert text.count("(reused)") == 1
        # content is plain text, markup included as typed
        assert "  result for x [bold]not markup[/bold]" in lines
        assert lines[-2:] == ["#5 assistant", "  found x"]
        tools = screen.tools_table
        assert tools.display
        assert [[c.plain for c in tools.get_row_at(i)] for i in range(tools.row_count)] == [
            ["lookup", "completed", "1", "1"]
        ]


async def test_an_input_required_run_shows_its_question_and_the_hint(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    _done_id, asking_id, _calls = make_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        text = await open_run(pilot, screen, asking_id)
        lines = text.splitlines()
        assert "Question: Which city?" in lines
        hint = f"Answer it with: flowdesk ask --resume {asking_id} --answer TEXT --wait-id ask/"
        assert any(line.startswith(hint) for line in lines), lines
        assert f"Parent run {PARENT}" in lines
        assert not screen.tools_table.display  # ask_user is not a stored tool result


async def test_new_runs_show_up_while_the_screen_is_open(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    done_id, asking_id, _calls = make_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        # another process answers nothing but fails a new run meanwhile
        store = bootstrap.open_sqlite_store(settings)
        try:
            now = time.time() + 1
            SqliteAgentStore(store).create(
                AgentRun("b" * 32, "other", "failed", "hi", now, now, error="boom"),
                [{"role": "user", "content": "hi"}],
            )
        finally:
            store.close()
        for _ in range(50):
            await pilot.pause(0.1)
            await settle(pilot)
            if len(screen.runs) == 3:
                break
        assert [r.run_id for r in screen.runs] == ["b" * 32, asking_id, done_id]
        assert screen.cells("b" * 32)[2] == "failed"


async def test_the_screen_is_in_the_footer_and_the_command_palette(tmp_path: Path) -> None:
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "Agent runs" in {c.title for c in app.get_system_commands(app.screen)}
        footer = {k: b.binding.description for k, b in app.screen.active_bindings.items()}
        assert footer["g"] == "Agent runs"
        screen = await open_screen(pilot)
        assert screen.runs == []
        assert screen.status_text == "No agent runs yet."
        await pilot.press("enter")
        await settle(pilot)
        assert app.notices[-1].message == "Nothing selected: there are no agent runs."


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": "y" * 400}, ["#1 user", "  " + "y" * 300 + "…"]),
        (
            {"role": "tool", "content": "r", "name": "t", "tool_call_id": "c", "reused": True},
            ["#1 tool result t (reused) [call c]", "  r"],
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "t"}]},
            ["#1 assistant", "  → tool call t {} [id c]"],
        ),
    ],
)
def test_message_lines(message: dict[str, object], expected: list[str]) -> None:
    assert message_lines(1, message) == expected


def test_conversation_without_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # times are shown in the local time zone
    time.tzset()
    run = AgentRun("r" * 32, "a", "running", "go", 0.0, 0.0)
    text = conversation_text(run, [], 0.0, Hints(None, None))
    assert text.splitlines()[-1] == "(no messages)"
    assert "Created 1970-01-01 00:00:00 +0000 · updated 1970-01-01 00:00:00" in text
    monkeypatch.undo()
    time.tzset()
