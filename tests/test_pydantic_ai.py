"""Durable Pydantic AI agents on Flowdesk (S96): a real SIGKILL inside a tool
call, then a new process resumes the run; model requests are counted on a
scripted OpenAI-compatible server on 127.0.0.1 and tool calls in the file
the tool appends to."""

from __future__ import annotations

import ast
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.bootstrap import open_services
from desktop_app.config import load_settings
from tests import cli_forkserver
from tests.chat_server import ChatServer
from tests.chat_server import completion as _completion
from tests.cli_support import default_sigint, flowdesk
from tests.test_cli_agent_resume import agent_status, as_printed, wait_for

WORKER = Path(__file__).resolve().parent / "pydantic_ai_worker.py"
REPO = Path(__file__).resolve().parents[1]


def completion(content: str = "", calls: list[dict] | None = None) -> dict:
    """A chat completion as the OpenAI SDK validates it (model and created set)."""
    return {**_completion(content, calls), "model": "scripted", "created": 0}


def call(tool: str, **args: str) -> dict:
    return {"id": f"call-{tool}-{'-'.join(args.values())}", "name": tool, "args": args}


SCRIPT = [
    ("json", completion("", [call("lookup", q="a")])),
    ("json", completion("", [call("lookup", q="b")])),
    ("json", completion("a and b are found")),
]


def worker(db: Path | str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python tests/pydantic_ai_worker.py DB ARGS`` in a process of its own,
    forked with Pydantic AI already imported (:mod:`tests.cli_forkserver`)."""
    return cli_forkserver.run_script(
        WORKER, [str(db), *args], timeout=120, cwd=REPO, env={**os.environ, **env}
    )


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def agent_runs(db: Path | str):
    services = open_services(load_settings(db_path=str(db)), flows=[])
    try:
        agents = services.agents
        return [
            (r, agents.messages(r.run_id), agents.tool_results(r.run_id)) for r in agents.list()
        ]
    finally:
        services.close()


def requests_made(server: ChatServer) -> list[list[str]]:
    """For each model request the server answered: the tool results it was shown."""
    return [
        [m["content"] for m in r["body"]["messages"] if m["role"] == "tool"]
        for r in server.requests
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> str:
    """The database string of a fresh Flowdesk database with the schema
    applied: a SQLite file, or a PostgreSQL database (``pg_url``)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(request.getfixturevalue("db_path"))


@pytest.mark.scenario("S96")
@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_sigkill_in_a_tool_then_resume_repeats_no_completed_request_or_tool_call(
    database: str, tmp_path: Path, stream: bool
) -> None:
    db_path = database
    log = tmp_path / "tool.log"
    flags = ["--stream"] if stream else []
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), "PAI_TEST_KILL": "tool:b"}
        server.script = list(SCRIPT)
        first = worker(db_path, env, "run", "find a then b", *flags)
        assert first.returncode == -signal.SIGKILL, first.stderr
        run_id = first.stdout.split()[1]
        assert len(server.requests) == 2  # the kill came inside the second call's tool
        assert lines(log) == ["tool a", "tool b"]
        ((run, _, _),) = agent_runs(db_path)
        assert run.status == "running"

        second = worker(db_path, {**env, "PAI_TEST_KILL": ""}, "resume", run_id, *flags)
        assert second.returncode == 0, second.stderr
        assert "done executed=2 replayed=3 output=a and b are found" in second.stdout
        if stream:  # the new request's text arrived as deltas, live
            assert "text a and b are found" in second.stdout
        # three model requests in all: the two before the kill were not sent again
        assert len(server.requests) == 3
        assert requests_made(server)[-1] == ["result for a", "result for b"]
        assert all(r["body"].get("stream", False) is stream for r in server.requests)
    # lookup(a) completed before the kill: not run again; lookup(b) was in flight: run again
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}
    ((run, messages, tools),) = agent_runs(db_path)
    assert (run.status, run.response, run.turns, run.agent) == (
        "done",
        "a and b are found",
        3,
        "helper",
    )
    # the conversation Flowdesk shows: prompt, each reply, each tool result, once
    assert [(m["role"], m.get("name"), m["content"]) for m in messages] == [
        ("user", None, "find a then b"),
        ("assistant", None, ""),
        ("tool", "lookup", "result for a"),
        ("assistant", None, ""),
        ("tool", "lookup", "result for b"),
        ("assistant", None, "a and b are found"),
    ]
    assert [c["arguments"] for m in messages for c in m.get("tool_calls", [])] == [
        {"q": "a"},
        {"q": "b"},
    ]
    by_tool = Counter(t.tool for t in tools if t.status == "completed")
    model_step = "model.request_stream" if stream else "model.request"
    assert by_tool == {"tool_sources": 1, model_step: 3, "lookup": 2}
    calls = {json.loads(t.result or "")["input"]: t for t in tools if t.tool == "lookup"}
    assert calls['{"q":"a"}'].attempts == 1
    assert calls['{"q":"b"}'].attempts == 2  # started before the kill, and once after
    assert json.loads(calls['{"q":"b"}'].result or "")["output"]["result"] == "result for b"


