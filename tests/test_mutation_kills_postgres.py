"""PostgresCheckpointStore behaviour the conformance suite does not pin:
the schema helpers the CLI calls (``db apply``/``db status``/the check at
start), what the messages say and leave out, and the store's own reads.
Every test runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

import math
import re
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from desktop_app.errors import DatabaseOpenError, SchemaMissingError
from desktop_app.store import migrations
from tests.pg_support import with_address

pytestmark = pytest.mark.postgres


def closed_port_url(url: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return with_address(url, host="127.0.0.1", port=port, password="hunter2")


def test_verify_refuses_an_empty_database_naming_the_url_without_its_password(pg_empty_url):
    from desktop_app.store.postgres.store import verify_postgres_schema

    url = with_address(pg_empty_url, password="hunter2")
    with pytest.raises(SchemaMissingError) as caught:
        verify_postgres_schema(url)
    message = str(caught.value)
    files = migrations.schema_files(dialect="postgres")
    assert f"has no Flowdesk schema yet ({len(files)} schema files to apply)" in message
    parts = urlsplit(url)
    # the hint runs as printed: the password left out (libpq finds it), not masked
    shown = f"{parts.scheme}://{parts.username}@{parts.hostname}:{parts.port}{parts.path}"
    assert f"run `flowdesk --db {shown} db apply` to apply it" in message
    assert "PGPASSWORD or ~/.pgpass" in message
    assert "hunter2" not in message


def test_verify_accepts_an_applied_database(pg_url):
    from desktop_app.store.postgres.store import verify_postgres_schema

    assert verify_postgres_schema(pg_url) is None


@pytest.mark.parametrize("helper", ["verify", "status", "apply"])
def test_schema_helpers_on_an_unreachable_server_say_so_without_the_password(pg_url, helper):
    from desktop_app.store.postgres import store as postgres

    call = {
        "verify": postgres.verify_postgres_schema,
        "status": postgres.postgres_schema_status,
        "apply": postgres.apply_postgres_schema,
    }[helper]
    with pytest.raises(DatabaseOpenError) as caught:
        call(closed_port_url(pg_url))
    message = str(caught.value)
    assert message.startswith("cannot connect to PostgreSQL at postgresql://")
    assert ":***@127.0.0.1:" in message and "hunter2" not in message
    # what to check, word for word, after the driver's reason
    advice = (
        " Check the URL, that the server is up, and the role's password (~/.pgpass or PGPASSWORD)."
    )
    assert message.endswith(advice)
    # libpq's own text ends a sentence ("?" or "."): no stop added after it
    assert "?." not in message and ".." not in message
    assert message.removesuffix(advice)[-1] in ".?!"


def test_status_lists_every_file_pending_then_applied(pg_empty_url):
    from desktop_app.store.postgres.store import apply_postgres_schema, postgres_schema_status

    files = migrations.schema_files(dialect="postgres")
    keys = [f.key for f in files]
    before = postgres_schema_status(pg_empty_url)
    assert [s.key for s in before] == keys
    assert {s.state for s in before} == {"pending"}
    assert all(s.applied_at is None for s in before)
    applied = apply_postgres_schema(pg_empty_url)
    assert [f.key for f in applied] == keys
    after = postgres_schema_status(pg_empty_url)
    assert [s.key for s in after] == keys
    assert {s.state for s in after} == {"applied"}
    assert all(isinstance(s.applied_at, float) for s in after)


def test_each_write_notifies_its_channel_with_scope_and_run(pg_url):
    """The payloads ``postgres_notify`` documents: ``scope:run_id`` for a
    run's change, ``scope:*`` for a signal or event (any run may want it)."""
    import psycopg

    from desktop_app.store.postgres.notify import CHANGES, WAKE
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.protocol import Checkpoint, RunRecord

    heard = psycopg.connect(pg_url, autocommit=True)
    heard.execute(f"LISTEN {WAKE}")
    heard.execute(f"LISTEN {CHANGES}")
    store = open_postgres_store(pg_url, scope="team")

    def expect(channel: str, payload: str) -> None:
        got = []
        for n in heard.notifies(timeout=10):
            got.append((n.channel, n.payload))
            if (n.channel, n.payload) == (channel, payload):
                return
        raise AssertionError(f"no {channel} {payload!r}; heard {got}")

    def cp(rev: int, status: Any) -> Checkpoint:
        return Checkpoint("r1", rev, status, {}, {}, ("a",), 1000.0 + rev)

    try:
        store.create_run(RunRecord("r1", "f", "v1", "running", 0, 1000.0, 1000.0), cp(0, "running"))
        expect(WAKE, "team:r1")
        store.append(cp(1, "waiting"))  # a status the runs list shows
        expect(CHANGES, "team:r1")
        store.update_latest("r1", lambda c: c.evolve(revision=2, status="canceled"))
        expect(WAKE, "team:r1")
        store.release("r1", "nobody")
        expect(WAKE, "team:r1")
        store.send_signal("go", "k", {}, 1000.0)
        expect(WAKE, "team:*")
        store.publish_event("done", {}, 1000.0)
        expect(WAKE, "team:*")
    finally:
        store.close()
        heard.close()


