"""Kill tests for ``desktop_app/agent/mcp.py`` (issue 29): what a user of MCP
servers sees, against real stdio servers (``tests/mcp_shapes_server.py``, the
SDK's low-level server, whose results take every shape a tool result can
take) and the HTTP notes server: the text each result becomes, the tools and
hints each server offers, the list recorded in a run and how a changed one
is reported, the servers the settings open (folder, environment, log file),
and the error for each way a server or a call fails."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_support import install_hint
from tests.test_mcp_tools import REPO, require

SCRIPT = REPO / "tests" / "mcp_shapes_server.py"
COMMAND = [sys.executable, str(SCRIPT)]
WHERE = f"`{sys.executable} {SCRIPT}`"
ALL_TOOLS = [
    "die",
    "echo",
    "hang",
    "nothing",
    "only_picture",
    "picture",
    "refuse",
    "refuse_empty",
    "refuse_silently",
    "rpc_error",
    "structured",
    "two_texts",
]


@pytest.fixture(autouse=True)
def _needs_mcp():
    require("mcp")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """One shapes server for the module, opened from its settings section."""
    require("mcp")
    from desktop_app.agent.mcp import McpServer
    from desktop_app.config import McpServerSettings

    folder = tmp_path_factory.mktemp("shapes")
    cfg = McpServerSettings(
        command=COMMAND,
        cwd=folder,
        env={"SHAPES_MARK": str(folder / "mark.json"), "SHAPES_ECHO": "from the settings"},
        timeout_s=20,
        require_approval=["two_texts"],
    )
    with McpServer.from_settings("shapes", cfg, errlog=folder / "logs" / "mcp-shapes.log") as s:
        yield s


def _config(tmp_path: Path, monkeypatch, text: str):
    from desktop_app.config import load_settings

    config = tmp_path / "config.toml"
    config.write_text(text)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    return load_settings()


def _section(name: str, mode: str = "") -> str:
    env = f"env = {{ SHAPES_MODE = {json.dumps(mode)} }}\n" if mode else ""
    return f"[mcp_servers.{name}]\ncommand = {json.dumps(COMMAND)}\ntimeout_s = 20\n{env}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_server_from_its_settings_section_gets_its_folder_environment_and_log(shapes):
    folder = Path(shapes.cwd)
    started = json.loads((folder / "mark.json").read_text())
    assert (started["cwd"], started["echo"]) == (str(folder), "from the settings")
    assert (folder / "logs" / "mcp-shapes.log").read_text() == "shapes: starting\n"
    assert shapes.timeout_s == 20  # the section's, not the default 60 s


# -- what a tool's result becomes ------------------------------------------------


def test_each_shape_of_tool_result_becomes_the_text_the_model_reads(shapes):
    """Text blocks joined by newlines, other blocks by type, structured content
    only when there is no text, an error result as ``{"error": ...}``."""
    tools = {t.tool_name: t for t in shapes.tools()}
    failing = ("die", "hang", "rpc_error", "echo")  # (see the next tests; echo below)
    texts = {name: tools[name].call({}) for name in ALL_TOOLS if name not in failing}
    assert texts == {
        "two_texts": "one\ntwo",
        "picture": '{"content": "image"}\na cat',
        "only_picture": '{"content": "image"}',
        "structured": '{"b": 2, "a": [1]}',
        "nothing": "",
        "refuse": '{"error": "bad input"}',
        "refuse_silently": '{"error": "{\\"x\\": 1}"}',
        "refuse_empty": '{"error": "the tool reported an error"}',
    }
    assert tools["echo"].call({"word": "hi"}) == '{"word": "hi"}'  # the arguments as given


def test_each_way_a_call_fails_is_its_own_error(shapes):
    from desktop_app.errors import McpError, McpOutcomeUnknownError

    with pytest.raises(McpError) as info:
        shapes.call_tool("rpc_error", {})
    assert not isinstance(info.value, McpOutcomeUnknownError)  # answered: nothing unknown
    assert str(info.value) == "MCP server 'shapes' failed on 'rpc_error': MCPError: no such row"
    shapes.timeout_s = 2  # each request now waits 2 s for its answer
    try:
        assert shapes.call_tool("echo", {"word": "quick"}) == '{"word": "quick"}'
        with pytest.raises(McpOutcomeUnknownError) as unknown:
            shapes.call_tool("hang", {})
    finally:
        shapes.timeout_s = 20
    assert str(unknown.value) == "MCP server 'shapes' did not answer 'hang' within 2 s"
    assert shapes.call_tool("two_texts", {}) == "one\ntwo"  # the connection is still usable


def test_arguments_that_are_not_json_text_are_refused_before_anything_is_sent(shapes):
    """A lone surrogate (valid JSON ``"\\ud800"``) used to end the stdio
    connection for every later call and read as "outcome unknown"; NaN was
    sent as null; a Python object read as "no answer"."""
    from desktop_app.errors import McpError, McpOutcomeUnknownError

    lone = json.loads('"\\ud800"')
    told = {}
    for value in (lone, float("nan"), object()):
        with pytest.raises(McpError) as info:
            shapes.call_tool("echo", {"word": value})
        assert not isinstance(info.value, McpOutcomeUnknownError)
        told[type(value).__name__] = str(info.value)
    start = "the arguments for 'echo' of MCP server 'shapes' are not JSON text ("
    assert told == {
        "str": f"{start}UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800' in "
        "position 10: surrogates not allowed); nothing was sent",
        "float": f"{start}ValueError: Out of range float values are not JSON compliant); "
        "nothing was sent",
        "object": f"{start}TypeError: Object of type object is not JSON serializable); "
        "nothing was sent",
    }
    assert shapes.call_tool("echo", {"word": "é ok"}) == '{"word": "\\u00e9 ok"}'


def test_a_server_that_dies_mid_call_is_outcome_unknown():
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpOutcomeUnknownError

    with (
        McpServer("dying", command=COMMAND, timeout_s=20) as server,
        pytest.raises(McpOutcomeUnknownError) as died,
    ):
        server.call_tool("die", {})
    assert str(died.value) == (
        "MCP server 'dying' closed the connection before answering 'die' "
        "(the server died or hung up)"
    )


# -- the tools a server offers ---------------------------------------------------


def test_tools_carry_names_descriptions_schemas_and_their_servers_hints(shapes):
    from desktop_app.agent.mcp import describe_tools

    tools = {t.tool_name: t for t in shapes.tools()}
    assert sorted(tools) == ALL_TOOLS  # both pages of the list
    assert tools["echo"].schema() == {
        "type": "function",
        "function": {
            "name": "shapes__echo",
            "description": "Tool echo.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
    assert tools["nothing"].description == ""  # the server gave none
    hints = {
        name: (t.read_only, t.at_most_once, t.destructive, t.requires_approval)
        for name, t in tools.items()
        if name in ("two_texts", "picture", "only_picture", "structured", "nothing")
    }
    assert hints == {
        "two_texts": (True, False, False, True),  # read-only; named in require_approval
        "picture": (False, False, False, False),  # idempotent, not destructive
        "only_picture": (False, True, True, False),  # idempotent, destructive by default
        "structured": (False, True, False, False),  # not destructive, not idempotent
        "nothing": (False, True, True, False),  # the MCP defaults
    }
    rows = describe_tools([shapes])
    assert rows[:2] == [
        {
            "server": "shapes",
            "tool": "two_texts",
            "name": "shapes__two_texts",
            "description": "Tool two_texts.",
            "at_most_once": False,
        },
        {
            "server": "shapes",
            "tool": "picture",
            "name": "shapes__picture",
            "description": "Tool picture.",
            "at_most_once": False,
        },
    ]
    assert [r["name"] for r in rows] == [f"shapes__{t.tool_name}" for t in shapes.tools()]


def test_approve_destructive_asks_for_every_destructive_tool(tmp_path):
    from desktop_app.agent.mcp import McpServer

    with McpServer("s", command=COMMAND, approve_destructive=True, timeout_s=20) as server:
        ask = {t.tool_name for t in server.tools() if t.requires_approval}
    destructive = set(ALL_TOOLS) - {"two_texts", "picture", "structured"}
    assert ask == destructive


def test_a_tool_built_from_a_bare_spec_and_a_server_never_opened():
    """The MCP defaults for a tool without schema, description or hints; a
    name too long for a function name; a server that was never opened."""
    from desktop_app.agent.mcp import McpServer, McpTool
    from desktop_app.errors import ConfigError, McpError

    server = McpServer("s", url="http://127.0.0.1:9/mcp")
    assert server.timeout_s == 60.0 and not server.approve_destructive
    bare = McpTool(server, {"name": "t"})
    assert bare.schema() == {
        "type": "function",
        "function": {"name": "s__t", "description": "", "parameters": {"type": "object"}},
    }
    assert (bare.at_most_once, bare.destructive, bare.requires_approval) == (True, True, False)
    long = McpServer("x" * 60, url="http://127.0.0.1:9/mcp")
    with pytest.raises(McpError) as info:
        McpTool(long, {"name": "lookup"})
    assert str(info.value) == (
        f"MCP server {'x' * 60!r} has a tool 'lookup' whose name '{'x' * 60}__lookup' is not a "
        "valid function name (letters, digits, _ and -, at most 64); rename the server in "
        "[mcp_servers] to something shorter"
    )

    assert server.tools() == [] and server.listing() == "[]"
    server.close()  # harmless before open
    with pytest.raises(McpError) as info:
        server.call_tool("t", {})
    assert str(info.value) == "MCP server 's' is not connected"
    for kwargs in ({}, {"command": ["x"], "url": "http://127.0.0.1:9/mcp"}):
        with pytest.raises(ConfigError) as bad:
            McpServer("both", **kwargs)
        assert str(bad.value) == (
            '[mcp_servers.both] needs exactly one of command = [...] (a stdio server) or url = "'
            'http://..." (streamable HTTP)'
        )


def test_mcp_servers_without_the_mcp_package_say_what_to_install(monkeypatch):
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpError

    monkeypatch.setitem(sys.modules, "mcp", None)  # as if it were not installed
    with pytest.raises(McpError) as info:
        McpServer("s", command=COMMAND).open()
    assert str(info.value) == f"MCP servers need the mcp package: {install_hint('mcp')}"


# -- the list recorded in a run -------------------------------------------------


def test_the_listing_is_every_page_sorted_by_name_without_empty_fields(shapes):
    listing = json.loads(shapes.listing())
    assert [t["name"] for t in listing] == ALL_TOOLS
    by_name = {t["name"]: t for t in listing}
    assert by_name["nothing"] == {
        "input_schema": {"properties": {}, "type": "object"},
        "name": "nothing",
    }
    assert by_name["picture"] == {
        "annotations": {"destructive_hint": False, "idempotent_hint": True},
        "description": "Tool picture.",
        "input_schema": {"properties": {}, "type": "object"},
        "name": "picture",
    }
    assert shapes.check_listing(shapes.listing(), {"shapes__echo", "shapes__die"}) is None


def test_a_changed_listing_names_each_used_tool_that_changed(shapes):
    """Removed and changed tools the run used are named, in name order; a
    changed tool it never used and another server's tools are not."""
    older = json.loads(shapes.listing())
    by_name = {t["name"]: t for t in older}
    by_name["echo"]["input_schema"] = {
        "type": "object",
        "properties": {"word": {"type": "integer"}},
        "required": ["word"],
    }
    by_name["refuse"]["input_schema"] = {"type": "object", "required": ["why"]}  # never used
    older += [{"name": "a_gone", "input_schema": {"type": "object"}}]
    used = {"shapes__a_gone", "shapes__echo", "shapes__two_texts", "other__refuse"}
    assert shapes.check_listing(json.dumps(older), used) == (
        "tools of MCP server 'shapes' that this run used changed since it started: "
        "shapes__a_gone was removed; shapes__echo takes other input (input_schema: "
        "properties.word.type, required); the run is not continued with different tools: "
        "start a new run, or restore the server's previous version and resume"
    )


