"""What a user meets using `flowdesk ask`: `ask --resume` streams and shows
its tool calls as a new ask does, `show` counts tool calls only, the system
prompt names the tools the agent has (or the one the settings give), each
MCP server says it is connecting, and runs leave their starts, ends, resumes
and takeovers in flowdesk.log.

Real `flowdesk` subprocesses, a scripted model server on 127.0.0.1, the
project's test MCP server; a crash is a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, flowdesk
from tests.test_cli_agent_resume import HANG, cli, interrupt, model_env

LIST = completion("", [{"id": "a", "name": "list_folder", "args": {"path": "."}}])
READ = completion("", [{"id": "b", "name": "read_file", "args": {"path": "todo.md"}}])


def notes_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("# Todo\n\nBuy milk.\n")
    return folder


def log_text() -> str:
    """flowdesk.log in the log folder the conftest gives each test."""
    state = Path(os.environ["XDG_STATE_HOME"])
    return "".join(p.read_text() for p in state.rglob("flowdesk.log*"))


def test_ask_resume_after_kill_9_streams_shows_tools_and_logs_the_takeover(tmp_path: Path) -> None:
    db, folder = tmp_path / "f.db", notes_folder(tmp_path)
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_MODEL__API_KEY="sk-never-in-the-log")
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", LIST), HANG, ("json", READ), ("json", completion("Milk."))]
        asked = cli("--db", str(db), "ask", "todo?", "--tools", "files", "--folder", str(folder),
                    env=env)  # fmt: skip
        err = interrupt(asked, server, 2, signal.SIGKILL)
        (run_id,) = re.findall(r"^run (\w+) \(if interrupted: flowdesk [^)]*\)$", err, re.M)
        resumed = flowdesk(db, "ask", "--resume", run_id, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "Milk." in resumed.stdout
        assert "[read_file…]" in resumed.stderr  # its tool lines, as a new ask prints them
        assert all(r["body"].get("stream") for r in server.requests)  # and it streams
        shown = flowdesk(db, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "tool calls: 2" in shown.stdout  # list_folder and read_file; not the records
    assert "recorded: " in shown.stdout
    log = log_text()
    assert f"run {run_id} started" in log and f"run {run_id} ended done" in log
    assert re.search(rf"run {run_id}: \S+ takes it over from \S+ \(owner gone\)", log), log
    assert f"run {run_id} resumed" in log
    assert "command ask started" in log and "command ask exited 0" in log
    assert "sk-never-in-the-log" not in log


def test_a_flow_run_logs_its_start_end_and_takeover(tmp_path: Path) -> None:
    db, folder = tmp_path / "f.db", notes_folder(tmp_path)
    with ChatServer() as server:
        env = model_env(server)
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [HANG, ("json", completion("Summary."))]
        out = tmp_path / "o"
        digest = cli("--db", str(db), "run", "digest", "--folder", str(folder), "--out", str(out),
                     "--model", "--quiet", env=env)  # fmt: skip
        interrupt(digest, server, 1, signal.SIGKILL)
        resumed = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(out),
                           "--model", "--quiet", env=env)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    (run_id,) = re.findall(r"run (\w+) of flow digest created", log_text())
    log = log_text()
    assert re.search(rf"run {run_id}: \S+ takes it over from \S+ \(owner gone\)", log), log
    assert f"run {run_id} of flow digest resumed" in log
    assert f"run {run_id} stopped here: completed" in log
    assert f"agent digest-summary: run {run_id}:todo.md ended done" in log


def test_the_system_prompt_names_the_tools_the_agent_has_or_the_settings_one(
    tmp_path: Path,
) -> None:
    db, folder = tmp_path / "f.db", notes_folder(tmp_path)
    with ChatServer() as server:
        env = model_env(server)
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", completion("Paris."))] * 3
        assert flowdesk(db, "ask", "capital of France?", env=env).returncode == 0
        files = ["--tools", "files", "--folder", str(folder)]
        assert flowdesk(db, "ask", "todo?", *files, env=env).returncode == 0
        own = {**env, "FLOWDESK_AGENTS__ASK__SYSTEM": "Answer as a pirate."}
        assert flowdesk(db, "ask", "todo?", *files, env=own).returncode == 0
        systems = [r["body"]["messages"][0] for r in server.requests]
    assert {m["role"] for m in systems} == {"system"}
    none, with_files, configured = (m["content"] for m in systems)
    assert "no tools" in none and "file" not in none
    assert "list_folder, read_file" in with_files
    assert configured == "Answer as a pirate."


def test_ask_says_it_is_connecting_to_each_mcp_server_on_stderr_only(tmp_path: Path) -> None:
    db, config = tmp_path / "f.db", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(tmp_path / "n.log"), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", completion("Nothing to note."))]
        out = cli_forkserver.run_argv(
            [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "ask", "hi", "--mcp",
             "notes"],
            capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "connecting to MCP server notes…" in out.stderr
    assert out.stdout.strip() == "Nothing to note."  # piped output is the answer alone
    assert "MCP server notes connected" in log_text()


def test_ask_resume_with_an_answer_streams_and_shows_tools(tmp_path: Path) -> None:
    db, folder = tmp_path / "f.db", notes_folder(tmp_path)
    ask_user = completion("", [{"id": "q", "name": "ask_user", "args": {"question": "Which?"}}])
    with ChatServer() as server:
        env = model_env(server)
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", ask_user), ("json", READ), ("json", completion("Milk."))]
        files = ["--tools", "files", "--folder", str(folder)]
        asked = flowdesk(db, "ask", "todo?", *files, env=env)
        assert asked.returncode == 0 and "the agent asks: Which?" in asked.stdout
        (run_id,) = re.findall(r"^run (\w+) \(if interrupted", asked.stderr, re.M)
        answered = flowdesk(db, "ask", "--resume", run_id, "--answer", "todo.md", env=env)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.strip() == "Milk." and "[read_file…]" in answered.stderr
        assert all(r["body"].get("stream") for r in server.requests)
