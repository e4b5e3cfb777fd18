"""Crash recovery: 200 runs killed with SIGKILL inside step 5, then a fresh
process recovers them all.

    python benchmarks/bench_recovery.py [--runs 200] [--steps 10] [--kill-at 5]
                                        [--repeat 3] [--synchronous FULL] [--fsync-log]
                                        [--profile]

1. The parent creates a temporary database (schema applied) and starts a
   child process (this script with ``--child run``) that starts ``--runs``
   runs of a 10-step linear flow concurrently, one thread per run, sharing
   one Engine and store. Every step appends ``"<run_id> s<i>"`` to a log
   file when it runs; step ``s5`` appends its line and then blocks forever.
2. When the log shows every run at ``s5``, the parent SIGKILLs the child:
   each run is left ``running`` with ``s5`` in progress.
3. The parent starts a fresh child (``--child recover``) that opens the
   store, registers the same flow (whose ``s5`` does not block) and calls
   ``Engine.recover()``. It reports the seconds ``recover()`` took
   (``time.perf_counter()`` just before the call to its return; target
   < 0.3 s) and the statuses of all runs; the parent also reports the
   recovering process's wall time including interpreter start-up and imports.
   With an engine that leases runs to the executing process, the run child
   uses a short lease (``--lease-ttl``) and the parent waits, untimed, until
   the dead process's leases have expired before starting the recovery.
4. The parent reads the log: for every run ``s0..s4`` must appear exactly
   once (completed before the crash, never run again), ``s5`` exactly twice
   (interrupted, then re-run) and ``s6..s9`` exactly once.

The cycle runs ``--repeat`` times, each on a fresh database; the recover()
time printed last is the median.

``--profile`` runs ``recover()`` under cProfile and prints the top entries.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite import open_store


class Counter10(BaseModel):
    n: int = 0


class Log:
    """Appends one line per ``write`` with a single O_APPEND write(2), so lines
    from concurrent threads never interleave; fsync when asked."""

    def __init__(self, path: str, fsync: bool) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.fsync = fsync

    def write(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())
        if self.fsync:
            os.fsync(self.fd)


def linear_flow(steps: int, kill_at: int, log: Log, block: threading.Event | None):
    """``steps`` steps ``s0..``; each logs itself; ``s<kill_at>`` then waits on
    ``block`` (when given), an event nobody sets."""

    def make(i: int):
        def step(state: Counter10, ctx) -> dict:
            log.write(f"{ctx.run_id} s{i}")
            if i == kill_at and block is not None:
                block.wait()
            return {"n": state.n + 1}

        return step

    b = FlowBuilder("recovery", Counter10)
    for i in range(steps):
        b.step(f"s{i}", make(i))
    return b.chain().compile()


def run_ids(runs: int) -> list[str]:
    return [f"r{i:04d}" for i in range(runs)]


def has_leases() -> bool:
    """Whether this version of the engine leases runs to the process executing them."""
    return "lease_ttl_s" in inspect.signature(Engine).parameters


def leases_expire_at(db: Path) -> float | None:
    """When the last run lease in ``db`` expires (UTC epoch s), or None (no leases)."""
    conn = open_connection(db, create=False)
    try:
        return conn.execute("SELECT max(lease_expires_at) FROM runs").fetchone()[0]
    except Exception:  # no lease column in this schema
        return None
    finally:
        conn.close()


# -- child processes -----------------------------------------------------------


def child_run(args: argparse.Namespace) -> int:
    """Start every run in its own thread; the threads block in s<kill_at> until SIGKILL."""
    store = open_store(args.db, synchronous=args.synchronous)
    log = Log(args.log, args.fsync_log)
    never = threading.Event()
    lease = {"lease_ttl_s": args.lease_ttl} if has_leases() else {}
    engine = Engine(store, flows=[linear_flow(args.steps, args.kill_at, log, never)], **lease)
    threads = [
        threading.Thread(target=engine.run, args=("recovery", Counter10()), kwargs={"run_id": rid})
        for rid in run_ids(args.runs)
    ]
    for t in threads:
        t.daemon = True
        t.start()
    never.wait()  # the parent kills this process
    return 0


def child_recover(args: argparse.Namespace) -> int:
    """Recover every interrupted run; print one JSON line with the figures."""
    ready_at = time.time()  # interpreter started, modules imported
    t_open = time.perf_counter()
    store = open_store(args.db, synchronous=args.synchronous)
    log = Log(args.log, args.fsync_log)
    engine = Engine(store, flows=[linear_flow(args.steps, args.kill_at, log, None)])
    before = store.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    interrupted = len(store.list_runs(statuses=("pending", "running")))
    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    report = engine.recover()
    if prof is not None:
        prof.disable()
    t1 = time.perf_counter()
    after = store.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    statuses = Counter(r.status for r in store.list_runs())
    outcomes = Counter(getattr(o, "status", type(o).__name__) for _, o in report)
    store.close()
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue(), file=sys.stderr)
    print(
        json.dumps(
            {
                "recover_s": t1 - t0,
                "ready_at": ready_at,
                "open_s": t0 - t_open,
                "interrupted": interrupted,
                "recovered": len(report),
                "outcomes": dict(outcomes),
                "statuses": dict(statuses),
                "checkpoints_written": after - before,
            }
        )
    )
    return 0


# -- parent --------------------------------------------------------------------


def child_cmd(args: argparse.Namespace, mode: str, db: Path, log: Path) -> list[str]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--db",
        str(db),
        "--log",
        str(log),
        "--runs",
        str(args.runs),
        "--steps",
        str(args.steps),
        "--kill-at",
        str(args.kill_at),
        "--synchronous",
        args.synchronous,
    ]
    cmd += ["--lease-ttl", str(args.lease_ttl)]
    if args.fsync_log:
        cmd.append("--fsync-log")
    if args.profile:
        cmd.append("--profile")
    return cmd


def read_log(log: Path) -> list[tuple[str, str]]:
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    # the last element is "" or a line still being written: skip it
    return [tuple(line.split(" ", 1)) for line in text.split("\n")[:-1] if " " in line]  # type: ignore[misc]


def cycle(args: argparse.Namespace) -> dict:
    """One crash-and-recover cycle in a fresh temporary database; returns its figures."""
    target = f"s{args.kill_at}"
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-", dir=args.dir) as d:
        db, log, err = Path(d) / "flowdesk.db", Path(d) / "steps.log", Path(d) / "child.err"
        conn = open_connection(db)
        migrations.apply(conn)
        conn.close()

        # 1-2. start every run in a child process, SIGKILL it when all are inside s5
        t0 = time.perf_counter()
        with err.open("wb") as errf:
            child = subprocess.Popen(
                child_cmd(args, "run", db, log), stdout=subprocess.DEVNULL, stderr=errf
            )
        at_target: set[str] = set()
        while len(at_target) < args.runs:
            if child.poll() is not None:
                print(err.read_text(), file=sys.stderr)
                raise SystemExit(f"the run child exited early with code {child.returncode}")
            if time.perf_counter() - t0 > args.timeout:
                child.kill()
                raise SystemExit(f"only {len(at_target)}/{args.runs} runs reached {target}")
            time.sleep(0.01)
            at_target = {rid for rid, step in read_log(log) if step == target}
        ready_s = time.perf_counter() - t0
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # A dead process's runs can be taken over once its leases expire (engines
        # with run leases); waiting for that is not part of the recovery time.
        expires = leases_expire_at(db)
        lease_wait_s = 0.0
        if expires is not None:
            lease_wait_s = max(0.0, expires - time.time() + 0.05)
            time.sleep(lease_wait_s)

        # 3. a fresh process recovers them all
        t0, started_at = time.perf_counter(), time.time()
        rec = subprocess.run(
            child_cmd(args, "recover", db, log), capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - t0
        if rec.returncode != 0:
            print(rec.stdout, rec.stderr, file=sys.stderr)
            raise SystemExit(f"the recover child failed with code {rec.returncode}")
        if args.profile:
            print(rec.stderr)
        fig = json.loads(rec.stdout.strip().splitlines()[-1])

        # 4. which steps ran how often, across both processes
        counts = Counter(read_log(log))
    expected = {
        (rid, f"s{i}"): (2 if i == args.kill_at else 1)
        for rid in run_ids(args.runs)
        for i in range(args.steps)
    }
    wrong = {k: counts.get(k, 0) for k in expected if counts.get(k, 0) != expected[k]}
    wrong.update({k: n for k, n in counts.items() if k not in expected})
    fig.update(
        ready_s=ready_s,
        lease_wait_s=lease_wait_s,
        kill_exit=child.returncode,
        wall_s=wall,
        import_s=fig["ready_at"] - started_at,
        wrong=sorted(wrong.items()),
        # a step recorded completed before the kill (s0..s4) that executed again
        reran=[
            k
            for k, n in wrong.items()
            if k in expected and n > expected[k] and int(k[1][1:]) < args.kill_at
        ],
        all_completed=fig["statuses"] == {"completed": args.runs},
    )
    return fig


def parent(args: argparse.Namespace) -> int:
    target = f"s{args.kill_at}"
    print(
        f"{args.runs} runs x {args.steps} steps, synchronous={args.synchronous}, "
        f"{args.repeat} crash/recover cycles"
    )
    figs = []
    for i in range(args.repeat):
        fig = cycle(args)
        figs.append(fig)
        per_cp_us = fig["recover_s"] / max(fig["checkpoints_written"], 1) * 1e6
        print(
            f"  cycle {i + 1}: all runs inside {target} after {fig['ready_s']:.2f} s, child "
            f"SIGKILLed (exit {fig['kill_exit']}), waited {fig['lease_wait_s']:.2f} s for its "
            f"leases to expire; recover(): {fig['interrupted']} interrupted, "
            f"{fig['recovered']} resumed {fig['outcomes']}, {fig['checkpoints_written']} "
            f"checkpoints committed in {fig['recover_s']:.3f} s ({per_cp_us:.0f} us each); "
            f"process wall {fig['wall_s']:.2f} s (start-up + imports {fig['import_s']:.2f} s, open "
            f"{fig['open_s'] * 1000:.1f} ms)"
        )
    recover_s = statistics.median(f["recover_s"] for f in figs)
    wall_s = statistics.median(f["wall_s"] for f in figs)
    wrong = [w for f in figs for w in f["wrong"]]
    reran = [r for f in figs for r in f["reran"]]
    completed = all(f["all_completed"] for f in figs)
    print(f"run statuses after recovery: {[f['statuses'] for f in figs]}")
    print(
        f"step executions per run: s0..s{args.kill_at - 1} once, {target} twice, "
        f"s{args.kill_at + 1}..s{args.steps - 1} once: "
        f"{'all as expected' if not wrong else f'{len(wrong)} wrong, e.g. {wrong[:5]}'}"
    )
    print(
        f"median recovering-process wall time {wall_s:.2f} s (start-up, imports, open, "
        f"recover(), exit)"
    )
    done = min(f["statuses"].get("completed", 0) for f in figs)
    if done < args.runs:
        verdict = f"not measured: only {done} of {args.runs} runs completed"
    else:
        verdict = "ok" if recover_s < 0.3 else "MISSED"
    print()
    print(
        f"recovered {done}/{args.runs} runs in {recover_s:.3f} s (median of {args.repeat}; "
        f"target < 0.3 s, {verdict}); no completed step ran again: "
        f"{'yes' if not reran else 'no'}; all completed with every step count as expected: "
        f"{'yes' if completed and not wrong else 'no'}"
    )
    return 0 if completed and not wrong else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--kill-at", type=int, default=5, help="the step the runs are killed in")
    p.add_argument("--repeat", type=int, default=3, help="crash/recover cycles (median)")
    p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=2.0,
        help="engines with run leases: the killed process's lease TTL; the parent\n"
        "waits for its leases to expire before recovering (not timed)",
    )
    p.add_argument("--fsync-log", action="store_true", help="fsync the step log after each line")
    p.add_argument("--profile", action="store_true", help="cProfile recover() and print it")
    p.add_argument("--dir", default=None, help="folder for the temporary database")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the runs")
    p.add_argument("--child", choices=["run", "recover"], help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not 0 < args.kill_at < args.steps:
        p.error("--kill-at must be a step after s0 and before the last")
    if args.child == "run":
        return child_run(args)
    if args.child == "recover":
        return child_recover(args)
    return parent(args)


if __name__ == "__main__":
    raise SystemExit(main())
