"""An empty scope is refused, wherever it comes from: a new user's
``FLOWDESK_SCOPE= flowdesk --db g.db start napper`` stored its run in scope
``''`` and printed ``flowdesk --db g.db show RUN`` (no ``--scope``), which
failed (exit 2: "no run … in scope 'default'; it is a run of scope ''").
Now ``FLOWDESK_SCOPE=``, ``--scope ''`` and ``--scope ' '`` are bad input
(exit 2) saying what a scope may be, and nothing is stored. A scope and a
database path holding spaces and shell characters are quoted in the hint,
which runs as printed (real ``flowdesk`` subprocesses, a real SQLite file)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from desktop_app.store.sqlite.store import open_store
from tests.cli_support import as_printed, flowdesk
from tests.test_cli_new_user import user_env
from tests.timer_flows import FLOWS_ENV

INPUT = json.dumps({"order": "z3"})


def stored_runs(db: Path) -> list[tuple[str, str]]:
    store = open_store(db)
    try:
        return [
            (str(scope), str(run_id))
            for scope, run_id in store.query(
                lambda tx: tx.fetchall("SELECT scope, run_id FROM runs", ())
            )
        ]
    finally:
        store.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "g.db"
    assert flowdesk(path, "db", "apply").returncode == 0
    return path


def test_an_empty_scope_from_the_environment_is_refused_and_nothing_is_stored(db: Path) -> None:
    out = flowdesk(
        db,
        "start",
        "napper",
        "--input",
        INPUT,
        env={"FLOWDESK_FLOWS": FLOWS_ENV, "FLOWDESK_SCOPE": ""},
    )
    assert out.returncode == 2, out.stderr
    assert "FLOWDESK_SCOPE='' is not a scope" in out.stderr, out.stderr
    assert "a scope is a name of at least one character" in out.stderr
    assert "unset FLOWDESK_SCOPE" in out.stderr
    assert "Traceback" not in out.stderr
    assert stored_runs(db) == []


@pytest.mark.parametrize("scope", ["", "  "])
def test_an_empty_scope_option_is_refused_naming_the_option(db: Path, scope: str) -> None:
    out = flowdesk(
        db, "--scope", scope, "start", "napper", "--input", INPUT, env={"FLOWDESK_FLOWS": FLOWS_ENV}
    )
    assert out.returncode == 2, out.stderr
    assert f"--scope {scope!r} is not a scope" in out.stderr, out.stderr
    assert "leave --scope out" in out.stderr
    assert stored_runs(db) == []


def test_a_scope_and_path_with_shell_characters_are_quoted_in_the_hint(tmp_path: Path) -> None:
    """The scope comes from ``FLOWDESK_SCOPE`` (given for one command); the
    printed ``show`` hint alone (run without that variable) finds the run."""
    folder = tmp_path / "my notes; $HOME"
    folder.mkdir()
    db = folder / "g b.db"
    scope = "team a; $(touch pwned) 'x'"
    env = user_env(FLOWDESK_FLOWS=FLOWS_ENV)
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    out = flowdesk(db, "start", "napper", "--input", INPUT, env={**env, "FLOWDESK_SCOPE": scope})
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split()[0]
    assert stored_runs(db) == [(scope, run_id)]
    found = re.search(r"(flowdesk \S.* show \w+)", out.stderr + out.stdout)
    assert found, out.stderr
    hint = found.group(1)
    assert "--scope" in hint, hint
    shown = as_printed(hint, env)
    assert shown.returncode == 0, shown.stderr
    assert run_id in shown.stdout
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
