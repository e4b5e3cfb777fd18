"""What SQLite's page-cache reset costs a step: one process's CPU per step
at ``synchronous=OFF``, with and without another connection committing one
tiny row after every step.

    python benchmarks/bench_cache_reset.py [--rounds 10] [--runs 100]

Why: with several processes on one file, SQLite drops a connection's whole
page cache whenever another connection committed since its last read
(``pager_reset`` when the WAL changed), so every process reads the pages of
its next transaction again. This isolates that cost from the rest of what
several processes add (``bench_processes.py`` counts the pages read again,
the context switches and the write gate's polls per step). The other
connection's commit is measured alone in the same rounds and subtracted.
Rounds interleave the two; medians, means and maxima are printed with the
load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, stat, table
from bench_steps import fresh_store, linear_flow

from desktop_app.flow import Engine
from desktop_app.flow.events import Event, StepFinished


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--runs", type=int, default=100, help="runs of the 10-step flow per round")
    args = p.parse_args()
    header("page-cache reset per step, synchronous=OFF", rounds=args.rounds, runs=args.runs)
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-reset-") as d:
        return measure(Path(d) / "flowdesk.db", args.rounds, args.runs)


def measure(db: Path, rounds: int, runs: int) -> int:
    store = fresh_store(db, "OFF")
    other = apsw.Connection(str(db))
    other.execute("PRAGMA synchronous=OFF; CREATE TABLE IF NOT EXISTS poke(x)")
    flow = linear_flow(10)
    engine = Engine(store, flows=[flow])
    poking = [False]

    def poke(ev: Event) -> None:
        if poking[0] and isinstance(ev, StepFinished):
            other.execute("INSERT INTO poke VALUES (1)")

    engine.events.subscribe(poke)
    steps = runs * 10
    for _ in range(runs):  # warm
        engine.run("bench", flow.state_type())
    cpu: dict[bool, list[float]] = {False: [], True: []}
    misses: dict[bool, list[float]] = {False: [], True: []}
    alone: list[float] = []
    for _ in range(rounds):
        for on in (False, True):
            poking[0] = on
            store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS, True)  # back to zero
            c0 = time.process_time()
            for _ in range(runs):
                engine.run("bench", flow.state_type())
            cpu[on].append((time.process_time() - c0) / steps * 1e6)
            misses[on].append(store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS)[0] / steps)
        c0 = time.process_time()
        for _ in range(steps):
            other.execute("INSERT INTO poke VALUES (1)")
        alone.append((time.process_time() - c0) / steps * 1e6)
    reset = [b - a - c for a, b, c in zip(cpu[False], cpu[True], alone, strict=True)]
    table(
        [
            Row("CPU per step (us), no reset", stat(cpu[False]).fmt(digits=0)),
            Row("CPU per step (us), a reset before every step", stat(cpu[True]).fmt(digits=0)),
            Row("the other connection's commit alone (us)", stat(alone).fmt(digits=1)),
            Row(
                "pages read again per step: no reset / reset",
                f"{stat(misses[False]).fmt()} / {stat(misses[True]).fmt()}",
            ),
            Row(
                "a reset's cost per step (us; mean, max)",
                f"{stat(reset).fmt(digits=0)} ({statistics.mean(reset):.0f}, {max(reset):.0f})",
            ),
        ]
    )
    other.close()
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
