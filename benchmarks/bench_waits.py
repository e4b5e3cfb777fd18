"""Scale of waiting: 10,000 runs waiting on deadlines and signals, served by one process.

    python benchmarks/bench_waits.py [--runs 10000] [--signals 1000] [--flows 60]
                                     [--spread-s 60] [--first-deadline-s auto]
                                     [--poll-s 0.2] [--signal-delay-s 0]
                                     [--synchronous FULL] [--profile]

Target: waiting runs are rows, not tasks held in memory. With 10,000 runs
waiting on deadlines spread over the next minutes plus signals, the engine
process keeps resident memory under 150 MiB, fires each deadline within one
second of its stored time, and delivers 1,000 signals sent from a second
process in under 5 seconds.

1. The parent creates a temporary database (schema applied) and starts the
   ENGINE child (this script with ``--role engine``). It opens the store and
   starts, with ``Engine.run`` (each returns ``waiting``):

   * ``--signals`` runs of flow ``signal``: ``wait_signal("w", "sig",
     key=state.key, into="got")`` then a trivial step; keys ``k0``, ``k1``, ...
   * ``--runs - --signals`` runs over ``--flows`` flows ``deadline-<i>``:
     ``sleep("t", D_i)`` then a trivial step, round-robin. A timer's duration
     is fixed per flow, so the flows differ only in ``D_i = first + i *
     spread / flows``. ``first`` (``--first-deadline-s``, default ``auto``)
     must exceed the time it takes to create the runs, or deadlines would fall
     due before the engine serves; ``auto`` extrapolates it from the signal
     runs, which are created first. Deadlines are stored relative to each
     run's creation, so they fall over ``[first, first + creation + spread]``.

   Then it prints ``ready`` (every run is a row, waiting), records its RSS and
   runs ``Engine.serve(stop, poll_s=--poll-s)`` in the main thread, sampling
   RSS after every pass (``on_tick``), until every run finished or a time
   limit passed.
2. On ``ready`` (after ``--signal-delay-s``) the parent starts the SIGNALS
   child (``--role signals``): it opens the same file with its own Engine, no
   flows registered, and sends the signals ``Engine.signal("sig", "k<i>", i)``
   as fast as it can. ``signal`` stores the signal (its own commit) and then
   tries to wake the waiting run in the sending process, which fails at once
   with ``UnknownFlowError`` (no flow registered there; ``signal`` suppresses
   it), so the engine child delivers every signal through ``serve``'s polling.
3. When the engine child has exited, the parent reads the figures from the
   database (a read-only use of an apsw connection, ``open_connection``):

   * deadline lateness: per timer run, the time the engine checkpointed the
     timer as done (the ``created_at`` of the checkpoint that resolved the
     wait) minus the wait's stored ``deadline_at`` (from the checkpoint in
     which the run began waiting);
   * signal delivery: the first signal's ``sent_at`` to the moment the last
     signal run completed (its ``updated_at``), and per signal
     ``consumed_at - sent_at``.

All times compared across processes are wall-clock (``time.time()``, the
engine's ``SystemClock``). ``--profile`` runs the engine child's ``serve``
under cProfile and prints the top entries.
"""

from __future__ import annotations

import argparse
import cProfile
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, machine, pct, table
from pydantic import BaseModel

from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.events import Event, RunFinished
from desktop_app.store import codec, migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store

MiB = 1024 * 1024


class SigState(BaseModel):
    key: str = ""
    got: int | None = None


class TimerState(BaseModel):
    n: int = 0


def noop(state: BaseModel) -> None:  # the trivial step after each wait
    return None


def signal_flow() -> CompiledFlow[SigState]:
    return (
        FlowBuilder("signal", SigState)
        .wait_signal("w", "sig", key=lambda s: s.key, into="got")
        .step("done", noop)
        .chain()
        .compile()
    )


def deadline_flows(flows: int, first_s: float, spread_s: float) -> list[CompiledFlow[TimerState]]:
    return [
        FlowBuilder(f"deadline-{i}", TimerState)
        .sleep("t", first_s + i * spread_s / flows)
        .step("done", noop)
        .chain()
        .compile()
        for i in range(flows)
    ]


def proc_status(field: str) -> int:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def emit(tag: str, payload: dict[str, Any]) -> None:
    print(f"{tag} {json.dumps(payload)}", flush=True)


