"""S88: a tool call that requires approval runs only after a person's "yes"
to the exact tool and arguments they were shown, once.

Real things throughout: agent runs in their own processes (killed with
SIGKILL between the journaled approval and the call), a scripted
OpenAI-compatible model server on 127.0.0.1, the project's test MCP server as
a subprocess, the real ``flowdesk`` command (every command it suggests is run
exactly as printed), and the app's inbox driven headless.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.agent.approvals import (
    ApprovalJournal,
    ApprovalRequest,
    call_digest,
    parse_decision,
    render_call,
    short_wait_id,
)
from desktop_app.errors import ApprovalAnswerError, ConfigError
from desktop_app.flow.clock import SystemClock
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, flowdesk

WORKER = Path(__file__).resolve().parent / "approval_agent_worker.py"
DONE = ("json", completion("Recorded."))


def record(value: str, call_id: str = "c1") -> tuple[str, dict]:  # type: ignore[type-arg]
    return (
        "json",
        completion("", [{"id": call_id, "name": "record_value", "args": {"value": value}}]),
    )


def worker(db: Path, log: Path, server: ChatServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``python tests/approval_agent_worker.py DB LOG URL ARGS`` in a process
    of its own, forked with Flowdesk imported (:mod:`tests.cli_forkserver`)."""
    return cli_forkserver.run_script(WORKER, [str(db), str(log), server.url, *args], timeout=120)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def tool_messages(request: dict) -> list[str]:  # type: ignore[type-arg]
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def stored_run(db: Path) -> AgentRun:
    store = open_store(db)
    try:
        (run,) = SqliteAgentStore(store).list()
        return run
    finally:
        store.close()


# -- a Python tool, in processes of its own --------------------------------------


@pytest.mark.scenario("S88")
def test_yes_runs_exactly_the_call_shown_once(db_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record("reviewed"), DONE]
        r = worker(db_path, log, server, "ask")
        assert r.returncode == 0, r.stderr
        assert "status input_required" in r.stdout
        assert 'question approve the call record_value {"value":"reviewed"}? (yes/no)' in r.stdout
        assert lines(log) == []  # nothing runs before the answer
        assert stored_run(db_path).status == "input_required"
        r = worker(db_path, log, server, "answer", "yes")
        assert r.returncode == 0, r.stderr
        assert "status done" in r.stdout
        assert lines(log) == ["record reviewed"]
        assert tool_messages(server.requests[-1]) == ["recorded reviewed"]
        assert len(server.requests) == 2


@pytest.mark.scenario("S88")
def test_no_tells_the_model_the_person_declined_and_runs_nothing(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record("reviewed"), ("json", completion("Not recorded."))]
        assert worker(db_path, log, server, "ask").returncode == 0
        r = worker(db_path, log, server, "answer", " No ")
        assert r.returncode == 0, r.stderr
        assert "status done" in r.stdout
        (told,) = tool_messages(server.requests[-1])
        assert "declined" in json.loads(told)["error"]
    assert lines(log) == []


@pytest.mark.scenario("S88")
def test_an_answer_other_than_yes_or_no_is_refused_and_changes_nothing(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record("reviewed"), DONE]
        assert worker(db_path, log, server, "ask").returncode == 0
        before = stored_run(db_path)
        r = worker(db_path, log, server, "answer", "sure, why not")
        assert r.returncode != 0
        assert "ApprovalAnswerError" in r.stderr and "answer yes" in r.stderr
        after = stored_run(db_path)
        assert (after.status, after.pending_call) == ("input_required", before.pending_call)
        assert lines(log) == []
        r = worker(db_path, log, server, "answer", "y")
        assert "status done" in r.stdout
    assert lines(log) == ["record reviewed"]


