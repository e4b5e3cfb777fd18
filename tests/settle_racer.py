"""One side of a race over an intent a dead dispatcher left ``sending``
(tests/test_settle_race_processes.py): a long-lived process the parent
drives round by round on stdin, releasing every side at one instant by
creating the file ``<GO>.<round>``.

Usage: settle_racer.py cancel DB GO SINK
       settle_racer.py cancel-blind DB GO SINK
       settle_racer.py dispatch DB GO SINK

DB: a SQLite path or a ``postgresql://`` URL. SINK: the destination ``mail``
(:class:`FileMailer`): each mail sent is a line appended to SINK.

``cancel``: for each line ``<round> <run_id> <delay_us> <how>``: prints
``ready <round>``, waits for GO and ``delay_us`` microseconds more, then
cancels the run: ``how`` ``api``: ``Engine.cancel_withdrawing(run_id)``,
printing ``{"withdrawn": n, "made": n, "unknown": n, "in_flight": n}`` or
``{"refused": "<RunStateError message>"}``; ``how`` ``cli``: the
``flowdesk`` command's own entry point with ``--db DB cancel RUN_ID``,
printing ``{"code": ..., "out": ..., "err": ...}``. The mailer's lookup is
registered (:func:`register_lookup`), as a program with its own
destinations does, so a cancel can settle what it withdrew mid-send;
``cancel-blind`` cancels the same way without it (no destination to ask).

``dispatch``: for each line ``<round> <run_id> <delay_us>``: prints
``ready <round>``, waits for GO and ``delay_us`` microseconds more, then
makes one :class:`Dispatcher` pass (it reconciles the interrupted intent:
asks the mailer, sends it if the mailer lacks it); prints
``{"delivered": n}``.

``end`` on stdin stops either.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.errors import RunStateError
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.outbox import Dispatcher, register_lookup
from tests.ownership_racer import open_db
from tests.race_worker import FileSink


class Mails(BaseModel):
    n: int = 0


def mail_flow() -> Any:
    """Queues one mail (destination ``mail``), then waits for an answer."""

    def queue(state: Mails, ctx: Any) -> dict[str, int]:
        ctx.send("mail", {"to": "ann@example.com"})
        return {"n": 1}

    def wait(state: Mails, ctx: Any) -> dict[str, int]:
        ctx.interrupt("anything else?")
        return {}

    return FlowBuilder("mails", Mails).step("queue", queue).step("wait", wait).chain().compile()


class FileMailer(FileSink):
    """The destination ``mail``: a mail sent is its key appended to a file
    (fsync'd), so the parent counts the effects made."""

    receipt = "mailed"


def wait_go(go: Path) -> None:
    while not go.exists():
        threading.Event().wait(0.0002)  # the parent creates GO for every side at once


def spin(delay_us: int) -> None:
    until = time.perf_counter() + delay_us / 1e6
    while time.perf_counter() < until:
        pass


def cancel(db: str, engine: Engine, run_id: str, how: str) -> dict[str, Any]:
    if how == "api":
        try:
            done = engine.cancel_withdrawing(run_id)
        except RunStateError as exc:
            return {"refused": str(exc)}
        return {
            "withdrawn": len(done.withdrawn),
            "made": len(done.made),
            "unknown": len(done.unknown),
            "in_flight": len(done.in_flight),
        }
    from desktop_app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, "cancel", run_id])
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def main() -> int:
    mode, db, go, sink = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    store = open_db(db)
    mailer = FileMailer(sink)
    if mode != "cancel-blind":
        register_lookup("mail", lambda _store: mailer)
    engine = Engine(store, flows=[mail_flow()])
    if mode.startswith("cancel"):  # the command's first call imports what it needs: not in a round
        cancel(db, engine, "warm-up", "cli")
    for line in sys.stdin:
        words = line.split()
        if words == ["end"]:
            break
        rnd, run_id, delay = words[0], words[1], int(words[2])
        print(f"ready {rnd}", flush=True)
        wait_go(Path(f"{go}.{rnd}"))
        spin(delay)
        if mode.startswith("cancel"):
            told = cancel(db, engine, run_id, words[3])
        else:
            told = {"delivered": Dispatcher(store, {"mail": mailer}).dispatch()}
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
