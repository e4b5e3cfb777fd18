"""The app's launch recovery resumes an interrupted agent run (one a Ctrl-C
stopped mid-conversation) with the file tools it was started with."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app import bootstrap
from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.recovery import ToolSources
from desktop_app.agent.tools import file_tools
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until


@pytest.mark.scenario("S82")
async def test_launch_recovery_resumes_an_interrupted_agent_run_with_its_tools(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("Buy milk.\n")
    (folder / "done.md").write_text("Paid rent.\n")
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    sv = bootstrap.open_services(settings, flows=[])
    read = {"tool": "read_file", "args": {"path": "todo.md"}}
    stopped = ScriptedModel([read, KeyboardInterrupt()])  # Ctrl-C during the second call
    agent = Agent(
        "ask",
        stopped,
        sv.agents,
        file_tools(folder),
        tool_sources=ToolSources(folder).to_json(),
    )
    with pytest.raises(KeyboardInterrupt):
        agent.ask("what is on my list?", run_id="r1")
    assert sv.agents.get("r1").status == "running"
    sv.close()

    # the resumed run reads another file: only a reconnected tool can answer
    model = ScriptedModel([{"tool": "read_file", "args": {"path": "done.md"}}, "Milk."])
    app = FlowdeskApp(settings, model=model)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: any("Resumed" in m for m in messages(app)), timeout=30)
        await settle(pilot)
        assert "Resumed 1 run: 1 completed, 0 failed" in messages(app)
    store = open_store(tmp_path / "t.db")
    try:
        agents = SqliteAgentStore(store)
        assert (agents.get("r1").status, agents.get("r1").response) == ("done", "Milk.")
        answers = [m["content"] for m in agents.messages("r1") if m["role"] == "tool"]
    finally:
        store.close()
    assert answers == ["Buy milk.\n", "Paid rent.\n"]
