"""What ``flow/engine.py``'s mutation run of 2026-12-04 found no test for:
``serve`` recovering, between passes, a run another host's process left
behind once its lease expired, with the agent's policy and the "tried once"
rule applied to what it finds then, not only at launch; and a single-flight
start whose live run ends between the duplicate key and the lookup (real
SQLite files, the injected clock, no sleeps)."""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunStateError, StoreError, UnknownFlowError
from desktop_app.flow import Engine, FlowBuilder, recovery
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.polling import until


class S(BaseModel):
    n: int = 0


def _counting(name: str, executed: Counter[str]):
    def work(s: S, ctx) -> dict:
        executed[ctx.run_id] += 1
        return {"n": s.n + 1}

    return FlowBuilder(name, S).step("work", work).compile()


class Serving:
    """``engine.serve`` on a thread (``poll_s`` 20 ms), counting the recovery
    thread's passes (its reads of what was left behind) and the claims."""

    def __init__(self, engine: Engine, monkeypatch: pytest.MonkeyPatch, **kw: object) -> None:
        self.engine = engine
        self.passes = 0
        self.claims = 0
        real_left, real_claim = recovery.left_behind, engine.claim_runnable

        def left_behind(*args: object, **kwargs: object) -> bool:
            self.passes += 1
            return real_left(*args, **kwargs)  # type: ignore[arg-type]

        def claim(*args: object, **kwargs: object) -> object:
            self.claims += 1
            return real_claim(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(recovery, "left_behind", left_behind)
        engine.claim_runnable = claim  # type: ignore[assignment, method-assign]
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=engine.serve, args=(self.stop,), kwargs={"poll_s": 0.02, **kw}
        )

    def __enter__(self) -> Serving:
        self.thread.start()
        return self

    def more_passes(self, n: int) -> None:
        """Wait for ``n`` more passes of the recovery thread."""
        seen = self.passes
        until(lambda: self.passes >= seen + n, f"{n} more recovery passes")

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


# -- serve: what a pass finds left behind ------------------------------------


def test_serve_recovers_another_hosts_run_on_the_first_pass_after_its_lease_expired(
    db_path, monkeypatch
):
    """The run is held (another host's live lease) at launch and on later
    passes; once the serving engine's clock passes the lease's expiry, the
    next pass takes it over and runs it, once."""
    clock = ManualClock()
    executed: Counter[str] = Counter()
    elsewhere = Engine(
        open_store(db_path), flows=[_counting("a", executed)], clock=clock, owner="far-host:7:x"
    )
    rid = elsewhere.start("a", S())
    (claimed,) = elsewhere.claim_runnable(10)  # leased to far-host for 30 s, then it vanished
    assert claimed.run_id == rid
    engine = Engine(open_store(db_path), flows=[_counting("a", executed)], clock=clock)
    with Serving(engine, monkeypatch) as serving:
        serving.more_passes(3)
        assert engine.store.get_run(rid).status == "pending" and executed == Counter()
        clock.advance(31)
        until(lambda: engine.store.get_run(rid).status == "completed", "the run taken over")
    assert executed == Counter({rid: 1})
    run = engine.store.get_run(rid)
    assert (run.status, run.lease_owner) == ("completed", None)
    elsewhere.store.close()
    engine.store.close()


def test_serve_tries_a_run_it_cannot_resume_left_behind_after_launch_only_once(
    db_path, monkeypatch
):
    """A run of a flow the serving engine lacks, left behind after launch, is
    claimed on the pass that finds it and never again: no claim (a write
    lock) on every later pass."""
    executed: Counter[str] = Counter()
    other = Engine(
        open_store(db_path),
        flows=[_counting("a", executed), _counting("b", executed)],
        clock=ManualClock(),
    )
    engine = Engine(open_store(db_path), flows=[_counting("a", executed)], clock=ManualClock())
    with Serving(engine, monkeypatch) as serving:
        serving.more_passes(2)
        assert serving.claims == 1  # at launch, nothing there
        b = other.start("b", S())  # unknown to the serving engine
        until(lambda: serving.claims == 2, "the pass that found run b claimed it")
        serving.more_passes(5)
    run = engine.store.get_run(b)
    assert (run.status, run.lease_owner) == ("pending", None)  # left for a process with "b"
    assert executed == Counter()
    assert serving.claims == 2
    other.store.close()
    engine.store.close()


def test_serve_applies_its_policy_to_runs_left_behind_after_launch(db_path, monkeypatch):
    """``only`` excludes a run found between passes as it does at launch:
    the allowed run left behind with it runs, the excluded one is not run
    and keeps no claim of ours."""
    executed: Counter[str] = Counter()
    flows = [_counting("a", executed), _counting("b", executed)]
    other = Engine(open_store(db_path), flows=flows, clock=ManualClock())
    engine = Engine(open_store(db_path), flows=flows, clock=ManualClock())
    with Serving(engine, monkeypatch, only=lambda r: r.flow_name == "a") as serving:
        serving.more_passes(2)
        a, b = other.start("a", S()), other.start("b", S())
        until(lambda: engine.store.get_run(a).status == "completed", "run a recovered")
        serving.more_passes(3)
    assert executed == Counter({a: 1})
    run = engine.store.get_run(b)
    assert (run.status, run.lease_owner) == ("pending", None)
    other.store.close()
    engine.store.close()


