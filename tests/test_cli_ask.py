"""`flowdesk ask` and `flowdesk secrets` as a user runs them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_support import as_printed

REPO = Path(__file__).resolve().parents[1]


def run(db: Path, *args: str, env: dict | None = None, stdin: str | None = None):
    return cli_forkserver.run(
        ["--db", str(db), *args],
        env={**os.environ, **(env or {})},
        cwd=REPO,
        timeout=120,
        input=stdin,
    )


def test_ask_over_files_with_a_local_server(tmp_path):
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("# Todo\n\nBuy milk.\n")
    unconfigured = run(db, "ask", "what is in my notes?")
    assert unconfigured.returncode == 2 and "no model is configured" in unconfigured.stderr
    with ChatServer() as server:
        server.script = [
            ("json", completion("", [{"id": "a", "name": "list_folder", "args": {"path": "."}}])),
            (
                "json",
                completion("", [{"id": "b", "name": "read_file", "args": {"path": "todo.md"}}]),
            ),
            ("json", completion("You need to buy milk.")),
        ]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = run(
            db, "ask", "what is in my notes?", "--tools", "files", "--folder", str(folder), env=env
        )
        assert out.returncode == 0, out.stderr
        assert "You need to buy milk." in out.stdout
        assert "[list_folder…]" in out.stderr and "[read_file…]" in out.stderr
        tool_answers = [
            m["content"] for m in server.requests[2]["body"]["messages"] if m["role"] == "tool"
        ]
        assert tool_answers == ["todo.md", "# Todo\n\nBuy milk.\n"]
        run_id = out.stderr.strip().splitlines()[-1].split()[1]
        again = run(db, "ask", "--resume", run_id, env=env)
        assert again.returncode == 0 and "buy milk" in again.stdout  # saved, no new call
        assert len(server.requests) == 3


def test_secrets_go_to_the_keyring_or_fail_clearly(tmp_path):
    out = run(tmp_path / "f.db", "secrets", "set", "model_api_key", stdin="sk-xyz\n")
    assert out.returncode == 1 and "keyring" in out.stderr and "Traceback" not in out.stderr
    assert "sk-xyz" not in out.stdout + out.stderr


def two_docs(tmp_path):
    """A folder ``docs`` holding a Markdown file and a text file to digest."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha text here.\n")
    (folder / "b.txt").write_text("Beta text here.\n")
    return folder


def digest_with_model(db: Path, folder: Path, out: Path, env: dict):
    """``flowdesk run digest --model --quiet`` of ``folder`` into ``out``."""
    return run(
        db, "run", "digest", "--folder", str(folder), "--out", str(out), "--model", "--quiet",
        env=env,
    )  # fmt: skip


def test_digest_model_mode_summaries_come_from_the_agent(tmp_path):
    import sqlite_utils

    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    folder = two_docs(tmp_path)
    (folder / "c.bin").write_bytes(b"\x00\x01")
    with ChatServer() as server:
        server.script = [
            ("json", completion("Model summary of A.")),
            ("json", completion("Model summary of B.")),
        ]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = digest_with_model(db, folder, tmp_path / "o", env)
        assert out.returncode == 0, out.stderr
        assert len(server.requests) == 2  # the binary file is not sent to the model
    report = (tmp_path / "o" / "digest.md").read_text()
    assert "Model summary of A." in report and "Model summary of B." in report
    database = sqlite_utils.Database(db)
    (flow_run,) = list(database.query("SELECT run_id, flow_version FROM runs"))
    assert flow_run["flow_version"].startswith("1-model+")
    children = list(database.query("SELECT run_id, parent_run_id, status FROM agent_runs"))
    assert {c["parent_run_id"] for c in children} == {flow_run["run_id"]}
    assert sorted(c["run_id"] for c in children) == [
        f"{flow_run['run_id']}:a.md",
        f"{flow_run['run_id']}:b.txt",
    ]
    database.close()


