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


# -- a move keeps the wait the run is in (replay.carried_waits) ---------------

HOUR = 3600.0


class W(BaseModel):
    n: int = 0
    order: str = "o-1"
    answer: str | None = None
    got: object = None


def moved(db_path, before, after, *, advance: float = HOUR):
    """A run of ``before`` (flow "w", version "1") that waits, moved onto
    ``after`` (version "2") ``advance`` seconds later: ``(engine, old run
    id, old wait, new run id)``."""
    clock = ManualClock()
    store = open_store(db_path)
    old = Engine(store, flows=[before], clock=clock)
    rid = old.run("w", W()).run_id
    (wait,) = store.latest(rid).waits
    clock.advance(advance)
    engine = Engine(store, flows=[after], clock=clock)
    return engine, rid, wait, engine.fork_onto_current(rid).run_id


def waiting_flow(version: str, wait, entered: list[str]):
    """``prep`` then the wait step ``wait(builder, on_enter)`` adds, then ``end``."""
    b = FlowBuilder("w", W, version=version).step("prep", lambda s: {"n": 1})
    b = wait(b, lambda s, ctx: entered.append(ctx.run_id))
    return b.step("end", lambda s: {"n": 2}).chain().compile()


def test_a_signal_wait_keyed_by_a_function_of_the_state_is_kept(db_path):
    entered: list[str] = []

    def wait(b, on_enter):
        return b.wait_signal("w", "paid", key=lambda s: s.order, timeout_s=HOUR * 5,
                             on_enter=on_enter)  # fmt: skip

    engine, _, before, rid = moved(db_path, waiting_flow("1", wait, entered),
                                   waiting_flow("2", wait, entered))  # fmt: skip
    (kept,) = engine.store.latest(rid).waits
    assert (kept.key, kept.deadline_at, kept.wait_id) == ("o-1", before.deadline_at, f"{rid}:w:0")
    assert len(entered) == 1  # its on_enter is not done again
    engine.signal("paid", "o-1", {"ok": 1})
    assert engine.status(rid).status == "completed"
    engine.store.close()


def test_a_signal_wait_whose_key_changed_begins_anew(db_path):
    entered: list[str] = []

    def wait_on(key):
        return lambda b, on_enter: b.wait_signal("w", "paid", key=key, timeout_s=HOUR * 5,
                                                 on_enter=on_enter)  # fmt: skip

    engine, _, before, rid = moved(db_path, waiting_flow("1", wait_on("k"), entered),
                                   waiting_flow("2", wait_on("k2"), entered))  # fmt: skip
    (fresh,) = engine.store.latest(rid).waits
    assert fresh.key == "k2" and fresh.deadline_at == before.deadline_at + HOUR
    assert entered[-1] == rid and len(entered) == 2
    engine.store.close()


def test_a_signal_wait_become_an_event_wait_of_the_same_name_begins_anew(db_path):
    entered: list[str] = []

    def signal(b, on_enter):
        return b.wait_signal("w", "paid", key="k", timeout_s=HOUR * 5, on_enter=on_enter)

    def event(b, on_enter):
        return b.wait_event("w", "paid", timeout_s=HOUR * 5, on_enter=on_enter)

    engine, _, before, rid = moved(db_path, waiting_flow("1", signal, entered),
                                   waiting_flow("2", event, entered))  # fmt: skip
    (fresh,) = engine.store.latest(rid).waits
    assert fresh.kind == "event" and fresh.deadline_at == before.deadline_at + HOUR
    assert len(entered) == 2
    engine.store.close()


