"""The run driver's edges (kill tests for mutants of ``flow/driver.py``): how
a drive starts and ends (events, the engine's record of what it executes,
deadlines, cancellation, max_steps, pruning), what a driver loaded from a
checkpoint carries over (progress, error, context, a checkpoint that does not
decode).

Every run uses a real SQLite file and the injected clock.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import pytest
from pydantic import BaseModel

from desktop_app.errors import CheckpointDecodeError, RunLeasedError
from desktop_app.flow import Engine, EventBus, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.flow.events import RunFinished, RunStarted
from desktop_app.store.protocol import Lease
from desktop_app.store.sqlite.store import open_store
from tests.held_clock import FirstHeldClock

T0 = 1_767_225_600.0


def both_ways(ts: float) -> str:
    """A deadline as a run's timeout error gives it: local time, then UTC."""
    moment = datetime.fromtimestamp(ts, UTC)
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return f"{moment.astimezone():%Y-%m-%d %H:%M:%S %Z} (local), {utc} (UTC)"


class S(BaseModel):
    n: int = 0
    note: str = ""
    error: str = ""


class Fatal(Exception):
    retryable = False


class Env:
    def __init__(self, db_path: Path) -> None:
        self.store = open_store(db_path)
        self.clock = ManualClock(T0)
        self.events: list[Any] = []
        bus = EventBus()
        bus.subscribe(self.events.append)
        self.engine = Engine(self.store, clock=self.clock, events=bus, group_commit=False)


@pytest.fixture
def env(db_path: Path):
    e = Env(db_path)
    yield e
    e.store.close()


def add(k: int):
    return lambda s: {"n": s.n + k}


# -- starting and ending a drive ---------------------------------------------


def test_a_drive_is_announced_tracked_and_finished(env):
    inside: dict[str, Any] = {}

    def work(s: S, ctx) -> dict:
        inside["active"] = ctx.run_id in env.engine.active
        return {"n": 1}

    env.engine.register(FlowBuilder("one", S).step("work", work).compile())
    r = env.engine.run("one", S())
    assert r.status == "completed" and inside == {"active": True}
    assert r.run_id not in env.engine.active  # no longer executing: its lease is not renewed
    assert r.run_id not in env.engine._cancel  # nor its cancel flag kept
    ends = [e for e in env.events if isinstance(e, (RunStarted, RunFinished))]
    assert ends == [RunStarted(r.run_id, "one"), RunFinished(r.run_id, "completed", None)]

    env.events.clear()
    env.engine.register(FlowBuilder("bad", S).step("work", lambda s: 1 / 0).compile())
    r = env.engine.run("bad", S())
    assert r.status == "failed"
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "failed", r.error)
    assert "ZeroDivisionError" in r.error


def test_a_run_past_its_deadline_ends_timed_out_and_says_so(env):
    def slow(s: S) -> dict:
        env.clock.advance(11.0)
        return {"n": 1}

    env.engine.register(
        FlowBuilder("dl", S, deadline_s=10.0).step("a", slow).step("b", add(1)).chain().compile()
    )
    r = env.engine.run("dl", S())
    assert r.status == "timed_out" and r.state.n == 1
    assert r.error == f"run deadline passed ({both_ways(T0 + 10.0)})"
    assert r.revision == env.store.get_run(r.run_id).revision
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "timed_out", r.error)


def test_a_run_canceled_by_its_step_reports_the_stored_cancel(env):
    def cancels(s: S, ctx) -> dict:
        env.engine.cancel(ctx.run_id, "stop it")
        return {"n": 1}

    env.engine.register(FlowBuilder("c", S).step("a", cancels).step("b", add(1)).chain().compile())
    r = env.engine.run("c", S())
    latest = env.store.latest(r.run_id)
    assert r.status == "canceled" and latest.status == "canceled"
    assert r.revision == latest.revision and r.error == latest.error
    assert "stop it" in (r.error or "")
    assert env.store.get_run(r.run_id).lease_owner is None  # the cancel let it go
    (end,) = [e for e in env.events if isinstance(e, RunFinished)]
    assert end == RunFinished(r.run_id, "canceled", latest.error)


