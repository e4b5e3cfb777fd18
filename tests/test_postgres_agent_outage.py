"""A PostgreSQL ``flowdesk agent`` worker rides out a server outage.

A worker is up; a tidy run executes in another process (``flowdesk
answer RUN yes``) when the server crashes (``pg_ctl -m immediate stop``) and
stays down for longer than every give-up the worker used to have (the
store's tries of a transaction: ``MAX_ATTEMPTS`` waits of
``postgres.connect_wait_s`` each; the pool's reconnect attempt, given up after
``postgres.reconnect_max_s``). The worker must not exit: it says the
database is unreachable, keeps retrying, says when it is back, then takes
over the interrupted run and finishes it, each step once, each file moved
once. The settings are set small here so the outage lasts seconds, not
minutes; the cluster is this test's own (it is stopped and started again).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from desktop_app.store import postgres
from tests import cli_forkserver
from tests.cli_support import stop_agent
from tests.pg_support import PrivateCluster, find_bindir, unavailable

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
FILES = 400
#: seconds the server stays down after the worker said it is unreachable:
#: several times the pool's reconnect attempts (postgres.reconnect_max_s below)
OUTAGE_S = 5.0


@pytest.fixture
def own_cluster() -> Iterator[PrivateCluster]:
    """A cluster of this test's own (it is crashed and restarted; the session's is shared)."""
    bindir = find_bindir()
    if bindir is None:
        unavailable("no /usr/lib/postgresql/*/bin/initdb to start a cluster to crash")
    assert bindir is not None
    # its commits survive the crash: the schema applied just before it was
    # once lost with synchronous_commit=off (a CI run's "missing schema")
    cluster = PrivateCluster(bindir, synchronous_commit="on")
    try:
        postgres.apply_postgres_schema(cluster.start())
        yield cluster
    finally:
        cluster.stop()


def watch(proc: Any, *marks: str) -> tuple[list[str], list[threading.Event], threading.Thread]:
    """Read ``proc``'s stderr (piped) in a thread: the lines so far, for
    each of ``marks`` an event set once a line holds it, and the thread
    (joined: every line read)."""
    said: list[str] = []
    seen = [threading.Event() for _ in marks]

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            for mark, event in zip(marks, seen, strict=True):
                if mark in line:
                    event.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return said, seen, reader


def _count(url: str, sql: str, *args: object) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.scenario("S103")
def test_agent_resumes_an_interrupted_run_after_a_server_outage(own_cluster, tmp_path):
    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    env = dict(
        os.environ,
        FLOWDESK_POSTGRES__RECONNECT_MAX_S="0.5",
        FLOWDESK_POSTGRES__CONNECT_WAIT_S="1",
    )
    folder = tmp_path / "Downloads"
    folder.mkdir()
    for i in range(FILES):
        (folder / f"f{i:04d}.txt").write_text(f"file {i}\n")

    def flowdesk(*args: str, **kwargs: object) -> subprocess.Popen[str]:
        return cli_forkserver.popen(
            [sys.executable, "-m", "desktop_app.cli", "--db", url, *args],
            cwd=REPO, env=env, text=True, **kwargs,  # type: ignore[call-overload]
        )  # fmt: skip

    started = flowdesk("run", "tidy", "--folder", str(folder), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)  # fmt: skip
    out, err = started.communicate(timeout=120)
    assert started.returncode == 0, err
    run_id = out.splitlines()[0]

    agent = flowdesk("agent", "--poll", "0.3", stderr=subprocess.PIPE)
    said, (up, away, back), reader = watch(
        agent,
        "flowdesk agent: worker ",
        "the database is unreachable",
        "the database is back after",
    )
    answer = None
    try:
        assert up.wait(120), "".join(said)
        answer = flowdesk("answer", run_id, "yes", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)  # fmt: skip
        steps = "SELECT count(*) FROM flowdesk.checkpoints WHERE run_id=%s"
        while _count(url, steps, run_id) < 20:  # the run is executing its moves
            assert answer.poll() is None, answer.communicate()[0]
            time.sleep(0.1)
        # held while the server goes down: on an idle machine it could make
        # the remaining moves in the moment the crash takes
        answer.send_signal(signal.SIGSTOP)
        try:
            assert answer.poll() is None, answer.communicate()[0]
            own_cluster.crash()
        finally:
            answer.send_signal(signal.SIGCONT)
        # down until the worker said so (at the first statement that met the
        # outage) and the answering process gave up (its tries of a transaction
        # ran out: the run is interrupted), then longer than the worker's pool's
        # reconnect attempts last: an order of events, not a timing assertion
        assert away.wait(120), "".join(said)
        answer.communicate(timeout=120)
        assert answer.returncode == 1  # it gave up during the outage
        time.sleep(OUTAGE_S)
        own_cluster.restart()
        # the run completed and the worker delivered every move it queued
        done = (
            "SELECT count(*) FROM flowdesk.runs WHERE run_id=%s AND status='completed' "
            "AND NOT EXISTS (SELECT 1 FROM flowdesk.outbox o WHERE o.run_id=runs.run_id "
            "AND o.status <> 'delivered')"
        )
        deadline = time.monotonic() + 300
        while not _count(url, done, run_id):
            assert agent.poll() is None, "".join(said)  # the worker is still there
            assert time.monotonic() < deadline, "".join(said)
            time.sleep(0.5)
        assert back.wait(30), "".join(said)
    finally:
        if answer is not None and answer.poll() is None:
            answer.kill()
        stop_agent(agent)
        reader.join(timeout=10)
    text = "".join(said)
    assert agent.returncode == 0, text
    assert "Traceback" not in text
    assert "the database is unreachable" in text
    assert text.index("the database is unreachable") < text.index("the database is back after")
    assert f"run {run_id} completed" in text
    # each step once: the loop's move steps (step id "apply") committed one
    # checkpoint each, progress [k, FILES] for k = 1..FILES (besides them the
    # loop's completion and the takeover's mark repeat a progress); one
    # outbox intent per file; every file moved exactly once, none left behind
    with psycopg.connect(url) as conn:
        progress = [
            row[0]
            for row in conn.execute(
                "SELECT progress FROM flowdesk.checkpoints WHERE run_id=%s AND step_id='apply' "
                "ORDER BY revision",
                (run_id,),
            )
        ]
        resumed = conn.execute(
            "SELECT count(*) FROM flowdesk.checkpoints WHERE run_id=%s AND meta LIKE "
            "'%%\"resumed\"%%'",
            (run_id,),
        ).fetchone()
    assert sorted(set(progress)) == sorted(f"[{k},{FILES}]" for k in range(1, FILES + 1))
    assert resumed is not None and resumed[0] > 0  # taken over by the worker
    assert len(progress) - len(set(progress)) <= 2
    assert _count(url, "SELECT count(*) FROM flowdesk.outbox WHERE run_id=%s", run_id) == FILES
    moved = "SELECT count(*) FROM flowdesk.tidy_moves WHERE run_id=%s AND status='moved'"
    assert _count(url, moved, run_id) == FILES
    assert not [p for p in folder.iterdir() if p.suffix == ".txt"]  # none left behind
    landed = [p for p in folder.rglob("*.txt") if p.parent != folder]
    assert sorted(p.name for p in landed) == [f"f{i:04d}.txt" for i in range(FILES)]


def test_an_agent_started_while_the_server_is_down_waits_for_it_and_serves(own_cluster):
    """``flowdesk agent`` started before its server (a machine's boot, an
    outage) said the server could not be reached and exited 1 (a tryout);
    a running worker waits through an outage, and so does one starting:
    it says so once, and serves once the server is back."""
    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    env = dict(
        os.environ,
        FLOWDESK_POSTGRES__RECONNECT_MAX_S="0.5",
        FLOWDESK_POSTGRES__CONNECT_WAIT_S="1",
    )
    own_cluster.crash()  # down before the worker starts
    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", url, "agent", "--poll", "0.3"],
        cwd=REPO, env=env, text=True, stderr=subprocess.PIPE,
    )  # fmt: skip
    said, (waiting, serving), _ = watch(
        agent, "until it can be reached (Ctrl-C stops)", "flowdesk agent: worker "
    )
    try:
        assert waiting.wait(60), "".join(said)
        time.sleep(2)  # a few more tries, said once
        assert agent.poll() is None, "".join(said)
        assert sum("trying again" in line for line in said) == 1, "".join(said)
        assert not any(".;" in line for line in said), "".join(said)  # one sentence
        own_cluster.restart()
        assert serving.wait(60), "".join(said)
    finally:
        stop_agent(agent)
    assert agent.returncode == 0, "".join(said)


def test_an_agent_given_a_database_that_does_not_exist_says_so_and_exits(pg_url):
    """What no wait heals (a wrong database name, a wrong password) is not
    waited for: the worker says what libpq said and exits 1."""
    url = pg_url.rsplit("/", 1)[0] + "/no_such_database"
    ran = cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", url, "agent"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    assert 'database "no_such_database" does not exist' in ran.stderr
    assert "trying again" not in ran.stderr


@pytest.mark.parametrize(
    ("said", "unreachable"),
    [
        ('connection to server at "h", port 1 failed: Connection refused', True),
        ('connection to server at "h", port 5432 failed: timeout expired', True),
        ('could not translate host name "db" to address: Name or service not known', True),
        ('connection to server at "h" failed: FATAL:  the database system is starting up', True),
        ('connection to server at "h" failed: FATAL:  sorry, too many clients already', True),
        ('connection to server at "h" failed: FATAL:  database "x" does not exist', False),
        ('connection to server at "h" failed: FATAL:  password authentication failed', False),
        ('connection to server at "h" failed: FATAL:  role "nobody" does not exist', False),
    ],
)
def test_what_a_failed_connection_said_decides_whether_waiting_heals_it(
    said: str, unreachable: bool
) -> None:
    from desktop_app.store.postgres.sql import is_unreachable_at_connect

    assert is_unreachable_at_connect(psycopg.OperationalError(said)) is unreachable
    assert not is_unreachable_at_connect(ValueError(said))


def test_an_agent_stopped_while_the_server_is_away_says_it_cannot_read_what_it_left(
    own_cluster, tmp_path
):
    """SIGTERM on a worker executing a step, the server crashed meanwhile:
    it cannot read which runs it leaves unfinished, and says so with the
    command that lists them, which lists the run once the server is back."""
    from tests import sigterm_flows
    from tests.cli_support import as_printed

    url = f"postgresql://postgres@127.0.0.1:{own_cluster.port}/postgres"
    env = dict(
        os.environ,
        FLOWDESK_POSTGRES__RECONNECT_MAX_S="0.5",
        FLOWDESK_POSTGRES__CONNECT_WAIT_S="1",
        FLOWDESK_FLOWS=sigterm_flows.FLOWS_ENV,
    )
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", url, "agent", "--poll", "0.2"],
        cwd=REPO, env=env, text=True, stderr=subprocess.PIPE,
    )  # fmt: skip
    said, (up,), reader = watch(agent, "flowdesk agent: worker ")
    try:
        assert up.wait(120), "".join(said)
        from desktop_app.flow import Engine
        from desktop_app.store.postgres.store import open_postgres_store

        store = open_postgres_store(url)
        try:
            run_id = Engine(store, flows=[sigterm_flows.effects]).start(
                "effects", {"sink": str(sink), "gate": str(gate)}
            )
        finally:
            store.close()
        deadline = time.monotonic() + 120
        while not (sink.exists() and "begin s1" in sink.read_text()):
            assert time.monotonic() < deadline, "".join(said)
            time.sleep(0.05)
        own_cluster.crash()
        agent.send_signal(signal.SIGTERM)
        gate.touch()
        agent.wait(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
        reader.join(timeout=10)
    text = "".join(said)
    assert "Traceback" not in text, text
    line = next((x for x in said if "could not read which runs it stopped" in x), None)
    assert line is not None, text
    printed = line.split("run `", 1)[1].split("`", 1)[0]
    assert printed == f"flowdesk --db {url} runs --status interrupted"
    own_cluster.restart()
    listed = as_printed(printed, env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
