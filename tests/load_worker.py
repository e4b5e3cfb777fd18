"""One of three processes hammering one file (S44).

Usage: python tests/load_worker.py ROLE DB ACKFILE SECONDS [MIN_COUNT]
ROLE app/agent: run short flows back to back; append each completed run id
to ACKFILE only after ``run`` returned (acknowledged). ROLE cli: list runs and
read checkpoint histories in a loop. Each role goes on for SECONDS and until
it did MIN_COUNT runs (or reads), so a slow machine does the same work, only
later. Prints its count; any error is printed and exits 1. Rates are
measured by benchmarks/bench_contention.py, not here.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store


class C(BaseModel):
    n: int = 0


def main() -> int:
    role, db, ackfile, seconds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
    min_count = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    store = open_store(db)
    end = time.monotonic() + seconds
    count = 0

    def more() -> bool:
        return count < min_count or time.monotonic() < end

    if role == "cli":
        while more():
            runs = store.list_runs(newest_first=True, limit=20)
            for r in runs[:3]:
                store.history(r.run_id)
                store.latest(r.run_id)
            count += 1
        print("reads", count)
        return 0
    flow = FlowBuilder("load", C)
    for i in range(3):
        flow.step(f"s{i}", lambda s: {"n": s.n + 1})
    engine = Engine(store, flows=[flow.chain().compile()])
    fd = os.open(ackfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    while more():
        res = engine.run("load", C())
        assert res.status == "completed", res
        os.write(fd, (res.run_id + "\n").encode())
        count += 1
    os.close(fd)
    print("runs", count)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
