"""Workers on several (simulated) machines sharing one PostgreSQL database.

Every worker is a real process (tests/pg_worker.py) whose lease owner id
carries a fake host name, so the same-host pid shortcut never decides a
takeover: liveness (advisory lock), lease expiry by the database's clock and
SKIP LOCKED claiming do. Times are read from the database's clock, the one
that decides leases; waits are blocking reads of the workers' lines with a
generous upper bound.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import cli_forkserver

pytestmark = pytest.mark.postgres

WORKER = str(Path(__file__).with_name("pg_worker.py"))
ROOT = str(Path(__file__).resolve().parents[1])
BOUND_S = 60.0  # upper bound on any blocking wait (shared, loaded CPUs)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[str]
    lines: queue.Queue[list[str]] = field(default_factory=queue.Queue)
    seen: list[list[str]] = field(default_factory=list)

    def expect(self, pred, timeout: float = BOUND_S) -> list[str]:
        """The first line (as words) from now on matching ``pred``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: no matching line; saw {self.seen[-20:]}")
            try:
                words = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if words and words[0] == "EOF":
                raise AssertionError(f"{self.name} exited; saw {self.seen[-30:]}")
            if pred(words):
                return words

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(url: str, host: str, *args: str, wait: bool = True) -> Proc:
    env = dict(os.environ, PYTHONPATH=ROOT)
    popen = cli_forkserver.popen(
        [sys.executable, WORKER, url, host, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    proc = Proc(host, popen)

    def read() -> None:
        assert popen.stdout is not None
        for line in popen.stdout:
            words = line.split()
            proc.seen.append(words)
            proc.lines.put(words)
        proc.lines.put(["EOF"])

    threading.Thread(target=read, daemon=True).start()
    if wait:
        proc.expect(lambda w: w[0] == "ready")
    return proc


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()
        if p.popen.stderr is not None:
            err = p.popen.stderr.read()
            if "Traceback" in err:
                print(f"--- {p.name} stderr ---\n{err[-3000:]}")


def db_now(store) -> float:
    return store.server_time()[0]


def starts(proc: Proc, run_id: str) -> list[list[str]]:
    return [w for w in proc.seen if w[0] == "start" and w[1] == run_id]


def submit(pg_store, flow: str, n: int = 1) -> list[str]:
    from desktop_app.flow import Engine
    from tests.pg_worker import quick_flow, slow_flow, waiter_flow

    flows = {"slow": slow_flow(5, 0.0), "quick": quick_flow(), "waiter": waiter_flow()}
    engine = Engine(pg_store, flows=[flows[flow]])
    return [engine.start(flow, {}) for _ in range(n)]


def assert_each_step_committed_once(pg_store, run_id: str, steps: int) -> None:
    run = pg_store.get_run(run_id)
    cp = pg_store.latest(run_id)
    assert run.status == "completed", run
    assert cp.state["n"] == steps  # every step's result folded in exactly once
    history = pg_store.history(run_id)
    completions = Counter()
    prev = {}
    for info in history:
        steps_at = pg_store.get_checkpoint(run_id, info.revision).steps
        for sid, rec in steps_at.items():
            if rec.status == "completed" and prev.get(sid) != "completed":
                completions[sid] += 1
            prev[sid] = rec.status
    assert completions == {f"s{i}": 1 for i in range(steps)}


@pytest.mark.scenario("S66")
def test_sigkilled_worker_is_taken_over_within_2s_by_its_liveness_lock(pg_url, pg_store, procs):
    # s2 never ends in a: however slow this machine, a dies with s2 in flight
    a = spawn(pg_url, "machine-a", "--step-s", "0.2", "--hang-at", "s2")
    procs.append(a)
    (run_id,) = submit(pg_store, "slow")
    a.expect(lambda w: w[0] == "start" and w[2] == "s0")
    b = spawn(pg_url, "machine-b", "--step-s", "0.1", "--poll", "0.2")
    procs.append(b)
    a.expect(lambda w: w[0] == "start" and w[2] == "s2")
    assert starts(b, run_id) == []  # a live owner's run is never executed by a peer
    a.kill()
    killed_at = db_now(pg_store)
    first = b.expect(lambda w: w[0] == "start" and w[1] == run_id)
    assert first[2] == "s2" and first[3] == "2"  # the step in flight runs again, once
    took = float(first[4]) - killed_at
    print(f"takeover after SIGKILL: {took * 1000:.0f} ms (database clock)")
    assert took < 2.0
    b.expect(lambda w: w[0] == "finished" and w[1] == run_id)
    b.stop()
    assert_each_step_committed_once(pg_store, run_id, 5)
    done_by = Counter(w[2] for p in (a, b) for w in p.seen if w[0] == "done" and w[1] == run_id)
    assert done_by == {f"s{i}": 1 for i in range(5)}


def test_without_liveness_a_dead_workers_run_is_taken_over_when_its_lease_expires(
    pg_url, pg_store, procs
):
    # s3 never ends in a: however slow this machine (b's start-up included),
    # a dies holding the run, its lease still running
    a = spawn(pg_url, "machine-a", "--step-s", "0.6", "--ttl", "2", "--no-liveness",
              "--hang-at", "s3")  # fmt: skip
    procs.append(a)
    (run_id,) = submit(pg_store, "slow")
    a.expect(lambda w: w[0] == "start" and w[2] == "s1")  # a holds the run before b exists
    b = spawn(pg_url, "machine-b", "--step-s", "0.05", "--ttl", "2", "--no-liveness",
              "--poll", "0.1")  # fmt: skip
    procs.append(b)
    a.kill()
    expiry = pg_store.get_run(run_id).lease_expires_at
    assert expiry is not None
    first = b.expect(lambda w: w[0] == "start" and w[1] == run_id)
    at = float(first[4])
    print(f"takeover {at - expiry:+.3f} s after the lease expired (database clock)")
    assert at >= expiry  # never before the lease ran out: no liveness here
    assert at < expiry + 1.5
    b.expect(lambda w: w[0] == "finished" and w[1] == run_id)
    assert_each_step_committed_once(pg_store, run_id, 5)


def test_a_worker_whose_liveness_connection_drops_stops_before_its_next_step(
    pg_url, pg_store, procs
):
    import psycopg

    a = spawn(pg_url, "machine-a", "--step-s", "1.0", "--cooldown", "5")
    procs.append(a)
    (run_id,) = submit(pg_store, "slow")
    b = spawn(pg_url, "machine-b", "--step-s", "0.05", "--poll", "0.1")
    procs.append(b)
    a.expect(lambda w: w[0] == "start" and w[2] == "s1")
    liveness_pid = int(a.seen[0][3])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s)", (liveness_pid,)).fetchone()
        assert row == (True,)
    a.expect(lambda w: w[0] == "fenced")
    b.expect(lambda w: w[0] == "finished" and w[1] == run_id)
    # A never began a step after it lost liveness (its own line order)
    fenced_at = next(i for i, w in enumerate(a.seen) if w[0] == "fenced")
    assert [w for w in a.seen[fenced_at:] if w[0] == "start"] == []
    assert_each_step_committed_once(pg_store, run_id, 5)


@pytest.mark.scenario("S67")
def test_a_worker_whose_clock_runs_120s_ahead_never_takes_a_live_lease(pg_url, pg_store, procs):
    # no liveness: only the lease (60 s, decided by the database's clock) protects the run
    a = spawn(pg_url, "machine-a", "--step-s", "0.4", "--ttl", "60", "--no-liveness")
    procs.append(a)
    (slow,) = submit(pg_store, "slow")
    a.expect(lambda w: w[0] == "start" and w[2] == "s0")
    b = spawn(pg_url, "machine-b", "--ttl", "60", "--no-liveness", "--skew", "120",
              "--poll", "0.1")  # fmt: skip
    procs.append(b)
    (quick,) = submit(pg_store, "quick")  # B is claiming: it takes this one (A is busy)
    b.expect(lambda w: w[0] == "start" and w[1] == quick)
    a.expect(lambda w: w[0] == "finished" and w[1] == slow)
    assert starts(b, slow) == []
    assert_each_step_committed_once(pg_store, slow, 5)


@pytest.mark.scenario("S67")
def test_resume_with_a_skewed_clock_refuses_a_live_lease(pg_store):
    from desktop_app.errors import RunLeasedError
    from desktop_app.flow import Engine
    from desktop_app.flow.clock import SystemClock
    from tests.pg_worker import slow_flow

    class Ahead(SystemClock):
        def now(self) -> float:
            return super().now() + 120.0

    holder = Engine(pg_store, flows=[slow_flow(2, 0.0)], owner="machine-a:1:aaaaaa")
    (run_id,) = [holder.start("slow", {})]
    pg_store.claim(run_id, holder.lease(), holder.clock.now())  # a live 30 s lease
    skewed = Engine(pg_store, flows=[slow_flow(2, 0.0)], owner="machine-b:2:bbbbbb",
                    clock=Ahead())  # fmt: skip
    with pytest.raises(RunLeasedError):
        skewed.resume(run_id)
    assert pg_store.claim_for_worker("machine-b:2:bbbbbb", 30, 10) == []
    assert pg_store.latest(run_id).revision == 0  # nothing ran, nothing was written


@pytest.mark.slow
def test_four_workers_drain_800_runs_each_exactly_once(pg_url, pg_store, procs):
    workers = [
        spawn(pg_url, f"machine-{c}", "--concurrency", "2", "--poll", "0.2", wait=False)
        for c in "abcd"
    ]
    procs.extend(workers)
    for w in workers:  # all four serve before there is work, so each gets some
        w.expect(lambda words: words[0] == "ready")
    run_ids = submit(pg_store, "quick", 800)
    seen: Counter[str] = Counter()
    per_worker: Counter[str] = Counter()
    deadline = time.monotonic() + 180
    while len(seen) < 800:
        for w in workers:
            while True:
                try:
                    words = w.lines.get_nowait()
                except queue.Empty:
                    break
                if words[0] == "start":
                    seen[words[1]] += 1
                    per_worker[w.name] += 1
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(seen)} of 800 runs started")
        time.sleep(0.05)  # draining the pipes, not synchronising
    for w in workers:
        w.stop()
    assert set(seen) == set(run_ids)
    assert max(seen.values()) == 1  # no run executed twice
    print("runs per worker:", dict(per_worker))
    assert all(per_worker[f"machine-{c}"] > 0 for c in "abcd")
    statuses = Counter(r.status for r in pg_store.list_runs())
    assert statuses == {"completed": 800}


