"""``flowdesk`` on PostgreSQL when the connection drops during a step's
COMMIT (S70), through a proxy that cuts it there and then refuses new
connections: the CLI reconnects and asks the server itself whether the
transaction landed (the outcome outlives the session), and goes on; if the
server stays unreachable it says the outcome is unknown and prints the
``resume`` command with the user's ``--db`` (password masked), which works
as printed once the server is back. Real processes, a real server."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.store.postgres.sql import redact
from tests.cli_support import REPO
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import spawn_flowdesk, with_address

pytestmark = pytest.mark.postgres

ENV = {"FLOWDESK_FLOWS": '["desktop_app.examples.approval:approval"]'}
#: the COMMIT of the step that stores the approval question
WAIT_COMMIT = b"INSERT INTO waits"
START = ["start", "approval", "--input", '{"order": "o-1"}']


@pytest.fixture
def proxy(pg_url: str) -> Iterator[CommitDropProxy]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    yield proxy
    proxy.close()


def spawn(*args: str, resolve_timeout_s: float | None = None) -> subprocess.Popen[str]:
    return spawn_flowdesk(*args, env=ENV, resolve_timeout_s=resolve_timeout_s)


def until_fired(proxy: CommitDropProxy, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not proxy.fired:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the step's COMMIT never came"
        time.sleep(0.02)


def history(pg_url: str, run_id: str) -> tuple[list[int], int]:
    """The run's checkpoint revisions and how many waits it has, read directly."""
    with psycopg.connect(pg_url, options="-c search_path=flowdesk") as conn:
        revs = [
            r[0]
            for r in conn.execute(
                "SELECT revision FROM checkpoints WHERE run_id=%s ORDER BY revision", (run_id,)
            )
        ]
        (waits,) = conn.execute("SELECT count(*) FROM waits WHERE run_id=%s", (run_id,)).fetchone()
    return revs, waits


@pytest.mark.scenario("S70")
def test_a_dropped_commit_is_asked_about_on_reconnect_and_the_cli_goes_on(pg_url, proxy):
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port)
    proxy.arm("after_commit_unreachable", after=WAIT_COMMIT)
    child = spawn("--db", url, *START)
    until_fired(proxy, child)
    time.sleep(1.0)  # the server is out of reach for a second
    proxy.admit()
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "pg_xact_status" not in err
    run_id = out.splitlines()[0]
    assert f"run {run_id} waiting" in out
    revs, waits = history(pg_url, run_id)
    assert waits == 1 and revs == sorted(set(revs))  # the question stored once


@pytest.mark.scenario("S70")
def test_an_outcome_the_server_cannot_be_asked_is_unknown_with_a_resume_that_works(pg_url, proxy):
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port, password="s3cret-pw")
    proxy.arm("after_commit_unreachable", after=WAIT_COMMIT)
    child = spawn("--db", url, *START, resolve_timeout_s=1.5)
    until_fired(proxy, child)
    out, err = child.communicate(timeout=60)  # never admitted while it asks
    assert child.returncode == 1, err
    assert "Traceback" not in err and "pg_xact_status" not in err and "s3cret-pw" not in err
    run_id = out.splitlines()[0]
    found = re.search(
        r"whether transaction (\d+) landed is unknown: the server could not be "
        r"reached to ask for ([0-9.]+) s",
        err,
    )
    assert found, err
    assert float(found[2]) >= 1.5, err  # the time it did ask: at least its timeout
    # the wait was said once, while it went on, with the database as shown (no password)
    waiting = [line for line in err.splitlines() if "cannot be reached; waiting" in line]
    assert waiting == [
        f"flowdesk: the database server ({redact(url)}) cannot be reached; "
        "waiting for it to come back (Ctrl-C stops)"
    ], err
    (hint,) = [line for line in err.splitlines() if line.startswith("resume with: ")]
    # the password is left out of the printed URL (libpq reads it from
    # PGPASSWORD or ~/.pgpass), and a note at the end says so
    bare = with_address(pg_url, host="127.0.0.1", port=proxy.port)
    assert hint == f"resume with: flowdesk --db {shlex.quote(bare)} resume {run_id}"
    assert "leave out the database password" in err.splitlines()[-1]
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the truth, for the test
        (state,) = conn.execute("SELECT pg_xact_status(%s::xid8)", (found[1],)).fetchone()
    assert state == "committed"
    proxy.admit()  # the server is back: the printed command works as printed
    resumed = subprocess.run(
        hint.removeprefix("resume with: ").replace(
            "flowdesk", f"{sys.executable} -m desktop_app.cli", 1
        ),
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **ENV},
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} waiting" in resumed.stdout
    revs, waits = history(pg_url, run_id)
    assert waits == 1 and revs == sorted(set(revs))