@pytest.mark.scenario("S88")
def test_kill_9_between_the_approval_and_the_call_runs_the_approved_call_once(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record("reviewed"), DONE]
        assert worker(db_path, log, server, "ask").returncode == 0
        r = worker(db_path, log, server, "answer", "yes", "--kill-after-approval")
        assert r.returncode == -signal.SIGKILL
        assert lines(log) == []  # the approval committed; the call never started
        assert stored_run(db_path).status == "running"
        r = worker(db_path, log, server, "resume")
        assert r.returncode == 0, r.stderr
        assert "status done" in r.stdout
        assert lines(log) == ["record reviewed"]
        assert len(server.requests) == 2  # the model was not asked about the call again
        assert tool_messages(server.requests[-1]) == ["recorded reviewed"]
        r = worker(db_path, log, server, "resume")  # done: answered from the run, nothing runs
        assert "status done" in r.stdout
    assert lines(log) == ["record reviewed"]


@pytest.mark.slow
@pytest.mark.scenario("S88")
def test_two_processes_answering_yes_at_one_instant_run_the_call_once(
    db_path: Path, tmp_path: Path
) -> None:
    """The CLI and the app (or two terminals) approve the same call at the
    same moment: two real processes released at one instant, 20 rounds (a
    run each); every approved call runs once, one process carries it, the
    other is refused with a typed error, and the model is asked once more
    per run, never twice."""
    import time

    rounds = 20
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record(f"v{i:02d}") for i in range(rounds)]
        worker_module = importlib.import_module("tests.approval_agent_worker")
        worker_module.ARGS.log = str(log)
        store = open_store(db_path)
        try:
            agent = worker_module.ledger_agent(SqliteAgentStore(store), server.url)
            for i in range(rounds):
                assert agent.ask(f"Record v{i:02d}.").status == "input_required"
                time.sleep(0.002)  # distinct creation times: both workers take runs in order
        finally:
            store.close()
        asked = len(server.requests)
        server.script = [DONE] * rounds  # one per run: a second call would find none left
        start = time.time() + 4.0  # both interpreters are up by then
        cmd = [sys.executable, str(WORKER), str(db_path), str(log), server.url, "race", "yes",
               "--start-at", str(start), "--every", "0.4"]  # fmt: skip
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]  # fmt: skip
        outs = [p.communicate(timeout=180) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
        assert len(server.requests) == asked + rounds
    assert sorted(lines(log)) == [f"record v{i:02d}" for i in range(rounds)]  # each once
    # per run: one process carried it; the other was refused: the run was
    # held by the winner, or (arriving late) already done; it ran nothing
    said = [dict(line.split(" ", 2)[1::-1] for line in out.splitlines()) for out, _ in outs]
    for i in range(rounds):
        a, b = said[0][str(i)], said[1][str(i)]
        assert "done" in (a, b), (i, a, b)
        assert {a, b} <= {"done", "refused"}, (i, a, b)
    refusals = [line for out, _ in outs for line in out.splitlines() if line.startswith("refused")]
    odd = [  # held by the winner, or finished by it already: nothing else
        r
        for r in refusals
        if "AgentRunLeasedError" not in r and "not waiting for input (status 'done')" not in r
    ]
    assert refusals and not odd, odd
    assert all(r.status == "done" for r in SqliteAgentStore(open_store(db_path)).list())


@pytest.mark.scenario("S88")
def test_a_call_with_other_arguments_is_asked_about_again(db_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "ledger"
    with ChatServer() as server:
        server.script = [record("reviewed"), record("changed", "c2"), DONE]
        assert worker(db_path, log, server, "ask").returncode == 0
        r = worker(db_path, log, server, "answer", "yes")
        assert "status input_required" in r.stdout
        assert 'record_value {"value":"changed"}' in r.stdout  # asked again, about 'changed'
        assert lines(log) == ["record reviewed"]  # the "yes" covered 'reviewed' only
        r = worker(db_path, log, server, "answer", "no")
        assert "status done" in r.stdout
    assert lines(log) == ["record reviewed"]


@pytest.mark.scenario("S88")
def test_a_decision_binds_to_the_place_the_name_and_the_exact_arguments(
    db_path: Path,
) -> None:
    """What a runtime whose model is asked again after a crash relies on (the
    pydantic-ai integration): a decision journaled for one call is not found
    for a call with other arguments, another tool or another place."""
    store = open_store(db_path)
    try:
        agents = SqliteAgentStore(store)
        agents.create(AgentRun("r", "a", "running", "x", 1.0, 1.0), [])
        journal = ApprovalJournal(agents, "r", SystemClock())
        seen = ApprovalRequest.of("record_value", {"value": "reviewed"}, 1)
        journal.record(seen, True)
        assert journal.decision(ApprovalRequest.of("record_value", {"value": "reviewed"}, 1))
        for other in (
            ApprovalRequest.of("record_value", {"value": "changed"}, 1),
            ApprovalRequest.of("record_value", {"value": "reviewed", "x": 1}, 1),
            ApprovalRequest.of("erase_value", {"value": "reviewed"}, 1),
            ApprovalRequest.of("record_value", {"value": "reviewed"}, 2),
        ):
            assert journal.decision(other) is None
        journal.record(ApprovalRequest.of("record_value", {"value": "changed"}, 3), False)
        assert (
            journal.decision(ApprovalRequest.of("record_value", {"value": "changed"}, 3)) is False
        )
    finally:
        store.close()
    assert call_digest("t", {"a": 1, "b": 2}) == call_digest("t", {"b": 2, "a": 1})
    assert [parse_decision(t) for t in ("yes", "Y", " no\n", "N")] == [True, True, False, False]
    with pytest.raises(ApprovalAnswerError):
        parse_decision("ok")
    # what is shown cannot drive a terminal: every control character is visible
    shown = render_call("t", {"text": "a\x1b]0;x\x07b\x9bc\rd"})
    assert "\x1b" not in shown and "\x9b" not in shown and "\r" not in shown
    assert shown == 't {"text":"a\\x1b]0;x\\x07b\\x9bc\\x0dd"}'


# -- MCP servers, the command line and the inbox -----------------------------


def require(module: str):  # type: ignore[no-untyped-def]
    """Import ``module``; under CI=true a missing one fails the test instead of skipping."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def notes_config(tmp_path: Path, log: Path, extra: str, variant: str = "", top: str = "") -> Path:
    config = tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    env = f'[mcp_servers.notes.env]\nNOTES_VARIANT = "{variant}"\n' if variant else ""
    config.write_text(
        f"{top}\n[mcp_servers.notes]\n"
        f"command = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n{extra}\n{env}"
    )
    return config


def as_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command Flowdesk suggested exactly as printed (``flowdesk`` is this checkout)."""
    argv = shlex.split(command)
    assert argv[0] == "flowdesk", command
    return cli_forkserver.run(argv[1:], env=env, cwd=REPO, timeout=120)


def applied(db: Path, server: ChatServer, config: Path) -> dict[str, str]:
    """The environment of a user whose model is ``server`` and whose settings
    are ``config``, with the schema applied to ``db``."""
    env = {
        **os.environ,
        "FLOWDESK_MODEL__BASE_URL": server.url,
        "FLOWDESK_MODEL__MODEL": "m",
        "FLOWDESK_CONFIG": str(config),
    }
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    return env


def append(text: str, call_id: str = "a") -> tuple[str, dict]:  # type: ignore[type-arg]
    return (
        "json",
        completion("", [{"id": call_id, "name": "notes__append", "args": {"text": text}}]),
    )


@pytest.mark.scenario("S88")
def test_mcp_tool_named_in_the_settings_waits_and_every_printed_command_runs(
    tmp_path: Path,
) -> None:
    require("mcp")
    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]')
    shown_text = "x\x1b[2Jy"  # a model's arguments may hold escape sequences
    with ChatServer() as server:
        env = applied(db, server, config)
        server.script = [append(shown_text), ("json", completion("Noted."))]
        asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
        assert asked.returncode == 0, asked.stderr
        assert "\x1b" not in asked.stdout + asked.stderr
        expected = 'approve the call notes__append {"text":"x\\x1b[2Jy"}? (yes/no)'
        assert f"the agent asks: {expected}" in asked.stdout
        assert lines(log) == []
        approve = re.search(r"^approve with: (.*)$", asked.stderr, re.M)
        decline = re.search(r"^decline with: (.*)$", asked.stderr, re.M)
        assert approve and decline, asked.stderr
        run_id, pin = approve.group(1).split()[4], approve.group(1).split()[-1]
        assert re.fullmatch(r"approval/1:[0-9a-f]{12}", pin), pin
        assert approve.group(1) == f"flowdesk --db {db} answer {run_id} yes --wait-id {pin}"
        assert decline.group(1) == f"flowdesk --db {db} answer {run_id} no --wait-id {pin}"

        waiting = flowdesk(db, "waiting", env=env)
        assert f"agent run {run_id}  agent ask" in waiting.stdout
        assert '  approve: notes__append {"text":"x\\x1b[2Jy"}' in waiting.stdout
        assert "\x1b" not in waiting.stdout
        yes = re.search(r"^    yes: (.*)$", waiting.stdout, re.M)
        no = re.search(r"^    no:  (.*)$", waiting.stdout, re.M)
        assert yes and no, waiting.stdout
        assert (yes.group(1), no.group(1)) == (approve.group(1), decline.group(1))
        (row,) = [
            json.loads(x)
            for x in flowdesk(db, "waiting", "--json", env=env).stdout.split("\n")
            if x
        ]
        assert row["approval"] == {"tool": "notes__append", "arguments": {"text": shown_text}}

        unclear = flowdesk(db, "answer", run_id, "sure", env=env)
        assert unclear.returncode == 2  # refused; nothing recorded, the run still waits
        assert "answer yes (run the call) or no (refuse it)" in unclear.stderr
        assert "Traceback" not in unclear.stderr
        assert f"agent run {run_id}" in flowdesk(db, "waiting", env=env).stdout
        assert lines(log) == []

        done = as_printed(yes.group(1), env)  # `flowdesk answer RUN yes`, as printed
        assert done.returncode == 0, done.stderr
        assert "Noted." in done.stdout
        assert lines(log) == [shown_text]
        assert tool_messages(server.requests[-1]) == ["appended; 1 lines"]

        # a second run, declined with the other printed command
        server.script = [append("second", "b"), ("json", completion("Left alone."))]
        asked = flowdesk(db, "ask", "note more", "--mcp", "notes", env=env)
        decline = re.search(r"^decline with: (.*)$", asked.stderr, re.M)
        assert decline, asked.stderr
        declined = as_printed(decline.group(1), env)
        assert declined.returncode == 0, declined.stderr
        assert "Left alone." in declined.stdout
        assert "declined" in tool_messages(server.requests[-1])[0]
        assert flowdesk(db, "waiting", env=env).stdout.strip() == "no waiting runs"
    assert lines(log) == [shown_text]  # the declined call never reached the server


@pytest.mark.scenario("S88")
def test_approve_destructive_follows_the_servers_annotations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``approve_destructive``: ``destructiveHint: true`` and an unannotated
    tool (destructive by the MCP specification's default) wait; a tool
    annotated ``destructiveHint: false`` or read-only does not."""
    require("mcp")
    from desktop_app.agent.mcp import open_servers
    from desktop_app.config import load_settings

    log = tmp_path / "notes.log"
    config = notes_config(tmp_path, log, "approve_destructive = true", variant="approve")
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    settings = load_settings(db_path=tmp_path / "f.db")
    (server,) = open_servers(settings, ["notes"])
    try:
        needs = {t.tool_name: t.requires_approval for t in server.tools()}
    finally:
        server.close()
    assert needs == {"append": True, "append_and_hang": True, "erase": True, "tag": False}

    config = notes_config(tmp_path, log, 'require_approval = ["apend"]')
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    settings = load_settings(db_path=tmp_path / "f.db")
    with pytest.raises(ConfigError, match=r"require_approval names apend.*its tools: append"):
        open_servers(settings, ["notes"])


@pytest.mark.scenario("S88")
async def test_the_inbox_shows_the_exact_call_and_its_commands_run_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's database is the settings file's: its hints leave it out, and
    run as printed they reach that database through the same file."""
    require("mcp")
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.screens.inbox import InboxScreen
    from desktop_app.config import load_settings
    from tests.app_support import settle

    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    top = f"db_path = {json.dumps(str(db))}"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]', top=top)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    with ChatServer() as server:
        env = {
            **os.environ,
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
        }
        server.script = [append("a\x9bb"), ("json", completion("Noted."))]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
        assert asked.returncode == 0, asked.stderr
        settings = load_settings()
        bootstrap.apply_schema(settings)

        app = FlowdeskApp(settings, flows=[])
        async with app.run_test(size=(200, 45)) as pilot:
            await settle(pilot)
            await pilot.press("i")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, InboxScreen)
            (item,) = screen.items
            cells = [c.plain for c in screen.table.get_row(item.key)]
            # the row may cut the question at a word; the panel under it says it whole
            panel = str(screen.query_one("#inbox-question").render())
        cell = cells[2]
        # the two commands with their wait id are wider than a 200-column
        # How column leaves: dropped, they are said under the question
        assert "how" not in screen.shown_columns
        how = panel.splitlines()[-1]
        asked = 'approve the call notes__append {"text":"a\\x9bb"}? (yes/no)'
        assert asked.startswith(cell.removesuffix("…")) and cell.startswith("approve the call")
        assert asked in panel and "\x9b" not in panel
        yes, no = how.split(" · ")
        run_id = stored_run(db).run_id
        pin = short_wait_id(item.wait_id)
        assert (yes, no) == (
            f"flowdesk answer {run_id} yes --wait-id {pin}",
            f"flowdesk answer {run_id} no --wait-id {pin}",
        )
        done = as_printed(yes, env)
        assert done.returncode == 0, done.stderr
        assert "Noted." in done.stdout
    assert lines(log) == ["a\x9bb"]


