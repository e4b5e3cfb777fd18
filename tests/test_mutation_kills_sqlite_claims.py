"""Claims, a failed write, queries, pruning and opening on SQLite (kill
tests for mutants of ``_write_failed``, ``claim_runnable``,
``claim_intents``, ``query``, ``prune`` and ``open_store`` in
``store/sqlite/store.py``): what a takeover logs, the outbox claim of a
dispatcher that names its destinations or knows a claimant still runs, and
the error of a write that breaks a constraint of its own table.

Every store is a real SQLite file in ``tmp_path``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from desktop_app.errors import DatabaseOpenError, QueryRefusedError, StoreError
from desktop_app.store.protocol import Intent
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.test_mutation_kills_sqlite import T0, _cp, _run
from tests.test_mutation_kills_sqlite_store import _ids, _leases, _runs

# -- a write that breaks a constraint ------------------------------------------------


def test_a_write_that_breaks_a_unique_constraint_says_so_and_stores_none_of_it(db_path: Path):
    """``store.write(op)`` (its own transaction, no step): a second row with
    a taken unique name is refused as a ``StoreError`` that quotes SQLite's
    reason, and the transaction's other row is rolled back with it."""
    s = open_store(db_path)
    try:
        s.write(lambda tx: tx.execute("CREATE TABLE notes (name TEXT UNIQUE, n INTEGER)"))
        s.write(lambda tx: tx.execute("INSERT INTO notes VALUES ('taken', 1)"))

        def two_rows(tx: Any) -> None:
            tx.execute("INSERT INTO notes VALUES ('fresh', 2)")
            tx.execute("INSERT INTO notes VALUES ('taken', 3)")

        with pytest.raises(StoreError) as err:
            s.write(two_rows)
        assert str(err.value) == (
            f"database error ({db_path}): UNIQUE constraint failed: notes.name"
        )
        rows = s.query(lambda tx: tx.fetchall("SELECT name, n FROM notes ORDER BY n"))
        assert [tuple(r) for r in rows] == [("taken", 1)]
    finally:
        s.close()


# -- what a claim that takes a run over logs ---------------------------------------


def _takeovers(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "desktop_app.store.leases"]


def test_a_claim_logs_each_run_it_takes_over_with_its_holder_and_why(
    sqlite_store: SqliteCheckpointStore, caplog: pytest.LogCaptureFixture
):
    """One line per run another owner held: "lease expired" for a lease
    that ended at the claim's time or before (at it exactly, too), "owner
    gone" for a live lease whose owner is presumed dead; nothing for a free
    run or one the claimant already held."""
    s = sqlite_store
    _runs(
        s,
        ("free", "pending", T0, {}),
        ("mine", "running", T0 + 1, {"lease_owner": "me", "lease_expires_at": T0 + 1}),
        ("ended", "running", T0 + 2, {"lease_owner": "w-old", "lease_expires_at": T0 + 5}),
        ("just", "running", T0 + 3, {"lease_owner": "w-old", "lease_expires_at": T0 + 10}),
        ("dead", "running", T0 + 4, {"lease_owner": "w-dead", "lease_expires_at": T0 + 500}),
    )
    caplog.set_level(logging.INFO, logger="desktop_app.store.leases")
    got = s.claim_runnable("me", 30.0, presumed_dead=lambda o: o == "w-dead", now=T0 + 10)
    assert [r.run_id for r in got] == ["free", "mine", "ended", "just", "dead"]
    assert _takeovers(caplog) == [
        "run ended: me takes it over from w-old (lease expired)",
        "run just: me takes it over from w-old (lease expired)",
        "run dead: me takes it over from w-dead (owner gone)",
    ]
    assert set(_leases(s).values()) == {("me", T0 + 40)}


def test_a_worker_of_one_flow_wakes_its_due_run_behind_many_of_other_flows(db_path: Path):
    """A worker that serves flow ``mine`` only (``flows``) and claims one run
    at a time: 150 waiting runs of another flow, due earlier, sit ahead of
    its own due run in the order runs are woken. Its claim reaches past
    them (it used to read the first ``max(4 * limit, 100)`` only, so its
    own run was never woken while they waited), and leaves them unclaimed."""
    s = open_store(db_path, synchronous="OFF")
    try:
        _runs(
            s,
            *[
                (f"x{i:03}", "waiting", T0 + i, {"deadline_at": T0 + i, "flow": "other"})
                for i in range(150)
            ],
            ("due", "waiting", T0, {"deadline_at": T0 + 200, "flow": "mine"}),
            ("later", "waiting", T0, {"deadline_at": T0 + 2_000, "flow": "mine"}),
        )
        got = s.claim_runnable("w-mine", 30.0, limit=1, flows=["mine"], now=T0 + 1_000)
        assert [r.run_id for r in got] == ["due"]
        assert {k for k, (owner, _) in _leases(s).items() if owner is not None} == {"due"}
    finally:
        s.close()