def test_recorded_tools_are_the_lists_a_run_recorded(shapes, sqlite_store):
    """The app's agent view of a run: the MCP tools of the list recorded when
    it started, read from the run's journal (the agent's own tools recorded
    before it are not MCP tools)."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import recorded_tools
    from desktop_app.agent.tools import Tool
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    class Ticking:
        """A clock one second further on each time it is read."""

        t = 1_767_225_600.0

        def now(self) -> float:
            self.t += 1
            return self.t

    def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    store = SqliteAgentStore(sqlite_store)
    script = [{"tool": "shapes__echo", "args": {"word": "hi"}}, "done"]
    tools = [Tool(shout), *shapes.tools()]
    res = Agent("a", ScriptedModel(script), store, tools, clock=Ticking()).ask("go", run_id="k1")
    assert res.status == "done"
    journal = store.tool_results("k1")
    assert [(r.tool_key, r.tool) for r in journal] == [
        ("agent/toolset", "toolset"),
        ("mcp/tools_list:shapes", "mcp:shapes"),
        ('shapes__echo:{"word":"hi"}', "shapes__echo"),
    ]
    rows = recorded_tools(journal)
    assert [r["name"] for r in rows] == [f"shapes__{n}" for n in ALL_TOOLS]
    assert rows[:2] == [
        {"server": "shapes", "tool": "die", "name": "shapes__die", "description": "Tool die."},
        {"server": "shapes", "tool": "echo", "name": "shapes__echo", "description": "Tool echo."},
    ]
    nothing = next(r for r in rows if r["tool"] == "nothing")
    assert nothing["description"] == ""


# -- starting a server -----------------------------------------------------------


def test_a_stdio_server_starts_in_its_folder_with_its_environment_and_its_log(tmp_path, caplog):
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpError

    caplog.set_level(logging.INFO, logger="desktop_app.agent.mcp")
    folder, mark, log = tmp_path / "work", tmp_path / "mark.json", tmp_path / "logs" / "s.log"
    folder.mkdir()
    env = {"SHAPES_MARK": str(mark), "SHAPES_ECHO": "given"}
    server = McpServer("files", command=COMMAND, cwd=folder, env=env, errlog=log, timeout_s=20)
    with server:
        assert server.call_tool("two_texts", {}) == "one\ntwo"
    started = json.loads(mark.read_text())
    assert (started["cwd"], started["echo"]) == (str(folder), "given")
    assert "MCP server files connected: 12 tools" in caplog.messages
    assert log.read_text() == "shapes: starting\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert not _alive(started["pid"])  # closing ended the server
    server.close()  # a second close is harmless
    with pytest.raises(McpError) as info:
        server.call_tool("two_texts", {})
    assert str(info.value) == "MCP server 'files' is not connected"


def test_a_server_without_a_log_file_writes_to_the_stderr_of_the_moment(tmp_path, monkeypatch):
    """A program that replaced ``sys.stderr`` since the SDK was imported (a
    full-screen app, a test session) gets the server's stderr there."""
    from desktop_app.agent.mcp import McpServer

    with open(tmp_path / "stderr.txt", "w", encoding="utf-8") as now:
        monkeypatch.setattr(sys, "stderr", now)
        with McpServer("s", command=COMMAND, timeout_s=20) as server:
            assert server.call_tool("two_texts", {}) == "one\ntwo"
    assert (tmp_path / "stderr.txt").read_text() == "shapes: starting\n"