def test_a_resume_whose_tool_was_renamed_fails_before_sending_anything(
    db_path: Path, tmp_path: Path
) -> None:
    """A new user's report: an agent whose tool was renamed after a crash
    inside it resumed without error: the replayed reply still called the
    old name, Pydantic AI told the model the tool was unknown, and the run
    went on with the renamed tool (the killed call's effect made twice, a
    run of two versions, ``show`` listing the old call in progress for
    ever). The resume fails with JournalMismatchError before its next model
    request: nothing sent, nothing called, the run failed saying why."""
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), "PAI_TEST_KILL": "tool:a"}
        server.script = list(SCRIPT)
        first = worker(db_path, env, "run", "find a then b")
        assert first.returncode == -signal.SIGKILL, first.stderr
        run_id = first.stdout.split()[1]
        assert len(server.requests) == 1  # killed inside the first reply's call
        # what the model would answer once told "lookup" is unknown
        server.script = [("json", completion("", [call("find", q="a")])), *SCRIPT[1:]]
        renamed = {**env, "PAI_TEST_KILL": "", "PAI_TEST_RENAMED": "1"}
        second = worker(db_path, renamed, "resume", run_id)
        assert second.returncode != 0, second.stdout
        assert "JournalMismatchError" in second.stderr, second.stderr
        assert f"agent run {run_id} recorded a call to lookup that the resumed" in second.stderr
        assert "the run is failed; resume it with the agent (code, tools, prompt)" in second.stderr
        assert len(server.requests) == 1  # no request sent after the replayed one
        assert lines(log) == ["tool a"]  # nothing called again, under either name
        ((run, _, _),) = agent_runs(db_path)
        assert (run.status, run.error_type) == ("failed", "JournalMismatchError")

        # as it says: the agent it was started with goes on from the journal
        server.script = list(SCRIPT[1:])
        third = worker(db_path, {**env, "PAI_TEST_KILL": ""}, "resume", run_id)
        assert third.returncode == 0, third.stderr
        assert "done executed=" in third.stdout and "output=a and b are found" in third.stdout
    # lookup(a) was in flight at the kill: made again once (at least once), b once
    assert Counter(lines(log)) == {"tool a": 2, "tool b": 1}


@pytest.mark.scenario("S96")
def test_a_done_run_resumed_replays_its_output_without_a_request(db_path, tmp_path) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = list(SCRIPT)
        first = worker(db_path, env, "run", "find a then b")
        assert first.returncode == 0, first.stderr
        assert "done executed=5 replayed=0 output=a and b are found" in first.stdout
        again = worker(db_path, env, "resume", first.stdout.split()[1])
        assert again.returncode == 0, again.stderr
        assert "done executed=0 replayed=5 output=a and b are found" in again.stdout
        assert len(server.requests) == 3
    assert lines(log) == ["tool a", "tool b"]


# -- resumed by Flowdesk: registered agents (settings or entry point) ------------

REGISTERED = {"FLOWDESK_PYDANTIC_AI_AGENTS": '["tests.pydantic_ai_agents:make_helper"]'}


def killed_run(db: Path, log: Path, server: ChatServer) -> tuple[str, dict[str, str]]:
    """A run of ``helper`` SIGKILLed inside ``lookup(b)``; its id and the
    environment (model server, tool log) the resuming process needs."""
    env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
    server.script = list(SCRIPT)
    first = worker(db, {**env, "PAI_TEST_KILL": "tool:b"}, "run", "find a then b")
    assert first.returncode == -signal.SIGKILL, first.stderr
    return first.stdout.split()[1], {**os.environ, **env}


@pytest.mark.scenario("S96")
def test_show_prints_the_conversation_and_its_resume_hint_resumes_the_registered_agent(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        run_id, env = killed_run(db_path, log, server)
        shown = flowdesk(db_path, "show", run_id, env=env)
        assert shown.returncode == 0, shown.stderr
        header = f"agent run {run_id}  agent helper  status interrupted  model turns 2"
        assert header in shown.stdout
        assert '  assistant calls lookup {"q": "a"}' in shown.stdout
        assert "  tool lookup: result for a" in shown.stdout
        # lookup(a) completed; lookup(b) started, its result never saved
        assert "tool calls: 2" in shown.stdout
        assert re.search(r"^  lookup +completed +attempts 1", shown.stdout, re.M)
        assert re.search(r"^  lookup +cut off +attempts 1", shown.stdout, re.M)
        assert (
            "cut off: its process stopped during the call, before its result was saved; the "
            "resume makes it again (at least once, as a Temporal activity) unless its tool "
            "asked your approval"
        ) in shown.stdout
        # not registered in this process's settings: the hint says how first
        hint = re.search(
            r"agent 'helper', which is not registered here: add \"package.module:attribute\" "
            r"of it to pydantic_ai_agents in the settings \(or "
            r"FLOWDESK_PYDANTIC_AI_AGENTS='\[\"package.module:attribute\"\]', "
            r"the module importable\); then (flowdesk .*) continues it$",
            shown.stdout,
            re.M,
        )
        assert hint, shown.stdout
        # without the registration the run is left alone, with what to do
        refused = as_printed(hint.group(1), env)
        assert refused.returncode != 0
        assert "not registered: add" in refused.stderr and "pydantic_ai_agents" in refused.stderr
        assert agent_status(db_path, run_id) == "interrupted"
        # registered as the hint says: the printed command continues it
        registered = {**env, **REGISTERED}
        again = flowdesk(db_path, "show", run_id, env=registered)
        assert "not registered" not in again.stdout
        assert f"; {hint.group(1)} continues it" in again.stdout
        resumed = as_printed(hint.group(1), registered)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "a and b are found"
        assert len(server.requests) == 3
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}
    assert agent_status(db_path, run_id) == "done"
    done = flowdesk(db_path, "show", run_id, env=registered)
    assert "tool calls: 2" in done.stdout, done.stdout
    assert re.search(r"^  lookup +completed +attempts 2", done.stdout, re.M)
    table = flowdesk(db_path, "runs", env=registered)
    assert " 3 turns " in table.stdout, table.stdout