# -- single flight: the live run ends before it is found ---------------------


def test_a_keyed_start_whose_live_run_ended_a_moment_ago_says_try_again(db_path):
    """The duplicate flow key names a run that another process cancels
    before this one looks it up: a ``RunStateError`` that names the flow and
    the key and says to try again; trying again starts a new run."""
    executed: Counter[str] = Counter()
    flow = _counting("a", executed)
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    other = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    first = engine.start("a", S(), flow_key="k-1")
    real_list = engine.store.list_runs

    def ended_meanwhile(*args, **kwargs):
        if other.status(first).status == "pending":
            other.cancel(first, "another process ended it")
        return real_list(*args, **kwargs)

    engine.store.list_runs = ended_meanwhile  # type: ignore[method-assign]
    with pytest.raises(RunStateError) as caught:
        engine.run("a", S(), flow_key="k-1")
    assert str(caught.value) == "no live run of 'a' with flow key 'k-1'; try again"
    assert executed == Counter()
    again = engine.run("a", S(), flow_key="k-1")
    assert again.run_id != first and again.status == "completed"
    assert executed == Counter({again.run_id: 1})
    other.store.close()
    engine.store.close()


# -- cancel: what the app and `flowdesk runs cancel` store ---------------------


def test_a_cancel_with_no_reason_stores_canceled_by_user(db_path):
    """The app's Cancel and ``flowdesk runs cancel`` give no reason: the run's
    error, as ``runs show`` prints it, is "canceled by user"."""
    engine = Engine(open_store(db_path), flows=[_counting("a", Counter())], clock=ManualClock())
    rid = engine.start("a", S())
    done = engine.cancel_withdrawing(rid)
    assert (done.run.status, done.run.error) == ("canceled", "canceled by user")
    assert (done.withdrawn, done.in_flight) == ([], [])
    run = engine.status(rid)
    assert (run.status, run.error) == ("canceled", "canceled by user")
    engine.store.close()


# -- heartbeat: a renewal refused for exactly the lease's TTL -----------------


