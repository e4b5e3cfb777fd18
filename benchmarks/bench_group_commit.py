"""Group commit and per-step cost: quick measurements, interleaved rounds.

    python benchmarks/bench_group_commit.py inflight [--rounds 5] [--steps 40]
    python benchmarks/bench_group_commit.py linear [--steps 10000]
    python benchmarks/bench_group_commit.py wal [--runs 50]
    python benchmarks/bench_group_commit.py recovery [--runs 1000] [--concurrency 16]

* ``inflight``: at ``synchronous=FULL``, rounds of A B A B: raw apsw
  single-row commits, then 1, 2, 4 and 8 runs in flight (threads of one
  engine via ``Engine.run_many``, sharing its group commit). Prints medians
  and the per-round ratios (1 run / raw commit next to it; 8 in flight per
  step / raw; 8 vs 1 throughput).
* ``linear``: one run of an N-step linear flow at ``synchronous=OFF``; the
  time between consecutive ``StepFinished`` events, median of steps 10-110
  vs the last 100 (their ratio), and compile time.
* ``wal``: WAL pages written per step by 10-step runs, one at a time,
  with automatic WAL checkpoints off (frames / steps, run creation included),
  and which b-trees the frames belong to (``dbstat``).
* ``recovery``: N runs of a 3-step flow; a child process starts recovering
  them and is SIGKILLed after its 50th step; a fresh child times
  ``Engine.recover(concurrency=...)`` to all-complete. Every step appends to
  a log: reruns (steps that ran twice) are counted.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from pydantic import BaseModel

from desktop_app.flow import Engine, EventBus
from desktop_app.flow.definition import CompiledFlow, FlowBuilder
from desktop_app.flow.events import StepFinished
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store


class Counter(BaseModel):
    n: int = 0


def _inc(state: Counter) -> dict[str, int]:
    return {"n": state.n + 1}


def linear_flow(steps: int, fn=_inc, name: str = "lin") -> CompiledFlow[Counter]:
    b = FlowBuilder(name, Counter)
    for i in range(steps):
        b.step(f"s{i}", fn)
    return b.chain().compile()


def _db(folder: str, name: str = "x.db") -> str:
    path = os.path.join(folder, name)
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return path


def inflight(rounds: int, steps: int) -> None:
    folder = tempfile.mkdtemp()
    store = open_store(_db(folder))
    engine = Engine(store, flows=[linear_flow(steps)])
    raw = open_connection(os.path.join(folder, "raw.db"))
    raw.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")

    def raw_commit(n: int = 80) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            with raw:
                raw.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
        return (time.perf_counter() - t0) / n

    def in_flight(k: int) -> float:
        runs = max(1, 80 // steps) * k
        t0 = time.perf_counter()
        out = engine.run_many("lin", [{} for _ in range(runs)], max_workers=k)
        elapsed = time.perf_counter() - t0
        assert all(not isinstance(o, BaseException) and o.status == "completed" for o in out)
        return elapsed / (runs * steps)

    res: dict[object, list[float]] = {k: [] for k in ("raw", 1, 2, 4, 8)}
    for _ in range(rounds):
        for k in ("raw", 1, "raw", 2, 4, 8):
            res[k].append(raw_commit() if k == "raw" else in_flight(k))
    med = {k: statistics.median(v) for k, v in res.items()}
    raws = res["raw"]
    r1 = [res[1][i] / raws[2 * i] for i in range(rounds)]
    r8 = [res[8][i] / raws[2 * i + 1] for i in range(rounds)]
    t81 = [res[1][i] / res[8][i] for i in range(rounds)]
    print(f"synchronous=FULL, {steps}-step runs, {rounds} interleaved rounds")
    print(f"raw apsw single-row commit: {med['raw'] * 1e6:.0f} us")
    for k in (1, 2, 4, 8):
        print(f"{k} in flight: {1 / med[k]:.0f} steps/s ({med[k] * 1e6:.0f} us per step)")
    c = engine.committer
    if c is not None:
        print(f"group commit: {c.appends} appends in {c.batches} batches")
    print(
        f"1 run / raw commit: median {statistics.median(r1):.2f} (rounds {min(r1):.2f}-"
        f"{max(r1):.2f}); 8 in flight per step / raw: {statistics.median(r8):.2f}; "
        f"8 vs 1 throughput: {statistics.median(t81):.2f}x (rounds {min(t81):.2f}-{max(t81):.2f})"
    )


def linear(steps: int) -> None:
    t0 = time.perf_counter()
    flow = linear_flow(steps)
    compile_s = time.perf_counter() - t0
    store = open_store(_db(tempfile.mkdtemp()), synchronous="OFF")
    events = EventBus()
    stamps: list[float] = []
    events.subscribe(
        lambda e: stamps.append(time.perf_counter()) if isinstance(e, StepFinished) else None
    )
    res = Engine(store, flows=[flow], events=events).run("lin", {})
    assert res.status == "completed" and res.state.n == steps
    dt = [b - a for a, b in itertools.pairwise(stamps)]
    early = statistics.median(dt[10:110]) * 1e6
    late = statistics.median(dt[-100:]) * 1e6
    print(
        f"{steps}-step flow, synchronous=OFF: compile {compile_s * 1000:.0f} ms; step cost "
        f"steps 10-110 {early:.0f} us, last 100 {late:.0f} us: ratio {late / early:.2f}"
    )


def wal(runs: int) -> None:
    path = _db(tempfile.mkdtemp())
    store = open_store(path)
    engine = Engine(store, flows=[linear_flow(10)])
    for _ in range(5):  # tables have pages
        engine.run("lin", {})
    store.query(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
    store.query(lambda c: c.execute("PRAGMA wal_autocheckpoint=0").fetchall())
    page = int(store.query(lambda c: c.execute("PRAGMA page_size").fetchone()[0]))
    for _ in range(runs):
        engine.run("lin", {})
    data = Path(path + "-wal").read_bytes()
    frames: list[int] = []
    commits = 0
    off = 32
    while off + 24 <= len(data):
        pgno, commit = struct.unpack(">II", data[off : off + 8])
        frames.append(pgno)
        commits += commit != 0
        off += 24 + page
    owner = dict(store.query(lambda c: c.execute("SELECT pageno, name FROM dbstat").fetchall()))
    by = collections.Counter(owner.get(p, f"page {p}") for p in frames)
    print(
        f"10-step runs x {runs}: {len(frames) / (runs * 10):.2f} WAL pages per step "
        f"({len(frames) / runs:.1f} per run incl. its creation; {len(data) / (runs * 10):.0f} "
        f"bytes per step); {len(frames) / commits:.2f} pages per commit:"
    )
    for name, n in by.most_common(8):
        print(f"  {name}: {n / commits:.2f} per commit")


_RECOVERY_CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from pydantic import BaseModel
from desktop_app.flow import Engine, EventBus
from desktop_app.flow.definition import FlowBuilder
from desktop_app.flow.events import StepFinished
from desktop_app.store.sqlite.store import open_store

class Counter(BaseModel):
    n: int = 0

log = os.open(sys.argv[2] + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

def step(state, ctx):
    os.write(log, f"{ctx.run_id} {ctx.step_id}\n".encode())
    return {"n": state.n + 1}

b = FlowBuilder("three", Counter)
for i in range(3):
    b.step(f"s{i}", step)
store = open_store(sys.argv[2])
events = EventBus()
engine = Engine(store, flows=[b.chain().compile()], events=events)
concurrency = int(sys.argv[5])
if sys.argv[3] == "make":
    for _ in range(int(sys.argv[4])):
        engine.start("three", {})
    done = [0]
    def on(e):
        if isinstance(e, StepFinished):
            done[0] += 1
            if done[0] == 50:
                os.write(1, b"KILLME\n")
    events.subscribe(on)
    engine.recover(concurrency=concurrency)
    time.sleep(600)
else:
    t0 = time.perf_counter()
    report = engine.recover(concurrency=concurrency)
    elapsed = time.perf_counter() - t0
    bad = sum(1 for _, o in report if isinstance(o, BaseException) or o.status != "completed")
    c = engine.committer
    print(f"{len(report)} {elapsed:.3f} {bad} {c.appends} {c.batches}", flush=True)
"""


