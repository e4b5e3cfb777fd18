"""Flowdesk on PostgreSQL beside DBOS Transact on PostgreSQL and raw psycopg commits.

    python benchmarks/bench_postgres.py [--dsn URL] [--runs 40] [--steps 10] [--rounds 5]
                                        [--versus PATH] [--fsync on|off]

Same server, same run, interleaved round by round (raw, Flowdesk 1, DBOS 1,
Flowdesk 8, DBOS 8, …), with the server's ``synchronous_commit`` and
``fsync`` printed:

* raw floor: one psycopg connection, single-row ``INSERT`` + ``COMMIT``
  (psycopg sends ``BEGIN`` first: 3 round trips), and 8 such connections;
* the same 10-step linear flow of trivial steps, every step durable: with 1
  run in flight (µs per step) and 8 in flight (8 threads sharing one
  ``Engine``, aggregate steps/s), the engine's default on PostgreSQL (no
  group commit). Each Flowdesk runs in a worker process of its own, so
  ``--versus PATH`` (another checkout, e.g. a worktree of main) measures
  that code in the same rounds, on its own database of the same server;
* after the timed rounds, each Flowdesk runs ``--runs`` more runs through a
  counting proxy (``tests/pg_wire.py``, outside the timed rounds: its threads
  would cost CPU): round trips and statements per step; client CPU per step
  is the worker's ``process_time`` over the timed 1-in-flight runs.

Why the ratio to a raw commit moves so much between servers: with ``fsync``
on, a commit waits for a WAL flush (milliseconds on a shared disk) and both
a raw commit and a step pay exactly one, so the ratio says little about the
client (the 1.04x of an earlier round); with ``fsync=off`` (the CI server)
what is left is round trips and client CPU, which is where a step's cost
shows (4.6x-8x before the append was pipelined). Both are printed when the
bench is run twice (``--fsync on`` and ``off`` on a private cluster).

Without ``--dsn`` (or ``FLOWDESK_BENCH_PG_DSN``) a private cluster is
started in a temp dir from the Debian PostgreSQL package (``initdb`` as the
``postgres`` user when run as root; ``--fsync`` on by default) and removed
afterwards. DBOS runs when installed (``pip install -r
benchmarks/requirements-peers.txt``). Prints median, mean and max over the
rounds, the ratios the targets are stated in (by medians), and the load
average before and after.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
#: a worker process measures the checkout named by ``--code`` (see ``--versus``)
_CODE = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--code"), None)
sys.path.insert(0, _CODE or str(REPO))

import psycopg  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from desktop_app.flow import FlowBuilder  # noqa: E402


class Counter(BaseModel):
    n: int = 0


def linear_flow(steps: int):
    b = FlowBuilder("bench", Counter)
    for i in range(steps):
        b.step(f"s{i}", lambda s: {"n": s.n + 1})
    return b.chain().compile()


def with_db(dsn: str, name: str) -> str:
    p = urlsplit(dsn)
    return urlunsplit((p.scheme, p.netloc, "/" + name, p.query, p.fragment))


class DurableCluster:
    """A throwaway cluster with PostgreSQL's durable defaults (fsync, synchronous_commit on)."""

    def __init__(self, fsync: str = "on") -> None:
        self.fsync = fsync
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise SystemExit("no PostgreSQL installed here; pass --dsn URL")
        self.bindir = os.path.dirname(found[-1])
        self.datadir = tempfile.mkdtemp(prefix="flowdesk-bench-pg-")
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.datadir, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, stdout=subprocess.DEVNULL, timeout=120)

    def start(self) -> str:
        self._run(f"{self.bindir}/initdb", "-D", self.datadir, "-A", "trust", "-U", "postgres",
                  "-E", "UTF8")  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        opts = (
            f"-p {port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync={self.fsync} "
            "-c synchronous_commit=on -c max_connections=100"
        )
        self._run(f"{self.bindir}/pg_ctl", "-D", self.datadir, "-l", f"{self.datadir}/log",
                  "-w", "-o", opts, "start")  # fmt: skip
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def stop(self) -> None:
        subprocess.run([*self.prefix, f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "fast",
                        "-w", "stop"], stdout=subprocess.DEVNULL, check=False)  # fmt: skip
        shutil.rmtree(self.datadir, ignore_errors=True)


