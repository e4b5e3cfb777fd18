"""Several processes on one SQLite file: durable steps per second with 1, 2,
4 and 8 processes, each running the 10-step flow one run after another.

    python benchmarks/bench_processes.py [--processes 1,2,4,8] [--seconds 3]
                                         [--rounds 5] [--synchronous FULL]
                                         [--versus ../main]

Each round gives every process count one turn (interleaved, the first count
rotating): a fresh database file, N worker processes that open it (their own
``Engine``, connection and group committer), released at one instant (all
are set up and imported first), each running runs until ``--seconds`` have
passed. Reported per process count: total steps per second (median, mean
and max over rounds) and its ratio to one process measured in the same round;
and where each process's wall time went: its CPU time, the time it slept in
the busy handler waiting for another process's write lock (and how many
times), its commits (one fsync each at ``FULL``), the CPU per step of all
processes together and how often a process paused waiting for another's turn
at the write gate (``WriteGate.polls``: a sleep and a wake-up each, whose CPU
is what several processes add per step).

``--versus PATH`` also runs every process count with the worker processes
importing Flowdesk from another checkout (e.g. main, to A/B a change),
interleaved with this checkout's rounds; each set's ratios are to its own
one-process figure of the same round.

Target (issue 31): 8 processes on one file >= 1x the steps/s of one.
The app, the CLI and ``flowdesk agent`` on one file at once is the normal
case. Exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, machine, stat, table


def child(db: str, seconds: float, synchronous: str, pragma: str | None) -> int:
    """One worker process: set up, say ready, wait for "go", run until the
    deadline, print one JSON line of figures."""
    from bench_steps import linear_flow

    from desktop_app.flow import Engine
    from desktop_app.store.sqlite import open_store

    store = open_store(Path(db), synchronous=synchronous)  # type: ignore[arg-type]
    if pragma:
        store.conn.execute(f"PRAGMA {pragma}").fetchall()
    flow = linear_flow(10)
    engine = Engine(store, flows=[flow])
    busy = {"calls": 0, "waits": 0, "slept": 0.0}
    inner = store.conn.busy_wait  # the busy handler open_connection set

    def counted(calls: int) -> bool:
        busy["calls"] += 1
        busy["waits"] += calls == 0
        t0 = time.perf_counter()
        try:
            return inner(calls)
        finally:
            busy["slept"] += time.perf_counter() - t0

    store.conn.set_busy_handler(counted)
    engine.run("bench", flow.state_type())  # warm: first compile, caches
    print("ready", flush=True)
    sys.stdin.readline()
    steps = runs = 0
    # SQLite resets a connection's page cache whenever another connection
    # committed since its last read (pager_reset): pages read again, counted
    # (a reset sets these counters' current value back to zero)
    store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS, True)
    store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_HIT, True)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    gate0 = getattr(store.conn, "gate", None)
    polls0 = gate0.polls if gate0 is not None else 0
    t0, c0 = time.perf_counter(), time.process_time()
    batches0 = engine.committer.batches if engine.committer is not None else 0
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        res = engine.run("bench", flow.state_type())
        assert res.status == "completed", res
        runs += 1
        steps += 10
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    misses = store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS)[0]
    hits = store.conn.status(apsw.SQLITE_DBSTATUS_CACHE_HIT)[0]
    batches = (engine.committer.batches if engine.committer is not None else 0) - batches0
    gate = getattr(store.conn, "gate", None)
    polls = (gate.polls if gate is not None else 0) - polls0
    print(
        json.dumps(
            {
                "steps": steps,
                "runs": runs,
                "wall": wall,
                "cpu": cpu,
                "commits": batches,
                "polls": polls,
                "misses": misses,
                "hits": hits,
                "vcs": ru.ru_nvcsw - ru0.ru_nvcsw,
                "ivcs": ru.ru_nivcsw - ru0.ru_nivcsw,
                "sys": ru.ru_stime - ru0.ru_stime,
                **busy,
            }
        ),
        flush=True,
    )
    store.close()
    return 0


def one_round(
    n: int, args: argparse.Namespace, pragma: str | None = None, root: Path | None = None
) -> dict:
    """N processes on a fresh file, released together; their summed figures."""
    from bench_steps import fresh_store

    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-procs-", dir=args.dir) as d:
        db = Path(d) / "flowdesk.db"
        fresh_store(db, args.synchronous).close()
        script = Path(__file__).resolve()
        if root is not None:  # that checkout's own worker (its _harness puts it first)
            script = root / "benchmarks" / script.name
        cmd = [sys.executable, str(script), "--child", str(db)]
        cmd += ["--seconds", str(args.seconds), "--synchronous", args.synchronous]
        if pragma:
            cmd += ["--pragma", pragma]
        procs = [
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        for p in procs:  # one write each: they start within microseconds
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        figs = []
        for p in procs:
            out, _ = p.communicate(timeout=args.seconds + 120)
            if p.returncode != 0:
                raise SystemExit(f"a worker process failed with code {p.returncode}")
            figs.append(json.loads(out.strip().splitlines()[-1]))
        span = time.perf_counter() - t0
    # "polls" and the rest after it: absent in older checkouts' workers
    kinds = ("steps", "wall", "cpu", "commits", "polls", "misses", "hits", "vcs", "ivcs", "sys")
    total = {k: sum(f.get(k, 0) for f in figs) for k in kinds}
    total.update({k: sum(f[k] for f in figs) for k in ("calls", "waits", "slept")})
    total["steps_per_s"] = total["steps"] / max(f["wall"] for f in figs)
    total["span"] = span
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--processes", default="1,2,4,8")
    p.add_argument("--seconds", type=float, default=3.0, help="each process runs this long")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument("--dir", default=None, help="folder for the temporary databases")
    p.add_argument(
        "--pragma",
        help="also run each process count with this PRAGMA set on every connection "
        "(e.g. mmap_size=268435456), interleaved with the plain rounds",
    )
    p.add_argument(
        "--versus",
        type=Path,
        help="another checkout (its benchmarks/bench_processes.py and its desktop_app): "
        "every process count runs with it too, interleaved",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.seconds, args.synchronous, args.pragma)
    counts = [int(x) for x in args.processes.split(",")]
    header(
        "processes on one SQLite file",
        processes=args.processes,
        seconds=args.seconds,
        rounds=args.rounds,
        synchronous=args.synchronous,
        pragma=args.pragma,
        versus=args.versus,
    )
    suffixes = [""]
    if args.pragma:
        suffixes.append(f" +{args.pragma}")
    if args.versus:
        suffixes.append(f" @{args.versus}")
    names = [f"{n}{suffix}" for suffix in suffixes for n in counts]
    figs: dict[str, list[dict]] = {name: [] for name in names}

    def contender(name: str):
        n, _, suffix = name.partition(" ")
        pragma = suffix[1:] if suffix.startswith("+") else None
        root = Path(suffix[1:]).resolve() if suffix.startswith("@") else None

        def go() -> float:
            fig = one_round(int(n), args, pragma, root)
            figs[name].append(fig)
            return fig["steps_per_s"]

        return go

    res = interleave({name: contender(name) for name in names}, args.rounds, progress=True)
    for name in names:  # the warm-up round's figures are not reported
        figs[name] = figs[name][-args.rounds :]
    rows = []
    for name in names:
        n_text, _, suffix = name.partition(" ")
        n = int(n_text)
        base = res[f"{counts[0]}{' ' + suffix if suffix else ''}"]
        sps = res[name]
        ratio = [a / b for a, b in zip(sps, base, strict=True)]
        f = figs[name]
        waits = [x["waits"] / max(x["commits"], 1) for x in f]
        slept = [x["slept"] / x["wall"] for x in f]
        cpu = [x["cpu"] / x["wall"] for x in f]
        per_commit = [x["steps"] / max(x["commits"], 1) for x in f]
        cpu_step = [x["cpu"] / max(x["steps"], 1) * 1e6 for x in f]
        polls = [x["polls"] / max(x["steps"], 1) for x in f]
        met = None if n != 8 or counts[0] != 1 or name != str(n) else stat(ratio).median >= 1.0
        rows.append(
            Row(
                f"{name} process{'es' if n > 1 else ''}: steps/s (mean, max) / vs {counts[0]}",
                f"{stat(sps).fmt(digits=0)} ({statistics.mean(sps):,.0f}, {max(sps):,.0f})"
                f" / {stat(ratio).fmt()}x"
                f" (mean {statistics.mean(ratio):.2f}, max {max(ratio):.2f})",
                ">= 1x" if met is not None else "",
                met,
            )
        )
        if suffix.startswith("@"):
            ours = [a / b for a, b in zip(res[n_text], sps, strict=True)]
            rows.append(
                Row(
                    f"    this checkout's {n} vs {suffix[1:]}'s {n}, same rounds",
                    f"{stat(ours).fmt()}x (mean {statistics.mean(ours):.2f}, max {max(ours):.2f})",
                )
            )
        rows.append(
            Row(
                "    CPU / wall; busy-handler sleep / wall; lock waits / commit; steps / commit",
                f"{stat(cpu).fmt()}; {stat(slept).fmt()}; {stat(waits).fmt()}; "
                f"{stat(per_commit).fmt()}",
            )
        )
        rows.append(
            Row(
                "    CPU per step (us, all processes); write-gate polls per step",
                f"{stat(cpu_step).fmt(digits=0)}; {stat(polls).fmt()}",
            )
        )
        counted = ("misses", "hits", "vcs", "ivcs", "sys")
        per_step = {k: [x.get(k, 0) / max(x["steps"], 1) for x in f] for k in counted}
        rows.append(
            Row(
                "    per step: pages read again (cache misses) / hits; context switches "
                "voluntary / involuntary; system CPU (us)",
                f"{stat(per_step['misses']).fmt()} / {stat(per_step['hits']).fmt()}; "
                f"{stat(per_step['vcs']).fmt()} / {stat(per_step['ivcs']).fmt()}; "
                f"{stat([v * 1e6 for v in per_step['sys']]).fmt(digits=0)}",
            )
        )
    table(rows)
    print(f"  at the end: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
