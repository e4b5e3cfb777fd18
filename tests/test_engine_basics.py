"""Runs, checkpoints and resume: the first-cut engine scenarios."""

from __future__ import annotations

from collections import Counter

import pytest

from desktop_app.errors import (
    CheckpointDecodeError,
    FlowVersionMismatchError,
    RunStateError,
    StoreError,
)
from desktop_app.flow import Engine
from desktop_app.store.memory.store import InMemoryCheckpointStore
from tests.flows_for_tests import Crash, Numbers, counting_flow


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryCheckpointStore()
        return
    yield request.getfixturevalue("sqlite_store")


@pytest.mark.scenario("S1")
def test_resume_continues_from_last_saved_step(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls, crash_in={"s2"})])
    with pytest.raises(Crash):
        engine.run("counting", Numbers())
    (run,) = store.list_runs()
    assert run.status == "running"
    res = engine.resume(run.run_id)
    assert res.status == "completed"
    assert res.state.trail == ["s1", "s2", "s3"]
    assert calls == {"s1": 1, "s2": 2, "s3": 1}


@pytest.mark.scenario("S1")
def test_resume_of_completed_run_is_a_noop(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls)])
    first = engine.run("counting", Numbers())
    revision = store.get_run(first.run_id).revision
    again = engine.resume(first.run_id)
    assert calls == {"s1": 1, "s2": 1, "s3": 1}
    assert again.state == first.state
    assert again.status == "completed"
    assert store.get_run(first.run_id).revision == revision  # nothing written


@pytest.mark.scenario("S2")
def test_completed_step_skipped_in_progress_step_runs_again(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls, crash_in={"s3"}, n=4)])
    with pytest.raises(Crash):
        engine.run("counting", Numbers())
    (run,) = store.list_runs()
    steps = store.latest(run.run_id).steps
    assert steps["s1"].status == steps["s2"].status == "completed"
    assert steps["s3"].status == "in_progress"
    res = engine.resume(run.run_id)
    assert res.state.trail == ["s1", "s2", "s3", "s4"]
    assert calls == {"s1": 1, "s2": 1, "s3": 2, "s4": 1}
    final = store.latest(run.run_id).steps
    assert final["s3"].attempts == 2
    assert all(r.status == "completed" for r in final.values())


@pytest.mark.scenario("S3")
def test_pending_excludes_completed_and_waiting(store):
    calls: Counter[str] = Counter()
    flow = counting_flow(calls)
    engine = Engine(store, flows=[flow])
    done = engine.run("counting", Numbers()).run_id
    created = engine.start("counting", Numbers())
    waiting = engine.start("counting", Numbers())
    cp = store.latest(waiting)
    store.append(cp.evolve(revision=1, status="waiting"))
    assert [r.run_id for r in engine.pending()] == [created]
    assert [r.run_id for r in engine.waiting()] == [waiting]
    assert done not in [r.run_id for r in engine.pending()]


@pytest.mark.scenario("S3")
def test_resume_pending_oldest_first_stops_at_first_error(store):
    calls: Counter[str] = Counter()

    def boom(state: Numbers) -> dict:
        raise ValueError("bad input")

    from desktop_app.flow import FlowBuilder

    bad = FlowBuilder("bad", Numbers).step("explode", boom).compile()
    engine = Engine(store, flows=[counting_flow(calls), bad])
    first = engine.start("counting", Numbers())
    failing = engine.start("bad", Numbers())
    later = engine.start("counting", Numbers())
    out = engine.resume_pending()
    assert [r.run_id for r in out.resumed] == [first, failing]
    assert out.failed_run_id == failing
    assert "bad input" in str(out.error)
    assert store.get_run(first).status == "completed"
    assert store.get_run(later).status == "pending"  # untouched
    assert store.get_run(later).revision == 0


@pytest.mark.scenario("S8")
def test_get_and_status_run_nothing(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls, crash_in={"s2"})])
    with pytest.raises(Crash):
        engine.run("counting", Numbers(value=10))
    (run,) = store.list_runs()
    before = dict(calls)
    state = engine.get(run.run_id)
    assert state == Numbers(value=11, trail=["s1"])
    status = engine.status(run.run_id)
    assert status.status == "running" and status.flow_name == "counting"
    assert dict(calls) == before
    assert store.get_run(run.run_id).revision == status.revision


