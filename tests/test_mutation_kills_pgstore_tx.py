"""The PostgreSQL store's transaction code (``_transaction``, ``_attempt``,
``_attempt_on``, ``_execute_opening``, ``_resolve``, ``_xact_status``,
``stop_waiting``) and the reads and the rest, as the mutation run of
those functions (issue 29) found them unpinned. Every test runs on a real
server (``tests/pg_support.py``); a lost COMMIT is cut at the wire by
:class:`tests.pg_proxy.CommitDropProxy`, nothing in the store patched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from desktop_app.store.protocol import Checkpoint, RunRecord
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

T0 = 1000.0


def _rec(run_id: str, **kw: Any) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, T0, T0, **kw)


def _cp(run_id: str, rev: int, state: Any = None, status: Any = "running", **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), T0 + rev, **kw)


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[Any, CommitDropProxy]]:
    """A store whose connections go through a proxy that can cut a COMMIT."""
    from desktop_app.store.postgres.store import open_postgres_store

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False  # its NOTIFY could take the COMMIT the proxy is armed for
    try:
        yield store, proxy
    finally:
        store.close()
        proxy.close()


def _count(store: Any, sql: str, *args: Any) -> int:
    (n,) = store.query(lambda tx: tx.fetchall(sql, args))[0]
    return int(n)


@pytest.mark.scenario("S70")
def test_a_signal_whose_commit_reply_is_lost_but_landed_is_queued_once(proxied, pg_store):
    """``send_signal`` is a plain write (``_tx``): its COMMIT reaches the
    server and the reply is lost. The store asks about that transaction,
    hears it committed and returns the signal's id; the run it wakes finds
    one signal, not the same one twice (a second try would queue another)."""
    store, proxy = proxied
    proxy.arm("after_commit")
    signal_id = store.send_signal("go", "k", {"n": 1}, T0)
    assert proxy.fired == ["after_commit"]
    first = pg_store.next_signal("go", "k")
    assert first is not None
    assert (first.signal_id, first.name, first.key, first.payload) == (
        signal_id,
        "go",
        "k",
        {"n": 1},
    )
    assert _count(pg_store, "SELECT count(*) FROM signals WHERE name=? AND key=?", "go", "k") == 1


def test_a_step_after_the_schema_was_dropped_says_the_schema_is_missing(pg_url, pg_store):
    """The schema is dropped under a running store (a database reset while
    a worker runs): the next step's append, whose statement the store
    prepares on that connection first, fails with SchemaMissingError naming
    ``db apply``, not with advice about a pooler that lost a prepared
    statement (what the failed clean-up of the PREPARE that never ran says)."""
    import psycopg

    from desktop_app.errors import SchemaMissingError

    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA flowdesk CASCADE")
    with pytest.raises(SchemaMissingError) as caught:
        pg_store.append(_cp("r1", 1, {"n": 1}))
    assert "has no Flowdesk schema" in str(caught.value)
    assert "db apply" in str(caught.value)


@pytest.mark.parametrize("steps_before", [0, 2], ids=["first-step", "after-two-steps"])
def test_an_append_the_server_refuses_is_a_store_error_and_the_store_goes_on(
    pg_store, steps_before
):
    """A step whose progress does not fit the column (PostgreSQL refuses it
    when the statement runs), on the connection's first step (which prepares
    the statement) or after two (which runs the prepared one), fails with the
    StoreError for the server's refusal; nothing is written and the next
    steps of the run save."""
    from desktop_app.errors import StoreError

    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    for rev in range(1, steps_before + 1):
        pg_store.append(_cp("r1", rev, {"n": rev}))
    with pytest.raises(StoreError) as caught:
        pg_store.append(_cp("r1", steps_before + 1, {"n": -1}, progress=(2**63, 2**63)))
    assert str(caught.value) == (
        f"PostgreSQL error ({pg_store.where}) (SQLSTATE 22003): bigint out of range"
    )
    assert pg_store.get_run("r1").revision == steps_before
    for rev in range(steps_before + 1, steps_before + 4):
        pg_store.append(_cp("r1", rev, {"n": rev}, progress=(rev, 9)))
    assert pg_store.latest("r1").progress == (steps_before + 3, 9)
    assert [h.revision for h in pg_store.history("r1")] == list(range(steps_before + 4))


@pytest.mark.slow
def test_a_stopping_store_fails_a_write_that_finds_no_free_connection(proxied, pg_store):
    """``stop_waiting`` (a process stopping on SIGTERM): a write that finds
    every pooled connection taken fails with the StoreError that says nothing
    was written, instead of waiting the pool's 30 s for one. Here the
    connections come free 5 s later: a store that still waited would take one
    then and write the signal."""
    import threading

    from desktop_app.errors import StoreError

    store, _proxy = proxied
    held = [store.pool.getconn(), store.pool.getconn()]  # the pool's whole size
    freed = threading.Timer(5.0, lambda: [store.pool.putconn(c) for c in held])
    freed.start()
    try:
        store.stop_waiting(0.2)
        with pytest.raises(StoreError) as caught:
            store.send_signal("go", "k", {"n": 1}, T0)
    finally:
        freed.join()
    assert "nothing of the transaction it cut off was committed" in str(caught.value)
    assert pg_store.next_signal("go", "k") is None


@pytest.mark.scenario("S70")
def test_a_stopping_store_tries_a_write_whose_commit_was_lost_once(proxied, pg_store):
    """After ``stop_waiting`` a write is tried once: its COMMIT lost before
    the server saw it is the StoreError that says the server rolled it back
    (one time), not a second try; the same write without ``stop_waiting``
    is tried again and lands."""
    from desktop_app.errors import StoreError

    store, proxy = proxied
    store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    proxy.arm("before_commit")
    store.append(_cp("r1", 1, {"n": 1}))
    assert proxy.fired == ["before_commit"]
    store.stop_waiting()
    proxy.arm("before_commit")
    with pytest.raises(StoreError) as caught:
        store.append(_cp("r1", 2, {"n": 2}))
    assert proxy.fired == ["before_commit"] * 2
    assert str(caught.value) == (
        f"the connection to PostgreSQL ({store.where}) dropped during COMMIT 1 times; "
        "the server rolled the last one back, nothing was written. Retry."
    )
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]


@pytest.mark.scenario("S70")
def test_a_store_on_a_pool_whose_url_is_a_function_asks_about_a_lost_commit_and_listens(
    pg_url, pg_store
):
    """``PostgresCheckpointStore`` on a pool built by the caller whose
    ``conninfo`` is a function returning the URL (psycopg_pool takes one):
    a step whose COMMIT reply is lost but landed is asked about on a new
    connection to that URL and counts once, and ``listener()`` listens on
    that URL (a signal sent wakes it)."""
    from psycopg_pool import ConnectionPool

    from desktop_app.store.postgres.store import PostgresCheckpointStore

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port)
    pool: ConnectionPool[Any] = ConnectionPool(
        lambda: url,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True, "options": "-c search_path=flowdesk"},
        open=False,
    )
    pool.open(wait=True)
    store = PostgresCheckpointStore(pool)
    store.notifier.enabled = False  # as in `proxied`: only the append's COMMIT is cut
    listener = store.listener()
    try:
        store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
        proxy.arm("after_commit")
        store.append(_cp("r1", 1, {"n": 1}))
        assert proxy.fired == ["after_commit"]
        assert [h.revision for h in pg_store.history("r1")] == [0, 1]
        pg_store.send_signal("go", "k", {}, T0)  # pg_store's notifier is on
        assert listener.wait(10.0)
    finally:
        listener.close()
        store.close()
        proxy.close()


NO_SESSION = (
    " goes through a transaction-mode pooler "
    '(postgres.pooler = "transaction") and no postgres.listen_url is set: '
    "LISTEN and a worker's liveness lock need a session of their own. Set "
    "postgres.listen_url (FLOWDESK_POSTGRES__LISTEN_URL) to a direct "
    "connection to the same server."
)


def test_behind_a_transaction_pooler_without_a_listen_url_listening_is_refused_saying_why(
    pg_url,
):
    """A worker behind PgBouncer in transaction mode with no direct
    ``listen_url`` cannot LISTEN or hold its liveness lock: ``listener()``
    refuses with NoSessionError naming the database and the setting to set,
    word for word; given a ``listen_url`` it listens there."""
    from desktop_app.errors import NoSessionError
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url, pooler="transaction")
    try:
        with pytest.raises(NoSessionError) as caught:
            store.listener()
        assert str(caught.value) == store.where + NO_SESSION
    finally:
        store.close()
    store = open_postgres_store(pg_url, pooler="transaction", listen_url=pg_url)
    try:
        listener = store.listener()
        try:
            store.send_signal("go", "k", {}, T0)
            assert listener.wait(10.0)
        finally:
            listener.close()
    finally:
        store.close()


def test_a_store_built_on_a_callers_pool_words_its_errors_without_a_url(pg_url):
    """``PostgresCheckpointStore(pool)`` given no ``where`` or ``db``: its
    errors name no database (no empty brackets, nothing made up), a missing
    schema's advice says to name this database's URL, and ``listener()``
    behind a transaction pooler says "the database"."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from desktop_app.errors import NoSessionError, SchemaMissingError, StoreError
    from desktop_app.store.postgres.store import PostgresCheckpointStore

    def pool(options: str) -> ConnectionPool[Any]:
        p: ConnectionPool[Any] = ConnectionPool(
            pg_url,
            min_size=1,
            max_size=2,
            kwargs={"autocommit": True, "options": options},
            open=False,
        )
        p.open(wait=True)
        return p

    behind = PostgresCheckpointStore(pool(""), pooler="transaction")
    try:
        with pytest.raises(NoSessionError) as caught:
            behind.listener()
        assert str(caught.value) == "the database" + NO_SESSION
    finally:
        behind.close()
    store = PostgresCheckpointStore(pool("-c search_path=flowdesk"))
    try:
        store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
        with pytest.raises(StoreError) as refused:
            store.append(_cp("r1", 1, {"n": 1}, progress=(2**63, 2**63)))
        assert str(refused.value) == "PostgreSQL error (SQLSTATE 22003): bigint out of range"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA flowdesk CASCADE")
        with pytest.raises(SchemaMissingError) as missing:
            store.append(_cp("r1", 1, {"n": 1}))
        assert str(missing.value).startswith(
            "the PostgreSQL database has no Flowdesk schema; apply it with "
            "`flowdesk --db URL db apply`, URL naming this database. "
        )
    finally:
        store.close()