def test_max_steps_allows_exactly_that_many_steps(env):
    ran: list[str] = []

    def mark(name: str):
        def fn(s: S) -> dict:
            ran.append(name)
            return {"n": s.n + 1}

        return fn

    env.engine.register(FlowBuilder("one", S, max_steps=1).step("a", mark("a")).compile())
    r = env.engine.run("one", S())
    assert r.status == "completed" and ran == ["a"]

    ran.clear()
    env.engine.register(
        FlowBuilder("three", S, max_steps=2)
        .step("a", mark("a"))
        .step("b", mark("b"))
        .step("c", mark("c"))
        .chain()
        .compile()
    )
    r = env.engine.run("three", S())
    assert r.status == "failed" and ran == ["a", "b"]
    assert r.error == "halted: max_steps 2 reached at step 'c'"


def test_a_finished_run_is_pruned_to_keep_last_n(env):
    env.engine.register(
        FlowBuilder("k", S, keep_last_n=4)
        .step("a", add(1))
        .step("b", add(1))
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("k", S())  # revisions 0..3: too few for a prune while it ran
    assert r.status == "completed" and r.revision == 3
    assert [i.revision for i in env.engine.history(r.run_id)] == [0, 1, 2, 3]

    env.engine.register(
        FlowBuilder("k2", S, keep_last_n=2)
        .step("a", add(1))
        .step("b", add(1))
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("k2", S())
    assert [i.revision for i in env.engine.history(r.run_id)] == [2, 3]


def test_a_long_run_is_pruned_every_keep_last_n_revisions(env):
    """The driver prunes once a run has 2n revisions, then every n: the
    history a step sees (all but its own checkpoint) follows that rule."""
    seen: list[tuple[int, list[int]]] = []

    def body(s: S, ctx) -> dict:
        revisions = [i.revision for i in env.engine.history(ctx.run_id)]
        seen.append((revisions[-1], revisions))
        return {"n": s.n + 1}

    env.engine.register(
        FlowBuilder("long", S, keep_last_n=3)
        .loop("count", body, until=lambda s: s.n >= 11)
        .compile()
    )
    r = env.engine.run("long", S())
    assert r.status == "completed" and r.revision == 12  # 11 iterations, then the step

    def expected(latest: int) -> list[int]:
        pruned_at = [v for v in range(1, latest + 1) if v >= 6 and v % 3 == 0]
        first = pruned_at[-1] - 2 if pruned_at else 0
        return list(range(first, latest + 1))

    assert [latest for latest, _ in seen] == list(range(11))
    assert [revisions for _, revisions in seen] == [expected(v) for v in range(11)]
    assert [i.revision for i in env.engine.history(r.run_id)] == [10, 11, 12]


def test_a_waiting_run_keeps_no_lease(env):
    env.engine.register(
        FlowBuilder("w", S).await_input("ask", "note").step("b", add(1)).chain().compile()
    )
    r = env.engine.run("w", S())
    assert r.status == "waiting"
    assert env.store.get_run(r.run_id).lease_owner is None


# -- what a loaded driver carries over ----------------------------------------


def test_a_resumed_run_keeps_its_progress_and_a_woken_paused_run_its_error(env):
    fixed = {"on": False}

    def first(s: S, ctx) -> dict:
        ctx.progress(1, 3)
        return {"n": 1}

    def second(s: S) -> dict:
        if not fixed["on"]:
            raise Fatal("needs a hand")
        return {"n": 2}

    env.engine.register(
        FlowBuilder("p", S)
        .step("a", first)
        .step("b", second, on_error="pause")
        .step("c", add(1))
        .chain()
        .compile()
    )
    r = env.engine.run("p", S())
    assert r.status == "waiting"
    assert r.error == "paused after step 'b' failed: Fatal: needs a hand"
    woken = env.engine.wake(r.run_id)  # a paused run is left to the operator
    assert (woken.status, woken.error) == ("waiting", r.error)
    fixed["on"] = True
    r = env.engine.resume(r.run_id)
    assert r.status == "completed" and r.state.n == 3
    later = [
        env.engine.checkpoint(f"{r.run_id}:{i.revision}") for i in env.engine.history(r.run_id)
    ]
    assert [cp.progress for cp in later[3:]] == [(1, 3)] * (len(later) - 3)


def test_a_step_gets_the_runs_context_and_a_store_to_query(env):
    seen: dict[str, Any] = {}

    def work(s: S, ctx) -> dict:
        seen["user"] = ctx.context.user_id
        seen["run"] = ctx.context.run_id
        seen["status"] = ctx.query(
            lambda tx: tx.fetchone("SELECT status FROM runs WHERE run_id=?", (ctx.run_id,))[0]
        )
        return {}

    env.engine.register(FlowBuilder("ctx", S).step("work", work).compile())
    r = env.engine.run("ctx", S(), context=ExecutionContext(user_id="u-7"))
    assert r.status == "completed", r.error
    assert seen == {"user": "u-7", "run": r.run_id, "status": "running"}


def test_resuming_a_checkpoint_that_does_not_decode_names_run_and_revision(db_path):
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock(T0))
    flow = FlowBuilder("d", S).step("a", add(1)).step("b", lambda s: 1 / 0).chain().compile()
    engine.register(flow)
    r = engine.run("d", S())
    assert r.status == "failed"
    store.close()
    conn = apsw.Connection(str(db_path))  # the file is closed: edit its latest row
    conn.execute(
        'UPDATE checkpoints SET state=\'{"set": {"n": "not a number"}}\', checksum=NULL '
        "WHERE run_id=? AND revision=?",
        (r.run_id, r.revision),
    )
    conn.close()
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[flow], clock=ManualClock(T0))
        with pytest.raises(CheckpointDecodeError) as info:
            engine.resume(r.run_id)
        assert (info.value.run_id, info.value.revision) == (r.run_id, r.revision)
    finally:
        store.close()


