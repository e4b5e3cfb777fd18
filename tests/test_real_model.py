"""Flowdesk's agent protocol against a real local model: llama-cpp-python's
OpenAI-compatible server (``python -m llama_cpp.server``) with a small
instruct GGUF, started here on 127.0.0.1.

Run with ``make test-model MODEL=/path/to/model.gguf`` (it installs
``llama-cpp-python[server]`` and sets ``FLOWDESK_TEST_MODEL``); ``make test``
deselects these tests (see conftest) unless ``FLOWDESK_TEST_MODEL`` is set.
``FLOWDESK_TEST_MODEL_CHAT_FORMAT`` picks the server's chat handler
(default ``chatml-function-calling``, the one that makes automatic tool
calls).

They assert protocol, never answer quality: what Flowdesk sends (tools,
``tool_choice``, streaming), that a tool call's result goes back to the
model under its call id, that each run ends in a state a person can act on,
and that every printed command runs as printed. A recording proxy
(:mod:`tests.recording_proxy`) sits between Flowdesk and the server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli_support import as_printed, flowdesk
from tests.recording_proxy import RecordingProxy
from tests.test_cli_agent_resume import cli, interrupt

#: read at import: the isolation fixture clears FLOWDESK_* inside each test
MODEL = os.environ.get("FLOWDESK_TEST_MODEL")
CHAT_FORMAT = os.environ.get("FLOWDESK_TEST_MODEL_CHAT_FORMAT", "chatml-function-calling")

pytestmark = pytest.mark.real_model

#: how an agent run may end that a person can act on (input_required: the
#: model called ask_user, which a small model may do)
SETTLED = ("done", "input_required")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's ``/v1`` URL; its output goes to ``llama-server.log``."""
    assert MODEL and Path(MODEL).is_file(), f"FLOWDESK_TEST_MODEL={MODEL!r} is not a file"
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", MODEL, "--host", "127.0.0.1",
            "--port", str(port), "--chat_format", CHAT_FORMAT, "--n_ctx", "4096"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the model server did not start in 10 minutes"
            try:
                if httpx.get(url + "/models", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def proxy(llama_server: str) -> Iterator[RecordingProxy]:
    with RecordingProxy(llama_server.removesuffix("/v1")) as p:
        yield p


def env_for(proxy: RecordingProxy) -> dict[str, str]:
    return {
        **os.environ,
        "FLOWDESK_MODEL__BASE_URL": proxy.url,
        "FLOWDESK_MODEL__MODEL": "local",
        "FLOWDESK_MODEL__TIMEOUT_S": "600",
    }


def notes(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("# Todo\n\nBuy milk.\n")
    (folder / "ideas.txt").write_text("Plant tomatoes.\n")
    return db, folder


def agent_run(db: Path, run_id: str) -> dict[str, Any]:
    shown = flowdesk(db, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def reply_calls(raw: bytes) -> list[dict[str, Any]]:
    """The tool calls of a recorded non-streamed reply."""
    message = json.loads(raw)["choices"][0]["message"]
    return list(message.get("tool_calls") or [])


def assert_results_sent_back(proxy: RecordingProxy) -> int:
    """Every tool call a non-streamed reply made is answered, under its id,
    in the next request; returns how many calls there were."""
    calls = 0
    for i, raw in enumerate(proxy.replies[:-1]):
        for call in reply_calls(raw):
            calls += 1
            answered = [
                m for m in proxy.requests[i + 1]["messages"]
                if m["role"] == "tool" and m.get("tool_call_id") == call["id"]
            ]  # fmt: skip
            assert answered, f"the result of {call['function']['name']} was not sent back"
    return calls


def test_streamed_text(tmp_path: Path, proxy: RecordingProxy) -> None:
    """No tools but the built-in ask_user: a streamed answer (or, should the
    model pick ask_user, the error naming why the stream broke)."""
    db, _ = notes(tmp_path)
    out = flowdesk(db, "ask", "Say hello in one short sentence.", env=env_for(proxy))
    (request,) = proxy.requests
    assert request["stream"] is True and request["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in request["tools"]] == ["ask_user"]
    assert "Traceback" not in out.stderr
    if out.returncode != 0:
        assert "cannot stream tool calls" in out.stderr, out.stderr
        return
    assert b"data:" in proxy.replies[0]  # server-sent events
    (run_id,) = re.findall(r"^run (\w+) \(if interrupted", out.stderr, re.M)
    assert agent_run(db, run_id)["status"] in SETTLED
    print(f"streamed: {out.stdout.strip()[:60]!r}")


def test_forced_tool_call_parses_streamed_and_not(proxy: RecordingProxy) -> None:
    """A tool call the request forces (``tool_choice`` naming the tool),
    through Flowdesk's client, streamed and not: the reply carries a call of
    that tool with an object of arguments, or (streamed) the error that
    names the cause; never another error."""
    from desktop_app.agent.messages import Message
    from desktop_app.agent.openai_compat import OpenAICompatibleModel
    from desktop_app.errors import ToolCallStreamingError

    class Forced(OpenAICompatibleModel):
        def _body(self, messages: Any, tools: Any, stream: bool) -> dict[str, Any]:
            body = super()._body(messages, tools, stream)
            body["tool_choice"] = {"type": "function", "function": {"name": "record_value"}}
            return body

    schema = {
        "type": "function",
        "function": {
            "name": "record_value",
            "description": "Record a value.",
            "parameters": {
                "type": "object",
                "properties": {"value": {"type": "string"}},
                "required": ["value"],
            },
        },
    }
    asked = [Message("user", "Record the value 'reviewed'.")]
    for streaming in (False, True):
        model = Forced(proxy.url, "local", timeout_s=600, stream=streaming)
        try:
            reply = list(model.stream(asked, [schema]))[-1].reply
        except ToolCallStreamingError as exc:
            assert streaming and "--no-stream" in str(exc)
            continue
        finally:
            model.close()
        assert reply is not None
        (call, *_) = reply.tool_calls
        assert call.name == "record_value" and isinstance(call.arguments, dict)


def test_a_forced_tool_call_runs_once_and_its_result_goes_back(
    tmp_path: Path, proxy: RecordingProxy
) -> None:
    """An agent run whose first turn forces ``record_value``: the tool runs
    once with the model's arguments, its result goes back to the server
    under the call's id, and the server answers that request."""
    from desktop_app import bootstrap
    from desktop_app.agent import Agent
    from desktop_app.agent.openai_compat import OpenAICompatibleModel
    from desktop_app.agent.tools import tool
    from desktop_app.config import load_settings

    class ForcedFirst(OpenAICompatibleModel):
        def _body(self, messages: Any, tools: Any, stream: bool) -> dict[str, Any]:
            body = super()._body(messages, tools, stream)
            if tools and not any(m["role"] == "tool" for m in body["messages"]):
                body["tool_choice"] = {"type": "function", "function": {"name": "record_value"}}
            return body

    recorded: list[str] = []

    @tool
    def record_value(value: str) -> str:
        """Record a value."""
        recorded.append(value)
        return "recorded"

    settings = load_settings(db_path=tmp_path / "f.db")
    bootstrap.apply_schema(settings)
    sv = bootstrap.open_services(settings, flows=[])
    model = ForcedFirst(proxy.url, "local", timeout_s=600, stream=False)
    try:
        res = Agent("forced", model, sv.agents, [record_value], ask_user=False).ask(
            "Record the value 'reviewed'."
        )
    finally:
        model.close()
        sv.close()
    assert len(recorded) == 1
    (call,) = reply_calls(proxy.replies[0])
    assert call["function"]["name"] == "record_value"
    assert assert_results_sent_back(proxy) >= 1
    answer = [m for m in proxy.requests[1]["messages"] if m["role"] == "tool"]
    assert answer[0]["tool_call_id"] == call["id"] and answer[0]["content"] == "recorded"
    assert res.status in ("done", "failed")  # a later turn may call it again: reused, or not
    print(f"forced: run {res.status} after {len(proxy.requests)} requests: {res.error}")


QUESTION = "Which files are in my folder? Use the list_folder tool, then name them."


def test_automatic_tool_calls_send_results_back(tmp_path: Path, proxy: RecordingProxy) -> None:
    db, folder = notes(tmp_path)
    files = ["--tools", "files", "--folder", str(folder)]
    out = flowdesk(db, "ask", QUESTION, *files, "--no-stream", env=env_for(proxy))
    assert out.returncode == 0, out.stderr
    assert all(r["tool_choice"] == "auto" and r["tools"] for r in proxy.requests)
    assert not any(r.get("stream") for r in proxy.requests)
    calls = assert_results_sent_back(proxy)
    run_id = re.findall(r"^run (\w+) \(if interrupted", out.stderr, re.M)[0]
    shown = agent_run(db, run_id)
    assert shown["status"] in SETTLED
    recorded = [t for t in shown["tool_results"] if t["kind"] == "call" and t["tool"] != "ask_user"]
    assert len(recorded) <= calls
    print(f"automatic: {calls} tool call(s); run {shown['status']}")


def test_streaming_with_tools_works_or_names_the_cause(
    tmp_path: Path, proxy: RecordingProxy
) -> None:
    db, folder = notes(tmp_path)
    env = env_for(proxy)
    files = ["--tools", "files", "--folder", str(folder)]
    out = flowdesk(db, "ask", QUESTION, *files, env=env)
    assert "Traceback" not in out.stderr
    if out.returncode != 0:
        assert "cannot stream tool calls" in out.stderr, out.stderr
        (hint,) = re.findall(r"\((flowdesk [^()]*--no-stream)\)\s*$", out.stderr)
        again = as_printed(hint, env, timeout=900)
        assert again.returncode == 0, again.stderr
    run_id = re.findall(r"^run (\w+) \(if interrupted", out.stderr, re.M)[0]
    assert agent_run(db, run_id)["status"] in SETTLED


def test_kill_9_during_a_model_call_then_resume_as_printed(
    tmp_path: Path, proxy: RecordingProxy
) -> None:
    db, folder = notes(tmp_path)
    env = env_for(proxy)
    proxy.hold = {1}  # the first model call hangs until the kill
    asked = cli("--db", str(db), "ask", QUESTION, "--tools", "files", "--folder", str(folder),
                "--no-stream", env=env)  # fmt: skip
    err = interrupt(asked, proxy, 1, signal.SIGKILL)  # type: ignore[arg-type]
    assert asked.returncode == -signal.SIGKILL
    run_id, hint = re.findall(r"^run (\w+) \(if interrupted: (flowdesk [^)]*)\)$", err, re.M)[0]
    resumed = as_printed(hint, env, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert len(proxy.requests) >= 2  # the lost call is made again after the resume
    assert proxy.requests[1]["messages"] == proxy.requests[0]["messages"]
    assert agent_run(db, run_id)["status"] in SETTLED


def test_digest_with_the_model_on_a_small_folder(tmp_path: Path, proxy: RecordingProxy) -> None:
    db, folder = notes(tmp_path)
    out_dir = tmp_path / "o"
    out = flowdesk(db, "run", "digest", "--folder", str(folder), "--out", str(out_dir),
                   "--model", "--quiet", env=env_for(proxy), timeout=1800)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert len(proxy.requests) >= 2 and not any(r.get("tools") for r in proxy.requests)
    report = (out_dir / "digest.md").read_text()
    assert "2 files:" in report and "todo.md" in report and "ideas.txt" in report