@pytest.mark.scenario("S96")
def test_flowdesk_agent_resumes_an_interrupted_pydantic_ai_run(db_path, tmp_path) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        run_id, env = killed_run(db_path, log, server)
        served = cli_forkserver.popen(
            [
                sys.executable,
                "-m",
                "desktop_app.cli",
                "--db",
                str(db_path),
                "agent",
                "--poll",
                "0.2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**env, **REGISTERED},  # no Flowdesk model: the agent brings its own
        )
        try:
            wait_for(lambda: agent_status(db_path, run_id) == "done", "the run to finish")
        finally:
            served.send_signal(signal.SIGTERM)
            out, err = served.communicate(timeout=60)
        assert served.returncode == 0, err
        assert f"agent run {run_id} done" in out
        assert len(server.requests) == 3
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}


@pytest.mark.scenario("S96")
@pytest.mark.slow
def test_an_mcp_tool_call_that_completed_is_not_made_again_after_a_sigkill(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"  # the notes server's append() and lookup() both write here
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), "PAI_TEST_MCP": "1"}
        server.script = [
            ("json", completion("", [call("append", text="x")])),
            ("json", completion("", [call("lookup", q="b")])),
            ("json", completion("noted x, found b")),
        ]
        first = worker(db_path, {**env, "PAI_TEST_KILL": "tool:b"}, "run", "note x, find b")
        assert first.returncode == -signal.SIGKILL, first.stderr
        offered = {t["function"]["name"] for t in server.requests[0]["body"]["tools"]}
        assert offered == {"append", "append_and_hang", "lookup", "delete"}
        second = worker(db_path, env, "resume", first.stdout.split()[1])
        assert second.returncode == 0, second.stderr
        assert "output=noted x, found b" in second.stdout
        assert len(server.requests) == 3
        assert requests_made(server)[-1] == ["appended; 1 lines", "result for b"]
    assert Counter(lines(log)) == {"x": 1, "tool b": 2}
    ((run, messages, tools),) = agent_runs(db_path)
    assert run.status == "done"
    assert [m.get("name") for m in messages if m["role"] == "tool"] == ["append", "lookup"]
    # the server's tool list is journaled too (discovery is a step)
    assert any(t.tool == "notes.get_tools" and t.status == "completed" for t in tools)


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Pydantic AI agents\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.scenario("S96")
def test_the_readme_snippet_runs_as_pasted(db_path: Path, tmp_path: Path) -> None:
    snippet = readme_snippet()
    assert len(snippet.strip().splitlines()) <= 10
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    # the variables the README's comment names, the server's address for its own
    named = dict(re.findall(r"(OPENAI_\w+)=(\S+)", snippet))
    assert set(named) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}, named
    with ChatServer() as server:
        server.script = list(SCRIPT)
        env = {
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": named["OPENAI_API_KEY"],
            "FLOWDESK_DB_PATH": str(db_path),
            "PYTHONPATH": str(REPO),
        }
        ran = cli_forkserver.run_argv(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, **env},
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == "a and b are found\n"
        assert len(server.requests) == 3
    ((run, _, tools),) = agent_runs(db_path)
    assert (run.agent, run.status, run.turns) == ("helper", "done", 3)
    assert sum(t.tool == "lookup" for t in tools) == 2


@pytest.mark.scenario("S96")
def test_the_readme_snippet_killed_and_run_again_as_its_comment_says_resumes_its_run(
    db_path: Path, tmp_path: Path
) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(readme_snippet())
    assert "# kill -9 it, run it again" in script.read_text()
    answered = threading.Event()
    with ChatServer() as server:
        # the second model request is in flight when the program is killed
        server.script = [SCRIPT[0], ("gate", answered, SCRIPT[1][1])]
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "local",
            "FLOWDESK_DB_PATH": str(db_path),
            "PYTHONPATH": str(REPO),
        }

        def run_it() -> subprocess.CompletedProcess[str]:
            return cli_forkserver.run_argv(
                [sys.executable, str(script)],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
                env=env,
            )

        program = cli_forkserver.popen([sys.executable, str(script)], cwd=tmp_path, env=env)
        wait_for(lambda: len(server.requests) == 2, "the second model request")
        program.kill()  # kill -9
        program.wait(60)
        answered.set()
        server.script = [SCRIPT[1], SCRIPT[2]]
        again = run_it()  # run it again, as pasted
        assert again.returncode == 0, again.stderr
        assert again.stdout == "a and b are found\n"
        # the first request is not sent again; the one cut off is, then the last
        assert len(server.requests) == 4
        assert requests_made(server)[-1] == ["result for a", "result for b"]
        done = run_it()  # once more: the done run's output, with no request
        assert (done.returncode, done.stdout) == (0, "a and b are found\n")
        assert len(server.requests) == 4
    ((run, _, tools),) = agent_runs(db_path)
    assert (run.run_id, run.status) == ("order-7", "done")
    assert [t.attempts for t in tools if t.tool == "lookup"] == [1, 1]


# -- tools that need a person's approval -------------------------------------------

DELETE_X = [
    ("json", completion("", [call("delete", name="x")])),
    ("json", completion("x is deleted")),
]


def waiting_hint(db: Path, env: dict[str, str], answer: str) -> str:
    """The command ``flowdesk waiting`` prints to answer ``answer``."""
    shown = flowdesk(db, "waiting", env=env)
    assert shown.returncode == 0, shown.stderr
    assert 'approve: delete {"name":"x"}' in shown.stdout
    hint = re.search(rf"^\s+{answer}:\s+(flowdesk .*)$", shown.stdout, re.M)
    assert hint, shown.stdout
    return hint.group(1)


