"""An agent run remembers the tools it was started with: resuming it with
other tools (say, without `--tools files`) is refused before anything
changes, with what to pass instead; with the same tools it continues. Real
SQLite files, a real `flowdesk` subprocess and a chat server on 127.0.0.1."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.tools import TOOLSET_KEY, tool
from desktop_app.errors import AgentToolsChangedError, ProviderError
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk


def lookup_tools(calls: Counter[str]) -> list:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        calls[q] += 1
        return f"result for {q}"

    return [lookup]


def test_a_run_resumed_without_its_tools_is_refused_and_left_as_it_was(db_path: Path) -> None:
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    calls: Counter[str] = Counter()
    failing = ScriptedModel([ProviderError("the provider refused")])
    started = Agent("helper", failing, astore, lookup_tools(calls)).ask("find x")
    assert started.status == "failed"
    recorded = astore.tool_result(started.run_id, TOOLSET_KEY)
    assert recorded is not None and json.loads(recorded.result or "") == ["lookup"]
    before = astore.get(started.run_id)

    bare = ScriptedModel(["an answer without the tools"])
    with pytest.raises(AgentToolsChangedError, match="started with the tools lookup") as err:
        Agent("helper", bare, astore).resume(started.run_id)
    assert "resumed with none" in str(err.value) and "--tools" in str(err.value)
    assert bare.calls == 0  # refused before the model was asked
    after = astore.get(started.run_id)
    assert (after.status, after.updated_at, after.lease_owner) == (
        before.status,
        before.updated_at,
        before.lease_owner,
    )

    same = ScriptedModel([{"tool": "lookup", "args": {"q": "x"}}, "found x"])
    done = Agent("helper", same, astore, lookup_tools(calls)).resume(started.run_id)
    assert (done.status, done.text) == ("done", "found x")
    assert calls == {"x": 1}
    store.close()


def test_a_run_started_without_tools_records_none_and_resumes_with_any(db_path: Path) -> None:
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    started = Agent("helper", ScriptedModel([ProviderError("down")]), astore).ask("hi")
    assert astore.tool_results(started.run_id) == []  # nothing to remember
    calls: Counter[str] = Counter()
    done = Agent("helper", ScriptedModel(["hello"]), astore, lookup_tools(calls)).resume(
        started.run_id
    )
    assert done.status == "done"
    store.close()


@pytest.mark.scenario("S82")
def test_the_cli_resumes_a_run_started_with_file_tools_with_them(tmp_path: Path) -> None:
    """The run recorded its folder: `flowdesk resume RUN`, as the failure
    prints it, reconnects the file tools by itself."""
    db = tmp_path / "f.db"
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("Buy milk.\n")
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [("status", 400, {}, '{"error": {"message": "bad request"}}')]
        asked = flowdesk(db, "ask", "notes?", "--tools", "files", "--folder", str(folder), env=env)
        assert asked.returncode != 0
        ((run_id, status),) = [
            (r["run_id"], r["status"])
            for r in map(json.loads, flowdesk(db, "runs", "--json").stdout.splitlines())
        ]
        assert status == "failed"
        assert f"(flowdesk --db {db} resume {run_id})" in asked.stderr
        server.script = [("json", completion("Buy milk."))]
        again = flowdesk(db, "resume", run_id, env=env)
        assert again.returncode == 0, again.stderr
        assert "Buy milk." in again.stdout
        tools = sorted(t["function"]["name"] for t in server.requests[-1]["body"]["tools"])
        assert tools == ["ask_user", "list_folder", "read_file"]


def test_folder_without_file_tools_is_refused_before_the_model_is_asked(tmp_path: Path) -> None:
    """`--folder` only roots `--tools files`: given alone it would be ignored
    (a new user's report: the agent then answered with no file tools), so
    it is refused (exit 2) and nothing is asked or recorded."""
    db = tmp_path / "f.db"
    folder = tmp_path / "notes"
    folder.mkdir()
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        asked = flowdesk(db, "ask", "notes?", "--folder", str(folder), env=env)
        assert asked.returncode == 2, asked.stderr
        assert (
            f"--folder {folder} is the root of --tools files, which was not asked for; "
            "add --tools files, or leave --folder out"
        ) in asked.stderr
        assert server.requests == []
        missing = flowdesk(
            db, "ask", "notes?", "--tools", "files", "--folder", str(tmp_path / "x"), env=env
        )
        assert (
            missing.returncode == 2
            and f"--folder {tmp_path / 'x'} is not a folder" in missing.stderr
        )
        assert server.requests == []
    assert flowdesk(db, "runs", "--json").stdout == ""
