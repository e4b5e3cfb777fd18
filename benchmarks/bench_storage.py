"""Bytes written per step grow with what the step changed, not with the size of
the whole state or the length of the history.

    python benchmarks/bench_storage.py [--steps 1000] [--item-bytes 1024] [--rounds 3]
                                       [--synchronous FULL]

One run of a flow with a single loop step (``checkpoint_each_iteration=True``)
whose state is a list that grows by one unique 1 KiB string per iteration,
until it holds ``--steps`` items: every iteration is one durable checkpoint.

It prints:

* bytes: the sum over the run's ``checkpoints`` rows of
  ``length(state) + length(steps) + length(frontier) + length(progress) +
  length(meta)`` (what the engine stored for the run; target < 5 MiB for
  1,000 x 1 KiB), the database file size after ``PRAGMA
  wal_checkpoint(TRUNCATE)``, and (Linux) the bytes the process handed to
  ``write(2)`` during the run (``wchar`` in ``/proc/self/io``: WAL frames and
  checkpointing, i.e. page-granular I/O, reported for information).
* per-step cost: the wall time between consecutive ``RunProgress`` events
  (each is published right after an iteration's checkpoint commits); the
  median of steps 1..20 (around step 10) and of steps N-10..N (around step
  1,000), each the median over ``--rounds`` runs, and their ratio (target <= 1.5).
  Every run uses a fresh file, so steps 1..20 also pay for growing the WAL
  and database files; the ratio can come out below 1.
* the same two figures for a naive baseline that stores the whole state each
  step: ``json.dumps`` of the full list, one raw apsw ``INSERT`` commit per
  step, into a separate file opened with the same pragmas (WAL, the same
  ``synchronous``).

Flowdesk and the baseline alternate, one run each per round
(``_harness.interleave``); every run uses a fresh file. A baseline run
writes about 0.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, stat, table
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.events import RunProgress, RunStarted
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store

MIB = 1024 * 1024
EARLY = (1, 20)  # steps 1..20: "around step 10"
LATE_SPAN = 10  # steps N-10..N: "around step N"


class Items(BaseModel):
    items: list[str] = []


def make_items(n: int, size: int, seed: int = 1) -> list[str]:
    """``n`` distinct strings of ``size`` characters: a 6-digit index + random hex."""
    rng = random.Random(seed)
    return [f"{i:06d}" + rng.randbytes(size).hex()[: size - 6] for i in range(n)]


def items_flow(items: list[str]):
    n = len(items)

    def body(state: Items) -> dict:
        return {"items": [*state.items, items[len(state.items)]]}

    return (
        FlowBuilder("storage", Items, max_steps=n + 10)
        .loop(
            "grow",
            body,
            until=lambda s: len(s.items) >= n,
            checkpoint_each_iteration=True,
            progress=lambda s: (len(s.items), n),
        )
        .compile()
    )


def wchar() -> int | None:
    """Bytes this process has passed to write(2) so far (Linux), else None."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def file_size_after_truncate(conn) -> int:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return os.path.getsize(conn.filename)


@dataclass
class Measure:
    """One run: per-step costs in seconds (index 0 = step 1) and byte counts."""

    costs: list[float]
    stored: int
    file_size: int
    syscall_written: int | None
    detail: str = ""

    def window(self, first: int, last: int) -> float:
        return statistics.median(self.costs[first - 1 : last])


def flowdesk_run(folder: Path, items: list[str], synchronous: str) -> Measure:
    path = folder / "flowdesk.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    store = open_store(path, synchronous=synchronous)  # type: ignore[arg-type]
    engine = Engine(store, flows=[items_flow(items)])
    marks: dict[int, float] = {}  # iteration -> when its checkpoint had committed

    def on_event(ev: object) -> None:
        # RunStarted marks iteration 0; the loop step's own completion publishes
        # one more RunProgress with the final count, which setdefault ignores.
        if isinstance(ev, RunStarted):
            marks.setdefault(0, time.perf_counter())
        elif isinstance(ev, RunProgress):
            marks.setdefault(ev.done, time.perf_counter())

    engine.events.subscribe(on_event)
    w0 = wchar()
    res = engine.run("storage", Items())
    w1 = wchar()
    assert res.status == "completed" and len(res.state.items) == len(items), res
    assert sorted(marks) == list(range(len(items) + 1)), len(marks)
    costs = [marks[i] - marks[i - 1] for i in range(1, len(items) + 1)]
    rows = store.conn.execute(
        "SELECT kind, length(state), length(steps), length(frontier), "
        "coalesce(length(progress),0), coalesce(length(meta),0) "
        "FROM checkpoints WHERE run_id=? ORDER BY revision",
        (res.run_id,),
    ).fetchall()
    per_row = [sum(r[1:]) for r in rows]
    stored = sum(per_row)
    state_bytes = sum(r[1] for r in rows)
    deltas = [n for r, n in zip(rows, per_row, strict=True) if r[0] == "delta"]
    detail = (
        f"{len(rows)} checkpoint rows; state columns {state_bytes / MIB:.2f} MiB, "
        f"other columns {(stored - state_bytes) / MIB:.2f} MiB; "
        f"delta row bytes: first {deltas[0]}, last {deltas[-1]}, max {max(deltas)}"
    )
    detail += pages_detail(store.conn)
    size = file_size_after_truncate(store.conn)
    store.close()
    written = None if w0 is None or w1 is None else w1 - w0
    return Measure(costs, stored, size, written, detail)