def test_a_signal_key_function_that_raises_on_the_moved_state_is_not_taken_for_the_same(
    db_path,
):
    """The new version's key function fails on the run's state: the wait
    is not carried, so the new run's own begin meets the error (the step
    fails, saying why) instead of waiting on a key it cannot compute."""
    entered: list[str] = []

    def before(b, on_enter):
        return b.wait_signal("w", "paid", key="k", on_enter=on_enter)

    def after(b, on_enter):
        return b.wait_signal("w", "paid", key=lambda s: s.order[99], on_enter=on_enter)

    engine, _, _, rid = moved(db_path, waiting_flow("1", before, entered),
                              waiting_flow("2", after, entered))  # fmt: skip
    assert engine.status(rid).status == "failed"
    assert "IndexError" in (engine.status(rid).error or "")
    engine.store.close()


def test_an_await_with_a_timeout_keeps_its_deadline(db_path):
    def flow_v(version: str):
        b = FlowBuilder("w", W, version=version).step("prep", lambda s: {"n": 1})
        b = b.await_input("ok", "answer", timeout_s=HOUR * 24)
        if version == "2":
            b = b.step("check", lambda s: {"n": 3})
        return b.chain().compile()

    engine, _, before, rid = moved(db_path, flow_v("1"), flow_v("2"))
    (kept,) = engine.store.latest(rid).waits
    assert (kept.kind, kept.deadline_at, kept.wait_id) == ("input", before.deadline_at,
                                                           f"{rid}:ok:0")  # fmt: skip
    assert engine.resume_with(rid, "yes").state.answer == "yes"
    engine.store.close()


def test_a_question_a_plain_step_asks_is_asked_again_on_the_new_version(db_path):
    """An ``interrupt`` inside a plain step is no wait step: the moved run's
    step runs again and asks anew (under the new run's id), and the answer
    goes to it."""

    def ask(s, ctx):
        return {"answer": ctx.interrupt("go on?", timeout_s=HOUR)}

    def flow_v(version: str, first: str):
        b = FlowBuilder("w", W, version=version).step(first, lambda s: {"n": 1})
        return b.step("ask", ask).step("end", lambda s: {"n": 2}).chain().compile()

    engine, _, before, rid = moved(db_path, flow_v("1", "prep"), flow_v("2", "prepare"))
    (asked,) = engine.store.latest(rid).waits
    assert asked.wait_id == f"{rid}:ask:0" and asked.deadline_at == before.deadline_at + HOUR
    assert engine.resume_with(rid, "yes").status == "completed"
    engine.store.close()


def test_a_wait_step_visited_again_after_the_move_waits_anew(db_path):
    """The moved run goes on numbering the waits of the step it was in: when
    its route comes back to that step, the new wait is a new one, not the
    one it answered (which would answer it at once)."""

    def flow_v(version: str, first: str):
        return (
            FlowBuilder("w", W, version=version)
            .step(first, lambda s: {"n": 1})
            .await_input("ok", "answer")
            .step("count", lambda s: {"n": s.n + 1})
            .step("end", lambda s: {"got": "done"})
            .chain(first, "ok", "count")
            .route("count", lambda s: "ok" if s.n < 3 else "end", ["ok", "end"])
            .compile()
        )

    engine, _, _, rid = moved(db_path, flow_v("1", "prep"), flow_v("2", "prepare"))
    first = engine.resume_with(rid, "one")
    assert first.status == "waiting" and first.state.n == 2
    (again,) = engine.store.latest(rid).waits
    assert again.wait_id != f"{rid}:ok:0"
    assert engine.resume_with(rid, "two").status == "completed"
    engine.store.close()


def test_a_replay_of_a_run_of_another_mode_of_the_flow_uses_that_mode(db_path):
    """A run recorded under a mode of the flow (``register_variant``, as
    ``digest --model``) is replayed with that mode, not refused as a run of
    another version."""
    mode = flow("mode", extra=True)
    store = open_store(db_path)
    try:
        first = Engine(store, flows=[mode], clock=ManualClock()).run(mode, S())
        assert first.status == "waiting"
        engine = Engine(store, flows=[flow("plain")], clock=ManualClock())
        engine.register_variant("ctx", mode.version, lambda: flow("mode", extra=True))
        again = engine.replay(f"{first.run_id}:1")
        assert (
            again.status == "waiting" and store.get_run(again.run_id).flow_version == mode.version
        )
        done = engine.resume_with(again.run_id, "yes")
        assert done.status == "completed" and done.state.n == 11  # the mode's extra step ran
    finally:
        store.close()


