"""An answer to a waiting agent run while another process holds the
database's write lock: nothing was answered, so the hint is the same answer
(pinned to its question), not ``resume RUN`` (a tryout: that resume was
refused, the run still waiting for its answer). Run as printed once the
lock is gone, it answers and the run goes on. Real file, real processes, a
real HTTP server on 127.0.0.1 for the model."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_support import REPO, as_printed
from tests.lock_holder import write_lock_held


def test_an_agent_answer_that_met_the_lock_prints_the_answer_again(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with ChatServer() as server:
        server.script = [
            (
                "json",
                completion("", [{"id": "q1", "name": "ask_user", "args": {"question": "Go?"}}]),
            ),
            ("json", completion("Going.")),
        ]
        env = {
            **os.environ,
            "FLOWDESK_MODEL__BASE_URL": server.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_BUSY_TIMEOUT_S": "0.5",
        }

        def flowdesk(*args: str):  # type: ignore[no-untyped-def]
            return cli_forkserver.run(["--db", str(db), *args], env=env, cwd=REPO, timeout=120)

        assert flowdesk("db", "apply").returncode == 0
        asked = flowdesk("ask", "please ask me")
        assert asked.returncode == 0, asked.stderr
        run_id = re.search(r"run ([0-9a-f]{32})", asked.stderr).group(1)  # type: ignore[union-attr]
        with write_lock_held(db):
            out = flowdesk("answer", run_id, "yes")
        assert out.returncode == 1, out.stderr
        assert "stayed locked by another process past the busy timeout" in out.stderr
        assert "resume with" not in out.stderr and "runs again" not in out.stderr, out.stderr
        (hint,) = [
            x.removeprefix("nothing was answered; answer again with: ")
            for x in out.stderr.splitlines()
            if x.startswith("nothing was answered")
        ]
        assert hint.startswith(f"flowdesk --db {db} ask --resume {run_id} --answer yes --wait-id ")
        assert len(server.requests) == 1  # nothing asked of the model meanwhile
        answered = as_printed(hint, env)
        assert answered.returncode == 0, answered.stderr
        assert "Going." in answered.stdout
        assert server.requests[-1]["body"]["messages"][-1]["content"].endswith("yes")