class Monotonic:
    """The engine's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_run_unrenewed_for_exactly_the_ttl_is_not_lost_yet(db_path, monkeypatch, caplog):
    """Doubt starts only once a run has gone *more* than ``lease_ttl_s``
    without a renewal: at exactly the TTL its lease may still hold (it was
    set for that long from the last renewal), so the run goes on."""
    import desktop_app.flow.engine as engine_module

    mono = Monotonic()
    monkeypatch.setattr(engine_module, "time", mono)
    store = open_store(db_path)
    engine = Engine(store, flows=[_counting("a", Counter())], clock=ManualClock(), lease_ttl_s=30)
    engine.shutdown_event.set()
    engine.heartbeat_stop.set()  # no heartbeat thread: the test calls renew_leases itself
    rid = engine.start("a", S())
    engine.track(rid, True)

    def refused(*_args, **_kwargs):
        raise StoreError("database is locked")

    store.renew = refused  # type: ignore[method-assign]
    mono.now += 30
    engine.renew_leases()
    assert engine.lost == set()
    mono.now += 0.5
    with caplog.at_level("WARNING", logger="desktop_app.flow.engine"):
        engine.renew_leases()
    assert engine.lost == {rid}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"leases of 1 run(s) could not be renewed for 30.0 s; they stop before "
        f"committing more: {rid}"
    ]
    engine.track(rid, False)
    store.close()


# -- whose clock and whose liveness decide a lease -----------------------------


def _held_elsewhere(db_path, clock: ManualClock, owner: str, version: str = "1") -> str:
    """A pending run claimed by ``owner`` (leased for 30 s on ``clock``)."""
    holder = Engine(
        open_store(db_path),
        flows=[FlowBuilder("a", S, version=version).step("work", lambda s: {}).compile()],
        clock=clock,
        owner=owner,
    )
    rid = holder.start("a", S())
    (claimed,) = holder.claim_runnable(10)
    assert (claimed.run_id, claimed.lease_owner) == (rid, owner)
    holder.store.close()
    return rid


def test_a_changed_flows_run_another_host_holds_is_listed_once_its_lease_expired(db_path):
    """The engine's injected clock decides: while the other host's lease runs
    the run is that process's (not listed); 31 s later it is listed with its
    step and both versions."""
    clock = ManualClock()
    rid = _held_elsewhere(db_path, clock, "far-host:7:x", version="1")
    engine = Engine(
        open_store(db_path),
        flows=[FlowBuilder("a", S, version="2").step("work", lambda s: {}).compile()],
        clock=clock,
    )
    assert engine.incompatible_runs() == []
    clock.advance(31)
    (listed,) = engine.incompatible_runs()
    assert (listed.run_id, listed.status, listed.step) == (rid, "pending", "work")
    # the versions carry the flow's structure hash after a "+"
    assert listed.stored_version.startswith("1+") and listed.current_version.startswith("2+")
    engine.store.close()


def test_recovery_never_takes_a_run_a_live_process_of_this_host_holds_after_its_lease_expired(
    db_path,
):
    """Liveness beats clocks: a process of this host that still runs (its
    lease ran out by the clock: a suspended laptop, a clock jump) keeps its
    run; recovery reports it held and runs nothing."""
    clock = ManualClock()
    alive = f"{socket.gethostname()}:{os.getpid()}:other-engine"  # this very process
    rid = _held_elsewhere(db_path, clock, alive)
    executed: Counter[str] = Counter()
    engine = Engine(open_store(db_path), flows=[_counting("a", executed)], clock=clock)
    clock.advance(3600)
    assert engine.claim_runnable(10) == []
    report = engine.recover()
    assert [(r.run_id, type(out).__name__) for r, out in report] == [(rid, "RunLeasedError")]
    assert executed == Counter()
    run = engine.store.get_run(rid)
    assert (run.status, run.lease_owner) == ("pending", alive)
    engine.store.close()


# -- the log a run leaves ------------------------------------------------------


def test_the_log_says_where_each_run_stopped(db_path, caplog):
    """One line when a run is created (its flow, status and owner) and one
    per drive, with the run id and the status it stopped at: the lines to
    look for in the log of ``flowdesk serve`` or the app."""
    asking = (
        FlowBuilder("ask", S)
        .await_input("question", "n", "how many?")
        .step("done", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )
    engine = Engine(open_store(db_path), flows=[asking], clock=ManualClock())
    with caplog.at_level("INFO", logger="desktop_app.flow.engine"):
        waiting = engine.run("ask", S())
        done = engine.resume_with(waiting.run_id, 2)
        queued = engine.start("ask", S())
    assert (waiting.status, done.status, done.state.n) == ("waiting", "completed", 3)
    created = [r.getMessage() for r in caplog.records if " created (" in r.getMessage()]
    assert created == [
        f"run {waiting.run_id} of flow ask created (running, owner {engine.owner})",
        f"run {queued} of flow ask created (pending, owner {engine.owner})",
    ]
    stopped = [r.getMessage() for r in caplog.records if "stopped here" in r.getMessage()]
    assert stopped == [
        f"run {waiting.run_id} stopped here: waiting",
        f"run {waiting.run_id} stopped here: completed",
    ]
    engine.store.close()


# -- a long-lived engine -------------------------------------------------------


def test_a_long_lived_engine_keeps_nothing_for_the_runs_it_finished_driving(db_path):
    """``flowdesk agent`` and the app drive runs for days with one engine:
    once a drive ends, no per-run entry stays behind (its lease proof, its
    cancel flag), whether the run completed, waits or failed."""
    asking = (
        FlowBuilder("ask", S)
        .await_input("question", "n", "how many?")
        .step("done", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )

    def broken(s: S) -> dict:
        raise ValueError("no")

    failing = FlowBuilder("bad", S).step("boom", broken).compile()
    engine = Engine(
        open_store(db_path),
        flows=[_counting("a", Counter()), asking, failing],
        clock=ManualClock(),
    )
    outs = [engine.run("a", S()), engine.run("ask", S()), engine.run("bad", S())]
    assert [o.status for o in outs] == ["completed", "waiting", "failed"]
    assert (engine.active, engine.lost) == (set(), set())
    assert engine._proven == {} and engine._cancel == {}
    engine.store.close()


# -- what an engine is made with -----------------------------------------------


def test_an_unknown_flow_is_refused_naming_every_registered_flow_in_order(db_path):
    engine = Engine(
        open_store(db_path),
        flows=[_counting("zeta", Counter()), _counting("alpha", Counter())],
        clock=ManualClock(),
    )
    with pytest.raises(UnknownFlowError) as caught:
        engine.run("nope", S())
    assert str(caught.value) == "no flow named 'nope' is registered (known: alpha, zeta)"
    assert engine.store.list_runs() == []
    engine.store.close()


def test_a_run_is_leased_for_30_seconds_by_default(db_path):
    """The default TTL: another host's process may take a run over 30 s
    after this one last renewed its lease, not sooner."""
    clock = ManualClock()
    seen: list[tuple[str | None, float | None]] = []

    def look(s: S, ctx) -> dict:
        run = engine.store.get_run(ctx.run_id)
        seen.append((run.lease_owner, run.lease_expires_at))
        return {}

    engine = Engine(
        open_store(db_path), flows=[FlowBuilder("a", S).step("look", look).compile()], clock=clock
    )
    assert engine.lease_ttl_s == 30.0
    engine.run("a", S())
    assert seen == [(engine.owner, clock.now() + 30.0)]
    engine.store.close()
