"""Durable steps beside raw apsw commits and peer engines, interleaved, at 1, 2, 4
and 8 runs in flight.

    python benchmarks/bench_steps.py [--rounds 8] [--concurrency 1,2,4,8]
                                     [--synchronous FULL] [--scale 1.0] [--no-peers]
                                     [--versus ../main]

Contenders, each in its own worker process (``_harness.Worker``), all timed
in the same invocation and interleaved round by round (``_harness.interleave``):

* ``raw commit``: one single-row ``INSERT`` per ``BEGIN IMMEDIATE ... COMMIT``
  on an apsw connection opened with Flowdesk's pragmas (``open_connection``:
  WAL, the same ``synchronous``); the figure is seconds per commit.
* ``raw 8 rows/commit``: the same with 8 rows per commit, per row: what a
  group commit of 8 checkpoints could approach.
* ``flowdesk xC``: ``C`` threads sharing one ``Engine`` (the engine's way of
  running many runs at once today: it is thread-safe, one run per thread),
  each thread running its share of the round's runs of a 10-step linear flow
  of trivial steps one after another; every step is one durable checkpoint.
  Seconds per step = round wall time / (runs x steps), run creation included.
* ``flowdesk@ xC`` (with ``--versus PATH``): the same, importing Flowdesk
  from another checkout (an A/B of a change against main, same rounds).
* ``langgraph xC`` / ``dbos xC`` (when installed, ``pip install -r
  benchmarks/requirements-peers.txt``): see ``_peers.py``; the same flow
  shape, threads with their own thread_id / workflow.

Figures (medians of the per-round values, spreads in brackets) and the
targets:

* 1 run in flight: durable step <= 1.3x one raw commit; LangGraph
  ``durability="sync"`` >= 4x and DBOS >= 8x slower than Flowdesk.
* 8 runs in flight: aggregate durable steps/s >= 4x the 1-run figure (per
  round: cost x1 / cost x8), cost per step < 0.5 raw commit.

``--scale`` multiplies the work per round (by default a round of all
contenders takes about 10 s on a loaded 2-core machine, the whole benchmark
about 90 s; ``--no-peers`` about a third of that); ``--rounds`` sets the
number of measured rounds (one warm-up round runs first and is discarded).

The engine offers threads sharing one ``Engine`` for many runs at once
today; a pool or batch API added later belongs beside ``flowdesk xC`` as its
own contender (``Flowdesk.round``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Worker, header, interleave, mean_max, ratios, stat, table, threaded
from _peers import available

STEPS = 10


class Raw:
    """Worker: single-row (or ``rows``-row) INSERT commits on an apsw connection."""

    def __init__(self, synchronous: str, folder: str | None = None) -> None:
        from desktop_app.store.connection import open_connection

        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-raw-", dir=folder)
        self.conn = open_connection(Path(self._dir.name) / "raw.db", synchronous=synchronous)  # type: ignore[arg-type]
        self.conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")

    def round(self, commits: int, rows: int = 1) -> float:
        """Seconds per row (per commit when ``rows`` is 1)."""
        import time

        values = [(f"row {i}",) for i in range(rows)]
        t0 = time.perf_counter()
        for _ in range(commits):
            with self.conn:
                if rows == 1:
                    self.conn.execute("INSERT INTO t(v) VALUES (?)", values[0])
                else:
                    self.conn.executemany("INSERT INTO t(v) VALUES (?)", values)
        return (time.perf_counter() - t0) / (commits * rows)

    def close(self) -> None:
        self.conn.close()
        self._dir.cleanup()


def linear_flow(steps: int, name: str = "bench"):
    from pydantic import BaseModel

    from desktop_app.flow import FlowBuilder

    class Counter(BaseModel):
        n: int = 0

    b = FlowBuilder(name, Counter)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    return b.chain().compile()


def fresh_store(path: Path, synchronous: str):
    """A store on a new file with the schema applied."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection
    from desktop_app.store.sqlite.store import open_store

    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return open_store(path, synchronous=synchronous)  # type: ignore[arg-type]


