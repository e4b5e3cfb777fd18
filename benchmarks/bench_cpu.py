"""Where the CPU of one durable step goes, at ``synchronous=OFF`` (no fsync):
engine Python, store Python, SQLite, JSON, pydantic; statements, JSON
encodings and Python calls per step.

    python benchmarks/bench_cpu.py [--runs 200] [--rounds 5] [--steps 10] [--top 15]

1. Unprofiled: ``--rounds`` rounds of ``--runs`` runs of the 10-step linear
   flow (trivial steps) on one Engine, one run after another: wall time and
   process CPU time (``time.process_time``) per step, median [IQR];
   interleaved with the baseline: the very SQL statements (and bindings) one
   such round issued, recorded with an apsw ``exec_trace`` and replayed
   through apsw alone on a copy of the file as it stood before them. Their
   ratio, per round, is the Python Flowdesk adds around its SQL (target,
   issue 31: CPU per step <= 2x the replayed SQL's). A third contender, in
   the same rounds, is the floor of a step in Python: the same statements
   with, beside each checkpoint's, the work no durable step can skip done by
   hand (the step's function, its output validated into a copy of the
   state, the changed field encoded, the row's JSON and its checksum, the
   clock, the write gate's two ``flock`` calls) and nothing else.
2. Counted: one more round with an apsw ``exec_trace`` on the store's
   connection (SQL statements per step, by kind), then one under cProfile; every
   function's own time (``tottime``) goes to one bucket by where it lives:

   * engine: ``desktop_app/flow/``
   * store Python: ``desktop_app/store/``
   * SQLite: apsw's C methods (statement execution, commit)
   * JSON: the ``json`` package, ``_json``, orjson
   * pydantic: pydantic and pydantic_core
   * steps: the benchmark's own step functions
   * other: everything else (stdlib threading, dataclasses, uuid, ...)

   The shares are scaled to the unprofiled CPU per step (cProfile inflates
   Python-heavy buckets: read the split, not the absolute profiled time).
   JSON encodings per step count calls of ``json.dumps``, ``orjson.dumps`` and
   pydantic's ``model_dump_json``/``to_json``; Python calls per step are
   cProfile's call counts.
"""

from __future__ import annotations

import argparse
import cProfile
import fcntl
import hashlib
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import apsw
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, header, interleave, stat, table
from bench_steps import fresh_store, linear_flow

from desktop_app.flow import Engine

BUCKETS = ("engine", "store Python", "SQLite", "JSON", "pydantic", "steps", "other")


def bucket(filename: str, name: str) -> str:
    f = filename.replace("\\", "/")
    if "desktop_app/flow/" in f:
        return "engine"
    if "desktop_app/store/" in f:
        return "store Python"
    if "benchmarks/bench_" in f:
        return "steps"
    if f == "~":  # a C function: cProfile names it "<method 'x' of 'T' objects>"
        if "apsw" in name:
            return "SQLite"
        if "json" in name:
            return "JSON"
        if "pydantic" in name:
            return "pydantic"
        return "other"
    if "/json/" in f:
        return "JSON"
    if "pydantic" in f:
        return "pydantic"
    return "other"


