"""Throughput of one file shared by three processes (the S44 load), against a
baseline measured in the same run: the same writer alone on a file.

    python benchmarks/bench_contention.py [--seconds 5] [--repeat 3]

Rounds alternate A B A B ...: A is one ``app`` writer alone, B is the three
roles of ``tests/load_worker.py`` (``app`` and ``agent`` writers, a ``cli``
reader) on one file. Each round uses a fresh file. Prints, per round kind,
the median over ``--repeat`` rounds of runs completed per second (3-step
flows, each step a durable checkpoint) and reads per second, and the ratio
shared / alone for the ``app`` writer. The correctness half of S44 (no
"database is locked", every acknowledged run stored) is
``tests/test_faults.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "load_worker.py"
sys.path.insert(0, str(ROOT))


def fresh_db(folder: Path) -> Path:
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection

    path = folder / "bench.db"
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return path


def round_(roles: list[str], seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = fresh_db(folder)
        procs = {
            role: subprocess.Popen(
                [sys.executable, str(WORKER), role, str(db), str(folder / role), str(seconds)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for role in roles
        }
        rates = {}
        for role, proc in procs.items():
            out, err = proc.communicate(timeout=seconds + 120)
            if proc.returncode != 0:
                raise SystemExit(f"{role} failed: {err}")
            rates[role] = int(out.split()[-1]) / seconds
        return rates


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    alone: list[float] = []
    shared: dict[str, list[float]] = {"app": [], "agent": [], "cli": []}
    for _ in range(args.repeat):
        alone.append(round_(["app"], args.seconds)["app"])
        for role, rate in round_(["app", "agent", "cli"], args.seconds).items():
            shared[role].append(rate)
    a = statistics.median(alone)
    print(f"app alone:          {a:8.1f} runs/s (median of {args.repeat})")
    for role, rates in shared.items():
        unit = "reads/s" if role == "cli" else "runs/s"
        print(f"{role:5} with 3 roles: {statistics.median(rates):8.1f} {unit}")
    print(f"app shared / alone: {statistics.median(shared['app']) / a:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