# -- child processes -----------------------------------------------------------


def role_engine(args: argparse.Namespace) -> int:
    rss_start = proc_status("VmRSS")
    parent_pid = os.getppid()  # exit early when the parent dies (no orphan engine)
    store = open_store(args.db, synchronous=args.synchronous)
    engine = Engine(store)
    n_deadline = args.runs - args.signals

    # 1. signal runs first: their creation rate sizes the first deadline
    sig = signal_flow()
    t0 = time.perf_counter()
    signal_runs = set()
    for i in range(args.signals):
        res = engine.run(sig, SigState(key=f"k{i}"))
        if res.status != "waiting":
            raise SystemExit(f"signal run {i} is {res.status}, not waiting: {res.error}")
        signal_runs.add(res.run_id)
    sig_create_s = time.perf_counter() - t0
    per_run_s = sig_create_s / max(args.signals, 1)
    if args.first_deadline_s == "auto":
        first_s = n_deadline * per_run_s * 1.5 + 5.0
    else:
        first_s = float(args.first_deadline_s)

    # 2. timer runs, round-robin over the deadline flows
    flows = deadline_flows(args.flows, first_s, args.spread_s)
    t1 = time.perf_counter()
    for j in range(n_deadline):
        if j % 500 == 0 and os.getppid() != parent_pid:
            return 1
        res = engine.run(flows[j % len(flows)], TimerState())
        if res.status != "waiting":
            raise SystemExit(f"timer run {j} is {res.status}, not waiting: {res.error}")
    create_s = time.perf_counter() - t0
    timer_create_s = time.perf_counter() - t1

    now = time.time()
    waiting = store.query(
        lambda c: c.execute("SELECT count(*) FROM runs WHERE status='waiting'").fetchone()[0]
    )
    waits_rows = store.query(lambda c: c.execute("SELECT count(*) FROM waits").fetchone()[0])
    nxt = store.next_deadline()
    last = store.query(lambda c: c.execute("SELECT max(deadline_at) FROM waits").fetchone()[0])
    rss_created = proc_status("VmRSS")

    # 3. serve until every run finished (or the time limit)
    stop = threading.Event()
    total = args.runs
    finished: Counter[str] = Counter()
    done_at: dict[str, float] = {}
    lock = threading.Lock()

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunFinished) and ev.status != "waiting":
            with lock:
                finished[ev.status] += 1
                if ev.run_id in signal_runs:
                    done_at["last_signal_run"] = time.time()
                if sum(finished.values()) >= total:
                    stop.set()

    engine.events.subscribe(on_event)
    rss_max = [rss_created]
    ticks: list[tuple[float, int]] = []  # (seconds, runs woken) per tick
    orig_tick = engine.tick

    def timed_tick() -> int:  # instance attribute: serve() calls self.tick()
        s = time.perf_counter()
        n = orig_tick()
        ticks.append((time.perf_counter() - s, n))
        return n

    engine.tick = timed_tick  # type: ignore[method-assign]

    def on_tick() -> None:
        rss_max[0] = max(rss_max[0], proc_status("VmRSS"))
        if os.getppid() != parent_pid:
            stop.set()

    limit_s = (last - now if last is not None else 0.0) + args.grace_s
    timer = threading.Timer(max(limit_s, 1.0), stop.set)
    timer.daemon = True

    emit(
        "ready",
        {
            "create_s": create_s,
            "sig_create_s": sig_create_s,
            "timer_create_s": timer_create_s,
            "first_deadline_s": first_s,
            "waiting": waiting,
            "waits_rows": waits_rows,
            "next_deadline_in_s": None if nxt is None else nxt - now,
            "last_deadline_in_s": None if last is None else last - now,
            "rss_start": rss_start,
            "rss_created": rss_created,
        },
    )
    timer.start()
    prof = cProfile.Profile() if args.profile else None
    t_serve = time.perf_counter()
    if prof is not None:
        prof.enable()
    engine.serve(stop, poll_s=args.poll_s, on_tick=on_tick)
    if prof is not None:
        prof.disable()
    serve_s = time.perf_counter() - t_serve
    timer.cancel()
    rss_end = proc_status("VmRSS")
    store.close()
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
        print(out.getvalue(), file=sys.stderr, flush=True)
    tick_s = [t for t, _ in ticks]
    emit(
        "done",
        {
            "serve_s": serve_s,
            "finished": dict(finished),
            "timed_out_serve": not sum(finished.values()) >= total,
            "rss_max_serve": rss_max[0],
            "rss_end": rss_end,
            "rss_hwm": proc_status("VmHWM"),
            "ticks": len(ticks),
            "ticks_busy": sum(1 for _, n in ticks if n),
            "tick_max_s": max(tick_s, default=0.0),
            "tick_max_woken": max((n for _, n in ticks), default=0),
            "tick_idle_median_s": statistics.median([t for t, n in ticks if not n] or [0.0]),
            "tick_total_s": sum(tick_s),
            "last_signal_run_done": done_at.get("last_signal_run"),
        },
    )
    return 0


