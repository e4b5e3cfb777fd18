"""An outbox dispatcher process on a simulated machine: the product's
:class:`~desktop_app.flow.outbox.Dispatcher` over the PostgreSQL store (claims
with ``FOR UPDATE SKIP LOCKED``, claim expiry by the database clock).

Usage: python tests/pg_outbox_worker.py URL HOST DEST_URL --expect N [--kill-after-sends K]

Its owner is ``HOST:pid:nonce``, so a peer with another HOST never presumes
it dead: its claims must expire first. Delivers until the database holds N
delivered intents. Prints flushed lines, each with the database time:

    sent KEY DBTIME
    reconciled KEY found|missing DBTIME

``--kill-after-sends K`` SIGKILLs the process right after the destination
accepted the K-th send, before the acknowledgement is saved.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.postgres.store import PostgresCheckpointStore, open_postgres_store
from tests.outbox_worker import HttpDestination


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


class Reporting:
    """The HTTP destination, printing each send and lookup with the database time."""

    def __init__(self, store: PostgresCheckpointStore, dest: str, kill_after: int) -> None:
        self.store = store
        self.http = HttpDestination(dest, kill_after_send=False)
        self.kill_after = kill_after
        self.sends = 0

    def _db_now(self) -> str:
        return f"{self.store.server_time()[0]:.6f}"

    def send(self, key: str, payload: object) -> object:
        at = self._db_now()
        receipt = self.http.send(key, payload)
        self.sends += 1
        say("sent", key, at)
        if self.sends == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # accepted, ack not saved
        return receipt

    def lookup(self, key: str) -> object | None:
        at = self._db_now()
        receipt = self.http.lookup(key)
        say("reconciled", key, "found" if receipt else "missing", at)
        return receipt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("host")
    ap.add_argument("dest")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--kill-after-sends", type=int, default=0)
    ap.add_argument("--ttl", type=float, default=3.0)
    args = ap.parse_args()
    store = open_postgres_store(args.url)
    dest = Reporting(store, args.dest, args.kill_after_sends)
    dispatcher = Dispatcher(
        store,
        {"payments": dest},
        owner=f"{args.host}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
        claim_ttl_s=args.ttl,
    )
    deadline = time.monotonic() + 120
    while len(store.intents(["delivered"], limit=10_000)) < args.expect:
        if time.monotonic() > deadline:
            say("gave-up")
            return 1
        if dispatcher.dispatch(5) == 0:
            time.sleep(0.1)  # poll: nothing claimable right now
    say("all-delivered")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