def test_watching_changes_without_a_listening_session_is_a_store_error(pg_url):
    from desktop_app.errors import StoreError
    from desktop_app.store.postgres.store import open_postgres_store
    from tests.pg_proxy import CommitDropProxy

    proxy = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    parts = urlsplit(pg_url)
    url = with_address(pg_url, host="127.0.0.1", port=proxy.port, password="hunter2")
    store = open_postgres_store(url)
    try:
        proxy.refuse()  # the pool's connections carry on; a new session cannot start
        with pytest.raises(StoreError) as caught:
            store.watch_changes(lambda: None)
        message = str(caught.value)
        assert message.startswith(
            f"cannot listen for changes on postgresql://{parts.username}:***@"
        )
        assert "hunter2" not in message
        # a store built on a pool directly has no URL to show
        from desktop_app.store.postgres.store import PostgresCheckpointStore

        bare = PostgresCheckpointStore(store.pool)
        try:
            with pytest.raises(StoreError, match=r"^cannot listen for changes on the server: "):
                bare.watch_changes(lambda: None)
        finally:
            bare.notifier.close()  # the pool is store's, closed below
    finally:
        store.close()
        proxy.close()


def test_a_failing_change_callback_is_logged_and_the_watcher_carries_on(pg_url, caplog):
    import threading

    from desktop_app.store.postgres.store import open_postgres_store

    watching = open_postgres_store(pg_url)
    writer = open_postgres_store(pg_url)
    first, second = threading.Event(), threading.Event()
    calls = 0

    def on_change() -> None:
        nonlocal calls
        calls += 1
        if not first.is_set():
            first.set()
            raise RuntimeError("the app's refresh failed")
        second.set()

    before = set(threading.enumerate())
    stop = watching.watch_changes(on_change)
    (watcher,) = [t for t in set(threading.enumerate()) - before if t.name == "flowdesk-watch"]
    try:
        writer.publish_event("one", {}, 1000.0)
        assert first.wait(30), "no change pushed"
        writer.publish_event("two", {}, 1000.0)
        assert second.wait(30), "the watcher stopped after the callback failed"
        (failed,) = [r for r in caplog.records if r.exc_info]
        assert failed.getMessage() == "flowdesk: change callback failed"
        assert "the app's refresh failed" in caplog.text
        assert watcher.daemon  # an app that forgets to stop it can still exit
        # Nothing written, nothing called: the watcher wakes every second to
        # check for stop, which is not a change (a negative window; passing
        # never depends on the machine's speed).
        calls_before = calls
        time.sleep(1.5)
        assert calls == calls_before
    finally:
        stop()
        watching.close()
        writer.close()
    assert not watcher.is_alive()