@pytest.mark.scenario("S96")
def test_a_tool_that_needs_approval_pauses_the_run_until_a_person_answers(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = list(DELETE_X)
        first = worker(db_path, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        assert 'question approve the call delete {"name":"x"}? (yes/no)' in first.stdout
        assert "input_required" in first.stdout
        # the result's output says so as Pydantic AI's own deferred-tools API does
        assert "deferred approvals [('delete', {'name': 'x'})]" in first.stdout
        assert lines(log) == []  # nothing deleted before a person said yes
        run_id = first.stdout.split()[1]
        assert agent_status(db_path, run_id) == "input_required"
        # a person whose settings lack the agent is told what to do first,
        # and the printed command refuses rather than losing the answer
        bare = {**os.environ, **env}
        unregistered = flowdesk(db_path, "waiting", env=bare)
        assert re.search(
            r"^  first: it is a run of the Pydantic AI agent 'helper', which is not "
            r"registered here: add .*pydantic_ai_agents.*; then$",
            unregistered.stdout,
            re.M,
        ), unregistered.stdout
        listed = json.loads(flowdesk(db_path, "waiting", "-o", "json", env=bare).stdout)
        assert "not registered here" in listed[0]["first"]
        shown = flowdesk(db_path, "show", run_id, env=bare)
        assert "    first: it is a run of the Pydantic AI agent 'helper'" in shown.stdout
        # registered: nothing to do first, and the command it prints answers
        registered = {**os.environ, **env, **REGISTERED}
        listed = json.loads(flowdesk(db_path, "waiting", "-o", "json", env=registered).stdout)
        assert listed[0]["first"] is None
        assert "first:" not in flowdesk(db_path, "waiting", env=registered).stdout
        yes = waiting_hint(db_path, registered, "yes")
        assert re.fullmatch(
            rf"flowdesk --db {re.escape(str(db_path))} answer {run_id} yes "
            r"--wait-id approval/\d+:[0-9a-f]{12}",
            yes,
        ), yes
        # answered all the same where it is not registered: the answer is
        # recorded (first, before the agent is looked for), the run cannot go
        # on here, and the command says how, with the resume that goes on
        refused = as_printed(waiting_hint(db_path, bare, "yes"), bare)
        assert refused.returncode == 2 and "pydantic_ai_agents" in refused.stderr  # config
        resume = f"flowdesk --db {db_path} resume {run_id}"
        assert "your answer was recorded: the run goes on with it once its agent can be " in (
            refused.stderr
        )
        assert f"run {resume} then" in refused.stderr, refused.stderr
        assert agent_status(db_path, run_id) == "interrupted"
        assert lines(log) == []  # nothing deleted where the agent is not registered
        answered = as_printed(resume, registered)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.strip() == "x is deleted"
        assert len(server.requests) == 2  # the first request was not sent again
    assert lines(log) == ["delete x"]
    assert agent_status(db_path, run_id) == "done"
    ((_, messages, tools),) = agent_runs(db_path)
    tool_messages = [(m["name"], m["content"]) for m in messages if m["role"] == "tool"]
    assert tool_messages == [("delete", "deleted x")]
    assert [t.result for t in tools if t.tool == "approval"] == ["yes"]
    shown = flowdesk(db_path, "show", run_id)
    assert "tool calls: 1" in shown.stdout, shown.stdout
    assert re.search(r"^  delete +completed +attempts 1", shown.stdout, re.M)


def test_a_pydantic_ai_answer_pinned_to_another_wait_id_answers_nothing(
    db_path: Path, tmp_path: Path
) -> None:
    """`waiting -o json` gives the run's wait id; `answer RUN yes --wait-id`
    with another id (a question answered elsewhere) is refused and nothing
    is deleted; with the run's own id it approves the call."""
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), **REGISTERED}
        server.script = list(DELETE_X)
        first = worker(db_path, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        run_id = first.stdout.split()[1]
        (row,) = json.loads(flowdesk(db_path, "waiting", "-o", "json", env=env).stdout)
        wait_id = row["wait_id"]
        assert wait_id.startswith("approval/")
        stale = flowdesk(db_path, "answer", run_id, "yes", "--wait-id", wait_id + "0", env=env)
        assert stale.returncode == 1, stale.stderr
        assert "answered elsewhere" in stale.stderr and "nothing was answered" in stale.stderr
        assert lines(log) == []
        assert agent_status(db_path, run_id) == "input_required"
        pinned = flowdesk(db_path, "answer", run_id, "yes", "--wait-id", wait_id, env=env)
        assert pinned.returncode == 0, pinned.stderr
    assert lines(log) == ["delete x"]
    assert agent_status(db_path, run_id) == "done"


@pytest.mark.scenario("S96")
def test_a_declined_call_is_not_made_and_the_model_is_told(db_path, tmp_path) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = [DELETE_X[0], ("json", completion("I left x alone"))]
        first = worker(db_path, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        no = waiting_hint(db_path, {**env, **REGISTERED}, "no")
        answered = as_printed(no, {**env, **REGISTERED})
        assert answered.returncode == 0, answered.stderr
        assert "I left x alone" in answered.stdout
        shown = requests_made(server)[-1]
        assert len(shown) == 1 and "declined" in shown[0]
    assert lines(log) == []
    # `show` lists the declined call: a turn with what the model was told, and a call
    run_id = first.stdout.split()[1]
    said = flowdesk(db_path, "show", run_id, env={**env, **REGISTERED}).stdout
    turns = said[said.index("messages:") : said.index("tool calls:")].splitlines()
    assert turns[1:] == [
        "  user: delete x",
        '  assistant calls delete {"name": "x"}',
        '  tool delete: {"error": "the user declined this call to delete; it was not run. '
        'Do not retry it."}',
        "  assistant: I left x alone",
    ], said
    assert "tool calls: 1" in said
    # "reused" is a count, as for every call (a tryout saw "reused False" here)
    assert re.search(r"^  delete +declined +attempts 0  reused 0$", said, re.M), said


@pytest.mark.scenario("S96")
@pytest.mark.slow
def test_an_approved_call_killed_mid_way_is_not_made_again(db_path, tmp_path) -> None:
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = [DELETE_X[0], ("json", completion("could not tell"))]
        first = worker(db_path, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        run_id = first.stdout.split()[1]
        yes = waiting_hint(db_path, {**env, **REGISTERED}, "yes")
        killed = as_printed(yes, {**env, **REGISTERED, "PAI_TEST_KILL": "delete:x"})
        assert killed.returncode == -signal.SIGKILL
        assert agent_status(db_path, run_id) == "interrupted"
        cut = flowdesk(db_path, "show", run_id, env={**env, **REGISTERED}).stdout
        assert re.search(r"^  delete +cut off", cut, re.M), cut
        assert "unless its tool asked your approval; then it records the call's outcome" in cut
        resumed = flowdesk(db_path, "resume", run_id, env={**env, **REGISTERED})
        assert resumed.returncode == 0, resumed.stderr
        assert "could not tell" in resumed.stdout
        (shown,) = requests_made(server)[-1]
        assert "whether it took effect is unknown" in shown
        assert len(server.requests) == 2
    assert lines(log) == ["delete x"]  # approved once, made once
    # show says so, as for an MCP call
    said = flowdesk(db_path, "show", run_id, env={**env, **REGISTERED})
    assert said.returncode == 0, said.stderr
    assert re.search(r"^  delete +unknown", said.stdout, re.M), said.stdout
    assert "in_progress" not in said.stdout
    # resumed again (its server gone), the run replays from its journal: the
    # same answer, the unknown outcome told again, nothing sent or made
    again = flowdesk(db_path, "resume", run_id, env={**env, **REGISTERED})
    assert again.returncode == 0 and "could not tell" in again.stdout, again.stderr
    assert lines(log) == ["delete x"]


@pytest.mark.scenario("S96")
@pytest.mark.parametrize("at", ["load", "startup"])
def test_an_approval_killed_during_the_agents_start_up_is_kept_and_made_once(
    db_path: Path, tmp_path: Path, at: str
) -> None:
    """``flowdesk answer RUN yes`` SIGKILLed while the registered agent
    starts (``load``: its registration builds it; ``startup``: the run enters
    its toolsets, as its MCP servers start): the approval was recorded
    first, so the run is interrupted, not waiting again, and the ``resume``
    that follows makes the approved call, once. Before, a kill while the
    agent was built lost the approval: the run asked again."""
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), **REGISTERED}
        server.script = list(DELETE_X)
        first = worker(db_path, env, "run", "delete x")
        assert first.returncode == 0, first.stderr
        run_id = first.stdout.split()[1]
        yes = waiting_hint(db_path, env, "yes")
        killed = as_printed(yes, {**env, "PAI_TEST_KILL": at})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert lines(log) == [at]  # killed there, nothing deleted yet
        assert agent_status(db_path, run_id) == "interrupted"  # the approval is kept
        resumed = flowdesk(db_path, "resume", run_id, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "x is deleted"
        assert len(server.requests) == 2  # the first request was not sent again
    assert lines(log) == [at, "delete x"]  # approved once, made once
    assert agent_status(db_path, run_id) == "done"
    ((_, _, tools),) = agent_runs(db_path)
    assert [t.result for t in tools if t.tool == "approval"] == ["yes"]


# -- canceled by the user (`flowdesk cancel`) while a process drives it -------------


def gated(server: ChatServer, log: Path, gate: Path, q: str) -> dict[str, str]:
    """A worker's environment for a run of ``SCRIPT`` (scripted on
    ``server`` here), its tool calls logged to ``log``, ``lookup(q)`` held in
    flight until the file ``gate`` exists."""
    server.script = list(SCRIPT)
    return {
        **os.environ,
        "PAI_TEST_URL": server.url,
        "PAI_TEST_LOG": str(log),
        "PAI_TEST_GATE": f"{q}:{gate}",
    }


def started_worker(db: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """The worker driving a new run of ``find a then b``, and the run's id
    (printed once the run is stored)."""
    proc = cli_forkserver.popen(
        [sys.executable, str(WORKER), db, "run", "find a then b"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        preexec_fn=default_sigint,  # a test may stop it with Ctrl-C
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[:1] == ["run"], (first, proc.communicate(timeout=60))
    return proc, first[1]


@pytest.mark.scenario("S96")
def test_a_cancel_during_a_model_request_stops_the_run_before_its_next_tool_call(
    database: str, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    answered = threading.Event()
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = [
            SCRIPT[0],  # lookup(a)
            ("gate", answered, completion("", [call("lookup", q="b")])),  # a slow model
            SCRIPT[2],
        ]
        proc, run_id = started_worker(database, env)
        try:
            wait_for(lambda: len(server.requests) == 2, "the second model request")
            canceled = flowdesk(database, "cancel", run_id, env=env)
            assert canceled.returncode == 0, canceled.stderr
            assert canceled.stdout.splitlines() == [
                f"agent run {run_id} canceled",
                f"the process executing it ({agent_runs(database)[0][0].lease_owner}) stops "
                "before its next model or tool call",
            ]
        finally:
            answered.set()  # the model now asks for lookup(b)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, err
        assert out.splitlines()[-1] == (
            f"canceled in_flight=None agent run {run_id} was canceled while this process "
            "executed it; nothing more of it is written here"
        )
        assert len(server.requests) == 2  # no request after the cancel
    assert lines(log) == ["tool a"]  # lookup(b) was never called
    ((run, messages, tools),) = agent_runs(database)
    assert (run.status, run.error, run.response) == ("canceled", "canceled by user", None)
    # the reply that came after the cancel was dropped: the conversation ends at lookup(a)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "find a then b"),
        ("assistant", ""),
        ("tool", "result for a"),
    ]
    assert [(t.tool, t.status) for t in tools if t.tool == "lookup"] == [("lookup", "completed")]
    refused = flowdesk(database, "resume", run_id, env=env)
    said = re.fullmatch(
        rf"flowdesk: agent run {run_id} is canceled; it cannot be resumed or answered "
        r"\(`(flowdesk .*)` says what it did\)",
        refused.stderr.strip(),
    )
    assert refused.returncode != 0 and said, refused.stderr
    shown = as_printed(said.group(1), env)  # the hint, run as printed
    assert shown.returncode == 0, shown.stderr
    assert f"agent run {run_id}  agent helper  status canceled" in shown.stdout
    assert "  tool lookup: result for a" in shown.stdout


@pytest.mark.scenario("S96")
def test_a_cancel_during_a_tool_call_records_its_result_and_nothing_after_it_runs(
    database: str, tmp_path: Path
) -> None:
    log, gate = tmp_path / "tool.log", tmp_path / "gate"
    with ChatServer() as server:
        env = gated(server, log, gate, "a")  # lookup(a) is in flight until the gate opens
        proc, run_id = started_worker(database, env)
        try:
            wait_for(lambda: lines(log) == ["tool a"], "lookup(a) to be in flight")
            canceled = flowdesk(database, "cancel", run_id, env=env)
            assert canceled.returncode == 0, canceled.stderr
            assert canceled.stdout.splitlines()[1].endswith(
                "stops before its next model or tool call; its call to lookup is in flight: "
                "that call runs to its end (what it does stays done, its result is recorded) "
                "and nothing after it runs"
            )
        finally:
            gate.touch()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, err
        assert out.splitlines()[-1] == (
            f"canceled in_flight=lookup agent run {run_id} was canceled while this process "
            "executed it, while its call to lookup was in flight: that call ran to its end (its "
            "result is recorded, whatever it did stays done) and nothing after it ran"
        )
        assert len(server.requests) == 1  # no model request after the call
    assert lines(log) == ["tool a"]
    ((run, messages, tools),) = agent_runs(database)
    assert run.status == "canceled"
    # what `flowdesk cancel` promised: the call's result is recorded
    assert [(m["role"], m["content"]) for m in messages][-1] == ("tool", "result for a")
    assert [(t.tool, t.status) for t in tools if t.tool == "lookup"] == [("lookup", "completed")]


def test_a_cancel_between_a_tool_call_and_the_next_request_sends_no_request(
    db_path: Path,
) -> None:
    """A cancel that commits right after a tool call's result (in no unit):
    the next model request is never sent, as ``flowdesk cancel`` says."""
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from desktop_app.errors import AgentRunCanceledError
    from desktop_app.integrations.pydantic_ai import FlowdeskAgent
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import open_store

    class CancelAfterTheCall(SqliteAgentStore):
        """Another process's cancel commits right after the call's result."""

        def update(self, run_id: str, now: float, **kw):  # type: ignore[no-untyped-def]
            super().update(run_id, now, **kw)
            tool = kw.get("tool")
            if tool is not None and tool[1] == "lookup" and tool[2] == "completed":
                SqliteAgentStore.update(self, run_id, now, status="canceled", error="stop")

    requests = []

    def model(messages, info):  # type: ignore[no-untyped-def]
        requests.append(len(messages))
        if len(requests) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "a"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("found")])

    agent = PydanticAgent(FunctionModel(model), name="helper")

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up."""
        return f"result for {q}"

    store = open_store(db_path)
    try:
        agents = CancelAfterTheCall(store)
        with pytest.raises(AgentRunCanceledError) as raised:
            FlowdeskAgent(agent, agents).run_sync("find a", run_id="r1")
        assert raised.value.in_flight is None
        assert len(requests) == 1  # the second request was never sent
        assert (agents.get("r1").status, agents.get("r1").error) == ("canceled", "stop")
        assert agents.messages("r1")[-1]["content"] == "result for a"
    finally:
        store.close()


def test_only_the_integration_imports_pydantic_ai() -> None:
    """``pydantic_ai`` is an optional extra: no other module of Flowdesk imports it."""
    importers = []
    for path in sorted((REPO / "desktop_app").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "pydantic_ai" or n.startswith("pydantic_ai.") for n in names):
                importers.append(path.relative_to(REPO).parent.as_posix())
    assert set(importers) == {"desktop_app/integrations/pydantic_ai"}


def test_calling_again_on_a_waiting_run_returns_its_wait_and_resume_names_the_db(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same `run(..., run_id=...)` again on a run that waits for an
    approval returns the `input_required` result the first call returned
    (it raised InputRequiredError), sending no model request; `resume`
    without an answer raises InputRequiredError whose command carries the
    program's --db and --scope (it named neither, so it opened the default
    file: "no run ... in scope"), and that command answers it as printed."""
    from pydantic_ai import DeferredToolRequests

    from desktop_app.errors import InputError, InputRequiredError
    from desktop_app.integrations.pydantic_ai import FlowdeskAgent
    from tests.pydantic_ai_agents import make_helper

    log = tmp_path / "tool.log"
    with ChatServer() as server:
        monkeypatch.setenv("PAI_TEST_URL", server.url)
        monkeypatch.setenv("PAI_TEST_LOG", str(log))
        server.script = list(DELETE_X)
        services = open_services(load_settings(db_path=database, scope="work"), flows=[])
        try:
            durable = FlowdeskAgent(make_helper(), services.agents)
            first = durable.run_sync("delete x", run_id="order-10")
            assert first.status == "input_required"
            again = durable.run_sync("delete x", run_id="order-10")
            assert again.status == "input_required" and again.question == first.question
            assert isinstance(again.output, DeferredToolRequests)
            assert [c.tool_name for c in again.output.approvals] == ["delete"]
            assert len(server.requests) == 1  # replayed from the journal
            # another prompt under its run id (a new user's report: it returned
            # the old run's result as this prompt's): refused, nothing ran
            with pytest.raises(InputError, match="exists with another prompt") as other:
                durable.run_sync("delete y", run_id="order-10")
            assert str(other.value).startswith(
                "agent run order-10 exists with another prompt ('delete x'); nothing ran."
            )
            assert len(server.requests) == 1
            with pytest.raises(InputRequiredError) as err:
                durable.resume_sync("order-10")
        finally:
            services.close()
        found = re.search(r"`(flowdesk [^`]*answer order-10 yes[^`]*)`", str(err.value))
        assert found, str(err.value)
        assert re.fullmatch(
            rf"flowdesk --db {re.escape(database)} --scope work answer order-10 yes "
            r"--wait-id approval/1:[0-9a-f]{12}",
            found.group(1),
        ), found.group(1)
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log), **REGISTERED}
        env.pop("FLOWDESK_DB_PATH", None)  # only what the command says
        answered = as_printed(found.group(1), env)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.strip() == "x is deleted"
    assert lines(log) == ["delete x"]


# -- Ctrl-C (SIGINT) while a tool call is in flight ----------------------------


def stderr_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """The next line ``proc`` writes on stderr (fails after ``timeout`` s)."""
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], timeout)
    assert ready, f"nothing on stderr within {timeout} s"
    return proc.stderr.readline()


