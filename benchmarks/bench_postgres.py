"""Flowdesk on PostgreSQL beside DBOS Transact on PostgreSQL and raw psycopg commits.

    python benchmarks/bench_postgres.py [--dsn URL] [--runs 40] [--steps 10] [--rounds 5]

Same server, same run, interleaved round by round (raw, Flowdesk 1, DBOS 1,
Flowdesk 8, Flowdesk 8 without group commit, DBOS 8, …), with the server's
``synchronous_commit`` and ``fsync`` printed (a private cluster has both on):

* raw floor: one psycopg connection, single-row ``INSERT`` + ``COMMIT``;
* the same 10-step linear flow of trivial steps, every step durable: with 1
  run in flight (µs per step) and 8 in flight (8 threads, aggregate steps/s),
  with group commit forced on (``Engine(group_commit=True)``, with the mean
  batch size it reached) and off (``group_commit=False``: one transaction
  per step, the default on PostgreSQL, which does not declare
  ``group_commit``).

Without ``--dsn`` (or ``FLOWDESK_BENCH_PG_DSN``) a private durable cluster is
started in a temp dir from the Debian PostgreSQL package (``initdb`` as the
``postgres`` user when run as root) and removed afterwards. DBOS runs when
installed (``pip install -r benchmarks/requirements-peers.txt``). Prints
median, mean and max over the rounds, the ratios the targets are stated in
(by medians), and the load average before and after.
"""

from __future__ import annotations

import argparse
import glob
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.postgres.store import apply_postgres_schema, open_postgres_store


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

    def __init__(self) -> None:
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
            f"-p {port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=on "
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


class FlowdeskBench:
    def __init__(self, url: str, steps: int, *, group_commit: bool | None = None) -> None:
        apply_postgres_schema(url)
        self.store = open_postgres_store(url, max_connections=12)
        self.engine = Engine(self.store, flows=[linear_flow(steps)], group_commit=group_commit)
        self.steps = steps

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
    args = p.parse_args()
    cluster = None
    admin = args.dsn
    if admin is None:
        cluster = DurableCluster()
        admin = cluster.start()
    tag = uuid.uuid4().hex[:6]
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            sc = conn.execute("SHOW synchronous_commit").fetchone()
            fs = conn.execute("SHOW fsync").fetchone()
        print(f"PostgreSQL {version and version[0]}, synchronous_commit={sc and sc[0]}, "
              f"fsync={fs and fs[0]}; {args.runs} runs x {args.steps} steps per round "
              f"(x {args.threads} threads for 'in flight {args.threads}'), {args.rounds} "
              "rounds interleaved, medians")  # fmt: skip
        raw_url = create_db(admin, f"bench_raw_{tag}")
        ours = FlowdeskBench(
            create_db(admin, f"bench_flowdesk_{tag}"), args.steps, group_commit=True
        )
        solo = FlowdeskBench(
            create_db(admin, f"bench_flowdesk_nogc_{tag}"), args.steps, group_commit=False
        )
        try:
            peer: DbosBench | None = DbosBench(create_db(admin, f"bench_dbos_{tag}"), args.steps)
        except ImportError:
            peer = None
            print("dbos: not installed (pip install -r benchmarks/requirements-peers.txt)")
        res: dict[str, list[float]] = {}

        def note(key: str, value: float) -> None:
            res.setdefault(key, []).append(value)

        load_before = os.getloadavg()
        # warm-up (connections, prepared plans), not measured
        ours.one(3)
        solo.one(3)
        if peer is not None:
            peer.one(3)
        for _ in range(args.rounds):
            note("raw", raw_commit_us(raw_url, args.runs * args.steps))
            note(f"raw {args.threads}", raw_parallel_commits_per_s(
                raw_url, args.runs * args.steps // 2, args.threads))  # fmt: skip
            note("flowdesk 1", ours.one(args.runs))
            note("flowdesk cpu", ours.cpu_us)
            if peer is not None:
                note("dbos 1", peer.one(args.runs))
            committer = ours.engine.committer
            assert committer is not None
            b0, a0 = committer.batches, committer.appends
            note(f"flowdesk {args.threads}", ours.many(args.runs // 2 or 1, args.threads))
            note("batch size", (committer.appends - a0) / max(1, committer.batches - b0))
            note(f"flowdesk {args.threads} no group commit",
                 solo.many(args.runs // 2 or 1, args.threads))  # fmt: skip
            if peer is not None:
                note(f"dbos {args.threads}", peer.many(args.runs // 2 or 1, args.threads))
        load_after = os.getloadavg()
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
        print(f"{'measure':38} {'median':>10} {'mean':>10} {'max':>10} {'min':>10}")
        for k, v in res.items():
            unit = "/s" if f" {args.threads}" in k else ("" if k == "batch size" else "us")
            print(f"{k + ' ' + unit:38} {statistics.median(v):10.1f} "
                  f"{statistics.fmean(v):10.1f} {max(v):10.1f} {min(v):10.1f}")  # fmt: skip
        raw, one = med["raw"], med["flowdesk 1"]
        many = med[f"flowdesk {args.threads}"]
        print(f"raw psycopg single-row commit : {raw:8.1f} us  ({1e6 / raw:7.0f} commits/s)")
        rawn = med[f"raw {args.threads}"]
        print(
            f"raw, {args.threads} connections        : {rawn:8.0f} commits/s"
            f"  = {rawn / (1e6 / raw):.2f} x one connection (the server's group commit)"
        )
        print(f"flowdesk, 1 in flight         : {one:8.1f} us/step ({1e6 / one:7.0f} steps/s)"
              f"  = {one / raw:.2f} x raw commit (target <= 1.5)")  # fmt: skip
        print(f"flowdesk, {args.threads} in flight, gc on  : {many:8.0f} steps/s"
              f"  = {many / (1e6 / one):.2f} x 1 in flight (target >= 4)")  # fmt: skip
        nogc = med[f"flowdesk {args.threads} no group commit"]
        print(f"  gc off (PostgreSQL default): {nogc:8.0f} steps/s  = {nogc / (1e6 / one):.2f} x"
              f" 1 in flight; group commit gives {many / nogc:.2f} x (mean batch "
              f"{med['batch size']:.2f} appends)")  # fmt: skip
        cpu = med["flowdesk cpu"]
        print(f"flowdesk client CPU per step  : {cpu:8.1f} us (one process, one GIL: at most "
              f"{1e6 / cpu:6.0f} steps/s however many runs are in flight)")  # fmt: skip
        if peer is not None:
            d1, dn = med["dbos 1"], med[f"dbos {args.threads}"]
            print(f"dbos, 1 in flight             : {d1:8.1f} us/step ({1e6 / d1:7.0f} steps/s)"
                  f"  = {d1 / raw:.2f} x raw; flowdesk is {d1 / one:.2f} x faster "
                  "(target >= 3)")  # fmt: skip
            print(f"dbos, {args.threads} in flight             : {dn:8.0f} steps/s"
                  f"  = {dn / (1e6 / d1):.2f} x its 1 in flight; flowdesk is "
                  f"{many / dn:.2f} x faster")  # fmt: skip
            peer.close()
        print("per round:", {k: [round(x, 1) for x in v] for k, v in res.items()})
        ours.store.close()
        solo.store.close()
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
