"""How long a run-id prefix takes to resolve on a database with many runs.

``resolve_run_id`` tries the exact id first (one indexed read), then scans
the scope's run ids (timed here with a prefix that matches none). Prints
medians of 5 of each on 100,000 runs, the exact-id lookup as the baseline
measured in the same run, interleaved.

    python benchmarks/bench_run_prefix.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.errors import UnknownRunError
from desktop_app.store.runids import resolve_run_id
from desktop_app.store.sqlite.store import open_store
from tests.runs_corpus import make_runs_db, run_id_of


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        db = make_runs_db(Path(tmp) / "runs.db", n)
        store = open_store(db, create=False)
        target = run_id_of(n // 2)
        exact, prefix = [], []
        for _ in range(5):  # A B A B
            t = time.perf_counter()
            assert resolve_run_id(store, None, target).run_id == target
            exact.append(time.perf_counter() - t)
            t = time.perf_counter()
            try:  # a prefix scans every id of the scope, found or not (the corpus
                resolve_run_id(store, None, "deadbeef")  # ids are sequential)
            except UnknownRunError:
                prefix.append(time.perf_counter() - t)
        store.close()
    print(
        f"{n:,} runs: exact id {statistics.median(exact) * 1e3:.2f} ms, "
        f"prefix {statistics.median(prefix) * 1e3:.0f} ms (medians of 5)"
    )


if __name__ == "__main__":
    main()
