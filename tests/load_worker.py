"""One of three processes hammering one file (S44).

Usage: python tests/load_worker.py ROLE DB ACKFILE SECONDS
ROLE app/agent: run short flows back to back; append each completed run id
to ACKFILE only after ``run`` returned (acknowledged). ROLE cli: list runs and
read checkpoint histories in a loop. Any error is printed and exits 1.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite import open_store


class C(BaseModel):
    n: int = 0


def main() -> int:
    role, db, ackfile, seconds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
    store = open_store(db)
    end = time.monotonic() + seconds
    count = 0
    if role == "cli":
        while time.monotonic() < end:
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
    while time.monotonic() < end:
        res = engine.run("load", C())
        assert res.status == "completed", res
        os.write(fd, (res.run_id + "\n").encode())
        count += 1
    os.close(fd)
    print("runs", count)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
