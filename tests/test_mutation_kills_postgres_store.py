"""PostgresCheckpointStore behaviour the conformance suite and
``tests/test_mutation_kills_postgres.py`` do not pin, found by the mutation
run of ``store/postgres/store.py`` (issue 29): a one-request batch that
carries everything a step can, batch requests built on revisions this store
holds stale or never read, the errors a batch puts in a request's slot or
retries the whole batch for, the outbox withdrawn on the database clock, and
domain queries refused of their own making. Every test runs on a real server
(``tests/pg_support.py``); the prune test runs on all three stores."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from desktop_app.errors import QueryRefusedError, RevisionConflictError, StoreError
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, Intent, Lease, RunRecord, StepRecord, Wait
from tests.contract.conftest import STORE_KINDS, open_kind

T0 = 1000.0


def _rec(run_id: str) -> RunRecord:
    return RunRecord(run_id, "f", "v1", "running", 0, T0, T0)


@pytest.fixture(params=STORE_KINDS)
def any_store(request: Any, tmp_path: Path) -> Iterator[Any]:
    """Each of the three stores, as the contract suite makes them."""
    yield from open_kind(request, tmp_path)


def _cp(run_id: str, rev: int, state: Any = None, status: Any = "running", **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, status, state or {}, {}, ("a",), T0 + rev, **kw)


# -- prune ---------------------------------------------------------------------


def test_pruning_a_waiting_run_keeps_the_waits_of_its_latest_revision(any_store):
    """Pruning rewrites the oldest kept revision as a snapshot; the run's
    waits are its latest revision's and must stay exactly those. Before the
    fix both SQL stores wrote the kept revision's waits again: ``prune(run,
    1)`` on a waiting run failed on the waits' primary key (a StoreError,
    nothing pruned), and keeping an older revision brought back the waits the
    run had left, here a timer that then fired for a run that no longer
    waits on it."""
    s = any_store
    go = Wait("w1:s:0", "s", "signal", T0, name="go", key="k")
    s.create_run(_rec("w1"), _cp("w1", 0))
    s.append(_cp("w1", 1, {"n": 1}, status="waiting", waits=(go,)))
    s.append(_cp("w1", 2, {"n": 2}, status="waiting", waits=(go,)))
    assert s.prune("w1", 1) == 2
    assert s.runs_waiting_for("signal", "go", "k") == ["w1"]
    assert s.latest("w1").waits == (go,)

    timer = Wait("w2:t:0", "t", "timer", T0, deadline_at=T0 + 5.0)
    later = Wait("w2:s:0", "s", "signal", T0 + 3, name="later", key="k")
    s.create_run(_rec("w2"), _cp("w2", 0))
    s.append(_cp("w2", 1, status="waiting", waits=(timer,)))
    s.append(_cp("w2", 2, status="waiting", waits=(timer,), error="held"))
    s.append(_cp("w2", 3, status="waiting", waits=(later,)))
    assert s.prune("w2", 2) == 2
    assert s.due_waits(T0 + 60.0) == []
    assert s.runs_waiting_for("signal", "later", "k") == ["w2"]
    kept = s.get_checkpoint("w2", 2)
    assert (kept.waits, kept.error, dict(kept.state)) == ((timer,), "held", {})
    assert s.latest("w2").waits == (later,)


def test_pruning_keeps_the_oldest_kept_revision_whole(any_store):
    """The oldest kept revision, rewritten as a snapshot, reads back as it
    was: its state, its steps and its error."""
    s = any_store
    done = StepRecord("a", "failed", attempts=2, error="boom")
    s.create_run(_rec("r1"), _cp("r1", 0, {"n": 0}))
    s.append(_cp("r1", 1, {"n": 1}))
    s.append(replace(_cp("r1", 2, {"n": 2}, error="step a: boom"), steps={"a": done}))
    s.append(_cp("r1", 3, {"n": 3}, error="step a: boom"))
    assert s.prune("r1", 2) == 2
    kept = s.get_checkpoint("r1", 2)
    assert (dict(kept.state), dict(kept.steps), kept.error) == (
        {"n": 2},
        {"a": done},
        "step a: boom",
    )
    assert [i.revision for i in s.history("r1")] == [2, 3]


# -- append_batch ----------------------------------------------------------------

pg = pytest.mark.postgres


def _kv_table(store: Any) -> None:
    store.write(lambda tx: tx.execute("CREATE TABLE kv (k text PRIMARY KEY, v integer)"))


def _put(k: str, v: int) -> Any:
    return lambda tx: tx.execute("INSERT INTO kv (k, v) VALUES (?, ?)", (k, v))


def _kv(store: Any) -> dict[str, int]:
    return dict(store.query(lambda tx: tx.fetchall("SELECT k, v FROM kv ORDER BY k")))


@pg
def test_a_one_request_batch_saves_its_writes_lease_intents_and_consumed_signal(pg_store):
    """A batch of one takes no savepoint and goes through ``append``; every
    part of the request reaches it: the domain write, the lease the run is
    then held under, the outbox intent and the signal it consumes."""
    s = pg_store
    _kv_table(s)
    wait = Wait("r1:s:0", "s", "signal", T0, name="go", key="k")
    s.create_run(_rec("r1"), _cp("r1", 0))
    s.append(_cp("r1", 1, status="waiting", waits=(wait,)))
    sid = s.send_signal("go", "k", {"x": 1}, T0 + 2)
    intent = Intent("r1:s:0:0", "r1", "s", "dest", {"p": 1})
    request = AppendRequest(
        _cp("r1", 2, {"got": 1}),
        writes=[_put("r1", 1)],
        lease=Lease("me", T0 + 600.0, T0),
        intents=[intent],
        consume=[(sid, "r1:s:0")],
    )
    assert s.append_batch([request]) == [None]
    assert _kv(s) == {"r1": 1}
    assert s.get_run("r1").lease_owner == "me"
    assert [i.intent_id for i in s.intents(["pending"])] == ["r1:s:0:0"]
    assert s.next_signal("go", "k") is None  # consumed
    assert s.wakeable_runs(T0 + 60.0) == []


@pg
def test_a_batch_saves_the_step_records_and_fields_its_writers_name(pg_url, pg_store):
    """In a batch of several, ``changed_steps`` (step records) and
    ``changed_fields`` (state fields) each narrow their own comparison: what
    the writer named reads back from a store that never saw it."""
    from desktop_app.store.postgres.store import open_postgres_store

    s = pg_store
    for rid in ("r1", "r2"):
        s.create_run(_rec(rid), _cp(rid, 0, {"n": 0, "other": 1}))
    done = StepRecord("a", "completed", attempts=1, finished_at=T0 + 1)
    requests = [
        AppendRequest(
            replace(_cp(rid, 1, {"n": 1, "other": 1}), steps={"a": done}),
            changed_steps=frozenset({"a"}),
            changed_fields=frozenset({"n"}),
        )
        for rid in ("r1", "r2")
    ]
    assert s.append_batch(requests) == [None, None]
    fresh = open_postgres_store(pg_url)
    try:
        for rid in ("r1", "r2"):
            got = fresh.latest(rid)
            assert (dict(got.state), dict(got.steps)) == ({"n": 1, "other": 1}, {"a": done})
    finally:
        fresh.close()


@pg
def test_batch_requests_build_on_the_stored_revision_not_a_stale_or_failed_one(pg_url, pg_store):
    """Each request of a batch is written as a change against the revision
    stored before it: read from the database when this store's copy is stale
    (X) or missing (Y), never this store's older copy. A request built on an
    earlier request of the same batch that failed (Z: another writer saved
    revision 1 first) fails too, instead of landing on the other writer's
    revision and undoing it."""
    from desktop_app.store.postgres.store import open_postgres_store

    a, b = pg_store, open_postgres_store(pg_url)
    try:
        a.create_run(_rec("X"), _cp("X", 0, {"a": 0, "b": 0}))  # a holds revision 0
        b.append(_cp("X", 1, {"a": 1, "b": 0}))
        b.create_run(_rec("Y"), _cp("Y", 0, {"a": 0, "b": 0}))  # a never read Y
        b.append(_cp("Y", 1, {"a": 1, "b": 0}))
        a.create_run(_rec("Z"), _cp("Z", 0, {"by": "a"}))
        b.append(_cp("Z", 1, {"by": "b"}))
        got = a.append_batch(
            [
                AppendRequest(_cp("X", 2, {"a": 0, "b": 2})),
                AppendRequest(_cp("Y", 2, {"a": 0, "b": 2})),
                AppendRequest(_cp("Z", 1, {"by": "a1"})),
                AppendRequest(_cp("Z", 2, {"by": "a2"})),
            ]
        )
        assert got[:2] == [None, None]
        assert [type(e) for e in got[2:]] == [RevisionConflictError, RevisionConflictError]
        fresh = open_postgres_store(pg_url)
        try:
            assert dict(fresh.latest("X").state) == {"a": 0, "b": 2}
            assert dict(fresh.latest("Y").state) == {"a": 0, "b": 2}
            z = fresh.latest("Z")
            assert (z.revision, dict(z.state)) == (1, {"by": "b"})
        finally:
            fresh.close()
    finally:
        b.close()


def _raising_once(sqlstate: str, calls: list[int]) -> Any:
    """A domain write that fails on the server with ``sqlstate`` the first time only."""

    def op(tx: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            tx.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$"
            )
        tx.execute("INSERT INTO kv (k, v) VALUES ('r1', 1)")

    return op


@pg
@pytest.mark.parametrize("sqlstate", ["40001", "40P01", "57P01"])
def test_a_transient_failure_in_one_request_retries_the_whole_batch(pg_store, sqlstate):
    """A serialization failure, a deadlock or a lost connection in one
    request's part fails the whole transaction (PostgreSQL may have aborted
    it), which is then run again: every request is saved, none reports it."""
    s = pg_store
    _kv_table(s)
    s.create_run(_rec("r1"), _cp("r1", 0))
    s.create_run(_rec("r2"), _cp("r2", 0))
    calls: list[int] = []
    got = s.append_batch(
        [
            AppendRequest(_cp("r1", 1), writes=[_raising_once(sqlstate, calls)]),
            AppendRequest(_cp("r2", 1)),
        ]
    )
    assert got == [None, None]
    assert len(calls) == 2
    assert _kv(s) == {"r1": 1}
    assert (s.get_run("r1").revision, s.get_run("r2").revision) == (1, 1)


@pg
def test_a_server_error_in_one_request_is_its_slots_store_error_and_the_rest_saves(pg_store):
    """An error of the server (here a full disk) in one request's domain
    write rolls back that request only; its slot holds the StoreError
    ``append`` raises for it (what happened, where, what to do), not a
    psycopg error."""
    s = pg_store
    _kv_table(s)
    s.create_run(_rec("r1"), _cp("r1", 0))
    s.create_run(_rec("r2"), _cp("r2", 0))

    def full(tx: Any) -> None:
        tx.execute("DO $$ BEGIN RAISE EXCEPTION 'no space' USING ERRCODE = '53100'; END $$")

    got = s.append_batch(
        [
            AppendRequest(_cp("r1", 1), writes=[full]),
            AppendRequest(_cp("r2", 1), writes=[_put("r2", 2)]),
        ]
    )
    assert type(got[0]) is StoreError
    assert str(got[0]) == (
        f"the PostgreSQL server ({s.where}) is out of disk space; nothing was written. "
        "Free some space and resume the run."
    )
    assert got[1] is None
    assert (s.get_run("r1").revision, s.get_run("r2").revision) == (0, 1)
    assert _kv(s) == {"r2": 2}


# -- the outbox ------------------------------------------------------------------


def _open_intents(s: Any) -> list[str]:
    s.create_run(_rec("r1"), _cp("r1", 0))
    keys = ["r1:send:0:0", "r1:send:0:1", "r1:send:0:2"]
    s.append(_cp("r1", 1), intents=[Intent(k, "r1", "send", "dest", {}) for k in keys])
    return keys


@pg
def test_withdrawing_judges_claims_by_the_database_clock(pg_store):
    """Without ``now``, a ``sending`` intent is taken back when its claim
    expired by the database clock (a claim of 0 s), or its dispatcher is
    presumed dead; one a live dispatcher holds stays in flight."""
    s = pg_store
    keys = _open_intents(s)
    for owner, ttl in (("live", 600.0), ("dead", 600.0), ("gone", 0.0)):
        (claimed,) = s.claim_intents(owner, ttl, 1)
        assert s.mark_intent(claimed.intent_id, "sending", T0, expect="pending")
    got = s.withdraw_intents("r1", "cancelled", presumed_dead=lambda o: o == "dead")
    assert sorted(i.intent_id for i in got.withdrawn) == keys[1:]
    assert [i.intent_id for i in got.in_flight] == keys[:1]
    assert [i.last_error for i in s.intents(["failed"])] == ["cancelled", "cancelled"]


@pg
def test_withdrawing_at_a_given_time_judges_claims_at_that_time(pg_store):
    """With ``now``, claims are judged at that time, not the database's: a
    claim that expired by the database clock is still live at a time before
    it."""
    s = pg_store
    keys = _open_intents(s)
    (claimed,) = s.claim_intents("gone", 0.0, 1)
    assert s.mark_intent(claimed.intent_id, "sending", T0, expect="pending")
    got = s.withdraw_intents("r1", "cancelled", now=s.now() - 3600.0)
    assert [i.intent_id for i in got.in_flight] == [keys[0]]
    assert sorted(i.intent_id for i in got.withdrawn) == keys[1:]


# -- query -----------------------------------------------------------------------


@pg
def test_a_query_that_fails_on_its_own_data_is_refused_naming_the_sqlstate(pg_store):
    """A domain query that fails of its own making (data the server cannot
    take, SQLSTATE class 22; a value its domain's check refuses, class 23)
    is a QueryRefusedError with the server's words, not a StoreError."""
    s = pg_store
    s.write(lambda tx: tx.execute("CREATE DOMAIN positive AS integer CHECK (VALUE > 0)"))
    with pytest.raises(QueryRefusedError) as caught:
        s.query(lambda tx: tx.fetchone("SELECT 1 / 0"))
    assert str(caught.value) == "PostgreSQL refused the query (SQLSTATE 22012): division by zero"
    with pytest.raises(QueryRefusedError) as caught:
        s.query(lambda tx: tx.fetchone("SELECT CAST(-1 AS positive)"))
    assert str(caught.value).startswith("PostgreSQL refused the query (SQLSTATE 23514): ")
    assert "positive" in str(caught.value)
    assert s.query(lambda tx: tx.fetchone("SELECT CAST(2 AS positive)")) == (2,)


@pg
def test_a_batch_notifies_what_each_saved_request_hands_out(pg_url):
    """After a batch, each saved request notifies as its ``append`` would:
    outbox intents, a run set back to pending and new waits wake workers
    (``flowdesk_wake``), a new status alone is only shown
    (``flowdesk_changes``, also when the run's waits are gone), a plain
    step and a request that failed send
    nothing, and a failed request first does not silence the ones after it.
    A marker run created after the batch, then given a new status, notifies
    on both channels, and what arrived for each run before it is what the
    batch sent (one notifier thread sends in commit order, each channel's
    payloads sorted), so no time window is needed."""
    import psycopg

    from desktop_app.store.postgres.notify import CHANGES, WAKE
    from desktop_app.store.postgres.store import open_postgres_store

    heard = psycopg.connect(pg_url, autocommit=True)
    heard.execute(f"LISTEN {WAKE}")
    heard.execute(f"LISTEN {CHANGES}")
    store = open_postgres_store(pg_url)
    markers = iter(range(100))

    def sent() -> dict[str, set[str]]:
        # on both channels: a new run (wake), then a new status (shown)
        marker = f"z{next(markers)}"  # sorts after the runs within one batch
        store.create_run(_rec(marker), _cp(marker, 0))
        store.append(_cp(marker, 1, status="waiting"))
        got: dict[str, set[str]] = {}
        for note in heard.notifies(timeout=10):
            got.setdefault(note.payload.removeprefix("default:"), set()).add(note.channel)
            if got.get(marker) == {WAKE, CHANGES}:
                del got[marker]
                return got
        raise AssertionError(f"the marker {marker} never arrived")

    try:
        runs = ("a", "b", "c", "d", "e", "f", "g", "h")
        for rid in runs:
            store.create_run(_rec(rid), _cp(rid, 0))
        h_wait = Wait("h:t:0", "t", "timer", T0, deadline_at=T0 + 60)
        store.append(_cp("h", 1, status="waiting", waits=(h_wait,)))
        assert sent() == {rid: {WAKE} for rid in runs}
        wait = Wait("c:t:0", "t", "timer", T0, deadline_at=T0 + 60)
        g_wait = Wait("g:t:0", "t", "timer", T0, deadline_at=T0 + 60)
        got = store.append_batch(
            [
                AppendRequest(_cp("f", 2)),  # not revision 1: refused
                AppendRequest(_cp("a", 1), intents=[Intent("a:s:0:0", "a", "s", "dest", {})]),
                AppendRequest(_cp("b", 1, status="pending")),
                AppendRequest(_cp("c", 1, status="waiting", waits=(wait,))),
                AppendRequest(_cp("d", 1, {"i": 1})),
                AppendRequest(_cp("e", 1, status="waiting")),
                AppendRequest(_cp("g", 1, {"i": 1})),
                AppendRequest(_cp("g", 2, status="waiting", waits=(g_wait,))),
                AppendRequest(_cp("h", 2)),  # its wait gone: running again
            ]
        )
        assert type(got[0]) is RevisionConflictError and got[1:] == [None] * 8
        assert sent() == {
            "a": {WAKE},
            "b": {WAKE},
            "c": {WAKE},
            "e": {CHANGES},
            "g": {WAKE},
            "h": {CHANGES},
        }
    finally:
        store.close()
        heard.close()


@pg
def test_a_query_that_writes_or_miscounts_its_parameters_is_refused_saying_why(pg_store):
    """A write in ``query()`` is refused naming the two ways to write; a
    query given the wrong number of parameters (refused by the driver before
    it reaches the server: no SQLSTATE) is refused with the driver's words."""
    s = pg_store
    _kv_table(s)
    with pytest.raises(QueryRefusedError) as caught:
        s.query(_put("k", 1))
    assert str(caught.value) == (
        "a domain query tried to write; query() is read-only. Run writes through "
        "store.write(op) (their own transaction) or as a step's ctx.write (with its "
        "checkpoint)."
    )
    with pytest.raises(QueryRefusedError) as caught:
        s.query(lambda tx: tx.fetchone("SELECT v FROM kv WHERE k = ?", ()))
    message = str(caught.value)
    assert message.startswith("PostgreSQL refused the query: ")
    assert "SQLSTATE" not in message and "placeholder" in message
    assert _kv(s) == {}


# -- claims ----------------------------------------------------------------------


def _make(store: Any, run_id: str, status: Any, at: float, **kw: Any) -> None:
    flow = kw.pop("flow", "flow")
    run = RunRecord(run_id, flow, "v1", status, 0, at, at, **kw)
    store.create_run(run, replace(_cp(run_id, 0, status=status), created_at=at))


def _leases(store: Any) -> dict[str, tuple[str | None, float | None]]:
    return {r.run_id: (r.lease_owner, r.lease_expires_at) for r in store.list_runs()}


@pg
def test_claim_runnable_hands_out_interrupted_runs_oldest_first_then_waiting_runs_due(pg_store):
    """With ``now`` given, leases run from it: ``now + ttl_s`` exactly."""
    s = pg_store
    _make(s, "p1", "pending", T0 + 1)
    _make(s, "r0", "running", T0)
    _make(s, "p2", "pending", T0 + 2)
    _make(s, "due", "waiting", T0 - 5, deadline_at=T0 + 5)
    _make(s, "later", "waiting", T0 - 5, deadline_at=T0 + 500)
    got = s.claim_runnable("me", 30.0, now=T0 + 10)
    assert [(r.run_id, r.lease_owner, r.lease_expires_at) for r in got] == [
        (rid, "me", T0 + 40) for rid in ("r0", "p1", "p2", "due")
    ]
    assert _leases(s)["later"] == (None, None)


@pg
def test_claim_runnable_hands_out_at_most_limit_runs_of_the_flows_and_statuses_asked(pg_store):
    s = pg_store
    for i in range(3):
        _make(s, f"p{i}", "pending", T0 + i)
    for i in range(2):
        _make(s, f"w{i}", "waiting", T0 + i, deadline_at=T0 + 5)
    _make(s, "x", "running", T0 + 3, flow="other")
    at = T0 + 10
    assert [r.run_id for r in s.claim_runnable("a", 30.0, limit=1, now=at)] == ["p0"]
    assert [r.run_id for r in s.claim_runnable("b", 30.0, limit=2, now=at)] == ["p1", "p2"]
    assert s.claim_runnable("c", 30.0, limit=0, now=at) == []
    assert s.claim_runnable("c", 30.0, wakeable=False, flows=["flow"], now=at) == []
    assert [r.run_id for r in s.claim_runnable("c", 30.0, limit=1, flows=["flow"], now=at)] == [
        "w0"
    ]
    assert s.claim_runnable("d", 30.0, statuses=("pending",), wakeable=False, now=at) == []
    assert [r.run_id for r in s.claim_runnable("d", 30.0, statuses=("running",), now=at)] == [
        "x",
        "w1",
    ]
    assert _leases(s) == {
        "p0": ("a", at + 30),
        "p1": ("b", at + 30),
        "p2": ("b", at + 30),
        "w0": ("c", at + 30),
        "w1": ("d", at + 30),
        "x": ("d", at + 30),
    }


def _held(s: Any) -> float:
    """Three runs leased by the database clock: ``dead`` and ``busy`` for an
    hour, ``alive`` for a minute; returns a time when only ``alive``'s lease
    has run out."""
    for i, (rid, owner, ttl) in enumerate(
        [
            ("dead", "host:1:dead", 3600.0),
            ("alive", "host:2:alive", 60.0),
            ("busy", "host:3:busy", 3600.0),
        ]
    ):
        _make(s, rid, "running", T0 + i)
        s.claim(rid, Lease(owner, T0 + ttl, T0), T0)
    return s.now() + 600.0


@pg
def test_claim_runnable_takes_a_run_whose_holder_is_presumed_dead_before_its_lease_ends(pg_store):
    s = pg_store
    at = _held(s)
    busy = _leases(s)["busy"]
    got = s.claim_runnable("me", 30.0, presumed_dead=lambda o: o == "host:1:dead", now=at)
    assert [r.run_id for r in got] == ["dead", "alive"]  # alive's lease ran out
    assert _leases(s)["busy"] == busy


@pg
def test_claim_runnable_leaves_an_expired_lease_whose_holder_is_presumed_alive(pg_store):
    s = pg_store
    at = _held(s)
    alive = _leases(s)["alive"]
    got = s.claim_runnable("me", 30.0, presumed_alive=lambda o: o == "host:2:alive", now=at)
    assert got == []
    assert _leases(s)["alive"] == alive
    got = s.claim_runnable("me", 30.0, now=at)  # nothing said about liveness
    assert [r.run_id for r in got] == ["alive"]
    assert s.claim_runnable("me", 30.0, presumed_alive=lambda o: True, now=at + 60) == [
        s.get_run("alive")
    ]  # its own run, again


@pg
def test_claim_intents_takes_free_expired_and_dead_claims_oldest_first(pg_store):
    """A claim at a given ``now`` lasts ``now + ttl_s``; an intent another
    dispatcher holds is skipped unless its claim expired at ``now`` or it is
    presumed dead; a ``sending`` one comes back ``interrupted``; ``limit``
    counts the intents handed out."""
    s = pg_store
    keys = _open_intents(s)
    at = s.now() + 600.0
    (first,) = s.claim_intents("live", 3600.0, 1, now=at)
    (second,) = s.claim_intents("dead", 3600.0, 1, now=at)
    assert s.mark_intent(second.intent_id, "sending", T0, expect="pending")
    assert (first.intent_id, second.intent_id) == (keys[0], keys[1])
    assert s.claim_intents("me", 30.0, 5, now=at) == [s.intents(["pending"])[1]]
    got = s.claim_intents("me", 30.0, 1, presumed_dead=lambda o: o == "dead", now=at)
    assert [(i.intent_id, i.interrupted) for i in got] == [(keys[1], True)]
    got = s.claim_intents("me", 30.0, 5, now=at + 3600.0)  # live's claim ran out
    assert [(i.intent_id, i.interrupted) for i in got] == [
        (keys[0], False),
        (keys[1], True),
        (keys[2], False),
    ]


@pg
def test_claim_runnable_with_a_limit_passes_over_runs_it_may_not_take(pg_store):
    """``limit`` counts the runs handed out, not the runs looked at: a run
    another owner holds (live by its lease, or presumed alive past it) is
    passed over for a free one behind it."""
    s = pg_store
    _make(s, "held", "running", T0)
    s.claim("held", Lease("other", T0 + 3600.0, T0), T0)
    _make(s, "alive", "running", T0 + 1)
    s.claim("alive", Lease("host:2:alive", T0 + 60.0, T0), T0)
    _make(s, "free", "pending", T0 + 2)
    at = s.now() + 600.0
    alive = lambda o: o == "host:2:alive"  # noqa: E731
    got = s.claim_runnable("me", 30.0, limit=1, presumed_alive=alive, now=at)
    assert [r.run_id for r in got] == ["free"]
    got = s.claim_runnable("you", 30.0, limit=1, now=at)  # nothing said about liveness
    assert [r.run_id for r in got] == ["alive"]
    assert {k: v[0] for k, v in _leases(s).items()} == {
        "held": "other",
        "alive": "you",
        "free": "me",
    }


@pg
def test_a_query_that_fails_on_the_servers_side_stays_a_store_error(pg_store):
    """A failure that is the server's, not the query's (here a full disk),
    is not a refusal of the query: the StoreError ``write`` would raise,
    saying what to do, which stops the run instead of failing its step."""
    s = pg_store
    with pytest.raises(StoreError) as caught:
        s.query(
            lambda tx: tx.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'no space' USING ERRCODE = '53100'; END $$"
            )
        )
    assert not isinstance(caught.value, QueryRefusedError)
    assert str(caught.value) == (
        f"the PostgreSQL server ({s.where}) is out of disk space; nothing was written. "
        "Free some space and resume the run."
    )


