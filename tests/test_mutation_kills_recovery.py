"""Sweeps over claimed runs (``flow/recovery.py``): a sweep by a process that
does not execute runs hands every pending run out exactly once however many
there are, and claims no run more often than it must; a failed run that
stored no reason is reported with the words a person reads (kill tests for
mutants of ``claimed`` and ``resume_pending``).

Every test runs on a real SQLite file, seen from a second connection where a
trigger records each claim the sweep makes, and the injected clock.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import apsw
from pydantic import BaseModel

from desktop_app.errors import StepFailedError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.test_mutation_kills_engine_claims import resume_pending_guarded

GUARD_S = 60.0  # only a hang guard: no passing test waits for it


class S(BaseModel):
    n: int = 0


def counting(executed: Counter[str]):
    def work(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        return {"n": s.n + 1}

    return FlowBuilder("c", S).step("work", work).compile()


def start(engine: Engine, count: int) -> list[str]:
    """``count`` pending runs of ``c``, one clock second apart (claims go oldest first)."""
    ids = []
    for _ in range(count):
        ids.append(engine.start("c", S()))
        engine.clock.advance(1)  # type: ignore[attr-defined]
    return ids


def log_claims(db_path: Path) -> apsw.Connection:
    """Record, in a table of its own, every lease set on a run without a new
    revision: a claim (a save sets the lease with its revision)."""
    conn = apsw.Connection(str(db_path))
    conn.execute("CREATE TABLE test_lease_log(run_id TEXT, owner TEXT)")
    conn.execute(
        "CREATE TRIGGER test_lease_log_t AFTER UPDATE OF lease_owner ON runs "
        "WHEN NEW.lease_owner IS NOT NULL AND NEW.revision = OLD.revision "
        "BEGIN INSERT INTO test_lease_log VALUES (NEW.run_id, NEW.lease_owner); END"
    )
    return conn


def claims_per_run(conn: apsw.Connection, owner: str) -> Counter[str]:
    rows = conn.execute("SELECT run_id FROM test_lease_log WHERE owner=?", (owner,))
    return Counter(r for (r,) in rows)


def observer_sweep(db_path: Path, count: int) -> tuple[list[str], Engine, object]:
    """``count`` pending runs, then ``resume_pending`` by an engine that does
    not execute them (``executes=False``: each run is saved ``running`` and
    its lease released, so every later claim finds it again)."""
    writer = Engine(open_store(db_path), flows=[counting(Counter())], clock=ManualClock())
    ids = start(writer, count)
    writer.store.close()
    observer = Engine(
        open_store(db_path), flows=[counting(Counter())], clock=ManualClock(), executes=False
    )
    return ids, observer, resume_pending_guarded(observer, GUARD_S)


def test_an_observer_sweep_hands_out_every_run_beyond_the_first_batch(db_path):
    """40 pending runs: the first claim takes 32, the second comes back full
    of those 32 (still claimable: released, still ``running``), so the sweep
    asks again with room for them and hands out the other 8. Each run is
    handed out once, saved once, and no claim is left behind."""
    ids, observer, out = observer_sweep(db_path, 40)
    assert [(r.run_id, r.status) for r in out.resumed] == [(rid, "running") for rid in ids]  # type: ignore[attr-defined]
    assert (out.failed_run_id, out.error) == (None, None)  # type: ignore[attr-defined]
    runs = [observer.store.get_run(rid) for rid in ids]
    assert [(r.status, r.revision, r.lease_owner) for r in runs] == [("running", 1, None)] * 40
    observer.store.close()


def test_an_observer_sweep_ends_at_the_first_claim_with_nothing_new(db_path):
    """Three runs: the first claim hands them out; the second finds the same
    three and nothing new, is not full, and ends the sweep: each run is
    claimed twice, no more (each claim is a write transaction)."""
    conn = log_claims(db_path)
    ids, observer, out = observer_sweep(db_path, 3)
    assert [r.run_id for r in out.resumed] == ids  # type: ignore[attr-defined]
    assert claims_per_run(conn, observer.owner) == Counter({rid: 2 for rid in ids})
    assert [observer.store.get_run(rid).lease_owner for rid in ids] == [None] * 3
    observer.store.close()
    conn.close()


def test_a_full_claim_of_runs_handed_out_before_is_followed_by_one_with_room(db_path):
    """40 runs: claims of 32, 32 (full, nothing new), 64 (8 new) and 64
    (nothing new, not full): the first 32 runs are claimed four times, the
    last 8 twice."""
    conn = log_claims(db_path)
    ids, observer, out = observer_sweep(db_path, 40)
    assert [r.run_id for r in out.resumed] == ids  # type: ignore[attr-defined]
    expected = Counter({rid: 4 for rid in ids[:32]}) + Counter({rid: 2 for rid in ids[32:]})
    assert claims_per_run(conn, observer.owner) == expected
    observer.store.close()
    conn.close()


def test_a_failed_run_that_stored_no_reason_is_reported_as_failed(db_path):
    """A run another writer marked ``failed`` after its last step completed,
    with no reason: the sweep resumes it (nothing is left to run, so it stays
    failed) and stops there, naming the step it stopped at and the word
    ``failed`` for the reason it does not have."""
    executed: Counter[str] = Counter()
    engine = Engine(open_store(db_path), flows=[counting(executed)], clock=ManualClock())
    done = engine.run("c", S()).run_id
    engine.clock.advance(1)  # type: ignore[attr-defined]
    engine.store.update_latest(
        done, lambda cp: cp.evolve(revision=cp.revision + 1, status="failed", error=None)
    )
    (later,) = start(engine, 1)
    out = engine.resume_pending()
    assert [(r.run_id, r.status, r.error) for r in out.resumed] == [(done, "failed", None)]
    assert out.failed_run_id == done
    assert isinstance(out.error, StepFailedError)
    assert str(out.error) == f"run {done}: step 'work' failed after 0 attempts: failed"
    assert engine.store.get_run(later).status == "pending"
    assert executed == Counter({done: 1})  # its step ran once, when it was run
    engine.store.close()


# -- recover() interrupted in the calling thread (Ctrl-C on `resume --all`) ----


def _steps_flow(name: str, steps: int, seen: list[str]):  # type: ignore[no-untyped-def]
    """A flow of ``steps`` steps, each recording ``run_id:step`` and taking 20 ms."""
    import time

    def work(s: S, ctx) -> dict:  # type: ignore[no-untyped-def]
        seen.append(f"{ctx.run_id}:{ctx.step_id}")
        time.sleep(0.02)
        return {"n": s.n + 1}

    b = FlowBuilder(name, S)
    for i in range(steps):
        b = b.step(f"s{i}", work)
    return b.chain().compile()


def test_an_interrupted_recover_stops_the_runs_in_flight_before_their_next_step(db_path):
    """Three interrupted runs recovered two at a time: the short one ends
    first and Ctrl-C lands (its report raises, in the calling thread); the
    two long ones in flight stop before their next step, stay resumable,
    held by nobody; the KeyboardInterrupt goes on and the engine's shutdown
    event is clear again."""
    seen: list[str] = []
    flows = [_steps_flow("short", 1, seen), _steps_flow("long", 200, seen)]
    engine = Engine(open_store(db_path), flows=flows, clock=ManualClock())
    try:
        short = engine.start("short", S())
        engine.clock.advance(1)  # type: ignore[attr-defined]
        longs = [engine.start("long", S()) for _ in range(2)]

        def report(run, out) -> None:  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

        import pytest

        with pytest.raises(KeyboardInterrupt):
            engine.recover(on_result=report, concurrency=2)
        assert engine.store.get_run(short).status == "completed"
        for rid in longs:
            run = engine.store.get_run(rid)
            assert run.status in ("pending", "running") and run.lease_owner is None
            assert sum(1 for s in seen if s.startswith(rid)) < 200  # stopped, not run to its end
        assert not engine.shutdown_event.is_set()
    finally:
        engine.store.close()


def test_an_interrupted_recover_gives_back_the_claims_of_the_runs_it_never_started(db_path):
    """One run at a time: Ctrl-C in the first run's report; the others were
    claimed and never started: their claims are given back at once (held by
    nobody), not left to expire with the lease."""
    seen: list[str] = []
    engine = Engine(open_store(db_path), flows=[_steps_flow("short", 1, seen)], clock=ManualClock())
    try:
        ids = []
        for _ in range(4):
            ids.append(engine.start("short", S()))
            engine.clock.advance(1)  # type: ignore[attr-defined]

        def report(run, out) -> None:  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

        import pytest

        with pytest.raises(KeyboardInterrupt):  # not an error of the clean-up in its place
            engine.recover(on_result=report, concurrency=1)
        first, *rest = [engine.store.get_run(rid) for rid in ids]
        assert first.status == "completed"
        assert [(r.status, r.lease_owner) for r in rest] == [("pending", None)] * 3
        assert seen == [f"{ids[0]}:s0"]
    finally:
        engine.store.close()


def test_a_recover_that_leaves_a_run_out_keeps_the_lease_of_one_this_engine_drives(db_path):
    """``recover(only=...)`` leaving out a run this same engine is driving
    on another thread (the app recovering while its own worker runs one):
    the sweep claims it (the lease is this engine's) but does not give the
    lease back under the run in flight."""
    import threading

    release = threading.Event()

    def slow(s: S, ctx) -> dict:  # type: ignore[no-untyped-def]
        release.wait(GUARD_S)
        return {"n": s.n + 1}

    flow = FlowBuilder("slow", S).step("a", slow).step("b", slow).chain().compile()
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    try:
        rid = engine.start("slow", S())
        driving = threading.Thread(target=engine.resume, args=(rid,))
        driving.start()
        import time

        deadline = time.monotonic() + GUARD_S
        while not engine.holds(rid):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        engine.recover(only=lambda run: False)
        assert engine.store.get_run(rid).lease_owner == engine.owner  # still held
        release.set()
        driving.join(GUARD_S)
        assert engine.store.get_run(rid).status == "completed"
    finally:
        release.set()
        engine.store.close()