def role_signals(args: argparse.Namespace) -> int:
    store = open_store(args.db, synchronous=args.synchronous)
    engine = Engine(store)  # no flows: it cannot execute any run, only store signals
    assert not engine.flows
    t_first = time.time()
    p0 = time.perf_counter()
    for i in range(args.signals):
        engine.signal("sig", f"k{i}", i)
    send_s = time.perf_counter() - p0
    t_last = time.time()
    assert not engine.active, "the sending process executed a run"
    store.close()
    emit("sent", {"first": t_first, "last": t_last, "send_s": send_s})
    return 0


# -- parent --------------------------------------------------------------------


def child_cmd(args: argparse.Namespace, role: str, db: Path) -> list[str]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        role,
        "--db",
        str(db),
        "--runs",
        str(args.runs),
        "--signals",
        str(args.signals),
        "--flows",
        str(args.flows),
        "--spread-s",
        str(args.spread_s),
        "--first-deadline-s",
        str(args.first_deadline_s),
        "--poll-s",
        str(args.poll_s),
        "--grace-s",
        str(args.grace_s),
        "--synchronous",
        args.synchronous,
    ]
    if args.profile:
        cmd.append("--profile")
    return cmd


def read_tagged(
    proc: subprocess.Popen[str], tag: str, deadline: float, err: Path
) -> dict[str, Any]:
    """Read ``proc``'s stdout until a line ``<tag> {json}``; fail on exit or timeout."""
    assert proc.stdout is not None
    result: dict[str, Any] = {}

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(tag + " "):
                result.update(json.loads(line[len(tag) + 1 :]))
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if not result:
        print(err.read_text(errors="replace")[-4000:], file=sys.stderr)
        state = "exited" if proc.poll() is not None else "timed out"
        raise SystemExit(f"child {state} before printing {tag!r} (exit code {proc.poll()})")
    return result


def analyse(db: Path) -> dict[str, Any]:
    """Lateness and delivery figures from the database the children wrote."""
    # a plain apsw connection (no schema verification: reading only, and the run is over)
    conn = open_connection(db, create=False)
    try:

        def q(sql: str, *params: Any) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        statuses: Counter[str] = Counter()
        for flow, status, n in q(
            "SELECT CASE WHEN flow_name LIKE 'deadline-%' THEN 'deadline' ELSE flow_name END, "
            "status, count(*) FROM runs GROUP BY 1, 2"
        ):
            statuses[f"{flow}:{status}"] += n
        # stored deadline: the waits of the checkpoint in which the timer began waiting
        deadline: dict[str, float] = {}
        for run_id, waits in q(
            "SELECT c.run_id, c.waits FROM checkpoints c JOIN runs r ON r.run_id=c.run_id "
            "WHERE r.flow_name LIKE 'deadline-%' AND c.status='waiting' AND c.step_id='t' "
            "AND c.waits IS NOT NULL"
        ):
            for w in codec.loads(waits):
                if w["step_id"] == "t" and w["deadline_at"] is not None:
                    deadline.setdefault(run_id, float(w["deadline_at"]))
        # fired: the checkpoint that recorded the timer done (first non-waiting 't' after it)
        fired: dict[str, float] = {}
        for run_id, created_at in q(
            "SELECT c.run_id, min(c.created_at) FROM checkpoints c JOIN runs r "
            "ON r.run_id=c.run_id WHERE r.flow_name LIKE 'deadline-%' AND c.step_id='t' "
            "AND c.status!='waiting' AND c.revision>0 GROUP BY c.run_id"
        ):
            fired[run_id] = float(created_at)
        lateness = [fired[r] - deadline[r] for r in fired if r in deadline]
        (first_sent, last_sent, delivered, last_consumed) = q(
            "SELECT min(sent_at), max(sent_at), count(consumed_by), max(consumed_at) FROM signals"
        )[0]
        per_signal = [
            a - b
            for a, b in q("SELECT consumed_at, sent_at FROM signals WHERE consumed_at IS NOT NULL")
        ]
        last_sig_done, sig_completed = q(
            "SELECT max(updated_at), count(*) FROM runs WHERE flow_name='signal' "
            "AND status='completed'"
        )[0]
    finally:
        conn.close()
    return {
        "statuses": dict(sorted(statuses.items())),
        "deadlines_stored": len(deadline),
        "fired": len(lateness),
        "late_max": max(lateness, default=float("nan")),
        "late_min": min(lateness, default=float("nan")),
        "late_p50": pct(lateness, 0.50),
        "late_p99": pct(lateness, 0.99),
        "late_over_1s": sum(1 for x in lateness if x > 1.0),
        "first_sent": first_sent,
        "last_sent": last_sent,
        "delivered": delivered,
        "last_consumed": last_consumed,
        "sig_completed": sig_completed,
        "last_sig_done": last_sig_done,
        "sig_p50": pct(per_signal, 0.50),
        "sig_p99": pct(per_signal, 0.99),
        "sig_max": max(per_signal, default=float("nan")),
    }


