"""Leases, run creation and run tracking through the Engine's public API: the
lease the heartbeat renews (to what expiry, how often, for which runs, when it
stops), the run record a new run is stored with, what ``run``/``start`` hand
back for a single-flight key, the unknown-flow error and the cancel flags
(kill tests for mutants of ``Engine._renew_leases/_create/track/flow/start/
forget_cancel/__init__/lease/commit/_submit/run`` in ``flow/engine.py``).

Every test runs on a real SQLite file and the injected clock. The heartbeat
thread waits on ``engine.heartbeat_stop``; the tests swap in an event whose
``wait`` returns only when the test lets it (one "tick"), so each renewal
happens at a known moment on the manual clock, without sleeps.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import (
    CheckpointDecodeError,
    LeaseLostError,
    UnknownFlowError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.records import Lease
from desktop_app.store.sqlite.store import open_store

OTHER = "elsewhere.example:4242:abc123"  # a live owner on another host: never presumed dead
HEARTBEAT = "flowdesk-leases"
LIMIT = 10.0  # seconds any single handshake may take before the test fails (not a sync)


class S(BaseModel):
    n: int = 0


class T(BaseModel):  # a later state model: the stored S checkpoints do not decode into it
    m: int = 0


class Ticks(threading.Event):
    """``engine.heartbeat_stop`` for the heartbeat: every ``wait`` from a thread
    other than the test's own records its timeout and blocks until ``tick``.
    ``set`` (shutdown) frees every waiter for good."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []
        self.threads: list[threading.Thread] = []
        self._entered = threading.Semaphore(0)
        self._go = threading.Semaphore(0)
        self._main = threading.current_thread()

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread() is self._main or self.is_set():
            return super().wait(timeout)
        self.timeouts.append(timeout)
        self.threads.append(threading.current_thread())
        self._entered.release()
        self._go.acquire()
        return self.is_set()

    def waiting(self) -> None:
        """Until the heartbeat (re)enters its wait: its previous round is done."""
        assert self._entered.acquire(timeout=LIMIT), "the heartbeat never waited"

    def tick(self) -> None:
        """Let one waiting heartbeat round run, and wait until it is done."""
        self._go.release()
        self.waiting()

    def set(self) -> None:
        super().set()
        for _ in range(100):
            self._go.release()


