"""A program's own flow whose side effects go to a real HTTP destination
(tests/outbox_server.py on 127.0.0.1), and one side of the race between a
``cancel`` of its completed run and a dispatcher
(tests/test_cancel_after_end.py).

Usage: posts_racer.py cancel DB GO URL
       posts_racer.py dispatch DB GO URL
       posts_racer.py deliver DB URL STALL_AFTER

``cancel``: for each line ``<round> <run_id> <delay_us> <how>``: prints
``ready <round>``, waits for the file ``<GO>.<round>`` and ``delay_us``
microseconds more, then cancels the run: ``how`` ``api``:
``Engine.cancel_withdrawing(run_id)``, then (the run had ended)
``Engine.withdraw_after_end(run_id)``, printing what it did (``withdrawn``,
``made``, ``unknown``, ``in_flight``, the run's ``status``) or
``{"refused": ...}``;
``how`` ``cli``: the ``flowdesk`` entry point ``--db DB cancel RUN_ID``,
printing ``{"code": ..., "out": ..., "err": ...}``.

``dispatch``: the same lines (``how`` unused): one :class:`Dispatcher` pass
over ``{"http": HttpPosts(URL)}``; prints ``{"delivered": n}``.

``deliver``: one dispatcher pass that, after its ``STALL_AFTER``-th POST
reached the server, stops before recording it (it sleeps until killed):
the parent kills it with ``kill -9``, leaving that intent ``sending``.

``end`` on stdin stops ``cancel`` and ``dispatch``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.errors import RunStateError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher
from tests.ownership_racer import open_db


class Posts(BaseModel):
    n: int = 5
    sent: int = 0


def posts_flow() -> Any:
    """Queues ``n`` POSTs (destination ``http``) and completes."""

    def queue(state: Posts, ctx: Any) -> dict[str, int]:
        for i in range(state.n):
            ctx.send("http", {"i": i}, key=f"{ctx.run_id}:post:{i}")
        return {"sent": state.n}

    return FlowBuilder("posts", Posts).step("queue", queue).chain().compile()


class HttpPosts:
    """The destination ``http``: POST URL/ops with ``Idempotency-Key``;
    ``lookup`` is GET URL/ops/<key> (404: not made)."""

    def __init__(self, url: str, stall_after: int = 0) -> None:
        self.url, self.stall_after, self.posted = url, stall_after, 0

    def send(self, idempotency_key: str, payload: Any) -> Any:
        req = urllib.request.Request(
            f"{self.url}/ops",
            data=json.dumps(payload).encode(),
            headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            receipt = json.loads(resp.read())
        self.posted += 1
        if self.posted == self.stall_after:
            print("stalled", flush=True)
            threading.Event().wait()  # killed here: made, never recorded
        return receipt

    def lookup(self, idempotency_key: str) -> Any | None:
        try:
            with urllib.request.urlopen(f"{self.url}/ops/{idempotency_key}", timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


def posts_made(url: str, key: str) -> int:
    """How many POSTs with ``key`` reached the server."""
    with urllib.request.urlopen(f"{url}/count/{key}", timeout=30) as resp:
        return int(json.loads(resp.read())["posts"])


def cancel(db: str, engine: Engine, run_id: str, how: str) -> dict[str, Any]:
    if how == "api":
        try:
            done = engine.cancel_withdrawing(run_id)
        except RunStateError:  # the run ended: withdraw what it left queued
            try:
                done = engine.withdraw_after_end(run_id)
            except RunStateError as exc:
                return {"refused": str(exc)}
        return {
            "withdrawn": [i.intent_id for i in done.withdrawn],
            "made": len(done.made),
            "unknown": len(done.unknown),
            "in_flight": [i.intent_id for i in done.in_flight],
            "status": done.run.status,
        }
    from desktop_app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, "cancel", run_id])
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def main() -> int:
    mode, db = sys.argv[1], sys.argv[2]
    store = open_db(db)
    if mode == "deliver":
        dest = HttpPosts(sys.argv[3], int(sys.argv[4]))
        Dispatcher(store, {"http": dest}).dispatch()
        return 0
    go, url = sys.argv[3], sys.argv[4]
    engine = Engine(store, flows=[posts_flow()])
    if mode == "cancel":  # the command's first call imports what it needs: not in a round
        cancel(db, engine, "warm-up", "cli")
    for line in sys.stdin:
        words = line.split()
        if words == ["end"]:
            break
        rnd, run_id, delay = words[0], words[1], int(words[2])
        print(f"ready {rnd}", flush=True)
        while not Path(f"{go}.{rnd}").exists():
            threading.Event().wait(0.0002)
        if delay >= 10_000:  # a wait that need not be precise
            time.sleep(delay / 1e6)
        else:
            until = time.perf_counter() + delay / 1e6
            while time.perf_counter() < until:
                pass
        if mode == "cancel":
            told = cancel(db, engine, run_id, words[3])
        else:
            told = {"delivered": Dispatcher(store, {"http": HttpPosts(url)}).dispatch()}
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
