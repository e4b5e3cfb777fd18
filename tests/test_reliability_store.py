"""The store loses nothing: locks held while other processes read, two stores
in one process, agent-run leases, checksums, a deleted WAL, full disks."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.errors import FlowdeskError
from desktop_app.flow import Engine
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.flows_for_tests import Numbers, counting_flow

STDLIB_READER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])  # read-write, the default
n = db.execute("SELECT count(*) FROM runs").fetchone()[0]
db.execute(
    "INSERT INTO events(scope, type, payload, published_at) VALUES ('default', ?, '1', 1.0)",
    (sys.argv[2],),
)
db.commit()
db.close()
print(n)
"""

SQLITE_UTILS_READER = """
import sys, sqlite_utils
db = sqlite_utils.Database(sys.argv[1])
n = db.execute("SELECT count(*) FROM runs").fetchone()[0]
db["events"].insert({"scope": "default", "type": sys.argv[2], "payload": "1", "published_at": 1.0})
db.close()
print(n)
"""


def _other_process(script: str, db: Path, tag: str) -> int:
    out = cli_forkserver.run_argv(
        [sys.executable, "-c", script, str(db), tag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.scenario("S53")
@pytest.mark.parametrize("reader", ["stdlib", "sqlite-utils"])
def test_other_process_reader_never_removes_the_wal_of_a_live_writer(db_path, reader):
    script = STDLIB_READER if reader == "stdlib" else SQLITE_UTILS_READER
    wal = Path(f"{db_path}-wal")
    # the app's pattern: the engine's store and the UI's reader on one file
    engine_store = open_store(db_path)
    ui_store = open_store(db_path)
    engine = Engine(engine_store, flows=[counting_flow(Counter())])
    try:
        engine.run("counting", Numbers())
        assert wal.exists()
        for i in range(3):
            seen = _other_process(script, db_path, f"peer-{i}")
            assert seen == i + 1, "the other process misses this process's commits"
            assert wal.exists(), "another process deleted the WAL of a live writer"
            # this process sees the other process's commit, on both connections
            for store in (engine_store, ui_store):
                assert store.first_event(f"peer-{i}", 0.0) is not None
            engine.run("counting", Numbers())
        assert len(ui_store.list_runs()) == 4
        check = engine_store.query(lambda c: c.execute("PRAGMA integrity_check").fetchall())
        assert check == [("ok",)]
    finally:
        ui_store.close()
        engine_store.close()
    after = cli_forkserver.run_argv(
        [
            sys.executable,
            "-c",
            "import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); "
            "print(db.execute('PRAGMA integrity_check').fetchone()[0], "
            "db.execute('SELECT count(*) FROM runs').fetchone()[0], "
            "db.execute(\"SELECT count(*) FROM events WHERE type LIKE 'peer-%'\").fetchone()[0])",
            str(db_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert after.stdout.split() == ["ok", "4", "3"], after.stderr


@pytest.mark.scenario("S53")
def test_two_stores_two_threads_never_wait_out_the_busy_timeout(db_path):
    # A short busy timeout: a store that waits for the other one until it gives
    # up fails its run with "stayed locked", which this test forbids.
    stores = [open_store(db_path, busy_timeout_s=3.0) for _ in range(2)]
    failures: list[str] = []
    statuses: list[str] = []

    def work(store) -> None:
        engine = Engine(store, flows=[counting_flow(Counter(), n=5)], lease_ttl_s=0.3)
        for _ in range(20):
            try:
                statuses.append(engine.run("counting", Numbers()).status)
            except FlowdeskError as exc:
                failures.append(str(exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert statuses == ["completed"] * 40
        assert len(stores[0].list_runs(statuses=["completed"])) == 40
    finally:
        for s in stores:
            s.close()


@pytest.mark.scenario("S53")
def test_a_text_file_is_still_refused_before_the_first_connection(tmp_path):
    from desktop_app.errors import DatabaseOpenError
    from desktop_app.store.connection import open_connection

    path = tmp_path / "notes.txt"
    path.write_bytes(b"hi")  # shorter than a page: SQLite would take it for an empty database
    with pytest.raises(DatabaseOpenError):
        open_connection(path)
    assert path.read_bytes() == b"hi"


AGENT_WORKER = Path(__file__).resolve().parent / "agent_lease_worker.py"


@pytest.mark.scenario("S64")
def test_two_processes_resuming_one_agent_run_execute_it_once(db_path, tmp_path):
    from desktop_app.agent.messages import Message
    from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore

    store = open_store(db_path)
    agents = SqliteAgentStore(store)
    agents.create(
        AgentRun("ar1", "helper", "running", "look up a", created_at=1.0, updated_at=1.0),
        [Message("user", "look up a").to_json()],
    )
    store.close()
    log = tmp_path / "tool.log"
    cmd = [sys.executable, str(AGENT_WORKER), str(db_path), str(log), "ar1"]
    first = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert first.stdout is not None and first.stdin is not None
    assert first.stdout.readline().strip() == "tool-started"  # it executes the run now
    second = subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    first.stdin.write("go\n")
    first.stdin.flush()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "status done done: a" in out
    assert second.returncode == 3, second.stdout + second.stderr
    assert "agent run ar1 is held by a live process" in second.stdout
    assert log.read_text().splitlines() == [f"{first.pid} a"]  # the tool ran once
    store = open_store(db_path)
    agents = SqliteAgentStore(store)
    roles = [m["role"] for m in agents.messages("ar1")]
    assert roles == ["user", "assistant", "tool", "assistant"]  # no duplicate
    run = agents.get("ar1")
    assert run.status == "done" and run.lease_owner is None
    store.close()


def _edit_closed_file(db: Path, sql_select: str, key: tuple, change) -> None:
    """Change one stored JSON value to another valid value with stdlib sqlite3
    (the engine closed the file: no apsw connection is open)."""
    import json
    import sqlite3

    con = sqlite3.connect(db)
    table, column, where = sql_select
    (text,) = con.execute(f"SELECT {column} FROM {table} WHERE {where}", key).fetchone()
    new = json.dumps(change(json.loads(text)))
    assert new != text
    con.execute(f"UPDATE {table} SET {column}=? WHERE {where}", (new, *key))
    con.commit()
    con.close()


@pytest.mark.scenario("S59")
def test_checkpoint_edited_to_another_valid_value_is_detected_other_runs_keep_working(db_path):
    from desktop_app.errors import CheckpointCorruptError
    from tests.flows_for_tests import Crash

    store = open_store(db_path)
    engine = Engine(store, flows=[counting_flow(Counter(), crash_in={"s3"})])
    with pytest.raises(Crash):
        engine.run("counting", Numbers(value=117))
    engine = Engine(store, flows=[counting_flow(Counter(), crash_in={"s3"})])
    with pytest.raises(Crash):
        engine.run("counting", Numbers(value=117))
    bad, good = (r.run_id for r in store.list_runs())
    assert store.latest(bad).state["value"] == 119 and store.get_run(bad).revision == 2
    store.close()

    def cursor_119_to_1119(delta):
        assert delta["set"]["value"] == 119
        delta["set"]["value"] = 1119
        return delta

    _edit_closed_file(
        db_path, ("checkpoints", "state", "run_id=? AND revision=?"), (bad, 2), cursor_119_to_1119
    )
    store = open_store(db_path)
    engine = Engine(store, flows=[counting_flow(Counter())])
    with pytest.raises(CheckpointCorruptError) as info:
        engine.resume(bad)
    assert info.value.run_id == bad and info.value.revision == 2
    assert bad in str(info.value) and "revision 2" in str(info.value)
    assert store.get_run(bad).status == "running"  # left as it was, nothing resumed
    done = engine.resume(good)
    assert done.status == "completed" and done.state.value == 120
    store.close()


@pytest.mark.scenario("S59")
def test_agent_message_edited_to_another_valid_value_is_detected(db_path):
    from desktop_app.agent import Agent, ScriptedModel
    from desktop_app.errors import CheckpointCorruptError
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    store = open_store(db_path)
    agents = SqliteAgentStore(store)
    bad = Agent("helper", ScriptedModel(["119 files"]), agents).ask("count").run_id
    good = Agent("helper", ScriptedModel(["3 files"]), agents).ask("count").run_id
    store.close()

    def answer_1119(body):
        body["content"] = "1119 files"
        return body

    _edit_closed_file(
        db_path, ("agent_messages", "body", "run_id=? AND seq=?"), (bad, 1), answer_1119
    )
    store = open_store(db_path)
    agents = SqliteAgentStore(store)
    with pytest.raises(CheckpointCorruptError) as info:
        agents.messages(bad)
    assert info.value.run_id == bad and info.value.revision == 1
    assert [m["content"] for m in agents.messages(good)] == ["count", "3 files"]
    store.close()


def _dead_owner() -> str:
    import socket

    gone = cli_forkserver.run_argv(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return f"{socket.gethostname()}:{int(gone.stdout)}:dead"


def test_loser_of_a_takeover_race_is_told_a_live_process_holds_the_run(db_path):
    from desktop_app.errors import RunLeasedError
    from desktop_app.flow import FlowBuilder
    from tests.flows_for_tests import Crash

    crash = {"go": True}

    def slow(state: Numbers) -> dict:
        if crash.pop("go", False):
            raise Crash("the first owner dies here")
        return {"value": state.value + 1}

    def build():
        return FlowBuilder("race", Numbers).step("slow", slow).compile()

    setup = open_store(db_path)
    with pytest.raises(Crash):
        Engine(setup, flows=[build()]).run("race", Numbers())
    (run,) = setup.list_runs()
    setup.write(
        lambda c: c.execute(
            "UPDATE runs SET lease_owner=?, lease_expires_at=1e12 WHERE run_id=?",
            (_dead_owner(), run.run_id),
        )
    )
    setup.close()
    stores = [open_store(db_path) for _ in range(2)]
    outcomes: list[object] = []
    # both engines find the owner dead and decide to take over before either
    # saves: each store's first append waits until both got there
    barrier = threading.Barrier(2, timeout=30)
    for store in stores:
        first = [True]
        # the engine saves through append, or append_one / append_batch under group commit
        for method in ("append", "append_batch", "append_one"):
            real = getattr(store, method)

            def saving(*args, _real=real, _first=first, **kwargs):
                if _first.pop() if _first else False:
                    barrier.wait()
                return _real(*args, **kwargs)

            setattr(store, method, saving)

    def resume(store) -> None:
        try:
            outcomes.append(Engine(store, flows=[build()]).resume(run.run_id).status)
        except Exception as exc:  # the test inspects what each engine raised
            outcomes.append(exc)

    threads = [threading.Thread(target=resume, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert "completed" in outcomes and len(outcomes) == 2
        (loser,) = [o for o in outcomes if o != "completed"]
        assert isinstance(loser, RunLeasedError), repr(loser)
        # the truth at the moment the loser looked: the winner still held the
        # run, or had already ended it (a one-step flow: it often has)
        said = str(loser)
        assert "held by a live process" in said or (
            "is completed: another process ended it a moment ago. Nothing was run here." in said
        ), said
        assert stores[0].latest(run.run_id).state["value"] == 1
    finally:
        for s in stores:
            s.close()


def test_resume_all_exits_0_when_a_live_peer_holds_a_run(db_path, tmp_path):
    import os
    import socket

    from tests.digest_corpus import make_corpus

    folder = tmp_path / "docs"
    make_corpus(folder, 3)

    def flowdesk(*args: str) -> subprocess.CompletedProcess[str]:
        return cli_forkserver.run(["--db", str(db_path), *args], timeout=120)

    out = flowdesk("run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    store = open_store(db_path)
    (run,) = store.list_runs()
    # this test process is the live peer executing it
    store.write(
        lambda c: c.execute(
            "UPDATE runs SET status='running', lease_owner=?, lease_expires_at=1e12 WHERE run_id=?",
            (f"{socket.gethostname()}:{os.getpid()}:peer", run.run_id),
        )
    )
    store.close()
    resumed = flowdesk("resume", "--all")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"run {run.run_id} is held by a live process" in resumed.stdout


OPEN_AND_COUNT = """
import sys
from desktop_app.errors import WalMissingError
from desktop_app.store.sqlite.store import open_store
try:
    print(len(open_store(sys.argv[1]).list_runs()))
except WalMissingError as exc:
    print("WalMissingError", exc)
"""


def test_a_deleted_wal_is_named_with_what_to_do_and_a_clean_exit_recovers_it(db_path):
    import os

    store = open_store(db_path)
    engine = Engine(store, flows=[counting_flow(Counter())])
    engine.run("counting", Numbers())
    os.unlink(f"{db_path}-wal")  # a user "cleaning up" while the app runs
    engine.run("counting", Numbers())  # this process still writes into the deleted log

    def other() -> str:
        out = cli_forkserver.run_argv(
            [sys.executable, "-c", OPEN_AND_COUNT, str(db_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    seen = other()
    assert seen.startswith("WalMissingError"), seen
    assert f"{db_path}-wal" in seen and "deleted" in seen and "Quit every Flowdesk" in seen
    assert "disk I/O error" in seen  # names what SQLite said, not only that
    store.close()  # a normal exit writes the deleted log's commits back
    assert other() == "2"
