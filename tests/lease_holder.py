"""A process that holds a run's lease through one long step (the liveness
tests, S78/S79), and the flow it runs, registered for the CLI through
``FLOWDESK_FLOWS='["tests.lease_holder:hold"]'``.

Usage: lease_holder.py DB SINK LEASE_TTL_S [BUSY_TIMEOUT_S]

Runs the ``hold`` flow once. Its step ``long`` runs for ``LEASE_HOLD_S``
seconds (environment, default 4), or until the file named by ``LEASE_RELEASE``
(environment, optional) exists, checking ``ctx.cancelled`` every 20 ms;
it appends ``start <pid> <t>``, ``cancelled <pid> <t>`` (when it saw it) and
``end <pid> <t>`` to SINK (``<t>``: wall-clock seconds). Prints the run id
first, then ``result <status>`` (exit 0) or ``lost <message>`` (exit 4) when
the run's lease was lost.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.errors import LeaseLostError
from desktop_app.flow import FlowBuilder


class Held(BaseModel):
    n: int = 0


def _record(line: str) -> None:
    sink = os.environ.get("LEASE_SINK")
    if not sink:
        return
    fd = os.open(sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line} {os.getpid()} {time.time():.6f}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def long(s: Held, ctx: Any) -> dict[str, Any]:
    _record("start")
    end = time.monotonic() + float(os.environ.get("LEASE_HOLD_S", "4"))
    release = os.environ.get("LEASE_RELEASE")
    while time.monotonic() < end:
        if release and os.path.exists(release):
            break
        if ctx.cancelled:
            _record("cancelled")
            break
        time.sleep(0.02)
    _record("end")
    return {"n": s.n + 1}


hold = FlowBuilder("hold", Held).step("long", long).step("after", lambda s: {}).chain().compile()


def main() -> int:
    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import open_store

    db, sink, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.environ["LEASE_SINK"] = sink
    busy = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    store = open_store(db, busy_timeout_s=busy)
    engine = Engine(store, flows=[hold], lease_ttl_s=ttl)
    run_id = engine.start("hold", Held())
    print(run_id, flush=True)
    try:
        res = engine.resume(run_id)
    except LeaseLostError as exc:
        print(f"lost {exc}", flush=True)
        return 4
    print(f"result {res.status}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
