"""Interrupted `flowdesk ask` runs resume like flow runs, with the tools they
were started with, and every command Flowdesk suggests runs as printed.

Real `flowdesk` subprocesses, a scripted model server on 127.0.0.1, the
project's test MCP server; Ctrl-C is a real SIGINT, a crash a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, as_printed, default_sigint, flowdesk

pytestmark = pytest.mark.scenario("S82")

#: the model call that is in flight when the test interrupts `ask`
HANG = ("sleep", 30)


def cli(*args: str, env: dict[str, str], **kw: object) -> subprocess.Popen[str]:
    """``flowdesk ARGS...`` (no --db added) as a child this test can signal."""
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "desktop_app.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        preexec_fn=default_sigint,
        **kw,
    )


def wait_for(predicate, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def interrupt(proc: subprocess.Popen[str], server: ChatServer, calls: int, sig: int) -> str:
    """Once the model has seen ``calls`` requests (the last one hangs), send
    ``sig``; the child's stderr."""
    wait_for(lambda: len(server.requests) >= calls or proc.poll() is not None, "the model call")
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return err


def hint(stderr: str) -> str:
    """The command of the Ctrl-C message (``run `CMD` to continue``)."""
    found = re.search(r"interrupted; run `(flowdesk [^`]*)` to continue", stderr)
    assert found, stderr
    return found.group(1)


def agent_status(db: Path, run_id: str, key: str = "status") -> str:
    """The agent run's status as ``runs --json`` shows it (``key="stored_status"``:
    as stored)."""
    rows = [json.loads(r) for r in flowdesk(db, "runs", "--json").stdout.splitlines()]
    (status,) = [r[key] for r in rows if r["run_id"] == run_id]
    return str(status)


def model_env(server: ChatServer, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "FLOWDESK_MODEL__BASE_URL": server.url,
        "FLOWDESK_MODEL__MODEL": "m",
        **more,
    }


def tools_offered(request: dict) -> list[str]:  # type: ignore[type-arg]
    return sorted(t["function"]["name"] for t in request["body"].get("tools") or [])


def read_todo() -> tuple[str, dict]:  # type: ignore[type-arg]
    return ("json", completion("", [{"id": "a", "name": "read_file", "args": {"path": "todo.md"}}]))


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("Buy milk.\n")
    return folder


def ctrl_c_ask(db: Path, notes: Path, server: ChatServer):
    """``flowdesk --db DB ask`` over ``notes`` with file tools, stopped by
    Ctrl-C while the model's second reply hangs (after one tool call ran);
    returns the process, its stderr and the environment it ran with."""
    assert flowdesk(db, "db", "apply").returncode == 0
    server.script = [read_todo(), HANG, ("json", completion("Buy milk."))]
    env = model_env(server)
    asked = cli(
        "--db", str(db), "ask", "todo?", "--tools", "files", "--folder", str(notes), env=env
    )
    return asked, interrupt(asked, server, 2, signal.SIGINT), env


