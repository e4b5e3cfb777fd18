"""What the Engine refuses and reports that its other kill tests left
unchecked (kill tests for mutants of ``Engine.signal/publish/resume_with/
renew_leases/_load_driver`` in ``flow/engine.py``, issue 29, 2026-12-04):

* a signal's or event's payload, or an answer, that no checkpoint could hold
  is refused with ``PayloadNotStorableError`` naming what was refused, and
  nothing is stored (the mailbox stays empty, the run keeps waiting);
* a heartbeat whose renewal the store refuses puts the runs it could not
  renew for ``lease_ttl_s`` into ``lost`` and says so in one warning, and
  leaves runs renewed less than ``lease_ttl_s`` ago alone;
* a heartbeat that finds a run taken over by another owner warns naming it;
* resuming a run whose lease expired logs who takes it over from whom.

Every test runs on a real SQLite file.
"""

from __future__ import annotations

import logging
import math
import socket
import sqlite3
import sys
import threading
import time

import pytest
from pydantic import BaseModel

from desktop_app.errors import PayloadNotStorableError, RunLeasedError, StoreError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.records import Lease
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

OTHER = "elsewhere.example:4242:abc123"  # a live owner on another host
UNSTORABLE = {"text": "\ud800"}  # a lone surrogate: not valid UTF-8
TAIL = "; nothing was sent. Send plain JSON data"


class S(BaseModel):
    n: int = 0
    answer: str = ""


def asking_flow():
    return (
        FlowBuilder("ask", S)
        .await_input("question", "answer", "which?")
        .step("done", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )


def quick_flow():
    return FlowBuilder("quick", S).step("one", lambda s: {"n": s.n + 1}).compile()


def rows(db_path, table: str) -> int:
    with sqlite3.connect(db_path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_a_signal_payload_no_checkpoint_can_hold_is_refused_and_not_stored(db_path):
    engine = Engine(open_store(db_path), clock=ManualClock())
    with pytest.raises(PayloadNotStorableError) as err:
        engine.signal("go", "k1", UNSTORABLE)
    assert str(err.value).startswith("the signal 'go' payload cannot be stored: ")
    assert TAIL in str(err.value)
    assert rows(db_path, "signals") == 0


def test_an_event_payload_no_checkpoint_can_hold_is_refused_and_not_stored(db_path):
    engine = Engine(open_store(db_path), clock=ManualClock())
    with pytest.raises(PayloadNotStorableError) as err:
        engine.publish("ready", UNSTORABLE)
    assert str(err.value).startswith("the event 'ready' payload cannot be stored: ")
    assert TAIL in str(err.value)
    assert rows(db_path, "events") == 0


def test_an_answer_no_checkpoint_can_hold_is_refused_and_the_run_keeps_waiting(db_path):
    engine = Engine(open_store(db_path), flows=[asking_flow()], clock=ManualClock())
    r = engine.run("ask", {})
    assert r.status == "waiting"
    with pytest.raises(PayloadNotStorableError) as err:
        engine.resume_with(r.run_id, "\ud800")
    assert str(err.value).startswith(f"the answer for run {r.run_id} cannot be stored: ")
    run = engine.status(r.run_id)
    assert (run.status, run.revision) == ("waiting", r.revision)
    done = engine.resume_with(r.run_id, "blue")  # a storable answer is taken
    assert (done.status, done.state.answer, done.state.n) == ("completed", "blue", 1)


def own_warnings(caplog) -> list[str]:
    """The warnings this test's thread logged (a heartbeat thread of another
    test's engine, still renewing in this process, is not this test's)."""
    me = threading.get_ident()
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.thread == me
    ]


def failing_renew(*_args, **_kwargs):
    raise StoreError("database is locked")


def test_a_refused_renewal_loses_only_runs_unrenewed_for_the_ttl_and_warns(db_path, caplog):
    store = open_store(db_path)
    engine = Engine(store, flows=[quick_flow()], clock=ManualClock(), lease_ttl_s=0.001)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # no heartbeat thread: the test calls renew_leases itself
    rid = engine.start("quick", {})
    engine.track(rid, True)
    time.sleep(0.01)  # longer than the 1 ms ttl on the monotonic clock
    store.renew = failing_renew  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == {rid}
    warned = own_warnings(caplog)
    assert warned == [
        f"leases of 1 run(s) could not be renewed for 0.0 s; they stop before "
        f"committing more: {rid}"
    ]


def test_a_refused_renewal_within_the_ttl_loses_nothing_and_says_nothing(db_path, caplog):
    store = open_store(db_path)
    engine = Engine(store, flows=[quick_flow()], clock=ManualClock(), lease_ttl_s=3600.0)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # renewals by hand only
    rid = engine.start("quick", {})
    engine.track(rid, True)
    store.renew = failing_renew  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == set()
    assert own_warnings(caplog) == []
    assert engine.active == {rid}


def test_a_run_another_owner_took_is_named_in_the_heartbeats_warning(db_path, caplog):
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[quick_flow()], clock=clock)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # renewals by hand only
    rid = engine.start("quick", {})
    engine.track(rid, True)
    now = clock.now()
    open_store(db_path).claim(rid, Lease(OTHER, now + 100.0, math.inf), math.inf)
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == {rid}
    warned = own_warnings(caplog)
    assert warned == [f"runs taken over by another process: {rid}"]


