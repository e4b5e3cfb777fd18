"""``db copy --from`` is parsed as ``--db`` is (a new user's report: the
argument went through ``pathlib.Path``, so ``--from sqlite:///…/my%20notes.db``
became ``sqlite:/…/my%20notes.db: no such database file`` and ``--from
postgresql://…`` said ``postgresql:/…: no such database file``, with any
password in it). Now a ``sqlite:///`` URL (percent-encoded) names its file,
its hints work as printed, and a PostgreSQL ``--from`` is refused saying
``--from`` must be a SQLite file, without the password. Real SQLite file,
real PostgreSQL, the real CLI."""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.cli_support import as_printed, flowdesk, spawn
from tests.test_copy_hints import _interrupted
from tests.test_db_copy_live_runs import _env, _pg_runs

pytestmark = pytest.mark.postgres


def test_db_copy_from_a_percent_encoded_sqlite_url_copies_the_file_and_its_hints_work(
    tmp_path: Path, pg_url: str
) -> None:
    folder = tmp_path / "gate"
    folder.mkdir()
    env = {**os.environ, **_env(folder)}
    db = tmp_path / "my notes.db"
    url = "sqlite://" + quote(str(db))
    assert "%20" in url
    assert flowdesk(url, "db", "apply", env=env).returncode == 0
    run_id = _interrupted(db, folder, env)
    (folder / "release").touch()  # from here on the gate's step goes through

    copied = flowdesk(db, "db", "copy", "--from", url, "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    assert "copied 1 flow run" in copied.stdout and f"from {db} to " in copied.stdout, copied.stdout
    (look,) = re.findall(r"`([^`]+)`", copied.stdout)
    assert look == f"flowdesk --db {url} runs", copied.stdout
    listed = as_printed(look, env)
    assert listed.returncode == 0, listed.stderr
    (row,) = listed.stdout.splitlines()[1:]
    assert row.split()[0] == run_id and " moved " in row, listed.stdout
    worker_line = copied.stdout.splitlines()[-1].strip()
    assert worker_line == f"flowdesk --db {pg_url} agent", copied.stdout
    worker = spawn(*shlex.split(worker_line)[1:], "--poll", "0.1", env=env)
    try:
        deadline = time.monotonic() + 120
        while dict(_pg_runs(pg_url)).get(run_id) != "completed":
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, _pg_runs(pg_url)
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert worker.returncode == 0


def test_db_copy_from_a_postgresql_url_says_from_must_be_a_sqlite_file_without_the_password(
    tmp_path: Path, pg_url: str
) -> None:
    assert "://postgres@" in pg_url, pg_url
    secret_url = pg_url.replace("://postgres@", "://postgres:s3cret@")
    refused = flowdesk(tmp_path / "x.db", "db", "copy", "--from", secret_url, "--to", pg_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    err = refused.stderr
    assert "--from must be a SQLite file (a path or a sqlite:/// URL)" in err, err
    assert "no such database file" not in err and "s3cret" not in err, err
    assert "postgresql:/postgres" not in err, err  # no garbled URL
    assert _pg_runs(pg_url) == []  # nothing was copied


def test_db_copy_to_a_sqlite_file_says_to_must_be_a_postgresql_url(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    refused = flowdesk(db, "db", "copy", "--from", str(db), "--to", str(tmp_path / "b.db"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--to must be a PostgreSQL URL" in refused.stderr, refused.stderr
    assert not (tmp_path / "b.db").exists()