def recovery(runs: int, concurrency: int) -> None:
    folder = tempfile.mkdtemp()
    db = _db(folder, "r.db")
    child = os.path.join(folder, "child.py")
    Path(child).write_text(_RECOVERY_CHILD)
    root = str(Path(__file__).resolve().parents[1])
    args = [sys.executable, child, root, db]
    maker = subprocess.Popen(
        [*args, "make", str(runs), str(concurrency)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert maker.stdout is not None
    for line in maker.stdout:
        if line.startswith(b"KILLME"):
            maker.send_signal(signal.SIGKILL)
            break
    maker.wait()
    t0 = time.perf_counter()
    out = subprocess.run(
        [*args, "recover", "0", str(concurrency)], capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - t0
    n, elapsed, bad, appends, batches = out.stdout.split()
    counts = collections.Counter(Path(db + ".log").read_text().splitlines())
    reruns = sum(v - 1 for v in counts.values())
    print(
        f"{runs} runs (3 steps each), child SIGKILLed after its 50th step; fresh process "
        f"recover(concurrency={concurrency}): {n} runs to all-complete in {float(elapsed):.2f} s "
        f"(process wall {wall:.2f} s), {bad} not completed; {appends} checkpoints in "
        f"{batches} commits; steps run twice: {reruns} (in flight at the kill); "
        f"distinct steps run {len(counts)} of {runs * 3}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("inflight")
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--steps", type=int, default=40)
    a = sub.add_parser("linear")
    a.add_argument("--steps", type=int, default=10000)
    a = sub.add_parser("wal")
    a.add_argument("--runs", type=int, default=50)
    a = sub.add_parser("recovery")
    a.add_argument("--runs", type=int, default=1000)
    a.add_argument("--concurrency", type=int, default=16)
    ns = p.parse_args()
    if ns.what == "inflight":
        inflight(ns.rounds, ns.steps)
    elif ns.what == "linear":
        linear(ns.steps)
    elif ns.what == "wal":
        wal(ns.runs)
    else:
        recovery(ns.runs, ns.concurrency)


if __name__ == "__main__":
    main()
