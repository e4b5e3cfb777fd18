"""``db copy`` never hands over a run a live process of this host executes.

The tryout: ``flowdesk run digest`` on a SQLite file, ``db copy`` to
PostgreSQL 5 s later, then ``flowdesk agent`` there: the copy held the run
``running`` with its lease dropped (shown ``interrupted``), the worker took
it at once, and both processes wrote the same digest.md. Now the copy
refuses while the lease's owner lives, naming it, and its hint (the same
copy again) works once the run has ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests import cli_forkserver
from tests.cli_support import REPO, as_printed, flowdesk, spawn

FLOWS = '["tests.test_db_copy_live_runs:gate"]'


class G(BaseModel):
    n: int = 0


def _log(step: str) -> None:
    with open(Path(os.environ["GATE_DIR"]) / "steps.log", "a", encoding="utf-8") as fh:
        fh.write(f"{step} {os.getpid()}\n")
        fh.flush()
        os.fsync(fh.fileno())


def _hold(state: G) -> dict:
    """Log, say it started, then wait for the test's ``release`` file."""
    folder = Path(os.environ["GATE_DIR"])
    _log("hold")
    time.sleep(float(os.environ.get("GATE_HOLD_S", "0.05")))  # the copy may come meanwhile
    (folder / f"started-{os.getpid()}").touch()
    while not (folder / "release").exists():
        time.sleep(0.02)
    return {"n": state.n + 1}


def _after(state: G) -> dict:
    _log("after")
    return {"n": state.n + 1}


def _build():
    from desktop_app.flow import FlowBuilder

    return FlowBuilder("gate", G).step("hold", _hold).step("after", _after).chain().compile()


gate = _build()


def _env(folder: Path) -> dict[str, str]:
    return {"FLOWDESK_FLOWS": FLOWS, "GATE_DIR": str(folder), "PYTHONPATH": str(REPO)}


def _wait_for(path_glob: Path, proc: subprocess.Popen[str]) -> None:
    """Until a file matching ``path_glob`` exists (``proc`` must not end first)."""
    while not list(path_glob.parent.glob(path_glob.name)):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)


def _steps(folder: Path) -> list[str]:
    log = folder / "steps.log"
    return [ln.split()[0] for ln in log.read_text().splitlines()] if log.exists() else []


