"""How the PostgreSQL store settles a COMMIT whose reply was lost
(``_resolve``, ``_xact_status``, ``_xact_status_on``, ``_Xact.note``) and
ends a run together with the withdrawal of its intents
(``update_latest_withdrawing``), as the mutation run of those functions
(issue 29) found them unpinned: what the operator's log says about a
settled commit, a transaction id the server no longer knows, and which of
a canceled run's intents are withdrawn and who hears of the cancel. Every
test runs on a real server (``tests/pg_support.py``); a COMMIT is cut at
the wire by :class:`tests.pg_proxy.CommitDropProxy`."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.store.postgres import store as postgres
from desktop_app.store.protocol import Checkpoint, RunRecord
from desktop_app.store.records import Intent
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

LOGGER = "desktop_app.store.postgres.store"
#: a domain write: the append is a transaction (BEGIN … COMMIT), asked about by its id
IN_A_TRANSACTION = (lambda tx: tx.execute("SELECT 1"),)


def run(run_id: str, t: float = 1000.0) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, t, t)


def cp(run_id: str, rev: int, state: dict[str, Any], status: Any = "running") -> Checkpoint:
    return Checkpoint(run_id, rev, status, state, {}, ("a",), 1000.0 + rev)


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[Any, CommitDropProxy]]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    store = postgres.open_postgres_store(
        with_address(pg_url, host="127.0.0.1", port=proxy.port), max_connections=2
    )
    store.notifier.enabled = False  # only the write's COMMIT goes through the armed proxy
    yield store, proxy
    store.close()
    proxy.close()


def _note(monkeypatch: pytest.MonkeyPatch, xid: int) -> None:
    """The store notes ``xid`` as its transactions' id from now on (as the
    xid-reuse tests do: a stand-in for an id the server answers for
    differently than for the transaction that was given it)."""
    real = postgres._Xact.note

    def note(self: Any, _xid: Any, pid: Any, *row: Any) -> None:
        real(self, xid, pid, *row)

    monkeypatch.setattr(postgres._Xact, "note", note)


def _settled(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == LOGGER and ("lost COMMIT" in r.getMessage() or "commit log" in r.getMessage())
    ]


def test_a_lost_append_whose_id_another_transaction_committed_is_logged_and_run_again(
    proxied, pg_url, pg_store, monkeypatch, caplog
):
    """The id the lost append noted is one the server says committed (it was
    another transaction's), but the append's checkpoints row is not stored:
    the operator's log says so (transaction, run and revision, "run again")
    and that the lost COMMIT was settled as aborted; the append is run again
    and lands once."""
    store, proxy = proxied
    store.create_run(run("r1"), cp("r1", 0, {"x": 0}))
    with psycopg.connect(pg_url, autocommit=True) as other:
        row = other.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    other_xid = int(row[0])  # committed: a one-statement transaction of its own
    _note(monkeypatch, other_xid)
    proxy.arm("before_commit")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.append(cp("r1", 1, {"x": 1}), IN_A_TRANSACTION)
    assert proxy.fired == ["before_commit"]
    assert _settled(caplog) == [
        (
            logging.WARNING,
            f"transaction {other_xid} committed by the server's commit log, but the "
            "checkpoints row of run r1 revision 1 it wrote is not stored: the server "
            "crashed and gave that id to another transaction; this one did not commit "
            "and is run again",
        ),
        (logging.INFO, f"a lost COMMIT (transaction {other_xid}) was settled: aborted"),
    ]
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]
    assert pg_store.latest("r1").state == {"x": 1}


def test_a_plain_write_whose_commit_landed_is_logged_settled_committed_and_stored_once(
    proxied, pg_store, caplog
):
    """A signal's COMMIT reached the server and its reply was lost: the store
    asks by the transaction id, hears committed (the server did not restart),
    logs the settled outcome naming that transaction (the one that stored the
    signal), and does not send it again."""
    store, proxy = proxied
    proxy.arm("after_commit")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.send_signal("go", "k", {"n": 1}, 1000.0)
    assert proxy.fired == ["after_commit"]
    rows = pg_store.query(lambda tx: tx.fetchall("SELECT xmin::text FROM signals", ()))
    assert len(rows) == 1  # stored once
    ((level, message),) = _settled(caplog)
    assert level == logging.INFO
    got = re.fullmatch(r"a lost COMMIT \(transaction (\d+)\) was settled: committed", message)
    assert got is not None, message
    assert int(got.group(1)) & 0xFFFFFFFF == int(rows[0][0])  # the signal's own transaction


def test_a_store_on_a_pool_whose_url_is_a_function_settles_a_lost_commit_by_its_id(
    pg_url, pg_store
):
    """A store on a caller's pool whose ``conninfo`` is a function returning
    the URL (psycopg_pool takes one): a signal (a transaction: BEGIN …
    COMMIT) whose COMMIT landed and whose reply was lost is asked about by
    its id on a new connection to that URL, counts as sent, and is stored
    once."""
    from psycopg_pool import ConnectionPool

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
    store = postgres.PostgresCheckpointStore(pool)
    store.notifier.enabled = False  # only the signal's COMMIT goes through the armed proxy
    try:
        proxy.arm("after_commit")
        store.send_signal("go", "k", {"n": 1}, 1000.0)
        assert proxy.fired == ["after_commit"]
    finally:
        store.close()
        proxy.close()
    got = pg_store.next_signal("go", "k")
    assert got is not None and got.payload == {"n": 1}
    assert pg_store.query(lambda tx: tx.fetchall("SELECT count(*) FROM signals", ())) == [(1,)]


def test_an_append_alone_whose_reply_was_lost_is_logged_settled_by_what_it_wrote(
    proxied, pg_store, caplog
):
    """A one-statement append (no transaction id heard) ran and its reply was
    lost: the log names the append (revision and run), not a transaction,
    and says it was settled committed; the run holds revision 1 once."""
    store, proxy = proxied
    store.create_run(run("r1"), cp("r1", 0, {"x": 0}))
    proxy.arm("after_commit")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.append(cp("r1", 1, {"x": 1}))
    assert proxy.fired == ["after_commit"]
    assert _settled(caplog) == [
        (logging.INFO, "a lost COMMIT (the append of revision 1 of run r1) was settled: committed")
    ]
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]


def test_a_lost_commit_whose_id_the_server_no_longer_knows_is_unknown_and_not_run_again(
    proxied, pg_store, monkeypatch
):
    """``pg_xact_status`` answers nothing (NULL) for an id it no longer keeps
    (older than its commit log; here the invalid id 0, which it answers the
    same way): the outcome is unknown, said so, and the append is not run
    again (it might have landed)."""
    from desktop_app.errors import CommitUnknownError

    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 2.0)
    store, proxy = proxied
    store.create_run(run("r1"), cp("r1", 0, {"x": 0}))
    _note(monkeypatch, 0)
    proxy.arm("before_commit")
    with pytest.raises(CommitUnknownError) as caught:
        store.append(cp("r1", 1, {"x": 1}), IN_A_TRANSACTION)
    assert proxy.fired == ["before_commit"]
    assert caught.value.xid == "0"
    assert caught.value.reason == "the server no longer knows that transaction"
    assert str(caught.value) == (
        f"the connection to PostgreSQL ({store.where}) dropped during COMMIT and whether "
        "transaction 0 landed is unknown: the server no longer knows that transaction. "
        "Nothing is assumed; once the server is back, resume the run: it goes on from what "
        "the server kept."
    )
    assert [h.revision for h in pg_store.history("r1")] == [0]  # not run again


def _canceled(c: Checkpoint) -> Checkpoint:
    return c.evolve(revision=c.revision + 1, status="canceled", waits=())


def four_intents(s: Any, short_ttl: float) -> float:
    """Run ``r1`` created on store ``s`` (either backend) with revision 1's
    four intents, to destinations named for what became of them: ``pending``
    (never claimed), ``gone`` (claimed for ten days by ``h:gone``),
    ``expired`` and ``alive`` (claimed for ``short_ttl`` seconds by ``h:exp``
    and ``h:alive``); the three claimed ones began sending. Returns the
    store's time of the claims (UTC epoch seconds)."""
    s.create_run(run("r1"), cp("r1", 0, {}))
    dests = ["pending", "gone", "expired", "alive"]
    s.append(
        cp("r1", 1, {}),
        intents=[Intent(f"r1:s:0:{i}", "r1", "s", d, {"i": i}) for i, d in enumerate(dests)],
    )
    t: float = s.now()
    for holder, ttl, dest in (
        ("h:gone", 864000.0, "gone"),
        ("h:exp", short_ttl, "expired"),
        ("h:alive", short_ttl, "alive"),
    ):
        (claimed,) = s.claim_intents(holder, ttl, 1, now=t, destinations=[dest])
        assert s.mark_intent(claimed.intent_id, "sending", t)  # its send begins
    return t


def test_a_cancel_withdraws_what_no_live_dispatcher_holds_judged_at_the_time_given(pg_store):
    """A cancel (``update_latest_withdrawing``) of a run with four intents,
    at a time an hour past two claims' expiry: the pending one, the one
    whose claimant is gone (its claim still runs) and the one whose claim
    expired at that time are withdrawn with the cancel's reason; the one
    whose claim expired but whose dispatcher still runs is left in flight.
    The run is canceled in the same transaction."""
    s = pg_store
    t = four_intents(s, 3600.0)
    cp2, done = s.update_latest_withdrawing(
        "r1",
        _canceled,
        "canceled by the user",
        presumed_dead=lambda h: h == "h:gone",
        presumed_alive=lambda h: h == "h:alive",
        now=t + 7200.0,
    )
    assert (cp2.revision, cp2.status) == (2, "canceled")
    assert s.get_run("r1").status == "canceled"
    assert sorted(i.destination for i in done.withdrawn) == ["expired", "gone", "pending"]
    assert [i.destination for i in done.in_flight] == ["alive"]
    failed = {i.destination: i.last_error for i in s.intents(["failed"], limit=10)}
    assert failed == dict.fromkeys(("expired", "gone", "pending"), "canceled by the user")
    assert [i.destination for i in s.intents(["sending"], limit=10)] == ["alive"]


def test_a_cancel_wakes_a_listening_worker(pg_store):
    """A worker (or an app watching the runs) blocked on LISTEN hears the
    cancel at once, not at its next poll."""
    pg_store.create_run(run("r1"), cp("r1", 0, {}))
    listener = pg_store.listener()
    try:
        while listener.wait(0.3):
            pass  # the creation's
        pg_store.update_latest_withdrawing("r1", _canceled, "canceled")
        assert listener.wait(10.0)
    finally:
        listener.close()
