"""Outcomes recorded as they are, against real MCP servers: a call in flight
when its server dies or times out is "outcome unknown" and never repeated
(S89); a read-only tool is called again after a write, a tool with side
effects is reused (S90); a resume goes on when only descriptions, annotations
or unused tools changed and names each used tool that changed (S91); a
destructive tool in flight at SIGKILL is not re-sent, an idempotent harmless
one is. The published servers come from tests/published_servers.py."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.published_servers import node_server, python_server
from tests.test_mcp_tools import REPO, HttpNotesServer, journal, lines, require


@pytest.fixture(autouse=True)
def _needs_mcp():
    require("mcp")


def tool_messages(db: Path, run_id: str) -> list[dict]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT body FROM agent_messages WHERE run_id=? AND role='tool' ORDER BY seq",
            (run_id,),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(b) for (b,) in rows]


def cli(db: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(
        ["--db", str(db), *args], env={**os.environ, **env}, cwd=REPO, timeout=120
    )


def flowdesk_log() -> str:
    path = Path(os.environ["XDG_STATE_HOME"]) / "flowdesk" / "log" / "flowdesk.log"
    return path.read_text() if path.exists() else ""


# -- S89: no answer is not a failure ------------------------------------------


@pytest.mark.scenario("S89")
@pytest.mark.slow
def test_a_call_whose_server_dies_mid_call_is_outcome_unknown_and_not_repeated(tmp_path):
    """`flowdesk ask --mcp notes`: the stdio server appends, then is killed -9
    before it answers. The run records the outcome as unknown (the model is
    told so, not that it failed), answers the model's identical retry from that
    record without sending it, and `show` and flowdesk.log say what happened."""
    from tests.chat_server import ChatServer, completion

    db, notes, pidfile = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "server.pid"
    command = cli_forkserver.module_command("tests.mcp_notes_server", str(notes), "stdio")
    config = tmp_path / "config.toml"
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
        f"env = {{ NOTES_PIDFILE = {json.dumps(str(pidfile))} }}\n"
    )
    env = {"FLOWDESK_CONFIG": str(config)}
    assert cli(db, "db", "apply", env=env).returncode == 0
    hang = {"name": "notes__append_and_hang", "args": {"text": "x"}}
    with ChatServer() as chat:
        chat.script = [
            ("json", completion("", [{"id": "a", **hang}])),
            ("json", completion("", [{"id": "b", **hang}])),  # the model tries again
            ("json", completion("Could not tell.")),
        ]
        env |= {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        ask = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "ask", "note x",
             "--mcp", "notes"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, **env},
        )  # fmt: skip
        watchdog = threading.Timer(90, ask.kill)
        watchdog.start()
        try:
            for _ in range(600):  # the server appended and hangs: kill it mid-call
                if lines(notes) == ["x"] and pidfile.exists():
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"the server never appended: {ask.communicate(timeout=5)}")
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            out, err = ask.communicate(timeout=90)
        finally:
            watchdog.cancel()
            ask.kill()
        assert ask.returncode == 0, err
        assert "Could not tell." in out
        answers = [m for m in chat.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert lines(notes) == ["x"]  # sent once, never again
    (answer,) = answers
    told = json.loads(answer["content"])
    assert told["outcome"] == "unknown" and "MCP server 'notes' closed" in told["error"]
    assert "whether it took effect is unknown" in told["error"]
    run_id = err.split("run ", 1)[1].split()[0]
    messages = tool_messages(db, run_id)
    assert [m.get("reused", False) for m in messages] == [False, True]
    assert messages[0]["content"] == messages[1]["content"] == answer["content"]

    shown = cli(db, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("(outcome unknown: not repeated)") == 2
    assert "notes__append_and_hang unknown" in " ".join(shown.stdout.split())
    as_json = json.loads(cli(db, "show", run_id, "--json", env=env).stdout)
    calls = [t for t in as_json["tool_results"] if t["tool"] == "notes__append_and_hang"]
    assert [(t["outcome_unknown"], t["attempts"], t["reused"]) for t in calls] == [(True, 1, 1)]

    log = flowdesk_log()
    assert (
        f"agent run {run_id}: MCP server 'notes' closed the connection before answering "
        "'append_and_hang' (the server died or hung up)" in log
    )
    assert f"agent ask: run {run_id} started" in log
    assert f"agent ask: run {run_id} ended done" in log


@pytest.mark.scenario("S89")
def test_a_call_that_times_out_is_outcome_unknown_and_not_repeated(sqlite_store, tmp_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.agent.messages import is_outcome_unknown
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    notes = tmp_path / "notes.log"
    store = SqliteAgentStore(sqlite_store)
    hang = {"tool": "notes__append_and_hang", "args": {"text": "t"}}
    model = ScriptedModel([hang, hang, "gave up"])
    with HttpNotesServer(notes) as http, McpServer("notes", url=http.url, timeout_s=30) as server:
        server.timeout_s = 3  # started in time; now each request waits 3 s for its answer
        res = Agent("notes", model, store, server.tools()).ask("note t", run_id="t1")
    assert (res.status, res.text) == ("done", "gave up")
    assert lines(notes) == ["t"]
    first, second = (m for m in store.messages("t1") if m["role"] == "tool")
    assert is_outcome_unknown(first["content"]) and "did not answer" in first["content"]
    assert second["reused"] and second["content"] == first["content"]
    status, result, attempts = journal(Path(sqlite_store.path), "t1")[
        'notes__append_and_hang:{"text":"t"}'
    ]
    assert (status, attempts) == ("completed", 1) and is_outcome_unknown(result)


def test_a_server_that_cannot_start_for_a_resume_is_logged_with_the_run_id(db_path, tmp_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.recovery import ToolSources
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import open_store

    sqlite = open_store(db_path)
    sources = ToolSources(mcp=("notes",)).to_json()
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "go on?"}}])
    agent = Agent("ask", model, SqliteAgentStore(sqlite), tool_sources=sources)
    assert agent.ask("start", run_id="b1").status == "input_required"
    sqlite.close()
    missing = tmp_path / "no-such-server"
    config = tmp_path / "config.toml"
    config.write_text(f"[mcp_servers.notes]\ncommand = [{json.dumps(str(missing))}]\n")
    env = {
        "FLOWDESK_CONFIG": str(config),
        "FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9/v1",  # never reached
        "FLOWDESK_MODEL__MODEL": "m",
    }
    out = cli(db_path, "ask", "--resume", "b1", "--answer", "yes", env=env)
    assert out.returncode != 0 and "cannot connect to MCP server 'notes'" in out.stderr
    assert "agent run b1: cannot connect to MCP server 'notes'" in flowdesk_log()


def test_only_our_own_unknown_outcome_answers_read_as_unknown():
    from desktop_app.agent.messages import is_outcome_unknown, outcome_unknown

    assert is_outcome_unknown(outcome_unknown("no answer"))
    for other in (None, "", "unknown", '{"error": "x"}', '{"outcome": "unknown"}', "{bad"):
        assert not is_outcome_unknown(other)
    assert not is_outcome_unknown('{"error": "x", "outcome": "known"}')


# -- S90: reads after writes against the published memory server --------------


@pytest.mark.scenario("S90")
@pytest.mark.slow
def test_the_memory_servers_read_graph_sees_create_entities_and_writes_are_reused(
    sqlite_store, tmp_path, monkeypatch
):
    """`read_graph` (readOnlyHint) after `create_entities` is sent again and
    sees the new entity; the identical `create_entities` later in the run is
    answered from the journal. The server's file comes from the environment,
    through ``env_passthrough``."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.config import McpServerSettings
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    memory_file = tmp_path / "memory.jsonl"
    monkeypatch.setenv("MEMORY_FILE_PATH", str(memory_file))
    cfg = McpServerSettings(
        command=node_server("memory"), env_passthrough=["MEMORY_FILE_PATH"], timeout_s=60
    )
    store = SqliteAgentStore(sqlite_store)
    entity = {"name": "ada", "entityType": "person", "observations": ["wrote notes"]}
    read = {"tool": "memory__read_graph", "args": {}}
    write = {"tool": "memory__create_entities", "args": {"entities": [entity]}}
    model = ScriptedModel([read, write, read, write, "remembered"])
    with McpServer.from_settings("memory", cfg) as server:
        tools = {t.name: t for t in server.tools()}
        assert tools["memory__read_graph"].read_only
        assert not tools["memory__create_entities"].read_only
        res = Agent("memory", model, store, server.tools()).ask("remember ada", run_id="m1")
    assert (res.status, res.text) == ("done", "remembered")
    answers = [m for m in store.messages("m1") if m["role"] == "tool"]
    graphs = [json.loads(answers[i]["content"]) for i in (0, 2)]
    assert [[e["name"] for e in g["entities"]] for g in graphs] == [[], ["ada"]]
    assert [m.get("reused", False) for m in answers] == [False, False, False, True]
    assert answers[3]["content"] == answers[1]["content"]
    # the server wrote where the passed-through variable said
    saved = [json.loads(line) for line in memory_file.read_text().splitlines()]
    assert [e["name"] for e in saved if e.get("type") == "entity"] == ["ada"]