def _rec(run_id: str, t: float = 1000.0) -> Any:
    from desktop_app.store.protocol import RunRecord

    return RunRecord(run_id, "f", "v1", "running", 0, t, t)


def _cp(run_id: str, rev: int, status: Any = "running", state: Any = None, **kw: Any) -> Any:
    from desktop_app.store.protocol import Checkpoint

    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), 1000.0 + rev, **kw)


def test_claim_measures_the_lease_from_the_callers_now(pg_store):
    """``claim(run, lease, now)``: the lease lasts ``expires_at - now`` seconds
    of database time (the caller's clock only measures the length)."""
    from desktop_app.store.protocol import Lease

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    before = pg_store.now()
    got = pg_store.claim("r1", Lease("a", 1030.0, 1000.0), 1010.0)
    after = pg_store.now()
    assert got.lease_expires_at is not None
    assert before + 20.0 <= got.lease_expires_at <= after + 20.0


def test_claim_runnable_on_the_database_clock(pg_store):
    """Without ``now`` every lease decision uses ``flowdesk_now()``: the new
    lease's expiry, an expired lease taken over, a passed deadline woken."""
    from desktop_app.store.protocol import Lease, Wait

    now = pg_store.now()
    pg_store.create_run(_rec("fresh"), _cp("fresh", 0))
    pg_store.create_run(_rec("stale"), _cp("stale", 0))
    pg_store.claim("stale", Lease("dead", 1000.0, 1000.0), 1000.0)  # a lease of 0 s
    pg_store.create_run(_rec("held"), _cp("held", 0))
    pg_store.claim("held", Lease("live", 1600.0, 1000.0), 1000.0)  # ten minutes from now
    pg_store.create_run(_rec("timer"), _cp("timer", 0))
    due = Wait("timer:t:0", "t", "timer", 1000.0, deadline_at=now - 1.0)
    pg_store.append(_cp("timer", 1, status="waiting", waits=(due,)))
    pg_store.create_run(_rec("later"), _cp("later", 0))
    not_yet = Wait("later:t:0", "t", "timer", 1000.0, deadline_at=now + 600.0)
    pg_store.append(_cp("later", 1, status="waiting", waits=(not_yet,)))
    got = pg_store.claim_runnable("me", 30.0)
    after = pg_store.now()
    assert sorted(r.run_id for r in got) == ["fresh", "stale", "timer"]
    for run in got:
        assert run.lease_owner == "me"
        assert now + 30.0 <= run.lease_expires_at <= after + 30.0


def test_claim_runnable_with_a_given_now_ignores_the_database_clock(pg_store):
    """With ``now`` (an injected clock), a deadline passed only by the
    database's clock is not due yet."""
    from desktop_app.store.protocol import Wait

    pg_store.create_run(_rec("timer"), _cp("timer", 0))
    w = Wait("timer:t:0", "t", "timer", 1000.0, deadline_at=2000.0)
    pg_store.append(_cp("timer", 1, status="waiting", waits=(w,)))
    assert pg_store.claim_runnable("me", 30.0, now=1500.0) == []
    assert [r.run_id for r in pg_store.claim_runnable("me", 30.0, now=2000.0)] == ["timer"]


def test_claim_intents_on_the_database_clock(pg_url, pg_store):
    """Without ``now``, an intent's claim runs ``ttl_s`` seconds of database
    time: a 0 s claim is free again at once, a 60 s one is not."""
    import psycopg

    from desktop_app.store.protocol import Intent

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    keys = ["r1:send:0:0", "r1:send:0:1"]
    pg_store.append(_cp("r1", 1), intents=[Intent(k, "r1", "send", "dest", {}) for k in keys])
    before = pg_store.now()
    assert [i.intent_id for i in pg_store.claim_intents("a", 60.0, 1)] == keys[:1]
    assert [i.intent_id for i in pg_store.claim_intents("b", 0.0, 1)] == keys[1:]
    after = pg_store.now()
    with psycopg.connect(pg_url) as conn:
        rows = dict(
            conn.execute(
                "SELECT claimed_by, extract(epoch from claim_expires_at)::float8 "
                "FROM flowdesk.outbox ORDER BY intent_id"
            ).fetchall()
        )
    assert before + 60.0 <= rows["a"] <= after + 60.0
    assert before <= rows["b"] <= after
    # b's claim of 0 s has expired by the database clock; a's has not
    assert [i.intent_id for i in pg_store.claim_intents("c", 60.0, 10)] == keys[1:]


