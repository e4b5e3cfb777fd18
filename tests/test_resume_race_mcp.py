"""Processes resuming one interrupted agent run that has MCP tools at once,
as users meet it: two real processes (tests/resume_racer.py) released at
one instant, many rounds, on a real SQLite file, with the project's stdio
MCP server and a scripted model server on 127.0.0.1. Each is ``flowdesk
resume RUN`` or a ``flowdesk agent`` worker's pass over interrupted agent
runs, mixed from round to round.

The run's lease is taken before any MCP server starts: the MCP server is
started once per round (by the process that won the run), its tool is
called once, the model is asked once per turn, and every other process
starts nothing (refused: a live process has the run; or, coming after the
winner finished, it finds the run done and prints its saved answer). Before,
every resume started the run's MCP servers and learned it lost only when it
went to take the run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from desktop_app.agent import Agent
from desktop_app.agent.recovery import ToolSources
from desktop_app.bootstrap import open_services
from desktop_app.config import load_settings
from desktop_app.store.protocol import AgentLog
from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, flowdesk
from tests.line_racer import LineRacer
from tests.test_cli_agent_resume import model_env

RACER = Path(__file__).resolve().parent / "resume_racer.py"
ROUNDS = 20
WAYS = [("cli", "cli"), ("cli", "worker"), ("worker", "worker"), ("worker", "cli")]


class _Interrupted:
    """A model whose first call is cut off as by Ctrl-C: the run it starts
    is left ``running`` with its lease released (interrupted)."""

    def complete(self, *_: Any) -> Any:
        raise KeyboardInterrupt

    stream = complete


def interrupted_run(store: AgentLog, rnd: int) -> str:
    """A new agent run that records the MCP server ``notes`` as its tools and
    was interrupted before its first model reply; its id."""
    agent = Agent(
        "ask",
        _Interrupted(),  # type: ignore[arg-type]
        store,
        tool_sources=ToolSources(mcp=("notes",)).to_json(),
    )
    with pytest.raises(KeyboardInterrupt):
        agent.ask(f"note r{rnd}", run_id=f"race{rnd}")
    run = store.get(f"race{rnd}")
    assert (run.status, run.lease_owner) == ("running", None)  # interrupted
    return run.run_id


def said(told: dict[str, Any], rid: str, rnd: int) -> str:
    """How a process ended, checked word for word: ``done`` (it drove the
    run, or found it done and gave its saved answer), ``nothing`` (a worker
    that found no interrupted run: another process held it) or ``held``
    (refused: a live process has the run)."""
    if told["code"] == 0 and told["out"] in (f"Noted {rnd}.\n", f"agent run {rid} done\n"):
        return "done"  # `resume` prints the answer; a worker, the run's end
    if told["code"] == 0 and told["out"] == "":
        return "nothing"
    assert told["code"] == 1 and told["out"] == "", told
    (line,) = [x for x in told["err"].splitlines() if x.startswith("flowdesk: ")]
    held = f"flowdesk: agent run {rid} is held by a live process: it is being executed by "
    assert line.startswith(held), line
    return "held"


@pytest.mark.slow
def test_resuming_processes_start_the_mcp_server_once_and_call_the_tool_once(
    tmp_path: Path,
) -> None:
    db, go = tmp_path / "f.db", tmp_path / "go"
    log, starts, config = tmp_path / "notes.log", tmp_path / "starts", tmp_path / "config.toml"
    # each start of the server is a line in STARTS, then the server itself
    # (forked from preloaded imports: tests/fork_proxy.py)
    command = [
        "sh", "-c", 'echo start >> "$0"; exec "$@"', str(starts),
        *module_command("tests.mcp_notes_server", str(log), "stdio"),
    ]  # fmt: skip
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    seen: Counter[str] = Counter()
    with ChatServer() as server:
        env = model_env(server, FLOWDESK_CONFIG=str(config))
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        services = open_services(load_settings(db_path=str(db)), flows=[])
        store = services.agents
        racers = [LineRacer(RACER, str(db), str(go), env=env) for _ in range(len(WAYS[0]))]
        try:
            for rnd in range(ROUNDS):
                rid = interrupted_run(store, rnd)
                append = [{"id": "a", "name": "notes__append", "args": {"text": f"r{rnd}"}}]
                server.script = [
                    ("json", completion("", append)),
                    ("json", completion(f"Noted {rnd}.")),
                ]
                before = len(starts.read_text().splitlines()) if starts.exists() else 0
                ways = WAYS[rnd % len(WAYS)]
                for each, how in zip(racers, ways, strict=True):
                    each.send(f"resume {rnd} {rid} {how}")
                    assert each.line() == f"ready {rnd}"
                Path(f"{go}.{rnd}").touch()  # all released at once
                told = [each.told(rnd) for each in racers]
                where = f"round {rnd}: {told}"
                assert len(starts.read_text().splitlines()) - before == 1, where  # the winner's
                assert log.read_text().splitlines().count(f"r{rnd}") == 1, where  # one call
                assert len(server.requests) == 2 * (rnd + 1), where  # no model call by a loser
                assert store.get(rid).status == "done", where
                ended = [said(t, rid, rnd) for t in told]
                assert ended.count("held") < len(ended), where
                seen.update(f"{how}: {e}" for how, e in zip(ways, ended, strict=True))
        finally:
            for each in racers:
                each.close()
            services.close()
    print(f"two resumes at once, {ROUNDS} rounds: the others ended {dict(seen)}")
    assert len(log.read_text().splitlines()) == ROUNDS
