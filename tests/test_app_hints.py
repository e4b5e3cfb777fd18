"""The commands the app suggests carry the database and scope the app was
started with (``flowdesk --db X``), and run as printed."""

from __future__ import annotations

import os
import shlex
import subprocess

from desktop_app.app.screens.answer import how_to_deliver
from desktop_app.app.screens.inbox import agent_hint
from desktop_app.cli.output import Hints
from desktop_app.store.protocol import Wait
from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed


def run_as_printed(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` run as printed, in a process of its own (forked from
    tests/cli_forkserver.py: its start-up is not what these tests check)."""
    return as_printed(command, dict(os.environ), timeout=60)


def test_the_apps_signal_and_answer_hints_name_its_database_and_scope(db_path, tmp_path):
    hints = Hints(str(db_path), "team a")
    wait = Wait("r1:s:0", "s", "signal", 1000.0, name="paid order", key="o 1")
    said = how_to_deliver(hints, wait)
    assert said.startswith("Send it with: flowdesk --db ")
    command = said.removeprefix("Send it with: ")
    done = run_as_printed(command)
    assert done.returncode == 0, done.stderr
    store = open_store(db_path, scope="team a")
    try:
        got = store.next_signal("paid order", "o 1")
        assert got is not None  # stored in the app's database and scope, under its name and key
    finally:
        store.close()
    assert agent_hint(hints, "ab12", "ask/2:c 1") == (
        f"flowdesk --db {shlex.quote(str(db_path))} --scope 'team a' "
        "ask --resume ab12 --answer TEXT --wait-id 'ask/2:c 1'"
    )
