"""After ``db copy``, an agent run waiting in the file for a person's
approval of its tool call is moved: ``answer``, ``resume``, ``ask --resume``
and ``flowdesk agent`` on the file refuse it (no MCP server started, no
tool called) with the command that shows it there, which runs as printed;
answered on PostgreSQL as the app does there (handed to the workers), a
``flowdesk agent`` worker on PostgreSQL finishes it and the tool is called
once. Real processes, a scripted model server on 127.0.0.1, the project's
test MCP server.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from desktop_app.errors import redact
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, as_printed, flowdesk, spawn
from tests.test_cli_agent_resume import model_env


def _pg_agent_status(url: str, run_id: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status FROM flowdesk.agent_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return str(row[0])


def _hand_to_workers(url: str, run_id: str, answer: str) -> None:
    """Answer the run on ``url`` as the app's inbox does on PostgreSQL: the
    answer stored, the run left to the workers."""
    from desktop_app.agent.recovery import hand_answer_to_workers
    from desktop_app.bootstrap import open_services
    from desktop_app.config import load_settings
    from desktop_app.flow.owners import new_owner

    services = open_services(load_settings(db_path=url), flows=[])
    try:
        store = services.agents
        hand_answer_to_workers(
            store, store.get(run_id), answer, owner=new_owner(), now=services.checkpoints.now()
        )
    finally:
        services.close()


@pytest.mark.postgres
def test_a_moved_agent_run_waiting_for_approval_is_refused_on_the_file_and_a_postgres_worker_finishes_it(  # noqa: E501
    tmp_path: Path, pg_url: str
) -> None:
    db = tmp_path / "laptop.db"
    log, starts, config = tmp_path / "notes.log", tmp_path / "starts", tmp_path / "config.toml"
    # each start of the MCP server is a line in STARTS, then the server itself
    command = [
        "sh", "-c", 'echo start >> "$0"; exec "$@"', str(starts),
        *module_command("tests.mcp_notes_server", str(log), "stdio"),
    ]  # fmt: skip
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
        'require_approval = ["append"]\n'
    )
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        append = [{"id": "a", "name": "notes__append", "args": {"text": "hello"}}]
        server.script = [("json", completion("", append)), ("json", completion("Noted."))]
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        asked = flowdesk(db, "ask", "note hello", "--mcp", "notes", env=env)
        assert "approve with:" in asked.stderr, asked.stdout + asked.stderr
        rows = [json.loads(r) for r in flowdesk(db, "runs", "--json", env=env).stdout.splitlines()]
        (rid,) = [r["run_id"] for r in rows if r["status"] == "input_required"]
        started = starts.read_text().count("start")

        copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
        assert copied.returncode == 0, copied.stderr
        assert f"marked 1 unfinished run moved in {db}" in copied.stdout
        where = redact(pg_url, mask=None)
        said = f"agent run {rid} moved to {where} (flowdesk db copy)"
        hint = f"flowdesk --db {where} show {rid}"

        # every way of going on with it from the file refuses, starting nothing
        for argv in (
            ("answer", rid, "yes"),
            ("resume", rid),
            ("ask", "--resume", rid, "--answer", "yes"),
        ):
            out = flowdesk(db, *argv, env=env)
            assert out.returncode == 1, (argv, out.stdout, out.stderr)
            assert said in out.stderr, (argv, out.stderr)
            assert f"see it there: {hint}\n" in out.stderr, (argv, out.stderr)
        agent = spawn("--db", str(db), "agent", "--poll", "0.1", env=env)
        try:
            assert agent.stderr is not None
            for line in agent.stderr:
                if f"agent run {rid} moved to {where} by flowdesk db copy; not executed" in line:
                    assert f"(see it there: {hint})" in line
                    break
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.communicate(timeout=60)
        assert agent.returncode == 0
        assert starts.read_text().count("start") == started  # no MCP server started
        assert not log.exists() or "hello" not in log.read_text()
        assert len(server.requests) == 1  # the model was not asked again
        assert _pg_agent_status(pg_url, rid) == "input_required"

        # waiting on the file lists it apart, with no answer hint that would be refused
        waiting = flowdesk(db, "waiting", env=env)
        assert waiting.returncode == 0, waiting.stderr
        assert waiting.stdout == (
            f"no waiting runs\nagent run {rid} moved to {where} by flowdesk db copy while it "
            f"waited: it is answered there, not here (see it there: {hint})\n"
        )
        assert flowdesk(db, "waiting", "--json", env=env).stdout == ""
        # show on the file offers no yes/no there (each refused): only the show there
        shown = flowdesk(db, "show", rid, env=env)
        assert shown.returncode == 0, shown.stderr
        assert f"flowdesk --db {db}" not in shown.stdout + shown.stderr, shown.stdout
        assert "    yes: " not in shown.stdout and "    no:  " not in shown.stdout
        assert f"see it there: {hint}\n" in shown.stdout, shown.stdout
        assert "    answered where the run moved (see above), not on this database" in (
            shown.stdout
        )
        data = json.loads(flowdesk(db, "show", rid, "-o", "json", env=env).stdout)
        assert data["moved"] == {"to": where, "command": hint}
        assert [w["commands"] for w in data["waits"]] == [None] and data["next"] is None
        # the hint, run as printed, shows the run there, still waiting
        there = as_printed(hint, env)
        assert there.returncode == 0, there.stderr
        assert f"agent run {rid}" in there.stdout and "status input_required" in there.stdout

        # answered on PostgreSQL as the app does there; a worker finishes it
        _hand_to_workers(pg_url, rid, "yes")
        worker = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
        try:
            deadline = time.monotonic() + 120
            while _pg_agent_status(pg_url, rid) != "done":
                assert worker.poll() is None, worker.communicate()
                assert time.monotonic() < deadline, "the worker did not finish the run"
                time.sleep(0.1)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=60)
        assert log.read_text().splitlines().count("hello") == 1  # the tool, called once
        assert len(server.requests) == 2
    shown = flowdesk(db, "show", rid, env=env)  # the file still says where it went
    assert "status moved" in shown.stdout, shown.stdout