# -- two drivers loading the same run at once ----------------------------------


class MeetingClock(ManualClock):
    """The injected clock, at which two resuming threads meet: each thread
    named ``resumer-*`` waits at its ``meet_at``-th reading of the time for
    the other one, so both have loaded the run before either saves; a thread
    named in ``hold`` then waits at its next reading (its save) for that event."""

    def __init__(self, meet_at: int) -> None:
        super().__init__(T0)
        self.meet_at = meet_at
        self.barrier = threading.Barrier(2, timeout=30)
        self.hold: dict[str, threading.Event] = {}
        self.calls = threading.local()
        self.armed = False

    def now(self) -> float:
        name = threading.current_thread().name
        if self.armed and name.startswith("resumer-"):
            n = getattr(self.calls, "n", 0) + 1
            self.calls.n = n
            if n == self.meet_at:
                self.barrier.wait()
            elif n == self.meet_at + 1 and name in self.hold:
                assert self.hold[name].wait(30)
        return super().now()


def _failed_run(engine: Engine, fixed: dict[str, bool], ran: list[str]) -> str:
    def work(s: S) -> dict:
        ran.append(threading.current_thread().name)
        if not fixed["on"]:
            raise Fatal("not yet")
        return {"n": 1}

    engine.register(FlowBuilder("race", S).step("work", work).compile())
    r = engine.run("race", S())
    assert r.status == "failed"
    fixed["on"] = True
    ran.clear()
    return r.run_id


