"""An agent run that used its model turns with no answer (S117): the hint
it prints raises the limit and resumes it, run exactly as printed; a resume
under the same limit asks the model nothing and says what to raise."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_support import as_printed

REPO = Path(__file__).resolve().parents[1]


def run(db: Path, *args: str, env: dict[str, str]):  # type: ignore[no-untyped-def]
    return cli_forkserver.run(["--db", str(db), *args], env=env, cwd=REPO, timeout=120)


@pytest.mark.scenario("S117")
def test_a_run_out_of_turns_resumes_with_the_printed_limit(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with ChatServer() as server:
        # a model that keeps calling a tool it does not have: a turn each
        server.script = [
            ("json", completion("", [{"id": f"c{i}", "name": "nope", "args": {}}]))
            for i in range(20)
        ]
        env = {**os.environ, "FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        assert run(db, "db", "apply", env=env).returncode == 0
        out = run(db, "ask", "what now?", env=env)
        assert out.returncode == 1, out.stderr
        assert len(server.requests) == 20, out.stderr
        (line,) = [x for x in out.stderr.splitlines() if "no answer after 20 turns" in x]
        hint = re.search(r"\((FLOWDESK_AGENTS__ASK__MAX_TURNS=40 flowdesk .*)\)$", line)
        assert hint is not None, line
        run_id = line.split()[1]

        same = run(db, "resume", run_id, env=env)  # the limit unchanged: nothing asked
        assert same.returncode != 0 and len(server.requests) == 20, same.stderr
        assert "took 20 turns with no answer and may take 20" in same.stderr, same.stderr
        assert "FLOWDESK_AGENTS__ASK__MAX_TURNS" in same.stderr and "Traceback" not in same.stderr
        too_many = run(db, "resume", run_id, env={**env, "FLOWDESK_AGENTS__ASK__MAX_TURNS": "1001"})
        assert too_many.returncode == 2 and "less than or equal to 1000" in too_many.stderr
        assert len(server.requests) == 20
        shown = run(db, "show", run_id, env=env)
        assert hint.group(1) in shown.stdout, shown.stdout  # show prints the same next step

        server.script = [("json", completion("Here it is."))]
        again = as_printed(hint.group(1), env)
        assert again.returncode == 0, again.stderr
        assert "Here it is." in again.stdout
        assert len(server.requests) == 21  # one more turn, the 20 before not asked again
        done = run(db, "show", run_id, env=env)
        assert "done" in done.stdout and "Here it is." in done.stdout, done.stdout


def test_a_stray_max_turns_variable_does_not_set_an_agents_limit(monkeypatch) -> None:
    """Only ``[agents.NAME] max_turns`` (or ``FLOWDESK_AGENTS__NAME__MAX_TURNS``)
    sets the limit: the default was read from a fresh ``AgentSettings()``,
    which read an unrelated ``MAX_TURNS`` from the environment."""
    from desktop_app.config import Settings, max_turns

    monkeypatch.setenv("MAX_TURNS", "5")
    assert max_turns(Settings(), "ask") == 20
    monkeypatch.setenv("FLOWDESK_AGENTS__ASK__MAX_TURNS", "7")
    assert max_turns(Settings(), "ask") == 7
