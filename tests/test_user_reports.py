"""Regressions for what a new user hit when trying to break Flowdesk."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests import cli_forkserver
from tests.digest_corpus import make_corpus

REPO = Path(__file__).resolve().parents[1]


def flowdesk(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run(list(args), env=env, cwd=REPO, timeout=120)


def test_first_launch_creates_the_default_data_folder(tmp_path):
    from desktop_app.bootstrap import apply_schema
    from desktop_app.config import default_db_path, load_settings

    settings = load_settings()
    assert not default_db_path().parent.exists()
    report = apply_schema(settings)
    assert report.path == default_db_path() and report.path.exists()
    assert stat.S_IMODE(os.stat(report.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(report.path.parent).st_mode) == 0o700


def test_non_utf8_file_name_is_listed_as_skipped_not_a_stuck_run(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "ok.txt").write_text("Fine text here. More words follow.\n")
    os.close(os.open(os.fsencode(folder) + b"/bad\xffname.txt", os.O_CREAT | os.O_WRONLY))
    db = tmp_path / "f.db"
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    out = flowdesk(
        "--db", str(db), "run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o")
    )
    assert out.returncode == 0, out.stderr
    report = (tmp_path / "o" / "digest.md").read_text()
    assert "bad\\xffname.txt (file name is not valid UTF-8)" in report


def test_unstorable_state_fails_the_run_naming_the_field_not_a_traceback(sqlite_store):
    from pydantic import BaseModel

    from desktop_app.flow import Engine, FlowBuilder

    class T(BaseModel):
        name: str = ""

    flow = FlowBuilder("t", T).step("a", lambda s: {"name": "bad\udcffname"}).compile()
    res = Engine(sqlite_store, flows=[flow]).run("t", T())
    assert res.status == "failed"
    assert "StateNotStorableError" in res.error and "state field 'name'" in res.error
    assert sqlite_store.get_run(res.run_id).lease_owner is None


def test_cancel_a_busy_run_from_another_process(tmp_path):
    folder = tmp_path / "big"
    make_corpus(folder, 3000)
    db = tmp_path / "f.db"
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    proc = cli_forkserver.popen(
        [
            sys.executable,
            "-m",
            "desktop_app.cli",
            "--db",
            str(db),
            "run",
            "digest",
            "--folder",
            str(folder),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    run_id = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = [
            json.loads(x)
            for x in flowdesk("--db", str(db), "runs", "--json").stdout.split("\n")
            if x
        ]
        if rows and (rows[0]["progress"] or [0])[0] > 50:
            run_id = rows[0]["run_id"]
            break
        time.sleep(0.05)
    assert run_id is not None
    cancel = flowdesk("--db", str(db), "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    assert "canceled" in cancel.stdout
    out, _err = proc.communicate(timeout=60)
    assert f"run {run_id} canceled" in out
    rows = [
        json.loads(x) for x in flowdesk("--db", str(db), "runs", "--json").stdout.split("\n") if x
    ]
    assert rows[0]["status"] == "canceled" and rows[0]["progress"][0] < 3000


def test_broken_pipe_and_symlink_loop_and_bad_out(tmp_path):
    db = tmp_path / "f.db"
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    pipe = subprocess.run(
        f"{sys.executable} -m desktop_app.cli --db {db} db status | head -c 1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert "Traceback" not in pipe.stderr
    (tmp_path / "la").symlink_to(tmp_path / "lb")
    (tmp_path / "lb").symlink_to(tmp_path / "la")
    (tmp_path / "src").mkdir()
    loop = flowdesk(
        "--db",
        str(db),
        "run",
        "digest",
        "--folder",
        str(tmp_path / "src"),
        "--out",
        str(tmp_path / "la" / "x"),
    )
    assert loop.returncode == 2 and "Traceback" not in loop.stderr
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / "digest.md").mkdir()
    bad = flowdesk(
        "--db",
        str(db),
        "run",
        "digest",
        "--folder",
        str(tmp_path / "src"),
        "--out",
        str(tmp_path / "out2"),
    )
    assert bad.returncode == 2 and "is a folder" in bad.stderr


def test_existing_empty_file_becomes_private(tmp_path):
    db = tmp_path / "empty.db"
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    assert flowdesk("--db", str(db), "db", "apply").returncode == 0
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