@pg
def test_a_run_deleted_and_created_again_elsewhere_reads_as_the_new_run(pg_url, pg_store):
    """``delete_run`` drops the store's own copy of the run's checkpoint: a
    run of the same id that another process creates afterwards (at the same
    revision, 0) is read as that new run, not as the deleted one."""
    from desktop_app.errors import CheckpointNotFoundError
    from desktop_app.store.postgres.store import open_postgres_store

    pg_store.create_run(_rec("r1"), _cp("r1", 0, {"who": "deleted"}))
    assert pg_store.latest("r1").state == {"who": "deleted"}
    pg_store.delete_run("r1")
    with pytest.raises(CheckpointNotFoundError, match=r"^no run r1 in scope 'default'$"):
        pg_store.delete_run("r1")
    other = open_postgres_store(pg_url)
    try:
        other.create_run(_rec("r1"), _cp("r1", 0, {"who": "new"}))
    finally:
        other.close()
    assert pg_store.latest("r1").state == {"who": "new"}


@pg
def test_now_is_the_database_clock_not_the_machines(pg_url):
    """``now()`` reads ``flowdesk_now()``, the clock every lease decision
    uses: on a server whose clock is an hour ahead of this machine's (the
    test-only ``flowdesk.time_offset_s`` shifts it) it is an hour ahead."""
    import time

    import psycopg

    from desktop_app.store.postgres.store import open_postgres_store

    with psycopg.connect(pg_url, autocommit=True) as conn:
        dbname = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(f'ALTER DATABASE "{dbname}" SET flowdesk.time_offset_s = 3600')
    store = open_postgres_store(pg_url)
    try:
        t0 = time.time()
        now = store.now()
        t1 = time.time()
    finally:
        store.close()
    assert t0 + 3599.0 <= now <= t1 + 3601.0


