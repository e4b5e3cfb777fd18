"""``bench_cpu.py`` as an A/B: this checkout against another (e.g. a
worktree of main), one invocation each, alternated, the order flipped at
every pair, so that both meet the machine's load alike.

    python benchmarks/bench_cpu_versus.py --versus ../main [--pairs 6] [-- --runs 100 --rounds 5]

``bench_cpu.py`` (this checkout's, for both) imports Flowdesk from each
checkout in turn (``PYTHONPATH``). Per side: the CPU per step at
``synchronous=OFF`` (median of the invocation's rounds, and the smallest
round) and its ratio to its own SQL replayed in the same rounds, as
median, mean, max and min over the pairs; per pair, this checkout / the
other; the 1-minute load average over the invocations; the Python calls
per step of the last invocation of each. On a shared machine only the
per-pair ratios mean anything (the medians of one invocation move 10-20%
with the load at a load average of 10 on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE / "bench_cpu.py"


def one(checkout: Path, extra: list[str]) -> dict[str, float]:
    """One ``bench_cpu.py`` invocation on ``checkout``'s Flowdesk."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run(
        [sys.executable, str(BENCH), "--top", "0", *extra],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = re.search(r"CPU per step \(OFF\)\s+(\d+) \[(\d+)-", out)
    ratio = re.search(r"same round\s+([\d.]+) \[([\d.]+)-", out)
    sql = re.search(r"CPU per step of its SQL replayed alone\s+(\d+)", out)
    calls = re.search(r"Python calls per step \(all / engine\)\s+(\d+) / (\d+)", out)
    if cpu is None or ratio is None or sql is None or calls is None:
        raise SystemExit(f"bench_cpu.py printed no figures for {checkout}:\n{out}")
    return {
        "cpu": float(cpu.group(1)),
        "cpu_min": float(cpu.group(2)),
        "ratio": float(ratio.group(1)),
        "sql": float(sql.group(1)),
        "calls": float(calls.group(1)),
        "engine_calls": float(calls.group(2)),
    }


def spread(xs: list[float]) -> str:
    return (
        f"median {statistics.median(xs):.2f}, mean {statistics.mean(xs):.2f}, "
        f"max {max(xs):.2f}, min {min(xs):.2f}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--versus", type=Path, required=True, help="the other checkout (e.g. main)")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("extra", nargs="*", help="bench_cpu.py's arguments (after --)")
    args = p.parse_args()
    extra = args.extra or ["--runs", "100", "--rounds", "5"]
    sides = {"this": HERE.parent, "versus": args.versus.resolve()}
    got: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
    loads: list[float] = []
    print(f"bench_cpu.py {' '.join(extra)}: {sides['this']} against {sides['versus']}")
    for i in range(args.pairs):
        loads.append(os.getloadavg()[0])
        for side in ("versus", "this") if i % 2 == 0 else ("this", "versus"):
            got[side].append(one(sides[side], extra))
        print(
            f"  pair {i + 1}: this {got['this'][-1]['cpu']:.0f} us ({got['this'][-1]['ratio']:.2f}x"
            f" its SQL), versus {got['versus'][-1]['cpu']:.0f} us"
            f" ({got['versus'][-1]['ratio']:.2f}x); load {loads[-1]:.1f}",
            flush=True,
        )
    loads.append(os.getloadavg()[0])
    for side, rows in got.items():
        print(f"{side} ({sides[side]}):")
        print(f"  CPU per step, us:             {spread([r['cpu'] for r in rows])}")
        print(f"  smallest round's, us:         {spread([r['cpu_min'] for r in rows])}")
        print(f"  / its SQL replayed:           {spread([r['ratio'] for r in rows])}")
        print(f"  its SQL replayed alone, us:   {spread([r['sql'] for r in rows])}")
        print(
            f"  Python calls per step:        {rows[-1]['calls']:.0f}"
            f" (engine {rows[-1]['engine_calls']:.0f})"
        )
    pairs = list(zip(got["this"], got["versus"], strict=True))
    print("this / versus, per pair:")
    print(f"  CPU per step:                 {spread([a['cpu'] / b['cpu'] for a, b in pairs])}")
    print(
        f"  smallest round's:             {spread([a['cpu_min'] / b['cpu_min'] for a, b in pairs])}"
    )
    print(f"  / its SQL replayed:           {spread([a['ratio'] / b['ratio'] for a, b in pairs])}")
    print(
        f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