@pytest.mark.scenario("S88")
def test_a_built_in_file_tool_named_in_the_settings_waits_for_approval(tmp_path: Path) -> None:
    db, config, notes = tmp_path / "f.db", tmp_path / "config.toml", tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("Buy milk.\n")
    config.write_text('[file_tools]\nrequire_approval = ["read_file"]\n')
    read = completion("", [{"id": "r", "name": "read_file", "args": {"path": "todo.md"}}])
    with ChatServer() as server:
        env = applied(db, server, config)
        server.script = [("json", read), ("json", completion("Milk."))]
        asked = flowdesk(db, "ask", "todo?", "--tools", "files", "--folder", str(notes), env=env)
        assert asked.returncode == 0, asked.stderr
        assert (
            'the agent asks: approve the call read_file {"path":"todo.md"}? (yes/no)'
            in asked.stdout
        )
        approve = re.search(r"^approve with: (.*)$", asked.stderr, re.M)
        assert approve, asked.stderr
        done = as_printed(approve.group(1), env)
        assert done.returncode == 0, done.stderr
        assert "Milk." in done.stdout
        assert tool_messages(server.requests[-1]) == ["Buy milk.\n"]
        # a name that is not a built-in file tool is refused when the settings load
        config.write_text('[file_tools]\nrequire_approval = ["write_file"]\n')
        bad = flowdesk(db, "ask", "todo?", "--tools", "files", "--folder", str(notes), env=env)
        assert bad.returncode == 2
        assert "require_approval" in bad.stderr and "Traceback" not in bad.stderr


