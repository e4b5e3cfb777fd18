"""A run whose checkpoint row was deleted outside Flowdesk (with the sqlite3
shell), on a real SQLite file. A new user's report: a deleted middle row
went unnoticed (the fold skipped its step's changes: `show` said a finished
step was in progress and the run would have gone on from that state), and
a deleted latest row made `waiting` and `cancel` fail with "no checkpoint
at revision N (pruned or never saved)", listing nothing and offering no
command. Both are damage now, as an edited row is: named with the newest
intact revision below it, `waiting` goes on with the others, and the
printed replay and cancel work as printed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from desktop_app.errors import CheckpointCorruptError
from tests.cli_support import as_printed, flowdesk
from tests.damaged_flows import STEPPER_ENV
from tests.test_damaged_checkpoint import _hints

ENV = {"FLOWDESK_FLOWS": STEPPER_ENV}


def _start(db: Path | str, flow: str, order: str) -> str:
    out = flowdesk(db, "start", flow, "--input", json.dumps({"order": order}), env=ENV)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[0]


def _sql(db: Path | str, sql: str, *args: object) -> list[tuple]:
    """``sql`` (``?`` placeholders) run as a person would by hand, with the
    database's own client library: its rows, or ``[(rowcount,)]``."""
    if isinstance(db, str):  # PostgreSQL
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute("SET search_path TO flowdesk")  # Flowdesk's schema
            cur = pg.execute(sql.replace("?", "%s"), args)
            return cur.fetchall() if cur.description else [(cur.rowcount,)]
    with sqlite3.connect(db) as conn:
        cur = conn.execute(sql, args)
        found = cur.fetchall() if cur.description else [(cur.rowcount,)]
    conn.close()
    return found


def _delete(db: Path | str, run_id: str, revision: int) -> None:
    sql = "DELETE FROM checkpoints WHERE run_id=? AND revision=?"
    assert _sql(db, sql, run_id, revision) == [(1,)]


def _open(db: Path | str):
    if isinstance(db, str):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(db)
    from desktop_app.store.sqlite import open_store

    return open_store(db)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "d.db"
    assert flowdesk(db, "db", "apply", env=ENV).returncode == 0
    return db


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, db: Path) -> Path | str:
    """The SQLite file, or a PostgreSQL database with the schema applied
    (the same checks: a row deleted by hand is damage on both)."""
    if request.param == "sqlite":
        return db
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.mark.scenario("S106")
def test_a_deleted_latest_row_is_named_waiting_goes_on_and_the_hints_work(
    database: Path | str,
) -> None:
    db = database
    bad, good = _start(db, "asker", "A"), _start(db, "asker", "B")
    _delete(db, bad, 1)  # its latest: the wait

    shown = flowdesk(db, "show", bad, env=ENV)
    assert shown.returncode == 1
    assert (
        f"checkpoint of run {bad} revision 1 is missing: it was deleted outside Flowdesk"
    ) in shown.stderr, shown.stderr
    hints = _hints(shown.stderr)
    assert hints == {
        "replay": f"flowdesk --db {db} replay {bad}:0",
        "cancel": f"flowdesk --db {db} cancel {bad}",
    }

    waiting = flowdesk(db, "waiting", env=ENV)
    assert waiting.returncode == 0, waiting.stderr
    assert f"run {bad}  flow asker\n  unreadable: checkpoint of run {bad}" in waiting.stdout
    assert f'run {good}  flow asker\n  {good}:approve:0  input: "OK?"' in waiting.stdout

    replayed = as_printed(hints["replay"], env=ENV)
    assert replayed.returncode == 0, replayed.stderr
    assert f"run {replayed.stdout.splitlines()[0]} waiting" in replayed.stdout
    canceled = as_printed(hints["cancel"], env=ENV)
    assert canceled.returncode == 0, canceled.stderr
    assert f"run {bad} canceled" in canceled.stdout
    assert f"run {bad}" not in flowdesk(db, "waiting", env=ENV).stdout
    answered = flowdesk(db, "answer", good, "yes", env=ENV)
    assert answered.returncode == 0 and f"run {good} completed" in answered.stdout


@pytest.mark.scenario("S106")
def test_a_deleted_middle_row_is_named_and_nothing_goes_on_from_the_state_it_leaves(
    database: Path | str,
) -> None:
    db = database
    bad = _start(db, "stepper", "A")
    _delete(db, bad, 1)  # the step `count`'s: revision 2 (the wait) builds on it

    shown = flowdesk(db, "show", bad, env=ENV)
    assert shown.returncode == 1, shown.stdout
    assert f"checkpoint of run {bad} revision 1 is missing" in shown.stderr, shown.stderr
    assert "in_progress" not in shown.stdout
    assert _hints(shown.stderr)["replay"] == f"flowdesk --db {db} replay {bad}:0"
    refused = flowdesk(db, "answer", bad, "yes", env=ENV)
    assert refused.returncode != 0 and "revision 1 is missing" in refused.stderr

    from desktop_app.flow import Engine
    from tests.damaged_flows import stepper

    store = _open(db)
    try:
        with pytest.raises(CheckpointCorruptError) as err:
            Engine(store, flows=[stepper]).get(bad)
        assert (err.value.revision, err.value.readable, err.value.missing) == (1, 0, True)
        assert err.value.run_status == "waiting"
    finally:
        store.close()
    revisions = _sql(db, "SELECT revision FROM checkpoints WHERE run_id=? ORDER BY revision", bad)
    assert revisions == [(0,), (2,)]  # nothing appended onto the hole


