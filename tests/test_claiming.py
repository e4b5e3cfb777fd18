"""Claiming, not scanning: two engines recovering one database at once never
execute the same run, and two outbox dispatchers never send one intent twice
(real SQLite file, one connection per engine or dispatcher)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store


class N(BaseModel):
    n: int = 0


def _flow(executed: Counter[str], lock: threading.Lock):
    def work(s: N, ctx) -> dict:
        with lock:
            executed[ctx.run_id] += 1
        return {"n": s.n + 1}

    def send(s: N, ctx) -> dict:
        ctx.send("sink", {"n": s.n})
        return {}

    return FlowBuilder("claimed", N).step("work", work).step("send", send).chain().compile()


class Crash(BaseException):
    pass


def _interrupted_runs(db_path, count: int) -> list[str]:
    """``count`` runs left ``running`` with no lease (their process stopped)."""

    def boom(s: N) -> dict:
        raise Crash()

    crashing = FlowBuilder("claimed", N).step("work", boom).step("send", boom).chain().compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[crashing])
    ids = []
    for _ in range(count):
        with pytest.raises(Crash):
            engine.run("claimed", N())
    for run in store.list_runs():
        store.release(run.run_id, engine.owner)
        ids.append(run.run_id)
    store.close()
    return ids


def test_two_engines_recovering_at_once_execute_each_run_once(db_path):
    ids = _interrupted_runs(db_path, 12)
    executed: Counter[str] = Counter()
    lock = threading.Lock()
    stores = [open_store(db_path) for _ in range(2)]
    engines = [Engine(s, flows=[_flow(executed, lock)]) for s in stores]
    reports: list[list] = [[], []]
    barrier = threading.Barrier(2)

    def recover(i: int) -> None:
        barrier.wait()
        reports[i] = engines[i].recover()

    threads = [threading.Thread(target=recover, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(executed) == sorted(ids)
    assert set(executed.values()) == {1}, "a run was executed by both engines"
    done = [r for rep in reports for r, out in rep if getattr(out, "status", None) == "completed"]
    assert sorted(r.run_id for r in done) == sorted(ids)
    assert all(stores[0].get_run(rid).status == "completed" for rid in ids)
    assert all(stores[0].get_run(rid).lease_owner is None for rid in ids)
    for s in stores:
        s.close()


@pytest.mark.scenario("S43")
def test_recovery_claims_each_interrupted_run_once(db_path):
    """Recovery claims its runs in one pass: each interrupted run's lease is
    set once, so claiming costs in proportion to the number of runs (claiming
    in growing batches re-claimed every run already claimed: 300 runs took
    1,240 lease writes, and 10,000 runs tens of seconds)."""
    ids = _interrupted_runs(db_path, 300)
    store = open_store(db_path)
    executed: Counter[str] = Counter()
    engine = Engine(store, flows=[_flow(executed, threading.Lock())])
    claims: Counter[str] = Counter()

    def trace(_cursor, sql: str, bindings) -> bool:
        if sql.startswith("UPDATE runs SET lease_owner=?, lease_expires_at=? WHERE run_id=?"):
            claims[bindings[2]] += 1
        return True

    store.conn.exec_trace = trace
    report = engine.recover()
    store.conn.exec_trace = None
    assert sorted(claims) == sorted(ids)
    assert set(claims.values()) == {1}, f"{claims.total()} lease writes for {len(ids)} runs"
    assert [getattr(out, "status", out) for _, out in report] == ["completed"] * len(ids)
    assert executed == Counter(dict.fromkeys(ids, 1))
    store.close()


def test_resume_pending_claims_in_batches_that_do_not_grow(db_path):
    """``resume_pending`` claims 32 runs at a time, and each claim reads the
    rows it takes, not every interrupted run: 200 runs read 200 candidate
    rows in 7 claims of 32 (asking for "handed out so far + 32" read every
    remaining run at each claim, N**2/64 rows: 746 here, 1.6 million for
    10,000 runs), and each run is resumed once."""
    ids = _interrupted_runs(db_path, 200)
    store = open_store(db_path)
    executed: Counter[str] = Counter()
    engine = Engine(store, flows=[_flow(executed, threading.Lock())])
    limits: list[int] = []
    claim = store.claim_runnable

    def counted(*args, **kwargs):
        limits.append(args[2])
        return claim(*args, **kwargs)

    store.claim_runnable = counted  # type: ignore[method-assign]
    candidate_sql: dict[int, bool] = {}
    rows_read = Counter[str]()

    def on_exec(cursor, sql: str, _bindings) -> bool:
        candidate_sql[id(cursor)] = sql.startswith("SELECT") and "runs_scope_status" in sql
        return True

    def on_row(cursor, row):
        if candidate_sql.get(id(cursor)):
            rows_read[row[0]] += 1
        return row

    store.conn.exec_trace, store.conn.row_trace = on_exec, on_row
    out = engine.resume_pending()
    store.conn.exec_trace = store.conn.row_trace = None
    assert out.failed_run_id is None
    assert sorted(r.run_id for r in out.resumed) == sorted(ids)
    assert executed == Counter(dict.fromkeys(ids, 1))
    assert limits == [32] * 8  # 7 claims hand out 200 runs, the 8th finds none
    assert rows_read == Counter(dict.fromkeys(ids, 1)), f"{rows_read.total()} rows read"
    store.close()


def _claim_instructions(db_path, finished: int) -> int:
    """SQLite VM instructions (a progress handler) of one claim of 32 among
    32 interrupted runs that ``finished`` completed runs were created before."""

    def boom(s: N) -> dict:
        raise Crash()

    store = open_store(db_path)
    done = Engine(store, flows=[_flow(Counter(), threading.Lock())])
    for _ in range(finished):
        assert done.run("claimed", N()).status == "completed"
    crashing = FlowBuilder("claimed", N).step("work", boom).step("send", boom).chain().compile()
    engine = Engine(store, flows=[crashing])
    for _ in range(32):
        with pytest.raises(Crash):
            engine.run("claimed", N())
    for run in store.list_runs(statuses=("running",)):
        store.release(run.run_id, engine.owner)
    ticks = [0]

    def tick() -> bool:
        ticks[0] += 1
        return False  # go on

    store.conn.set_progress_handler(tick, 10)
    got = engine.claim_runnable(32, wakeable=False)
    store.conn.set_progress_handler(None)
    assert len(got) == 32
    store.close()
    return ticks[0]


def test_a_claim_costs_what_it_claims_however_many_runs_finished_before(tmp_path):
    """A claim reads the interrupted runs from the oldest one of their status
    on, never past the finished runs created before them (through the
    ``(scope, created_at)`` index it stepped past all 300 here, at every claim
    of a ``resume_pending`` sweep: 8 ms a claim behind 9,000 finished runs)."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection

    counts = []
    for finished in (0, 300):
        path = tmp_path / f"f{finished}.db"
        conn = open_connection(path)
        migrations.apply(conn)
        conn.close()
        counts.append(_claim_instructions(path, finished))
    assert counts[1] < counts[0] * 1.3, counts