def _notes(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("# Todo\n\nBuy milk.\n")
    return db, folder


LIST_THEN_ANSWER = [
    ("json", completion("", [{"id": "a", "name": "list_folder", "args": {"path": "."}}])),
    ("json", completion("There is todo.md.")),
]


@pytest.mark.scenario("S92")
@pytest.mark.parametrize("off", ["--no-stream", "FLOWDESK_MODEL__STREAM=false"])
def test_ask_calls_tools_on_a_llama_cpp_server_with_streaming_off(tmp_path, off):
    db, folder = _notes(tmp_path)
    with ChatServer(llama_cpp="no_call") as server:
        server.script = list(LIST_THEN_ANSWER)
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        flag = [off] if off.startswith("--") else []
        if not flag:
            env[off.split("=")[0]] = off.split("=")[1]
        out = run(
            db, "ask", "what is here?", "--tools", "files", "--folder", str(folder), *flag, env=env
        )
        assert out.returncode == 0, out.stderr
        assert "There is todo.md." in out.stdout and "[list_folder…]" in out.stderr
        bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 2
    assert all(b["tool_choice"] == "auto" and not b.get("stream") for b in bodies)
    assert [m["content"] for m in bodies[1]["messages"] if m["role"] == "tool"] == ["todo.md"]


@pytest.mark.scenario("S92")
def test_a_llama_cpp_server_ignores_tools_sent_without_tool_choice():
    """The scripted server's premise, as llama-cpp-python's handlers behave:
    without ``tool_choice`` the tools are not used (the call becomes text)."""
    import httpx

    call = completion("", [{"id": "a", "name": "list_folder", "args": {"path": "."}}])
    tools = [{"type": "function", "function": {"name": "list_folder", "parameters": {}}}]
    with ChatServer(llama_cpp="json") as server:
        server.script = [("json", call), ("json", call)]
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        ignored = httpx.post(server.url + "/chat/completions", json=ask).json()
        used = httpx.post(
            server.url + "/chat/completions", json={**ask, "tool_choice": "auto"}
        ).json()
    assert "tool_calls" not in ignored["choices"][0]["message"]
    assert used["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "list_folder"


@pytest.mark.scenario("S92")
@pytest.mark.parametrize("answer", ["json", "no_call", "abort"])
def test_ask_streaming_tools_from_a_llama_cpp_server_names_the_cause(tmp_path, answer):
    """Streaming on, the run fails naming the cause and how to turn streaming
    off; the command it prints, run as printed, finishes the run without a
    stream and with its tools (their lines printed as a new ask prints them)."""
    db, folder = _notes(tmp_path)
    with ChatServer(llama_cpp=answer) as server:
        server.script = [LIST_THEN_ANSWER[0], *LIST_THEN_ANSWER]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = run(db, "ask", "what is here?", "--tools", "files", "--folder", str(folder), env=env)
        assert out.returncode == 1
        assert len(server.requests) == 1  # not retried: it would fail the same way
        assert server.requests[0]["body"]["stream"] is True
        assert server.requests[0]["body"]["tool_choice"] == "auto"
        assert "cannot stream tool calls" in out.stderr
        assert "--no-stream" in out.stderr and "FLOWDESK_MODEL__STREAM=false" in out.stderr
        assert "Traceback" not in out.stderr
        (hint,) = re.findall(r"\((flowdesk [^()]*)\)\s*$", out.stderr)
        assert hint.endswith("--no-stream") and "--resume" in hint
        again = as_printed(hint, {**os.environ, **env})
        assert again.returncode == 0, again.stderr
        assert "There is todo.md." in again.stdout and "[list_folder…]" in again.stderr
        resumed = [r["body"] for r in server.requests[1:]]
    assert len(resumed) == 2 and not any(b.get("stream") for b in resumed)
    assert [m["content"] for m in resumed[1]["messages"] if m["role"] == "tool"] == ["todo.md"]


@pytest.mark.scenario("S93")
def test_digest_model_mode_offers_no_ask_user_and_completes(tmp_path):
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    folder = two_docs(tmp_path)
    asks_anyway = [{"id": "q", "name": "ask_user", "args": {"question": "Which one?"}}]
    with ChatServer() as server:
        server.script = [
            ("ask_user_if_offered", "Summarise in French?", "Model summary of A."),
            ("json", completion("", asks_anyway)),  # calls it although it is not offered
            ("json", completion("Model summary of B.")),
        ]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = run(
            db, "run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"),
            "--model", "--quiet", env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        bodies = [r["body"] for r in server.requests]
    assert [b.get("tools") for b in bodies] == [None, None, None]  # nothing offered
    unknown = [m["content"] for m in bodies[2]["messages"] if m["role"] == "tool"]
    assert "unknown tool 'ask_user'" in unknown[0]
    report = (tmp_path / "o" / "digest.md").read_text()
    assert "Model summary of A." in report and "Model summary of B." in report
    assert "2 files: 2 summarised, 0 skipped." in report


@pytest.mark.scenario("S93")
def test_digest_reports_the_question_of_a_summary_run_that_ended_asking(tmp_path):
    from desktop_app import bootstrap
    from desktop_app.agent import Agent
    from desktop_app.agent.openai_compat import OpenAICompatibleModel
    from desktop_app.config import load_settings
    from desktop_app.flows.digest import agent_summarizer, build_digest_flow

    folder = two_docs(tmp_path)
    settings = load_settings(db_path=tmp_path / "f.db")
    bootstrap.apply_schema(settings)
    with ChatServer() as server:
        server.script = [
            ("ask_user_if_offered", "Summarise in French?", "unused"),
            ("json", completion("Model summary of B.")),
            ("ask_user_if_offered", "Which audience?", "unused"),
            ("json", completion("Model summary of B again.")),
        ]
        model = OpenAICompatibleModel(server.url, "m")
        sv = bootstrap.open_services(settings, flows=[])
        try:
            asking = Agent("digest-summary", model, sv.agents)  # offers ask_user
            flow = build_digest_flow(summarizer=agent_summarizer(asking))
            sv.engine.register(flow)
            out = tmp_path / "o1"
            first = sv.engine.run(flow, {"folder": str(folder), "out": str(out)}, run_id="d1")
            # a child that asked before its step committed: the step reattaches to it
            assert asking.ask("x", run_id="d2:a.md").status == "input_required"
            out2 = tmp_path / "o2"
            second = sv.engine.run(flow, {"folder": str(folder), "out": str(out2)}, run_id="d2")
        finally:
            sv.close()
        assert len(server.requests) == 4
    assert (first.status, second.status) == ("completed", "completed")
    report = (out / "digest.md").read_text()
    assert "1 summarised, 1 skipped" in report and "Model summary of B." in report
    assert "- a.md (not summarised: the model asked 'Summarise in French?' instead" in report
    assert "(agent run d1:a.md)" in report
    again = (out2 / "digest.md").read_text()
    assert "- a.md (not summarised: the model asked 'Which audience?' instead" in again


def test_a_rate_limited_ask_says_when_and_is_resumed_once_due(tmp_path):
    """A 429's Retry-After is when the run may go on: ``ask`` says so with
    the time, the printed resume works after it, and ``resume --all`` (as
    ``flowdesk agent`` each pass) resumes a rate-limited run once it is due:
    it never did, so nothing unattended went on with it."""
    import time

    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [
            ("status", 429, {"Retry-After": "1"}, "slow down"),
            ("status", 429, {"Retry-After": "1"}, "slow down"),
            ("json", completion("First answer.")),
            ("json", completion("Second answer.")),
        ]
        first = run(db, "ask", "one", env=env)
        assert first.returncode == 1, first.stderr
        assert "rate_limited: rate limited by the provider (HTTP 429)" in first.stderr
        assert "it can go on from " in first.stderr and "(UTC)" in first.stderr
        (hint,) = re.findall(r"or run `([^`]+)` after that", first.stderr)
        first_id = first.stderr.split()[1]
        assert hint == f"flowdesk --db {db} resume {first_id}"
        second = run(db, "ask", "two", env=env)
        assert second.returncode == 1, second.stderr
        second_id = second.stderr.split()[1]
        time.sleep(1.5)  # both Retry-Afters pass (not a timing assertion)
        resumed = as_printed(hint, {**os.environ, **env})
        assert resumed.returncode == 0, resumed.stderr
        assert "First answer." in resumed.stdout
        swept = run(db, "resume", "--all", env=env)
        assert swept.returncode == 0, swept.stdout
        assert f"agent run {second_id} done" in swept.stdout
        assert len(server.requests) == 4


def test_a_refused_key_names_the_keyring_entry_and_the_printed_command_fixes_it(tmp_path):
    """A 401 names the configured keyring entry (not a placeholder) in a
    command the user runs as printed; the next ``ask`` then sends that key."""
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [("status", 401, {}, "bad key"), ("json", completion("hello back"))]
        env = {
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_MODEL__API_KEY_NAME": "work_llm",
            "PYTHON_KEYRING_BACKEND": "tests.file_keyring.FileKeyring",
            "TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
        }
        refused = run(db, "ask", "hello", env=env)
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr, refused.stderr
        assert "NAME" not in refused.stderr
        (hint,) = re.findall(r"`(flowdesk secrets set [^`]+)`", refused.stderr)
        assert hint == "flowdesk secrets set work_llm"
        stored = as_printed(hint, {**os.environ, **env}, input="fd-right-key-123\n")
        assert stored.returncode == 0, stored.stderr
        again = run(db, "ask", "hello", env=env)
        assert again.returncode == 0 and "hello back" in again.stdout, again.stderr
        assert "Authorization" not in server.requests[0]["headers"]  # no key at first
        assert server.requests[1]["headers"]["Authorization"] == "Bearer fd-right-key-123"


def test_a_refused_key_from_the_environment_says_so(tmp_path):
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [("status", 403, {}, "forbidden")]
        env = {
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_MODEL__API_KEY": "fd-wrong-key-456",
        }
        refused = run(db, "ask", "hello", env=env)
    assert refused.returncode == 1 and "HTTP 403" in refused.stderr
    assert "FLOWDESK_MODEL__API_KEY environment variable" in refused.stderr
    assert "secrets set" not in refused.stderr and "fd-wrong-key-456" not in refused.stderr


@pytest.mark.parametrize("stream", [True, False])
def test_an_empty_model_reply_fails_the_run_and_the_printed_resume_asks_again(tmp_path, stream):
    """A reply with no text and no tool call (cut at the token limit) is no
    answer: the run fails saying why, and the printed ``resume`` asks again."""
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        if stream:
            empty = ("sse", [{"choices": [{"delta": {}, "finish_reason": "length"}]}])
        else:
            body = completion("")
            body["choices"][0]["finish_reason"] = "length"
            empty = ("json", body)
        server.script = [empty, ("json", completion("the real answer"))]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        flag = [] if stream else ["--no-stream"]
        out = run(db, "ask", "hello", *flag, env=env)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "empty reply" in out.stderr and "token limit" in out.stderr
        (run_id,) = re.findall(r"^run (\w+) failed", out.stderr, re.M)
        shown = run(db, "show", run_id)
        assert "failed" in shown.stdout and "empty reply" in shown.stdout, shown.stdout
        # asked without streaming, the printed command asks without streaming again
        again_cmd = f"resume {run_id}" if stream else f"ask --resume {run_id} --no-stream"
        (hint,) = re.findall(r"\((flowdesk --db .+)\)\s*$", out.stderr, re.M)
        assert hint == f"flowdesk --db {db} {again_cmd}"
        again = as_printed(hint, {**os.environ, **env})
        assert again.returncode == 0 and "the real answer" in again.stdout, again.stderr
        assert len(server.requests) == 2
        assert server.requests[1]["body"].get("stream", False) is stream


def test_a_rate_limited_run_canceled_as_printed_is_never_asked_again(tmp_path):
    """A rate-limited run goes on by itself once its Retry-After comes; the
    cancel ``ask`` prints stops it (it was refused as 'already
    rate_limited'), and no later sweep calls the model for it."""
    import time

    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [
            ("status", 429, {"Retry-After": "1"}, "slow down"),
            ("json", completion("Never asked for.")),
        ]
        first = run(db, "ask", "one", env=env)
        assert first.returncode == 1, first.stderr
        (cancel,) = re.findall(r"to stop it instead: `([^`]+)`", first.stderr)
        run_id = first.stderr.split()[1]
        assert cancel == f"flowdesk --db {db} cancel {run_id}"
        canceled = as_printed(cancel, {**os.environ, **env})
        assert canceled.returncode == 0, canceled.stderr
        assert f"agent run {run_id} canceled" in canceled.stdout
        time.sleep(1.5)  # its Retry-After passes (not a timing assertion)
        swept = run(db, "resume", "--all", env=env)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        assert run_id not in swept.stdout
        assert len(server.requests) == 1
        shown = run(db, "show", run_id)
        assert "canceled" in shown.stdout, shown.stdout


def test_show_and_waiting_print_the_hints_ask_printed_and_they_run_as_printed(tmp_path):
    """A new user's report: ``show`` of a rate-limited agent run gave no time
    and no command (``ask`` gives the time, ``resume`` and ``cancel``),
    ``waiting`` said "no waiting runs", and ``show`` of a failed run gave no
    ``resume``. Each now prints what ``ask`` printed, and each command runs
    as printed."""
    import time

    db = tmp_path / "my db.db"
    assert run(db, "--scope", "my team", "db", "apply").returncode == 0
    with ChatServer() as server:
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        server.script = [
            ("status", 429, {"Retry-After": "1"}, "slow down"),
            ("status", 429, {"Retry-After": "1"}, "slow down"),
            ("status", 400, {}, "no such model"),
            ("json", completion("Limited answer.")),
            ("json", completion("Failed answer.")),
        ]
        scoped = ("--scope", "my team")
        limited, canceled, failed = (
            run(db, *scoped, "ask", q, env=env) for q in ("one", "two", "three")
        )
        ids = [p.stderr.split()[1] for p in (limited, canceled, failed)]
        for p in (limited, canceled):
            said = p.stderr.split("; ", 1)[1].strip()  # after "run ID rate_limited: ERROR"
            shown = run(db, *scoped, "show", p.stderr.split()[1])
            assert f"next: {said}" in shown.stdout.splitlines(), (said, shown.stdout)
            # no model reply yet, the question listed: not "turns 0" over a turn
            assert "status rate_limited  model turns 0" in shown.stdout, shown.stdout
            assert "messages:\n  user: " in shown.stdout, shown.stdout
        waiting = run(db, *scoped, "waiting")
        assert "no waiting runs" not in waiting.stdout
        assert waiting.stdout.count("  rate_limited: it can go on from ") == 2, waiting.stdout
        (cancel,) = re.findall(r"to stop it instead: `([^`]+)`", canceled.stderr)
        assert cancel == f"flowdesk --db '{db}' --scope 'my team' cancel {ids[1]}"
        assert as_printed(cancel, {**os.environ, **env}).returncode == 0
        shown_failed = run(db, *scoped, "show", ids[2]).stdout
        (again,) = re.findall(r"^next: (flowdesk .+)$", shown_failed, re.M)
        assert f"({again})" in failed.stderr  # what ask printed
        shown_limited = run(db, *scoped, "show", ids[0]).stdout
        (resume,) = re.findall(r"or run `([^`]+)` after that", shown_limited)
        time.sleep(1.5)  # the Retry-After passes (not a timing assertion)
        resumed = as_printed(resume, {**os.environ, **env})
        assert resumed.returncode == 0 and "Limited answer." in resumed.stdout, resumed.stderr
        retried = as_printed(again, {**os.environ, **env})
        assert retried.returncode == 0 and "Failed answer." in retried.stdout, retried.stderr
    assert "no waiting runs" in run(db, *scoped, "waiting").stdout


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "no-stream"])
def test_a_reply_that_is_not_json_is_named_as_such_and_its_hint_runs_as_printed(tmp_path, stream):
    """A new user's report: a 200 whose body is not JSON was diagnosed as a
    server that cannot stream tool calls (hint: --no-stream), and the
    --no-stream attempt's hint dropped --no-stream, so the two hints looped.
    The body is named for what it is, the same way streamed or not, and the
    printed command keeps the way the run was asked."""
    folder = tmp_path / "docs"
    folder.mkdir()
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [("raw", "this is not json{{{"), ("json", completion("Fixed."))]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        flag = [] if stream else ["--no-stream"]
        tools = ["--tools", "files", "--folder", str(folder)]
        out = run(db, "ask", "what is here?", *tools, *flag, env=env)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "cannot stream tool calls" not in out.stderr
        assert "the provider's reply is not JSON (HTTP 200" in out.stderr, out.stderr
        assert "'this is not json{{{'" in out.stderr and "check that model.base_url" in out.stderr
        (hint,) = re.findall(r"\((flowdesk --db .+)\)\s*$", out.stderr, re.M)
        run_id = out.stderr.split()[1]
        again_cmd = f"resume {run_id}" if stream else f"ask --resume {run_id} --no-stream"
        assert hint == f"flowdesk --db {db} {again_cmd}"
        again = as_printed(hint, {**os.environ, **env})
        assert again.returncode == 0 and "Fixed." in again.stdout, again.stderr
    assert [bool(r["body"].get("stream")) for r in server.requests] == [stream, stream]