def test_env_passthrough_passes_only_named_variables_that_are_set(monkeypatch):
    from desktop_app.config import McpServerSettings

    monkeypatch.setenv("MEMORY_FILE_PATH", "/tmp/m.jsonl")
    monkeypatch.setenv("SECRET_TOKEN", "s3cret")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    cfg = McpServerSettings(
        command=["x"], env={"MODE": "a"}, env_passthrough=["MEMORY_FILE_PATH", "NOT_SET_HERE"]
    )
    assert cfg.server_env() == {"MEMORY_FILE_PATH": "/tmp/m.jsonl", "MODE": "a"}
    override = McpServerSettings(
        command=["x"], env={"MEMORY_FILE_PATH": "/b"}, env_passthrough=["MEMORY_FILE_PATH"]
    )
    assert override.server_env() == {"MEMORY_FILE_PATH": "/b"}


# -- S91: what changed on the server, and whether it matters ------------------


def _start_run(store, server, script, run_id):
    from desktop_app.agent import Agent, ScriptedModel

    res = Agent("t", ScriptedModel(script), store, server.tools()).ask("go", run_id=run_id)
    assert res.status == "input_required", res
    return res


def _recorded(store, run_id: str, server: str) -> list[dict]:
    return json.loads(store.tool_result(run_id, f"mcp/tools_list:{server}").result)