@pg
def test_stopping_a_watcher_whose_callback_is_stuck_does_not_hang(pg_url):
    """``watch_changes``' stop function waits a bounded time for the
    watcher thread: an app whose refresh callback hangs (a stuck screen)
    can still stop watching and quit. The callback, let go later, runs to
    its end and is not called again."""
    import threading

    from desktop_app.store.postgres.store import open_postgres_store

    watching = open_postgres_store(pg_url)
    writer = open_postgres_store(pg_url)
    entered, let_go = threading.Event(), threading.Event()
    calls = 0

    def stuck() -> None:
        nonlocal calls
        calls += 1
        entered.set()
        let_go.wait(60)

    stop = watching.watch_changes(stuck)
    try:
        writer.publish_event("one", {}, T0)
        assert entered.wait(30), "no change pushed"
        stopper = threading.Thread(target=stop, daemon=True)
        stopper.start()
        stopper.join(20)  # the stop waits 2 s for the watcher, then gives up
        stopped = not stopper.is_alive()
        let_go.set()
        assert stopped, "stopping the watcher hung on its stuck callback"
        writer.publish_event("two", {}, T0)
    finally:
        let_go.set()
        watching.close()
        writer.close()
    assert calls == 1


@pg
def test_a_checkpoint_breaking_another_key_is_a_store_error_not_a_conflict(pg_store):
    """Only the keys another writer can take first (the run id, a live flow
    key, a revision, an outbox intent) become conflicts. A checkpoint that
    breaks another key (a wait id another run's wait has) is the StoreError
    naming that key: a RevisionConflictError would tell the engine that
    another writer saved the run, and a new run "already exists" when it
    does not. Nothing is written either way. (Two waits of one id in one
    checkpoint never reach the database: DuplicateWaitIdError, in the
    conformance suite.)"""
    from desktop_app.errors import CheckpointNotFoundError, DuplicateWaitIdError

    go = Wait("w1:s:0", "s", "signal", T0, name="go", key="k")
    pg_store.create_run(_rec("r0"), _cp("r0", 0, status="waiting", waits=(go,)))
    taken = (replace(go, key="k2"),)  # r0's wait id
    with pytest.raises(StoreError) as created:
        pg_store.create_run(_rec("r2"), _cp("r2", 0, status="waiting", waits=taken))
    assert type(created.value) is StoreError
    assert 'unique constraint "waits_pkey"' in str(created.value)
    with pytest.raises(CheckpointNotFoundError):
        pg_store.get_run("r2")
    pg_store.create_run(_rec("r1"), _cp("r1", 0))
    with pytest.raises(StoreError) as appended:
        pg_store.append(_cp("r1", 1, status="waiting", waits=taken))
    assert type(appended.value) is StoreError
    assert 'unique constraint "waits_pkey"' in str(appended.value)
    assert pg_store.get_run("r1").revision == 0
    with pytest.raises(DuplicateWaitIdError, match="wait id 'w1:s:0'"):
        pg_store.append(_cp("r1", 1, status="waiting", waits=(go, replace(go, key="k2"))))
    assert pg_store.get_run("r1").revision == 0


