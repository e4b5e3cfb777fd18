"""Two answers racing on one agent run that has MCP tools, as users meet
it: two real processes (tests/answer_racer.py) released at one instant,
many rounds, on a real SQLite file, with the project's stdio MCP server
and a scripted model server on 127.0.0.1. Both are ``flowdesk answer`` in
half the rounds; in the others one answers as the app's inbox does
(``resume_with_recorded_tools``).

The answer that loses is refused before it starts anything: the MCP server
is started once per answered run (by the winner), the tool is called once,
the model is asked once per turn, and the loser is told that another
process has the run. Before, both answers started the run's MCP servers
and the loser found out only when it went to take the run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, completion
from tests.cli_forkserver import module_command
from tests.cli_support import REPO, as_printed, flowdesk
from tests.line_racer import LineRacer
from tests.test_cli_agent_resume import model_env

RACER = Path(__file__).resolve().parent / "answer_racer.py"
ROUNDS = 20


def loser_said(rid: str, said: dict, how: str) -> str:
    """How the losing answer was refused (exit 1, nothing on stdout), checked
    word for word: ``held`` (the winner holds the run) or ``answered`` (the
    winner had answered and ended its turn). The CLI's ``held`` says the
    answer was not recorded, with the ``show`` that says what the winner
    did, run as printed."""
    assert (said["code"], said["out"]) == (1, ""), said
    (line,) = [x for x in said["err"].splitlines() if x.startswith("flowdesk: ")]
    held = f"flowdesk: agent run {rid} is held by a live process: it is being executed by "
    if line.startswith(held):
        assert line.endswith(
            ". Nothing was run here. Wait for it; if that process ends without finishing "
            "it, the run can be resumed at once."
        ), line
        if how == "cli":
            note = (
                "your answer ('yes') was not recorded: the process holding the run answered "
                "it first or is running it; what it did: `"
            )
            assert note in said["err"], said
            shown = as_printed(said["err"].split(note, 1)[1].split("`", 1)[0], said["env"])
            assert shown.returncode == 0 and rid in shown.stdout, shown
        return "held"
    assert line in (
        f"flowdesk: agent run {rid} is done, not waiting for an answer; nothing was "
        f"answered (`flowdesk --db {said['db']} show {rid}` says what it did)",
        f"flowdesk: agent run {rid} is not waiting for input (status 'done')",  # the app's
    ), line
    return "answered"


@pytest.mark.slow
def test_the_losing_answer_starts_no_mcp_server_and_calls_no_tool(tmp_path: Path) -> None:
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
        racers = [LineRacer(RACER, str(db), str(go), env=env) for _ in range(2)]
        try:
            for rnd in range(ROUNDS):
                ask_user = [{"id": "q", "name": "ask_user", "args": {"question": "which?"}}]
                append = [{"id": "a", "name": "notes__append", "args": {"text": f"r{rnd}"}}]
                server.script = [
                    ("json", completion("", ask_user)),
                    ("json", completion("", append)),
                    ("json", completion(f"Noted {rnd}.")),
                ]
                racers[0].send(f"ask {rnd} note something")
                asked = racers[0].told(rnd)
                assert asked["code"] == 0, asked
                rows = [json.loads(r) for r in flowdesk(db, "runs", "--json").stdout.splitlines()]
                (rid,) = [r["run_id"] for r in rows if r["status"] == "input_required"]
                before = len(starts.read_text().splitlines())
                ways = ("cli", "cli" if rnd % 2 else "app")  # the app's way against the CLI
                for each, how in zip(racers, ways, strict=True):
                    each.send(f"answer {rnd} {rid} {how} yes")
                    assert each.line() == f"ready {rnd}"
                Path(f"{go}.{rnd}").touch()  # both released at once
                told = [each.told(rnd) for each in racers]
                where = f"round {rnd}: {told}"
                won = [t for t in told if t["code"] == 0]
                assert len(won) == 1, where
                assert f"Noted {rnd}." in won[0]["out"], where
                (lost,) = [t for t in told if t["code"] != 0]
                assert "connecting to MCP server" not in lost["err"], where
                assert len(starts.read_text().splitlines()) - before == 1, where  # the winner's
                assert log.read_text().splitlines().count(f"r{rnd}") == 1, where  # one call
                assert len(server.requests) == 3 * (rnd + 1), where  # no model call by the loser
                lost_how = ways[told.index(lost)]
                said = loser_said(rid, {**lost, "db": db, "env": env}, lost_how)
                seen[f"{lost_how}: {said}"] += 1
        finally:
            for each in racers:
                each.close()
    print(f"two answers at once, {ROUNDS} rounds: the loser was told {dict(seen)}")
    assert len(log.read_text().splitlines()) == ROUNDS