def _pg_runs(url: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [
            (str(r), str(s))
            for r, s in conn.execute("SELECT run_id, status FROM flowdesk.runs ORDER BY run_id")
        ]


@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_db_copy_refuses_a_run_a_live_process_executes_and_its_hint_copies_once_it_ended(
    tmp_path: Path, pg_url: str
) -> None:
    folder = tmp_path / "gate"
    folder.mkdir()
    env = _env(folder)
    db = tmp_path / "live.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    # `start` on a file executes the run itself: the run's process, holding its lease
    live = spawn("--db", str(db), "start", "gate", "--input", "{}", env=env)
    assert live.stdout is not None
    rid = live.stdout.readline().strip()
    worker = None
    try:
        _wait_for(folder / "started-*", live)
        refused = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = refused.stderr
        assert f"run {rid} (flow gate, scope default): process {live.pid} on host" in said, said
        assert "Nothing was copied" in said and "Let them finish, or stop that process" in said
        assert refused.stdout == ""
        assert _pg_runs(pg_url) == []  # nothing there for a worker to take
        # the other ways round are refused too, and write nothing
        other = tmp_path / "copy.db"
        to_file = flowdesk(db, "db", "copy", "--from", str(db), "--to", str(other), env=env)
        assert to_file.returncode == 2 and "postgresql://" in to_file.stderr
        assert not other.exists()
        back = flowdesk(db, "db", "copy", "--from", pg_url, "--to", str(other), env=env)
        assert back.returncode == 2 and "postgresql://" in back.stderr
        assert not other.exists()
        # a worker on the target while the run still executes on the laptop: nothing to run
        worker = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
        assert worker.stderr is not None
        assert "worker" in worker.stderr.readline()
        assert _steps(folder) == ["hold"]
        (folder / "release").touch()
        out, err = live.communicate(timeout=120)
        assert live.returncode == 0, out + err
        assert "completed" in out, out
        # the hint, run as printed: the same copy, which now copies the ended run
        hint = said.split("then copy again: `", 1)[1].split("`", 1)[0]
        assert hint == f"flowdesk --db {db} db copy --from {db} --to {pg_url}"
        again = as_printed(hint, {**os.environ, **env})
        assert again.returncode == 0, again.stderr
        assert "copied 1 flow run from" in again.stdout
        assert _pg_runs(pg_url) == [(rid, "completed")]
    finally:
        for proc in (live, worker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=60)
    assert worker is not None and worker.returncode == 0
    assert _steps(folder) == ["hold", "after"]  # each step once: never on the worker


@pytest.mark.postgres
def test_db_copy_of_a_run_killed_mid_step_is_copied_for_the_worker(
    tmp_path: Path, pg_url: str
) -> None:
    """The refusal judges liveness: once the run's process is gone
    (``kill -9``), its lease is nobody's, the copy goes through, and the
    worker finishes the run."""
    folder = tmp_path / "gate"
    folder.mkdir()
    env = _env(folder)
    db = tmp_path / "live.db"
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    live = spawn("--db", str(db), "start", "gate", "--input", "{}", env=env)
    assert live.stdout is not None
    rid = live.stdout.readline().strip()
    _wait_for(folder / "started-*", live)
    live.kill()
    live.communicate(timeout=60)
    copied = flowdesk(db, "db", "copy", "--from", str(db), "--to", pg_url, env=env)
    assert copied.returncode == 0, copied.stderr
    (folder / "release").touch()
    worker = spawn("--db", pg_url, "agent", "--poll", "0.1", env=env)
    try:
        assert worker.stderr is not None
        for line in worker.stderr:
            if f"run {rid} completed" in line:
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert _pg_runs(pg_url) == [(rid, "completed")]
    assert _steps(folder) == ["hold", "hold", "after"]  # the killed attempt, then the worker's


def _pg_clear(url: str) -> None:
    """Every Flowdesk table of ``url`` emptied but its schema ledger."""
    import psycopg

    from desktop_app.store import migrations

    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname='flowdesk' AND tablename <> %s",
                (migrations.LEDGER,),
            )
        ]
        conn.execute("TRUNCATE " + ", ".join(f"flowdesk.{t}" for t in tables) + " CASCADE")


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.scenario("S69")
def test_db_copy_racing_a_runs_start_never_copies_it_runnable(tmp_path: Path, pg_url: str) -> None:
    """``db copy`` and a run's start released together, 20 rounds: the copy
    either refuses (the run held), or copies the file without the run
    (started after its snapshot) or with the run ended; never a runnable run
    whose process still executes it on the laptop. The run and the copy are
    each a process kept across rounds (tests/cli_racer.py), each round on a
    file of its own."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from tests.line_racer import CLI_RACER, LineRacer

    racers = {
        what: LineRacer(CLI_RACER, env={**os.environ, **_env(tmp_path)}) for what in ("run", "copy")
    }
    outcomes = {"refused": 0, "absent": 0, "ended": 0}
    try:
        for round_ in range(20):
            folder = tmp_path / f"r{round_}"
            folder.mkdir()
            (folder / "release").touch()  # the run goes straight through
            env = {**_env(folder), "GATE_HOLD_S": "0.3"}
            db = folder / "live.db"
            conn = open_connection(db)
            migrations.apply(conn)
            conn.close()
            _pg_clear(pg_url)
            go = str(folder / "go")
            # the run starts from 450 ms before the copy to 500 ms after it (the one
            # started later waits): it ends, holds its lease, or starts after the copy's read
            lead = round_ / 20 - 0.45
            run_argv = [str(db)]
            racers["run"].task(round_, go=go, do="run", args=run_argv, env=env, delay=max(lead, 0))
            copy_argv = ["--db", str(db), "db", "copy", "--from", str(db), "--to", pg_url]
            racers["copy"].task(
                round_, go=go, do="cli", args=copy_argv, env=env, delay=max(-lead, 0)
            )
            Path(go).touch()
            run, copy = racers["run"].told(round_), racers["copy"].told(round_)
            assert run["code"] == 0, run
            there = _pg_runs(pg_url)
            if copy["code"] == 1:
                assert "executing in a live process" in copy["err"], copy
                assert there == []
                outcomes["refused"] += 1
            else:
                assert copy["code"] == 0, copy
                assert all(status == "completed" for _, status in there), there
                outcomes["absent" if not there else "ended"] += 1
            assert _steps(folder) == ["hold", "after"]
        for racer in racers.values():
            racer.close()
    finally:
        for racer in racers.values():
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
    assert sum(outcomes.values()) == 20, outcomes
    print(outcomes)  # how the rounds went (-s shows it)


def test_held_runs_names_each_kind_a_live_owner_holds_and_no_dead_ones(
    db_path: Path, tmp_path: Path
) -> None:
    """What makes ``db copy`` refuse, kind by kind: a flow run's and an agent
    run's lease of a live owner (whatever its expiry), an unfinished
    LangGraph thread whose process lives (running, or waiting and loaded by
    its program to be resumed), an intent a live dispatcher sends; never the
    same held by a process that exited, nor a thread that waits unowned."""
    import apsw

    from desktop_app.flow import Engine
    from desktop_app.flow.owners import new_owner
    from desktop_app.store.postgres.copy import held_runs
    from desktop_app.store.sqlite.store import open_store
    from tests.test_tryout_fixes import add_agent_runs

    store = open_store(db_path)
    flow_ids = [Engine(store, flows=[gate]).start("gate", {}) for _ in range(3)]
    store.close()
    add_agent_runs(db_path, 2)
    gone = cli_forkserver.run_argv(
        [sys.executable, "-c", "from desktop_app.flow.owners import new_owner; print(new_owner())"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout.strip()  # fmt: skip
    me = new_owner()
    conn = apsw.Connection(str(db_path))
    agent_ids = [r[0] for r in conn.execute("SELECT run_id FROM agent_runs ORDER BY run_id")]
    now = time.time()
    conn.execute(
        "UPDATE runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?",
        (me, now - 3600, flow_ids[0]),  # expired by the clock, but its owner lives
    )
    conn.execute(
        "UPDATE runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?",
        (gone, now + 3600, flow_ids[1]),
    )
    conn.execute(
        "UPDATE agent_runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?",
        (me, now + 30, agent_ids[0]),
    )
    conn.execute(
        "UPDATE agent_runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?",
        (gone, now + 30, agent_ids[1]),
    )
    for thread, status, owner in (
        ("t-live", "running", me),
        ("t-gone", "running", gone),
        ("t-waits", "waiting", None),
        ("t-resumed", "waiting", me),
        ("t-resumed-gone", "waiting", gone),
    ):
        conn.execute(
            "INSERT INTO langgraph_threads (scope, thread_id, status, created_at, updated_at, "
            "owner) VALUES ('default', ?, ?, ?, ?, ?)",
            (thread, status, now, now, owner),
        )
    for intent, owner in (("i-live", me), ("i-gone", gone)):
        conn.execute(
            "INSERT INTO outbox (intent_id, run_id, step_id, destination, payload, status, "
            "created_at, claimed_by, claim_expires_at) VALUES (?, ?, 's', 'd', '{}', "
            "'sending', ?, ?, ?)",
            (intent, flow_ids[2], now, owner, now + 30),
        )
    conn.execute("BEGIN")
    try:
        held = held_runs(conn, now)
    finally:
        conn.execute("COMMIT")
        conn.close()
    pid, host = os.getpid(), me.split(":")[0]
    owner_text = f"process {pid} on host {host} (owner {me})"
    assert held == [
        f"run {flow_ids[0]} (flow gate, scope default): {owner_text}",
        f"run {agent_ids[0]} (agent helper, scope default): {owner_text}",
        f"LangGraph thread t-live (scope default): {owner_text}",
        f"LangGraph thread t-resumed (scope default): {owner_text}",
        f"run {flow_ids[2]} (flow gate, scope default): {owner_text} sending its side effects",
    ]
