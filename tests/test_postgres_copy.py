"""``db copy``: a laptop's SQLite database moved to PostgreSQL resumes there."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests import cli_forkserver

pytestmark = pytest.mark.postgres
ROOT = str(Path(__file__).resolve().parents[1])


class S(BaseModel):
    n: int = 0
    got: dict | None = None


def _log(step: str) -> None:
    with open(os.environ["COPY_LOG"], "a", encoding="utf-8") as fh:
        fh.write(step + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def copy_flows():
    from desktop_app.flow import FlowBuilder

    def make(step: str):
        def body(state: S) -> dict:
            _log(step)
            if os.environ.get("COPY_KILL_AT") == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return {"n": state.n + 1}

        return body

    counter = FlowBuilder("counter", S)
    for step in "abcd":
        counter = counter.step(step, make(step))
    asker = (
        FlowBuilder("asker", S)
        .wait_signal("wait", "go", lambda s: "k1", into="got", timeout_s=7200)
        .step("after", make("after"))
        .chain()
        .compile()
    )
    return [counter.chain().compile(), asker]


def crash_main(path: str) -> None:
    """In a subprocess: run ``counter`` on the SQLite file until step c kills it."""
    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import open_store

    engine = Engine(open_store(path), flows=copy_flows())
    engine.run("counter", {})


@pytest.mark.scenario("S69")
def test_db_copy_moves_interrupted_and_waiting_runs_which_resume_on_postgres(
    db_path, pg_url, tmp_path, monkeypatch
):
    from desktop_app.errors import CopyTargetNotEmptyError
    from desktop_app.flow import Engine
    from desktop_app.store.postgres.copy import copy_sqlite_to_postgres
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.sqlite.store import open_store

    log = tmp_path / "steps.log"
    env = dict(os.environ, PYTHONPATH=ROOT, COPY_LOG=str(log), COPY_KILL_AT="c")
    proc = cli_forkserver.run_argv(
        [sys.executable, "-c",
         f"from tests.test_postgres_copy import crash_main; crash_main({str(db_path)!r})"],
        env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL
    assert log.read_text().split() == ["a", "b", "c"]

    monkeypatch.setenv("COPY_LOG", str(log))
    laptop = open_store(db_path)
    engine = Engine(laptop, flows=copy_flows(), owner="laptop:1:aaaaaa")
    asked = engine.run("asker", {})
    assert asked.status == "waiting"
    engine.signal("other", "x", {"unrelated": float("nan")})  # NaN survives as codec text
    (interrupted,) = laptop.list_runs(statuses=("running",))
    waits_before = laptop.latest(asked.run_id).waits
    assert waits_before[0].deadline_at is not None
    laptop.close()

    report = copy_sqlite_to_postgres(db_path, pg_url)
    assert report.runs == 2
    assert report.rows["signals"] == 1

    # codec text copied verbatim, every checkpoint of both runs
    with sqlite3.connect(db_path) as lite:
        before = lite.execute(
            "SELECT run_id, revision, state, steps, frontier FROM checkpoints "
            "ORDER BY run_id, revision"
        ).fetchall()
        payload = lite.execute("SELECT payload FROM signals").fetchone()[0]
    import psycopg

    with psycopg.connect(pg_url) as conn:
        conn.execute("SET search_path = flowdesk")
        after = conn.execute(
            "SELECT run_id, revision, state, steps, frontier FROM checkpoints "
            "ORDER BY run_id, revision"
        ).fetchall()
        assert conn.execute("SELECT payload FROM signals").fetchone()[0] == payload
    assert [tuple(r) for r in after] == [tuple(r) for r in before]

    store = open_postgres_store(pg_url)
    try:
        with pytest.raises(CopyTargetNotEmptyError):
            copy_sqlite_to_postgres(db_path, pg_url)
        waits_after = store.latest(asked.run_id).waits
        assert len(waits_after) == 1
        assert waits_after[0].deadline_at == pytest.approx(waits_before[0].deadline_at, abs=1e-6)
        assert store.get_run(interrupted.run_id).lease_owner is None

        server = Engine(store, flows=copy_flows(), owner="machine-x:1:bbbbbb")
        done = server.resume(interrupted.run_id)
        assert done.status == "completed" and done.state.n == 4
        server.signal("go", "k1", {"answer": 42})
        assert store.get_run(asked.run_id).status == "completed"
        assert store.latest(asked.run_id).state["got"] == {"answer": 42}
        # no completed step ran again: only c (in flight at the kill) ran twice
        assert log.read_text().split() == ["a", "b", "c", "c", "d", "after"]
        # a new signal gets an id after the copied ones
        assert store.send_signal("again", "k", None, 0.0) > 1
    finally:
        store.close()
