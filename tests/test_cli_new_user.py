"""Defects a new user met from a clean clone, each as a whole behaviour: a
tool call waiting for approval shown exactly by ``show`` (text and JSON) with
both commands, run as printed; a yes/no question (tidy, the approval
example) refusing any other answer, and a declined order never shipping; a
flow module that raises at import reported with its real exception; the
tool-calls table fitting long names; ``--db ''``. Real ``flowdesk``
subprocesses, real SQLite files in ``tmp_path``, a scripted
OpenAI-compatible server on 127.0.0.1 and a real MCP server."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from desktop_app.store.sqlite.store import open_store
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, flowdesk


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: ``flowdesk`` (this environment's console script) first
    on PATH, this checkout importable."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        **extra,
    }


def as_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command line Flowdesk printed, through bash, exactly as printed."""
    assert command.startswith("flowdesk "), command
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120
    )


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def one_json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_show_of_an_agent_run_waiting_for_approval_shows_the_call_and_both_commands(
    tmp_path: Path,
) -> None:
    db, notes = tmp_path / "x.db", tmp_path / "notes"
    notes.mkdir()
    (notes / "n1").write_text("Call Ann.\n")
    path = "n1\x1b[2J"  # a control character the model put in the arguments
    read = completion("", [{"id": "r", "name": "read_file", "args": {"path": path}}])
    with ChatServer() as server:
        env = user_env(
            FLOWDESK_MODEL__BASE_URL=server.url,
            FLOWDESK_MODEL__MODEL="m",
            FLOWDESK_FILE_TOOLS__REQUIRE_APPROVAL='["read_file"]',
        )
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", read), ("json", completion("No such note."))]
        asked = flowdesk(
            db, "ask", "what is in n1?", "--tools", "files", "--folder", str(notes), env=env
        )
        assert asked.returncode == 0, asked.stderr
        run_id = one_json(flowdesk(db, "runs", "-o", "json", env=env))[0]["run_id"]

        shown = flowdesk(db, "show", run_id, env=env)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        assert "\x1b" not in out
        assert '  approval of the call: read_file {"path":"n1\\x1b[2J"}' in out, out
        assert "null" not in out and "any text" not in out, out
        assert "yes (run the call) or no (refuse it)" in out
        yes = re.search(r"^    yes: (flowdesk .+)$", out, re.M)
        no = re.search(r"^    no:  (flowdesk .+)$", out, re.M)
        assert yes and no, out
        # the same commands `waiting` prints
        waiting = flowdesk(db, "waiting", env=env).stdout
        assert f"    yes: {yes.group(1)}" in waiting and f"    no:  {no.group(1)}" in waiting

        data = one_json(flowdesk(db, "show", run_id, "-o", "json", env=env))
        [wait] = data["waits"]
        assert wait["kind"] == "approval" and wait["tool"] == "read_file"
        assert wait["arguments"] == {"path": path}
        assert wait["commands"] == {"yes": yes.group(1), "no": no.group(1)}

        # `no` as printed: the model is told, nothing is read
        declined = as_printed(no.group(1), env)
        assert declined.returncode == 0, declined.stderr
        assert "No such note." in declined.stdout
        assert "declined" in tool_messages(server.requests[-1])[0]
        assert one_json(flowdesk(db, "show", run_id, "-o", "json", env=env))["waits"] == []


def test_the_yes_command_show_prints_runs_the_call(tmp_path: Path) -> None:
    db, notes = tmp_path / "x.db", tmp_path / "notes"
    notes.mkdir()
    (notes / "n1").write_text("Call Ann.\n")
    read = completion("", [{"id": "r", "name": "read_file", "args": {"path": "n1"}}])
    with ChatServer() as server:
        env = user_env(
            FLOWDESK_MODEL__BASE_URL=server.url,
            FLOWDESK_MODEL__MODEL="m",
            FLOWDESK_FILE_TOOLS__REQUIRE_APPROVAL='["read_file"]',
        )
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", read), ("json", completion("Call Ann."))]
        asked = flowdesk(
            db, "ask", "what is in n1?", "--tools", "files", "--folder", str(notes), env=env
        )
        assert asked.returncode == 0, asked.stderr
        run_id = one_json(flowdesk(db, "runs", "-o", "json", env=env))[0]["run_id"]
        data = one_json(flowdesk(db, "show", run_id, "-o", "json", env=env))
        approved = as_printed(data["waits"][0]["commands"]["yes"], env)
        assert approved.returncode == 0, approved.stderr
        assert "Call Ann." in approved.stdout
        assert tool_messages(server.requests[-1]) == ["Call Ann.\n"]
        yes = shlex.split(data["waits"][0]["commands"]["yes"])
        assert yes[-3:-1] == ["yes", "--wait-id"] and yes[-1].startswith("approval/1:"), yes


APPROVAL = '["desktop_app.examples.approval:approval"]'


def test_the_approval_example_refuses_a_typo_and_a_declined_order_never_ships(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    env = user_env(FLOWDESK_FLOWS=APPROVAL)
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=env)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.split()[0]
    typo = flowdesk(db, "answer", rid, "maybe", env=env)
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "'yes' or 'no'" in typo.stderr and "Traceback" not in typo.stderr
    row = one_json(flowdesk(db, "show", rid, "-o", "json", env=env))
    assert row["status"] == "waiting" and [w["kind"] for w in row["waits"]] == ["input"]
    shown = flowdesk(db, "show", rid, env=env).stdout
    assert "the word after the run id is the answer: yes or no (nothing else is taken)" in shown, (
        shown
    )
    declined = flowdesk(db, "answer", rid, " No ", env=env)
    assert declined.returncode == 0, declined.stderr
    # the payment comes anyway: the declined order is not shipped
    assert flowdesk(db, "signal", "paid", "o-1", "--payload", "{}", env=env).returncode == 0
    assert flowdesk(db, "resume", "--all", env=env).returncode == 0
    row = one_json(flowdesk(db, "show", rid, "-o", "json", env=env))
    assert row["status"] == "completed", row
    store = open_store(db)
    try:
        state = dict(store.latest(rid).state)
    finally:
        store.close()
    assert state["approved"] == "no" and state["shipped"] is False
    assert [s["step_id"] for s in row["steps"]] == ["approve", "declined"]