class Blocker:
    """A step function that signals it began and blocks until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, s: S) -> dict:
        self.entered.set()
        assert self.release.wait(LIMIT)
        return {"n": s.n + 1}


def blocking_flow(name: str, blocker: Blocker):
    return (
        FlowBuilder(name, S)
        .step("hold", blocker)
        .step("after", lambda s: {"n": s.n + 10})
        .chain()
        .compile()
    )


def quick_flow(name: str = "quick"):
    return FlowBuilder(name, S).step("one", lambda s: {"n": s.n + 1}).compile()


def failing_flow(name: str = "flaky", state_type: type[BaseModel] = S, version: str = "1"):
    def boom(s: BaseModel) -> dict:
        raise RuntimeError("disk on fire")

    return FlowBuilder(name, state_type, version=version).step("boom", boom, retry=1).compile()


def engine_for(db_path: Path, *flows, clock: ManualClock | None = None, **kw) -> Engine:
    return Engine(open_store(db_path), flows=list(flows), clock=clock or ManualClock(), **kw)


def ticking(engine: Engine) -> Ticks:
    ticks = Ticks()
    engine.heartbeat_stop = ticks
    return ticks


class Driving:
    """``engine.run`` of a blocking flow on its own thread, entered into its step."""

    def __init__(self, engine: Engine, flow_name: str, blocker: Blocker, run_id: str) -> None:
        self.blocker = blocker
        self.result = None
        self.error: BaseException | None = None

        def go() -> None:
            try:
                self.result = engine.run(flow_name, {"n": 0}, run_id=run_id)
            except BaseException as exc:  # pragma: no cover - reported by finish()
                self.error = exc

        self.thread = threading.Thread(target=go)  # not a daemon: nor is its heartbeat
        self.thread.start()
        assert blocker.entered.wait(LIMIT), "the step never began"

    def finish(self):
        self.blocker.release.set()
        self.thread.join(LIMIT)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


# -- the heartbeat ---------------------------------------------------------


def test_heartbeat_renews_an_executing_runs_lease_every_third_ttl_and_stops_after(db_path):
    clock = ManualClock()
    t0 = clock.now()
    blocker = Blocker()
    engine = engine_for(db_path, blocking_flow("hold", blocker), clock=clock)  # default ttl
    ticks = ticking(engine)
    driving = Driving(engine, "hold", blocker, "r1")
    try:
        ticks.waiting()
        (beat,) = set(ticks.threads)
        assert beat.name == HEARTBEAT and beat.daemon  # never keeps a process alive
        assert ticks.timeouts == [10.0]  # lease_ttl_s / 3 with the default 30 s
        row = engine.store.get_run("r1")
        assert (row.lease_owner, row.lease_expires_at) == (engine.owner, t0 + 30.0)
        clock.advance(5.0)
        ticks.tick()  # one renewal round
        row = engine.store.get_run("r1")
        assert (row.lease_owner, row.lease_expires_at) == (engine.owner, t0 + 35.0)
        assert ticks.timeouts == [10.0, 10.0]
        clock.advance(4.0)
        ticks.tick()
        assert engine.store.get_run("r1").lease_expires_at == t0 + 39.0
        assert "r1" not in engine.lost
    finally:
        result = driving.finish()
    assert (result.status, result.state.n) == ("completed", 11)
    assert engine.active == set()
    clock.advance(5.0)
    ticks._go.release()  # the next round finds nothing to renew: the heartbeat ends
    beat.join(LIMIT)
    assert not beat.is_alive()
    row = engine.store.get_run("r1")
    assert (row.lease_owner, row.lease_expires_at) == (None, None)  # a done run is not renewed
    ticks.set()


def test_heartbeat_interval_has_a_floor_of_50_ms(db_path):
    blocker = Blocker()
    engine = engine_for(db_path, blocking_flow("hold", blocker), lease_ttl_s=0.09)
    ticks = ticking(engine)
    driving = Driving(engine, "hold", blocker, "r1")
    try:
        ticks.waiting()
        assert ticks.timeouts == [0.05]  # max(0.05, 0.09 / 3)
    finally:
        ticks.set()
        driving.finish()


def test_runs_executing_at_once_share_one_heartbeat_and_each_is_renewed(db_path):
    clock = ManualClock()
    t0 = clock.now()
    a, b = Blocker(), Blocker()
    engine = engine_for(db_path, blocking_flow("a", a), blocking_flow("b", b), clock=clock)
    ticks = ticking(engine)
    earlier = set(threading.enumerate())  # other engines' heartbeats may still be winding down
    da = Driving(engine, "a", a, "ra")
    db_ = Driving(engine, "b", b, "rb")
    try:
        ticks.waiting()
        alive = [t for t in threading.enumerate() if t.name == HEARTBEAT and t not in earlier]
        assert len(alive) == 1 and len(set(ticks.threads)) == 1
        assert engine.active == {"ra", "rb"}
        clock.advance(7.0)
        ticks.tick()
        for rid in ("ra", "rb"):
            row = engine.store.get_run(rid)
            assert (row.lease_owner, row.lease_expires_at) == (engine.owner, t0 + 37.0)
    finally:
        da.finish()
        db_.finish()
        ticks.set()


def test_a_run_whose_lease_another_live_owner_took_is_lost_then_resumable_later(db_path):
    clock = ManualClock()
    blocker = Blocker()
    engine = engine_for(db_path, blocking_flow("hold", blocker), clock=clock)
    other = open_store(db_path)
    ticks = ticking(engine)
    driving = Driving(engine, "hold", blocker, "r1")
    try:
        ticks.waiting()
        now = clock.now()
        taken = Lease(OTHER, now + 100.0, math.inf, takes_over=engine.owner)
        other.claim("r1", taken, math.inf)  # taken over, still live
        ticks.tick()
        assert "r1" in engine.lost  # its driver stops before the next step
        assert engine.store.get_run("r1").lease_owner == OTHER
    finally:
        with pytest.raises(LeaseLostError):  # its step's save is refused: nothing saved
            driving.finish()
    assert engine.store.latest("r1").state["n"] == 0
    assert engine.store.get_run("r1").lease_owner == OTHER
    # the other owner's lease lapses; this engine resumes the run and finishes it
    clock.advance(200.0)
    blocker.release.set()
    again = engine.resume("r1")
    assert (again.status, again.state.n) == ("completed", 11)
    assert "r1" not in engine.lost
    ticks.set()


def test_heartbeat_never_takes_back_a_lease_another_owner_took_even_once_it_expired(db_path):
    clock = ManualClock()
    blocker = Blocker()
    engine = engine_for(db_path, blocking_flow("hold", blocker), clock=clock)
    other = open_store(db_path)
    ticks = ticking(engine)
    driving = Driving(engine, "hold", blocker, "r1")
    try:
        ticks.waiting()
        now = clock.now()
        other.claim("r1", Lease(OTHER, now + 1.0, math.inf, takes_over=engine.owner), math.inf)
        clock.advance(2.0)  # OTHER's lease expired at the heartbeat's "now"
        ticks.tick()
        row = engine.store.get_run("r1")
        assert (row.lease_owner, row.lease_expires_at) == (OTHER, now + 1.0)  # not taken back
        assert "r1" in engine.lost
    finally:
        with pytest.raises(LeaseLostError):  # the owner learns it lost the run
            driving.finish()
        ticks.set()
    assert engine.store.latest("r1").state["n"] == 0  # nothing of its step was saved


# -- the run record _create stores ------------------------------------------


def test_start_stores_a_pending_run_with_no_lease_in_the_stores_scope(db_path):
    clock = ManualClock()
    engine = Engine(
        open_store(db_path, scope="team-a"), flows=[quick_flow()], clock=clock, lease_ttl_s=12.0
    )
    parent = engine.start("quick", {"n": 1}, run_id="p1")
    ctx = ExecutionContext(user_id="u7", session_id="s9", correlation_id="c3")
    rid = engine.start(
        "quick", {"n": 2}, run_id="c1", context=ctx, flow_key="k1", parent_run_id=parent
    )
    assert rid == "c1"
    run = engine.store.get_run("c1")
    assert (run.status, run.revision, run.scope) == ("pending", 0, "team-a")
    assert (run.flow_key, run.parent_run_id) == ("k1", "p1")
    assert (run.lease_owner, run.lease_expires_at) == (None, None)
    assert (run.created_at, run.deadline_at) == (clock.now(), None)
    assert run.context["run_id"] == "c1"
    assert (run.context["user_id"], run.context["session_id"]) == ("u7", "s9")
    assert run.context["correlation_id"] == "c3"
    trace = run.context["trace_id"]
    assert isinstance(trace, str) and len(trace) == 32 and int(trace, 16) >= 0
    assert "XXtrace_idXX" not in run.context and "TRACE_ID" not in run.context
    cp = engine.store.latest("c1")
    assert (cp.revision, cp.status, cp.frontier) == (0, "pending", ("one",))
    assert [r.scope for r in open_store(db_path, scope="team-a").list_runs()] == ["team-a"] * 2
    assert open_store(db_path).list_runs() == []  # nothing leaked into the default scope


def test_run_creates_the_run_leased_to_this_engine_for_ttl_seconds(db_path):
    clock = ManualClock()
    t0 = clock.now()
    seen: dict = {}
    engine = engine_for(db_path, clock=clock, lease_ttl_s=12.0)

    def look(s: S) -> dict:
        row = engine.store.get_run("r1")
        cp = engine.store.latest("r1")
        seen.update(
            owner=row.lease_owner,
            expires=row.lease_expires_at,
            status=row.status,
            revision=row.revision,
            step=cp.steps["look"].status,
        )
        return {"n": 1}

    flow = FlowBuilder("look", S).step("look", look).compile()
    result = engine.run(flow, {"n": 0}, run_id="r1")
    assert result.status == "completed"
    assert seen == {
        "owner": engine.owner,
        "expires": t0 + 12.0,
        "status": "running",
        "revision": 0,
        "step": "in_progress",
    }


# -- single flight and what run() hands back ---------------------------------


def test_a_second_start_with_a_live_flow_key_returns_that_run_not_a_newer_one(db_path):
    engine = engine_for(db_path, quick_flow())
    keyed = engine.start("quick", {"n": 1}, flow_key="k1")
    newer = engine.start("quick", {"n": 2})  # a later live run of the same flow, no key
    assert newer != keyed
    assert engine.start("quick", {"n": 3}, flow_key="k1") == keyed


@pytest.mark.parametrize("executes", [True, False])
def test_run_with_the_key_of_a_failed_run_returns_that_runs_result(db_path, executes):
    worker = engine_for(db_path, failing_flow())
    failed = worker.run("flaky", {"n": 4}, flow_key="k1")
    assert failed.status == "failed" and "disk on fire" in (failed.error or "")
    engine = engine_for(db_path, failing_flow(), executes=executes)
    again = engine.run("flaky", {"n": 9}, flow_key="k1")
    assert again.run_id == failed.run_id
    assert (again.status, again.revision, again.error) == ("failed", failed.revision, failed.error)
    assert again.state == S(n=4)


def test_run_with_the_key_of_a_run_of_another_state_model_names_run_and_revision(db_path):
    worker = engine_for(db_path, failing_flow())
    failed = worker.run("flaky", {"n": 4}, flow_key="k1")
    engine = engine_for(db_path, failing_flow(state_type=T, version="2"))
    with pytest.raises(CheckpointDecodeError) as err:
        engine.run("flaky", {"m": 1}, flow_key="k1")
    assert (err.value.run_id, err.value.revision) == (failed.run_id, failed.revision)


# -- small pieces --------------------------------------------------------------


def test_unknown_flow_names_the_registered_ones(db_path):
    engine = engine_for(db_path)
    with pytest.raises(UnknownFlowError) as err:
        engine.flow("nope")
    assert str(err.value) == "no flow named 'nope' is registered (known: none)"
    engine.register(quick_flow("zeta"))
    engine.register(quick_flow("alpha"))
    with pytest.raises(UnknownFlowError) as err:
        engine.run("nope", {"n": 0})
    assert str(err.value) == "no flow named 'nope' is registered (known: alpha, zeta)"


def test_forget_cancel_drops_the_flag_and_ignores_unknown_runs(db_path):
    engine = engine_for(db_path)
    first = engine.cancel_event("r1")
    first.set()
    assert engine.cancel_event("r1") is first
    engine.forget_cancel("never-seen")  # no flag: nothing to drop, no error
    engine.forget_cancel("r1")
    fresh = engine.cancel_event("r1")
    assert fresh is not first and not fresh.is_set()


def test_a_lease_takes_over_only_when_asked(db_path):
    clock = ManualClock()
    engine = engine_for(db_path, clock=clock, lease_ttl_s=12.0)
    lease = engine.lease()
    assert (lease.owner, lease.expires_at, lease.issued_at) == (
        engine.owner,
        clock.now() + 12.0,
        clock.now(),
    )
    assert engine.lease(takes_over="h:1:x").issued_at == clock.now()  # once it expired
    assert engine.lease(takes_over="h:1:x").takes_over == "h:1:x"
    assert engine.lease(takes_over="h:1:x", dead=True).issued_at == math.inf  # any expiry
    assert engine.lease().takes_over is None


def test_without_group_commit_a_delivered_signal_is_consumed(db_path):
    engine = engine_for(db_path, group_commit=False)
    flow = (
        FlowBuilder("sig", S)
        .step("start", lambda s: {"n": 1})
        .wait_signal("go", "go", "a", into="n")
        .step("after", lambda s: {"n": s.n + 100})
        .chain()
        .compile()
    )
    assert engine.committer is None
    first = engine.run(flow, {"n": 0})
    assert first.status == "waiting"
    engine.signal("go", "a", 5)
    assert engine.get(first.run_id).n == 105
    assert engine.store.next_signal("go", "a") is None  # taken by the wait that used it


def test_one_runs_failing_renewal_does_not_skip_the_others(db_path):
    clock = ManualClock()
    t0 = clock.now()
    a, b = Blocker(), Blocker()
    engine = engine_for(db_path, blocking_flow("a", a), blocking_flow("b", b), clock=clock)
    other = open_store(db_path)
    ticks = ticking(engine)
    da = Driving(engine, "a", a, "ra")
    db_ = Driving(engine, "b", b, "rb")
    try:
        ticks.waiting()
        first, second = list(engine.active)  # the order the heartbeat renews them in
        # the first run's row leaves this engine's scope: its renewal raises
        # CheckpointNotFoundError (a FlowdeskError), the second must still be renewed
        other.conn.execute("UPDATE runs SET scope='elsewhere' WHERE run_id=?", (first,))
        clock.advance(7.0)
        ticks.tick()
        assert engine.store.get_run(second).lease_expires_at == t0 + 37.0
        other.conn.execute("UPDATE runs SET scope='default' WHERE run_id=?", (first,))
        assert engine.store.get_run(first).lease_expires_at == t0 + 30.0  # not renewed
    finally:
        da.finish()
        db_.finish()
        ticks.set()


class GateLock:
    """``engine._lock`` that can hold the heartbeat just before it takes the
    lock to look for active runs (the last run has just finished), so a run
    can start in that gap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.armed = False
        self.paused = threading.Event()
        self.resume = threading.Event()
        self._seen = 0

    def __enter__(self) -> None:
        if self.armed and threading.current_thread().name == HEARTBEAT:
            self._seen += 1
            if self._seen == 1:
                self.paused.set()
                assert self.resume.wait(LIMIT)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_run_tracked_while_the_idle_heartbeat_checks_again_keeps_its_heartbeat(db_path):
    clock = ManualClock()
    a, b = Blocker(), Blocker()
    engine = engine_for(db_path, blocking_flow("a", a), blocking_flow("b", b), clock=clock)
    ticks = ticking(engine)
    gate = GateLock()
    engine._lock = gate  # type: ignore[assignment]
    first = Driving(engine, "a", a, "ra")
    ticks.waiting()
    assert first.finish().status == "completed"
    gate.armed = True
    ticks._go.release()  # the heartbeat wakes up to look for active runs...
    assert gate.paused.wait(LIMIT)
    second = Driving(engine, "b", b, "rb")  # ...while a run starts: the heartbeat is alive
    try:
        assert len(set(ticks.threads)) == 1
        gate.armed = False
        gate.resume.set()
        ticks.waiting()  # it keeps beating for the new run
        t = clock.now()
        clock.advance(3.0)
        ticks.tick()
        assert engine.store.get_run("rb").lease_expires_at == t + 3.0 + 30.0
    finally:
        gate.resume.set()
        second.finish()
        ticks.set()