def test_claim_for_worker_with_a_zero_ttl_leases_for_no_time(pg_store):
    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    before = pg_store.now()
    (got,) = pg_store.claim_for_worker("w", 0.0, 1)
    assert before <= got.lease_expires_at <= pg_store.now()
    assert [r.run_id for r in pg_store.claim_for_worker("v", 30.0, 1)] == ["r1"]


def test_an_append_under_a_takeover_lease_runs_its_ttl_from_the_wall_clock(pg_store):
    """A lease issued at ``math.inf`` (the engine taking over from an owner it
    knows is dead) measures its length from ``time.time()``; one already
    past is 0 s long."""
    import math

    from desktop_app.store.protocol import Lease

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    before = pg_store.now()
    pg_store.append(_cp("r1", 1), lease=Lease("me", time.time() + 30.0, math.inf))
    leased = pg_store.get_run("r1").lease_expires_at
    assert before + 29.0 <= leased <= pg_store.now() + 30.0
    before = pg_store.now()
    pg_store.append(_cp("r1", 2), lease=Lease("me", time.time() - 5.0, math.inf))
    assert before <= pg_store.get_run("r1").lease_expires_at <= pg_store.now()


def test_server_time_is_the_database_clock_and_a_round_trip(pg_store):
    t0 = time.time()
    server, sent, answered = pg_store.server_time()
    t1 = time.time()
    assert t0 <= sent <= answered <= t1
    assert t0 - 1.0 <= server <= t1 + 1.0  # one machine: the two clocks agree


def test_a_listener_session_is_named_in_pg_stat_activity(pg_url, pg_store):
    import psycopg

    from desktop_app.store.postgres.notify import WAKE

    listener = pg_store.listener((WAKE,))
    try:
        with psycopg.connect(pg_url) as conn:
            (name,) = conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE pid=%s",
                (listener.backend_pid,),
            ).fetchone()
        assert name == "flowdesk listener"
    finally:
        listener.close()


def test_a_run_created_under_a_lease_keeps_it_for_its_length(pg_store):
    from desktop_app.store.protocol import RunRecord

    before = pg_store.now()
    run = RunRecord("r1", "f", "v1", "running", 0, 1000.0, 1000.0,
                    lease_owner="me", lease_expires_at=1030.0)  # fmt: skip
    pg_store.create_run(run, _cp("r1", 0))
    got = pg_store.get_run("r1")
    assert got.lease_owner == "me"
    assert before + 30.0 <= got.lease_expires_at <= pg_store.now() + 30.0
    owner_only = RunRecord("r2", "f", "v1", "running", 0, 1000.0, 1000.0, lease_owner="me")
    pg_store.create_run(owner_only, _cp("r2", 0))  # no expiry: no lease
    assert (pg_store.get_run("r2").lease_owner, pg_store.get_run("r2").lease_expires_at) == (
        None,
        None,
    )


def test_a_pending_append_under_a_lease_keeps_the_lease(pg_store):
    from desktop_app.store.protocol import Lease

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    pg_store.claim("r1", Lease("me", 1030.0, 1000.0), 1000.0)
    pg_store.append(_cp("r1", 1, status="pending"), lease=Lease("me", 1060.0, 1000.0))
    assert pg_store.get_run("r1").lease_owner == "me"


