"""Does a step cost the same at step 10 and at step 10,000? Does compiling grow
linearly with the flow?

    python benchmarks/bench_scaling.py [--steps 10000] [--synchronous OFF,FULL]
                                       [--compile-rounds 5] [--compile-sizes 1000,10000]

1. Step cost along one long run: one run of a ``--steps``-step linear flow of
   trivial steps (``n += 1``), every step one durable checkpoint, per
   ``synchronous`` level (``OFF`` shows the CPU cost alone, ``FULL`` adds the
   fsync). A step's cost is the wall time between consecutive
   ``StepFinished`` events (each is published right after the step's
   checkpoint commits). Reported: the median over steps 10..110 and over the
   last 100 steps, and their ratio (target <= 1.3), plus each window's mean
   and max (the costs have a heavy tail: occasional steps take 10-50x the
   median) and the whole run's wall time. One run per level: the per-step medians are over 100 steps
   each, and a 10,000-step run on today's code takes tens of seconds.
2. Compile time: building (``FlowBuilder.step`` x N, ``chain()``) and
   ``compile()`` of linear flows of each ``--compile-sizes`` (default 1,000
   and 10,000 steps), interleaved ``--compile-rounds`` times; the per-round
   ratio 10k / 1k is 10 when compiling is linear (judged <= 13, i.e.
   linear within 1.3x).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, ratios, stat, table
from bench_steps import fresh_store
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.events import RunStarted, StepFinished


class Counter(BaseModel):
    n: int = 0


def build(steps: int) -> FlowBuilder[Counter]:
    b = FlowBuilder("long", Counter, max_steps=steps + 10)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    return b.chain()


def build_and_compile(steps: int) -> tuple[float, float]:
    """Seconds to build and to compile a ``steps``-step linear flow."""
    t0 = time.perf_counter()
    b = build(steps)
    t1 = time.perf_counter()
    b.compile()
    return t1 - t0, time.perf_counter() - t1


def step_costs(steps: int, synchronous: str, folder: str | None) -> tuple[list[float], float]:
    """Per-step seconds (index 0 = step 1) of one run, and the run's wall time."""
    flow = build(steps).compile()
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-scale-", dir=folder) as d:
        store = fresh_store(Path(d) / "flowdesk.db", synchronous)
        engine = Engine(store, flows=[flow])
        marks: list[float] = []

        def on_event(ev: object) -> None:
            if isinstance(ev, RunStarted | StepFinished):
                marks.append(time.perf_counter())

        engine.events.subscribe(on_event)
        t0 = time.perf_counter()
        res = engine.run("long", Counter())
        wall = time.perf_counter() - t0
        store.close()
    assert res.status == "completed" and res.state.n == steps, res
    assert len(marks) == steps + 1, len(marks)
    return [b - a for a, b in itertools.pairwise(marks)], wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=10_000, help="steps in the long run (>= 300)")
    p.add_argument("--synchronous", default="OFF,FULL", help="levels, comma-separated")
    p.add_argument("--compile-sizes", default="1000,10000", help="two flow sizes to compile")
    p.add_argument("--compile-rounds", type=int, default=5)
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    args = p.parse_args()
    if args.steps < 300:
        p.error("--steps must be at least 300")
    small, large = (int(x) for x in args.compile_sizes.split(","))
    levels = [x.strip().upper() for x in args.synchronous.split(",")]
    header(
        "step cost along a long run; compile time by flow size",
        steps=args.steps,
        synchronous=",".join(levels),
        compile_sizes=f"{small},{large}",
        compile_rounds=args.compile_rounds,
    )
    rows: list[Row] = []
    last = (args.steps - 100 + 1, args.steps)
    for level in levels:
        costs, wall = step_costs(args.steps, level, args.dir)
        early = costs[9:110]  # steps 10..110
        late = costs[-100:]
        e, la = statistics.median(early), statistics.median(late)
        print(
            f"  synchronous={level}: run of {args.steps} steps took {wall:.1f} s; "
            f"step 10-110 median {e * 1e6:.0f} us, step {last[0]}-{last[1]} median "
            f"{la * 1e6:.0f} us"
        )
        for label, window in (("steps 10-110", early), ("last 100 steps", late)):
            rows.append(
                Row(
                    f"{level}: {label}, per step",
                    f"{stat(window).fmt(1e6, 0)} us (mean {statistics.fmean(window) * 1e6:,.0f}, "
                    f"max {max(window) * 1e6:,.0f})",
                )
            )
        rows.append(
            Row(
                f"{level}: last 100 / steps 10-110 (medians)",
                f"{la / e:.2f} x",
                "<= 1.3x",
                la / e <= 1.3,
            )
        )
        rows.append(Row(f"{level}: whole run, mean per step", f"{wall / args.steps * 1e6:.0f} us"))

    parts: dict[str, tuple[float, float]] = {}

    def contender(n: int):
        def go() -> float:
            b, c = build_and_compile(n)
            parts[f"{n}"] = (b, c)
            return c

        return go

    print(f"  compiling {small} and {large} steps, interleaved:", flush=True)
    res = interleave(
        {f"{small}": contender(small), f"{large}": contender(large)}, args.compile_rounds
    )
    ratio = stat(ratios(res[f"{large}"], res[f"{small}"]))
    goal = 1.3 * large / small
    rows.append(Row(f"compile() {small} steps", f"{stat(res[f'{small}']).fmt(1e3, 1)} ms"))
    rows.append(Row(f"compile() {large} steps", f"{stat(res[f'{large}']).fmt(1e3, 1)} ms"))
    rows.append(
        Row(
            f"compile() {large} / {small}",
            f"{ratio.fmt()} x",
            f"<= {goal:g}x (linear: {large / small:g})",
            ratio.median <= goal,
        )
    )
    b_small, b_large = parts[f"{small}"][0], parts[f"{large}"][0]
    rows.append(
        Row(
            "building (step() x N + chain()), last round",
            f"{b_small * 1e3:.1f} ms / {b_large * 1e3:.1f} ms = {b_large / b_small:.1f} x",
        )
    )
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