class Flowdesk:
    """Worker: runs of a linear flow on threads sharing one Engine."""

    def __init__(self, synchronous: str, steps: int = STEPS, folder: str | None = None) -> None:
        from desktop_app.flow import Engine

        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-fd-", dir=folder)
        self.store = fresh_store(Path(self._dir.name) / "flowdesk.db", synchronous)
        self.flow = linear_flow(steps)
        self.engine = Engine(self.store, flows=[self.flow])
        self.steps = steps
        self.state = self.flow.state_type()

    def round(self, concurrency: int, runs: int) -> float:
        def job(_i: int) -> None:
            res = self.engine.run("bench", self.state)
            assert res.status == "completed" and res.state.n == self.steps, res

        return threaded(concurrency, runs, job) / (runs * self.steps)

    def close(self) -> None:
        self.engine.stop()
        self.store.close()
        self._dir.cleanup()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=8, help="measured rounds (after 1 warm-up)")
    p.add_argument("--concurrency", default="1,2,4,8", help="runs in flight, comma-separated")
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument("--scale", type=float, default=1.0, help="multiply the work per round")
    p.add_argument("--no-peers", action="store_true", help="skip LangGraph and DBOS")
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    p.add_argument(
        "--versus",
        default=None,
        help="another checkout (e.g. main): its Flowdesk runs too, interleaved, as 'flowdesk@'",
    )
    args = p.parse_args()
    levels = sorted({int(c) for c in args.concurrency.split(",")} | {1})
    top = max(levels)

    def n(base: int) -> int:  # runs per round, a multiple of every concurrency level
        return max(top, round(base * args.scale / top) * top)

    fd_runs, lg_runs, dbos_runs, commits = n(48), n(16), n(16), max(50, int(400 * args.scale))
    peers = [] if args.no_peers else [x for x in ("langgraph", "dbos") if available(x)]
    header(
        "durable steps vs raw commits and peers, interleaved",
        synchronous=args.synchronous,
        steps_per_run=STEPS,
        rounds=args.rounds,
        concurrency=",".join(map(str, levels)),
        per_round=f"raw {commits} commits, flowdesk {fd_runs} runs, "
        + ", ".join(f"{x} {lg_runs if x == 'langgraph' else dbos_runs} runs" for x in peers),
    )
    missing = {"langgraph", "dbos"} - set(peers)
    if missing and not args.no_peers:
        print(
            f"  not installed: {', '.join(sorted(missing))} (pip install -r "
            "benchmarks/requirements-peers.txt)"
        )

    workers: dict[str, Worker] = {}
    try:
        workers["raw"] = Worker("bench_steps.py:Raw", synchronous=args.synchronous, folder=args.dir)
        workers["flowdesk"] = Worker(
            "bench_steps.py:Flowdesk", synchronous=args.synchronous, folder=args.dir
        )
        if args.versus:
            workers["flowdesk@"] = Worker(
                "bench_steps.py:Flowdesk",
                pythonpath=args.versus,
                synchronous=args.synchronous,
                folder=args.dir,
            )
        if "langgraph" in peers:
            workers["langgraph"] = Worker("_peers.py:LangGraph", steps=STEPS, folder=args.dir)
        if "dbos" in peers:
            workers["dbos"] = Worker("_peers.py:Dbos", steps=STEPS, folder=args.dir)

        contenders = {
            "raw commit": lambda: workers["raw"].round(commits=commits),
            "raw 8 rows/commit": lambda: workers["raw"].round(commits=commits // 4, rows=8),
        }
        runs_of = {"flowdesk": fd_runs, "flowdesk@": fd_runs, "langgraph": lg_runs}
        runs_of["dbos"] = dbos_runs
        versus = ["flowdesk@"] if args.versus else []
        for system in ["flowdesk", *versus, *peers]:
            for c in levels:
                contenders[f"{system} x{c}"] = lambda s=system, c=c: workers[s].round(
                    concurrency=c, runs=runs_of[s]
                )
        res = interleave(contenders, args.rounds)
    finally:
        for w in workers.values():
            w.close()

    raw = res["raw commit"]
    print()
    print("per contender (us per step or per row; medians [IQR] over rounds)")
    for name, vals in res.items():
        us = stat([v * 1e6 for v in vals])
        per_s = stat([1 / v for v in vals])
        vs_raw = stat(ratios(vals, raw))
        print(
            f"  {name:20} {us.fmt(digits=1):>28} us ({mean_max(vals, 1e6, 0)})   "
            f"{per_s.fmt(digits=0):>26} /s   {vs_raw.fmt():>22} x raw commit"
        )

    fd1 = res["flowdesk x1"]
    r = stat(ratios(fd1, raw))
    rows = [
        Row("raw apsw single-row commit", f"{stat(raw).fmt(1e6, 1)} us"),
        Row(
            "raw, 8 rows in one commit, per row / one commit",
            f"{stat(ratios(res['raw 8 rows/commit'], raw)).fmt()} x",
        ),
        Row("flowdesk 1 run, per step", f"{stat(fd1).fmt(1e6, 1)} us"),
        Row("flowdesk 1 run / raw commit", f"{r.fmt()} x", "<= 1.3x", r.median <= 1.3),
    ]
    if args.versus:
        other = res["flowdesk@ x1"]
        rows += [
            Row(f"flowdesk@{args.versus} 1 run, per step", f"{stat(other).fmt(1e6, 1)} us"),
            Row(
                f"flowdesk 1 run / flowdesk@{args.versus} 1 run (same rounds)",
                f"{stat(ratios(fd1, other)).fmt()} x",
            ),
        ]
    for peer, goal in (("langgraph", 4.0), ("dbos", 8.0)):
        if f"{peer} x1" not in res:
            rows.append(Row(f"{peer} 1 run / flowdesk 1 run", "not installed", f">= {goal:g}x"))
            continue
        pr = stat(ratios(res[f"{peer} x1"], fd1))
        rows.append(
            Row(
                f"{peer} 1 run / flowdesk 1 run",
                f"{pr.fmt()} x",
                f">= {goal:g}x",
                pr.median >= goal,
            )
        )
    for system in ["flowdesk", *peers]:
        one = res[f"{system} x1"]
        for c in levels[1:]:
            vals = res[f"{system} x{c}"]
            speed = stat(ratios(one, vals))  # throughput xC / throughput x1
            cost = stat(ratios(vals, raw))
            is_top = system == "flowdesk" and c == 8
            rows.append(
                Row(
                    f"{system} {c} in flight: steps/s",
                    f"{stat([1 / v for v in vals]).fmt(digits=0)} /s = {speed.fmt()} x the 1-run"
                    f" ({mean_max(ratios(one, vals))})",
                    ">= 4x" if is_top else "",
                    speed.median >= 4.0 if is_top else None,
                )
            )
            rows.append(
                Row(
                    f"{system} {c} in flight: cost per step / raw commit",
                    f"{cost.fmt()} x",
                    "< 0.5x" if is_top else "",
                    cost.median < 0.5 if is_top else None,
                )
            )
    table(rows)
    if stat(raw).median > 1e-3:
        print(
            "  note: one raw commit took over 1 ms in this invocation: the disk is busy with "
            "other processes' I/O, fsync dominates every contender and the ratios shrink "
            "toward 1; compare invocations whose raw commit is alike."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
