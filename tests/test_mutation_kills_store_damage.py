"""What a read says of a run whose checkpoint rows were deleted or changed
outside Flowdesk, on both stores, in process (the CLI tests of S106 see it
through subprocesses, where mutation testing's mutants do not reach): the
damaged revision, the newest revision below it to replay, that the row is
missing, and the run's status (an ended run is not offered a cancel).
Real SQLite files and a real PostgreSQL server; the rows are deleted or
changed with the database's own client library, as a person would."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop_app.errors import CheckpointCorruptError
from desktop_app.flow import Engine
from tests.damaged_flows import Order, completed_stepper, stepper


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, db_path: Path) -> Path | str:
    if request.param == "sqlite":
        return db_path
    url: str = request.getfixturevalue("pg_url")
    return url


def _open(db: Path | str) -> Any:
    if isinstance(db, str):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(db)
    from desktop_app.store.sqlite.store import open_store

    return open_store(db)


def _sql(db: Path | str, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """``sql`` (``?`` placeholders) with the database's own client library:
    the rows it returns (``[]`` for a change)."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute("SET search_path TO flowdesk")
            cur = pg.execute(sql.replace("?", "%s"), args)
            return cur.fetchall() if cur.description else []
    with sqlite3.connect(db) as conn:
        cur = conn.execute(sql, args)
        rows = cur.fetchall() if cur.description else []
    conn.close()
    return rows


@pytest.fixture
def runs(database: Path | str) -> Iterator[tuple[Engine, Path | str]]:
    store = _open(database)
    try:
        yield Engine(store, flows=[stepper]), database
    finally:
        store.close()


def _error(database: Path | str, read: Any) -> CheckpointCorruptError:
    """The error ``read`` raises on a store opened after the damage (the
    engine's own store caches the latest checkpoint it wrote)."""
    store = _open(database)
    try:
        with pytest.raises(CheckpointCorruptError) as err:
            read(store)
        return err.value
    finally:
        store.close()


def _said(err: CheckpointCorruptError) -> tuple[int, int | None, bool, str | None]:
    return err.revision, err.readable, err.missing, err.run_status


def test_a_deleted_latest_row_names_itself_and_the_revision_below(runs) -> None:
    engine, db = runs
    run = engine.run("stepper", Order(order="a")).run_id  # 0, 1 (count), 2 (the wait)
    _sql(db, "DELETE FROM checkpoints WHERE run_id=? AND revision=2", run)
    assert _said(_error(db, lambda s: s.head(run))) == (2, 1, True, "waiting")
    assert _said(_error(db, lambda s: s.latest(run))) == (2, 1, True, "waiting")


def test_a_deleted_snapshot_names_revision_0_from_the_rows_after_it_and_from_the_run(runs) -> None:
    engine, db = runs
    run = engine.run("stepper", Order(order="a")).run_id
    _sql(db, "DELETE FROM checkpoints WHERE run_id=? AND revision=0", run)
    assert _said(_error(db, lambda s: s.get_checkpoint(run, 1))) == (0, None, True, "waiting")
    assert _said(_error(db, lambda s: s.head(run))) == (0, None, True, "waiting")


def test_a_run_with_no_rows_left_names_its_own_latest_revision(runs) -> None:
    engine, db = runs
    run = engine.run("stepper", Order(order="a")).run_id
    _sql(db, "DELETE FROM checkpoints WHERE run_id=?", run)
    assert _said(_error(db, lambda s: s.head(run))) == (2, None, True, "waiting")


def test_a_changed_row_of_an_ended_run_names_its_status_and_offers_no_cancel(db_path: Path) -> None:
    """A row changed by hand (SQLite's checksum) read by revision, where the
    store looks the run's status up itself."""
    run, latest = completed_stepper(db_path)
    _sql(
        db_path, "UPDATE checkpoints SET error='changed' WHERE run_id=? AND revision=?", run, latest
    )
    err = _error(db_path, lambda s: s.get_checkpoint(run, latest))
    assert _said(err) == (latest, latest - 1, False, "completed")
    assert "cancel" not in str(err) and f"replay the run from revision {latest - 1}" in str(err)


