"""Model and tool output is untrusted, and so is the folder the ``files``
tool reads: no escape sequence from a model or an MCP server reaches the
terminal raw, a provider's error never carries the API key into the
database, the terminal or an export, and the ``files`` tool never follows a
link out of its folder, never waits on a FIFO and never reads a huge file
whole. Real subprocesses, real HTTP and MCP servers on 127.0.0.1, real
FIFOs, links and sparse files in tmp_path."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from desktop_app.agent.tools import file_tools
from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import flowdesk

ROOT = Path(__file__).resolve().parent.parent


def tools_over(folder: Path) -> dict[str, Callable[[dict], str]]:
    return {t.name: t.call for t in file_tools(folder)}


def within(seconds: float, fn: Callable[[], str]) -> str:
    """``fn()`` run in a thread; fails the test when it has not returned in ``seconds``."""
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the tool call still blocks after {seconds} s"
    return out[0]


def test_files_tool_answers_a_fifo_with_an_error_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    os.mkfifo(folder / "pipe.md")  # no writer ever opens it
    tools = tools_over(folder)
    answer = json.loads(within(10, lambda: tools["read_file"]({"path": "pipe.md"})))
    assert "FIFO" in answer["error"] and "not a regular file" in answer["error"]
    assert "pipe.md" in answer["error"]


def test_files_tool_refuses_links_to_outside_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    (folder / "key.txt").symlink_to(outside / "secret.txt")
    tools = tools_over(folder)
    for call in (
        ("read_file", {"path": "sub/secret.txt"}),
        ("read_file", {"path": "key.txt"}),
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": str(outside / "secret.txt")}),
        ("list_folder", {"path": "sub"}),
    ):
        answer = tools[call[0]](call[1])
        assert "OUTSIDE" not in answer and "secret.txt" not in answer.replace(call[1]["path"], "")
        assert "error" in json.loads(answer), (call, answer)
    assert tools["list_folder"]({}) == "key.txt\nsub"  # links listed, never entered


SWAPPER = """
import os, sys
folder = sys.argv[1]
os.chdir(folder)
while True:  # 'sub' is a real folder, then gone, then a link to outside, then gone
    os.rename("sub_dir", "sub"); os.rename("sub", "sub_dir")
    os.rename("sub_link", "sub"); os.rename("sub", "sub_link")
"""


def test_files_tool_never_follows_a_subfolder_swapped_for_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("OUTSIDE")
    folder = tmp_path / "notes"
    (folder / "sub_dir").mkdir(parents=True)
    (folder / "sub_dir" / "a.txt").write_text("inside")
    (folder / "sub_link").symlink_to(outside, target_is_directory=True)
    tools = tools_over(folder)
    swapper = cli_forkserver.popen([sys.executable, "-c", SWAPPER, str(folder)])
    try:
        answers = [tools["read_file"]({"path": "sub/a.txt"}) for _ in range(6000)]
    finally:
        swapper.kill()
        swapper.wait()
    assert "inside" in answers  # the race ran: the real folder was read
    assert "OUTSIDE" not in answers


def test_files_tool_reads_at_most_its_bound_of_a_2_gb_file(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    with open(folder / "huge.log", "wb") as fh:
        fh.write(b"start of the log\n")
        fh.truncate(2 * 1024**3)  # sparse: no disk used
    tools = tools_over(folder)
    tracemalloc.start()
    try:
        answer = tools["read_file"]({"path": "huge.log"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.startswith("start of the log\n") and len(answer.encode()) == 64 * 1024
    assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated to answer with 64 KiB"


KEY = "fd-live-7Q2x9Lm4Zp0W"  # not sk- shaped: only the configured key's value can mask it
OTHER = "sk-proj-Vb81kq0LxT3mZ"


def every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_a_401_that_echoes_the_key_stores_prints_and_exports_it_masked(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    echo = json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {KEY}. Authorization: Bearer {KEY} "
                f"(did you mean {OTHER}?)",
                "type": "invalid_request_error",
            }
        }
    )
    with ChatServer() as server:
        server.script = [("status", 401, {"Content-Type": "application/json"}, echo)]
        env = {
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_MODEL__API_KEY": KEY,
        }
        out = flowdesk(db, "ask", "hello", env=env)
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"  # it was sent
    assert out.returncode == 1 and "HTTP 401" in out.stderr and "***" in out.stderr
    (run_id,) = re.findall(r"^run (\w+) \(if interrupted", out.stderr, re.M)
    shown = flowdesk(db, "show", run_id)
    exported = flowdesk(db, "export", "--out", str(tmp_path / "export"), "--format", "csv")
    assert shown.returncode == 0 and exported.returncode == 0, shown.stderr + exported.stderr
    assert "Incorrect API key provided: ***" in shown.stdout
    for secret in (KEY, OTHER):
        for where in (out.stdout, out.stderr, shown.stdout, shown.stderr, exported.stdout):
            assert secret not in where
        for path in tmp_path.glob("f.db*"):  # the database, its WAL and shared memory
            assert secret.encode() not in path.read_bytes(), path
        assert secret.encode() not in every_byte(tmp_path / "export")
    assert b"Incorrect API key provided: ***" in every_byte(tmp_path / "export")


def no_raw_controls(text: str) -> bool:
    return not any(c in text for c in ("\x1b", "\x07", "\x9b"))


def test_escape_sequences_from_the_model_and_an_mcp_tool_are_printed_visibly(
    tmp_path: Path,
) -> None:
    db, config = tmp_path / "f.db", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(tmp_path / "log"), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(ROOT))}\n"
        '[mcp_servers.notes.env]\nNOTES_VARIANT = "escapes"\n'
    )
    bad_tool = "x\x1b]0;tool-title\x07"
    calls = [
        {"id": "a", "name": "notes__banner", "args": {}},
        {"id": "b", "name": bad_tool, "args": {}},
    ]
    # the answer's sequences split across deltas: ESC in one, the rest in the next
    parts = [
        "Title \x1b",
        "]0;model-title\x07 clear \x1b[",
        "2J clip \x1b]52;c;",
        "cHduZWQ=\x07 end",
    ]
    with ChatServer() as server:
        server.script = [
            ("json", completion("", calls)),
            ("sse", [{"choices": [{"delta": {"content": p}}]} for p in parts]),
        ]
        env = {
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_CONFIG": str(config),
        }
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        out = flowdesk(db, "ask", "hello", "--mcp", "notes", env=env)
    assert out.returncode == 0, out.stderr
    tool_answers = [
        m["content"] for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"
    ]
    assert tool_answers[0].startswith("\x1b]0;mcp-title")  # the model gets the tool's text as is
    assert no_raw_controls(out.stdout) and no_raw_controls(out.stderr)
    assert (
        "Title \\x1b]0;model-title\\x07 clear \\x1b[2J clip \\x1b]52;c;cHduZWQ=\\x07 end"
        in out.stdout
    )
    assert "[x\\x1b]0;tool-title\\x07…]" in out.stderr and "[notes__banner…]" in out.stderr
    (run_id,) = re.findall(r"^run (\w+) \(if interrupted", out.stderr, re.M)
    shown = flowdesk(db, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert no_raw_controls(shown.stdout) and no_raw_controls(shown.stderr)
    assert (
        "tool notes__banner: \\x1b]0;mcp-title\\x07\\x1b[2J\\x1b]52;c;bWNw\\x07banner"
        in shown.stdout
    )
    assert "assistant: Title \\x1b]0;model-title\\x07 clear \\x1b[2J" in shown.stdout
    assert "calls x\\x1b]0;tool-title\\x07 {}" in shown.stdout