def test_conflict_and_takeover_messages(pg_url, pg_store):
    from desktop_app.errors import LeaseLostError, RevisionConflictError
    from desktop_app.store.protocol import Lease, Wait

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    with pytest.raises(RevisionConflictError) as caught:
        pg_store.append(_cp("r1", 5))
    assert str(caught.value) == (
        "run r1: revision 5 conflicts with the stored latest revision 0; another writer got "
        "there first. Reload the run and try again."
    )
    pg_store.claim("r1", Lease("a", 1000.0, 1000.0), 1000.0)  # 0 s: expired at once
    pg_store.claim("r1", Lease("b", 1030.0, 1000.0, takes_over="a"), 1000.0)
    with pytest.raises(LeaseLostError) as lost:
        pg_store.append(_cp("r1", 1), lease=Lease("a", 1060.0, 1000.0))
    assert str(lost.value) == (
        "run r1 is held by b, not by this process (a): it took the run over; this process "
        "stops executing it."
    )
    with pytest.raises(LeaseLostError) as late:  # a second taker of the replaced owner
        pg_store.append(_cp("r1", 1), lease=Lease("c", 1060.0, math.inf, takes_over="a"))
    assert str(late.value) == (
        "run r1 is held by b: another process took it over from a first; this process runs "
        "nothing of it."
    )
    signal_id = pg_store.send_signal("go", "k", {}, 1000.0)
    for rid in ("w1", "w2"):
        pg_store.create_run(_rec(rid), _cp(rid, 0))
        wait = Wait(f"{rid}:s:0", "s", "signal", 1000.0, name="go", key="k")
        pg_store.append(_cp(rid, 1, status="waiting", waits=(wait,)))
    pg_store.append(_cp("w1", 2), consume=[(signal_id, "w1:s:0")])
    with pytest.raises(RevisionConflictError) as twice:
        pg_store.append(_cp("w2", 2), consume=[(signal_id, "w2:s:0")])
    assert str(twice.value) == f"signal {signal_id} was consumed by another wait first"


def test_now_is_the_database_clock_even_when_it_is_off(pg_url):
    from psycopg_pool import ConnectionPool

    from desktop_app.store.postgres import store as postgres

    kwargs = postgres._connection_kwargs("skewed")
    # search_path as a startup option: this pool has no configure (test-only offset)
    kwargs["options"] = "-c search_path=flowdesk -c flowdesk.time_offset_s=3600"
    pool: ConnectionPool[Any] = ConnectionPool(
        pg_url, min_size=1, max_size=2, kwargs=kwargs, open=True
    )
    skewed = postgres.PostgresCheckpointStore(pool)
    try:
        t0 = time.time()
        now = skewed.now()
        assert t0 + 3600.0 - 1.0 <= now <= time.time() + 3600.0 + 1.0
    finally:
        skewed.close()


def test_each_kind_of_append_wakes_workers(pg_url):
    """``flowdesk_wake`` after an append that hands work out: outbox intents,
    a run set back to pending, new waits (a deadline to schedule)."""
    import psycopg

    from desktop_app.store.postgres.notify import WAKE
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.protocol import Intent, Wait

    heard = psycopg.connect(pg_url, autocommit=True)
    heard.execute(f"LISTEN {WAKE}")
    store = open_postgres_store(pg_url)

    def expect(payload: str) -> None:
        for n in heard.notifies(timeout=10):
            if n.payload == payload:
                return
        raise AssertionError(f"no {WAKE} {payload!r}")

    try:
        for rid in ("i", "p", "w"):
            store.create_run(_rec(rid), _cp(rid, 0))
            expect(f"default:{rid}")
        store.append(_cp("i", 1), intents=[Intent("i:send:0:0", "i", "send", "dest", {})])
        expect("default:i")
        store.append(_cp("p", 1, status="pending"))
        expect("default:p")
        wait = Wait("w:t:0", "t", "timer", 1000.0, deadline_at=2000.0)
        store.append(_cp("w", 1, status="waiting", waits=(wait,)))
        expect("default:w")
    finally:
        store.close()
        heard.close()