def milk_then_eggs(
    tmp_path: Path, server: ChatServer
) -> tuple[Path, Path, dict[str, str], subprocess.CompletedProcess[str]]:
    """``ask`` over the notes server whose model appends milk, then eggs
    (each call waiting for approval), then says ``Noted.``: the database,
    the notes log, the environment and the ``ask`` that now waits on milk."""
    require("mcp")
    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]')
    env = applied(db, server, config)
    server.script = [append("milk"), append("eggs", "b"), ("json", completion("Noted."))]
    asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
    assert asked.returncode == 0, asked.stderr
    return db, log, env, asked


def test_an_answer_pinned_to_a_wait_id_is_refused_once_someone_else_answered_it(
    tmp_path: Path,
) -> None:
    """`waiting --json` gives an agent run's wait id; `answer RUN yes
    --wait-id ID` approves that call only. A person who read the question,
    then answers after a colleague already approved it and the agent asked
    about another call, approves nothing: the second call waits, unmade."""
    with ChatServer() as server:
        db, log, env, _ = milk_then_eggs(tmp_path, server)

        def waiting_row() -> dict:  # type: ignore[type-arg]
            out = flowdesk(db, "waiting", "--json", env=env)
            assert out.returncode == 0, out.stderr
            (row,) = [json.loads(x) for x in out.stdout.split("\n") if x]
            return row  # type: ignore[no-any-return]

        read = waiting_row()  # what the person read: the call appending milk
        assert read["approval"] == {"tool": "notes__append", "arguments": {"text": "milk"}}
        run_id, milk = read["run_id"], read["wait_id"]
        assert milk.startswith("approval/")

        colleague = flowdesk(db, "answer", run_id, "yes", env=env)  # no wait id
        assert colleague.returncode == 0, colleague.stderr
        assert lines(log) == ["milk"]
        now = waiting_row()
        assert now["approval"] == {"tool": "notes__append", "arguments": {"text": "eggs"}}
        assert now["wait_id"] != milk

        late = flowdesk(db, "answer", run_id, "yes", "--wait-id", milk, env=env)
        assert late.returncode == 1, late.stderr
        assert (
            f"agent run {run_id} does not wait on {short_wait_id(milk)!r}: it asks another "
            f"question now ({short_wait_id(now['wait_id'])!r}); the one you answered was "
            "answered elsewhere, or the id is mistyped; nothing was answered"
        ) in late.stderr
        assert "Traceback" not in late.stderr
        assert lines(log) == ["milk"]  # the eggs call was not approved by the stale answer
        assert waiting_row()["wait_id"] == now["wait_id"]

        pinned = flowdesk(db, "answer", run_id, "yes", "--wait-id", now["wait_id"], env=env)
        assert pinned.returncode == 0, pinned.stderr
    assert lines(log) == ["milk", "eggs"]


