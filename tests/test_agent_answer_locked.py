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


def test_an_answer_whose_commit_outcome_is_unknown_says_so_not_nothing_answered(
    tmp_path: Path, capsys
) -> None:
    """An answer's own commit cut off (PostgreSQL's unknown outcome): the
    answer may have landed, so the CLI does not say "nothing was answered";
    it names `show` to find out and the same answer for when the run still
    waits."""
    from desktop_app.cli import Ctx, _handle
    from desktop_app.cli.parser import build_parser
    from desktop_app.errors import CommitUnknownError

    db = tmp_path / "a.db"
    argv = ["--db", str(db), "answer", "r1", "yes"]
    ctx = Ctx(build_parser().parse_args(argv))

    def cut_off(ctx: Ctx) -> int:
        ctx.current_run, ctx.unanswered = "r1", "answer r1 yes --wait-id approve:0"
        raise CommitUnknownError("postgresql://h/db", "42", "the server went away")

    assert _handle(ctx, cut_off, argv) == 1
    err = capsys.readouterr().err
    assert "nothing was answered" not in err and "resume with" not in err, err
    assert (
        f"whether the answer was saved is unknown: `flowdesk --db {db} show r1` says whether "
        "the run still waits for it; if it does, answer again with: "
        f"flowdesk --db {db} answer r1 yes --wait-id approve:0"
    ) in err, err