def test_pruning_onto_a_changed_row_refuses_naming_the_runs_status_and_deletes_nothing(
    db_path: Path,
) -> None:
    """``prune`` folds the oldest revision it keeps into a snapshot; a row
    of that fold changed by hand is refused as damage (with the ended
    run's status, so no cancel is offered) and no row is deleted."""
    from desktop_app.store.sqlite.store import open_store

    run, latest = completed_stepper(db_path)
    _sql(db_path, "UPDATE checkpoints SET error='changed' WHERE run_id=? AND revision=1", run)
    err = _error(db_path, lambda s: s.prune(run, keep_last_n=latest - 1))  # keeps 2..latest
    assert _said(err) == (1, 0, False, "completed") and "cancel" not in str(err)
    store = open_store(db_path)
    try:
        assert [i.revision for i in store.history(run)] == list(range(latest + 1))
    finally:
        store.close()


def test_a_damaged_run_is_canceled_or_failed_without_reading_it_and_its_mail_withdrawn(
    database: Path | str,
) -> None:
    """``cancel`` of a run whose latest row was deleted by hand ends it
    without reading the damaged state: ``canceled`` with the damage named,
    its queued side effect withdrawn in the same transaction, its waits
    gone, no checkpoint appended onto the hole; ``fail_run`` of another
    ends it ``failed`` the same way. A second cancel is refused."""
    from desktop_app.errors import RunStateError
    from tests.damaged_flows import sender

    store = _open(database)
    try:
        engine = Engine(store, flows=[sender, stepper])
        mailing = engine.run("sender", Order(order="m")).run_id  # 0, 1 (queue), 2 (the wait)
        other = engine.run("stepper", Order(order="o")).run_id
    finally:
        store.close()
    for run in (mailing, other):
        _sql(database, "DELETE FROM checkpoints WHERE run_id=? AND revision=2", run)
    store = _open(database)
    try:
        engine = Engine(store, flows=[sender, stepper])
        done = engine.cancel_withdrawing(mailing)
        assert done.run.status == "canceled" and len(done.withdrawn) == 1
        assert "its checkpoint revision 2 is damaged" in (done.run.error or "")
        assert store.open_intents(mailing) == []
        assert [i.revision for i in store.history(mailing)] == [0, 1]  # nothing appended
        assert _sql(database, "SELECT count(*) FROM waits WHERE run_id=?", mailing) == [(0,)]
        with pytest.raises(RunStateError):
            engine.cancel(mailing)
        failed = engine.fail_run(other, "given up")
        assert failed.status == "failed" and failed.error == (
            "given up; its checkpoint revision 2 is damaged"
        )
        assert [i.revision for i in store.history(other)] == [0, 1]
    finally:
        store.close()


def test_a_deleted_middle_row_names_the_gap_and_the_revision_below_on_every_read(runs) -> None:
    """A row between two kept ones deleted by hand (pruning never does
    that): the latest read, the run's head and a read by revision past the
    gap name the gap, the revision below it to replay, and the run's
    status; the message names what a backup restores on this database."""
    engine, db = runs
    run = engine.run("stepper", Order(order="a")).run_id  # 0, 1 (count), 2 (the wait)
    _sql(db, "DELETE FROM checkpoints WHERE run_id=? AND revision=1", run)
    for read in (
        lambda s: s.latest(run),
        lambda s: s.head(run),
        lambda s: s.get_checkpoint(run, 2),
    ):
        err = _error(db, read)
        assert _said(err) == (1, 0, True, "waiting")
    backup = "the database" if isinstance(db, str) else "the file"
    assert f"Restore {backup} from a backup, or replay the run from revision 0" in str(err)


