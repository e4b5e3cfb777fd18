"""A command that wrote leaves its commits in the database file itself,
not only in the write-ahead log, when no other process still reads them.

A tryout: after `start`, `answer` or `signal` exited, the ``-wal`` stayed,
holding every commit since the file's last checkpoint (626 KB beside a
229 KB file), and a plain copy of the file alone, a common backup, had
none of the runs `flowdesk runs` listed. Read commands happened to fold
it in; the commands that wrote never closed their connection. Each command
now folds the log in as it ends (a passive checkpoint: the -wal and -shm
files stay, so a full disk can still be read)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli_support import flowdesk

ENV = {"FLOWDESK_FLOWS": json.dumps(["desktop_app.examples.approval:approval"])}


@pytest.mark.scenario("S126")
def test_a_copy_of_the_file_alone_holds_what_the_commands_wrote(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "approval", "--input", '{"order": "o-1"}', env=ENV)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[0]
    answered = flowdesk(db, "answer", run_id, "yes", env=ENV)
    assert answered.returncode == 0, answered.stderr
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)  # the file alone, as a backup tool copies it
    shown = flowdesk(copy, "show", run_id, "-o", "json", env=ENV)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "waiting"
    assert json.loads(shown.stdout)["revision"] >= 2  # the answer is in it too