def test_a_reply_cut_mid_stream_says_the_text_shown_is_not_the_answer(tmp_path):
    """A new user's report: a stream cut after some text left that text on
    stdout, exit 1, with nothing saying it is no answer. stderr now says so,
    and the printed ``resume`` asks again and prints the whole answer."""
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        cut = ("sse_cut", [{"choices": [{"delta": {"content": "PARTIAL ANSWER"}}]}])
        server.script = [cut, ("json", completion("The whole answer."))]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = run(db, "ask", "hello", env=env)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stdout == "PARTIAL ANSWER\n"
        assert "is not the answer, and none of it was kept" in out.stderr, out.stderr
        (hint,) = re.findall(r"\((flowdesk --db .+)\)\s*$", out.stderr, re.M)
        again = as_printed(hint, {**os.environ, **env})
        assert again.returncode == 0 and again.stdout == "The whole answer.\n", again.stderr
        assert "not the answer" not in again.stderr


def test_a_digest_summary_that_failed_names_its_agent_run(tmp_path):
    """The digest's error for a summary that failed said only "summary of
    n1.md ended failed:" (a tryout): it names the agent run that failed,
    whose `show` has the rest."""
    db = tmp_path / "f.db"
    assert run(db, "db", "apply").returncode == 0
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha.\n")
    with ChatServer() as server:
        server.script = [("status", 400, {}, '{"error": {"message": "bad model"}}')]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = digest_with_model(db, folder, tmp_path / "o", env)
    assert out.returncode != 0
    said = out.stdout + out.stderr
    m = re.search(r"summary of a\.md ended failed: [^\n]+ \(agent run ([0-9a-f]{32}:a\.md)\)", said)
    assert m is not None, said
    shown = run(db, "show", m.group(1), env=env)
    assert shown.returncode == 0 and "failed" in shown.stdout, shown.stdout + shown.stderr