def test_resuming_a_run_whose_lease_expired_logs_who_takes_it_from_whom(db_path, caplog):
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[quick_flow()], clock=clock)
    rid = engine.start("quick", {})
    now = clock.now()
    open_store(db_path).claim(rid, Lease(OTHER, now + 5.0, math.inf), math.inf)
    clock.advance(10.0)
    with caplog.at_level(logging.INFO, logger="desktop_app"):
        r = engine.resume(rid)
    assert (r.status, r.state.n) == ("completed", 1)
    said = [rec.getMessage() for rec in caplog.records]
    assert f"run {rid}: {engine.owner} takes it over from {OTHER} (lease expired)" in said
    assert f"run {rid} of flow quick resumed (status was pending)" in said


def test_resuming_a_run_held_by_an_exited_process_logs_it_as_dead(db_path, caplog):
    pid = cli_forkserver.popen([sys.executable, "-c", "pass"])
    pid.wait()  # exited and reaped: no process of this host has that pid now
    dead = f"{socket.gethostname()}:{pid.pid}:abc123"
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[quick_flow()], clock=clock)
    rid = engine.start("quick", {})
    now = clock.now()
    open_store(db_path).claim(rid, Lease(dead, now + 3600.0, math.inf), math.inf)
    with caplog.at_level(logging.INFO, logger="desktop_app"):
        r = engine.resume(rid)  # its lease has not expired: taken because its holder exited
    assert (r.status, r.state.n) == ("completed", 1)
    said = [rec.getMessage() for rec in caplog.records]
    assert f"run {rid}: {engine.owner} takes it over from {dead} (owner gone)" in said


def test_an_injected_clock_decides_whether_a_lease_has_expired(db_path):
    # the manual clock stands at 2026-01-01, months behind the store's (real) clock:
    # by the engine's clock the other owner's lease still runs for 5 s
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[quick_flow()], clock=clock)
    rid = engine.start("quick", {})
    open_store(db_path).claim(rid, Lease(OTHER, clock.now() + 5.0, math.inf), math.inf)
    with pytest.raises(RunLeasedError):
        engine.resume(rid)
    assert engine.status(rid).status == "pending"
    clock.advance(10.0)
    assert engine.resume(rid).status == "completed"


def test_without_an_injected_clock_the_stores_clock_decides(db_path):
    engine = Engine(open_store(db_path), flows=[quick_flow()])
    rid = engine.start("quick", {})
    past = time.time() - 60.0  # expired a minute ago by the store's (real) clock
    open_store(db_path).claim(rid, Lease(OTHER, past, math.inf), math.inf)
    r = engine.resume(rid)
    assert (r.status, r.state.n) == ("completed", 1)


def test_the_doubt_warning_names_every_run_it_lost(db_path, caplog):
    store = open_store(db_path)
    engine = Engine(store, flows=[quick_flow()], clock=ManualClock(), lease_ttl_s=0.001)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # renewals by hand only
    for rid in ("ra", "rb"):
        engine.start("quick", {}, run_id=rid)
        engine.track(rid, True)
    order = list(engine.active)  # the order renew_leases goes through them
    time.sleep(0.01)
    store.renew = failing_renew  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == {"ra", "rb"}
    warned = own_warnings(caplog)
    assert warned == [
        "leases of 2 run(s) could not be renewed for 0.0 s; they stop before "
        f"committing more: {order[0]}, {order[1]}"
    ]


def test_a_renewal_that_went_through_keeps_a_later_refusal_within_the_ttl_harmless(db_path):
    store = open_store(db_path)
    engine = Engine(store, flows=[quick_flow()], clock=ManualClock(), lease_ttl_s=3600.0)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # renewals by hand only
    rid = engine.start("quick", {})
    store.claim(rid, engine.lease(), math.inf)  # leased to this engine, as a claim does
    engine.track(rid, True)
    engine.renew_leases()  # renewed: the store now shows our lease
    assert engine.status(rid).lease_owner == engine.owner
    store.renew = failing_renew  # type: ignore[method-assign]
    engine.renew_leases()
    assert engine.lost == set()


def test_every_taken_run_is_found_and_named_after_one_that_was_renewed(db_path, caplog):
    clock = ManualClock()
    engine = Engine(open_store(db_path), flows=[quick_flow()], clock=clock)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # renewals by hand only
    for rid in ("ra", "rb", "rc"):
        engine.start("quick", {}, run_id=rid)
        engine.store.claim(rid, engine.lease(), math.inf)  # leased to this engine
        engine.track(rid, True)
    first, *rest = list(engine.active)  # the order renew_leases goes through them
    other = open_store(db_path)
    for rid in rest:  # the first is renewed, the two after it were taken
        taken = Lease(OTHER, clock.now() + 100.0, math.inf, takes_over=engine.owner)
        other.claim(rid, taken, math.inf)
    with caplog.at_level(logging.WARNING, logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == set(rest)
    assert engine.status(first).lease_owner == engine.owner
    warned = own_warnings(caplog)
    assert warned == [f"runs taken over by another process: {rest[0]}, {rest[1]}"]