@pytest.mark.scenario("S68")
def test_a_signal_from_another_process_wakes_a_waiting_run_by_notification(pg_url, pg_store, procs):
    from desktop_app.flow import Engine
    from tests.pg_worker import waiter_flow

    here = Engine(pg_store, flows=[waiter_flow()], owner="laptop:1:cccccc")
    res = here.run("waiter", {})
    assert res.status == "waiting"
    # poll every 60 s: within the bounded wait below only a notification wakes it
    w = spawn(pg_url, "machine-a", "--poll", "60")
    procs.append(w)
    w.expect(lambda x: x[0] == "pass" and x[1] == "1")
    sent_at = db_now(pg_store)
    pg_store.send_signal("go", "k", {"v": 1}, sent_at)  # stores; the commit notifies
    woken = w.expect(lambda x: x[0] == "woken" and x[1] == res.run_id, timeout=30)
    assert int(woken[3]) >= 1  # the listener had received a notification
    latency = float(woken[2]) - sent_at
    print(f"signal -> step running in the other process: {latency * 1000:.1f} ms")
    assert pg_store.get_run(res.run_id).status in ("running", "completed")


def test_two_outbox_dispatchers_one_sigkilled_mid_send(pg_url, pg_store, tmp_path):
    import json
    import urllib.request

    from desktop_app.flow import Engine
    from tests.outbox_worker import Order, flow

    portfile = tmp_path / "port"
    server = cli_forkserver.popen(
        [sys.executable, str(Path(__file__).with_name("outbox_server.py")), str(portfile)]
    )
    try:
        engine = Engine(pg_store, flows=[flow()])
        for i in range(20):
            assert engine.run("checkout", Order(amount=i)).status == "completed"
        keys = {i.intent_id for i in pg_store.intents(["pending"], limit=100)}
        assert len(keys) == 20
        deadline = time.monotonic() + 10
        while not portfile.exists() or not portfile.read_text():
            assert time.monotonic() < deadline, "destination did not start"
            time.sleep(0.02)
        dest = f"http://127.0.0.1:{portfile.read_text()}"
        script = str(Path(__file__).with_name("pg_outbox_worker.py"))
        env = dict(os.environ, PYTHONPATH=ROOT)
        a = cli_forkserver.run_argv(
            [sys.executable, script, pg_url, "machine-a", dest, "--expect", "20",
             "--kill-after-sends", "3"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert a.returncode == -signal.SIGKILL, a.stderr
        a_sent = [ln.split()[1] for ln in a.stdout.splitlines() if ln.startswith("sent")]
        assert len(a_sent) == 3
        import psycopg

        with psycopg.connect(pg_url) as conn:
            held = conn.execute(
                "SELECT intent_id, status, extract(epoch from claim_expires_at)::float8 "
                "FROM flowdesk.outbox WHERE claimed_by LIKE 'machine-a:%%' "
                "AND status <> 'delivered'"
            ).fetchall()
        # A claimed a batch of 5: two acknowledged, the third accepted by the
        # destination but never acknowledged, two never sent
        in_flight = {key: status for key, status, _ in held}
        assert in_flight.keys() & set(a_sent) == {a_sent[2]}
        assert in_flight[a_sent[2]] == "sending" and len(in_flight) == 3
        expiry = max(at for _, _, at in held)
        b = cli_forkserver.run_argv(
            [sys.executable, script, pg_url, "machine-b", dest, "--expect", "20"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert b.returncode == 0, b.stderr
        lines = [ln.split() for ln in b.stdout.splitlines()]
        reconciled = {w[1]: w[2] for w in lines if w[0] == "reconciled"}
        b_sent = {w[1] for w in lines if w[0] == "sent"}
        # B looked up only the interrupted send, found it and did not send it again
        assert reconciled == {a_sent[2]: "found"}
        assert a_sent[2] not in b_sent and b_sent == keys - set(a_sent)
        # B touched A's claimed intents only once A's claims had expired by the database clock
        acts = [w for w in lines if w[0] in ("sent", "reconciled")]
        assert all(float(w[-1]) >= expiry - 1e-3 for w in acts if w[1] in in_flight)
        delivered = {i.intent_id for i in pg_store.intents(["delivered"], limit=100)}
        assert delivered == keys
        for key in keys:
            with urllib.request.urlopen(f"{dest}/count/{key}") as resp:
                counts = json.loads(resp.read())
            assert counts == {"ops": 1, "posts": 1}, (key, counts)
    finally:
        server.kill()
        server.wait()


def test_an_observing_engine_submits_and_signals_while_a_worker_executes(pg_url, pg_store, procs):
    from desktop_app.flow import Engine
    from tests.pg_worker import quick_flow, waiter_flow

    app = Engine(pg_store, flows=[quick_flow(), waiter_flow()], owner="laptop:1:dddddd",
                 executes=False)  # fmt: skip
    # submitted before the worker starts: a worker already listening could
    # take it between its creation and run()'s read of its status (seen under
    # load: "running"); the worker's first pass claims it
    submitted = app.run("quick", {})
    assert submitted.status == "pending"  # created here, executed there
    w = spawn(pg_url, "machine-a", "--poll", "60")  # only notifications wake it in time
    procs.append(w)
    w.expect(lambda x: x[0] == "finished" and x[1] == submitted.run_id and x[2] == "completed")
    waiting = app.run("waiter", {})
    w.expect(lambda x: x[0] == "finished" and x[1] == waiting.run_id and x[2] == "waiting")
    assert app.recover() == [] and app.tick() == 0  # never executes here
    app.signal("go", "k", {"v": 2})  # stores; the worker delivers it
    w.expect(lambda x: x[0] == "woken" and x[1] == waiting.run_id, timeout=30)
    w.expect(lambda x: x[0] == "finished" and x[1] == waiting.run_id and x[2] == "completed")
    assert pg_store.latest(waiting.run_id).state["got"] == {"v": 2}
    assert [x for x in w.seen if x[0] == "start" and x[1] == submitted.run_id]
