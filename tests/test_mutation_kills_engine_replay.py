"""Replay, fork and claiming through the Engine's public API: what a replayed
or forked run starts from (state, step records, meta, lineage), the errors a
person sees for a bad checkpoint id or a changed flow, and which runs
``claim_runnable`` and ``recover`` hand out (kill tests for mutants of
``Engine.replay/fork/_parse/claim_runnable/_claim_all`` in ``flow/engine.py``).

Every test runs on a real SQLite file and the injected clock.
"""

from __future__ import annotations

import socket
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import (
    CheckpointDecodeError,
    CheckpointNotFoundError,
    FlowVersionMismatchError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.protocol import parse_checkpoint_id
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

OTHER = "elsewhere.example:4242:abc123"  # a live owner on another host: never presumed dead


class S(BaseModel):
    n: int = 0
    notes: list[str] = []
    answer: str | None = None


def engine_for(db_path: Path, *flows, clock: ManualClock | None = None, **kw) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock(), **kw)


def review_flow(calls: Counter, version: str = "1"):
    def step(name: str, out):
        def fn(s: S) -> dict:
            calls[name] += 1
            return out(s)

        return fn

    return (
        FlowBuilder("review", S, version=version)
        .step("a", step("a", lambda s: {"n": s.n + 1}))
        .condition("gate", lambda s: s.n > 5, [("x", step("x", lambda s: {"n": 100}))])
        .step("b", step("b", lambda s: {"notes": [*s.notes, "b"]}))
        .await_input("ok", "answer", prompt="ship?")
        .step("c", step("c", lambda s: {"notes": [*s.notes, f"c:{s.answer}"]}))
        .chain()
        .compile()
    )


def reviewed(engine: Engine) -> str:
    rid = engine.run("review", S()).run_id
    assert engine.resume_with(rid, "yes").status == "completed"
    return rid


def after(engine: Engine, run_id: str, step_id: str) -> str:
    """The id of the checkpoint that completed ``step_id``."""
    infos = [i for i in engine.history(run_id) if i.step_id == step_id]
    assert infos, [(i.revision, i.step_id, i.status) for i in engine.history(run_id)]
    return infos[-1].id


# -- _parse ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["garbage", "run-1:", "run-1:x"])
def test_a_malformed_checkpoint_id_says_what_is_expected(db_path, bad):
    engine = engine_for(db_path, review_flow(Counter()))
    with pytest.raises(ValueError) as plain:
        parse_checkpoint_id(bad)
    with pytest.raises(CheckpointNotFoundError) as err:
        engine.replay(bad)
    assert str(err.value) == str(plain.value)
    assert str(err.value) == f"not a checkpoint id: {bad!r} (expected '<run_id>:<revision>')"
    with pytest.raises(CheckpointNotFoundError):
        engine.checkpoint(bad)


# -- replay / fork -------------------------------------------------------------


def test_a_replay_keeps_finished_records_and_decisions_and_runs_the_rest(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, review_flow(calls))
    src = reviewed(engine)
    cid = after(engine, src, "ok")  # answered; c is next
    cp = engine.checkpoint(cid)
    assert cp.frontier == ("c",)
    assert cp.steps["x"].status == "skipped"
    assert {"steps_taken", "conditions", "resolved"} <= set(cp.meta)
    calls.clear()
    res = engine.replay(cid, run_id="again")
    assert (res.run_id, res.status) == ("again", "completed")
    assert res.state.notes == ["b", "c:yes"]
    assert calls == {"c": 1}  # nothing before the checkpoint ran again
    first = engine.checkpoint("again:0")
    assert {k: v.status for k, v in first.steps.items()} == {
        "a": "completed",
        "gate": "completed",
        "x": "skipped",
        "b": "completed",
        "ok": "completed",
        "c": "in_progress",
    }
    assert first.steps["a"] == cp.steps["a"]
    assert first.meta == {
        "steps_taken": cp.meta["steps_taken"],
        "conditions": cp.meta["conditions"],
        "replayed_from": cid,
    }
    assert cp.meta["conditions"] == {"gate": False}
    run = engine.status("again")
    assert run.parent_run_id == src
    assert run.context["trace_id"] == engine.status(src).context["trace_id"]
    assert [i.id for i in engine.history(src)][-1] == f"{src}:{engine.status(src).revision}"


def test_a_replay_of_a_finished_checkpoint_is_a_finished_run(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, review_flow(calls))
    src = reviewed(engine)
    last = engine.history(src)[-1].id
    calls.clear()
    res = engine.replay(last, run_id="done-copy")
    assert (res.run_id, res.status, res.revision, res.error) == ("done-copy", "completed", 0, None)
    assert res.state == engine.get(src)
    assert engine.status("done-copy").status == "completed"
    assert calls == {}


def test_a_fork_works_on_a_copy_and_takes_the_run_id_asked_for(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, review_flow(calls))
    src = reviewed(engine)
    cid = after(engine, src, "ok")
    seen: list[S] = []

    def change(s: S) -> dict:
        seen.append(s)
        s.notes.append("scribbled")  # in place on the copy: not part of the fork
        return {"n": 41}

    res = engine.fork(cid, change, run_id="forked")
    assert res.run_id == "forked"
    assert isinstance(seen[0], S) and seen[0].n == engine.checkpoint(cid).state["n"]
    start = engine.checkpoint("forked:0")
    assert start.state["n"] == 41
    assert start.state["notes"] == ["b"]
    assert res.state.notes == ["b", "c:yes"]
    assert engine.status("forked").parent_run_id == src
    assert engine.checkpoint(cid).state["notes"] == ["b"]


