"""The in-memory store's own behaviour beyond the conformance suite: the
text of its errors (what a developer testing a flow on it reads), scopes
sharing one space, the retry inside ``update_latest``, and waking more runs
than one page of ``wakeable_runs``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from desktop_app.errors import (
    CheckpointNotFoundError,
    DuplicateFlowKeyError,
    LeaseLostError,
    RevisionConflictError,
    StoreError,
)
from desktop_app.store.conformance import _cp, _run
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import Checkpoint, Intent, Lease, Wait

_spaces = itertools.count()

NO_SQL = (
    "domain writes and queries need SQL (a store with the 'sql' capability: SQLite or "
    "PostgreSQL); the in-memory store has none"
)


def _store(scope: str = "default", space: str | None = None) -> InMemoryCheckpointStore:
    return InMemoryCheckpointStore(scope=scope, space=space, clock=lambda: 1000.0)


def _space() -> str:
    return f"kills-memory-{next(_spaces)}"


def test_refusals_say_which_run_and_what_to_do():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0))
    with pytest.raises(RevisionConflictError) as dup:
        s.create_run(_run("r"), _cp("r", 0))
    assert str(dup.value) == "run r already exists; pick another run id"
    s.create_run(_run("k1", flow_key="key"), _cp("k1", 0))
    with pytest.raises(DuplicateFlowKeyError) as key:
        s.create_run(_run("k2", flow_key="key"), _cp("k2", 0))
    assert str(key.value) == "a live run of 'f' with flow key 'key' exists"
    s.append(_cp("r", 1))
    with pytest.raises(RevisionConflictError) as stale:
        s.append(_cp("r", 1))
    assert str(stale.value) == (
        "run r: revision 1 conflicts with the stored latest revision 1; another writer got "
        "there first. Reload the run and try again."
    )
    with pytest.raises(CheckpointNotFoundError) as gone:
        s.get_checkpoint("r", 7)
    assert str(gone.value) == "run r has no checkpoint at revision 7 (pruned or never saved)"


def test_lost_leases_say_who_holds_the_run():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0))
    s.claim("r", Lease("b", 1030.0, 1000.0), 1000.0)
    with pytest.raises(LeaseLostError) as taken:
        s.append(_cp("r", 1), lease=Lease("a", 1060.0, 1010.0))
    assert str(taken.value) == (
        "run r is held by b, not by this process (a): it took the run over; "
        "this process stops executing it."
    )
    with pytest.raises(LeaseLostError) as late:
        s.append(_cp("r", 1), lease=Lease("c", 1060.0, 1010.0, takes_over="a"))
    assert str(late.value) == (
        "run r is held by b: another process took it over from a first; "
        "this process runs nothing of it."
    )
    s.append(_cp("r", 1), lease=Lease("b", 1060.0, 1010.0))
    with pytest.raises(LeaseLostError) as held:
        s.append(_cp("r", 1), lease=Lease("a", 1060.0, 1010.0))
    assert str(held.value) == (
        "run r is held by a live process (b) that took it over; this process stops executing it."
    )


def test_a_lease_issued_at_the_instant_another_expires_may_write():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0))
    s.claim("r", Lease("b", 1030.0, 1000.0), 1000.0)
    with pytest.raises(LeaseLostError):  # a lease naming no holder takes none
        s.append(_cp("r", 1), lease=Lease("a", 1060.0, 1030.0))
    with pytest.raises(LeaseLostError):  # b's lease still runs a moment before
        s.append(_cp("r", 1), lease=Lease("a", 1060.0, 1029.999, takes_over="b"))
    s.append(_cp("r", 1), lease=Lease("a", 1060.0, 1030.0, takes_over="b"))
    assert s.get_run("r").lease_owner == "a"


def test_signal_and_outbox_conflicts_say_what_collided():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0))
    sid = s.send_signal("go", "k", None, 1.0)
    s.append(_cp("r", 1), consume=[(sid, "r:w:0")])
    with pytest.raises(RevisionConflictError) as twice:
        s.append(_cp("r", 2), consume=[(sid, "r:w:1")])
    assert str(twice.value) == f"signal {sid} was consumed by another wait first"
    intent = Intent("r:send:0:0", "r", "send", "dest", {})
    s.append(_cp("r", 2), intents=[intent])
    with pytest.raises(RevisionConflictError) as again:
        s.append(_cp("r", 3), intents=[intent])
    assert str(again.value) == "an outbox intent with this id exists already"


def test_sql_is_refused_with_the_reason():
    s = _store()

    def write(tx: object) -> None:
        raise AssertionError("the in-memory store ran a domain write")

    with pytest.raises(StoreError) as create:
        s.create_run(_run("r"), _cp("r", 0), writes=[write])
    s.create_run(_run("r"), _cp("r", 0))
    with pytest.raises(StoreError) as append:
        s.append(_cp("r", 1), writes=[write])
    with pytest.raises(StoreError) as query:
        s.query(lambda tx: None)
    with pytest.raises(StoreError) as written:
        s.write(lambda tx: None)
    assert [str(e.value) for e in (create, append, query, written)] == [NO_SQL] * 4


def test_state_that_is_not_json_is_refused_naming_the_run():
    s = _store()
    with pytest.raises(StoreError) as bad:
        s.create_run(_run("r"), _cp("r", 0, {"when": object()}))
    assert str(bad.value).startswith("run r: state is not JSON-serialisable: ")
    with pytest.raises(CheckpointNotFoundError):
        s.get_run("r")


def test_update_latest_reads_again_after_a_driver_appended_in_between():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0, {"n": 0}))
    calls: list[int] = []

    def bump(cp: Checkpoint) -> Checkpoint:
        calls.append(cp.revision)
        if len(calls) == 1:  # a driver appends while this change is being made
            s.append(_cp("r", cp.revision + 1, {"n": 10}))
        return cp.evolve(revision=cp.revision + 1, state={"n": cp.state["n"] + 1})

    got = s.update_latest("r", bump)
    assert calls == [0, 1]
    assert (got.revision, dict(s.latest("r").state)) == (2, {"n": 11})


def test_update_latest_gives_up_on_a_run_that_keeps_changing():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0))

    def always_late(cp: Checkpoint) -> Checkpoint:
        s.append(_cp("r", cp.revision + 1))
        return cp.evolve(revision=cp.revision + 1)

    with pytest.raises(RevisionConflictError) as busy:
        s.update_latest("r", always_late)
    assert str(busy.value) == "run r kept changing; try again"
    assert s.get_run("r").revision == 1000


def _waiting(s: InMemoryCheckpointStore, rid: str, w: Wait) -> None:
    s.create_run(_run(rid), _cp(rid, 0))
    s.append(_cp(rid, 1, status="waiting", waits=(w,)))


def test_another_scopes_runs_do_not_hide_this_scopes_waits():
    space = _space()
    a, b = _store("a", space), _store("b", space)
    _waiting(b, "theirs", Wait("theirs:t:0", "t", "timer", 1.0, deadline_at=5.0))
    _waiting(a, "mine", Wait("mine:t:0", "t", "timer", 1.0, deadline_at=5.0))
    assert a.due_waits(10.0) == [("mine", "mine:t:0")]
    assert b.due_waits(10.0) == [("theirs", "theirs:t:0")]
    assert a.next_deadline() == 5.0
    assert a.wakeable_runs(10.0) == ["mine"]


def test_claim_intents_passes_over_another_scopes_intents():
    space = _space()
    a, b = _store("a", space), _store("b", space)
    for s, rid in ((b, "theirs"), (a, "mine")):
        s.create_run(_run(rid), _cp(rid, 0))
        s.append(_cp(rid, 1), intents=[Intent(f"{rid}:send:0:0", rid, "send", "dest", {})])
    assert [i.intent_id for i in a.claim_intents("d", 30.0, 10)] == ["mine:send:0:0"]
    assert [i.intent_id for i in b.claim_intents("d", 30.0, 10)] == ["theirs:send:0:0"]


def test_claim_runnable_wakes_more_runs_than_one_page():
    s = _store()
    ids = [f"r{i:04d}" for i in range(1001)]
    for i, rid in enumerate(ids):
        s.create_run(_run(rid, t=float(i), deadline_at=500.0), _cp(rid, 0, status="waiting"))
    got = s.claim_runnable("me", 60.0, 2000, statuses=(), now=1000.0)
    assert sorted(r.run_id for r in got) == ids


def test_a_checkpoint_read_back_is_the_callers_to_change():
    s = _store()
    s.create_run(_run("r"), _cp("r", 0, {"items": [1]}))
    for read in (s.latest("r"), s.get_checkpoint("r", 0)):
        state: Any = read.state
        state["items"].append(99)
    assert dict(s.latest("r").state) == {"items": [1]}
    assert dict(s.get_checkpoint("r", 0).state) == {"items": [1]}