def test_the_printed_approve_command_run_late_approves_nothing_else(tmp_path: Path) -> None:
    """Two people read the printed `approve with:` command of the call
    appending milk; one runs it, the agent asks about another call (eggs);
    the other runs the same printed command after: it carries the call's
    wait id, so it is refused and the eggs call waits, unmade, for someone
    who read it."""
    with ChatServer() as server:
        db, log, env, asked = milk_then_eggs(tmp_path, server)
        approve = re.search(r"^approve with: (.*)$", asked.stderr, re.M)
        assert approve, asked.stderr
        first = as_printed(approve.group(1), env)
        assert first.returncode == 0, first.stderr
        assert 'the agent asks: approve the call notes__append {"text":"eggs"}' in first.stdout
        assert lines(log) == ["milk"]

        late = as_printed(approve.group(1), env)
        assert late.returncode == 1, late.stderr
        assert "it asks another question now" in late.stderr, late.stderr
        assert "answered elsewhere, or the id is mistyped; nothing was answered" in late.stderr
        assert lines(log) == ["milk"]
        assert stored_run(db).status == "input_required"
        eggs = re.search(r"^approve with: (.*)$", first.stderr, re.M)
        assert eggs and eggs.group(1) != approve.group(1), first.stderr
        assert as_printed(eggs.group(1), env).returncode == 0
    assert lines(log) == ["milk", "eggs"]