def test_a_server_that_cannot_start_names_its_command_its_error_and_its_log(tmp_path):
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpError

    log = tmp_path / "mcp-broken.log"
    broken = McpServer(
        "broken", command=COMMAND, env={"SHAPES_MODE": "crash"}, errlog=log, timeout_s=20
    )
    with pytest.raises(McpError) as info:
        broken.open()
    leaf = info.value.__cause__
    assert str(info.value) == (
        f"cannot connect to MCP server 'broken' ({WHERE}): {type(leaf).__name__}: {leaf}; "
        f"check [mcp_servers.broken] in the settings (its stderr is in {log})"
    )
    assert "cannot start, no licence" in log.read_text()
    with pytest.raises(McpError) as later:
        broken.call_tool("echo", {})
    assert str(later.value) == (
        f"MCP server 'broken' is not connected: the connection ended with "
        f"{type(leaf).__name__}: {leaf}"
    )

    missing = tmp_path / "no-such-server"
    with pytest.raises(McpError) as info:
        McpServer("gone", command=[str(missing), "--flag"], timeout_s=20).open()
    assert str(info.value) == (
        f"cannot connect to MCP server 'gone' (`{missing} --flag`): FileNotFoundError: "
        f"[Errno 2] No such file or directory: '{missing}'; check [mcp_servers.gone] in the "
        "settings"
    )

    url = f"http://127.0.0.1:{_free_port()}/mcp"  # nothing listens there
    web_log = tmp_path / "mcp-web.log"
    with pytest.raises(McpError) as info:
        McpServer("web", url=url, errlog=web_log, timeout_s=20).open()
    assert str(info.value) == (
        f"cannot connect to MCP server 'web' ({url}): ConnectError: All connection attempts "
        "failed; check [mcp_servers.web] in the settings"
    )
    assert not web_log.exists()  # an HTTP server has no stderr of ours