def _rerecord(store, run_id: str, server: str, listing: list[dict]) -> None:
    """Put ``listing`` in the run as the list recorded when it started (an
    older version of the server)."""
    from desktop_app.agent.messages import canonical_json

    key = f"mcp/tools_list:{server}"
    store.update(
        run_id, time.time(), tool=(key, f"mcp:{server}", "completed", canonical_json(listing))
    )


@pytest.mark.scenario("S91")
@pytest.mark.slow
def test_a_resume_goes_on_when_only_descriptions_annotations_or_unused_tools_changed(
    sqlite_store,
):
    """The time server restarted in another timezone (its input schemas'
    descriptions change) and a filesystem server whose previous version had no
    ``openWorldHint`` and one tool fewer: the run goes on."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    store = SqliteAgentStore(sqlite_store)
    now = {"tool": "time__get_current_time", "args": {"timezone": "UTC"}}
    ask = {"tool": "ask_user", "args": {"question": "and now?"}}
    paris = python_server("mcp_server_time", "--local-timezone", "Europe/Paris")
    with McpServer("time", command=paris, timeout_s=60) as server:
        _start_run(store, server, [now, ask], "c1")
    recorded = _recorded(store, "c1", "time")
    assert "Europe/Paris" in json.dumps(recorded)

    new_york = python_server("mcp_server_time", "--local-timezone", "America/New_York")
    with McpServer("time", command=new_york, timeout_s=60) as server:
        assert server.listing() != json.dumps(recorded)  # the descriptions differ
        model = ScriptedModel([now, "it is later"])
        res = Agent("t", model, store, server.tools()).resume_input("c1", "now")
    assert (res.status, res.text) == ("done", "it is later")
    times = [m for m in store.messages("c1") if m["role"] == "tool" and m["name"] != "ask_user"]
    assert len(times) == 2 and all('"timezone": "UTC"' in m["content"] for m in times)

    folder = Path(sqlite_store.path).parent / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("hello")
    read = {"tool": "fs__read_text_file", "args": {"path": str(folder / "a.txt")}}
    with McpServer("fs", command=node_server("filesystem", str(folder)), timeout_s=60) as server:
        _start_run(store, server, [read, ask], "c2")
        older = _recorded(store, "c2", "fs")
        assert all(t["annotations"].get("open_world_hint") is False for t in older)
        for t in older:
            del t["annotations"]["open_world_hint"]
            t["description"] = t["description"].upper()
        _rerecord(store, "c2", "fs", [t for t in older if t["name"] != "directory_tree"])
        model = ScriptedModel([read, "still hello"])
        res = Agent("t", model, store, server.tools()).resume_input("c2", "again")
    assert (res.status, res.text) == ("done", "still hello")
    reads = [m for m in store.messages("c2") if m.get("name") == "fs__read_text_file"]
    assert [m["content"] for m in reads] == ["hello", "hello"]


@pytest.mark.scenario("S91")
@pytest.mark.slow
def test_a_resume_stops_naming_each_used_tool_and_field_that_changed(sqlite_store, tmp_path):
    """A tool the run used now takes other input, another it used is gone: the
    run fails before any model call or tool call, naming both, with the run id
    in flowdesk.log; a changed tool the run never used is not named."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer
    from desktop_app.config import load_settings
    from desktop_app.observability import setup_logging
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    setup_logging(load_settings())
    store = SqliteAgentStore(sqlite_store)
    now = {"tool": "time__get_current_time", "args": {"timezone": "UTC"}}
    ask = {"tool": "ask_user", "args": {"question": "and now?"}}
    epoch = {"tool": "time__get_epoch", "args": {}}  # gone from this version already
    command = python_server("mcp_server_time")
    with McpServer("time", command=command, timeout_s=60) as server:
        _start_run(store, server, [now, epoch, ask], "s1")
        older = _recorded(store, "s1", "time")
        by_name = {t["name"]: t for t in older}
        # the older server: get_current_time took an optional integer "offset",
        # convert_time (never used) took other input, get_epoch existed
        schema = by_name["get_current_time"]["input_schema"]
        schema["properties"]["offset"] = {"type": "integer", "description": "hours"}
        by_name["convert_time"]["input_schema"]["required"] = []
        older.append({"name": "get_epoch", "input_schema": {"type": "object"}})
        _rerecord(store, "s1", "time", older)
        model = ScriptedModel(["unreached"])
        res = Agent("t", model, store, server.tools()).resume_input("s1", "now")
    assert res.status == "failed" and model.calls == 0
    assert store.get("s1").error_type == "McpToolsChangedError"
    assert res.error.startswith("tools of MCP server 'time' that this run used changed")
    assert "time__get_current_time takes other input (input_schema: properties.offset)" in (
        res.error
    )
    assert "time__get_epoch was removed" in res.error and "convert_time" not in res.error
    log = flowdesk_log()
    assert f"agent run s1 failed: {res.error}" in log
    assert "agent t: run s1 resumed (status was input_required)" in log
    assert "agent t: run s1 ended failed" in log


