"""``q`` while an approved tool call of Flowdesk's own agent runtime runs in
the app: the app waits for the call to end and its result to be saved, then
the run stops before its next model request, stays interrupted, and its
resume reuses the saved result (the call ran once, its result known).

Before, the app closed its database while the call ran (only Pydantic AI's
runs were waited for): the result could not be saved and the resume
reported the call's outcome unknown. A real MCP server subprocess (the
notes server's ``append_at_gate``, in flight until the test opens its gate),
a scripted model server on 127.0.0.1, a real SQLite file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk
from tests.test_app_inbox_approval import app_with_the_model, the_approval_in_the_inbox
from tests.test_tool_approval import lines, require, stored_run


@pytest.mark.slow
async def test_q_during_an_approved_call_saves_its_result_and_the_resume_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("mcp")
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import open_store
    from tests.app_support import messages, wait_until
    from tests.cli_forkserver import module_command
    from tests.cli_support import REPO

    db, log, gate = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "gate"
    config = tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        f"db_path = {json.dumps(str(db))}\n[mcp_servers.notes]\n"
        f"command = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
        'require_approval = ["append_at_gate"]\n'
        f'[mcp_servers.notes.env]\nNOTES_VARIANT = "gate"\nNOTES_GATE = {json.dumps(str(gate))}\n'
    )
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    call = {"id": "a", "name": "notes__append_at_gate", "args": {"text": "milk"}}
    with ChatServer() as server:
        env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [("json", completion("", [call])), ("json", completion("Noted."))]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
        assert asked.returncode == 0, asked.stderr
        run_id = stored_run(db).run_id
        assert stored_run(db).status == "input_required"
        app = app_with_the_model(monkeypatch, server.url)
        async with app.run_test(size=(200, 45)) as pilot:
            await the_approval_in_the_inbox(pilot)
            await pilot.press("y")
            await wait_until(pilot, lambda: lines(log) == ["milk"], timeout=60)  # in flight
            await pilot.press("q")  # the app says it waits for the call, and stays up
            await wait_until(pilot, lambda: any("Quitting once" in m for m in messages(app)))
            await pilot.pause(0.5)
            assert app.is_running and lines(log) == ["milk"]
            gate.touch()  # the call ends: the app quits by itself
            await wait_until(pilot, lambda: not app.is_running, timeout=30)
        assert len(server.requests) == 1  # the app made no model request after the call

        store = open_store(db)
        try:
            agents = SqliteAgentStore(store)
            results = agents.tool_results(run_id)
            (result,) = [r for r in results if r.tool == "notes__append_at_gate"]
            run = agents.get(run_id)
        finally:
            store.close()
        assert result.status == "completed"  # saved, not unknown
        assert "appended at the gate" in (result.result or "")
        assert run.status == "running" and run.lease_owner is None  # interrupted, free

        resumed = flowdesk(db, "resume", run_id, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "Noted." in resumed.stdout
    assert lines(log) == ["milk"]  # the call ran once
    assert stored_run(db).status == "done"