def a_new_heartbeat_renews(
    engine: Engine, ticks: Ticks, clock: ManualClock, driving: Driving, run_id: str, after: float
) -> None:
    """``driving`` (the next run, in its step) got a second heartbeat thread,
    whose one round ``after`` seconds on renews its lease for the TTL; then
    the run completes and the heartbeat is let go."""
    try:
        ticks.waiting()
        assert len(set(ticks.threads)) == 2
        t = clock.now()
        clock.advance(after)
        ticks.tick()
        assert engine.store.get_run(run_id).lease_expires_at == t + after + 30.0
    finally:
        assert driving.finish().status == "completed"
        ticks.set()


def test_a_heartbeat_that_fails_on_a_defect_stops_its_runs_says_why_and_a_later_run_beats_again(
    db_path, caplog
):
    """Not a store's error (those put runs in doubt after the TTL): the
    heartbeat cannot go on, so the runs it can no longer renew stop before
    committing more, the log says which and why, and the engine's next run
    gets a heartbeat of its own."""
    clock = ManualClock()
    a, b, c = Blocker(), Blocker(), Blocker()
    flows = (blocking_flow("a", a), blocking_flow("b", b), blocking_flow("c", c))
    engine = engine_for(db_path, *flows, clock=clock)
    ticks = ticking(engine)
    renew = engine.store.renew

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a defect in renew")

    first = Driving(engine, "a", a, "ra")
    second = Driving(engine, "b", b, "rb")
    try:
        ticks.waiting()
        (beat,) = set(ticks.threads)
        engine.store.renew = broken  # type: ignore[method-assign]
        caplog.set_level("DEBUG", logger="desktop_app.flow.engine")
        clock.advance(5.0)
        ticks._go.release()  # one round: it fails and the heartbeat ends
        beat.join(LIMIT)
        assert not beat.is_alive()
        assert engine.lost == {"ra", "rb"}  # stopped at once, not after the TTL
        (said,) = [r for r in caplog.records if r.name == "desktop_app.flow.engine"]
        assert said.levelname == "ERROR"
        assert said.getMessage() == (
            "the lease heartbeat failed; the runs executing here stop before "
            "committing more (resume them): ra, rb"
        )
        assert said.exc_info is not None and said.exc_info[0] is ZeroDivisionError
    finally:
        engine.store.renew = renew  # type: ignore[method-assign]
        for driving in (first, second):
            with pytest.raises(LeaseLostError):  # its step's save is refused: nothing saved
                driving.finish()
    assert engine.store.latest("ra").state["n"] == 0
    a_new_heartbeat_renews(engine, ticks, clock, Driving(engine, "c", c, "rc"), "rc", 3.0)
    again = engine.resume("ra")  # a stopped run resumes on this same engine
    assert (again.status, again.state.n) == ("completed", 11)


