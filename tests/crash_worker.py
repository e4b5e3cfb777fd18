"""A real process that runs (or recovers) a `digest` run and can SIGKILL itself.

DB is a SQLite file or a ``postgresql://`` URL.

Usage: python tests/crash_worker.py DB FOLDER OUT LOG [--kill-inside N] [--kill-after N]
       [--delay-ms MS]

* ``--kill-inside N``: SIGKILL after processing the N-th file *in this
  process*, before its row and checkpoint commit (a kill inside a step).
* ``--kill-after N``: SIGKILL right after the checkpoint of file N (absolute
  cursor) committed (a kill between iterations).
* ``--delay-ms``: sleep per file, so a parent can kill at a random moment.

Every processed file is appended to LOG (fsync'd) before its commit, so the
parent can count executions across processes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.config import Settings
from desktop_app.flow import Engine, EventBus
from desktop_app.flow.events import RunProgress
from desktop_app.flows.digest import DigestState, build_digest_flow
from desktop_app.store.sqlite.store import open_store


def main() -> int:
    p = argparse.ArgumentParser()
    for name in ("db", "folder", "out", "log"):
        p.add_argument(name)
    p.add_argument("--kill-inside", type=int)
    p.add_argument("--kill-after", type=int)
    p.add_argument("--delay-ms", type=float, default=0)
    args = p.parse_args()
    seen = [0]
    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115

    def on_file(run_id: str, row: object) -> None:
        log.write(f"{row.path}\n")  # type: ignore[attr-defined]
        log.flush()
        os.fsync(log.fileno())
        seen[0] += 1
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)
        if args.kill_inside is not None and seen[0] == args.kill_inside:
            os.kill(os.getpid(), signal.SIGKILL)

    events = EventBus()

    def on_event(ev: object) -> None:
        if (
            isinstance(ev, RunProgress)
            and args.kill_after is not None
            and ev.done == args.kill_after
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    events.subscribe(on_event)
    if args.db.startswith("postgresql://"):
        from desktop_app.store.postgres.store import open_postgres_store

        store = open_postgres_store(args.db)
    else:
        store = open_store(Settings(db_path=Path(args.db)).db_path)
    engine = Engine(store, flows=[build_digest_flow(on_file=on_file)], events=events)
    if store.list_runs():
        report = engine.recover()
        statuses = [getattr(o, "status", repr(o)) for _, o in report]
        print("recovered", statuses)
    else:
        res = engine.run("digest", DigestState(folder=args.folder, out=args.out))
        print("ran", res.status)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
