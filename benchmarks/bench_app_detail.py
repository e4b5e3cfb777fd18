"""The app on a run with 30,000 checkpoints: time to its detail's first screen.

    python benchmarks/bench_app_detail.py [--checkpoints 30000] [--repeat 5]

1. Setup (untimed): a temporary database with two runs of a one-step loop
   flow made by the engine: a big one (``--checkpoints`` checkpoints) and a
   small baseline (10 checkpoints).
2. The app is started headless once (``App.run_test``, 120x40). Then
   ``--repeat`` times, interleaved (big, small, big, small...), the detail of
   each run is opened (``FlowdeskApp.controller.open_run``) and two times are taken
   from just before the call: ``first screen`` (the header shows the run and
   the screen has been refreshed: the timeline shows a loading indicator or
   its rows) and ``timeline`` (the grouped timeline has its rows, read in a
   worker). The detail is closed between two openings.
3. Prints the medians, the ratio big/small, and the timeline's row count
   (a loop is one row, not 30,000): target first screen < 0.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class Loop(BaseModel):
    n: int = 0
    total: int = 0


def loop_flow():  # type: ignore[no-untyped-def]
    from desktop_app.flow import FlowBuilder

    return (
        FlowBuilder("loop", Loop, max_steps=10_000_000)
        .loop(
            "tick",
            lambda s: {"n": s.n + 1},
            until=lambda s: s.n >= s.total,
            progress=lambda s: (s.n, s.total),
        )
        .chain()
        .compile()
    )


def setup(db: Path, checkpoints: int) -> tuple[str, str]:
    from desktop_app import bootstrap
    from desktop_app.config import load_settings

    settings = load_settings(db_path=db, synchronous="NORMAL")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[loop_flow()])
    try:
        big = engine.run("loop", Loop(total=checkpoints - 2), run_id="b" * 32).run_id
        small = engine.run("loop", Loop(total=8), run_id="s" * 32).run_id
    finally:
        engine.store.close()
    return big, small


async def measure(db: Path, big: str, small: str, repeat: int) -> dict[str, list[float]]:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.screens.detail import RunDetailScreen
    from desktop_app.app.widgets.run_tables import CheckpointsTable
    from desktop_app.config import load_settings

    times: dict[str, list[float]] = {
        "big first": [],
        "big timeline": [],
        "small first": [],
        "small timeline": [],
        "rows": [],
    }
    app = FlowdeskApp(load_settings(db_path=db), flows=[loop_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        while app.engine is None:
            await asyncio.sleep(0.01)
        await app.workers.wait_for_complete()
        await pilot.pause()
        for _ in range(repeat):
            for name, run_id in (("big", big), ("small", small)):
                t0 = time.perf_counter()
                app.controller.open_run(run_id)
                while not isinstance(app.screen, RunDetailScreen) or app.screen.record is None:
                    await asyncio.sleep(0.001)
                await pilot.pause()
                times[f"{name} first"].append(time.perf_counter() - t0)
                table = app.screen.query_one(CheckpointsTable)
                while not table.row_count:
                    await asyncio.sleep(0.001)
                await pilot.pause()
                times[f"{name} timeline"].append(time.perf_counter() - t0)
                if name == "big":
                    times["rows"].append(float(table.row_count))
                await pilot.press("escape")
                await pilot.pause()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        t = time.perf_counter()
        big, small = setup(db, args.checkpoints)
        print(f"setup: {args.checkpoints} checkpoints written in {time.perf_counter() - t:.1f} s")
        times = asyncio.run(measure(db, big, small, args.repeat))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.checkpoints} checkpoints: first screen {med['big first']:.3f} s (target < 0.5 s), "
        f"timeline {med['big timeline']:.3f} s in {int(med['rows'])} rows; "
        f"10 checkpoints: first screen {med['small first']:.3f} s, "
        f"timeline {med['small timeline']:.3f} s; "
        f"ratio big/small first screen {med['big first'] / med['small first']:.2f}"
    )


if __name__ == "__main__":
    main()