@pytest.mark.scenario("S96")
def test_ctrl_c_during_a_tool_call_lets_it_end_saves_its_result_and_resume_does_not_make_it_again(
    database: str, tmp_path: Path
) -> None:
    log, gate = tmp_path / "tool.log", tmp_path / "gate"
    with ChatServer() as server:
        env = gated(server, log, gate, "b")  # lookup(b) is in flight until the gate opens
        proc, run_id = started_worker(database, env)
        try:
            wait_for(lambda: lines(log) == ["tool a", "tool b"], "lookup(b) to be in flight")
            proc.send_signal(signal.SIGINT)  # the user's Ctrl-C
            said = stderr_line(proc)  # said at once, while the call still runs
            assert proc.poll() is None
        finally:
            gate.touch()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0  # stopped by the Ctrl-C, not run to its end
        assert said.strip() == (
            f"stopping agent run {run_id} once its call to lookup in flight ends (its result is "
            "then saved and not made again on resume); Ctrl-C again stops without saving it (the "
            "call is then made again on resume)"
        ), said + err
        assert len(server.requests) == 2  # no model request after the Ctrl-C
        ((run, messages, tools),) = agent_runs(database)
        assert run.status == "running"  # interrupted: resumable
        calls = {json.loads(t.result or "")["input"]: t for t in tools if t.tool == "lookup"}
        assert calls['{"q":"b"}'].status == "completed"
        assert [(m["role"], m["content"]) for m in messages][-1] == ("tool", "result for b")

        resumed = worker(
            database, {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}, "resume", run_id
        )
        assert resumed.returncode == 0, resumed.stderr
        assert "done executed=1 replayed=4 output=a and b are found" in resumed.stdout
        assert len(server.requests) == 3
        assert requests_made(server)[-1] == ["result for a", "result for b"]
    assert lines(log) == ["tool a", "tool b"]  # each call made once
    ((run, _, tools),) = agent_runs(database)
    assert run.status == "done"
    assert [t.attempts for t in tools if t.tool == "lookup"] == [1, 1]


