"""A program with its own slow outbox destination (``slow``), as a user
writes one: it starts runs that queue one send each, and dispatches them
with the product's :class:`~desktop_app.flow.outbox.Dispatcher`.

Usage::

    python tests/slow_outbox_worker.py DB LEDGER start ORDER
    python tests/slow_outbox_worker.py DB LEDGER dispatch [--delay S] [--post S] [--hold FILE]
        [--ttl S] [--lookup honest|raise] [--host HOST] [--skew S] [--until-done KEY]
    python tests/slow_outbox_worker.py DB LEDGER race ROUNDS BARRIER_DIR [--delay S] [--skew S]

``DB`` is a SQLite file or a ``postgresql://`` URL. The destination appends
``START key pid`` and ``DONE key pid`` lines to ``LEDGER`` around each send
(the send lasts ``--delay`` s, and with ``--hold FILE`` until that file
exists; ``--post`` s more pass after ``DONE`` before
the send returns, a window to kill the process in); its ``lookup`` finds a
key whose ``DONE`` is in the ledger (``--lookup raise``: it raises).
``--skew S`` shifts this process's wall clock (``time.time``) by ``S``
seconds, as a machine whose clock is off (``faketime`` is not used:
libfaketime 0.9.10 stalls Python's timed waits). ``--host`` names the
dispatcher's owner ``HOST:pid:nonce`` (a simulated other machine: never
presumed dead or alive). ``--until-done KEY`` dispatches again until
``KEY``'s ``DONE`` is in the ledger. ``race`` dispatches once per round,
each round released by the file ``BARRIER_DIR/go-N``, and writes
``BARRIER_DIR/done-N-PID`` after it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if "--skew" in sys.argv:  # before anything reads the clock
    _skew = float(sys.argv[sys.argv.index("--skew") + 1])
    _real_time = time.time
    time.time = lambda: _real_time() + _skew
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher


class Order(BaseModel):
    order: str
    sent: bool = False


def send_it(s: Order, ctx: Any) -> dict[str, bool]:
    ctx.send("slow", {"order": s.order})
    return {"sent": True}


sender = FlowBuilder("sender", Order, inputs=("order",)).step("send", send_it).compile()


class Slow:
    """A destination that takes ``delay`` s per send and logs it."""

    def __init__(
        self, ledger: Path, delay: float, post: float, lookup: str, hold: Path | None = None
    ) -> None:
        self.ledger, self.delay, self.post, self.mode = ledger, delay, post, lookup
        self.hold = hold

    def _log(self, what: str, key: str) -> None:
        with self.ledger.open("a") as f:
            f.write(f"{what} {key} {os.getpid()}\n")

    def send(self, key: str, payload: object) -> object:
        self._log("START", key)
        time.sleep(self.delay)
        while self.hold is not None and not self.hold.exists():  # and until the test lets go
            time.sleep(0.05)
        self._log("DONE", key)
        time.sleep(self.post)
        return {"ok": key}

    def lookup(self, key: str) -> object | None:
        self._log("LOOKUP", key)
        if self.mode == "raise":
            raise ConnectionError("destination unreachable for lookup")
        done = self.ledger.exists() and f"DONE {key} " in self.ledger.read_text()
        return {"ok": key} if done else None


def open_any(db: str) -> Any:
    if db.startswith("postgresql://"):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(db)
    from desktop_app.store.sqlite.store import open_store

    return open_store(db)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("ledger", type=Path)
    ap.add_argument("cmd", choices=("start", "dispatch", "race"))
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--post", type=float, default=0.0)
    ap.add_argument("--ttl", type=float, default=300.0)
    ap.add_argument("--lookup", default="honest")
    ap.add_argument("--host", default=None)
    ap.add_argument("--skew", type=float, default=0.0)
    ap.add_argument("--until-done", default=None)
    ap.add_argument("--hold", type=Path, default=None)
    args = ap.parse_args()
    store = open_any(args.db)
    if args.cmd == "start":
        run = Engine(store, flows=[sender]).run("sender", Order(order=args.rest[0]))
        print(run.run_id, run.status, flush=True)
        return 0
    owner = None if args.host is None else f"{args.host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    dest = Slow(args.ledger, args.delay, args.post, args.lookup, args.hold)
    dispatcher = Dispatcher(store, {"slow": dest}, owner=owner, claim_ttl_s=args.ttl)
    if args.cmd == "race":
        rounds, barrier = int(args.rest[0]), Path(args.rest[1])
        print("ready", flush=True)
        for n in range(rounds):
            while not (barrier / f"go-{n}").exists():
                time.sleep(0.002)
            delivered = dispatcher.dispatch()
            # written aside, then renamed: the test reads a done file as soon
            # as it exists, never one created but not yet written
            part = barrier / f".part-{n}-{os.getpid()}"
            part.write_text(str(delivered))
            part.rename(barrier / f"done-{n}-{os.getpid()}")
        return 0
    total = dispatcher.dispatch()
    while args.until_done and f"DONE {args.until_done} " not in args.ledger.read_text():
        time.sleep(0.05)
        total += dispatcher.dispatch()
    print("delivered", total, flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
