"""The built-in ``digest`` flow over a large folder: files per second, and
whether a file costs the same at the end as at the start.

    python benchmarks/bench_digest.py [--folder DIR] [--limit N] [--rounds 1]
                                      [--synchronous FULL] [--dir DIR]

Default folder: the running Python's standard library (about 34,000 files on
CPython 3.11, ``.pyc`` files and ``__pycache__`` included: they are listed and
skipped as binary, as a user's digest of that folder would).

Contenders, interleaved round by round in this process (``_harness.interleave``):

* ``plain loop``: the floor. For each file, the same read and extraction the
  flow does (:func:`desktop_app.flows.digest.read_file`), then the file's row
  written in its own ``BEGIN IMMEDIATE ... COMMIT`` on an apsw connection
  opened with Flowdesk's pragmas (``open_connection``, the same
  ``synchronous``): a per-file commit loop with no engine, no checkpoint.
* ``flowdesk``: ``Engine.run("digest", ...)`` of the built-in flow on a fresh
  database: ``scan``, one checkpointed loop iteration per file (the file's row
  and the checkpoint in one transaction), ``report``.

Per-file cost is the time between consecutive files (for the flow: its
``on_file`` hook, called just before each file's row commits). Reported:
files/s of each (whole run, scan and report included), the ratio, and the
median, mean and max per file over files 10..1,010 and over the last 1,000
with the last / first ratios (target: >= 700 files/s uninterrupted, and last /
first <= 1.3 by medians and by means: a cost per file that grows with the run
shows in the mean and max first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import tempfile
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, ratios, stat, table
from bench_steps import fresh_store

from desktop_app.flow import Engine
from desktop_app.flows.digest import build_digest_flow, read_file, scan_folder
from desktop_app.store.connection import open_connection

WINDOW = 1_000


def plain_loop(folder: Path, synchronous: str, tmp: str | None) -> list[float]:
    """Marks (perf_counter) after each file's commit; the first is the start."""
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-digest-", dir=tmp) as d:
        conn = open_connection(Path(d) / "plain.db", synchronous=synchronous)  # type: ignore[arg-type]
        conn.execute(
            "CREATE TABLE files(path TEXT PRIMARY KEY, kind TEXT, title TEXT, summary TEXT, "
            "size_bytes INTEGER, skip_reason TEXT)"
        )
        marks = [time.perf_counter()]
        for rel in scan_folder(folder):
            row, _ = read_file(folder, rel)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO files VALUES (?,?,?,?,?,?)",
                (row.path, row.kind, row.title, row.summary, row.size_bytes, row.skip_reason),
            )
            conn.execute("COMMIT")
            marks.append(time.perf_counter())
        conn.close()
    return marks


def flowdesk_digest(folder: Path, synchronous: str, tmp: str | None) -> list[float]:
    """Marks: the run's start, each file's ``on_file``, the run's end."""
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-digest-", dir=tmp) as d:
        store = fresh_store(Path(d) / "flowdesk.db", synchronous)
        marks: list[float] = []
        flow = build_digest_flow(on_file=lambda _run, _row: marks.append(time.perf_counter()))
        engine = Engine(store, flows=[flow])
        t0 = time.perf_counter()
        res = engine.run("digest", {"folder": str(folder), "out": str(Path(d) / "out")})
        t1 = time.perf_counter()
        store.close()
        assert res.status == "completed", res
    return [t0, *marks, t1]


def window_rows(name: str, costs: list[float]) -> list[Row]:
    early, late = costs[9 : 9 + WINDOW], costs[-WINDOW:]
    rows = [
        Row(
            f"{name}: per file, {label}",
            f"{stat(w).fmt(1e6, 0)} us (mean {statistics.fmean(w) * 1e6:,.0f}, "
            f"max {max(w) * 1e6:,.0f})",
        )
        for label, w in (("files 10-1,010", early), (f"last {WINDOW:,}", late))
    ]
    for what, f in (("medians", statistics.median), ("means", statistics.fmean)):
        r = f(late) / f(early)
        rows.append(Row(f"{name}: last / first ({what})", f"{r:.2f} x", "<= 1.3x", r <= 1.3))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--folder", default=sysconfig.get_paths()["stdlib"])
    p.add_argument("--limit", type=int, default=0, help="only the first N files (0: all)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    args = p.parse_args()
    folder = Path(args.folder).resolve()
    copy = tempfile.TemporaryDirectory(prefix="flowdesk-bench-digest-src-", dir=args.dir)
    if args.limit:  # both contenders read a folder of the first N files
        src = Path(copy.name)
        for rel in scan_folder(folder)[: args.limit]:
            if (folder / rel).is_file() and not (folder / rel).is_symlink():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_bytes((folder / rel).read_bytes())
        folder = src
    files = scan_folder(folder)
    if len(files) < 3 * WINDOW:
        p.error(f"the folder has {len(files)} files; at least {3 * WINDOW} are needed")
    for rel in files:  # warm the page cache: the first contender must not pay the disk
        read_file(folder, rel)
    header(
        "digest over a large folder",
        folder=folder,
        files=len(files),
        rounds=args.rounds,
        synchronous=args.synchronous,
    )
    marks: dict[str, list[list[float]]] = {"plain loop": [], "flowdesk": []}

    def run(name: str):
        def go() -> float:
            if name == "plain loop":
                m = plain_loop(folder, args.synchronous, args.dir)
            else:
                m = flowdesk_digest(folder, args.synchronous, args.dir)
            marks[name].append(m)
            wall = m[-1] - m[0]
            print(f"  {name}: {len(files):,} files in {wall:.1f} s", flush=True)
            return len(files) / wall

        return go

    rates = interleave({name: run(name) for name in marks}, args.rounds, warmup=0)
    rows = [
        Row(f"{name}: files/s (whole run)", f"{stat(rates[name]).fmt(1, 0)} /s") for name in marks
    ]
    fd_rate = statistics.median(rates["flowdesk"])
    rows.append(Row("flowdesk: files/s", f"{fd_rate:,.0f} /s", ">= 700/s", fd_rate >= 700))
    rows.append(
        Row(
            "flowdesk / plain loop (files/s, per round)",
            f"{stat(ratios(rates['flowdesk'], rates['plain loop'])).fmt(1, 2)} x",
        )
    )
    for name in marks:
        inner = marks[name][-1][1:-1] if name == "flowdesk" else marks[name][-1]
        rows += window_rows(name, [b - a for a, b in pairwise(inner)])
    table(rows)
    copy.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