def test_failed_step_fails_run_and_resume_retries_it(store):
    from desktop_app.flow import FlowBuilder

    attempts = Counter()

    def flaky(state: Numbers) -> dict:
        attempts["x"] += 1
        if attempts["x"] == 1:
            raise RuntimeError("first time fails")
        return {"value": 7}

    flow = FlowBuilder("flaky", Numbers).step("x", flaky).compile()
    engine = Engine(store, flows=[flow])
    res = engine.run("flaky", Numbers())
    assert res.status == "failed"
    assert "first time fails" in (res.error or "")
    assert store.latest(res.run_id).steps["x"].status == "failed"
    again = engine.resume(res.run_id)
    assert again.status == "completed" and again.state.value == 7


@pytest.mark.scenario("S15")
def test_retry_n_means_n_plus_one_attempts(store):
    from desktop_app.flow import FlowBuilder

    seen = Counter()

    def always(state: Numbers) -> None:
        seen["x"] += 1
        raise RuntimeError("nope")

    flow = FlowBuilder("retry", Numbers, retry=2).step("x", always).compile()
    res = Engine(store, flows=[flow]).run("retry", Numbers())
    assert res.status == "failed" and seen["x"] == 3
    assert store.latest(res.run_id).steps["x"].attempts == 3


@pytest.mark.scenario("S14")
def test_cancel_then_resume_is_refused(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls)])
    rid = engine.start("counting", Numbers())
    assert engine.cancel(rid).status == "canceled"
    with pytest.raises(RunStateError):
        engine.resume(rid)
    assert calls == {}


@pytest.mark.scenario("S10")
def test_changed_flow_version_refuses_resume(store):
    calls: Counter[str] = Counter()
    engine = Engine(store, flows=[counting_flow(calls, crash_in={"s2"})])
    with pytest.raises(Crash):
        engine.run("counting", Numbers())
    (run,) = store.list_runs()
    engine.register(counting_flow(calls, version="2"))
    with pytest.raises(FlowVersionMismatchError):
        engine.resume(run.run_id)
    assert calls == {"s1": 1, "s2": 1}


@pytest.mark.scenario("S4")
def test_failed_save_stops_the_run(tmp_path):
    """A store that fails on the second append: the run stops with StoreError."""

    class FailingStore(InMemoryCheckpointStore):
        appends = 0

        def append(self, checkpoint, writes=(), lease=None, **extra):
            type(self).appends += 1
            if type(self).appends >= 2:
                raise StoreError("disk full (simulated)")
            super().append(checkpoint, writes, lease, **extra)

    calls: Counter[str] = Counter()
    engine = Engine(FailingStore(), flows=[counting_flow(calls, n=4)])
    with pytest.raises(StoreError):
        engine.run("counting", Numbers())
    assert calls == {"s1": 1, "s2": 1}


@pytest.mark.scenario("S9")
def test_malformed_checkpoint_names_run_and_revision(sqlite_store):
    calls: Counter[str] = Counter()
    engine = Engine(sqlite_store, flows=[counting_flow(calls)])
    good = engine.run("counting", Numbers()).run_id
    bad = engine.run("counting", Numbers()).run_id
    with sqlite_store.conn:
        sqlite_store.conn.execute(
            # checksum NULL: a row written before checksums existed is still decoded
            'UPDATE checkpoints SET state=\'{"set": {"value": "not a number"}}\', '
            "checksum=NULL WHERE run_id=? AND revision=3",
            (bad,),
        )
    sqlite_store._last.clear()
    with pytest.raises(CheckpointDecodeError) as info:
        engine.get(bad)
    assert info.value.run_id == bad and info.value.field_path == "value"
    assert engine.get(good).value == 3


@pytest.mark.scenario("S9")
def test_garbage_checkpoint_row_is_a_decode_error_other_runs_fine(sqlite_store):
    calls: Counter[str] = Counter()
    engine = Engine(sqlite_store, flows=[counting_flow(calls)])
    good = engine.run("counting", Numbers()).run_id
    bad = engine.run("counting", Numbers()).run_id
    with sqlite_store.conn:
        sqlite_store.conn.execute(
            "UPDATE checkpoints SET state='{not json', checksum=NULL WHERE run_id=? AND revision=1",
            (bad,),
        )
    sqlite_store._last.clear()
    with pytest.raises(CheckpointDecodeError) as info:
        engine.resume(bad)
    assert (info.value.run_id, info.value.revision) == (bad, 1)
    assert engine.get(good).trail == ["s1", "s2", "s3"]
    assert engine.run("counting", Numbers()).status == "completed"