def test_a_typo_answering_tidy_is_refused_and_the_run_keeps_waiting(tmp_path: Path) -> None:
    db, folder = tmp_path / "t.db", tmp_path / "Downloads"
    folder.mkdir()
    (folder / "paper.pdf").write_bytes(b"pdf")
    env = user_env()
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    started = flowdesk(db, "run", "tidy", "--folder", str(folder), env=env)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.splitlines()[0]
    shown = flowdesk(db, "show", rid, env=env).stdout
    assert "any text" not in shown, shown
    assert "the word after the run id is the answer: yes or no (nothing else is taken)" in shown
    typo = flowdesk(db, "answer", rid, "maybe", env=env)
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "'maybe' is not an answer to this question; answer yes or no" in typo.stderr
    row = one_json(flowdesk(db, "show", rid, "-o", "json", env=env))
    assert row["status"] == "waiting" and [w["kind"] for w in row["waits"]] == ["input"]
    assert row["waits"][0]["choices"] == ["yes", "no"]
    assert (folder / "paper.pdf").exists()
    # the command show prints still answers it
    command = re.search(r"^\s+answer with: (flowdesk .+)$", shown, re.M)
    assert command, shown
    answered = as_printed(command.group(1), env)
    assert answered.returncode == 0, answered.stderr
    assert not (folder / "paper.pdf").exists()
    assert [p.name for p in (folder / "Documents").rglob("*.pdf")] == ["paper.pdf"]


BROKEN = """\
from pydantic import BaseModel

class S(BaseModel):
    n: int = 0

flow = S(n=1) + 2
"""


def test_a_flow_module_that_raises_at_import_is_reported_with_its_real_exception(
    tmp_path: Path,
) -> None:
    db, mine = tmp_path / "f.db", tmp_path / "userflows"
    mine.mkdir()
    (mine / "broken_flows.py").write_text(BROKEN)
    (mine / "fine_flows.py").write_text("flow = None\n")
    env = user_env(
        FLOWDESK_FLOWS='["broken_flows:flow", "not_there_xyz:flow", "fine_flows:flwo"]',
        PYTHONPATH=f"{mine}{os.pathsep}{REPO}",
    )
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    flows = flowdesk(db, "flows", env=env)
    assert flows.returncode == 1
    [broken] = [line for line in flows.stderr.splitlines() if "broken_flows" in line]
    assert "TypeError: unsupported operand type(s) for +" in broken, broken
    assert f"at {mine / 'broken_flows.py'}:6" in broken, broken
    assert "make sure the package is importable" not in broken, broken
    # a module that is not there still gets the import hint
    [absent] = [line for line in flows.stderr.splitlines() if "not_there_xyz" in line]
    assert "make sure the package is importable" in absent, absent
    # a misspelt attribute names the user's module, not Flowdesk's own code
    [typo] = [line for line in flows.stderr.splitlines() if "fine_flows" in line]
    assert "AttributeError" in typo and "'flwo'" in typo, typo
    assert f"(in {mine / 'fine_flows.py'})" in typo and "bootstrap" not in typo, typo


def test_shows_tool_calls_table_fits_the_longest_tool_name(tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":  # under CI a missing MCP SDK fails the test
        pytest.importorskip("mcp")
    db, notes, log = tmp_path / "t.db", tmp_path / "notes", tmp_path / "notes.log"
    notes.mkdir()
    (notes / "n1").write_text("Call Ann.\n")
    config = tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        f"[mcp_servers.notebook_archive]\ncommand = {json.dumps(command)}\n"
        f"cwd = {json.dumps(str(REPO))}\n"
    )
    calls = [
        {"id": "a", "name": "read_file", "args": {"path": "n1"}},
        {"id": "b", "name": "notebook_archive__append", "args": {"text": "x"}},
    ]
    with ChatServer() as server:
        env = user_env(
            FLOWDESK_MODEL__BASE_URL=server.url,
            FLOWDESK_MODEL__MODEL="m",
            FLOWDESK_CONFIG=str(config),
        )
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [("json", completion("", calls)), ("json", completion("Done."))]
        asked = flowdesk(
            db, "ask", "note n1", "--tools", "files", "--folder", str(notes),
            "--mcp", "notebook_archive", env=env,
        )  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        run_id = one_json(flowdesk(db, "runs", "-o", "json", env=env))[0]["run_id"]
        out = flowdesk(db, "show", run_id, env=env).stdout
    table = out.split("tool calls: 2\n", 1)[1].splitlines()[:2]
    assert sorted(line.split()[0] for line in table) == ["notebook_archive__append", "read_file"]
    # every column starts at the same place in both rows
    assert len({line.index(" completed") for line in table}) == 1, table
    assert len({line.index("attempts") for line in table}) == 1, table


def test_an_empty_db_path_says_it_is_empty(tmp_path: Path) -> None:
    out = flowdesk("", "runs", env=user_env())
    assert out.returncode == 2, out.stderr
    assert "the database path is empty" in out.stderr and "is a folder" not in out.stderr
    assert list(tmp_path.iterdir()) == []