def is_encoding(filename: str, name: str) -> bool:
    f = filename.replace("\\", "/")
    return (
        (f.endswith("json/__init__.py") and name == "dumps")
        or "orjson.dumps" in name
        or (f == "~" and ("to_json" in name or "dump_json" in name))
        or ("pydantic" in f and name == "model_dump_json")
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=200, help="runs per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=15, help="functions listed by own time")
    p.add_argument("--dir", default=None, help="folder for the temporary database")
    args = p.parse_args()
    header(
        "CPU per durable step at synchronous=OFF",
        steps=args.steps,
        runs_per_round=args.runs,
        rounds=args.rounds,
    )
    steps = args.runs * args.steps
    with tempfile.TemporaryDirectory(prefix="flowdesk-bench-cpu-", dir=args.dir) as d:
        store = fresh_store(Path(d) / "flowdesk.db", "OFF")
        flow = linear_flow(args.steps)
        engine = Engine(store, flows=[flow])
        wall: list[float] = []

        def one_round() -> float:
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(args.runs):
                res = engine.run("bench", flow.state_type())
                assert res.status == "completed", res
            wall.append((time.perf_counter() - t0) / steps)
            return (time.process_time() - c0) / steps

        one_round()  # warm: statement cache, imports, the file's first pages
        # the SQL of one round, as issued: statements with their bindings,
        # recorded on a copy of the file as it stood before them
        template = Path(d) / "before-round.db"
        store.conn.execute("VACUUM INTO ?", (str(template),))
        recorded: list[tuple[str, Any]] = []
        statements: Counter[str] = Counter()

        def trace(_cursor: object, sql: str, bindings: Any) -> bool:
            recorded.append((sql, bindings))
            statements[sql.lstrip().split(None, 1)[0].upper()] += 1
            return True

        store.conn.exec_trace = trace
        for _ in range(args.runs):
            engine.run("bench", flow.state_type())
        store.conn.exec_trace = None

        def fresh_copy(name: str) -> apsw.Connection:
            """A new copy of the file as it stood before the recorded round,
            opened through apsw alone with the store's pragmas."""
            target = Path(d) / name
            for suffix in ("", "-wal", "-shm"):
                Path(f"{target}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(template, target)
            conn = apsw.Connection(str(target))
            for pragma in ("journal_mode=WAL", "synchronous=OFF", "foreign_keys=ON"):
                conn.execute(f"PRAGMA {pragma}").fetchall()
            return conn

        def replayed() -> float:
            """The recorded statements alone, through apsw on a fresh copy
            of the file as it stood before them, with the store's pragmas:
            what the step path would cost if Flowdesk's Python cost nothing."""
            conn = fresh_copy("replay.db")
            c0 = time.process_time()
            for sql, bindings in recorded:
                for _row in conn.execute(sql, bindings):
                    pass
            cpu = (time.process_time() - c0) / steps
            conn.close()
            return cpu

        def hand_written() -> float:
            """The floor of a durable step in Python: the recorded statements
            again, each checkpoint's with the work no step can skip done by
            hand beside it (the step's function, its output validated into a
            copy of the state, the changed field encoded, the row's JSON and
            checksum, the clock, the write gate's two ``flock`` calls), and
            nothing else: no engine, no store, no records."""
            conn = fresh_copy("floor.db")
            lock = os.open(f"{Path(d) / 'floor.db'}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            model = flow.state_type
            validator = model.__pydantic_validator__
            fn = flow.steps["s0"].fn
            state = model()
            c0 = time.process_time()
            for sql, bindings in recorded:
                head = sql.lstrip()[:6].upper()
                if head == "BEGIN ":
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                elif head.startswith("INSERT") and "checkpoints" in sql:
                    t0 = time.perf_counter()
                    out = fn(state)
                    new = state.model_copy()
                    for name, value in out.items():
                        validator.validate_assignment(new, name, value)
                    part = new.model_dump(mode="json", include=set(out))
                    now = time.time()
                    ms = time.perf_counter() - t0
                    record = {"status": "completed", "attempts": 1, "started_at": now,
                              "finished_at": now, "duration_ms": ms}  # fmt: skip
                    row = (
                        "r", 1, "delta", "running", "s0", now,
                        orjson.dumps({"set": part}).decode(),
                        orjson.dumps({"s0": record}).decode(),
                        orjson.dumps(["s1"]).decode(), None, None,
                        orjson.dumps({"steps_taken": 1}).decode(), None,
                    )  # fmt: skip
                    hashlib.blake2b(orjson.dumps(row), digest_size=16).hexdigest()
                    state = new
                for _row in conn.execute(sql, bindings):
                    pass
                if head == "COMMIT":
                    fcntl.flock(lock, fcntl.LOCK_UN)
            cpu = (time.process_time() - c0) / steps
            os.close(lock)
            conn.close()
            return cpu

        cpus = interleave(
            {"flowdesk": one_round, "replayed SQL": replayed, "hand-written": hand_written},
            args.rounds,
            progress=False,
        )
        cpu, replay_cpu, floor_cpu = cpus["flowdesk"], cpus["replayed SQL"], cpus["hand-written"]
        floor_ratios = [f / r for f, r in zip(floor_cpu, replay_cpu, strict=True)]
        ratios = [f / r for f, r in zip(cpu, replay_cpu, strict=True)]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.runs):
            engine.run("bench", flow.state_type())
        prof.disable()
        store.close()

    st = pstats.Stats(prof)
    own: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    encodings = 0
    top: list[tuple[float, int, str]] = []
    for (filename, line, name), (_cc, nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        b = bucket(filename, name)
        own[b] += tt
        calls[b] += nc
        if is_encoding(filename, name):
            encodings += nc
        short = filename.split("site-packages/")[-1].split("flowdesk/")[-1]
        top.append((tt, nc, f"{short}:{line}({name})" if filename != "~" else name))
    total_prof = sum(own.values())
    cpu_us = stat(cpu).median * 1e6

    print()
    print(f"own time by bucket, scaled to the unprofiled CPU of {cpu_us:.0f} us per step:")
    for b in BUCKETS:
        share = own[b] / total_prof
        print(
            f"  {b:13} {share * cpu_us:7.1f} us  ({share:5.1%}, {calls[b] / steps:6.1f} calls/step)"
        )
    print(f"top {args.top} functions by own time (profiled us per step, calls per step):")
    for tt, nc, where in sorted(top, reverse=True)[: args.top]:
        print(f"  {tt / steps * 1e6:7.1f} us  {nc / steps:6.2f}  {where}")

    n_stmt = sum(statements.values())
    kinds = ", ".join(f"{k} {v / steps:.2f}" for k, v in statements.most_common())
    rows = [
        Row("wall per step (OFF)", f"{stat(wall).fmt(1e6, 0)} us"),
        Row("CPU per step (OFF)", f"{stat(cpu).fmt(1e6, 0)} us"),
        Row("CPU per step of its SQL replayed alone", f"{stat(replay_cpu).fmt(1e6, 0)} us"),
        Row(
            "CPU per step / its SQL replayed, same round",
            f"{stat(ratios).fmt(1, 2)}x"
            f" (mean {statistics.mean(ratios):.2f}, max {max(ratios):.2f})",
            "<= 2x",
            stat(ratios).median <= 2.0,
        ),
    ]
    rows += [
        Row(
            "CPU per step of a hand-written step (its SQL and the work it cannot skip)",
            f"{stat(floor_cpu).fmt(1e6, 0)} us",
        ),
        Row(
            "  hand-written / its SQL replayed, same round",
            f"{stat(floor_ratios).fmt(1, 2)}x"
            f" (mean {statistics.mean(floor_ratios):.2f}, max {max(floor_ratios):.2f})",
        ),
    ]
    for b in BUCKETS:
        rows.append(Row(f"  {b}", f"{own[b] / total_prof * cpu_us:.0f} us"))
    rows += [
        Row("SQL statements per step", f"{n_stmt / steps:.2f} ({kinds})"),
        Row("JSON encodings per step", f"{encodings / steps:.2f}"),
        Row(
            "Python calls per step (all / engine)",
            f"{sum(calls.values()) / steps:.0f} / {calls['engine'] / steps:.0f}",
        ),
    ]
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
