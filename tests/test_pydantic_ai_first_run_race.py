"""Two first calls of ``FlowdeskAgent.run(prompt, run_id=ID)`` with one new
run id, released at one instant by a barrier in two real processes, 20
rounds (the second tryout's report: the loser raised
``RevisionConflictError: agent run ... already exists``, which the API
does not name). The loser is told as a call after the first is: the same
prompt, ``AgentRunLeasedError`` while the winner drives the run (or the
winner's result once it is done); another prompt, ``InputError``. One
model request per round, counted on a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.chat_server import ChatServer
from tests.cli_support import REPO, flowdesk
from tests.test_pydantic_ai import completion

ROUNDS = 20


def test_two_first_calls_with_one_run_id_run_it_once_and_tell_the_loser(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    go = tmp_path / "go"
    with ChatServer() as server:
        server.script = [("json", completion(f"said {i}")) for i in range(ROUNDS)]
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PAI_TEST_URL": server.url,
            "PAI_TEST_LOG": str(tmp_path / "tool.log"),
        }
        racers = [
            subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "first_run_racer.py"), str(db), str(go)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        told: list[list[dict[str, str]]] = []
        try:
            for rnd in range(ROUNDS):
                same = rnd % 2 == 0  # even rounds: one prompt; odd: two prompts
                for side, racer in enumerate(racers):
                    word = "hello" if same or side == 0 else "other"
                    assert racer.stdin is not None and racer.stdout is not None
                    racer.stdin.write(f"{rnd} run-{rnd} {word}\n")
                    racer.stdin.flush()
                for racer in racers:
                    assert racer.stdout is not None
                    assert racer.stdout.readline().split() == ["ready", str(rnd)]
                Path(f"{go}.{rnd}").touch()  # both released at one instant
                outcomes = []
                for racer in racers:
                    assert racer.stdout is not None
                    line = racer.stdout.readline()
                    assert line.startswith(f"done {rnd} "), (line, racer.stderr)
                    outcomes.append(json.loads(line.split(" ", 2)[2]))
                told.append(outcomes)
        finally:
            for racer in racers:
                if racer.stdin is not None:
                    racer.stdin.write("end\n")
                    racer.stdin.close()
                racer.wait(timeout=60)
        requests = len(server.requests)
    for rnd, outcomes in enumerate(told):
        done = [o for o in outcomes if o.get("status") == "done"]
        assert done, (rnd, outcomes)  # the winner drove it to its end
        raised = {o["raised"] for o in outcomes if "raised" in o}
        assert "RevisionConflictError" not in raised, (rnd, outcomes)
        if rnd % 2 == 0:  # the same prompt: leased, or the same result
            assert raised <= {"AgentRunLeasedError"}, (rnd, outcomes)
            assert len({o["text"] for o in done}) == 1, (rnd, outcomes)
        else:  # another prompt: refused, whoever won
            assert len(done) == 1 and raised == {"InputError"}, (rnd, outcomes)
    assert requests == ROUNDS  # one model request a round: the run ran once
