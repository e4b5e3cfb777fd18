"""A command on a database that does not exist yet prints the command that
creates it with the ``--db`` and ``--scope`` the user gave (it dropped
``--scope``); the hint is run exactly as printed, in a real ``flowdesk``
subprocess, and the first command then works in that scope."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli_support import flowdesk
from tests.test_cli_new_user import as_printed, user_env


def test_the_missing_database_hint_repeats_db_and_scope_and_runs_as_printed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "my notes" / "nope.db"  # a space: the hint quotes it
    db.parent.mkdir()
    env = user_env()
    out = flowdesk(db, "--scope", "team", "runs", env=env)
    assert out.returncode == 1, out.stderr
    found = re.search(r"run `([^`]+)` first", out.stderr)
    assert found, out.stderr
    hint = found.group(1)
    assert "--scope team" in hint and hint.endswith(" db apply"), hint
    assert not db.exists()  # nothing was created by the failed command
    applied = as_printed(hint, env)
    assert applied.returncode == 0, applied.stderr
    assert db.exists()
    again = flowdesk(db, "--scope", "team", "runs", env=env)
    assert again.returncode == 0, again.stderr


def test_a_database_from_the_environment_is_repeated_in_the_hint(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    env = user_env(FLOWDESK_DB_PATH=str(db), FLOWDESK_SCOPE="ops")
    out = as_printed("flowdesk runs", env)
    assert out.returncode == 1, out.stderr
    found = re.search(r"run `([^`]+)` first", out.stderr)
    assert found, out.stderr
    assert found.group(1) == f"flowdesk --db {db} --scope ops db apply"
    plain = {k: v for k, v in env.items() if k not in ("FLOWDESK_DB_PATH", "FLOWDESK_SCOPE")}
    applied = as_printed(found.group(1), plain)  # the hint alone says where
    assert applied.returncode == 0, applied.stderr
    assert db.exists()


def test_export_of_a_missing_database_says_it_as_every_command_does(tmp_path: Path) -> None:
    """A new user's report: ``export`` on a missing database exited 2 with
    "no database at …" and no hint, where ``runs`` exits 1 with the command
    that creates it. Now alike, the hint run as printed; then a ``--table``
    the database does not have is bad input (exit 2), naming its tables."""
    db = tmp_path / "none.db"
    env = user_env()
    out = flowdesk(db, "--scope", "team", "export", "--out", str(tmp_path / "exp"), env=env)
    assert out.returncode == 1, out.stderr
    found = re.search(r"run `([^`]+)` first", out.stderr)
    assert found, out.stderr
    assert not (tmp_path / "exp").exists()
    applied = as_printed(found.group(1), env)
    assert applied.returncode == 0, applied.stderr
    again = flowdesk(db, "--scope", "team", "export", "--out", str(tmp_path / "exp"), env=env)
    assert again.returncode == 0, again.stderr
    bogus = flowdesk(db, "export", "--out", str(tmp_path / "exp2"), "--table", "bogus", env=env)
    assert bogus.returncode == 2, bogus.stderr
    assert "no table bogus in" in bogus.stderr and "runs" in bogus.stderr.split("its tables:")[1]
    assert not (tmp_path / "exp2").exists()