def create_db(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_db(admin, name)


def raw_commit_us(url: str, commits: int) -> float:
    """µs per single-row INSERT + COMMIT on one connection."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS raw_t(id bigserial PRIMARY KEY, v text)")
        conn.commit()
        t0 = time.perf_counter()
        for i in range(commits):
            conn.execute("INSERT INTO raw_t(v) VALUES (%s)", (f"row {i}",))
            conn.commit()
        return (time.perf_counter() - t0) / commits * 1e6


def raw_parallel_commits_per_s(url: str, commits: int, threads: int) -> float:
    """Aggregate single-row commits/s of ``threads`` connections (the server's group commit)."""
    conns = [psycopg.connect(url) for _ in range(threads)]

    def body(i: int) -> None:
        conn = conns[i]
        for j in range(commits):
            conn.execute("INSERT INTO raw_t(v) VALUES (%s)", (f"row {i} {j}",))
            conn.commit()

    try:
        return threads * commits / in_parallel(threads, body)
    finally:
        for c in conns:
            c.close()


def in_parallel(threads: int, body: Callable[[int], None]) -> float:
    """Wall seconds for ``threads`` threads each running ``body(i)``."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            body(i)
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def wire_counter() -> Any:
    """:class:`tests.pg_wire.WireCounter`, loaded from this script's checkout
    (a ``--versus`` checkout may not have it)."""
    spec = importlib.util.spec_from_file_location("_pg_wire", REPO / "tests" / "pg_wire.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WireCounter


class FlowdeskBench:
    """One Flowdesk (the code on ``sys.path``) on database ``url``."""

    def __init__(self, url: str, steps: int, *, group_commit: bool | None = None) -> None:
        from desktop_app.flow import Engine
        from desktop_app.store.postgres.store import apply_postgres_schema, open_postgres_store

        apply_postgres_schema(url)
        self.url = url
        self.store = open_postgres_store(url, max_connections=12)
        self.engine = Engine(self.store, flows=[linear_flow(steps)], group_commit=group_commit)
        self.steps = steps
        self.cpu_us = 0.0

    def one(self, runs: int) -> float:
        """µs per durable step, 1 run in flight (also notes client CPU per step)."""
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(runs):
            assert self.engine.run("bench", {}).state.n == self.steps
        self.cpu_us = (time.process_time() - c0) / (runs * self.steps) * 1e6
        return (time.perf_counter() - t0) / (runs * self.steps) * 1e6

    def many(self, runs: int, threads: int) -> float:
        """Aggregate durable steps/s, ``threads`` runs in flight."""

        def body(_i: int) -> None:
            for _ in range(runs):
                assert self.engine.run("bench", {}).state.n == self.steps

        return threads * runs * self.steps / in_parallel(threads, body)

    def split(self, runs: int) -> dict[str, Any]:
        """Where the client CPU of a step goes: ``runs`` runs under cProfile
        with a CPU clock (``time.thread_time``: waits for the server do not
        count), each function's own time put in one bucket by where it
        lives, the shares scaled to the unprofiled CPU per step (cProfile
        inflates call-heavy buckets: read the split, not the absolute
        profiled time), and Python calls per step (a count: it does not move
        with load). psycopg's C parts (libpq, the socket calls) count to the
        psycopg function that called them. Main thread only: the NOTIFY
        thread's CPU is in ``cpu`` but not here."""
        import cProfile
        import pstats

        buckets = {
            "engine (desktop_app/flow)": "/desktop_app/flow/",
            "store/postgres": "/desktop_app/store/postgres/",
            "store, shared (rows, codec)": "/desktop_app/store/",
            "psycopg_pool": "/psycopg_pool/",
            "psycopg (+ libpq, sockets)": "/psycopg/",
            "pydantic": "pydantic",
            "JSON": "json",
        }

        def bucket(where: str, name: str) -> str:
            for key, part in buckets.items():
                if part in where or (where == "~" and part.strip("/") in name):
                    return key
            return "stdlib, builtins, other"

        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        for _ in range(runs):
            self.engine.run("bench", {})
        prof.disable()
        own: dict[str, float] = {}
        calls: dict[str, float] = {}
        for (where, _line, name), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
            key = bucket(where, name)
            own[key] = own.get(key, 0.0) + row[2]
            calls[key] = calls.get(key, 0.0) + row[1]
        total = sum(own.values()) or 1.0
        n = runs * self.steps
        return {
            "us": {k: v / total * self.cpu_us for k, v in own.items()},
            "calls": {k: v / n for k, v in calls.items()},
        }

    def trips(self, runs: int) -> dict[str, float]:
        """Round trips and statements per step, ``runs`` runs through a counting proxy."""
        from desktop_app.flow import Engine
        from desktop_app.store.postgres.store import open_postgres_store

        wire = wire_counter()(int(urlsplit(self.url).port or 5432))
        store = open_postgres_store(wire.url(self.url), max_connections=4)
        try:
            engine = Engine(store, flows=[linear_flow(self.steps)])
            engine.run("bench", {})
            time.sleep(0.05)
            wire.reset()
            for _ in range(runs):
                assert engine.run("bench", {}).state.n == self.steps
            time.sleep(0.05)  # the last NOTIFY batch
            trips, _requests, messages = wire.snapshot()
        finally:
            store.close()
            wire.close()
        n = runs * self.steps
        return {"round trips": trips / n, "statements": (messages["E"] + messages["Q"]) / n}


def worker(url: str, steps: int) -> int:
    """``--worker``: serve one FlowdeskBench over stdin/stdout (a JSON line per command)."""
    bench = FlowdeskBench(url, steps)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "one":
            us = bench.one(cmd["runs"])
            out: dict[str, Any] = {"us": us, "cpu": bench.cpu_us}
        elif cmd["op"] == "many":
            out = {"per_s": bench.many(cmd["runs"], cmd["threads"])}
        elif cmd["op"] == "trips":
            out = bench.trips(cmd["runs"])
        elif cmd["op"] == "split":
            out = bench.split(cmd["runs"])
        else:
            break
        print(json.dumps(out), flush=True)
    bench.store.close()
    return 0


class FlowdeskProc:
    """A :func:`worker` process measuring the code of checkout ``code``."""

    def __init__(self, code: str, url: str, steps: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--code", code,
             "--url", url, "--steps", str(steps)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=code,
        )  # fmt: skip
        self._reply()

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker exited with {self.proc.wait()}")
        return json.loads(line)

    def ask(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class DbosBench:
    def __init__(self, url: str, steps: int) -> None:
        from dbos import DBOS, DBOSConfig

        config: DBOSConfig = {"name": "flowdesk-bench", "system_database_url": url}
        DBOS(config=config)

        @DBOS.step()
        def inc(n: int) -> int:
            return n + 1

        @DBOS.workflow()
        def wf() -> int:
            n = 0
            for _ in range(steps):
                n = inc(n)
            return n

        DBOS.launch()
        self.wf = wf
        self.steps = steps
        self.dbos: Any = DBOS

    def one(self, runs: int) -> float:
        t0 = time.perf_counter()
        for _ in range(runs):
            assert self.wf() == self.steps
        return (time.perf_counter() - t0) / (runs * self.steps) * 1e6

    def many(self, runs: int, threads: int) -> float:
        def body(_i: int) -> None:
            for _ in range(runs):
                assert self.wf() == self.steps

        return threads * runs * self.steps / in_parallel(threads, body)

    def close(self) -> None:
        self.dbos.destroy()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("FLOWDESK_BENCH_PG_DSN"))
    p.add_argument("--runs", type=int, default=40, help="runs per thread per round")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--versus", help="another checkout measured in the same rounds")
    p.add_argument("--fsync", choices=["on", "off"], default="on",
                   help="the private cluster's fsync (without --dsn)")  # fmt: skip
    p.add_argument("--no-peers", action="store_true", help="leave DBOS out")
    p.add_argument("--split", action="store_true",
                   help="after the rounds, where a step's client CPU goes (cProfile)")  # fmt: skip
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--code", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.url, args.steps)
    cluster = None
    admin = args.dsn
    if admin is None:
        cluster = DurableCluster(args.fsync)
        admin = cluster.start()
    tag = uuid.uuid4().hex[:6]
    workers: dict[str, FlowdeskProc] = {}
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            sc = conn.execute("SHOW synchronous_commit").fetchone()
            fs = conn.execute("SHOW fsync").fetchone()
        print(f"PostgreSQL {version and version[0]}, synchronous_commit={sc and sc[0]}, "
              f"fsync={fs and fs[0]}; {args.runs} runs x {args.steps} steps per round "
              f"(x {args.threads} threads, {args.runs // 2 or 1} runs each, for 'in flight "
              f"{args.threads}'), {args.rounds} rounds interleaved")  # fmt: skip
        raw_url = create_db(admin, f"bench_raw_{tag}")
        codes = {"flowdesk": str(REPO)}
        if args.versus:
            codes[f"versus {Path(args.versus).name}"] = str(Path(args.versus).resolve())
        for i, (name, code) in enumerate(codes.items()):
            workers[name] = FlowdeskProc(
                code, create_db(admin, f"bench_flowdesk{i}_{tag}"), args.steps
            )
        peer: DbosBench | None = None
        if not args.no_peers:
            try:
                peer = DbosBench(create_db(admin, f"bench_dbos_{tag}"), args.steps)
            except ImportError:
                print("dbos: not installed (pip install -r benchmarks/requirements-peers.txt)")
        res: dict[str, list[float]] = {}

        def note(key: str, value: float) -> None:
            res.setdefault(key, []).append(value)

        load_before = os.getloadavg()
        for w in workers.values():  # warm-up (connections, prepared plans), not measured
            w.ask(op="one", runs=3)
        if peer is not None:
            peer.one(3)
        n = args.threads
        for r in range(args.rounds):
            note("raw", raw_commit_us(raw_url, args.runs * args.steps))
            note(f"raw {n}", raw_parallel_commits_per_s(raw_url, args.runs * args.steps // 2, n))
            order = list(workers.items())
            order = order[r % len(order) :] + order[: r % len(order)]  # rotate who goes first
            for name, w in order:
                got = w.ask(op="one", runs=args.runs)
                note(f"{name} 1", got["us"])
                note(f"{name} cpu", got["cpu"])
            if peer is not None:
                note("dbos 1", peer.one(args.runs))
            for name, w in order:
                note(f"{name} {n}", w.ask(op="many", runs=args.runs // 2 or 1, threads=n)["per_s"])
            if peer is not None:
                note(f"dbos {n}", peer.many(args.runs // 2 or 1, n))
        load_after = os.getloadavg()
        trips = {name: w.ask(op="trips", runs=args.runs) for name, w in workers.items()}
        splits = (
            {name: w.ask(op="split", runs=args.runs) for name, w in workers.items()}
            if args.split
            else {}
        )
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
        print(f"{'measure':38} {'median':>10} {'mean':>10} {'max':>10} {'min':>10}")
        for k, v in res.items():
            unit = "/s" if k.endswith(f" {n}") else "us"
            print(f"{k + ' ' + unit:38} {statistics.median(v):10.1f} "
                  f"{statistics.fmean(v):10.1f} {max(v):10.1f} {min(v):10.1f}")  # fmt: skip
        raw = med["raw"]
        print(f"raw psycopg single-row commit : {raw:8.1f} us  ({1e6 / raw:7.0f} commits/s; "
              "3 round trips: BEGIN, INSERT, COMMIT)")  # fmt: skip
        rawn = med[f"raw {n}"]
        print(f"raw, {n} connections        : {rawn:8.0f} commits/s  = "
              f"{rawn / (1e6 / raw):.2f} x one connection (the server's group commit)")  # fmt: skip
        for name in workers:
            one, many, cpu = med[f"{name} 1"], med[f"{name} {n}"], med[f"{name} cpu"]
            t = trips[name]
            print(f"{name}:")
            print(f"  1 in flight   : {one:8.1f} us/step ({1e6 / one:7.0f} steps/s)"
                  f"  = {one / raw:.2f} x raw commit (target <= 1.5)")  # fmt: skip
            print(f"  {n} in flight   : {many:8.0f} steps/s  = {many / (1e6 / one):.2f} x"
                  " 1 in flight (target >= 4)")  # fmt: skip
            print(f"  per step      : {t['round trips']:.2f} round trips, "
                  f"{t['statements']:.2f} statements, {cpu:.0f} us client CPU (one process, "
                  f"one GIL: at most {1e6 / cpu:.0f} steps/s)")  # fmt: skip
            if name in splits:
                us, calls = splits[name]["us"], splits[name]["calls"]
                print(f"  client CPU of a step ({sum(calls.values()):.0f} Python calls):")
                for k in sorted(us, key=lambda k: -us[k]):
                    print(f"    {k:30} {us[k]:6.0f} us  {calls[k]:6.1f} calls")
            if peer is not None:
                d1, dn = med["dbos 1"], med[f"dbos {n}"]
                print(f"  vs DBOS       : {d1 / one:.2f} x faster at 1 in flight (target >= 3), "
                      f"{many / dn:.2f} x at {n}")  # fmt: skip
        if peer is not None:
            d1, dn = med["dbos 1"], med[f"dbos {n}"]
            print(f"dbos, 1 in flight             : {d1:8.1f} us/step = {d1 / raw:.2f} x raw; "
                  f"{n} in flight {dn:8.0f} steps/s = {dn / (1e6 / d1):.2f} x its 1")  # fmt: skip
            peer.close()
        if args.versus:
            base = f"versus {Path(args.versus).name}"
            per_round = [a / b for a, b in zip(res["flowdesk 1"], res[f"{base} 1"], strict=True)]
            print(f"this checkout / {base}, 1 in flight us/step per round: "
                  f"median {statistics.median(per_round):.2f}, "
                  f"{[round(x, 2) for x in per_round]}")  # fmt: skip
            per_round = [a / b for a, b in zip(res[f"flowdesk {n}"], res[f"{base} {n}"],
                                               strict=True)]  # fmt: skip
            print(f"this checkout / {base}, {n} in flight steps/s per round: "
                  f"median {statistics.median(per_round):.2f}, "
                  f"{[round(x, 2) for x in per_round]}")  # fmt: skip
            per_round = [a / b for a, b in zip(res["flowdesk cpu"], res[f"{base} cpu"],
                                               strict=True)]  # fmt: skip
            print(f"this checkout / {base}, client CPU per step per round: "
                  f"median {statistics.median(per_round):.2f}, "
                  f"{[round(x, 2) for x in per_round]}")  # fmt: skip
        print("per round:", {k: [round(x, 1) for x in v] for k, v in res.items()})
    finally:
        for w in workers.values():
            w.close()
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