def test_an_append_that_hands_out_nothing_wakes_no_worker(pg_url):
    """A step that changes neither the waits nor the status sends nothing; a
    new wait wakes workers; a status change without one is only shown. Each
    append is followed by a marker write that always notifies, and what
    arrived for the run before the marker is what its append sent (one
    notifier thread sends in commit order), so no time window is needed."""
    import psycopg

    from desktop_app.store.postgres.notify import CHANGES, WAKE
    from desktop_app.store.postgres.store import open_postgres_store
    from desktop_app.store.protocol import Wait

    heard = psycopg.connect(pg_url, autocommit=True)
    heard.execute(f"LISTEN {WAKE}")
    heard.execute(f"LISTEN {CHANGES}")
    store = open_postgres_store(pg_url)
    markers = iter(range(100))

    def sent_for_n() -> set[str]:
        marker = f"z{next(markers)}"  # sorts after "n" within one batch
        store.create_run(_rec(marker), _cp(marker, 0))
        got: set[str] = set()
        for note in heard.notifies(timeout=10):
            if note.payload == f"default:{marker}":
                return got
            if note.payload == "default:n":
                got.add(note.channel)
        raise AssertionError(f"the marker {marker} never arrived")

    try:
        store.create_run(_rec("n"), _cp("n", 0))
        assert sent_for_n() == {WAKE}
        store.append(_cp("n", 1, state={"i": 1}))
        assert sent_for_n() == set(), "a plain step"
        wait = Wait("n:t:0", "t", "timer", 1000.0, deadline_at=2000.0)
        store.append(_cp("n", 2, status="waiting", waits=(wait,)))
        assert sent_for_n() == {WAKE}, "a new wait"
        store.append(_cp("n", 3, status="waiting", state={"i": 2}, waits=(wait,)))
        assert sent_for_n() == set(), "the same wait again"
        store.append(_cp("n", 4, state={"i": 3}))
        assert sent_for_n() == {CHANGES}, "waits gone, status back to running"
    finally:
        store.close()
        heard.close()


def test_a_checkpoint_error_with_nul_is_kept_readable(pg_url, pg_store):
    from desktop_app.store.postgres.store import open_postgres_store

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    pg_store.append(_cp("r1", 1, status="failed", error="bad\x00byte"))
    fresh = open_postgres_store(pg_url)  # no cache: read back from the row
    try:
        assert fresh.latest("r1").error == "bad\ufffdbyte"
    finally:
        fresh.close()


def test_an_unstorable_state_names_the_codec_error(pg_store):
    from desktop_app.errors import StateNotStorableError

    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    with pytest.raises(StateNotStorableError) as caught:
        pg_store.append(_cp("r1", 1, state={"s": "\ud800"}))
    assert caught.value.field == "s"
    assert "UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800'" in str(caught.value)


def test_unique_violations_become_conflicts_with_their_messages(pg_store):
    from desktop_app.errors import DuplicateFlowKeyError, RevisionConflictError
    from desktop_app.store.protocol import Intent, RunRecord

    keyed = RunRecord("r1", "f", "v1", "running", 0, 1000.0, 1000.0, flow_key="order-7")
    pg_store.create_run(keyed, _cp("r1", 0))
    again = RunRecord("r2", "f", "v1", "running", 0, 1000.0, 1000.0, flow_key="order-7")
    with pytest.raises(DuplicateFlowKeyError) as dup:
        pg_store.create_run(again, _cp("r2", 0))
    assert str(dup.value) == "a live run of 'f' with flow key 'order-7' exists"
    with pytest.raises(RevisionConflictError) as exists:
        pg_store.create_run(_rec("r1"), _cp("r1", 0))
    assert str(exists.value) == "run r1 already exists; pick another run id"
    intent = Intent("r1:send:0:0", "r1", "send", "dest", {})
    pg_store.append(_cp("r1", 1), intents=[intent])
    with pytest.raises(RevisionConflictError) as clash:
        pg_store.append(_cp("r1", 2), intents=[intent])
    assert str(clash.value) == (
        "run r1: revision 2 (or one of its outbox intents) was already saved by another writer"
    )


