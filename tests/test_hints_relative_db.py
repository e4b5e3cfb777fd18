"""A new user's report: with a relative ``--db`` (``flowdesk --db o.db ask
...`` in one folder), the printed ``approve with: flowdesk --db o.db ...``
pasted in another terminal's folder failed ("no database at o.db"), and its
suggested ``db apply`` would have made a new empty database there. A hint
names the file by its absolute path. Real SQLite file, real processes, each
command in its own working folder."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.damaged_flows import FLOWS_ENV

ENV = {**os.environ, "FLOWDESK_FLOWS": FLOWS_ENV}


@pytest.mark.scenario("S111")
def test_a_hint_given_for_a_relative_db_works_from_another_folder(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return cli_forkserver.run(list(args), env=ENV, cwd=cwd, timeout=60)

    assert run(here, "--db", "o.db", "db", "apply").returncode == 0
    started = run(here, "--db", "o.db", "start", "asker", "--input", json.dumps({"order": "A"}))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    shown = run(here, "--db", "o.db", "show", run_id)
    (command,) = [
        line.split("answer with: ", 1)[1]
        for line in shown.stdout.splitlines()
        if "answer with: " in line
    ]
    assert command.startswith(f"flowdesk --db {here / 'o.db'} answer {run_id} yes "), command

    argv = shlex.split(command)
    answered = run(there, *argv[1:])
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} completed" in answered.stdout
    assert not (there / "o.db").exists()  # nothing made in the other folder
