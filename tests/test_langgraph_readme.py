"""The README's LangGraph snippet, pasted into a file and run as a user
would: it asks, `flowdesk answer release-42 -` (the answer on standard input)
answers, and running it again finishes the graph with the answer."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk


def snippet() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## LangGraph graphs on Flowdesk\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.scenario("S95")
def test_the_readme_snippet_asks_is_answered_and_goes_on(tmp_path: Path) -> None:
    code = snippet()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    script = tmp_path / "release.py"
    script.write_text(code)
    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    env = {**os.environ, "FLOWDESK_DB_PATH": str(db), "PYTHONPATH": str(REPO)}

    def run() -> str:
        done = cli_forkserver.run_argv(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "Ship release 42?" in run()
    listed = flowdesk(db, "runs")
    assert "release-42" in listed.stdout and "waiting" in listed.stdout
    answered = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "answer", "release-42", "-"],
        input="yes\n", capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    again = flowdesk(db, "answer", "release-42", "no")  # answered already: exit 1, as a run
    assert again.returncode == 1
    assert "is answered, not waiting for an answer; nothing was stored" in again.stderr
    assert "You said: yes" in run()
    shown = flowdesk(db, "show", "release-42")
    assert "status completed" in shown.stdout and "tenant_id acme" in shown.stdout
    late = flowdesk(db, "answer", "release-42", "no")
    assert late.returncode == 1 and "is completed, not waiting for an answer" in late.stderr