def test_a_domain_write_breaking_a_unique_key_in_create_run_is_not_a_run_conflict(pg_store):
    """Only the run's own keys become conflicts; a domain table's unique
    violation is the domain write's error, and nothing is created."""
    from desktop_app.errors import DomainWriteError

    def twice(tx: Any) -> None:
        for _ in range(2):
            tx.execute(
                "INSERT INTO digest_files(run_id, path, kind, size_bytes) "
                "VALUES (?, 'a.md', 'markdown', 1)",
                ["r1"],
            )

    with pytest.raises(DomainWriteError) as caught:
        pg_store.create_run(_rec("r1"), _cp("r1", 0), writes=[twice])
    assert (caught.value.table, caught.value.constraint) == ("digest_files", "digest_files_pkey")
    assert "SQLSTATE 23505" in str(caught.value)
    assert pg_store.list_runs() == []


def _raising(sqlstate: str, calls: list[int]) -> Any:
    """A domain write that fails on the server with ``sqlstate`` each time."""

    def op(tx: Any) -> None:
        calls.append(1)
        assert len(calls) <= 10, "retried without end"
        tx.execute(f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$")

    return op


def test_a_serialization_failure_is_retried_four_times_then_named(pg_store):
    from desktop_app.errors import StoreError
    from desktop_app.store.postgres.store import MAX_ATTEMPTS

    calls: list[int] = []
    with pytest.raises(StoreError) as caught:
        pg_store.write(_raising("40001", calls))
    assert len(calls) == MAX_ATTEMPTS
    assert f"({pg_store.where})" in str(caught.value)
    assert "40001" in str(caught.value) or "serializ" in str(caught.value).lower()


def test_an_error_that_is_not_transient_is_not_retried(pg_store):
    from desktop_app.errors import StoreError

    calls: list[int] = []
    with pytest.raises(StoreError) as caught:
        pg_store.write(_raising("22012", calls))  # division_by_zero
    assert len(calls) == 1
    assert f"({pg_store.where})" in str(caught.value)


def test_each_own_commit_changes_data_version_even_one_that_changed_nothing(pg_store):
    """A write transaction that touched no row takes no transaction id, so
    the server's snapshot does not move; the store's own count of commits
    still changes ``data_version`` each time."""
    seen = [pg_store.data_version()]
    for _ in range(3):
        assert pg_store.mark_intent("no-such-intent", "sent", 1000.0) is False
        seen.append(pg_store.data_version())
    assert len(set(seen)) == 4, seen


def test_domain_sql_reports_the_rows_a_statement_changed_even_none(pg_store):
    def changes(tx: Any) -> tuple[int, int, int]:
        tx.execute("CREATE TEMP TABLE t(x int)")
        none = tx.execute("UPDATE t SET x = 1 WHERE false").rowcount
        two = tx.execute("INSERT INTO t VALUES (1), (2)").rowcount
        every = tx.execute("UPDATE t SET x = x + 1").rowcount
        return none, two, every

    assert pg_store.write(changes) == (0, 2, 2)


def test_store_connections_carry_their_settings(pg_url, pg_store, caplog):
    """Keepalives find a dead server in about 25 s (10 idle + 3 probes 5 s
    apart), a connect gives up after 10 s, every session is named in
    pg_stat_activity, and the pool holds ``max_connections`` (at least 2)."""
    import logging
    import warnings

    from desktop_app.store.postgres.store import open_postgres_store

    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # e.g. a pool opened implicitly
        store = open_postgres_store(pg_url)
    small = open_postgres_store(pg_url, max_connections=1)
    try:
        with store.pool.connection() as conn:
            params = conn.info.get_parameters()
            name = conn.execute("SELECT current_setting('application_name')").fetchone()
        assert {k: params.get(k) for k in ("keepalives", "keepalives_idle")} == {
            "keepalives": "1",
            "keepalives_idle": "10",
        }
        assert (params.get("keepalives_interval"), params.get("keepalives_count")) == ("5", "3")
        assert params.get("connect_timeout") == "10"
        assert name == ("flowdesk",)
        assert (store.pool.name, store.pool.max_size, small.pool.max_size) == ("flowdesk", 8, 2)
        # the schema check at open hands its connection back outside a transaction
        assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
    finally:
        store.close()
        small.close()


def test_opening_a_store_on_an_empty_database_names_it_and_the_command(pg_empty_url):
    from desktop_app.store.postgres.store import open_postgres_store

    url = with_address(pg_empty_url, password="hunter2")
    with pytest.raises(SchemaMissingError) as caught:
        open_postgres_store(url)
    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.username}@{parts.hostname}:{parts.port}{parts.path}"
    assert f"run `flowdesk --db {shown} db apply`" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_failing_domain_write_hands_its_connection_back_clean(pg_store, caplog):
    """The store rolls back itself; the pool never has to (psycopg_pool warns
    when it must roll back a connection returned inside a transaction)."""
    import logging

    caplog.set_level(logging.WARNING, logger="psycopg.pool")

    def broken(tx: Any) -> None:
        tx.execute("SELECT 1")
        raise ValueError("the write's own check failed")

    for _ in range(3):
        with pytest.raises(ValueError, match="own check failed"):
            pg_store.write(broken)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


