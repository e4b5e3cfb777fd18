"""The app on a file with 100,000 runs: time to the first rendered runs table.

    python benchmarks/bench_app_runs.py [--runs 100000] [--repeat 3]

1. Setup (untimed): a temporary database with the schema applied and
   ``--runs`` finished runs written in one transaction
   (:func:`tests.runs_corpus.make_runs_db`; SQL is fine here, it is setup).
2. ``--repeat`` times, a fresh process (this script with ``--child``) starts
   the Textual app headless (``App.run_test``, 120x40) on that file and
   reports the seconds from just before the app starts (``FlowdeskApp(...)``,
   after the imports) until the runs table has rows and the screen has been
   refreshed with them (one ``pilot.pause()`` later), plus the process's peak
   resident memory (``ru_maxrss``) at that moment.
3. Prints the median time and the largest peak RSS:
   ``100000 runs: first table in X s (target < 1 s), RSS Y MiB (target < 250 MiB)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


async def first_table(db: Path) -> dict[str, float]:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.config import load_settings

    settings = load_settings(db_path=db)
    t0 = time.perf_counter()
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            screen = app.screen_stack[0] if app.screen_stack else None
            table = getattr(screen, "table", None) if screen is not None else None
            try:
                rows = table.row_count if table is not None else 0
            except Exception:  # the screen is still composing
                rows = 0
            if rows:
                break
            if app.startup_error:
                raise SystemExit(f"startup failed: {app.startup_error}")
            if time.perf_counter() - t0 > 60:
                raise SystemExit("no rows after 60 s")
            await asyncio.sleep(0.002)
        await pilot.pause()
        elapsed = time.perf_counter() - t0
        painted_at = time.monotonic()  # one clock for all processes (bench_startup.py)
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        shown = table.row_count
        page_line = app.runs_screen.page_line.message
    return {
        "seconds": elapsed,
        "painted_at": painted_at,
        "rss_mib": rss_mib,
        "rows": shown,
        "page_line": page_line,
    }


def empty_config(folder: Path) -> Path:
    """A settings file with no settings: Flowdesk reads none of the user's,
    and a FLOWDESK_CONFIG naming no file would be refused."""
    path = folder / "no-config.toml"
    path.write_text("")
    return path


def child(db: Path) -> None:
    print(json.dumps(asyncio.run(first_table(db))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    from tests.runs_corpus import make_runs_db

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.db"
        t = time.perf_counter()
        make_runs_db(db, args.runs)
        size_mib = db.stat().st_size / 2**20
        print(
            f"setup: {args.runs} runs written in {time.perf_counter() - t:.1f} s "
            f"(file {size_mib:.0f} MiB)"
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FLOWDESK_")},
            "FLOWDESK_CONFIG": str(empty_config(Path(tmp))),
        }
        results = []
        for i in range(args.repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(db)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if out.returncode != 0:
                sys.exit(f"child failed:\n{out.stdout}\n{out.stderr}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(result)
            print(
                f"  launch {i + 1}: {result['seconds']:.3f} s, {result['rss_mib']:.0f} MiB, "
                f"{result['rows']} rows ({result['page_line']})"
            )
    seconds = statistics.median(r["seconds"] for r in results)
    rss = max(r["rss_mib"] for r in results)
    print(
        f"{args.runs} runs: first table in {seconds:.2f} s (target < 1 s), "
        f"RSS {rss:.0f} MiB (target < 250 MiB)"
    )


if __name__ == "__main__":
    main()
