"""Crash recovery: N runs killed with SIGKILL inside step 5, then a fresh
process recovers them all.

    python benchmarks/bench_recovery.py [--runs 1000] [--steps 10] [--kill-at 5]
                                        [--repeat 1] [--synchronous FULL]
                                        [--setup-synchronous OFF] [--wait-leases]
                                        [--fsync-log] [--profile] [--concurrency 64]

    python benchmarks/bench_recovery.py --runs 10000     # the 10k target (~1-3 min today)

1. The parent creates a temporary database (schema applied) and starts a
   child process (this script with ``--child run``) that starts ``--runs``
   runs of a 10-step linear flow concurrently, one thread per run, sharing
   one Engine and store. Every step appends ``"<run_id> s<i>"`` to a log
   file when it runs; step ``s5`` appends its line and then blocks forever.
   This child writes with ``--setup-synchronous`` (default ``OFF``, to keep
   the untimed set-up short: a SIGKILL loses nothing the OS has been handed,
   only a power loss would).
2. When the log shows every run at ``s5``, the parent SIGKILLs the child:
   each run is left ``running`` with ``s5`` in progress and a live lease
   naming the dead process.
3. The parent starts a fresh child (``--child recover``, ``--synchronous``,
   default ``FULL``) that opens the store, registers the same flow (whose
   ``s5`` does not block) and calls ``Engine.recover()``; the dead process's
   leases are taken over at once (its pid no longer exists on this host).
   ``--wait-leases`` instead waits, untimed, until they have expired.
   Reported: **time to all-complete**, from the moment the parent spawns the
   recovering process to ``recover()`` returning with every run completed
   (interpreter start-up and imports included), and its parts.
4. The parent reads the log: for every run ``s0..s4`` must appear exactly
   once (completed before the crash: a second execution is a *completed step
   that ran again*, counted; target 0), ``s5`` exactly twice (interrupted,
   then re-run) and ``s6..s9`` exactly once.

Targets: 1,000 runs <= 2 s and 10,000 runs <= 15 s to all-complete, no
completed step run again. The cycle runs ``--repeat`` times, each on a fresh
database (median and spread printed). ``--profile`` runs ``recover()`` under
cProfile (its worker threads included) and prints the top entries. Also
reported: ``recover()``'s CPU time and its commits (group-commit batches,
one fsync each), counts that move less with the machine's load than its
wall time. Exits 0 whether or not targets are met.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import inspect
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, mean_max, stat, table
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store


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


def linear_flow(
    steps: int,
    kill_at: int,
    log: Log,
    block: threading.Event | None,
    gate: threading.Semaphore | None = None,
):
    """``steps`` steps ``s0..``; each logs itself; ``s<kill_at>`` then
    releases ``gate`` (when given) and waits on ``block`` (when given), an
    event nobody sets."""

    def make(i: int):
        def step(state: Counter10, ctx) -> dict:
            log.write(f"{ctx.run_id} s{i}")
            if i == kill_at and block is not None:
                if gate is not None:
                    gate.release()
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
    """Start every run in its own thread; the threads block in s<kill_at> until
    SIGKILL. At most ``--setup-concurrency`` runs are between their start and
    s<kill_at> at once (the others wait, asleep, for their turn): 10,000 runs
    stepping at once on one GIL took more than 10 minutes to reach s5 on a
    2-core machine."""
    threading.stack_size(256 * 1024)  # thousands of blocked threads
    store = open_store(args.db, synchronous=args.setup_synchronous)
    log = Log(args.log, args.fsync_log)
    never = threading.Event()
    gate = threading.Semaphore(args.setup_concurrency)
    lease = {"lease_ttl_s": args.lease_ttl} if has_leases() else {}
    flow = linear_flow(args.steps, args.kill_at, log, never, gate)
    engine = Engine(store, flows=[flow], **lease)

    def start(rid: str) -> None:
        gate.acquire()
        engine.run("recovery", Counter10(), run_id=rid)

    threads = [threading.Thread(target=start, args=(rid,)) for rid in run_ids(args.runs)]
    for t in threads:
        t.daemon = True
        t.start()
    never.wait()  # the parent kills this process
    return 0


def raw_commit_s(path: Path, synchronous: str, commits: int = 200) -> float:
    """Seconds per single-row INSERT commit on a side file on the same disk: the
    reference a shared machine's fsync latency is read against (timed after
    recovery, so it does not delay it)."""
    conn = open_connection(path, synchronous=synchronous)  # type: ignore[arg-type]
    conn.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
    t0 = time.perf_counter()
    for i in range(commits):
        with conn:
            conn.execute("INSERT INTO t(v) VALUES (?)", (f"row {i}",))
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / commits


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
    thread_profiles: list[cProfile.Profile] = []

    def profile_thread(*_: object) -> None:
        """The first event of a new thread: profile it too (its own profiler)."""
        tp = cProfile.Profile()
        thread_profiles.append(tp)
        tp.enable()

    t0, cpu0 = time.perf_counter(), time.process_time()
    if prof is not None:
        threading.setprofile(profile_thread)
        prof.enable()
    report = engine.recover(concurrency=args.concurrency)
    if prof is not None:
        prof.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    t1, done_at, cpu1 = time.perf_counter(), time.time(), time.process_time()
    after = store.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    statuses = Counter(r.status for r in store.list_runs())
    outcomes = Counter(getattr(o, "status", type(o).__name__) for _, o in report)
    store.close()
    raw_s = raw_commit_s(Path(args.db).with_name("raw.db"), args.synchronous)
    if prof is not None:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        for tp in thread_profiles:  # the worker threads (they ended with recover())
            stats.add(tp)
        stats.sort_stats("tottime").print_stats(40)
        print(out.getvalue(), file=sys.stderr)
    print(
        json.dumps(
            {
                "recover_s": t1 - t0,
                "recover_cpu_s": cpu1 - cpu0,
                "batches": engine.committer.batches if engine.committer is not None else None,
                "ready_at": ready_at,
                "done_at": done_at,
                "open_s": t0 - t_open,
                "interrupted": interrupted,
                "recovered": len(report),
                "outcomes": dict(outcomes),
                "statuses": dict(statuses),
                "checkpoints_written": after - before,
                "raw_commit_s": raw_s,
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
        "--setup-synchronous",
        args.setup_synchronous,
        "--setup-concurrency",
        str(args.setup_concurrency),
        "--concurrency",
        str(args.concurrency),
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


class LogTail:
    """The run ids whose ``target`` step line has appeared, reading only new bytes."""

    def __init__(self, log: Path, target: str) -> None:
        self.log, self.target, self.offset, self.seen = log, target, 0, set[str]()

    def poll(self) -> set[str]:
        with contextlib.suppress(FileNotFoundError), self.log.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
            self.offset += end
            for line in data[:end].decode().splitlines():
                rid, _, step = line.partition(" ")
                if step == self.target:
                    self.seen.add(rid)
        return self.seen


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
        tail = LogTail(log, target)
        try:
            while len(tail.poll()) < args.runs:
                if child.poll() is not None:
                    print(err.read_text(), file=sys.stderr)
                    raise SystemExit(f"the run child exited early with code {child.returncode}")
                if time.perf_counter() - t0 > args.timeout:
                    raise SystemExit(f"only {len(tail.seen)}/{args.runs} runs reached {target}")
                time.sleep(0.1)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait()
        ready_s = time.perf_counter() - t0
        lease_wait_s = 0.0
        if args.wait_leases:  # the engine would take the dead pid's leases over at once
            expires = leases_expire_at(db)
            if expires is not None:
                lease_wait_s = max(0.0, expires - time.time() + 0.05)
                time.sleep(lease_wait_s)

        # 3. a fresh process recovers them all
        t0, started_at = time.perf_counter(), time.time()
        try:
            rec = subprocess.run(
                child_cmd(args, "recover", db, log),
                capture_output=True,
                text=True,
                check=False,
                timeout=args.timeout,
            )
        except subprocess.TimeoutExpired:
            raise SystemExit(f"recovery did not finish within {args.timeout:g} s") from None
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
        all_complete_s=fig["done_at"] - started_at,
        wrong=sorted(wrong.items()),
        # executions beyond the first of the steps completed before the kill (s0..s4)
        reran=sum(
            counts.get((rid, f"s{i}"), 0) - 1
            for rid in run_ids(args.runs)
            for i in range(args.kill_at)
            if counts.get((rid, f"s{i}"), 0) > 1
        ),
        all_completed=fig["statuses"] == {"completed": args.runs},
    )
    return fig


TARGETS_S = {1_000: 2.0, 10_000: 15.0}


def per_cp(fig: dict) -> float:
    """Seconds of recover() per checkpoint it committed."""
    return fig["recover_s"] / max(fig["checkpoints_written"], 1)


def parent(args: argparse.Namespace) -> int:
    target = f"s{args.kill_at}"
    header(
        "recovery of runs interrupted by SIGKILL",
        runs=args.runs,
        steps=args.steps,
        kill_at=target,
        synchronous=args.synchronous,
        setup_synchronous=args.setup_synchronous,
        cycles=args.repeat,
        leases="waited to expire" if args.wait_leases else "taken over from the dead pid",
    )
    figs = []
    for i in range(args.repeat):
        fig = cycle(args)
        figs.append(fig)
        per_cp_us = fig["recover_s"] / max(fig["checkpoints_written"], 1) * 1e6
        print(
            f"  cycle {i + 1}: all runs inside {target} after {fig['ready_s']:.1f} s, child "
            f"SIGKILLed (exit {fig['kill_exit']}); recover(): {fig['interrupted']} interrupted, "
            f"{fig['recovered']} resumed {fig['outcomes']}, {fig['checkpoints_written']} "
            f"checkpoints committed in {fig['recover_s']:.2f} s ({per_cp_us:.0f} us each); "
            f"all complete {fig['all_complete_s']:.2f} s after spawn (start-up + imports "
            f"{fig['import_s']:.2f} s, open {fig['open_s'] * 1000:.0f} ms); process wall "
            f"{fig['wall_s']:.2f} s; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    wrong = [w for f in figs for w in f["wrong"]]
    reran = sum(f["reran"] for f in figs)
    done = min(f["statuses"].get("completed", 0) for f in figs)
    goal = TARGETS_S.get(args.runs)
    complete = stat([f["all_complete_s"] for f in figs])
    rows = [
        Row(
            f"{args.runs:,} runs: spawn -> all complete",
            f"{complete.fmt(digits=2)} s ({mean_max([f['all_complete_s'] for f in figs])})"
            if done == args.runs
            else f"only {done} completed",
            f"<= {goal:g} s" if goal else "(targets at 1,000 and 10,000)",
            (complete.median <= goal and done == args.runs) if goal else None,
        ),
        Row(
            "  recover() alone",
            f"{stat([f['recover_s'] for f in figs]).fmt(digits=2)} s"
            f" ({mean_max([f['recover_s'] for f in figs])})",
        ),
        Row(
            "  commits (group-commit batches, one fsync each)",
            f"{stat([f.get('batches') or 0 for f in figs]).fmt(digits=0)}",
        ),
        Row(
            "  recover() CPU (all threads; load-independent-ish)",
            f"{stat([f['recover_cpu_s'] for f in figs]).fmt(digits=2)} s",
        ),
        Row("  interpreter start-up + imports", f"{stat([f['import_s'] for f in figs]).fmt()} s"),
        Row(
            "  per checkpoint committed",
            f"{stat([f['recover_s'] / max(f['checkpoints_written'], 1) for f in figs]).fmt(1e6, 0)}"
            " us",
        ),
        Row(
            "  per checkpoint / one raw commit (200, same disk, just after)",
            f"{stat([per_cp(f) / f['raw_commit_s'] for f in figs]).fmt()} x"
            f" (raw commit {stat([f['raw_commit_s'] for f in figs]).fmt(1e6, 0)} us)",
        ),
        Row("completed steps that ran again", f"{reran}", "0", reran == 0),
        Row(
            "every step ran as expected (s5 twice, others once)",
            "yes" if not wrong else f"no: {len(wrong)} wrong, e.g. {wrong[:3]}",
            "yes",
            not wrong,
        ),
        Row(
            "set-up (untimed): start runs until all inside s5",
            f"{stat([f['ready_s'] for f in figs]).fmt(digits=1)} s",
        ),
    ]
    table(rows)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=1000, help="interrupted runs (targets: 1000, 10000)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--kill-at", type=int, default=5, help="the step the runs are killed in")
    p.add_argument("--repeat", type=int, default=1, help="crash/recover cycles (median)")
    p.add_argument("--synchronous", default="FULL", choices=["OFF", "NORMAL", "FULL", "EXTRA"])
    p.add_argument(
        "--setup-synchronous",
        default="OFF",
        choices=["OFF", "NORMAL", "FULL", "EXTRA"],
        help="synchronous of the process that is killed (untimed set-up)",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=300.0,
        help="the killed process's run lease TTL (s); long, so its heartbeat stays quiet",
    )
    p.add_argument(
        "--wait-leases",
        action="store_true",
        help="wait (untimed) for the killed process's leases to expire before recovering",
    )
    p.add_argument(
        "--setup-concurrency",
        type=int,
        default=64,
        help="runs stepping towards the kill point at once in the set-up child",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=64,
        help="runs recover() drives at once (Engine.recover's concurrency)",
    )
    p.add_argument("--fsync-log", action="store_true", help="fsync the step log after each line")
    p.add_argument("--profile", action="store_true", help="cProfile recover() and print it")
    p.add_argument("--dir", default=None, help="folder for the temporary database")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds allowed for set-up and for recovery"
    )
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