# -- destructive and idempotent: never re-sent after a crash -------------------


def _crash_worker(db: Path, run_id: str, folder: Path, mode: str) -> subprocess.CompletedProcess:
    return cli_forkserver.run_argv(
        [sys.executable, str(REPO / "tests" / "mcp_crash_worker.py"), str(db), run_id,
         json.dumps(node_server("filesystem", str(folder))), mode],
        capture_output=True, text=True, timeout=120, cwd=REPO, start_new_session=True,
    )  # fmt: skip


@pytest.mark.scenario("S89")
@pytest.mark.slow
def test_a_destructive_idempotent_tool_in_flight_at_sigkill_is_not_sent_again(db_path, tmp_path):
    """server-filesystem marks write_file idempotent and destructive: the file
    it wrote before the kill, deleted by the user meanwhile, stays deleted on
    resume. create_directory (idempotent, not destructive) is sent again."""
    from desktop_app.agent.messages import is_outcome_unknown

    folder = tmp_path / "files"
    folder.mkdir()
    first = _crash_worker(db_path, "w1", folder, "kill-in:write_file")
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert (folder / "note.txt").read_text() == "v1"
    rows = journal(db_path, "w1")
    assert [v[0] for k, v in rows.items() if k.startswith("fs__write_file")] == ["in_progress"]
    (folder / "note.txt").unlink()  # the user deletes it before the run resumes
    again = _crash_worker(db_path, "w1", folder, "resume")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1]) == {"status": "done", "text": "ok"}
    assert not (folder / "note.txt").exists()
    (answer,) = tool_messages(db_path, "w1")
    assert is_outcome_unknown(answer["content"])

    first = _crash_worker(db_path, "d1", folder, "kill-in:create_directory")
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert (folder / "sub").is_dir()
    (folder / "sub").rmdir()
    again = _crash_worker(db_path, "d1", folder, "resume")
    assert again.returncode == 0, again.stderr
    assert (folder / "sub").is_dir()  # sent again: harmless by the server's own word
    (answer,) = tool_messages(db_path, "d1")
    assert "Successfully created directory" in answer["content"]