def test_ctrl_c_during_ask_then_resume_all_finishes_it_with_its_file_tools(
    tmp_path: Path, notes: Path
) -> None:
    db = tmp_path / "f.db"
    with ChatServer() as server:
        asked, err, env = ctrl_c_ask(db, notes, server)
        assert asked.returncode == 130, err
        run_id = re.search(r"^run (\w+) \(if interrupted", err, re.M).group(1)  # type: ignore[union-attr]
        assert hint(err) == f"flowdesk --db {db} resume {run_id}"
        assert agent_status(db, run_id) == "interrupted"  # no process executes it (S81)
        assert agent_status(db, run_id, "stored_status") == "running"
        resumed = flowdesk(db, "resume", "--all", env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert f"agent run {run_id} done" in resumed.stdout
        last = server.requests[-1]
        assert tools_offered(last) == ["ask_user", "list_folder", "read_file"]
        answers = [m["content"] for m in last["body"]["messages"] if m["role"] == "tool"]
        assert answers == ["Buy milk.\n"]  # the tool result was kept, not asked again
    assert agent_status(db, run_id) == "done"
    assert len(server.requests) == 3


def test_show_of_an_interrupted_agent_run_says_a_model_must_be_configured_first(
    tmp_path: Path, notes: Path
) -> None:
    """A tryout on PostgreSQL: an agent run left to workers configured with
    no model stayed ``interrupted`` and ``show`` said only that its process
    stopped. In a process whose settings configure no model, ``show`` says
    what to set first; set as it says, its resume command works as printed."""
    db = tmp_path / "f.db"
    with ChatServer() as server:
        asked, err, env = ctrl_c_ask(db, notes, server)
        assert asked.returncode == 130, err
        run_id = re.search(r"^run (\w+) \(if interrupted", err, re.M).group(1)  # type: ignore[union-attr]
        bare = {k: v for k, v in env.items() if not k.startswith("FLOWDESK_MODEL__")}
        shown = flowdesk(db, "show", run_id, env=bare).stdout
        line = re.search(
            r"^interrupted: the process that ran it stopped; no model is configured here: set "
            r"FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL \(or \[model\] in the settings "
            r"file\); then (flowdesk .*) continues it$",
            shown,
            re.M,
        )
        assert line, shown
        refused = as_printed(line.group(1), bare)
        assert refused.returncode != 0 and "no model is configured" in refused.stderr
        assert agent_status(db, run_id) == "interrupted"
        configured = flowdesk(db, "show", run_id, env=env).stdout
        assert "no model is configured" not in configured, configured
        resumed = as_printed(line.group(1), env)
        assert resumed.returncode == 0, resumed.stderr
    assert agent_status(db, run_id) == "done"


@pytest.mark.slow
def test_kill_9_during_ask_then_resume_as_printed_reconnects_its_mcp_server(
    tmp_path: Path,
) -> None:
    db, log, config = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        "[mcp_servers.notes]\n"
        f"command = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
        '[mcp_servers.notes.env]\nNOTES_TOKEN = "tok-s3cret-value"\n'
    )
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        append = completion("", [{"id": "a", "name": "notes__append", "args": {"text": "x"}}])
        server.script = [("json", append), HANG, ("json", completion("Noted."))]
        asked = cli("--db", str(db), "ask", "note x", "--mcp", "notes", env=env)
        err = interrupt(asked, server, 2, signal.SIGKILL)
        assert asked.returncode == -signal.SIGKILL
        printed = re.search(r"^run (\w+) \(if interrupted: (flowdesk [^)]*)\)$", err, re.M)
        assert printed, err
        run_id, command_text = printed.groups()
        assert command_text == f"flowdesk --db {db} resume {run_id}"
        resumed = as_printed(command_text, env)
        assert resumed.returncode == 0, resumed.stderr
        assert "Noted." in resumed.stdout
        assert "notes__append" in tools_offered(server.requests[-1])
    assert log.read_text().splitlines() == ["x"]  # the call that completed is not made again
    assert agent_status(db, run_id) == "done"
    stored = b"".join(f.read_bytes() for f in tmp_path.glob("f.db*"))
    assert b"tok-s3cret-value" not in stored  # the server's env stays in the settings


def test_resume_as_printed_says_a_call_cut_off_mid_way_has_an_unknown_outcome(
    tmp_path: Path,
) -> None:
    """``ask`` killed while its MCP tool call runs (the server appended its
    line, then never answers): the printed ``resume RUN`` says plainly that
    the call's outcome is unknown, as ``resume --all`` does, and does not
    make it again."""
    db, log, config = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        call = {"id": "a", "name": "notes__append_and_hang", "args": {"text": "x"}}
        server.script = [("json", completion("", [call])), ("json", completion("Not sure."))]
        asked = cli("--db", str(db), "ask", "note x", "--mcp", "notes", env=env)
        wait_for(lambda: log.exists() and log.read_text() == "x\n", "the call in flight")
        asked.send_signal(signal.SIGKILL)
        _, err = asked.communicate(timeout=60)
        run_id, command_text = re.search(
            r"^run (\w+) \(if interrupted: (flowdesk [^)]*)\)$", err, re.M
        ).groups()  # type: ignore[union-attr]
        # before the resume, show says the call was cut off and what the resume does
        shown = flowdesk(db, "show", run_id, env=env).stdout
        assert re.search(r"^  notes__append_and_hang +cut off +attempts 1", shown, re.M), shown
        assert (
            "cut off: its process stopped during the call, before its result was saved; the "
            "resume makes it again only when its tool is harmless to repeat"
        ) in shown, shown
        assert "in_progress" not in shown
        resumed = as_printed(command_text, env)
        assert resumed.returncode == 0, resumed.stderr
        said = (
            "flowdesk: its call to notes__append_and_hang has an unknown outcome (it was sent "
            "and did not finish: cut off, or timed out; not repeated, so check where it acts "
            f"whether it was made): `flowdesk --db {db} show {run_id}` lists it"
        )
        assert said in resumed.stderr
    assert log.read_text().splitlines() == ["x"]  # not made again