def _resume_both(engines: dict[str, Engine], run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def go(name: str) -> None:
        try:
            out[name] = engines[name].resume(run_id)
        except Exception as exc:  # the loser's error is the point
            out[name] = exc

    threads = [threading.Thread(target=go, args=(n,), name=f"resumer-{n}") for n in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_one_engine_resuming_a_run_twice_at_once_runs_it_once(env):
    """Two threads of one engine (one owner) resume the same failed run. The
    lease is the process's, so only the engine's own guard keeps the step
    from running twice: the thread that has the run in hand runs it, the
    other is refused (``RunLeasedError``: nothing run) while the first holds it."""
    clock = FirstHeldClock("resumer-")
    engine = Engine(env.store, clock=clock, group_commit=False)
    fixed = {"on": False}
    ran: list[str] = []
    rid = _failed_run(engine, fixed, ran)
    clock.armed = True
    out: dict[str, Any] = {}

    def go(name: str) -> None:
        try:
            out[name] = engine.resume(rid)
        except RunLeasedError as exc:
            out[name] = exc
        if clock.first != f"resumer-{name}":
            clock.release.set()  # the one turned away is back: let the other go on

    threads = [threading.Thread(target=go, args=(n,), name=f"resumer-{n}") for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert clock.first is not None
    first = clock.first.removeprefix("resumer-")
    other = "b" if first == "a" else "a"
    assert isinstance(out[other], RunLeasedError)  # nothing run there
    assert env.store.latest(rid).revision >= 1
    assert out[first].status == "completed" and ran == [clock.first]
    assert env.store.get_run(rid).status == "completed"


def test_two_engines_taking_over_a_dead_owners_run_at_once(db_path: Path):
    """Both see the lease of a dead process on this host and take the run
    over; the one that saves second finds the run already finished and
    released by the other: it is told another process had it, and nothing
    runs twice."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid names no process
    clock = MeetingClock(meet_at=2)  # after the lease check and the load
    stores = {n: open_store(db_path) for n in ("a", "b")}
    engines = {
        n: Engine(stores[n], clock=clock, owner=f"host{n}:{i}:x", lease_ttl_s=60)
        for i, n in enumerate(("a", "b"), start=1)
    }
    a_done = threading.Event()
    clock.hold = {"resumer-b": a_done}  # b saves only once a has finished the run
    ran: list[str] = []
    fixed = {"on": False}

    def work(s: S) -> dict:
        ran.append(threading.current_thread().name)
        if not fixed["on"]:
            raise Fatal("not yet")
        return {"n": 1}

    try:
        for e in engines.values():
            e.register(FlowBuilder("race", S).step("work", work).compile())
        first = engines["a"].run("race", S())
        assert first.status == "failed"
        rid = first.run_id
        fixed["on"] = True
        ran.clear()
        now = clock.now()
        stores["a"].claim(
            rid, Lease(f"{socket.gethostname()}:{dead.pid}:gone", now + 600, now), now
        )
        clock.armed = True

        out: dict[str, Any] = {}

        def go(name: str) -> None:
            try:
                out[name] = engines[name].resume(rid)
            except Exception as exc:  # the loser's error is the point
                out[name] = exc
            finally:
                if name == "a":
                    a_done.set()

        threads = [threading.Thread(target=go, args=(n,), name=f"resumer-{n}") for n in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert out["a"].status == "completed" and ran == ["resumer-a"]
        err = out["b"]
        assert isinstance(err, RunLeasedError), repr(err)
        # no lease is left to expire, and the run is said completed (not a
        # live holder with a lease until 1970)
        assert (err.run_id, err.owner, err.expires_at) == (rid, "another process", None)
        assert err.run_status == "completed" and "1970" not in str(err)
        assert stores["b"].get_run(rid).status == "completed"
    finally:
        for s in stores.values():
            s.close()


def test_a_stopped_run_whose_release_fails_still_returns_as_saved(env, db_path):
    """A run stopped before its next step (the engine shuts down) is handed
    back on the way out; when that release fails (a trigger refuses it, as a
    failing disk would) the drive still returns the run as saved, and its
    lease expires on its own."""

    def first(s: S) -> dict:
        env.engine.shutdown_event.set()  # stop before the next step
        return {"n": 1}

    env.engine.register(FlowBuilder("stop", S).step("a", first).step("b", add(1)).chain().compile())
    other = apsw.Connection(str(db_path))
    other.execute(
        "CREATE TRIGGER refuse_release BEFORE UPDATE OF lease_owner ON runs "
        "WHEN NEW.lease_owner IS NULL BEGIN SELECT RAISE(ABORT, 'release refused'); END"
    )
    other.close()
    r = env.engine.run("stop", S())
    assert (r.status, r.state.n) == ("running", 1)
    run = env.store.get_run(r.run_id)
    assert run.lease_owner == env.engine.owner and run.lease_expires_at is not None
    assert env.store.latest(r.run_id).frontier == ("b",)