def test_a_deleted_latest_row_of_a_longer_run_names_the_revision_right_below_it(runs) -> None:
    engine, db = runs
    run = engine.run("stepper", Order(order="a")).run_id
    assert engine.resume_with(run, "yes").status == "completed"
    store = _open(db)
    try:
        latest = store.get_run(run).revision
    finally:
        store.close()
    assert latest >= 4  # rows 0 .. latest - 1 stay: the newest of them is named
    _sql(db, "DELETE FROM checkpoints WHERE run_id=? AND revision=?", run, latest)
    err = _error(db, lambda s: s.latest(run))
    assert _said(err) == (latest, latest - 1, True, "completed")


def test_ending_an_unreadable_run_wakes_a_listening_worker_and_forgets_its_cached_checkpoint(
    pg_url: str,
) -> None:
    """PostgreSQL: ``end_unreadable`` (and its withdrawing form) of a run
    whose latest row was deleted after this very store wrote it: a worker
    blocked on LISTEN hears it at once, and the store's next read of the
    run is of the database (the damage), not of the checkpoint it had
    cached. Ending it again, or a run that does not exist, is refused
    naming the run."""
    from desktop_app.errors import CheckpointNotFoundError, RunStateError

    store = _open(pg_url)
    try:
        engine = Engine(store, flows=[stepper])
        ended = []
        for how in ("plain", "withdrawing"):
            run = engine.run("stepper", Order(order=how)).run_id
            store.latest(run)  # cached: the store wrote it
            _sql(pg_url, "DELETE FROM checkpoints WHERE run_id=? AND revision=2", run)
            listener = store.listener()
            try:
                while listener.wait(0.3):
                    pass  # earlier writes'
                now = store.now()
                if how == "plain":
                    done = store.end_unreadable(run, "canceled", "damaged", now)
                else:
                    done, _ = store.end_unreadable_withdrawing(run, "canceled", "damaged", now, "x")
                assert done.status == "canceled"
                assert listener.wait(10.0), how
            finally:
                listener.close()
            with pytest.raises(CheckpointCorruptError):
                store.latest(run)  # not the cached revision 2
            ended.append(run)
        with pytest.raises(RunStateError) as again:
            store.end_unreadable(ended[0], "failed", "again", store.now())
        assert str(again.value) == f"run {ended[0]} is already canceled; nothing to do"
        with pytest.raises(CheckpointNotFoundError) as missing:
            store.end_unreadable("no-such-run", "failed", "x", store.now())
        assert str(missing.value) == f"no run no-such-run in scope {store.scope!r}"
    finally:
        store.close()


def test_ending_an_unreadable_run_withdraws_what_no_live_dispatcher_holds(database) -> None:
    """``end_unreadable_withdrawing`` withdraws as a cancel does, judged at
    the database's clock: past two claims' expiry, the pending intent, the
    one whose claimant is gone and the one whose claim expired are
    withdrawn with the reason given; the one whose claim expired but whose
    dispatcher still runs is left in flight; the run ends in the same
    transaction."""
    import time

    from tests.test_mutation_kills_pgstore_settle import four_intents

    s = _open(database)
    try:
        four_intents(s, 0.05)
        time.sleep(0.3)  # the two short claims expire
        ended, done = s.end_unreadable_withdrawing(
            "r1",
            "canceled",
            "damaged",
            s.now(),
            "canceled by the user",
            presumed_dead=lambda h: h == "h:gone",
            presumed_alive=lambda h: h == "h:alive",
        )
        assert (ended.status, ended.error) == ("canceled", "damaged")
        assert sorted(i.destination for i in done.withdrawn) == ["expired", "gone", "pending"]
        assert [i.destination for i in done.in_flight] == ["alive"]
        failed = {i.destination: i.last_error for i in s.intents(["failed"], limit=10)}
        assert failed == dict.fromkeys(("expired", "gone", "pending"), "canceled by the user")
        assert [i.destination for i in s.intents(["sending"], limit=10)] == ["alive"]
    finally:
        s.close()
