"""Durable steps per second beside raw apsw single-row commits, same run, same file system.

    python benchmarks/bench_steps.py [--runs 200] [--steps 10] [--repeat 5] [--synchronous FULL]

Prints the median microseconds per durable step (a 10-step linear flow of
trivial steps, every step checkpointed in its own commit) and per raw
single-row ``INSERT`` commit on an apsw connection opened with the same
pragmas, and their ratio. Optional peers (LangGraph with its SQLite
checkpointer in ``durability="sync"`` mode, DBOS with a SQLite system
database) run when installed (``pip install -r benchmarks/requirements-peers.txt``).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite import open_store


class Counter(BaseModel):
    n: int = 0


def linear_flow(steps: int):
    b = FlowBuilder("bench", Counter)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    return b.chain().compile()


def raw_commit_us(folder: Path, commits: int, synchronous: str) -> float:
    """µs per single-row INSERT commit (BEGIN IMMEDIATE … COMMIT): wall time / commits,
    measured the same way as the durable steps."""
    conn = open_connection(folder / "raw.db", synchronous=synchronous)  # type: ignore[arg-type]
    conn.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
    t0 = time.perf_counter()
    for i in range(commits):
        with conn:
            conn.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / commits * 1e6


def flowdesk_step_us(folder: Path, runs: int, steps: int, synchronous: str) -> float:
    """µs per durable step: wall time of ``runs`` runs / (runs * steps)."""
    path = folder / "flowdesk.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    store = open_store(path, synchronous=synchronous)  # type: ignore[arg-type]
    engine = Engine(store, flows=[linear_flow(steps)])
    t0 = time.perf_counter()
    for _ in range(runs):
        res = engine.run("bench", Counter())
        assert res.status == "completed" and res.state.n == steps
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed / (runs * steps) * 1e6


def langgraph_step_us(folder: Path, runs: int, steps: int) -> float | None:
    try:
        import sqlite3
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class S(TypedDict):
        n: int

    g = StateGraph(S)
    names = [f"s{i}" for i in range(steps)]
    for name in names:
        g.add_node(name, lambda s: {"n": s["n"] + 1})
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    conn = sqlite3.connect(folder / "langgraph.db", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    app = g.compile(checkpointer=SqliteSaver(conn))
    t0 = time.perf_counter()
    for i in range(runs):
        app.invoke({"n": 0}, {"configurable": {"thread_id": f"t{i}"}}, durability="sync")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / (runs * steps) * 1e6


def dbos_step_us(folder: Path, runs: int, steps: int) -> float | None:
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError:
        return None
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": f"sqlite:///{folder / 'dbos.sqlite'}",
    }
    DBOS(config=config)

    @DBOS.step()
    def inc(n: int) -> int:
        return n + 1

    @DBOS.workflow()
    def wf() -> int:
        n = 0
        for _ in range(steps):
            n = inc(n)
        return n

    DBOS.launch()
    t0 = time.perf_counter()
    for _ in range(runs):
        assert wf() == steps
    elapsed = time.perf_counter() - t0
    DBOS.destroy()
    return elapsed / (runs * steps) * 1e6


def median_of(repeat: int, fn: Callable[[Path], float | None]) -> float | None:
    results = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="flowdesk-bench-") as d:
            r = fn(Path(d))
        if r is None:
            return None
        results.append(r)
    return statistics.median(results)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    args = p.parse_args()
    commits = args.runs * args.steps // 4
    raw = median_of(args.repeat, lambda d: raw_commit_us(d, commits, args.synchronous))
    ours = median_of(
        args.repeat, lambda d: flowdesk_step_us(d, args.runs, args.steps, args.synchronous)
    )
    assert raw is not None and ours is not None
    print(
        f"synchronous={args.synchronous}, {args.runs} runs x {args.steps} steps, "
        f"median of {args.repeat}"
    )
    print(f"raw apsw single-row commit : {raw:9.1f} us  ({1e6 / raw:8.0f} commits/s)")
    print(
        f"flowdesk durable step      : {ours:9.1f} us  ({1e6 / ours:8.0f} steps/s)"
        f"  = {ours / raw:.2f} x raw commit"
    )
    peers = {
        "langgraph (sqlite, sync)": lambda d: langgraph_step_us(d, args.runs, args.steps),
        "dbos (sqlite)": lambda d: dbos_step_us(d, args.runs, args.steps),
    }
    for name, fn in peers.items():
        us = median_of(1 if "dbos" in name else args.repeat, fn)
        if us is None:
            print(f"{name:27}: not installed (pip install -r benchmarks/requirements-peers.txt)")
        else:
            print(
                f"{name:27}: {us:9.1f} us  = {us / raw:.2f} x raw commit, "
                f"{us / ours:.2f} x flowdesk"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