def test_flowdesk_agent_resumes_an_interrupted_ask(tmp_path: Path, notes: Path) -> None:
    db = tmp_path / "f.db"
    with ChatServer() as server:
        _, err, env = ctrl_c_ask(db, notes, server)
        run_id = hint(err).split()[-1]
        worker = cli("--db", str(db), "agent", "--poll", "0.2", env=env)
        try:
            wait_for(lambda: agent_status(db, run_id) == "done", "the agent to finish the run")
        finally:
            worker.send_signal(signal.SIGTERM)
            out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0
        assert f"agent run {run_id} done" in out
        assert tools_offered(server.requests[-1]) == ["ask_user", "list_folder", "read_file"]


def test_hints_with_flowdesk_db_path_run_as_printed(tmp_path: Path) -> None:
    """``FLOWDESK_DB_PATH=X FLOWDESK_SCOPE=s flowdesk ask`` then Ctrl-C, then
    the hint (without those variables, as the user's shell has it) then
    Ctrl-C again: each hint names the run and the database and resumes it."""
    db = tmp_path / "elsewhere.db"
    with ChatServer() as server:
        env = model_env(server)
        once = {"FLOWDESK_DB_PATH": str(db), "FLOWDESK_SCOPE": "work"}
        assert flowdesk(db, "db", "apply").returncode == 0
        server.script = [HANG]
        asked = cli("ask", "capital of France?", env={**env, **once})
        first = hint(interrupt(asked, server, 1, signal.SIGINT))
        run_id = first.split()[-1]
        assert first == f"flowdesk --db {db} --scope work resume {run_id}"
        server.script = [HANG, ("json", completion("Paris."))]
        again = cli(*shlex.split(first)[1:], env=env)
        second = hint(interrupt(again, server, 2, signal.SIGINT))
        assert second == first  # the run it was resuming, not `resume --all`
        done = as_printed(second, env)
        assert done.returncode == 0, done.stderr
        assert "Paris." in done.stdout


def test_hints_with_db_and_scope_options_run_as_printed(tmp_path: Path) -> None:
    db = tmp_path / "my notes.db"
    with ChatServer() as server:
        env = model_env(server)
        assert flowdesk(db, "db", "apply").returncode == 0
        server.script = [("status", 400, {}, '{"error": {"message": "bad request"}}')]
        asked = flowdesk(db, "--scope", "work", "ask", "capital?", env=env)
        assert asked.returncode == 1
        failed = re.search(r"\((flowdesk [^)]*resume \w+)\)$", asked.stderr, re.M)
        assert failed, asked.stderr
        assert failed.group(1).startswith(f"flowdesk --db '{db}' --scope work resume ")
        server.script = [("json", completion("Paris."))]
        resumed = as_printed(failed.group(1), env)
        assert resumed.returncode == 0 and "Paris." in resumed.stdout, resumed.stderr
        run_id = failed.group(1).split()[-1]
        # Ctrl-C ends `watch` with 130 and the command that watches again
        watching = cli("--db", str(db), "--scope", "work", "watch", env=env)
        wait_for(lambda: watching.poll() is not None or _printed_a_row(watching), "watch")
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=60)
        assert watching.returncode == 130, err
        assert hint(err) == f"flowdesk --db '{db}' --scope work watch"
        again = as_printed(f"flowdesk --db '{db}' --scope work watch {run_id}", env)
        assert again.returncode == 0 and run_id in again.stdout


def _printed_a_row(proc: subprocess.Popen[str]) -> bool:
    assert proc.stdout is not None
    return bool(proc.stdout.readline())


def test_db_copy_next_runs_as_printed_with_its_scope(tmp_path: Path, pg_empty_url: str) -> None:
    """`db copy` counts what it copied by kind (it said "copied 0 runs" for an
    agent run and a LangGraph thread), names the scope its runs are in (not
    the command's, which holds none), and its `next:` command stands on a
    line of its own: pasted into bash as printed, it starts a worker (the
    note "(on each worker machine)" after it once was a bash syntax error)."""
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.integrations.langgraph import FlowdeskSaver
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
    from desktop_app.store.sqlite.store import open_store
    from tests.test_langgraph_parallel_interrupts import build

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    assert flowdesk(pg_empty_url, "db", "apply").returncode == 0
    store = open_store(db)
    try:
        done = Agent("helper", ScriptedModel(["all done"]), SqliteAgentStore(store)).ask("hi")
        assert done.status == "done"
    finally:
        store.close()
    with FlowdeskSaver.open(db) as saver:
        build(saver).invoke({"got": []}, {"configurable": {"thread_id": "par-1"}})
    copied = flowdesk(db, "--scope", "work", "db", "copy", "--from", str(db), "--to", pg_empty_url)
    assert copied.returncode == 0, copied.stderr
    assert f"copied 1 agent run and 1 LangGraph thread from {db} to " in copied.stdout
    lines = copied.stdout.splitlines()
    # the thread is its program's to continue (no worker runs a graph), in its own
    # scope (default), not the command's (work), which holds none of the runs
    assert lines[-3] == "  FlowdeskSaver.open(" + repr(pg_empty_url) + ", scope='default')"
    assert lines[-2] == "next, on each worker machine:", copied.stdout
    command = lines[-1]
    assert command.strip() == f"flowdesk --db {pg_empty_url} --scope default agent"
    shim = tmp_path / "bin"  # `flowdesk` on PATH is this checkout
    shim.mkdir()
    (shim / "flowdesk").write_text(f'#!/bin/sh\nexec {sys.executable} -m desktop_app.cli "$@"\n')
    (shim / "flowdesk").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(  # the line, pasted into bash as printed
        ["bash", "-c", command], stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
        start_new_session=True,
    )  # fmt: skip
    assert worker.stderr is not None
    line = worker.stderr.readline()
    os.killpg(worker.pid, signal.SIGTERM)
    worker.communicate(timeout=60)
    assert "flowdesk agent: worker" in line and worker.returncode == 0, line


