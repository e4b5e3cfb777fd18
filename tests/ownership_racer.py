"""One of several processes racing to take over the same work (the
ownership races, S76/S77). The parent starts the racers once, then for each
round writes ``<round> <arg>`` to every racer's stdin; each racer prepares
(opens what it needs), prints ``ready <round>``, waits until the parent
creates ``<SINK>.go.<round>`` (all racers are released at the same instant),
acts, and prints ``done <round> <outcome>``. ``end`` on stdin stops it.

Usage: ownership_racer.py MODE DB SINK

Modes (DB: a SQLite path or a ``postgresql://`` URL):

``agent``   ``Agent.resume(arg)``: its tool appends to SINK. Outcome ``ok``
            or ``leased`` (another process holds the run: nothing ran here).
``flow``    ``Engine.resume(arg)`` of the ``race`` flow: its step appends to
            SINK. Outcome ``ok`` or ``leased``.
``recover`` ``Engine.recover()`` (``resume --all``): outcome ``ran N``.
``worker``  PostgreSQL only: one worker pass, ``claim_for_worker`` then each
            claimed run resumed: outcome ``ran N``.
``dispatch`` one outbox ``Dispatcher.dispatch()`` pass to a destination that
            appends each idempotency key to SINK: outcome ``sent N``.
``answer``  ``Engine.resume_with(arg, True)``: a person's "yes" to the
            ``approve`` flow's question, whose next step appends to SINK.
            Outcome ``ok``, ``answered`` (the other answer stood first),
            ``leased`` (the other process carries the run on) or
            ``not waiting`` (it had finished).

Every side effect is one line ``<mode> <round> <key> <pid>`` appended with
O_APPEND and fsynced, so the parent counts exactly what ran.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel

from desktop_app.errors import RunLeasedError

RACE_AGENT = "racer"


class N(BaseModel):
    n: int = 0


def record(sink: Path, line: str) -> None:
    fd = os.open(sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def race_flow(step: Any) -> Any:
    """The flow every racer (and the parent's crashing copy) compiles: one
    step ``work``, so all of them share its version."""
    from desktop_app.flow import FlowBuilder

    return FlowBuilder("race", N).step("work", step).step("send", _send).chain().compile()


class Approval(BaseModel):
    ok: bool | None = None
    n: int = 0


def approve_flow(step: Any) -> Any:
    """A question a person answers yes to, then the step ``work``."""
    from desktop_app.flow import FlowBuilder

    return (
        FlowBuilder("approve", Approval)
        .await_input("ask", "ok", prompt="Ship it?")
        .step("work", step)
        .chain()
        .compile()
    )


def _send(s: N, ctx: Any) -> dict[str, Any]:
    ctx.send("sink", {"n": s.n})
    return {}


def open_db(db: str) -> Any:
    if db.startswith("postgresql://"):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(db)
    from desktop_app.store.sqlite.store import open_store

    return open_store(db)


def agent_store(store: Any) -> Any:
    if type(store).__name__.startswith("Postgres"):
        from desktop_app.store.postgres.agent_runs import PostgresAgentStore

        return PostgresAgentStore(store)
    from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

    return SqliteAgentStore(store)


class FileSink:
    """An outbox destination: appends each key it is sent to SINK."""

    def __init__(self, path: Path, rnd: list[str]) -> None:
        self.path, self.rnd = path, rnd

    def send(self, key: str, payload: object) -> object:
        record(self.path, f"dispatch {self.rnd[0]} {key} {os.getpid()}")
        return {"key": key}

    def lookup(self, key: str) -> object | None:
        return None  # never reached: no intent of these rounds was sent before


def main() -> int:
    mode, db, sink = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    store = open_db(db)
    rnd = ["0"]

    def work(s: N, ctx: Any) -> dict[str, Any]:
        record(sink, f"flow {rnd[0]} {ctx.run_id} {os.getpid()}")
        return {"n": s.n + 1}

    act: Any
    if mode == "agent":
        from desktop_app.agent import Agent, ScriptedModel, tool

        @tool
        def lookup(q: str) -> str:
            """Look something up."""
            record(sink, f"agent {rnd[0]} {q} {os.getpid()}")
            return f"result for {q}"

        agents = agent_store(store)

        def act(arg: str) -> str:
            model = ScriptedModel([{"tool": "lookup", "args": {"q": arg}}, f"done: {arg}"])
            try:
                Agent(RACE_AGENT, model, agents, [lookup]).resume(arg)
            except RunLeasedError:
                return "leased"
            return "ok"

    elif mode == "worker":  # PostgreSQL: what a `flowdesk agent` worker claims in one pass
        from desktop_app.flow import Engine

        engine = Engine(store, flows=[race_flow(work)])
        versions = {f.name: f.version for f in engine.flows.values()}

        def act(arg: str) -> str:
            claimed = store.claim_for_worker(engine.owner, engine.lease_ttl_s, 10, flows=versions)
            for run in claimed:
                engine.resume(run.run_id)
            return f"ran {len(claimed)}"

    elif mode in ("flow", "recover"):
        from desktop_app.flow import Engine

        engine = Engine(store, flows=[race_flow(work)])

        def act(arg: str) -> str:
            if mode == "recover":
                report = engine.recover()
                return f"ran {sum(1 for _, out in report if not isinstance(out, Exception))}"
            try:
                engine.resume(arg)
            except RunLeasedError:
                return "leased"
            return "ok"

    elif mode == "answer":
        from desktop_app.errors import RunStateError, WaitAlreadyResolvedError
        from desktop_app.flow import Engine

        engine = Engine(store, flows=[approve_flow(work)])

        def act(arg: str) -> str:
            try:
                engine.resume_with(arg, True)
            except WaitAlreadyResolvedError:
                return "answered"
            except RunLeasedError:
                return "leased"
            except RunStateError:
                return "not waiting"
            return "ok"

    elif mode == "dispatch":
        from desktop_app.flow.outbox import Dispatcher

        dispatcher = Dispatcher(store, {"sink": FileSink(sink, rnd)})

        def act(arg: str) -> str:
            return f"sent {dispatcher.dispatch()}"

    else:
        raise SystemExit(f"unknown mode {mode}")

    for line in sys.stdin:
        if line.strip() == "end":
            break
        rnd[0], _, arg = line.strip().partition(" ")
        go = Path(f"{sink}.go.{rnd[0]}")
        print(f"ready {rnd[0]}", flush=True)
        while not go.exists():
            threading.Event().wait(0.0005)  # the parent creates GO for all racers at once
        print(f"done {rnd[0]} {act(arg)}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