@pg
def test_db_apply_failing_half_way_keeps_the_files_it_applied_and_resumes_there(pg_empty_url):
    """``db apply`` commits each schema file with its ledger row: when a
    file fails (here 0008, whose table a user already made), the files
    before it stay applied, and once the obstacle is gone the next apply
    does only the rest."""
    import psycopg

    from desktop_app.store.postgres.store import (
        apply_postgres_schema,
        postgres_schema_status,
    )

    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA flowdesk")
        conn.execute("CREATE TABLE flowdesk.workers (x integer)")
    with pytest.raises(StoreError, match='relation "workers" already exists'):
        apply_postgres_schema(pg_empty_url)
    states = {s.key: s.state for s in postgres_schema_status(pg_empty_url)}
    done = [k for k, state in states.items() if state == "applied"]
    assert [k.rsplit("/", 1)[-1][:4] for k in done] == [f"{i:04d}" for i in range(1, 8)]
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        conn.execute("DROP TABLE flowdesk.workers")
    rest = apply_postgres_schema(pg_empty_url)
    assert len(rest) == len(states) - 7
    assert {s.state for s in postgres_schema_status(pg_empty_url)} == {"applied"}


@pg
def test_an_open_store_at_rest_holds_one_server_connection(pg_url):
    """A store keeps one connection open at rest (its pool grows with use
    up to ``max_connections``): a machine running many workers does not
    hold idle sessions against the server's connection limit."""
    import psycopg

    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url, application_name="flowdesk-at-rest")
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name=%s",
                ("flowdesk-at-rest",),
            ).fetchone()
    finally:
        store.close()
    assert n == 1


