"""What a new user's tryout of `flowdesk ask`, MCP tools and approvals found
(S97): a resume with the wrong tools is refused before anything changes and
the right one still works; `cancel` of an agent run another process executes
stops it before its next model or tool call; a run waiting for an answer
names the command that answers it; `answer` on a finished run is refused
first (also a Pydantic AI agent's run that is not registered); and every
refusal comes before any MCP server is started.

Real `flowdesk` subprocesses, the scripted model server (tests/chat_server.py)
on 127.0.0.1 and the project's test MCP server (tests/mcp_notes_server.py,
stdio); a crash is a real SIGKILL. Every command Flowdesk prints is run as
printed.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from desktop_app.agent.tools import LISTING_PREFIX, TOOLSET_KEY
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, as_printed, flowdesk
from tests.test_cli_agent_resume import HANG, agent_status, cli, interrupt, model_env, wait_for


def append(server: str, text: str = "x", tool: str = "append") -> tuple[str, dict]:  # type: ignore[type-arg]
    call = {"id": f"c-{tool}-{text}", "name": f"{server}__{tool}", "args": {"text": text}}
    return ("json", completion("", [call]))


class Setup:
    """A database, a scripted model and two MCP servers in the settings:
    ``notes`` (``append`` needs approval) and ``notesfree`` (no approval;
    with the ``gate`` variant's ``append_at_gate``), both the test notes
    server appending to ``log``; each writes its process id to ``pidfile``
    when it starts."""

    def __init__(self, tmp_path: Path, server: ChatServer) -> None:
        self.tmp = tmp_path
        self.db = tmp_path / "b.db"
        self.log = tmp_path / "notes.log"
        self.pidfile = tmp_path / "server.pid"
        self.gate = tmp_path / "gate"
        config = tmp_path / "config.toml"
        command = module_command("tests.mcp_notes_server", str(self.log), "stdio")
        common = f"command = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
        env = f"NOTES_PIDFILE = {json.dumps(str(self.pidfile))}\n"
        config.write_text(
            f'[mcp_servers.notes]\n{common}require_approval = ["append"]\n'
            f"[mcp_servers.notes.env]\n{env}"
            f"[mcp_servers.notesfree]\n{common}"
            f'[mcp_servers.notesfree.env]\n{env}NOTES_VARIANT = "gate"\n'
            f"NOTES_GATE = {json.dumps(str(self.gate))}\n"
        )
        self.server = server
        self.env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(self.db, "db", "apply", env=self.env).returncode == 0

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return flowdesk(self.db, *args, env=self.env)

    def journal(self, run_id: str) -> list[str]:
        """The keys of the run's tool journal, as stored."""
        store = open_store(str(self.db))
        try:
            return sorted(r.tool_key for r in SqliteAgentStore(store).tool_results(run_id))
        finally:
            store.close()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def started(proc: subprocess.Popen[str]) -> str:
    """Read the `ask` process's stderr up to its ``run RUN (if interrupted…)`` line."""
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.match(r"^run (\w+) \(if interrupted", line)
        if found:
            return found.group(1)
    raise AssertionError(f"no run line; exit {proc.wait()}")


def refused_in(stderr: str) -> str:
    """The command a refusal names as the way on (the end of its message)."""
    found = re.search(r": (flowdesk [^\n]*)$", stderr.strip())
    assert found, stderr
    return found.group(1)


# -- 1. a resume with the wrong tools --------------------------------------------------


@pytest.mark.scenario("S97")
def test_a_resume_with_other_tools_changes_nothing_and_the_right_one_then_works(
    tmp_path: Path,
) -> None:
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [append("notesfree"), HANG]
        asked = cli("--db", str(s.db), "ask", "slow", "--mcp", "notesfree", env=s.env)
        err = interrupt(asked, server, 2, signal.SIGKILL)
        run_id = re.search(r"^run (\w+) \(if interrupted", err, re.M).group(1)  # type: ignore[union-attr]
        before = s.journal(run_id)
        assert f"{LISTING_PREFIX}notesfree" in before and s.lines() == ["x"]
        s.pidfile.unlink()

        wrong = s.run("ask", "--resume", run_id, "--mcp", "notes")
        assert wrong.returncode == 1, wrong.stderr
        assert (
            f"agent run {run_id} was started with the tools of MCP server notesfree (recorded "
            "when it started), not with the tools of MCP server notes; nothing was changed"
        ) in wrong.stderr
        assert refused_in(wrong.stderr) == f"flowdesk --db {s.db} resume {run_id}"
        assert "connecting to MCP server" not in wrong.stderr and not s.pidfile.exists()
        files = s.run("ask", "--resume", run_id, "--tools", "files", "--folder", str(tmp_path))
        assert files.returncode == 1 and f"the file tools over {tmp_path}" in files.stderr
        assert s.journal(run_id) == before  # no mcp/tools_list:notes, no agent/toolset
        assert TOOLSET_KEY not in s.journal(run_id)
        assert agent_status(s.db, run_id) == "interrupted"  # still resumable

        server.script = [("json", completion("Noted."))]
        right = as_printed(refused_in(wrong.stderr), s.env)
        assert right.returncode == 0, right.stderr
        assert "Noted." in right.stdout
    assert agent_status(s.db, run_id) == "done"
    assert s.lines() == ["x"]  # the call that completed was not made again


@pytest.mark.scenario("S97")
def test_a_run_an_older_wrong_resume_left_rows_in_resumes_with_the_tools_it_started_with(
    tmp_path: Path,
) -> None:
    """An older Flowdesk recorded the wrong resume's tool list and tool
    names in the run and failed it; those rows do not decide its tools."""
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [append("notesfree"), HANG]
        asked = cli("--db", str(s.db), "ask", "slow", "--mcp", "notesfree", env=s.env)
        err = interrupt(asked, server, 2, signal.SIGKILL)
        run_id = re.search(r"^run (\w+) \(if interrupted", err, re.M).group(1)  # type: ignore[union-attr]
        store = open_store(str(s.db))
        try:
            agents = SqliteAgentStore(store)
            for key, tool, result in (
                (f"{LISTING_PREFIX}notes", "mcp:notes", "[]"),
                (TOOLSET_KEY, "toolset", '["list_folder", "read_file"]'),
            ):
                agents.update(run_id, 0.0, tool=(key, tool, "completed", result))
            agents.update(run_id, 0.0, status="failed", error="this run uses the tools of ...")
        finally:
            store.close()
        server.script = [("json", completion("Noted."))]
        resumed = s.run("resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
        assert "Noted." in resumed.stdout
    assert agent_status(s.db, run_id) == "done" and s.lines() == ["x"]


# -- 2. cancel of a run another process executes -------------------------------------------


@pytest.mark.scenario("S97")
def test_cancel_stops_the_executing_process_before_its_next_tool_call(tmp_path: Path) -> None:
    model_called = threading.Event()
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [("gate", model_called, append("notesfree")[1])]
        asked = cli("--db", str(s.db), "ask", "slow cancel", "--mcp", "notesfree", env=s.env)
        try:
            run_id = started(asked)
            wait_for(lambda: len(server.requests) == 1, "the model call")
            canceled = s.run("cancel", run_id)
            assert canceled.returncode == 0, canceled.stderr
            lines = canceled.stdout.splitlines()
            assert lines[0] == f"agent run {run_id} canceled"
            assert "stops before its next model or tool call" in lines[1]
        finally:
            model_called.set()  # the model now answers with a tool call
        _, err = asked.communicate(timeout=60)
        assert asked.returncode == 1, err
        assert f"run {run_id} canceled: canceled by user; this process stopped" in err
        assert f"run {run_id} done" not in err
        assert len(server.requests) == 1  # no model call after the cancel either
    assert s.lines() == []  # the tool was never called
    assert agent_status(s.db, run_id) == "canceled"
    shown = json.loads(s.run("show", run_id, "-o", "json").stdout)
    assert shown["error"] == "canceled by user"


@pytest.mark.scenario("S97")
def test_cancel_while_a_tool_call_is_in_flight_says_so_and_nothing_after_it_runs(
    tmp_path: Path,
) -> None:
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [append("notesfree", "y", "append_at_gate"), ("json", completion("no"))]
        asked = cli("--db", str(s.db), "ask", "slow", "--mcp", "notesfree", env=s.env)
        try:
            run_id = started(asked)
            wait_for(lambda: s.lines() == ["y"], "the tool call to be in flight")
            canceled = s.run("cancel", run_id)
            assert canceled.returncode == 0, canceled.stderr
            assert canceled.stdout.splitlines()[1].endswith(
                "; its call to notesfree__append_at_gate is in flight: that call runs to its end "
                "(what it does stays done, its result is recorded) and nothing after it runs"
            )
        finally:
            s.gate.touch()  # the call answers
        _, err = asked.communicate(timeout=60)
        assert asked.returncode == 1, err
        assert (
            f"run {run_id} canceled: canceled by user while the call to "
            "notesfree__append_at_gate was in flight: that call ran to its end"
        ) in err
        assert len(server.requests) == 1  # nothing after the call
    assert agent_status(s.db, run_id) == "canceled"
    shown = s.run("show", run_id)
    assert "appended at the gate" in shown.stdout  # the call's outcome, as it was


# -- 3. resume of a run waiting for an answer ----------------------------------------------


@pytest.mark.scenario("S97")
def test_resume_of_a_run_waiting_for_approval_prints_the_answer_command_that_works(
    tmp_path: Path,
) -> None:
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [append("notes")]
        asked = s.run("--scope", "work", "ask", "note x", "--mcp", "notes")
        assert asked.returncode == 0 and "the agent asks: approve the call" in asked.stdout
        run_id = re.search(r"answer (\w+) yes", asked.stderr).group(1)  # type: ignore[union-attr]
        resumed = s.run("--scope", "work", "resume", run_id)
        assert resumed.returncode == 1
        assert "resume_input" not in resumed.stderr
        command = refused_in(resumed.stderr)
        assert re.fullmatch(
            rf"flowdesk --db {re.escape(str(s.db))} --scope work answer {run_id} yes "
            r"--wait-id approval/1:[0-9a-f]{12}",
            command,
        ), command
        server.script = [("json", completion("Noted."))]
        answered = as_printed(command, s.env)
        assert answered.returncode == 0, answered.stderr
        assert "Noted." in answered.stdout
    assert s.lines() == ["x"]


@pytest.mark.scenario("S97")
def test_resume_of_a_run_asking_its_user_prints_the_answer_command_that_works(
    tmp_path: Path,
) -> None:
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        ask = {"id": "q", "name": "ask_user", "args": {"question": "which note?"}}
        server.script = [("json", completion("", [ask]))]
        asked = s.run("ask", "note something")
        assert asked.returncode == 0 and "the agent asks: which note?" in asked.stdout
        run_id = re.search(r"--resume (\w+) --answer", asked.stderr).group(1)  # type: ignore[union-attr]
        resumed = s.run("resume", run_id)
        assert resumed.returncode == 1
        assert "which note?" in resumed.stderr and "resume_input" not in resumed.stderr
        command = refused_in(resumed.stderr)
        assert (
            command == f"flowdesk --db {s.db} ask --resume {run_id} --answer TEXT --wait-id ask/1:q"
        )
        server.script = [("json", completion("Noted TEXT."))]
        answered = as_printed(command, s.env)
        assert answered.returncode == 0, answered.stderr
        assert "Noted TEXT." in answered.stdout
        told = [
            m["content"] for m in server.requests[-1]["body"]["messages"] if m["role"] == "tool"
        ]
        assert told == ["Human input: TEXT"]


# -- 4. and 5. refused first, before any MCP server starts ----------------------------------


@pytest.mark.scenario("S97")
def test_a_printed_answer_run_late_answers_no_later_question_of_a_model_reusing_call_ids(
    tmp_path: Path,
) -> None:
    """A small local model gives every tool call the id ``call_0``: the
    agent asks two questions in turn. Two people read the printed answer
    command of the first; one runs it, the other runs it after: it names
    the first question (its place among the run's calls, then the call id),
    so it is refused and the second question waits for someone who read it."""
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        asks = [
            {"id": "call_0", "name": "ask_user", "args": {"question": q}}
            for q in ("which note?", "which colour?")
        ]
        server.script = [("json", completion("", [asks[0]]))]
        asked = s.run("ask", "note something")
        assert asked.returncode == 0 and "the agent asks: which note?" in asked.stdout
        command = re.search(r"^answer with: (.*)$", asked.stderr, re.M).group(1)  # type: ignore[union-attr]
        assert command.endswith("--answer TEXT --wait-id ask/1:call_0"), command
        server.script = [("json", completion("", [asks[1]]))]
        first = as_printed(command, s.env)
        assert first.returncode == 0 and "the agent asks: which colour?" in first.stdout

        late = as_printed(command, s.env)
        assert late.returncode == 1, late.stderr
        assert "it asks another question now ('ask/2:call_0')" in late.stderr, late.stderr
        assert len(server.requests) == 2  # the late answer sent nothing to the model
        then = re.search(r"^answer with: (.*)$", first.stderr, re.M).group(1)  # type: ignore[union-attr]
        assert then.endswith("--wait-id ask/2:call_0"), then
        server.script = [("json", completion("Blue notes."))]
        assert as_printed(then.replace("TEXT", "blue"), s.env).returncode == 0
    told = [m["content"] for m in server.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert told == ["Human input: TEXT", "Human input: blue"]


def test_answers_to_a_finished_run_or_not_yes_or_no_are_refused_before_any_server_starts(
    tmp_path: Path,
) -> None:
    with ChatServer() as server:
        s = Setup(tmp_path, server)
        server.script = [append("notes")]
        asked = s.run("ask", "note x", "--mcp", "notes")
        run_id = re.search(r"answer (\w+) yes", asked.stderr).group(1)  # type: ignore[union-attr]
        s.pidfile.unlink()
        maybe = s.run("answer", run_id, "maybe")
        assert maybe.returncode == 2 and "answer yes (run the call) or no" in maybe.stderr
        assert "connecting to MCP server" not in maybe.stderr and not s.pidfile.exists()
        assert agent_status(s.db, run_id) == "input_required"

        server.script = [("json", completion("Noted."))]
        assert s.run("answer", run_id, "yes").returncode == 0
        assert agent_status(s.db, run_id) == "done"
        s.pidfile.unlink()
        for again in (["answer", run_id, "yes"], ["ask", "--resume", run_id, "--answer", "y"]):
            refused = s.run(*again, "--mcp", "notes") if again[0] == "ask" else s.run(*again)
            assert refused.returncode == 1, refused.stderr
            assert f"agent run {run_id} is done, not waiting for an answer" in refused.stderr
            assert "connecting to MCP server" not in refused.stderr
        shown = s.run("ask", "--resume", run_id)  # its saved answer: no server either
        assert shown.returncode == 0 and "Noted." in shown.stdout
        assert not s.pidfile.exists()
        assert len(server.requests) == 2
    assert s.lines() == ["x"]


@pytest.mark.scenario("S97")
def test_answer_to_a_done_pydantic_ai_run_says_it_waits_for_none_registered_or_not(
    db_path: Path, tmp_path: Path
) -> None:
    pytest.importorskip("pydantic_ai")
    from tests.test_pydantic_ai import REGISTERED, SCRIPT, worker

    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = list(SCRIPT)
        first = worker(db_path, env, "run", "find a then b")
        assert first.returncode == 0, first.stderr
        run_id = first.stdout.split()[1]
        for settings in ({}, REGISTERED):
            answered = flowdesk(db_path, "answer", run_id[:4], "yes", env={**env, **settings})
            assert answered.returncode == 1, answered.stderr
            assert f"agent run {run_id} is done, not waiting for an answer" in answered.stderr
            assert "not registered" not in answered.stderr
        assert len(server.requests) == 3
