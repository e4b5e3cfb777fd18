"""MCP tools for agents: a real MCP server (stdio and streamable HTTP) as a
subprocess, journaled calls that survive SIGKILL, a recorded tool list."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from desktop_app.errors import AgentToolsChangedError
from tests import cli_forkserver
from tests.cli_forkserver import module_command

REPO = Path(__file__).resolve().parents[1]


def require(module: str):
    """Import ``module``; under CI=true a missing one fails the test instead of skipping."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture(autouse=True)
def _needs_mcp():
    require("mcp")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Worker:
    """tests/mcp_agent_worker.py in its own process group (it and its MCP server)."""

    def __init__(self, db: Path, run_id: str, log: Path, mode: str) -> None:
        self.proc = cli_forkserver.popen(
            [
                sys.executable,
                str(REPO / "tests" / "mcp_agent_worker.py"),
                str(db),
                run_id,
                str(log),
                mode,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        self.watchdog = threading.Timer(90, self.kill)  # a hung worker fails, never hangs CI
        self.watchdog.start()

    def line(self) -> str:
        return self.proc.stdout.readline().strip()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate()
        self.watchdog.cancel()
        self.kill()  # the MCP server too, should it outlive its parent
        return self.proc.returncode, out, err


def journal(db: Path, run_id: str) -> dict[str, tuple[str, str, int]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT tool_key, status, result, attempts FROM agent_tool_results WHERE run_id=?",
            (run_id,),
        ).fetchall()
    finally:
        conn.close()
    return {k: (s, r, a) for k, s, r, a in rows}


@pytest.mark.scenario("S74")
@pytest.mark.slow
def test_mcp_tool_is_not_called_again_after_sigkill(db_path, tmp_path):
    notes = tmp_path / "notes.log"
    first = Worker(db_path, "r1", notes, "first")
    assert first.line() == "TOOL_JOURNALED", first.finish()
    first.kill()
    first.finish()
    assert first.proc.returncode == -signal.SIGKILL
    assert lines(notes) == ["hello"]
    rows = journal(db_path, "r1")
    assert rows['notes__append:{"text":"hello"}'][:2] == ("completed", "appended; 1 lines")
    listing = json.loads(rows["mcp/tools_list:notes"][1])
    assert [t["name"] for t in listing] == ["append", "append_and_hang"]

    # a fresh process, a fresh server: the identical call is answered from the journal
    code, out, err = Worker(db_path, "r1", notes, "again").finish()
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"status": "done", "text": "noted"}
    assert lines(notes) == ["hello"]  # exactly one call of the MCP tool
    conn = sqlite3.connect(db_path)
    tool_messages = [
        json.loads(b)
        for (b,) in conn.execute(
            "SELECT body FROM agent_messages WHERE run_id='r1' AND role='tool' ORDER BY seq"
        )
    ]
    (reused,) = conn.execute(
        "SELECT reused FROM agent_tool_results WHERE run_id='r1' AND tool='notes__append'"
    ).fetchone()
    conn.close()
    assert [(m["content"], m.get("reused", False)) for m in tool_messages] == [
        ("appended; 1 lines", False),
        ("appended; 1 lines", True),
    ]
    assert reused == 1


@pytest.mark.scenario("S74")
@pytest.mark.slow
def test_mcp_call_in_flight_at_sigkill_is_not_sent_again(db_path, tmp_path):
    notes = tmp_path / "notes.log"
    worker = Worker(db_path, "r2", notes, "hang")
    assert worker.line() == "TOOL_STARTED", worker.finish()
    # the server prints this on the worker's stderr after its line is fsynced
    for line in worker.proc.stderr:
        if line.strip() == "APPENDED x":
            break
    else:
        pytest.fail(f"the server never appended: {worker.finish()}")
    worker.kill()
    worker.finish()
    assert journal(db_path, "r2")['notes__append_and_hang:{"text":"x"}'][0] == "in_progress"

    code, out, err = Worker(db_path, "r2", notes, "after-hang").finish()
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["status"] == "done"
    assert lines(notes) == ["x"]  # not sent twice
    conn = sqlite3.connect(db_path)
    (body,) = conn.execute(
        "SELECT body FROM agent_messages WHERE run_id='r2' AND role='tool'"
    ).fetchone()
    conn.close()
    assert "interrupted before its result was saved" in json.loads(body)["content"]


class HttpNotesServer:
    """tests/mcp_notes_server.py over streamable HTTP on 127.0.0.1 (a free port it reports)."""

    def __init__(self, log: Path, variant: str = "1") -> None:
        self.proc = cli_forkserver.popen(
            [sys.executable, "-m", "tests.mcp_notes_server", str(log), "http"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "NOTES_VARIANT": variant},
        )
        first = self.proc.stdout.readline().split()
        assert first and first[0] == "PORT", first
        self.url = f"http://127.0.0.1:{first[1]}/mcp"

    def __enter__(self) -> HttpNotesServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.scenario("S91")
def test_streamable_http_server_tools_and_a_changed_tool_list_is_noticed(sqlite_store, tmp_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer, describe_tools, recorded_tools
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    notes = tmp_path / "notes.log"
    store = SqliteAgentStore(sqlite_store)
    script = [
        {"id": "a", "tool": "notes__append", "args": {"text": "over http"}},
        {"id": "q", "tool": "ask_user", "args": {"question": "more?"}},
    ]
    with HttpNotesServer(notes) as http, McpServer("notes", url=http.url, timeout_s=30) as server:
        assert [row["name"] for row in describe_tools([server])] == [
            "notes__append",
            "notes__append_and_hang",
        ]
        agent = Agent("notes", ScriptedModel(script), store, server.tools())
        res = agent.ask("note it", run_id="h1")
        assert (res.status, res.question) == ("input_required", "more?")
    assert lines(notes) == ["over http"]
    assert store.tool_result("h1", 'notes__append:{"text":"over http"}').result == (
        "appended; 1 lines"
    )
    recorded = recorded_tools(store.tool_results("h1"))  # what the app's agent view shows
    assert [(r["server"], r["name"]) for r in recorded] == [
        ("notes", "notes__append"),
        ("notes", "notes__append_and_hang"),
    ]

    # the same server's append now takes another argument: the run, which called
    # append, is not continued with it; the message names the tool and the field
    with (
        HttpNotesServer(notes, variant="tagged") as http,
        McpServer("notes", url=http.url, timeout_s=30) as server,
    ):
        model = ScriptedModel(["unreached"])
        agent = Agent("notes", model, store, server.tools())
        res = agent.resume_input("h1", "yes")
    assert res.status == "failed"
    assert "tools of MCP server 'notes' that this run used changed" in res.error
    changed = "notes__append takes other input (input_schema: properties.tag, required)"
    assert changed in res.error
    assert store.get("h1").error_type == "McpToolsChangedError"
    assert model.calls == 0 and lines(notes) == ["over http"]

    # resumed without the server at all: refused before anything changes, nothing mixed
    before = store.tool_results("h1")
    with pytest.raises(AgentToolsChangedError, match="started with the tools of MCP server notes"):
        Agent("notes", ScriptedModel(["unreached"]), store).resume("h1")
    assert store.get("h1").status == "failed" and store.tool_results("h1") == before

    # a tool the run never used was added: the run goes on where it stopped
    with (
        HttpNotesServer(notes, variant="2") as http,
        McpServer("notes", url=http.url, timeout_s=30) as server,
    ):
        res = Agent("notes", ScriptedModel(["all noted"]), store, server.tools()).resume("h1")
    assert (res.status, res.text) == ("done", "all noted")
    assert lines(notes) == ["over http"]


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path):
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import ConfigError, McpError

    with pytest.raises(ConfigError, match="exactly one of command"):
        McpServer("x")
    missing = tmp_path / "no-such-server"
    with pytest.raises(McpError, match="cannot connect to MCP server 'x'") as info:
        McpServer("x", command=[str(missing)], timeout_s=20).open()
    assert str(missing) in str(info.value)


def _cli(db: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(
        ["--db", str(db), *args], env={**os.environ, **env}, cwd=REPO, timeout=120
    )


def test_flowdesk_ask_with_mcp_uses_the_configured_server(tmp_path):
    from tests.chat_server import ChatServer, completion

    db = tmp_path / "f.db"
    notes = tmp_path / "notes.log"
    config = tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(notes), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    env = {"FLOWDESK_CONFIG": str(config)}
    assert _cli(db, "db", "apply", env=env).returncode == 0
    with ChatServer() as chat:
        chat.script = [
            ("json", completion("", [{"id": "a", "name": "notes__append", "args": {"text": "x"}}])),
            ("json", completion("Noted.")),
        ]
        env |= {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        unknown = _cli(db, "ask", "note hi", "--mcp", "nope", env=env)
        assert unknown.returncode == 2
        assert "no MCP server 'nope'" in unknown.stderr and "configured: notes" in unknown.stderr
        out = _cli(db, "ask", "note hi", "--mcp", "notes", env=env)
        assert out.returncode == 0, out.stderr
        assert "Noted." in out.stdout and "[notes__append…]" in out.stderr
        offered = [t["function"]["name"] for t in chat.requests[0]["body"]["tools"]]
        assert "notes__append" in offered and "notes__append_and_hang" in offered
        answers = [m for m in chat.requests[1]["body"]["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in answers] == ["appended; 1 lines"]
    assert lines(notes) == ["x"]
    # the server's stderr goes to its own private log, not over the answer
    server_log = Path(os.environ["HOME"]) / ".local/state/flowdesk/log/mcp-notes.log"
    assert "APPENDED x" in server_log.read_text() and "APPENDED" not in out.stderr
    assert stat.S_IMODE(server_log.stat().st_mode) == 0o600


def test_a_server_that_went_away_is_an_error_text_for_the_model(sqlite_store, tmp_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    notes = tmp_path / "notes.log"
    store = SqliteAgentStore(sqlite_store)
    model = ScriptedModel([{"id": "a", "tool": "notes__append", "args": {"text": "t"}}, "sorry"])
    with HttpNotesServer(notes) as http, McpServer("notes", url=http.url, timeout_s=5) as server:
        http.proc.kill()
        http.proc.wait()
        res = Agent("notes", model, store, server.tools()).ask("note t", run_id="g1")
    assert (res.status, res.text) == ("done", "sorry")
    (tool_message,) = [m for m in model.seen[1] if m.role == "tool"]
    assert "MCP server 'notes'" in tool_message.content and "error" in tool_message.content
    assert lines(notes) == []


def test_a_read_only_mcp_tool_is_sent_again_after_a_write(sqlite_store, tmp_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    notes = tmp_path / "notes.log"
    store = SqliteAgentStore(sqlite_store)
    count = {"tool": "notes__line_count", "args": {}}
    script = [count, {"tool": "notes__append", "args": {"text": "x"}}, count, "ok"]
    model = ScriptedModel(script)
    command = module_command("tests.mcp_notes_server", str(notes), "stdio")
    with McpServer(
        "notes", command=command, cwd=REPO, env={"NOTES_VARIANT": "read"}, timeout_s=20
    ) as server:
        tools = {t.name: t for t in server.tools()}
        assert tools["notes__line_count"].read_only and not tools["notes__append"].read_only
        res = Agent("notes", model, store, server.tools()).ask("count, note x, count")
    assert res.status == "done"
    answers = [m for m in store.messages(res.run_id) if m["role"] == "tool"]
    assert [m["content"] for m in answers] == ["0", "appended; 1 lines", "1"]
    assert not any(m.get("reused") for m in answers)