def asked_to_approve(db: Path, server: ChatServer, config: Path) -> tuple[dict[str, str], str]:
    """``ask`` over the notes server whose model calls ``append("hi")`` then
    says ``Noted.``: the environment it ran in, and its printed ``approve
    with:`` command."""
    env = applied(db, server, config)
    server.script = [append("hi"), ("json", completion("Noted."))]
    asked = flowdesk(db, "ask", "note it", "--mcp", "notes", env=env)
    approve = re.search(r"^approve with: (.*)$", asked.stderr, re.M)
    assert approve, asked.stderr
    return env, approve.group(1)


def test_an_answer_whose_mcp_server_cannot_start_is_recorded_and_the_printed_resume_calls_once(
    tmp_path: Path,
) -> None:
    """The approval's server is broken when the person says yes: the answer
    is recorded before the server starts (a crash or a broken server does
    not lose it), the command says so and prints the ``resume`` that goes on;
    once the server is back, that command makes the call, once."""
    require("mcp")
    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]')
    with ChatServer() as server:
        env, approve = asked_to_approve(db, server, config)
        run_id = approve.split()[4]
        working = config.read_text()
        config.write_text(
            re.sub(r"command = \[[^\]]*\]", 'command = ["/nonexistent/server"]', working)
        )
        refused = as_printed(approve, env)
        assert refused.returncode == 1 and "cannot connect to MCP server 'notes'" in refused.stderr
        assert "your answer was recorded" in refused.stderr, refused.stderr
        again = re.search(r"start: run (flowdesk .*) then \(", refused.stderr, re.M)
        assert again, refused.stderr
        assert again.group(1) == f"flowdesk --db {db} resume {run_id}"
        assert "approve: notes__append" not in flowdesk(db, "waiting", env=env).stdout
        assert lines(log) == [] and len(server.requests) == 1
        config.write_text(working)
        done = as_printed(again.group(1), env)
        assert done.returncode == 0 and "Noted." in done.stdout, done.stderr
        assert lines(log) == ["hi"]