@pg
def test_a_step_that_changes_no_status_and_no_waits_notifies_nobody(pg_url):
    """Per-step progress is polled (``data_version``), never pushed: a step
    that keeps the run's status and waits sends no notification (one per
    step would cost each step a round trip and wake every watching app),
    while a new status is pushed to the apps (CHANGES)."""
    import psycopg

    from desktop_app.store.postgres.notify import CHANGES, WAKE
    from desktop_app.store.postgres.store import open_postgres_store

    heard = psycopg.connect(pg_url, autocommit=True)
    heard.execute(f"LISTEN {WAKE}")
    heard.execute(f"LISTEN {CHANGES}")
    store = open_postgres_store(pg_url)

    def until(payload: str) -> list[tuple[str, str]]:
        got = []
        for n in heard.notifies(timeout=10):
            got.append((n.channel, n.payload))
            if n.payload == payload:
                return got
        raise AssertionError(f"no {payload!r}; heard {got}")

    try:
        store.create_run(_rec("r1"), _cp("r1", 0))
        store.create_run(_rec("r2"), _cp("r2", 0))
        until("default:r2")
        store.append(_cp("r1", 1, {"n": 1}))  # a plain step: still running, no waits
        store.append(_cp("r2", 1, status="completed"))
        assert until("default:r2") == [(CHANGES, "default:r2")]
    finally:
        store.close()
        heard.close()