def stop_child(proc: subprocess.Popen[str] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def parent(args: argparse.Namespace) -> int:
    n_deadline = args.runs - args.signals
    print(
        f"{args.runs} runs: {n_deadline} timers over {args.flows} flows (spread "
        f"{args.spread_s:g} s) + {args.signals} signal waits; poll_s={args.poll_s}, "
        f"synchronous={args.synchronous}\n  {machine()}",
        flush=True,
    )
    # SIGTERM ends the parent through its finally clause, which kills the children
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    engine_proc = signals_proc = None
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-", dir=args.dir) as d:
        db = Path(d) / "flowdesk.db"
        eng_err, sig_err = Path(d) / "engine.err", Path(d) / "signals.err"
        conn = open_connection(db)
        migrations.apply(conn)
        conn.close()
        try:
            with eng_err.open("wb") as errf:
                engine_proc = subprocess.Popen(
                    child_cmd(args, "engine", db), stdout=subprocess.PIPE, stderr=errf, text=True
                )
            ready = read_tagged(
                engine_proc, "ready", time.monotonic() + args.create_timeout, eng_err
            )
            print(
                f"created {ready['waiting']} waiting runs ({ready['waits_rows']} waits rows) in "
                f"{ready['create_s']:.1f} s ({ready['create_s'] / args.runs * 1e3:.2f} ms per "
                f"run: signal runs {ready['sig_create_s']:.1f} s, timer runs "
                f"{ready['timer_create_s']:.1f} s); first timer D = "
                f"{ready['first_deadline_s']:.1f} s; deadlines fall due from +"
                f"{ready['next_deadline_in_s']:.1f} s to +{ready['last_deadline_in_s']:.1f} s",
                flush=True,
            )
            if ready["next_deadline_in_s"] is not None and ready["next_deadline_in_s"] < 0:
                print(
                    "  warning: a deadline passed before serve() started; raise --first-deadline-s",
                    flush=True,
                )
            if args.signal_delay_s > 0:
                time.sleep(args.signal_delay_s)
            with sig_err.open("wb") as errf:
                signals_proc = subprocess.Popen(
                    child_cmd(args, "signals", db), stdout=subprocess.PIPE, stderr=errf, text=True
                )
            sent = read_tagged(signals_proc, "sent", time.monotonic() + 120, sig_err)
            signals_proc.wait(timeout=30)
            wait_s = (ready["last_deadline_in_s"] or 0) + args.grace_s + 60
            done = read_tagged(engine_proc, "done", time.monotonic() + wait_s, eng_err)
            engine_proc.wait(timeout=30)
            if args.profile:
                print(eng_err.read_text(errors="replace"))
        finally:
            stop_child(signals_proc)
            stop_child(engine_proc)
            for p in (signals_proc, engine_proc):
                if p is not None and p.stdout is not None:
                    p.stdout.close()
        fig = analyse(db)

    rss_max = max(done["rss_max_serve"], done["rss_hwm"], ready["rss_created"])
    print(
        f"engine process: RSS {ready['rss_start'] / MiB:.1f} MiB at start, "
        f"{ready['rss_created'] / MiB:.1f} MiB with all runs created, max "
        f"{done['rss_max_serve'] / MiB:.1f} MiB sampled while serving, peak (VmHWM) "
        f"{done['rss_hwm'] / MiB:.1f} MiB, {done['rss_end'] / MiB:.1f} MiB at the end"
    )
    print(
        f"serve: {done['serve_s']:.1f} s, {done['ticks']} ticks ({done['ticks_busy']} woke runs), "
        f"slowest tick {done['tick_max_s'] * 1e3:.0f} ms (max {done['tick_max_woken']} runs woken "
        f"in one tick), idle tick median {done['tick_idle_median_s'] * 1e3:.1f} ms, ticks total "
        f"{done['tick_total_s']:.1f} s; finished {done['finished']}"
        + ("; STOPPED BY THE TIME LIMIT" if done["timed_out_serve"] else "")
    )
    print(f"run statuses: {fig['statuses']}")
    print(
        f"signals child: {args.signals} Engine.signal calls in {sent['send_s']:.2f} s; "
        f"{fig['delivered']} consumed; per signal sent->consumed p50 {fig['sig_p50']:.2f} s, "
        f"p99 {fig['sig_p99']:.2f} s, max {fig['sig_max']:.2f} s"
    )
    rows = [
        Row(
            f"{args.runs:,} waiting runs: engine RSS max",
            f"{rss_max / MiB:.1f} MiB",
            "< 150 MiB",
            rss_max < 150 * MiB,
        ),
    ]
    complete = fig["fired"] == n_deadline
    rows.append(
        Row(
            f"deadlines fired: {fig['fired']} of {n_deadline}, lateness max",
            f"{fig['late_max']:.3f} s (p99 {fig['late_p99']:.3f}, p50 {fig['late_p50']:.3f}, "
            f"{fig['late_over_1s']} over 1 s)",
            "<= 1 s, all fired",
            complete and fig["late_max"] <= 1.0,
        )
    )
    if fig["sig_completed"] == args.signals and fig["first_sent"] is not None:
        deliver_s = fig["last_sig_done"] - fig["first_sent"]
        took, met = f"{deliver_s:.2f} s", deliver_s < 5.0
    else:
        took, met = f"only {fig['sig_completed']} completed", False
    rows.append(
        Row(
            f"{args.signals:,} signals from a second process: first sent -> last run done",
            took,
            "< 5 s",
            met,
        )
    )
    table(rows)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=10_000, help="waiting runs in all")
    p.add_argument("--signals", type=int, default=1_000, help="of which wait on a signal")
    p.add_argument("--flows", type=int, default=60, help="timer flows (one duration each)")
    p.add_argument(
        "--spread-s", type=float, default=60.0, help="timer durations span first..first+spread"
    )
    p.add_argument(
        "--first-deadline-s",
        default="auto",
        help="shortest timer duration (s); 'auto': 1.5 x the estimated creation time + 5 s",
    )
    p.add_argument("--poll-s", type=float, default=0.2, help="Engine.serve poll interval")
    p.add_argument(
        "--signal-delay-s",
        type=float,
        default=0.0,
        help="start the signals child this long after 'ready' (e.g. to overlap the deadlines)",
    )
    p.add_argument(
        "--grace-s", type=float, default=15.0, help="serve this long past the last deadline"
    )
    p.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    p.add_argument("--profile", action="store_true", help="cProfile the engine child's serve()")
    p.add_argument("--dir", default=None, help="folder for the temporary database")
    p.add_argument(
        "--create-timeout", type=float, default=180.0, help="seconds allowed to create the runs"
    )
    p.add_argument("--role", choices=["engine", "signals"], help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not 0 <= args.signals <= args.runs:
        p.error("--signals must be between 0 and --runs")
    if args.first_deadline_s != "auto":
        float(args.first_deadline_s)
    if args.role == "engine":
        return role_engine(args)
    if args.role == "signals":
        return role_signals(args)
    return parent(args)


if __name__ == "__main__":
    raise SystemExit(main())
