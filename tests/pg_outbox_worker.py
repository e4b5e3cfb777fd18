"""An outbox dispatcher process on a simulated machine, claiming intents
from PostgreSQL with ``claim_intents_for_worker`` (SKIP LOCKED, database-clock expiry).

Usage: python tests/pg_outbox_worker.py URL HOST DEST_URL --expect N [--kill-after-sends K]

Delivers until the database holds N delivered intents. An intent returned
with status ``sending`` (its claim expired: a dispatcher died mid-send) is
reconciled first: ``lookup`` its idempotency key at the destination, and
only send it when the destination does not have it. Prints flushed lines:

    claimed KEY WAS DBTIME
    sent KEY
    reconciled KEY found|missing DBTIME
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

from desktop_app.store.postgres import open_postgres_store
from tests.outbox_worker import HttpDestination


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("host")
    ap.add_argument("dest")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--kill-after-sends", type=int, default=0)
    ap.add_argument("--ttl", type=float, default=3.0)
    args = ap.parse_args()
    owner = f"{args.host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    store = open_postgres_store(args.url)
    dest = HttpDestination(args.dest, kill_after_send=False)
    sends = 0
    deadline = time.monotonic() + 120
    while len(store.intents(["delivered"], limit=10_000)) < args.expect:
        if time.monotonic() > deadline:
            say("gave-up")
            return 1
        batch = store.claim_intents_for_worker(owner, args.ttl, 5)
        if not batch:
            time.sleep(0.1)  # poll: nothing claimable right now
            continue
        now = store.server_time()[0]
        for intent in batch:
            say("claimed", intent.intent_id, intent.status, f"{now:.6f}")
        for intent in batch:
            now = store.server_time()[0]
            if intent.status == "sending":
                receipt = dest.lookup(intent.intent_id)
                say("reconciled", intent.intent_id, "found" if receipt else "missing",
                    f"{now:.6f}")  # fmt: skip
                if receipt is not None:
                    store.mark_intent(intent.intent_id, "delivered", now, receipt=receipt)
                    continue
            receipt = dest.send(intent.intent_id, intent.payload)
            sends += 1
            say("sent", intent.intent_id)
            if sends == args.kill_after_sends:
                os.kill(os.getpid(), signal.SIGKILL)  # accepted, ack not saved
            store.mark_intent(intent.intent_id, "delivered", store.server_time()[0],
                              receipt=receipt)  # fmt: skip
    say("all-delivered")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
