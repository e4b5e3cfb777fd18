"""The run as one object (desktop_app.flow.run): a checkpoint's meta read as
the typed RunMeta writes back byte-identical, and the engine reads a run once
(``RunLog.head``) before it drives it."""

from __future__ import annotations

import typing

import apsw
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.run import RunMeta, RunState, run_meta
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.protocol import Checkpoint, RunHead, RunRecord, StepRecord
from desktop_app.store.sqlite.store import open_store

#: meta as checkpoints stored it before RunMeta existed: every key the engine
#: writes, in no particular order, with nested values, floats and non-ASCII
OLD_META = {
    "visits": {"b": 2, "a": 1},
    "steps_taken": 7,
    "halt_reason": "max_steps",
    "pause": {"step": "a", "error": "boom ✓"},
    "await": {"step": "ask", "into": "answer", "prompt": {"q": "approve?", "n": [1, 2.5]}},
    "conditions": {"c": True},
    "branches": {"par": {"x": {"v": 1}}},
    "children": {"a": [{"id": "c1", "kind": "flow"}]},
    "answers": {"r:ask:0": "yes"},
    "asked": {"r:ask:0": "0" * 64},
    "continuations": {"ask": {"draft": 3}},
    "wait_seq": {"w": 3},
    "event_since": {"e": 1234.5},
    "resolved": ["r:ask:0"],
    "forked_from_version": "v0",
    "forked_from": "old@3",
    "replayed_from": "old@2",
    "resumed": [[3, "running"]],
    "choices": {"w1": ["yes", "no"]},
    "refused_signals": [{"signal": 7, "wait": "w1", "reason": "[1, 2] is not a dict"}],
    "refused_events": [{"event": 4, "wait": "w2", "reason": "[1, 2] is not a dict"}],
}


def raw_meta(path: str, run_id: str, revision: int) -> str:
    conn = apsw.Connection(path)
    try:
        rows = list(
            conn.execute(
                "SELECT meta FROM checkpoints WHERE run_id=? AND revision=?", (run_id, revision)
            )
        )
    finally:
        conn.close()
    return str(rows[0][0])


def test_run_meta_names_every_key_the_engine_stores() -> None:
    assert set(typing.get_type_hints(RunMeta)) == set(OLD_META)


def test_an_old_checkpoints_meta_round_trips_byte_identically(db_path) -> None:
    path = str(db_path)
    store = open_store(path)
    run = RunRecord("r", "f", "v1", "waiting", 0, 1000.0, 1000.0)
    steps = {"a": StepRecord("a", "done")}
    first = Checkpoint("r", 0, "waiting", {"n": 1}, steps, ("a",), 1000.0, meta=OLD_META)
    store.create_run(run, first)
    stored = raw_meta(path, "r", 0)

    state = RunState.read(open_store(path), "r")
    assert state.meta == OLD_META
    assert state.paused and not state.sleeping  # a pause is not a wait to wake
    again = state.checkpoint.evolve(revision=1, meta=run_meta(state.meta))
    store.append(again)
    assert raw_meta(path, "r", 1) == stored


class Counting(InMemoryCheckpointStore):
    """Counts the reads of one run before the first checkpoint after them."""

    def __init__(self) -> None:
        super().__init__(space="run-state-reads")
        self.reads: list[str] = []
        self.counting = False

    def get_run(self, run_id: str) -> RunRecord:
        if self.counting:
            self.reads.append("get_run")
        return super().get_run(run_id)

    def latest(self, run_id: str) -> Checkpoint:
        if self.counting:
            self.reads.append("latest")
        return super().latest(run_id)

    def head(self, run_id: str) -> RunHead:
        if self.counting:
            self.reads.append("head")
        return super().head(run_id)

    def append(self, checkpoint: Checkpoint, *args: typing.Any, **kw: typing.Any) -> None:
        self.counting = False
        super().append(checkpoint, *args, **kw)


class S(BaseModel):
    n: int = 0


def test_a_run_is_read_once_before_its_first_step() -> None:
    """Resuming reads the run once (``head``); running a run just created
    reads nothing back: the engine drives it from what it stored."""
    store = Counting()
    flow = FlowBuilder("once", S).step("a", lambda s: {"n": s.n + 1}).chain().compile()
    engine = Engine(store, flows=[flow], clock=ManualClock(), group_commit=False)
    rid = engine.start(flow, S())
    store.counting = True
    assert engine.resume(rid).status == "completed"
    assert store.reads == ["head"]
    store.counting = True
    store.reads.clear()
    started = engine.run(flow, S())
    assert started.status == "completed"
    assert store.reads == []  # a run it just created: it has what it stored
    assert store.latest(started.run_id).state == {"n": 1}
