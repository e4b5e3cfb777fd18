"""A command that refuses a database that does not exist leaves nothing
behind: no empty database file, no ``-wal``, ``-shm`` or lock file where
there was none (a typo in ``--db`` must not plant a file a later command
then takes for a database). ``open_store`` created the file, then raised
SchemaMissingError, leaving an empty file at the mistyped path.

Real ``flowdesk`` subprocesses over a temporary folder; each hint is run as
printed. ``db apply`` creates the file, as the README says, and so does
the app for its own database (not started here: it needs a terminal).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from desktop_app.errors import DatabaseMissingError, SchemaMissingError
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk

#: commands that read or change what a database holds: each refuses a
#: missing one, exit 1, with the command that creates it
REFUSING = [
    ["runs"],
    ["runs", "--json"],
    ["show", "r-1"],
    ["waiting"],
    ["db", "status"],
    ["cancel", "r-1"],
    ["resume", "r-1"],
    ["answer", "r-1", "yes"],
    ["signal", "payment", "o-1"],
    ["undo", "r-1"],
    ["replay", "r-1"],
    ["run", "tidy", "--folder", "."],
    ["ask", "hello?"],
]


def test_open_store_on_a_missing_file_creates_nothing_and_its_hint_creates_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(SchemaMissingError) as missing:
        open_store(path)
    assert os.listdir(tmp_path) == []  # no empty file, no -wal/-shm, no lock file
    with pytest.raises(DatabaseMissingError) as plain:
        open_store(path, create=False)
    assert os.listdir(tmp_path) == []
    for said in (str(missing.value), str(plain.value)):
        (hint,) = re.findall(r"run `([^`]+)`", said)
        assert hint == f"flowdesk --db {path} db apply", said
        assert as_printed(hint, dict(os.environ)).returncode == 0
    store = open_store(path)  # it works now, and is an empty database
    try:
        assert store.list_runs() == []
    finally:
        store.close()


@pytest.mark.parametrize("command", REFUSING, ids=" ".join)
def test_a_command_on_a_mistyped_database_leaves_no_file_behind(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "typo.db"
    env = {"FLOWDESK_MODEL__BASE_URL": "http://127.0.0.1:9", "FLOWDESK_MODEL__MODEL": "m"}
    out = flowdesk(db, *command, env=env)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines()[-1] == (
        f"flowdesk: no database at {db}; run `flowdesk --db {db} db apply` first."
    ), out.stderr
    assert os.listdir(tmp_path) == []