def test_a_constraint_checked_at_commit_is_its_own_error_and_not_retried(pg_store):
    """A deferred foreign key fails at COMMIT, on a healthy connection: that
    is the statement's error (SQLSTATE 23503), never a lost COMMIT."""
    from desktop_app.errors import StoreError

    calls: list[int] = []

    def orphan(tx: Any) -> None:
        calls.append(1)
        tx.execute("CREATE TEMP TABLE p(id int PRIMARY KEY) ON COMMIT DROP")
        tx.execute(
            "CREATE TEMP TABLE c(pid int REFERENCES p DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP"
        )
        tx.execute("INSERT INTO c VALUES (1)")

    with pytest.raises(StoreError) as caught:
        pg_store.write(orphan)
    assert calls == [1]
    assert "23503" in str(caught.value)
    assert "COMMIT" not in str(caught.value)


def test_a_schema_dropped_under_an_open_store_names_a_db_apply_that_runs_as_printed(pg_url):
    """The schema went away after the store opened (a restore, a DROP): the
    next read's hint used to read ``--db postgresql://... db apply``, a
    command no one can run. It now names this database (its password left
    out, libpq finds it) and runs as printed."""
    import os
    import shlex

    from desktop_app.store.postgres.store import open_postgres_store
    from tests.cli_support import as_printed

    url = with_address(pg_url, password="hunter2")
    store = open_postgres_store(url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP SCHEMA flowdesk CASCADE")
        with pytest.raises(SchemaMissingError) as caught:
            store.list_runs()
        message = str(caught.value)
        assert "hunter2" not in message and "postgresql://..." not in message
        command = re.search(r"run `(flowdesk --db \S+ db apply)` to apply it", message)
        assert command is not None, message
        # no password in the command, not even a mask: a printed "***" would
        # be sent as the password by whoever runs it
        printed_url = shlex.split(command.group(1))[2]
        assert urlsplit(printed_url).password is None, printed_url
        applied = as_printed(command.group(1), dict(os.environ))
        assert applied.returncode == 0, applied.stderr
        assert store.list_runs() == []  # the schema is back: the same store reads again
    finally:
        store.close()