def test_a_refused_step_rolls_back_itself_and_the_pool_warns_of_nothing(pg_store, caplog):
    """A step refused inside its transaction (a revision another writer
    took) is rolled back by the store before its connection goes back to
    the pool: the pool has nothing to roll back and logs no warning (a
    worker's log would otherwise show one per refused step), and the next
    step saves."""
    import logging

    from desktop_app.errors import RevisionConflictError

    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    pg_store.append(_cp("r1", 1, {"n": 1}))
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        with pytest.raises(RevisionConflictError):
            pg_store.append(_cp("r1", 1, {"n": -1}))
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    pg_store.append(_cp("r1", 2, {"n": 2}))
    assert dict(pg_store.latest("r1").state) == {"n": 2}


@pytest.mark.scenario("S70")
def test_a_commit_whose_backend_hangs_holding_it_open_is_unknown_saying_so(
    pg_url, pg_store, monkeypatch
):
    """The client's connection drops at COMMIT and the backend that holds
    the transaction hangs (stopped: it can neither commit nor be ended): the
    store asks, tries to end that backend, hears "in progress" to its
    deadline and raises CommitUnknownError saying the server still holds the
    transaction open; it assumes nothing. Once the backend goes on it ends,
    and nothing was written."""
    import os
    import signal

    import psycopg

    from desktop_app.errors import CommitUnknownError
    from desktop_app.store.postgres import store as postgres
    from desktop_app.store.postgres.store import open_postgres_store

    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 1.0)
    stopped: list[int] = []
    dbname = urlsplit(pg_url).path.lstrip("/")

    class Hanging(CommitDropProxy):
        def _take(self, sent: bytes = b"") -> Any:
            mode = super()._take(sent)
            if mode == "hold":  # the COMMIT is never forwarded: stop the backend waiting for it
                with psycopg.connect(pg_url, autocommit=True) as conn:
                    rows = conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname=%s "
                        "AND state='idle in transaction'",
                        (dbname,),
                    ).fetchall()
                for (pid,) in rows:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except PermissionError:
                        continue
                    stopped.append(pid)
            return mode

    proxy = Hanging(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False
    try:
        store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
        proxy.arm("hold")
        try:
            with pytest.raises(CommitUnknownError) as caught:
                # a domain write: the append is a transaction whose COMMIT is held
                store.append(_cp("r1", 1, {"n": 1}), [lambda tx: tx.execute("SELECT 1")])
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        if not stopped:
            pytest.skip("cannot stop the server's backend (not its owner or root)")
        assert caught.value.reason == "the server still holds it open after 1 s"
        assert proxy.held_ended.wait(10), "the held backend never ended"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (state,) = conn.execute(
                "SELECT pg_xact_status(%s::xid8)", (caught.value.xid,)
            ).fetchone()
        assert state == "aborted"
        assert [h.revision for h in pg_store.history("r1")] == [0]
    finally:
        store.close()
        proxy.close()


def test_a_published_event_and_a_sent_signal_wake_a_listening_worker(pg_store):
    """A worker blocked on LISTEN (``listener()``, the wake channel) hears
    each event published and each signal sent, at once rather than at its
    next poll."""
    listener = pg_store.listener()
    try:
        while listener.wait(0.2):
            pass  # anything from before
        pg_store.publish_event("ready", {"n": 1}, T0)
        assert listener.wait(10.0)
        while listener.wait(0.2):
            pass
        pg_store.send_signal("go", "k", {}, T0)
        assert listener.wait(10.0)
    finally:
        listener.close()


def test_a_revision_another_writer_saved_without_moving_the_run_is_a_revision_conflict(
    pg_url, pg_store
):
    """Another writer on the same schema (a restore script, a second tool)
    saved the checkpoint of the run's next revision without moving the run:
    the step that appends that revision is the RevisionConflictError that
    says so, word for word (what the engine reads as "reload the run"), not
    a bare StoreError quoting the server's duplicate key; the run stays at
    the revision it was at, and nothing of the step is written."""
    import psycopg

    from desktop_app.errors import RevisionConflictError

    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "CREATE TEMP TABLE saved ON COMMIT DROP AS "
            "SELECT * FROM flowdesk.checkpoints WHERE run_id = 'r1' AND revision = 0"
        )
        conn.execute("UPDATE saved SET revision = 1")
        conn.execute("INSERT INTO flowdesk.checkpoints SELECT * FROM saved")
    with pytest.raises(RevisionConflictError) as caught:
        pg_store.append(_cp("r1", 1, {"n": 1}))
    assert str(caught.value) == (
        "run r1: revision 1 (or one of its outbox intents) was already saved by another writer"
    )
    assert pg_store.get_run("r1").revision == 0
    assert _count(pg_store, "SELECT count(*) FROM checkpoints WHERE run_id=?", "r1") == 2