@pytest.mark.scenario("S106")
def test_a_deleted_first_row_names_revision_0_and_a_run_with_no_rows_left_is_damage(
    database: Path | str,
) -> None:
    """The second tryout's report: deleting revision 0 (the snapshot every
    later row builds on) was named as the latest revision missing, and
    `replay` said revision 1 was "pruned or never saved" though `show`
    listed it; deleting every row made `replay` end in a traceback."""
    db = database
    first = _start(db, "stepper", "A")
    _delete(db, first, 0)
    shown = flowdesk(db, "show", first, env=ENV)
    assert shown.returncode == 1
    assert f"checkpoint of run {first} revision 0 is missing" in shown.stderr, shown.stderr
    assert _hints(shown.stderr) == {"cancel": f"flowdesk --db {db} cancel {first}"}
    replayed = flowdesk(db, "replay", f"{first}:1", env=ENV)
    assert replayed.returncode == 1
    assert "revision 0 is missing" in replayed.stderr and "pruned" not in replayed.stderr

    gone = _start(db, "stepper", "B")
    assert _sql(db, "DELETE FROM checkpoints WHERE run_id=?", gone) == [(3,)]
    replayed = flowdesk(db, "replay", gone, env=ENV)
    assert replayed.returncode == 1 and "Traceback" not in replayed.stderr, replayed.stderr
    assert f"checkpoint of run {gone} revision 2 is missing" in replayed.stderr
    canceled = as_printed(_hints(replayed.stderr)["cancel"], env=ENV)
    assert canceled.returncode == 0 and f"run {gone} canceled" in canceled.stdout


def test_a_child_runs_replay_hint_works_as_printed(db: Path) -> None:
    """The second tryout's report: a child run's id has colons of its own
    (``PARENT:spawn``), and `replay PARENT:spawn:0` was refused ("the
    revision after ':' must be a number"). A checkpoint id's revision is
    its last part; the id alone names the run."""
    from pydantic import BaseModel

    from desktop_app.flow import Engine, FlowBuilder
    from desktop_app.store.sqlite import open_store
    from tests.damaged_flows import KID_ENV, kid

    class P(BaseModel):
        n: int = 0

    engines: list[Engine] = []

    def spawn(s: P, ctx: object) -> dict[str, int]:
        engines[0].run_child(ctx, "kid", {})  # type: ignore[arg-type]
        return {"n": 1}

    parent = FlowBuilder("parent", P).step("spawn", spawn).compile()
    store = open_store(db)
    try:
        engines.append(Engine(store, flows=[kid, parent]))
        child = f"{engines[0].run('parent', P()).run_id}:spawn"
        assert engines[0].status(child).status == "completed"
    finally:
        store.close()
    env = {"FLOWDESK_FLOWS": KID_ENV}
    for given in (f"{child}:0", child):
        replayed = flowdesk(db, "replay", given, env=env)
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout.splitlines()[1].endswith("completed"), replayed.stdout


def test_a_damaged_run_waiting_for_a_signal_does_not_stop_it_reaching_another(db: Path) -> None:
    """The second tryout's report: with one run waiting for signal `paid
    o-1` damaged (its latest row deleted), `flowdesk signal paid o-1` failed
    with the damage and stored nothing, so the healthy run waiting for the
    same signal (even the printed replay of the damaged one) never got it.
    The signal reaches the healthy run; the damaged one is named, with the
    `show` that says what works on it, run as printed."""
    from tests.signal_msg_flows import FLOWS_ENV

    env = {"FLOWDESK_FLOWS": FLOWS_ENV}
    runs = []
    for _ in range(2):
        out = flowdesk(db, "start", "keyed", "--input", '{"order": "o-1"}', env=env)
        assert out.returncode == 0, out.stderr
        runs.append(out.stdout.splitlines()[0])
    bad, good = runs
    _delete(db, bad, 1)
    sent = flowdesk(db, "signal", "paid", "o-1", "--payload", '{"a": 1}', env=env)
    assert sent.returncode == 0, sent.stderr
    assert f"delivered to run {good} (now completed)" in sent.stdout, sent.stdout
    said = f"run {bad} waits for it too, but its checkpoint is damaged, so it cannot take it: `"
    assert said in sent.stderr, sent.stderr
    shown = as_printed(sent.stderr.split(said, 1)[1].split("`", 1)[0], env=env)
    assert shown.returncode == 1 and "revision 1 is missing" in shown.stderr
    assert "still wait" not in sent.stdout  # it is not one a second signal would reach