def test_a_hint_never_prints_a_database_password() -> None:
    from desktop_app.cli.output import Hints

    hints = Hints.of("postgresql://alice:s3cret@db.internal:5433/flow", None, {})
    assert hints.cmd("resume --all") == (
        "flowdesk --db postgresql://alice@db.internal:5433/flow resume --all"
    )
    assert hints.password_left_out
    by_env = Hints.of(None, None, {"FLOWDESK_DB_PATH": "/x/f.db", "FLOWDESK_SCOPE": "s"})
    assert by_env.cmd("runs") == "flowdesk --db /x/f.db --scope s runs"
    assert not by_env.password_left_out
    assert Hints.of(None, None, {}).cmd("runs") == "flowdesk runs"


def test_sigint_to_the_app_exits_130_with_a_hint_that_runs_as_printed(tmp_path: Path) -> None:
    import pty
    import select

    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "FLOWDESK_DB_PATH": str(db)}
    app = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
        preexec_fn=default_sigint,
    )
    os.close(slave)
    seen = b""

    def read(until: float) -> None:
        nonlocal seen
        while time.monotonic() < until:
            poller = select.poll()  # not select: descriptors past 1,024
            poller.register(master, select.POLLIN)
            ready = poller.poll(100)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the app closed the terminal
                    return
            if b"No runs yet" in seen and app.poll() is None:
                return
            if app.poll() is not None and not ready:
                return

    try:
        read(time.monotonic() + 60)
        assert b"No runs yet" in seen
        app.send_signal(signal.SIGINT)
        assert app.wait(timeout=30) == 130
        read(time.monotonic() + 2)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?<>=]*[A-Za-z]", "", seen.decode(errors="replace"))
    printed = hint(text)
    assert printed == f"flowdesk --db {db} resume --all"
    env.pop("FLOWDESK_DB_PATH")
    done = as_printed(printed, env)
    assert done.returncode == 0 and f"no interrupted runs in {db}" in done.stdout


@pytest.mark.slow
def test_sigterm_past_the_grace_names_the_agent_run_whose_mcp_call_is_in_flight(
    tmp_path: Path,
) -> None:
    """A new user's report: ``flowdesk agent --grace`` said "no flow run was
    executing a step" while it was executing an agent run's MCP call. It
    names that run, and the run, taken over afterwards, does not send the
    call again."""
    db, log, config = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    hang = completion("", [{"id": "a", "name": "notes__append_and_hang", "args": {"text": "g"}}])
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        server.script = [HANG, ("json", hang), ("json", completion("Gave up."))]
        asked = cli("--db", str(db), "ask", "note g", "--mcp", "notes", env=env)
        err = interrupt(asked, server, 1, signal.SIGKILL)
        run_id = re.search(r"^run (\w+) \(if interrupted", err, re.M).group(1)  # type: ignore[union-attr]
        worker = cli("--db", str(db), "agent", "--poll", "0.2", "--grace", "1", env=env)
        try:
            wait_for(lambda: log.exists() and log.read_text() == "g\n", "the MCP call in flight")
            worker.send_signal(signal.SIGTERM)
            _, said = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.returncode == 1, said
        assert "no run was executing" not in said
        assert f"agent runs still executing: {run_id};" in said, said
        resumed = flowdesk(db, "resume", "--all", env=env)
        assert f"agent run {run_id} done" in resumed.stdout, resumed.stdout + resumed.stderr
    assert log.read_text() == "g\n"  # the call in flight was not sent again