def test_a_tool_list_that_never_ends_is_a_server_that_did_not_start():
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpError

    endless = McpServer("slow", command=COMMAND, env={"SHAPES_MODE": "endless"}, timeout_s=2)
    with pytest.raises(McpError) as info:
        endless.open()
    assert str(info.value) == (
        f"MCP server 'slow' ({WHERE}) did not start within 2 s; check it runs on its own, "
        "or raise timeout_s"
    )


@pytest.mark.slow
def test_a_server_that_never_answers_is_ended_after_its_timeout(tmp_path):
    """The server is not left running after ``open`` gave up on it: the
    client's own wait of ``timeout_s`` ends its process."""
    import time

    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import McpError

    mark = tmp_path / "mark.json"
    env = {"SHAPES_MODE": "mute", "SHAPES_MARK": str(mark)}
    with pytest.raises(McpError, match="MCP server 'mute'"):
        McpServer("mute", command=COMMAND, env=env, timeout_s=2).open()
    pid = json.loads(mark.read_text())["pid"]
    for _ in range(900):  # a wait for an outcome (the SDK takes ~15 s), not a timing assertion
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid), "the server that never answered is still running"


def test_require_approval_naming_a_tool_the_server_lacks_is_refused():
    from desktop_app.agent.mcp import McpServer
    from desktop_app.errors import ConfigError

    server = McpServer("shapes", command=COMMAND, require_approval=["zzz", "nope"], timeout_s=20)
    with pytest.raises(ConfigError) as info:
        server.open()
    assert str(info.value) == (
        "[mcp_servers.shapes] require_approval names nope, zzz, which the server does not have "
        f"(its tools: {', '.join(ALL_TOOLS)}); correct the names"
    )
    empty = McpServer(
        "empty", command=COMMAND, env={"SHAPES_MODE": "empty"}, require_approval=["x"]
    )
    with pytest.raises(ConfigError) as info:
        empty.open()
    assert str(info.value).endswith(
        "names x, which the server does not have (its tools: none); correct the names"
    )


