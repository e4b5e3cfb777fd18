"""Pages written to the WAL per durable step of the 10-step flow.

    python benchmarks/bench_wal.py [--runs 50] [--rounds 3] [--steps 10]
                                   [--versus ../main] [--by-table]

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

``--versus PATH`` runs the same rounds, interleaved, with Flowdesk imported
from another checkout (e.g. main: its schema and store) and reports both.
``--by-table`` names the b-tree (table or index, from ``dbstat``) of every
page each round wrote, per step.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Worker, header, interleave, stat, table

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

    def by_table(self) -> Counter[str]:
        """Frames per b-tree (``dbstat`` names; page 1 is ``sqlite_schema``,
        pages no b-tree owns are pointer-map or free-list pages)."""
        data = self.wal.read_bytes()
        owner = {p: name for name, p in self.conn.execute("SELECT name, pageno FROM dbstat")}
        step = self.page_size + FRAME_HEADER
        pages = [
            struct.unpack(">I", data[off : off + 4])[0]
            for off in range(WAL_HEADER, len(data) - FRAME_HEADER, step)
        ]
        return Counter(owner.get(p, "pointer map / free list") for p in pages)


class FlowdeskWal:
    """Worker: rounds of ``runs`` runs of the linear flow on one file, with
    the ``desktop_app`` its process imports."""

    def __init__(self, synchronous: str, steps: int, runs: int, folder: str | None) -> None:
        from bench_steps import fresh_store, linear_flow

        from desktop_app.flow import Engine

        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-wal-", dir=folder)
        path = Path(self._dir.name) / "flowdesk.db"
        self.store = fresh_store(path, synchronous)
        self.flow = linear_flow(steps)
        self.engine = Engine(self.store, flows=[self.flow])
        self.meter = WalMeter(self.store.conn, path)
        self.steps, self.runs = steps, runs

    def round(self, by_table: bool = False) -> dict:
        import desktop_app

        self.meter.reset()
        for _ in range(self.runs):
            res = self.engine.run("bench", self.flow.state_type())
            assert res.status == "completed", res
        row = self.store.conn.execute(
            "SELECT avg(length(state) + length(steps) + length(frontier) "
            "+ coalesce(length(meta), 0)) FROM checkpoints WHERE revision > 0"
        ).fetchall()[0][0]
        tables = dict(self.meter.by_table()) if by_table else {}
        return {
            "pages": self.meter.frames() / (self.runs * self.steps),
            "row": int(row),
            "page_size": self.meter.page_size,
            "tables": tables,
            "imported": str(Path(desktop_app.__file__).parent.parent),
        }

    def close(self) -> None:
        self.store.close()
        self._dir.cleanup()


def main() -> int:
    from desktop_app.store.connection import open_connection

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=50, help="runs per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    p.add_argument("--versus", type=Path, help="another checkout, measured interleaved")
    p.add_argument("--by-table", action="store_true", help="pages per step by table or index")
    args = p.parse_args()
    header(
        "WAL pages per durable step",
        steps=args.steps,
        runs_per_round=args.runs,
        rounds=args.rounds,
        synchronous=args.synchronous,
        versus=args.versus,
    )
    here = str(Path(__file__).resolve().parent.parent)
    names = {"flowdesk": here}
    if args.versus is not None:
        names[f"flowdesk @{args.versus}"] = str(args.versus)
    commits = args.runs * (args.steps + 1)
    kwargs = dict(synchronous=args.synchronous, steps=args.steps, runs=args.runs, folder=args.dir)
    workers = {
        name: Worker("bench_wal.py:FlowdeskWal", pythonpath=root, **kwargs)
        for name, root in names.items()
    }
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    try:
        with tempfile.TemporaryDirectory(prefix="flowdesk-bench-wal-", dir=args.dir) as d:
            raw_path = Path(d) / "raw.db"
            raw_conn = open_connection(raw_path, synchronous=args.synchronous)  # type: ignore[arg-type]
            raw_conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
            raw = WalMeter(raw_conn, raw_path)

            def flowdesk_round(name: str):
                def go() -> float:
                    got = workers[name].round(by_table=args.by_table)
                    rounds[name].append(got)
                    return float(got["pages"])

                return go

            def raw_round() -> float:
                raw.reset()
                for i in range(commits):
                    with raw_conn:
                        raw_conn.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
                return raw.frames() / commits

            contenders = {name: flowdesk_round(name) for name in names}
            contenders["raw"] = raw_round
            res = interleave(contenders, args.rounds, progress=False)
            raw_conn.close()
    finally:
        for w in workers.values():
            w.close()

    rows = []
    for name in names:
        got = rounds[name][-args.rounds :]
        per_step = stat(res[name])
        per_commit = stat([x * args.steps / (args.steps + 1) for x in res[name]])
        page_size = got[-1]["page_size"]
        print(f"  {name}: desktop_app from {got[-1]['imported']}")
        rows += [
            Row(f"{name}: page size", f"{page_size} bytes", "4096", page_size == 4096),
            Row(
                f"{name}: WAL pages per durable step", per_step.fmt(), "<= 3", per_step.median <= 3
            ),
            Row(
                f"{name}: WAL bytes per durable step",
                f"{per_step.median * (page_size + FRAME_HEADER):,.0f} bytes",
            ),
            Row(f"{name}: WAL pages per commit ({args.steps + 1} commits a run)", per_commit.fmt()),
            Row(f"{name}: stored checkpoint row (delta revisions)", f"{got[-1]['row']} bytes"),
        ]
        if args.by_table:
            total: Counter[str] = Counter()
            for g in got:
                total.update(g["tables"])
            steps = len(got) * args.runs * args.steps
            for tname, n in total.most_common():
                rows.append(Row(f"{name}:   pages per step in {tname}", f"{n / steps:.2f}"))
    rows.append(Row("raw single-row commit: WAL pages per commit", stat(res["raw"]).fmt()))
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
