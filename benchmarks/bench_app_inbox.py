"""The app's inbox with many questions: time to open it (``i``) and to
select a row (``space``).

    python benchmarks/bench_app_inbox.py [--questions 20300] [--db PATH]

1. Setup (untimed, kept at ``--db`` for the next time): the README's
   approval example started ``--questions`` times through the engine, each
   run waiting for its answer ("Ship this order?").
2. The Textual app headless (``App.run_test``, 120x40) on that file:
   the seconds from pressing ``i`` until the inbox has read its rows and
   drawn them, then the seconds each of 5 ``space`` presses takes until
   the screen has handled it (the row is marked).
3. Prints ``N questions: inbox opens in X s, space selects in Y s (median of 5)``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def make_db(db: Path, questions: int) -> None:
    from desktop_app import bootstrap
    from desktop_app.config import load_settings
    from desktop_app.examples.approval import approval

    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[approval])
    try:
        have = len(engine.waiting())
        for i in range(have, questions):
            engine.run("approval", {"order": f"o-{i}"})
    finally:
        engine.store.close()


async def measure(db: Path) -> tuple[float, list[float]]:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.screens.inbox import InboxScreen
    from desktop_app.config import load_settings
    from desktop_app.examples.approval import approval
    from tests.app_support import settle

    app = FlowdeskApp(load_settings(db_path=db), flows=[approval])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        t0 = time.perf_counter()
        await pilot.press("i")
        while not (isinstance(app.screen, InboxScreen) and app.screen.loaded):
            await asyncio.sleep(0.002)
        await pilot.pause()
        opened = time.perf_counter() - t0
        screen = app.screen
        marks = []
        for _ in range(5):
            t0 = time.perf_counter()
            await pilot.press("space")
            await pilot.pause()
            marks.append(time.perf_counter() - t0)
            await pilot.press("down")
        assert len(screen.marked) == 5, screen.marked
        return opened, marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=20_300)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp()) / "inbox.db"
    make_db(db, args.questions)
    opened, marks = asyncio.run(measure(db))
    print(
        f"{args.questions} questions: inbox opens in {opened:.2f} s, "
        f"space selects in {statistics.median(marks):.3f} s (median of 5)"
    )


if __name__ == "__main__":
    main()
