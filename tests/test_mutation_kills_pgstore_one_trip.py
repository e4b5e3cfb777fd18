"""A step's append (and a run's creation) on PostgreSQL as one statement that
commits by itself (``_append_alone``, ``_landed``, ``_resolve`` with a probe,
``_execute_opening``, ``_append``, ``create_run``), as the mutation run of
those functions (issue 29) found them unpinned: whether a step whose reply
was lost is lost, repeated or reported unknown with the right words. Every
test runs on a real server (``tests/pg_support.py``); a lost reply is cut at
the wire by :class:`tests.pg_proxy.CommitDropProxy`, nothing in the store
patched."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from desktop_app.store.protocol import Checkpoint, RunRecord
from tests.pg_proxy import CommitDropProxy, append_behind_a_row_lock
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres

T0 = 1000.0


def _rec(run_id: str) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, T0, T0)


def _cp(run_id: str, rev: int, state: Any = None, status: Any = "running", **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), T0 + rev, **kw)


def _open(url: str) -> Any:
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(url, max_connections=2)
    store.notifier.enabled = False  # its NOTIFY could take the statement the proxy is armed for
    return store


@pytest.fixture
def proxy(pg_url: str) -> Iterator[CommitDropProxy]:
    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    yield proxy
    proxy.close()


@pytest.fixture
def proxied(pg_url: str, proxy: CommitDropProxy) -> Iterator[tuple[Any, CommitDropProxy]]:
    store = _open(with_address(pg_url, host="127.0.0.1", port=proxy.port))
    try:
        yield store, proxy
    finally:
        store.close()


@pytest.mark.scenario("S70")
def test_a_run_creation_whose_outcome_cannot_be_asked_is_unknown_naming_the_creation(
    proxy, pg_url, pg_store, monkeypatch
):
    """create_run sent as one statement ran, its reply was lost and the
    server stayed out of reach: the error names the creation of that run
    (not an append, no transaction id), and the run exists once."""
    from desktop_app.errors import CommitUnknownError
    from desktop_app.store.postgres import store as postgres

    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 1.0)
    store = _open(with_address(pg_url, host="127.0.0.1", port=proxy.port))
    proxy.arm("after_commit_unreachable")
    try:
        with pytest.raises(CommitUnknownError) as caught:
            store.create_run(_rec("r1"), _cp("r1", 0, {"x": 0}))
    finally:
        store.close()
    assert proxy.fired == ["after_commit_unreachable"]
    assert caught.value.xid is None
    assert str(caught.value).startswith(
        f"the connection to PostgreSQL ({store.where}) dropped during the creation of run r1, "
        "a statement that commits by itself, and whether it landed is unknown: the server "
        "could not be reached to ask for "
    )
    asked = re.search(r"could not be reached to ask for ([0-9.]+) s \(", str(caught.value))
    assert asked is not None and float(asked[1]) >= 1.0, caught.value  # the time it did ask
    assert [h.revision for h in pg_store.history("r1")] == [0]
    assert pg_store.latest("r1").state == {"x": 0}


@pytest.mark.scenario("S70")
def test_an_append_already_prepared_on_its_connection_waiting_for_a_lock_is_ended_then_retried(
    proxied, pg_url, pg_store
):
    """The second append of the same shape on the same pooled connection
    goes as a bare ``EXECUTE`` (its statement prepared by the first). It
    reaches the server and waits behind another transaction's lock when the
    client's connection drops: the store still finds that backend running
    it, ends it, finds nothing written and appends again once the lock
    goes: revision 2 exactly once, after revision 1."""
    store, proxy = proxied
    store.create_run(_rec("r1"), _cp("r1", 0, {"x": 0}))
    store.append(_cp("r1", 1, {"x": 1}))  # prepares the append's statement on the connection
    append_behind_a_row_lock(store, proxy, pg_url, _cp("r1", 2, {"x": 2}))
    assert [h.revision for h in pg_store.history("r1")] == [0, 1, 2]
    assert pg_store.latest("r1").state == {"x": 2}


def test_a_step_whose_intent_id_is_taken_writes_nothing_and_the_step_is_taken_again(pg_store):
    """A step carrying an intent goes in a transaction with the intent's
    insert, not as one statement that commits before it: an intent id
    already taken is a RevisionConflictError and the step is not stored
    (the run stays at revision 1 with one intent), so the same step with a
    fresh id is appended once."""
    from desktop_app.errors import RevisionConflictError
    from desktop_app.store.protocol import Intent

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    intent = Intent("r1:send:0:0", "r1", "send", "mail", {"to": "ann"})
    pg_store.append(_cp("r1", 1, {"x": 1}), intents=[intent])
    with pytest.raises(RevisionConflictError):
        pg_store.append(_cp("r1", 2, {"x": 2}), intents=[intent])
    assert [h.revision for h in pg_store.history("r1")] == [0, 1]
    assert pg_store.latest("r1").state == {"x": 1}
    again = Intent("r1:send:1:0", "r1", "send", "mail", {"to": "bob"})
    pg_store.append(_cp("r1", 2, {"x": 2}), intents=[again])
    assert [h.revision for h in pg_store.history("r1")] == [0, 1, 2]
    assert sorted(i.intent_id for i in pg_store.intents(["pending"])) == [
        "r1:send:0:0",
        "r1:send:1:0",
    ]


def test_a_step_consuming_a_signal_another_wait_took_writes_nothing(pg_store):
    """A step that consumes a signal goes in a transaction with the
    consumption: when another run's wait took the signal first, the step is
    a RevisionConflictError saying so and is not stored (the run still
    waits at revision 1, its wait still there)."""
    from desktop_app.errors import RevisionConflictError
    from desktop_app.store.records import Wait

    signal_id = pg_store.send_signal("go", "k", {}, T0)
    for rid in ("w1", "w2"):
        pg_store.create_run(_rec(rid), _cp(rid, 0))
        wait = Wait(f"{rid}:s:0", "s", "signal", T0, name="go", key="k")
        pg_store.append(_cp(rid, 1, status="waiting", waits=(wait,)))
    pg_store.append(_cp("w1", 2, waits=()), consume=[(signal_id, "w1:s:0")])
    with pytest.raises(RevisionConflictError) as twice:
        pg_store.append(
            _cp("w2", 2, status="waiting", waits=(wait,)), consume=[(signal_id, "w2:s:0")]
        )
    assert str(twice.value) == f"signal {signal_id} was consumed by another wait first"
    assert [h.revision for h in pg_store.history("w2")] == [0, 1]
    assert pg_store.latest("w2").status == "waiting"
    assert pg_store.runs_waiting_for("signal", "go", "k") == ["w2"]


def test_a_run_whose_creation_carries_a_failing_domain_write_is_not_created(pg_store):
    """create_run with a domain write goes in a transaction with it, not as
    one statement that commits first: a write that fails is a
    DomainWriteError and leaves no run behind (nor the write's row), so the
    run is created afterwards as new, at revision 0."""
    from desktop_app.errors import CheckpointNotFoundError, DomainWriteError
    from desktop_app.store.domain import digest

    def boom(tx: Any) -> None:
        tx.execute(
            "INSERT INTO digest_files(run_id, path, kind, size_bytes) VALUES (?,?,?,?)",
            ("r1", "x", "text", 1),
        )
        raise RuntimeError("domain failure")

    with pytest.raises(DomainWriteError, match="RuntimeError: domain failure"):
        pg_store.create_run(_rec("r1"), _cp("r1", 0, {"x": 0}), writes=[boom])
    with pytest.raises(CheckpointNotFoundError):
        pg_store.get_run("r1")
    assert pg_store.query(digest.files_of_run("r1")) == []
    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"x": 0}))
    assert [h.revision for h in pg_store.history("r1")] == [0]