@pytest.mark.scenario("S96")
def test_a_second_ctrl_c_stops_without_saving_the_call_and_resume_makes_it_again(
    db_path: Path, tmp_path: Path
) -> None:
    log, gate = tmp_path / "tool.log", tmp_path / "gate"
    with ChatServer() as server:
        env = gated(server, log, gate, "b")
        proc, run_id = started_worker(str(db_path), env)
        try:
            wait_for(lambda: lines(log) == ["tool a", "tool b"], "lookup(b) to be in flight")
            proc.send_signal(signal.SIGINT)
            assert "Ctrl-C again stops without saving it" in stderr_line(proc)
            proc.send_signal(signal.SIGINT)  # as the line says: without saving it
            time.sleep(0.5)
        finally:
            gate.touch()
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        ((run, _, tools),) = agent_runs(db_path)
        assert run.status == "running"
        assert [t.status for t in tools if t.tool == "lookup"] == ["completed", "in_progress"]

        resumed = worker(
            db_path, {"PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}, "resume", run_id
        )
        assert resumed.returncode == 0, resumed.stderr
        assert "done executed=2 replayed=3 output=a and b are found" in resumed.stdout
    assert lines(log) == ["tool a", "tool b", "tool b"]  # made again, as the line said


@pytest.mark.scenario("S96")
def test_ctrl_c_in_flowdesk_resume_says_it_waits_for_the_call_and_its_hint_does_not_make_it_again(
    db_path: Path, tmp_path: Path
) -> None:
    log, gate = tmp_path / "tool.log", tmp_path / "gate"
    with ChatServer() as server:
        run_id, env = killed_run(db_path, log, server)  # killed inside lookup(b)
        env = {**env, **REGISTERED}
        proc = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", str(db_path), "resume", run_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**env, "PAI_TEST_GATE": f"b:{gate}"},
            preexec_fn=default_sigint,
        )
        try:
            wait_for(lambda: lines(log) == ["tool a", "tool b", "tool b"], "lookup(b) again")
            proc.send_signal(signal.SIGINT)
            said = stderr_line(proc)
            assert proc.poll() is None
        finally:
            gate.touch()
        _, err = proc.communicate(timeout=60)
        assert said.strip() == (
            f"flowdesk: stopping agent run {run_id} once its call to lookup in flight ends (its "
            "result is then saved and not made again on resume); Ctrl-C again stops without "
            "saving it (the call is then made again on resume)"
        ), said + err
        assert proc.returncode == 130, err
        hint = re.search(r"interrupted; run `(flowdesk [^`]+)` to continue", err)
        assert hint, err
        assert len(server.requests) == 2  # the run's third request was never sent
        resumed = as_printed(hint.group(1), env)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "a and b are found"
        assert len(server.requests) == 3
    # b: once before the kill -9 (cut off: made again), once in the resume Ctrl-C stopped
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}
    assert agent_status(db_path, run_id) == "done"


