"""A worker that runs a flow with an outbox intent and dispatches it to the
HTTP destination; ``--kill-after-send`` SIGKILLs the process after the
destination accepted the intent and before the acknowledgement is saved.

``--no-lookup`` gives the dispatcher a destination with no ``lookup``.

Usage: python tests/outbox_worker.py DB URL [--kill-after-send] [--no-lookup]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store


class Order(BaseModel):
    amount: int = 0
    charge_key: str | None = None


class HttpDestination:
    def __init__(self, url: str, kill_after_send: bool) -> None:
        self.url = url
        self.kill_after_send = kill_after_send

    def send(self, key: str, payload: object) -> object:
        req = urllib.request.Request(
            f"{self.url}/ops",
            data=json.dumps(payload).encode(),
            method="POST",
            headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            receipt = json.loads(resp.read())
        if self.kill_after_send:
            os.kill(os.getpid(), signal.SIGKILL)  # accepted, ack not saved
        return receipt

    def lookup(self, key: str) -> object | None:
        try:
            with urllib.request.urlopen(f"{self.url}/ops/{key}", timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


class BlindHttpDestination:
    """The same destination without a ``lookup``: it cannot be asked."""

    def __init__(self, url: str) -> None:
        self.send = HttpDestination(url, kill_after_send=False).send


def flow():
    def charge(s: Order, ctx) -> dict:
        return {"charge_key": ctx.send("payments", {"amount": s.amount})}

    return (
        FlowBuilder("checkout", Order)
        .step("charge", charge)
        .step("done", lambda s: None)
        .chain()
        .compile()
    )


def main() -> int:
    db, url = sys.argv[1], sys.argv[2]
    kill = "--kill-after-send" in sys.argv
    store = open_store(db)
    engine = Engine(store, flows=[flow()])
    if not store.list_runs():
        engine.run("checkout", Order(amount=42))
    else:
        engine.recover()
    dest = BlindHttpDestination(url) if "--no-lookup" in sys.argv else HttpDestination(url, kill)
    sent = Dispatcher(store, {"payments": dest}).dispatch()  # type: ignore[dict-item]
    print("delivered", sent)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