# -- the servers the settings open ------------------------------------------------


@pytest.mark.slow
def test_open_servers_opens_the_named_sections_in_order(tmp_path, monkeypatch):
    from desktop_app.agent.mcp import open_servers
    from desktop_app.errors import ConfigError
    from desktop_app.observability import log_dir

    settings = _config(
        tmp_path,
        monkeypatch,
        _section("shapes") + "approve_destructive = true\n" + _section("empty", "empty"),
    )
    told: list[str] = []
    servers = open_servers(settings, ["empty", "shapes"], on_connect=told.append)
    try:
        assert told == ["empty", "shapes"]
        assert [(s.name, len(s.tools())) for s in servers] == [("empty", 0), ("shapes", 12)]
        assert servers[1].call_tool("two_texts", {}) == "one\ntwo"
        asked = {t.tool_name for t in servers[1].tools() if t.requires_approval}
        assert asked == set(ALL_TOOLS) - {"two_texts", "picture", "structured"}
    finally:
        for server in servers:
            server.close()
    assert (log_dir() / "mcp-shapes.log").read_text() == "shapes: starting\n"
    assert stat.S_IMODE((log_dir() / "mcp-shapes.log").stat().st_mode) == 0o600

    with pytest.raises(ConfigError) as info:
        open_servers(settings, ["shapes", "nope", "zzz"])
    assert str(info.value) == (
        "no MCP server 'nope' in the settings (configured: empty, shapes); add "
        '[mcp_servers.nope] with command = [...] or url = "..."'
    )
    nothing = _config(tmp_path, monkeypatch, "")
    with pytest.raises(ConfigError, match=r"\(configured: none\)"):
        open_servers(nothing, ["shapes"])