@pytest.mark.scenario("S96")
def test_a_broken_registration_beside_the_runs_own_agent_does_not_stop_its_resume(
    db_path: Path, tmp_path: Path
) -> None:
    """A new user's report: one registration that could not be imported made
    `flowdesk resume` refuse every Pydantic AI run (exit 2), also those of a
    registered agent that loads. A broken registration is told, not fatal to
    the others, as a broken flow is; one whose factory raises is said to have
    raised, not to be unimportable."""
    log = tmp_path / "tool.log"
    (tmp_path / "raising_agents.py").write_text(
        "def make():\n    raise RuntimeError('Set the OPENAI_API_KEY environment variable')\n"
    )
    with ChatServer() as server:
        run_id, env = killed_run(db_path, log, server)
        broken = '"no_such_module_x:agent", "raising_agents:make"'
        agents = f'[{broken}, "tests.pydantic_ai_agents:make_helper"]'
        env = {
            **env,
            "FLOWDESK_PYDANTIC_AI_AGENTS": agents,
            "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}",
        }
        shown = flowdesk(db_path, "show", run_id, env=env)
        assert "not registered" not in shown.stdout, shown.stdout
        resumed = flowdesk(db_path, "resume", run_id, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "a and b are found"
    assert Counter(lines(log)) == {"tool a": 1, "tool b": 2}
    assert agent_status(db_path, run_id) == "done"

    # an agent that only a broken registration could give: refused, saying why each failed
    only_broken = {**env, "FLOWDESK_PYDANTIC_AI_AGENTS": f"[{broken}]"}
    with ChatServer() as server:
        second, _ = killed_run(db_path, log, server)
    refused = flowdesk(db_path, "resume", second, env=only_broken)
    assert refused.returncode != 0
    assert "'helper', which is not registered" in refused.stderr, refused.stderr
    assert (
        "cannot load the Pydantic AI agent of pydantic_ai_agents entry 'no_such_module_x:agent': "
        "ModuleNotFoundError"
    ) in refused.stderr
    assert (
        "the Pydantic AI agent of pydantic_ai_agents entry 'raising_agents:make' raised while "
        "it was built: RuntimeError: Set the OPENAI_API_KEY environment variable"
    ) in refused.stderr
    assert "raising_agents:make': RuntimeError" not in refused.stderr  # not "cannot load"
    assert agent_status(db_path, second) == "interrupted"


@pytest.mark.scenario("S96")
def test_resume_all_prints_the_approve_and_decline_commands_of_a_run_it_leaves_waiting(
    db_path: Path, tmp_path: Path
) -> None:
    """A new user's report: `resume --all` printed only "agent run RUN
    input_required" for a run it took on to a tool call waiting for
    approval, where `resume RUN` prints the commands that approve and
    decline that call. It prints them too; the approve command, run as
    printed, makes the call once."""
    log = tmp_path / "tool.log"
    with ChatServer() as server:
        env = {**os.environ, "PAI_TEST_URL": server.url, "PAI_TEST_LOG": str(log)}
        server.script = [
            ("json", completion("", [call("lookup", q="a")])),
            ("json", completion("", [call("delete", name="x")])),
            ("json", completion("x is deleted")),
        ]
        first = worker(db_path, {**env, "PAI_TEST_KILL": "tool:a"}, "run", "tidy up")
        assert first.returncode == -signal.SIGKILL, first.stderr
        run_id = first.stdout.split()[1]
        registered = {**env, **REGISTERED}
        resumed = flowdesk(db_path, "resume", "--all", env=registered)
        assert f"agent run {run_id} input_required" in resumed.stdout, resumed.stdout
        approve = re.search(r"^  approve with: (flowdesk .*)$", resumed.stdout, re.M)
        decline = re.search(r"^  decline with: (flowdesk .*)$", resumed.stdout, re.M)
        assert approve and decline, resumed.stdout
        assert approve.group(1).replace(" yes ", " no ") == decline.group(1)
        answered = as_printed(approve.group(1), registered)
        assert answered.returncode == 0, answered.stderr
        assert "x is deleted" in answered.stdout
        assert len(server.requests) == 3
    assert Counter(lines(log)) == {"tool a": 2, "delete x": 1}
    assert agent_status(db_path, run_id) == "done"
