"""What a replay, a move onto a new flow version and the list of runs of
older versions show (flow/replay.py): the new run keeps the old run's
context ids; a run another live process is driving, or one of a variant
version, is not listed, and the runs after it still are.

A real engine over a real SQLite file (``db_path``), a manual clock."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.records import Lease
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    n: int = 0
    answer: str | None = None


IDS = {"tenant_id": "t-1", "user_id": "u-1", "session_id": "s-1", "correlation_id": "c-1"}


def flow(version: str, extra: bool = False):
    b = FlowBuilder("ctx", S, version=version).step("prep", lambda s: {"n": s.n + 1})
    b = b.await_input("ok", "answer")
    if extra:
        b = b.step("check", lambda s: {"n": s.n + 10})
    return b.chain().compile()


def test_a_replay_and_a_move_to_the_new_version_keep_the_runs_context_ids(db_path):
    clock = ManualClock()
    store = open_store(db_path)
    old = Engine(store, flows=[flow("1")], clock=clock)
    rid = old.run("ctx", S(), context=ExecutionContext(**IDS)).run_id
    trace = store.get_run(rid).context["trace_id"]
    first = store.latest(rid)
    replayed = old.replay(f"{rid}:{first.revision}")
    run = store.get_run(replayed.run_id)
    assert {k: run.context[k] for k in IDS} == IDS
    assert run.context["run_id"] == replayed.run_id and run.context["trace_id"] == trace
    new = Engine(store, flows=[flow("2", extra=True)], clock=clock)
    moved = new.fork_onto_current(rid)
    run = store.get_run(moved.run_id)
    assert {k: run.context[k] for k in IDS} == IDS
    assert run.context["run_id"] == moved.run_id and run.context["trace_id"] == trace
    store.close()


def test_runs_of_older_versions_skip_a_held_run_and_a_variant_and_list_the_rest(db_path):
    clock = ManualClock()
    store = open_store(db_path)
    v1, v2 = flow("1"), flow("2", extra=True)
    mode = replace(flow("1b", extra=True), name="ctx")
    assert mode.version not in (v1.version, v2.version)
    current = replace(v2, variants=frozenset({mode.version}))
    # the first runs, in creation order: one of the variant, then one another
    # live engine of this process is driving when the list is taken
    Engine(store, flows=[mode], clock=clock).start("ctx", S())
    clock.advance(1.0)  # listed by creation time (a tie goes by run id)
    seen: list[list[str]] = []
    listing = Engine(store, flows=[current], clock=clock)
    later: list[str] = []

    def drive(s: S) -> dict:
        clock.advance(1.0)
        later.append(old.start("ctx", S()))  # an older-version run nobody drives
        seen.append([r.run_id for r in listing.incompatible_runs()])
        return {"n": 1}

    held_flow = FlowBuilder("ctx", S, version="1").step("prep", drive)
    held_flow = held_flow.await_input("ok", "answer").chain().compile()
    assert held_flow.version == v1.version
    old = Engine(store, flows=[held_flow], clock=clock)
    held = old.run("ctx", S()).run_id
    assert seen == [later]
    # once it waits, no one holds it: both are listed, oldest first
    assert [r.run_id for r in listing.incompatible_runs()] == [held, *later]
    # a process on another host drives it now: held until its lease runs out
    now = listing.store.now()
    store.claim(held, Lease("elsewhere:4242:n", now + 60.0, issued_at=now), now)
    assert [r.run_id for r in listing.incompatible_runs()] == later
    store.close()
