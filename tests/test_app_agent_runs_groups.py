"""The agent runs view (issue 28): a digest --model run's thousand agent
runs share one group row under their parent, the list is read in pages on
the read-only store, and what a person typed is shown as typed."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Markdown, Static

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens import agent_runs
from desktop_app.app.screens.agent_runs import AgentRunsScreen, group_key
from desktop_app.app.widgets.conversation import ConversationView
from desktop_app.config import load_settings
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from tests.app_support import settle

PARENT = "d1" * 16
SIZE = (120, 35)


def make_children(db: Path, n: int) -> list[str]:
    """``n`` done agent runs of one flow run, ids ``<parent>:notes/f<i>.md``,
    and one top-level run whose user typed ``__init__.py``."""
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    store = bootstrap.open_sqlite_store(settings)
    ids = []
    try:
        agents = SqliteAgentStore(store)
        at = 1_767_225_600.0
        for i in range(n):
            run_id = f"{PARENT}:notes/f{i}.md"
            ids.append(run_id)
            agents.create(
                AgentRun(run_id, "digest", "done", "sum", at + i, at + i, parent_run_id=PARENT),
                [{"role": "user", "content": "sum"}],
            )
        agents.create(
            AgentRun("a" * 32, "ask", "done", "x", at + n, at + n),
            [
                {"role": "user", "content": "what is in __init__.py and *this*?"},
                {"role": "assistant", "content": "It is **empty**."},
            ],
        )
    finally:
        store.close()
    return ids


async def test_children_share_a_group_row_and_pages_are_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(agent_runs, "AGENT_PAGE", 100)
    children = make_children(tmp_path / "t.db", 450)
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    pages: list[int] = []
    original = AgentRunsScreen.on_agent_runs_loaded

    def spy(self, message):  # type: ignore[no-untyped-def]
        pages.append(len(message.runs))
        return original(self, message)

    monkeypatch.setattr(AgentRunsScreen, "on_agent_runs_loaded", spy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AgentRunsScreen)
        assert pages[:5] == [100, 200, 300, 400, 451]  # shown page by page
        assert screen.row_keys == ["a" * 32, group_key(PARENT)]
        assert screen.cells(group_key(PARENT))[:3] == [
            f"▸ {PARENT[:8]}",
            "450 child runs",
            "450/450 done",
        ]
        screen.table.move_cursor(row=1)
        await pilot.press("enter")  # opens the group
        await settle(pilot)
        assert len(screen.row_keys) == 2 + 450
        assert screen.row_keys[2] == children[-1]  # newest first
        assert screen.cells(children[-1])[0] == "└ notes/f449.md"
        assert screen.cells(children[-1])[4] == ""  # the group row names the parent
        await pilot.press("enter")  # back on the group row: closes it
        await settle(pilot)
        assert screen.row_keys == ["a" * 32, group_key(PARENT)]


async def test_user_text_is_shown_as_typed(tmp_path: Path) -> None:
    make_children(tmp_path / "t.db", 0)
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        view = app.screen.query_one(ConversationView)
        user = view.query(".block.user").first()
        assert not user.query(Markdown)
        texts = [str(w.render()) for w in user.query(Static) if "block-text" in w.classes]
        assert texts == ["what is in __init__.py and *this*?"]
        assert len(view.query(Markdown)) == 1  # the assistant's answer
