"""The PostgreSQL store's write path, as the mutation run of its write
functions (``_append``, ``append``, ``create_run``, issue 29) found it
unpinned: behind a transaction-mode pooler (where each transaction must
set its own ``search_path`` before its first statement, so a statement
sent outside the transaction the store opens finds no table), and the
parts of an append no other test reads back. Every test runs on a real
server (``tests/pg_support.py``). A store opened with
``pooler="transaction"`` on a direct URL behaves as one behind PgBouncer
does for what is tested here: its connections carry no ``search_path``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from desktop_app.errors import CheckpointNotFoundError, RevisionConflictError
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, Intent, Lease, RunRecord, Wait

pytestmark = pytest.mark.postgres

T0 = 1000.0


def _rec(run_id: str, **kw: Any) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, T0, T0, **kw)


def _cp(run_id: str, rev: int, state: Any = None, status: Any = "running", **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), T0 + rev, **kw)


@pytest.fixture
def pooled(pg_url: str) -> Iterator[Any]:
    """A store that sets ``search_path`` per transaction, as behind PgBouncer."""
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url, pooler="transaction")
    yield store
    store.close()


def test_behind_a_transaction_pooler_each_kind_of_write_saves(pooled, pg_store):
    """Through a transaction-mode pooler a run is created (with a lease and a
    wait), appended to under its lease, finished, changed in place, pruned
    and appended to in a batch: each reads back from another store."""
    s, direct = pooled, pg_store
    go = Wait("r1:s:0", "s", "signal", T0, name="go", key="k")
    s.create_run(
        _rec("r1", lease_owner="me", lease_expires_at=T0 + 60.0),
        _cp("r1", 0, {"n": 0}, status="waiting", waits=(go,)),
    )
    assert direct.runs_waiting_for("signal", "go", "k") == ["r1"]
    assert direct.get_run("r1").lease_owner == "me"
    lease = Lease("me", T0 + 600.0, T0)
    s.append(_cp("r1", 1, {"n": 1}), lease=lease)
    s.append(_cp("r1", 2, {"n": 2}), lease=lease)
    assert direct.runs_waiting_for("signal", "go", "k") == []
    s.update_latest("r1", lambda cp: replace(cp, revision=3, state={"n": 3}))
    assert s.prune("r1", 2) == 2
    s.append(_cp("r1", 4, {"n": 4}, status="completed"), lease=lease)
    run = direct.get_run("r1")
    assert (run.status, run.revision, run.lease_owner) == ("completed", 4, None)
    assert [c.revision for c in direct.history("r1")] == [2, 3, 4]
    assert dict(direct.latest("r1").state) == {"n": 4}

    s.create_run(_rec("b1"), _cp("b1", 0))
    s.create_run(_rec("b2"), _cp("b2", 0))
    assert s.append_batch([AppendRequest(_cp(r, 1, {"r": r})) for r in ("b1", "b2")]) == [
        None,
        None,
    ]
    assert [dict(direct.latest(r).state) for r in ("b1", "b2")] == [{"r": "b1"}, {"r": "b2"}]


def test_behind_a_transaction_pooler_an_append_on_a_missing_revision_says_why(pooled):
    """An append whose revision before it is not stored (the run is gone,
    or was never there, or is at another revision) is refused with the
    reason, read inside the store's own transaction: behind a pooler a
    statement outside it finds no table and would be a StoreError."""
    s = pooled
    s.create_run(_rec("r1"), _cp("r1", 0))
    with pytest.raises(RevisionConflictError, match="latest revision 0"):
        s.append(_cp("r1", 5))
    with pytest.raises(CheckpointNotFoundError, match="no run nope"):
        s.append(_cp("nope", 1))
    s.append(_cp("r1", 1, {"n": 1}))  # the store still works
    assert s.latest("r1").revision == 1


def test_an_append_stores_its_error_progress_intents_and_waits(pg_url, pg_store):
    """What an append carries reads back from a store that never saw it: the
    run's error and progress, an outbox intent's payload, and the run's
    waits, replaced by the next revision's."""
    from desktop_app.store.postgres.store import open_postgres_store

    s = pg_store
    first = Wait("r1:s:0", "s", "signal", T0, name="one", key="k")
    second = Wait("r1:t:0", "t", "signal", T0 + 1, name="two", key="k")
    s.create_run(_rec("r1"), _cp("r1", 0))
    s.append(
        _cp("r1", 1, {"n": 1}, status="waiting", waits=(first,), progress=(1, 3), error="slow"),
        intents=[Intent("r1:s:0:0", "r1", "s", "mail", {"to": "ann"})],
    )
    s.append(_cp("r1", 2, {"n": 2}, status="waiting", waits=(second,), progress=(2, 3)))
    fresh = open_postgres_store(pg_url)
    try:
        assert fresh.runs_waiting_for("signal", "one", "k") == []
        assert fresh.runs_waiting_for("signal", "two", "k") == ["r1"]
        [intent] = fresh.intents(["pending"])
        assert (intent.destination, intent.payload) == ("mail", {"to": "ann"})
        one = fresh.get_checkpoint("r1", 1)
        assert (one.error, one.progress) == ("slow", (1, 3))
        run = fresh.get_run("r1")
        assert (run.progress, run.error) == ((2, 3), None)
    finally:
        fresh.close()


