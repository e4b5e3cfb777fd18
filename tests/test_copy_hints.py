"""Hints a new-user tryout found failing as printed, each now run as printed
(with the ``--db``/``--scope``/environment the user had).

* ``db copy`` of a file whose runs are in other scopes than the command's:
  its ``runs`` and ``agent`` hints named only the command's scope, so the
  ``runs`` printed ``no runs`` and the worker served ``default`` while the
  run of ``team`` stayed ``interrupted``. Now one command per scope.
* ``show`` of a run ``db copy`` moved offered ``answer``/``signal`` on the
  file, each refused there; now it offers only the ``show`` where it moved
  (no password in it), in text and JSON.
* An invalid ``--scope $'\\t'`` was echoed as ``'\\t'`` (Python's repr,
  which bash reads as backslash-t); now as bash's ``$'\\t'``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from desktop_app.errors import redact
from tests.cli_support import REPO, as_printed, flowdesk, spawn
from tests.test_db_copy_live_runs import _env, _pg_runs, _steps, _wait_for
from tests.test_db_copy_moved_runs import _env_all


def _interrupted(db: Path, folder: Path, env: dict[str, str], *scope: str) -> str:
    """A ``gate`` run whose ``start`` (with ``scope``: ``--scope S``) is
    killed -9 mid-step: its id."""
    live = spawn("--db", str(db), *scope, "start", "gate", "--input", "{}", env=env)
    assert live.stdout is not None
    run_id = live.stdout.readline().strip()
    _wait_for(folder / "started-*", live)
    live.kill()
    live.communicate(timeout=60)
    return run_id


@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_db_copy_prints_a_runs_and_a_worker_command_per_scope_and_each_works_as_printed(
    tmp_path: Path, pg_url: str
) -> None:
    folder = tmp_path / "gate"
    folder.mkdir()
    env = {**os.environ, **_env(folder)}
    db = tmp_path / "copy4.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    team = _interrupted(db, folder, env, "--scope", "team")
    (folder / "release").touch()  # from here on the gate's step goes through
    ops = flowdesk(db, "--scope", "ops", "start", "gate", "--input", "{}", env=env)
    assert ops.returncode == 0, ops.stderr  # a completed run of scope ops: copied, not moved
    assert flowdesk(db, "runs", env=env).stdout.strip() == "no runs"  # none in default

    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    looks = re.findall(r"`([^`]+)`", copied.stdout)
    assert looks == [f"flowdesk --db {db} --scope team runs"], copied.stdout
    assert f"marked 1 unfinished run moved in {db}: no process on it executes it again (" in (
        copied.stdout
    )
    listed = as_printed(looks[0], env)
    assert listed.returncode == 0, listed.stderr
    (row,) = listed.stdout.splitlines()[1:]
    assert row.split()[0] == team and " moved " in row, listed.stdout
    lines = copied.stdout.splitlines()
    assert lines[-3] == "next, on each worker machine, one per scope:", copied.stdout
    workers = [ln.strip() for ln in lines[-2:]]
    assert workers == [
        f"flowdesk --db {pg_url} --scope ops agent",
        f"flowdesk --db {pg_url} --scope team agent",
    ]
    # each worker, started as printed: the one of team completes the moved run
    started = [spawn(*shlex.split(w)[1:], "--poll", "0.1", env=env) for w in workers]
    try:
        for worker in started:  # on PostgreSQL each says it is a worker, and of what
            assert worker.stderr is not None
            line = worker.stderr.readline()
            assert line.startswith("flowdesk agent: worker "), line
        deadline = time.monotonic() + 120
        while dict(_pg_runs(pg_url)).get(team) != "completed":
            assert all(w.poll() is None for w in started)
            assert time.monotonic() < deadline, _pg_runs(pg_url)
            time.sleep(0.1)
    finally:
        for worker in started:
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=60)
    assert [w.returncode for w in started] == [0, 0]
    # ops: hold, after; team: hold (killed), then hold, after on the worker
    assert sorted(_steps(folder)) == ["after", "after", "hold", "hold", "hold"]


@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_show_of_a_moved_run_offers_only_the_show_where_it_moved_without_the_password(
    tmp_path: Path, pg_url: str
) -> None:
    assert "://postgres@" in pg_url, pg_url
    secret_url = pg_url.replace("://postgres@", "://postgres:s3cret@")  # trust: not checked
    where = redact(secret_url, mask=None)
    assert "s3cret" not in where
    folder = tmp_path / "gate"
    folder.mkdir()
    db = tmp_path / "copy4.db"
    env = {**os.environ, **_env_all(folder), "FLOWDESK_SCOPE": "team"}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    asked = flowdesk(db, "start", "asker", "--input", "{}", env=env)
    waits = flowdesk(db, "start", "waiter", "--input", "{}", env=env)
    assert asked.returncode == 0 and waits.returncode == 0, asked.stderr + waits.stderr
    ask_id, wait_id = asked.stdout.split()[0], waits.stdout.split()[0]
    # before the copy, show offers the answer and the signal on the file
    assert "answer with: " in flowdesk(db, "show", ask_id, env=env).stdout
    assert "send it with: " in flowdesk(db, "show", wait_id, env=env).stdout

    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", secret_url, env=env)
    assert copied.returncode == 0, copied.stderr
    assert "s3cret" not in copied.stdout + copied.stderr
    on_file = f"flowdesk --db {db}"
    for rid in (ask_id, wait_id):
        there = f"flowdesk --db {where} --scope team show {rid}"
        shown = flowdesk(db, "show", rid, env=env)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout + shown.stderr
        assert "s3cret" not in text and on_file not in text, text
        assert "answer with:" not in text and "send it with:" not in text, text
        assert "status moved" in shown.stdout
        assert (
            f"moved to {where} by flowdesk db copy: its workers there execute it, nothing on "
            f"this database does; see it there: {there}\n"
        ) in shown.stdout
        assert "    answered where the run moved (see above), not on this database" in shown.stdout
        seen = as_printed(there, env)
        assert seen.returncode == 0, seen.stderr
        assert f"run {rid} " in seen.stdout and "status waiting" in seen.stdout
        assert ("answer with: " in seen.stdout) == (rid == ask_id)  # offered there, not here

        as_json = flowdesk(db, "show", rid, "-o", "json", env=env)
        assert as_json.returncode == 0, as_json.stderr
        assert "s3cret" not in as_json.stdout and on_file not in as_json.stdout
        data = json.loads(as_json.stdout)
        assert data["moved"] == {"to": where, "command": there}
        assert data["waits"] and all(w["command"] is None for w in data["waits"])
        assert data["stuck"] is None
        assert as_printed(data["moved"]["command"], env).returncode == 0
    # waiting's hints too: each the show there, run as printed
    waiting = flowdesk(db, "waiting", env=env)
    assert waiting.returncode == 0 and on_file not in waiting.stdout, waiting.stdout
    hints = re.findall(r"see it there: (flowdesk [^)]+)\)", waiting.stdout)
    assert sorted(hints) == sorted(
        f"flowdesk --db {where} --scope team show {r}" for r in (ask_id, wait_id)
    )
    for hint in hints:
        assert as_printed(hint, env).returncode == 0
    # where it moved it is not moved: its JSON offers the answer there
    there_json = json.loads(flowdesk(pg_url, "show", ask_id, "-o", "json", env=env).stdout)
    assert there_json["moved"] is None
    assert [w["command"] for w in there_json["waits"]] == [
        f"flowdesk --db {pg_url} --scope team answer {ask_id} yes --wait-id ask:0"
    ]


@pytest.mark.parametrize("scope", ["\t", " \n "])
def test_an_invalid_scope_is_echoed_in_bash_quoting_that_pastes_back_as_the_same_bytes(
    tmp_path: Path, scope: str
) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    given = flowdesk(db, "--scope", scope, "runs")
    assert given.returncode == 2, given.stderr
    by_env = flowdesk(db, "runs", env={"FLOWDESK_SCOPE": scope})
    assert by_env.returncode == 2, by_env.stderr
    for out, before in ((given, "--scope "), (by_env, "FLOWDESK_SCOPE=")):
        said = out.stderr.split(before, 1)[1].split(" is not a scope", 1)[0]
        assert said.startswith("$'") and "\t" not in said and "\n" not in said, said
        # pasted into bash, the echo is the same bytes the user gave
        back = subprocess.run(
            ["bash", "-c", f"printf %s {said}"], capture_output=True, cwd=REPO, check=True
        )
        assert back.stdout == scope.encode(), (said, back.stdout)