class Text(BaseModel):
    n: int = 0
    notes: list[str] = []
    answer: str | None = None


class Number(BaseModel):
    n: int = 0
    notes: list[str] = []
    answer: int | None = None  # same field names (same version), another type


def typed_flow(model: type[BaseModel]):
    return (
        FlowBuilder("typed", model)
        .await_input("ok", "answer")
        .step("c", lambda s: {"n": 1})
        .chain()
        .compile()
    )


def test_a_replay_of_a_checkpoint_the_model_rejects_names_it(db_path):
    engine = engine_for(db_path, typed_flow(Text))
    rid = engine.run("typed", Text()).run_id
    engine.resume_with(rid, "not a number")
    cid = after(engine, rid, "ok")
    revision = parse_checkpoint_id(cid)[1]
    engine.store.close()
    engine = engine_for(db_path, typed_flow(Number))
    assert engine.flow("typed").version == typed_flow(Text).version
    with pytest.raises(CheckpointDecodeError) as err:
        engine.replay(cid)
    assert (err.value.run_id, err.value.revision, err.value.field_path) == (
        rid,
        revision,
        "answer",
    )
    assert str(err.value).startswith(f"checkpoint of run {rid} revision {revision} cannot")


def test_a_replay_under_a_changed_flow_names_the_run_and_both_versions(db_path):
    old, new = review_flow(Counter(), "1"), review_flow(Counter(), "2")
    engine = engine_for(db_path, old)
    src = engine.run("review", S()).run_id
    engine.store.close()
    engine = engine_for(db_path, new)
    with pytest.raises(FlowVersionMismatchError) as err:
        engine.replay(f"{src}:0")
    assert (err.value.run_id, err.value.stored, err.value.current) == (
        src,
        old.version,
        new.version,
    )
    assert str(err.value).startswith(
        f"run {src} was started under flow version {old.version} but the flow is now {new.version}"
    )
    assert [r.run_id for r in engine.store.list_runs()] == [src]


# -- claim_runnable / _claim_all ----------------------------------------------------


def counting(name: str, calls: Counter):
    def fn(s: S) -> dict:
        calls[name] += 1
        return {"n": s.n + 1}

    return FlowBuilder(name, S).step("one", fn).compile()


def nap_flow():
    return (
        FlowBuilder("nap", S)
        .step("start", lambda s: {"n": 1})
        .sleep("nap", 10.0)
        .step("after", lambda s: {"n": 2})
        .chain()
        .compile()
    )


def test_claim_runnable_hands_out_a_hundred_and_recover_takes_every_run(db_path):
    calls: Counter = Counter()
    clock = ManualClock()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    ids = []
    for _ in range(101):
        ids.append(engine.start("c", S()))
        clock.advance(1.0)
    got = engine.claim_runnable()
    assert len(got) == 100
    assert [r.run_id for r in got] == ids[:100]  # oldest first
    assert all(r.lease_owner == engine.owner for r in got)
    report = engine.recover(concurrency=4)
    assert sorted(r.run_id for r, _ in report) == sorted(ids)
    assert calls["c"] == 101
    assert {engine.status(i).status for i in ids} == {"completed"}


def test_claim_runnable_takes_due_waiting_runs_unless_told_not_to(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, nap_flow(), clock=clock)
    rid = engine.run("nap", S()).run_id
    clock.advance(11.0)
    assert engine.claim_runnable(wakeable=False) == []
    assert engine.status(rid).lease_owner is None
    assert [r.run_id for r in engine.claim_runnable()] == [rid]
    assert engine.status(rid).lease_owner == engine.owner


def test_claim_runnable_keeps_to_the_statuses_and_flows_asked_for(db_path):
    calls: Counter = Counter()
    engine = engine_for(db_path, counting("a", calls), counting("b", calls))
    a = engine.start("a", S())
    b = engine.start("b", S())
    assert engine.claim_runnable(statuses=("running",), wakeable=False) == []
    assert [r.run_id for r in engine.claim_runnable(flows=["b"])] == [b]
    assert engine.status(a).lease_owner is None
    assert engine.status(b).lease_owner == engine.owner


def test_claim_runnable_takes_over_a_run_whose_owner_died(db_path):
    calls: Counter = Counter()
    clock = ManualClock()
    engine = engine_for(db_path, counting("c", calls), clock=clock)
    gone = cli_forkserver.run_argv(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = f"{socket.gethostname()}:{int(gone.stdout)}:dead01"  # exited and reaped
    orphan = engine.start("c", S())
    clock.advance(1.0)
    alive = engine.start("c", S())
    for owner, rid in ((dead, orphan), (OTHER, alive)):
        got = engine.store.claim_runnable(owner, 300.0, wakeable=False, now=clock.now())
        assert [r.run_id for r in got][:1] == [rid]
        for r in got[1:]:
            engine.store.release(r.run_id, owner)
    assert [r.run_id for r in engine.claim_runnable()] == [orphan]  # lease unexpired, owner dead
    assert engine.status(orphan).lease_owner == engine.owner
    assert engine.status(alive).lease_owner == OTHER