def test_a_replay_by_an_engine_that_executes_no_runs_is_saved_pending_for_a_worker(db_path):
    """The second tryout (the app on PostgreSQL, which executes no runs):
    a replay was created running and handed back at once, so it read as
    interrupted ("the process that ran it stopped") until a worker took
    it. It is saved pending with no lease, as a run such an engine starts,
    and a worker's engine goes on with it from the checkpoint."""
    from desktop_app.runs_view import display_status

    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[flow("1")], clock=ManualClock())
        first = engine.run("ctx", S())
        assert first.status == "waiting"
        done = engine.resume_with(first.run_id, "yes")
        assert done.status == "completed" and done.state.n == 1
        app = Engine(store, flows=[flow("1")], clock=ManualClock(), executes=False)
        saved = app.replay(f"{first.run_id}:1")  # after prep: the question again
        run = store.get_run(saved.run_id)
        assert (saved.status, run.status, run.lease_owner) == ("pending", "pending", None)
        assert display_status(run, store.now()) == "pending"
        worker = Engine(store, flows=[flow("1")], clock=ManualClock())
        assert worker.resume(saved.run_id).status == "waiting"
        assert worker.resume_with(saved.run_id, "again").state.n == 1  # prep kept, not rerun
    finally:
        store.close()


class Retyped(BaseModel):  # S with ``n`` changed to a list: the same field names
    n: list[str] = []
    answer: str | None = None


def retyped_flow():
    b = FlowBuilder("ctx", Retyped, version="1").step("prep", lambda s: {"n": [*s.n, "p"]})
    return b.await_input("ok", "answer").chain().compile()


def test_a_forks_changes_mend_a_stored_value_whose_type_changed(db_path):
    """The fingerprint has the fields' names, not their types: a run stored
    ``n: 1`` and its flow's model now wants a list, at the same version. A
    fork whose changes give ``n`` a value that fits goes on (the changes
    applied to the stored state before it is decoded); changes that do not
    fit, a function (it needs a decoded state), a field the model lacks, or
    no changes at all are refused as before, naming the checkpoint."""
    import pytest

    from desktop_app.errors import CheckpointDecodeError, InputError

    clock = ManualClock()
    store = open_store(db_path)
    old = Engine(store, flows=[flow("1")], clock=clock)
    waiting = old.run("ctx", S(), context=ExecutionContext(**IDS))
    assert waiting.status == "waiting"
    rev = store.latest(waiting.run_id).revision
    cp = f"{waiting.run_id}:{rev}"
    new = Engine(store, flows=[retyped_flow()], clock=clock)
    assert new.flow("ctx").version == old.flow("ctx").version
    try:
        forked = new.fork(cp, {"n": ["7"]})
        assert forked.status == "waiting"
        assert new.get(forked.run_id) == Retyped(n=["7"])
        assert store.latest(forked.run_id).state["n"] == ["7"]
        for changes, field in (({"n": 5}, "n"), (lambda s: {"n": ["7"]}, "n")):
            with pytest.raises(CheckpointDecodeError) as refused:
                new.fork(cp, changes)
            err = refused.value
            assert (err.run_id, err.revision, err.field_path) == (waiting.run_id, rev, field)
        with pytest.raises(InputError, match="has no field 'nn'"):
            new.fork(cp, {"nn": ["7"]})
        with pytest.raises(CheckpointDecodeError):
            new.replay(cp)
        assert [r.run_id for r in store.list_runs(flow_name="ctx")].count(waiting.run_id) == 1
        assert len(store.list_runs(flow_name="ctx")) == 2  # the one fork that went on
    finally:
        store.close()