def test_the_at_most_once_rule_follows_the_hints_and_the_mcp_defaults():
    from desktop_app.agent.mcp import McpServer, McpTool

    server = McpServer("s", url="http://127.0.0.1:1/mcp")

    def at_most_once(**hints: bool) -> bool:
        return McpTool(server, {"name": "t", "annotations": hints}).at_most_once

    assert not at_most_once(read_only_hint=True)
    assert not at_most_once(idempotent_hint=True, destructive_hint=False)
    assert at_most_once(idempotent_hint=True, destructive_hint=True)  # write_file
    assert at_most_once(idempotent_hint=True)  # destructive unless it says otherwise
    assert at_most_once(destructive_hint=False)  # not idempotent
    assert at_most_once()


@pytest.mark.scenario("S89")
def test_mcp_server_gits_own_hints_decide_what_a_crash_may_send_again(tmp_path):
    """git_reset is idempotent but destructive: at most once, like git_commit;
    git_add (idempotent, not destructive) and git_status (read-only) may be
    sent again after a crash."""
    from desktop_app.agent.mcp import McpServer

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    command = python_server("mcp_server_git", "--repository", str(repo))
    with McpServer("git", command=command, timeout_s=60) as server:
        once = {t.tool_name: t.at_most_once for t in server.tools()}
    assert (once["git_reset"], once["git_commit"]) == (True, True)
    assert (once["git_add"], once["git_status"]) == (False, False)


@pytest.mark.scenario("S89")
async def test_the_app_shows_an_unknown_outcome_as_such(tmp_path):
    """A call in flight at a crash, resumed: the app's conversation marks the
    answer "outcome unknown: not repeated" and its tool row says ``unknown``."""
    from desktop_app import bootstrap
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.tools import Tool
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from tests.test_app_agents import SIZE, open_run, open_screen

    class Crash(BaseException):
        pass

    def send(text: str) -> str:
        """Send a message."""
        raise Crash  # the process dies with the call in flight

    sender = Tool(send)
    sender.at_most_once = True  # type: ignore[misc]
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    store = bootstrap.open_sqlite_store(settings)
    agents = SqliteAgentStore(store)
    script = [{"tool": "send", "args": {"text": "hi"}, "id": "c1"}, "not sure it went"]
    with pytest.raises(Crash):
        Agent("mailer", ScriptedModel(script), agents, [sender]).ask("send hi", run_id="u" * 32)
    agents.release("u" * 32, agents.get("u" * 32).lease_owner)
    res = Agent("mailer", ScriptedModel(script[1:]), agents, [sender]).resume("u" * 32)
    assert res.status == "done"
    store.close()
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_screen(pilot)
        lines = (await open_run(pilot, screen, "u" * 32)).splitlines()
        assert "#3 tool result send (outcome unknown: not repeated) [call c1]" in lines
        tools = screen.tools_table
        assert [[c.plain for c in tools.get_row_at(i)] for i in range(tools.row_count)] == [
            ["send", "unknown", "1", "0"]
        ]


@pytest.mark.parametrize("at_most_once", [True, False])
def test_no_answer_is_unknown_only_for_a_tool_that_is_not_sent_twice(sqlite_store, at_most_once):
    """A tool the server calls harmless to repeat (read-only, or idempotent
    and not destructive) that got no answer is an ordinary error: nothing
    was at stake; an at-most-once one is "outcome unknown"."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.messages import is_outcome_unknown
    from desktop_app.agent.tools import Tool
    from desktop_app.errors import McpOutcomeUnknownError
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    def lookup(q: str) -> str:
        """Look up."""
        raise McpOutcomeUnknownError("MCP server 's' did not answer 'lookup' within 1 s")

    t = Tool(lookup)
    t.at_most_once = at_most_once  # type: ignore[misc]
    store = SqliteAgentStore(sqlite_store)
    model = ScriptedModel([{"tool": "lookup", "args": {"q": "a"}}, "ok"])
    res = Agent("a", model, store, [t]).ask("go")
    (answer,) = [m for m in store.messages(res.run_id) if m["role"] == "tool"]
    assert is_outcome_unknown(answer["content"]) is at_most_once
    assert "did not answer 'lookup' within 1 s" in answer["content"]