def test_claim_runnable_on_the_engine_leases_to_the_engine(db_path):
    ids = _interrupted_runs(db_path, 3)
    store = open_store(db_path)
    executed: Counter[str] = Counter()
    engine = Engine(store, flows=[_flow(executed, threading.Lock())])
    other = Engine(open_store(db_path), flows=engine.flows.values())
    got = engine.claim_runnable(2)
    assert [r.run_id for r in got] == ids[:2]
    assert {store.get_run(r.run_id).lease_owner for r in got} == {engine.owner}
    assert [r.run_id for r in other.claim_runnable(10)] == ids[2:]
    assert other.claim_runnable(10) == [other.store.get_run(ids[2])]  # its own, again
    report = other.recover()  # only its own claim; the others are leased to a live engine
    assert [(r.run_id, type(o).__name__) for r, o in report][:1] == [(ids[2], "RunResult")]
    assert sorted(r.run_id for r, o in report[1:]) == sorted(ids[:2])
    assert all(type(o).__name__ == "RunLeasedError" for _, o in report[1:])
    assert executed == Counter({ids[2]: 1})
    store.close()
    other.store.close()


def test_two_dispatchers_never_send_one_intent_twice(db_path):
    executed: Counter[str] = Counter()
    store = open_store(db_path)
    engine = Engine(store, flows=[_flow(executed, threading.Lock())])
    for _ in range(10):
        engine.run("claimed", N())
    sent: Counter[str] = Counter()
    lock = threading.Lock()

    class Sink:
        def send(self, key, payload):
            with lock:
                sent[key] += 1
            return {"ok": True}

        def lookup(self, key):
            return None

    stores = [open_store(db_path) for _ in range(2)]
    dispatchers = [Dispatcher(s, {"sink": Sink()}) for s in stores]
    delivered = [0, 0]
    barrier = threading.Barrier(2)

    def run(i: int) -> None:
        barrier.wait()
        while (n := dispatchers[i].dispatch(limit=2)) > 0:
            delivered[i] += n

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(sent) == 10 and set(sent.values()) == {1}
    assert sum(delivered) == 10
    assert store.intents(["pending", "sending"]) == []
    for s in (store, *stores):
        s.close()
