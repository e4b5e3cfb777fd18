"""Ownership races as users meet them: real processes released at the same
instant, twenty rounds each, and the side effect counted (S76, S77).

In every round the work was left behind by an owner that died (a pid of
this host that no longer exists, its lease still running): the racers judge
it dead and take it over. A takeover is a compare-and-set on that very
owner, so exactly one racer wins; the loser raises before running anything.
The racers are long-lived processes (``tests/ownership_racer.py``), so a
round costs a release and a race, not two interpreter starts.
"""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.store.protocol import Lease
from tests import cli_forkserver
from tests.ownership_racer import (
    RACE_AGENT,
    Approval,
    N,
    agent_store,
    approve_flow,
    open_db,
    race_flow,
)

RACER = Path(__file__).resolve().parent / "ownership_racer.py"
ROUNDS = 20
LIMIT_S = 120.0


class Crash(BaseException):
    """Stops a step the way SIGKILL would: nothing after it runs."""


def dead_owner() -> str:
    """An owner id of this host whose process exited and was reaped."""
    child = cli_forkserver.popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}:dead01"


class Racers:
    """``count`` racer processes of one mode on one database."""

    def __init__(self, mode: str, db: str, sink: Path, count: int = 2) -> None:
        self.sink = sink
        self.procs = [
            cli_forkserver.popen(
                [sys.executable, str(RACER), mode, db, str(sink)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]

    def _line(self, proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(LIMIT_S):
                proc.kill()
                raise AssertionError(f"racer {proc.pid} said nothing for {LIMIT_S} s")
        line = proc.stdout.readline()
        if not line:
            proc.wait(LIMIT_S)
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"racer {proc.pid} exited {proc.returncode}:\n{err}")
        return line.strip()

    def race(self, rnd: int, arg: str = "-") -> list[str]:
        """One round: every racer prepares, then all are released at once."""
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(f"{rnd} {arg}\n")
            p.stdin.flush()
        for p in self.procs:
            assert self._line(p) == f"ready {rnd}"
        Path(f"{self.sink}.go.{rnd}").touch()
        outs = [self._line(p) for p in self.procs]
        assert all(o.startswith(f"done {rnd} ") for o in outs), outs
        return sorted(o.split(" ", 2)[2] for o in outs)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None and p.stdin is not None:
                p.stdin.write("end\n")
                p.stdin.close()
        for p in self.procs:
            p.wait(LIMIT_S)
            assert p.returncode == 0, p.stderr.read() if p.stderr else ""


def effects(sink: Path, rnd: int) -> Counter[str]:
    """What ran in round ``rnd``: key -> how many times."""
    lines = sink.read_text().splitlines() if sink.exists() else []
    return Counter(line.split()[2] for line in lines if line.split()[1] == str(rnd))


def interrupted_flow_runs(store, count: int, holder: str) -> list[str]:
    """``count`` runs of the racers' flow whose step was in progress when its
    process died; their lease still runs, held by ``holder``."""

    def crash(s: N, ctx) -> dict:
        raise Crash()

    engine = Engine(store, flows=[race_flow(crash)], group_commit=False)
    ids = []
    for _ in range(count):
        with pytest.raises(Crash):
            engine.run("race", N())
        run = max(store.list_runs(), key=lambda r: (r.created_at, r.run_id))
        store.release(run.run_id, engine.owner)
        now = store.now()
        store.claim(run.run_id, Lease(holder, now + 3600.0, now, ttl_s=3600.0), now)
        ids.append(run.run_id)
    return ids


def interrupted_agent_run(store, rid: str, holder: str) -> None:
    from desktop_app.agent.messages import Message
    from desktop_app.store.sqlite.agent_runs import AgentRun

    now = time.time()
    agent_store(store).create(
        AgentRun(
            rid, RACE_AGENT, "running", f"look up {rid}", created_at=now, updated_at=now,
            lease_owner=holder, lease_expires_at=now + 3600.0,
        ),
        [Message("user", f"look up {rid}").to_json()],
    )  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def race_db(request) -> str:
    fixture = "db_path" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


def race_rounds(mode: str, db: str, tmp_path: Path, prepare, check) -> Counter[str]:
    """``ROUNDS`` rounds of two ``mode`` racers on ``db``. Each round,
    ``prepare(store, rnd)`` leaves the work behind and returns the racers'
    argument and the keys whose side effect must happen exactly once; the
    racers are released together; ``check(store, keys, outcomes)`` asserts
    how the round ended. Returns how often each pair of outcomes came."""
    sink = tmp_path / "sink"
    store = open_db(db)
    racers = Racers(mode, db, sink)
    seen: Counter[str] = Counter()
    try:
        for rnd in range(ROUNDS):
            arg, keys = prepare(store, rnd)
            got = racers.race(rnd, arg)
            seen[" / ".join(got)] += 1
            ran = effects(sink, rnd)
            assert ran == dict.fromkeys(keys, 1), f"round {rnd}: it ran {dict(ran)}, outcomes {got}"
            check(store, keys, got)
    finally:
        racers.close()
        store.close()
    return seen


@pytest.mark.scenario("S76")
def test_two_processes_resuming_a_dead_owners_agent_run_run_its_tool_once(race_db, tmp_path):
    def prepare(store, rnd):
        rid = f"ag-{rnd}"
        interrupted_agent_run(store, rid, dead_owner())
        return rid, [rid]

    def check(store, keys, got):
        assert set(got) <= {"ok", "leased"}
        run = agent_store(store).get(keys[0])
        assert (run.status, run.response, run.lease_owner) == ("done", f"done: {keys[0]}", None)

    outcomes = race_rounds("agent", race_db, tmp_path, prepare, check)
    print(f"S76 agent takeover, {ROUNDS} rounds: {dict(outcomes)}")
    assert outcomes["leased / ok"] >= 1, "the racers never met: the race was not exercised"


@pytest.mark.scenario("S77")
def test_two_processes_resuming_a_dead_owners_flow_run_run_its_step_once(race_db, tmp_path):
    def prepare(store, rnd):
        (rid,) = interrupted_flow_runs(store, 1, dead_owner())
        return rid, [rid]

    def check(store, keys, got):
        assert set(got) <= {"ok", "leased"}
        assert store.get_run(keys[0]).status == "completed"

    outcomes = race_rounds("flow", race_db, tmp_path, prepare, check)
    print(f"S77 flow takeover, {ROUNDS} rounds: {dict(outcomes)}")
    assert outcomes["leased / ok"] >= 1, "the racers never met: the race was not exercised"


@pytest.mark.scenario("S77")
def test_two_processes_answering_yes_at_once_run_the_approved_step_once(race_db, tmp_path):
    """The app and the CLI approve one waiting run at the same instant: the
    step after the question runs once, and the other answer is refused
    (the first answer stands) or finds the run carried on or done."""

    def prepare(store, rnd):
        from desktop_app.flow import Engine

        engine = Engine(store, flows=[approve_flow(lambda s, ctx: {})])
        rid = engine.run("approve", Approval()).run_id
        assert store.get_run(rid).status == "waiting"
        return rid, [rid]

    def check(store, keys, got):
        assert got.count("ok") == 1, got
        assert set(got) <= {"ok", "answered", "leased", "not waiting"}, got
        assert store.get_run(keys[0]).status == "completed"

    outcomes = race_rounds("answer", race_db, tmp_path, prepare, check)
    print(f"approval race, {ROUNDS} rounds: {dict(outcomes)}")
    assert sum(n for pair, n in outcomes.items() if pair != "ok / not waiting"
               and pair != "not waiting / ok") >= 1, "the racers never met"  # fmt: skip


def all_completed(store, keys, got) -> None:
    assert sum(int(o.split()[1]) for o in got) == len(keys)
    assert {store.get_run(r).status for r in keys} == {"completed"}


@pytest.mark.scenario("S77")
def test_two_processes_recovering_at_once_run_each_interrupted_run_once(race_db, tmp_path):
    def prepare(store, rnd):
        return "-", interrupted_flow_runs(store, 3, dead_owner())

    split = race_rounds("recover", race_db, tmp_path, prepare, all_completed)
    print(f"S77 resume --all, {ROUNDS} rounds of 3 runs, runs per racer: {dict(split)}")


@pytest.mark.scenario("S77")
def test_two_postgres_workers_claiming_at_once_run_each_pending_run_once(pg_url, tmp_path):
    def prepare(store, rnd):
        engine = Engine(store, flows=[race_flow(lambda s: {"n": s.n + 1})])
        return "-", [engine.start("race", N()) for _ in range(3)]

    split = race_rounds("worker", pg_url, tmp_path, prepare, all_completed)
    print(f"S77 workers, {ROUNDS} rounds of 3 runs, runs per worker: {dict(split)}")


@pytest.mark.scenario("S77")
def test_two_dispatchers_take_over_a_dead_claimants_intents_and_send_each_once(race_db, tmp_path):
    def prepare(store, rnd):
        engine = Engine(store, flows=[race_flow(lambda s: {"n": s.n + 1})], group_commit=False)
        for _ in range(3):
            assert engine.run("race", N()).status == "completed"
        claimed = store.claim_intents(dead_owner(), 3600.0, 100)  # then its process died
        assert len(claimed) == 3
        return "-", [i.intent_id for i in claimed]

    def check(store, keys, got):
        assert sum(int(o.split()[1]) for o in got) == len(keys)

    split = race_rounds("dispatch", race_db, tmp_path, prepare, check)
    print(f"S77 outbox takeover, {ROUNDS} rounds of 3 intents, sent per racer: {dict(split)}")