def test_an_answer_killed_while_its_mcp_server_starts_keeps_the_approval(
    tmp_path: Path,
) -> None:
    """A new user's report: ``answer RUN yes`` killed while it started the
    run's (slow) MCP server lost the approval; the run waited again. The
    approval is recorded before the server starts: ``resume --all`` (as
    ``flowdesk agent`` each pass) makes the approved call, once."""
    require("mcp")
    db, log = tmp_path / "f.db", tmp_path / "notes.log"
    config = notes_config(tmp_path, log, 'require_approval = ["append"]')
    with ChatServer() as server:
        env, approve = asked_to_approve(db, server, config)
        working = config.read_text()
        slow = re.sub(
            r"command = (\[[^\]]*\])",
            lambda m: (
                "command = "
                + json.dumps(["sh", "-c", "sleep 600; exec " + shlex.join(json.loads(m.group(1)))])
            ),
            working,
        )
        config.write_text(slow)
        argv = shlex.split(approve)[1:]
        answering = cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert answering.stderr is not None
        for line in answering.stderr:  # it starts the servers: the answer was taken
            if "connecting to MCP server notes" in line:
                break
        answering.kill()
        answering.wait(timeout=60)
        # the slow server's shell, left behind: this test's own (its log path in it)
        mine = subprocess.run(["pgrep", "-f", f"sleep 600; exec .*{log}"], capture_output=True)
        for child in mine.stdout.split():
            os.kill(int(child), signal.SIGKILL)
        assert "approve: notes__append" not in flowdesk(db, "waiting", env=env).stdout
        config.write_text(working)
        swept = flowdesk(db, "resume", "--all", env=env)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        assert "done" in swept.stdout, swept.stdout
    assert lines(log) == ["hi"]