def test_a_server_the_settings_cannot_start_is_logged_with_the_run(tmp_path, monkeypatch, caplog):
    from desktop_app.agent.mcp import open_servers
    from desktop_app.errors import McpError

    url = f"http://127.0.0.1:{_free_port()}/mcp"  # nothing listens there
    web = f'[mcp_servers.web]\nurl = "{url}"\ntimeout_s = 20\n'
    settings = _config(tmp_path, monkeypatch, _section("broken", "crash") + web)
    caplog.set_level(logging.WARNING, logger="desktop_app.agent.mcp")
    with pytest.raises(McpError) as info:
        open_servers(settings, ["web"], "r8")
    assert (
        f"agent run r8: cannot connect to MCP server 'web' ({url}): ConnectError"
        in (caplog.messages[-1])
    )
    for run_id, shown in (("r9", "r9"), (None, "(not started)")):
        with pytest.raises(McpError) as info:
            open_servers(settings, ["broken"], run_id)
        assert f"agent run {shown}: {info.value}" in caplog.messages
    assert str(info.value).startswith("cannot connect to MCP server 'broken'")


def test_mcp_tools_serve_a_command_that_exits_without_closing_them(tmp_path, monkeypatch):
    """``flowdesk ask --mcp``'s tools: open until the process ends, and the
    process still ends (the servers are closed on the way out)."""
    from desktop_app.agent.mcp import mcp_tools

    settings = _config(tmp_path, monkeypatch, _section("shapes"))
    tools = mcp_tools(settings, ["shapes"])
    try:
        assert [t.name for t in tools] == [f"shapes__{t.tool_name}" for t in tools]
        assert sorted(t.tool_name for t in tools) == ALL_TOOLS
    finally:
        tools[0].server.close()
    assert mcp_tools(settings, []) == []

    program = (
        "from desktop_app.agent.mcp import mcp_tools\n"
        "from desktop_app.config import load_settings\n"
        "tools = mcp_tools(load_settings(), ['shapes'])\n"
        "print(tools[0].call({}))\n"
    )
    done = cli_forkserver.run_argv(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=90,
    )
    assert (done.returncode, done.stdout) == (0, "one\ntwo\n"), done.stderr


def test_a_server_opened_afresh_records_its_tools_without_empty_fields(sqlite_store):
    """The list a run records is fetched when a server is opened (the
    ``shapes`` fixture opens its server once, before the tests that read its
    list): a run over a server opened here records that server's list under
    its own key, a tool without a description or hints with none (no
    nulls), and the app's agent view shows its description as empty."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.agent.mcp import McpServer, recorded_tools
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    store = SqliteAgentStore(sqlite_store)
    script = [{"tool": "fresh__echo", "args": {"word": "hi"}}, "done"]
    with McpServer("fresh", command=COMMAND, timeout_s=20) as server:
        res = Agent("a", ScriptedModel(script), store, server.tools()).ask("go", run_id="f1")
    assert res.status == "done"
    journal = store.tool_results("f1")
    assert [(r.tool_key, r.tool) for r in journal] == [
        ("mcp/tools_list:fresh", "mcp:fresh"),
        ('fresh__echo:{"word":"hi"}', "fresh__echo"),
    ]
    listing = json.loads(journal[0].result)
    assert [t["name"] for t in listing] == ALL_TOOLS
    assert {t["name"]: t for t in listing}["nothing"] == {
        "input_schema": {"properties": {}, "type": "object"},
        "name": "nothing",
    }
    assert "null" not in journal[0].result
    nothing = next(r for r in recorded_tools(journal) if r["tool"] == "nothing")
    assert nothing == {
        "server": "fresh",
        "tool": "nothing",
        "name": "fresh__nothing",
        "description": "",
    }