def pages_detail(conn) -> str:
    """How the checkpoints table uses pages (needs SQLite's dbstat; else empty)."""
    try:
        rows = conn.execute(
            "SELECT pagetype, count(*), sum(payload), sum(unused) FROM dbstat "
            "WHERE name='checkpoints' GROUP BY pagetype ORDER BY pagetype"
        ).fetchall()
    except Exception:  # dbstat not compiled in
        return ""
    parts = [
        f"{kind} {n} ({payload / MIB:.2f} MiB payload, {unused / MIB:.2f} MiB unused)"
        for kind, n, payload, unused in rows
    ]
    return "\n  flowdesk: checkpoints table pages: " + ", ".join(parts)


def naive_run(folder: Path, items: list[str], synchronous: str) -> Measure:
    conn = open_connection(folder / "naive.db", synchronous=synchronous)  # type: ignore[arg-type]
    conn.execute(
        "CREATE TABLE states(id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
        "step INTEGER NOT NULL, state TEXT NOT NULL)"
    )
    state: list[str] = []
    costs: list[float] = []
    w0 = wchar()
    t = time.perf_counter()
    for i, item in enumerate(items, 1):
        state = [*state, item]
        with conn:
            conn.execute(
                "INSERT INTO states(run_id, step, state) VALUES (?,?,?)",
                ("naive", i, json.dumps({"items": state})),
            )
        now = time.perf_counter()
        costs.append(now - t)
        t = now
    w1 = wchar()
    stored = conn.execute("SELECT sum(length(state)) FROM states").fetchone()[0]
    size = file_size_after_truncate(conn)
    conn.close()
    written = None if w0 is None or w1 is None else w1 - w0
    return Measure(costs, int(stored), size, written)


def summarise(name: str, ms: list[Measure], steps: int) -> tuple[float, float, float]:
    late = (steps - LATE_SPAN, steps)
    early_us = statistics.median(m.window(*EARLY) for m in ms) * 1e6
    late_us = statistics.median(m.window(*late) for m in ms) * 1e6
    ratios = [m.window(*late) / m.window(*EARLY) for m in ms]
    mean_us = statistics.median(statistics.fmean(m.costs) for m in ms) * 1e6
    print(
        f"  {name}: step {EARLY[0]}..{EARLY[1]} median {early_us:8.1f} us, "
        f"step {late[0]}..{late[1]} median {late_us:8.1f} us  "
        f"(per-run ratios {', '.join(f'{r:.2f}' for r in ratios)}; "
        f"mean over all steps {mean_us:.1f} us)"
    )
    return early_us, late_us, late_us / early_us


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=1000, help="loop iterations (items), >= 30")
    p.add_argument("--item-bytes", type=int, default=1024, help="size of each new item")
    p.add_argument("--rounds", type=int, default=3, help="rounds of one run each (medians)")
    p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    args = p.parse_args()
    if args.steps < 30:
        p.error("--steps must be at least 30")
    items = make_items(args.steps, args.item_bytes)
    payload = sum(len(i) for i in items)
    header(
        f"bytes and step cost of a growing state: {args.steps} steps, each appends one unique "
        f"{args.item_bytes}-byte item (payload {payload / MIB:.2f} MiB)",
        synchronous=args.synchronous,
        rounds=args.rounds,
    )
    ours: list[Measure] = []
    naive: list[Measure] = []
    late = (args.steps - LATE_SPAN, args.steps)

    def contender(fn, out: list[Measure]):
        def go() -> float:
            with tempfile.TemporaryDirectory(prefix="flowdesk-bench-", dir=args.dir) as d:
                m = fn(Path(d), items, args.synchronous)
            out.append(m)
            return m.window(*late) / m.window(*EARLY)

        return go

    res = interleave(
        {"flowdesk": contender(flowdesk_run, ours), "naive": contender(naive_run, naive)},
        args.rounds,
        warmup=0,
    )

    print(f"per-step wall time (medians over {args.rounds} runs each):")
    summarise("flowdesk", ours, args.steps)
    summarise("naive   ", naive, args.steps)
    print("bytes:")
    print(f"  flowdesk: {ours[-1].detail}")
    rows: list[Row] = []
    for name, ms in (("flowdesk", ours), ("naive full-state", naive)):
        sys_w = [m.syscall_written for m in ms]
        sys_txt = (
            "n/a"
            if None in sys_w
            else f"{statistics.median(w for w in sys_w if w is not None) / MIB:.1f} MiB"
        )
        stored = stat([m.stored for m in ms])
        is_fd = name == "flowdesk"
        rows.append(
            Row(
                f"{name}: bytes stored",
                f"{stored.fmt(1 / MIB)} MiB",
                "< 5 MiB" if is_fd else "",
                stored.median < 5 * MIB if is_fd else None,
            )
        )
        rows.append(
            Row(
                f"{name}: db file after checkpoint / write(2) bytes",
                f"{stat([m.file_size for m in ms]).fmt(1 / MIB)} MiB / {sys_txt}",
            )
        )
        ratio = stat(res["flowdesk" if is_fd else "naive"])
        rows.append(
            Row(
                f"{name}: step {late[0]}-{late[1]} / step {EARLY[0]}-{EARLY[1]}",
                f"{ratio.fmt()} x",
                "<= 1.5x" if is_fd else "",
                ratio.median <= 1.5 if is_fd else None,
            )
        )
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