def test_a_new_runs_first_checkpoint_keeps_its_error(pg_url, pg_store):
    """The error a run is created with (its revision 0's) reads back from a
    store that never saw it, as an append's does."""
    from desktop_app.store.postgres.store import open_postgres_store

    pg_store.create_run(_rec("r1"), _cp("r1", 0, status="failed", error="no input\x00file"))
    fresh = open_postgres_store(pg_url)
    try:
        assert fresh.get_checkpoint("r1", 0).error == "no input\ufffdfile"
    finally:
        fresh.close()


@pytest.mark.parametrize(
    ("value", "why"), [("\udcff", "UnicodeEncodeError"), ({1, 2}, "TypeError")], ids=["text", "set"]
)
def test_a_new_run_whose_input_cannot_be_stored_is_a_store_error_and_not_created(
    pg_store, value, why
):
    """An input state that is not JSON text (a lone surrogate, as a file
    name that is not UTF-8 gives; a set) refuses the run, naming it and what to
    pass instead, as the SQLite store does; nothing is created. Before the
    fix the text (not the set) was encoded outside the check that says so: a bare
    UnicodeEncodeError from the driver."""
    from desktop_app.errors import StoreError

    with pytest.raises(StoreError) as caught:
        pg_store.create_run(_rec("r1"), _cp("r1", 0, {"path": value}))
    assert str(caught.value).startswith(
        f"run r1: a value in its input state cannot be stored as JSON text ({why}: "
    )
    assert str(caught.value).endswith(
        "the run was not created. Pass plain JSON data (valid UTF-8 strings, numbers, "
        "lists, objects)."
    )
    with pytest.raises(CheckpointNotFoundError):
        pg_store.get_run("r1")
    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"path": "ok"}))  # the store goes on
    assert dict(pg_store.latest("r1").state) == {"path": "ok"}


@pytest.mark.scenario("S70")
def test_a_new_run_whose_commit_reply_is_lost_but_landed_is_created_once(pg_url, pg_store):
    """create_run's COMMIT reaches the server but its reply is lost: the
    store asks the server about that very transaction, hears it committed,
    and returns; the run exists once (a second try would have been refused
    as a run that already exists)."""
    from urllib.parse import urlsplit

    from desktop_app.store.postgres.store import open_postgres_store
    from tests.pg_proxy import CommitDropProxy
    from tests.pg_support import with_address

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False  # its NOTIFY could take the COMMIT the proxy is armed for
    try:
        proxy.arm("after_commit")
        store.create_run(_rec("r1"), _cp("r1", 0, {"x": 0}))
        assert proxy.fired == ["after_commit"]
        assert [h.revision for h in pg_store.history("r1")] == [0]
        assert dict(pg_store.latest("r1").state) == {"x": 0}
    finally:
        store.close()
        proxy.close()