def test_a_claim_that_reads_past_its_first_window_hands_out_each_run_once(db_path: Path):
    """Two runs of flow ``mine`` to wake, one at the front and one behind 150
    of another flow: a claim of two reads a second, larger window (the
    first holds one of its runs only) and hands out both, each once."""
    s = open_store(db_path, synchronous="OFF")
    try:
        _runs(
            s,
            ("first", "waiting", T0, {"deadline_at": T0 - 1, "flow": "mine"}),
            *[
                (f"x{i:03}", "waiting", T0 + i, {"deadline_at": T0 + i, "flow": "other"})
                for i in range(150)
            ],
            ("second", "waiting", T0, {"deadline_at": T0 + 200, "flow": "mine"}),
        )
        got = s.claim_runnable("w-mine", 30.0, limit=2, flows=["mine"], now=T0 + 1_000)
        assert [r.run_id for r in got] == ["first", "second"]
        assert {k for k, (owner, _) in _leases(s).items() if owner is not None} == {
            "first",
            "second",
        }
    finally:
        s.close()


# -- the outbox claim ----------------------------------------------------------------


def _outbox_to(store: SqliteCheckpointStore, *intents: tuple[str, str]) -> None:
    """Run r1 with one intent per ``(id, destination)``, each saved with its
    own revision (the first is the oldest)."""
    store.create_run(_run(), _cp("r1", 0, {}))
    for n, (intent_id, destination) in enumerate(intents, start=1):
        intent = Intent(intent_id, "r1", "send", destination, {"n": n})
        store.append(_cp("r1", n, {"n": n}), intents=[intent])


def test_a_dispatcher_of_two_destinations_claims_the_intents_of_both_only(
    sqlite_store: SqliteCheckpointStore,
):
    s = sqlite_store
    _outbox_to(s, ("m1", "mail"), ("c1", "chat"), ("h1", "hook"), ("m2", "mail"))
    got = s.claim_intents("d1", 30.0, destinations=["mail", "hook"], now=T0 + 10)
    assert _ids(got) == ["m1", "h1", "m2"]
    assert _ids(s.claim_intents("d2", 30.0, now=T0 + 10)) == ["c1"]


def test_an_expired_outbox_claim_whose_dispatcher_still_runs_is_left_to_it(
    sqlite_store: SqliteCheckpointStore,
):
    """Liveness beats clocks: a dispatcher known to run (``presumed_alive``)
    keeps a slow send past its claim's end; without that knowledge the
    claim's end frees it."""
    s = sqlite_store
    _outbox_to(s, ("i1", "mail"))
    assert _ids(s.claim_intents("host:1:slow", 30.0, now=T0)) == ["i1"]
    alive = s.claim_intents("d2", 30.0, presumed_alive=lambda o: o == "host:1:slow", now=T0 + 31)
    assert alive == []
    assert _ids(s.claim_intents("d2", 30.0, now=T0 + 31)) == ["i1"]


# -- a query that tries to write ---------------------------------------------------


def test_a_query_that_tries_to_write_is_refused_naming_where_writes_go(
    sqlite_store: SqliteCheckpointStore,
):
    """``store.query(op)`` is read-only: a write in it is refused with the
    two places a write belongs, and changes nothing."""
    s = sqlite_store
    s.create_run(_run(), _cp("r1", 0, {}))
    with pytest.raises(QueryRefusedError) as err:
        s.query(lambda tx: tx.execute("DELETE FROM runs WHERE run_id='r1'"))
    assert str(err.value) == (
        "a domain query tried to write; query() is read-only. Run writes through "
        "store.write(op) (their own transaction) or as a step's ctx.write (with its "
        "checkpoint)."
    )
    assert [r.run_id for r in s.list_runs()] == ["r1"]


# -- pruning -----------------------------------------------------------------------


def test_prune_keeps_the_error_of_the_oldest_revision_it_keeps(db_path: Path):
    """The oldest kept revision is written again whole (a snapshot): with
    its error too, read back from the file (a retried step's failure the
    history shows)."""
    s = open_store(db_path)
    s.create_run(_run(), _cp("r1", 0, {"n": 0}))
    s.append(_cp("r1", 1, {"n": 1}))
    s.append(_cp("r1", 2, {"n": 2}, error="step a failed: timed out; retrying"))
    s.append(_cp("r1", 3, {"n": 3}))
    assert s.prune("r1", 2) == 2
    s.close()
    s = open_store(db_path)
    try:
        assert [i.revision for i in s.history("r1")] == [2, 3]
        kept = s.get_checkpoint("r1", 2)
        assert (dict(kept.state), kept.error) == (
            {"n": 2},
            "step a failed: timed out; retrying",
        )
        assert s.get_checkpoint("r1", 3).error is None
    finally:
        s.close()


# -- opening -----------------------------------------------------------------------


def test_opening_a_database_in_a_missing_folder_says_to_create_the_folder(tmp_path: Path):
    """``open_store`` (``create`` by default) of a path whose folder does not
    exist: refused saying the folder is missing, and nothing is made."""
    path = tmp_path / "nope" / "flowdesk.db"
    with pytest.raises(DatabaseOpenError) as err:
        open_store(path)
    assert type(err.value) is DatabaseOpenError
    assert str(err.value) == (
        f"cannot create the database {path}: its folder does not exist. "
        "Create the folder or use another path (--db PATH)."
    )
    assert list(tmp_path.iterdir()) == []
