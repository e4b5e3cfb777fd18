"""Pages written to the WAL per durable step of the 10-step flow.

    python benchmarks/bench_wal.py [--runs 50] [--rounds 3] [--steps 10]

Every commit appends each page it changed to the ``-wal`` file as one frame
(a 24-byte header + one page). With ``PRAGMA wal_autocheckpoint=0`` nothing
resets the WAL, so its growth over a round, in frames, is the number of
pages the round wrote: ``frames = (wal bytes - 32) / (page_size + 24)``
(checked against the frame count ``PRAGMA wal_checkpoint(PASSIVE)`` reports).
Each round starts from an empty WAL (``wal_checkpoint(TRUNCATE)``) on a
database that already holds the previous rounds' runs (a warm-up round
first), and runs ``--runs`` runs of the linear flow one after another.

Reported per durable step (round frames / (runs x steps), run creation
included, as in ``bench_steps.py``), per commit, and the same for a raw
single-row ``INSERT`` commit as the floor; pages are 4096 bytes (SQLite's
default, checked). Target: <= 3 pages per step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, stat, table
from bench_steps import fresh_store, linear_flow

from desktop_app.flow import Engine
from desktop_app.store.connection import open_connection

WAL_HEADER = 32
FRAME_HEADER = 24


class WalMeter:
    """Counts the frames a connection's commits append to its WAL."""

    def __init__(self, conn, path: Path) -> None:
        self.conn, self.wal = conn, Path(f"{path}-wal")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        self.page_size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])

    def reset(self) -> None:
        busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
        assert busy == 0, "a reader kept the WAL from being reset"

    def frames(self) -> int:
        size = os.path.getsize(self.wal) if self.wal.exists() else 0
        by_size = max(0, size - WAL_HEADER) // (self.page_size + FRAME_HEADER)
        _, log, _ = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
        assert log == by_size, (log, by_size)
        return by_size


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=50, help="runs per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    args = p.parse_args()
    header(
        "WAL pages per durable step",
        steps=args.steps,
        runs_per_round=args.runs,
        rounds=args.rounds,
        synchronous=args.synchronous,
    )
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-wal-", dir=args.dir) as d:
        fd_path, raw_path = Path(d) / "flowdesk.db", Path(d) / "raw.db"
        store = fresh_store(fd_path, args.synchronous)
        flow = linear_flow(args.steps)
        engine = Engine(store, flows=[flow])
        fd = WalMeter(store.conn, fd_path)
        raw_conn = open_connection(raw_path, synchronous=args.synchronous)  # type: ignore[arg-type]
        raw_conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        raw = WalMeter(raw_conn, raw_path)
        commits = args.runs * (args.steps + 1)
        sizes: list[int] = []

        def flowdesk_round() -> float:
            fd.reset()
            for _ in range(args.runs):
                res = engine.run("bench", flow.state_type())
                assert res.status == "completed", res
            cp = store.conn.execute(
                "SELECT avg(length(state) + length(steps) + length(frontier) "
                "+ coalesce(length(meta), 0)) FROM checkpoints WHERE revision > 0"
            ).fetchall()[0][0]
            sizes.append(int(cp))
            return fd.frames() / (args.runs * args.steps)

        def raw_round() -> float:
            raw.reset()
            for i in range(commits):
                with raw_conn:
                    raw_conn.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
            return raw.frames() / commits

        res = interleave(
            {"flowdesk": flowdesk_round, "raw": raw_round}, args.rounds, progress=False
        )
        page_size = fd.page_size
        store.close()
        raw_conn.close()

    per_step = stat(res["flowdesk"])
    per_commit = stat([x * args.steps / (args.steps + 1) for x in res["flowdesk"]])
    rows = [
        Row("page size", f"{page_size} bytes", "4096", page_size == 4096),
        Row("flowdesk: WAL pages per durable step", per_step.fmt(), "<= 3", per_step.median <= 3),
        Row(
            "flowdesk: WAL bytes per durable step",
            f"{per_step.median * (page_size + FRAME_HEADER):,.0f} bytes",
        ),
        Row(f"flowdesk: WAL pages per commit ({args.steps + 1} commits a run)", per_commit.fmt()),
        Row("flowdesk: stored checkpoint row (delta revisions)", f"{sizes[-1]} bytes"),
        Row("raw single-row commit: WAL pages per commit", stat(res["raw"]).fmt()),
    ]
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