def test_a_heartbeat_that_ended_for_want_of_runs_is_started_again_by_the_next_run(db_path):
    clock = ManualClock()
    a, b = Blocker(), Blocker()
    engine = engine_for(db_path, blocking_flow("a", a), blocking_flow("b", b), clock=clock)
    ticks = ticking(engine)
    assert Driving(engine, "a", a, "ra").finish().status == "completed"
    ticks.waiting()
    (beat,) = set(ticks.threads)
    ticks._go.release()  # no run executes: the heartbeat ends
    beat.join(LIMIT)
    assert not beat.is_alive()
    a_new_heartbeat_renews(engine, ticks, clock, Driving(engine, "b", b, "rb"), "rb", 4.0)


def test_a_database_failure_taking_a_signal_or_event_is_said_and_the_others_are_skipped(
    db_path, monkeypatch
):
    """A team tryout: `signal` through a pooler whose statement was lost said
    "stored", exit 0, while the run that was taking it failed unseen. A
    store's failure while a run takes a stored signal or event is raised,
    noting what was stored and which run; a run that cannot take it for its
    own reason (held elsewhere) is skipped, and the signal waits for it."""
    from desktop_app.errors import DatabaseUnreachableError, RunLeasedError

    engine = engine_for(db_path)
    flow = (
        FlowBuilder("sig", S)
        .step("start", lambda s: {"n": 1})
        .wait_signal("go", "go", "a", into="n")
        .chain()
        .compile()
    )
    ev = FlowBuilder("ev", S).wait_event("on", "ping", into="n").compile()
    waiting = engine.run(flow, {"n": 0}).run_id
    listening = engine.run(ev, {"n": 0}).run_id
    woken: list[str] = []

    def unreachable(run_id: str):
        woken.append(run_id)
        raise DatabaseUnreachableError("lost the connection to PostgreSQL")

    monkeypatch.setattr(engine, "wake", unreachable)
    with pytest.raises(DatabaseUnreachableError) as caught:
        engine.signal("go", "a", 5)
    sent = engine.store.next_signal("go", "a")
    assert sent is not None  # stored, not taken
    assert caught.value.__notes__ == [
        f"signal {sent.signal_id} was stored; taking it to run {waiting} failed, so the run "
        "takes it when it is resumed"
    ]
    with pytest.raises(DatabaseUnreachableError) as caught:
        engine.publish("ping", 3)
    assert caught.value.__notes__[0].startswith("event ") and listening in str(
        caught.value.__notes__[0]
    )
    assert woken == [waiting, listening]

    def held(run_id: str):
        raise RunLeasedError(run_id, "elsewhere.example:1:x", None)

    monkeypatch.setattr(engine, "wake", held)
    assert engine.signal("go", "a", 6) > sent.signal_id  # skipped, no error
    monkeypatch.undo()
    assert engine.resume(waiting).state.n == 5  # the first one stored is taken
