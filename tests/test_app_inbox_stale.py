"""The inbox acts only on the question the person selected, never on one
that moved under the cursor: a question answered elsewhere (the real
``flowdesk`` command in a process of its own) while it was selected leaves
no row selected, ``y`` then answers nothing and says why; and an answer
carries the wait the person saw, so a run that asks something else by then
refuses it.

Real things: a SQLite file, the ``approval`` example flow, an agent run
waiting for a tool call's approval (the project's MCP notes server as a
subprocess), a scripted model server on 127.0.0.1, the app driven headless
with Pilot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from desktop_app.errors import RunStateError
from desktop_app.examples.approval import approval
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk
from tests.test_tool_approval import DONE, append, lines, notes_config, record, require, worker

FLOWS = json.dumps(["desktop_app.examples.approval:approval"])


def _approved(db: Path, run_id: str) -> object:
    """The order's answer as stored (``None`` while it waits for one)."""
    store = open_store(db)
    try:
        return store.latest(run_id).state.get("approved")
    finally:
        store.close()


async def test_y_after_the_selected_question_was_answered_elsewhere_answers_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("mcp")
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.app_support import messages, open_inbox, settle, wait_until
    from tests.test_tool_approval import stored_run

    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(
        tmp_path, log, 'require_approval = ["append"]', top=f"db_path = {json.dumps(str(db))}"
    )
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS)
    with ChatServer() as server:
        env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [append("milk"), ("json", completion("Noted."))]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env)
        assert started.returncode == 0, started.stderr
        asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
        assert asked.returncode == 0, asked.stderr
        agent_run = stored_run(db).run_id
        settings = load_settings()
        bootstrap.apply_schema(settings)
        app = FlowdeskApp(settings, flows=[approval])
        async with app.run_test(size=(200, 45)) as pilot:
            screen = await open_inbox(pilot)
            assert [(i.kind, i.prompt) for i in screen.items] == [
                ("flow", "Ship this order?"),
                ("agent", 'approve the call notes__append {"text":"milk"}? (yes/no)'),
            ]
            order_run, source = screen.items[0].run_id, screen.items[1].source
            assert source.startswith("agent ")
            await pilot.press("down")  # the person selects the agent's approval
            assert screen.selected is not None and screen.selected.run_id == agent_run

            # ... and someone answers it from the command line meanwhile
            answered = flowdesk(db, "answer", agent_run[:8], "yes", env=env)
            assert answered.returncode == 0, answered.stderr
            await wait_until(pilot, lambda: len(screen.items) == 1, timeout=30)
            await settle(pilot)
            assert screen.selected is None  # not the order that moved into its row
            said = f"A{source[1:]} {agent_run[:8]}'s question was answered elsewhere"
            assert any(m.startswith(said) for m in messages(app, "warning")), messages(app)
            assert "No question is selected: ↑ or ↓ picks one." in str(
                app.screen.query_one("#inbox-status").render()
            )

            refused = f"{said}; nothing was sent: ↑ or ↓ picks a question"
            for key in ("y", "n", "enter"):
                before = len(messages(app))
                await pilot.press(key)
                await settle(pilot)
                assert app.screen is screen  # enter opened no answer dialog
                assert _approved(db, order_run) is None  # the order was not answered
                assert [i.run_id for i in screen.items] == [order_run]
                new = messages(app)[before:]
                assert any(m.startswith(refused) for m in new), (key, new)

            # picking the order again, on purpose, and y approves it
            await pilot.press("down")
            assert screen.selected is not None and screen.selected.run_id == order_run
            await pilot.press("y")
            await wait_until(pilot, lambda: _approved(db, order_run) == "yes", timeout=30)
            await settle(pilot)
    assert lines(log) == ["milk"]  # the agent's call ran once, approved from the CLI
    assert not messages(app, "error")


def test_an_agent_answer_for_a_question_answered_elsewhere_is_refused(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale screen's "yes" (the wait id it read) never approves the next
    call the run asks about; the current wait id does."""
    from desktop_app.agent.approvals import agent_wait_id
    from desktop_app.agent.recovery import resume_with_recorded_tools
    from desktop_app.config import load_settings
    from tests import approval_agent_worker

    log = tmp_path / "ledger"
    monkeypatch.setattr(approval_agent_worker.ARGS, "log", str(log), raising=False)
    with ChatServer() as server:
        server.script = [record("a", "c1"), record("b", "c2"), DONE]
        assert worker(db_path, log, server, "ask").returncode == 0
        store = open_store(db_path)
        try:
            agents = SqliteAgentStore(store)
            (run,) = agents.list()
            seen = agent_wait_id(run.pending_call)
            assert seen is not None and seen.startswith("approval/1:")
            # another process answers it; the run asks about a second call
            r = worker(db_path, log, server, "answer", "yes")
            assert "question approve the call record_value" in r.stdout, r.stderr
            agent = approval_agent_worker.ledger_agent(agents, server.url)
            with pytest.raises(RunStateError, match="answered elsewhere"):
                agent.resume_input(run.run_id, "yes", wait_id=seen)
            settings = load_settings(db_path=db_path)
            with pytest.raises(RunStateError, match="it asks another question now"):
                resume_with_recorded_tools(
                    agents, settings, None, agents.get(run.run_id), "yes", wait_id=seen
                )
            now = agents.get(run.run_id)
            assert now.status == "input_required" and now.lease_owner is None
            assert lines(log) == ["record a"]  # the second call did not run
            current = agent_wait_id(now.pending_call)
            assert current is not None and current.startswith("approval/2:")
            assert agent.resume_input(run.run_id, "yes", wait_id=current).status == "done"
            assert lines(log) == ["record a", "record b"]
        finally:
            store.close()


async def test_a_row_whose_run_asks_another_question_is_not_the_selected_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same agent run, the same row, another question (answered from the
    command line, the agent asked about a second call): nothing is selected,
    and ``y`` approves neither call."""
    require("mcp")
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from tests.app_support import messages, open_inbox, settle, wait_until
    from tests.test_tool_approval import stored_run

    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(
        tmp_path, log, 'require_approval = ["append"]', top=f"db_path = {json.dumps(str(db))}"
    )
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    with ChatServer() as server:
        env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [append("milk", "a"), append("eggs", "b")]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        assert flowdesk(db, "ask", "note it", "--mcp", "notes", env=env).returncode == 0
        run_id = stored_run(db).run_id
        settings = load_settings()
        bootstrap.apply_schema(settings)
        app = FlowdeskApp(settings, flows=[])
        async with app.run_test(size=(200, 45)) as pilot:
            screen = await open_inbox(pilot)
            (first,) = screen.items
            assert screen.selected == first and '"milk"' in first.prompt
            answered = flowdesk(db, "answer", run_id, "yes", env=env)
            assert answered.returncode == 0, answered.stderr
            await wait_until(pilot, lambda: '"eggs"' in screen.items[0].prompt, timeout=30)
            await settle(pilot)
            (second,) = screen.items
            assert second.key == first.key and second.wait_id != first.wait_id
            assert screen.selected is None
            await pilot.press("y")
            await settle(pilot)
            assert not screen.answering
            assert stored_run(db).status == "input_required"
            said = "question was answered elsewhere; nothing was sent"
            assert any(said in m for m in messages(app, "warning")), messages(app)
    assert lines(log) == ["milk"]  # eggs was never approved
