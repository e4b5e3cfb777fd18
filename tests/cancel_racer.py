"""One side of a race between a user's cancel and the end of an agent run
(tests/test_cancel_race_agent_end.py): a long-lived process the parent
drives round by round on stdin, releasing both sides at one instant by
creating the file ``<GO>.<round>``.

Usage: cancel_racer.py finish DB GO
       cancel_racer.py cancel DB GO

DB: a SQLite path or a ``postgresql://`` URL.

``finish``: for each line ``<round> <run_id> <delay_us>``, starts agent run
``run_id`` (agent ``racer``) as ``flowdesk ask`` does, through
:class:`Agent`; its model prints ``ready <round>``, waits for GO and
``delay_us`` microseconds more and answers ``the answer <round>``, so
the run ends ``done`` as its executing owner ends it (``_finish``: the
owner-fenced write of ``done``) unless a cancel lands first. Prints
``done <round> <JSON>`` with what the process was told: ``{"status": ...,
"text": ..., "error": ...}`` (its response), or ``{"raised": "<type>:
<message>"}``.

``cancel``: for each line ``<round> <run_id> <delay_us> <how>``: prints
``ready <round>``, waits for GO and ``delay_us`` microseconds more (the
parent sweeps both sides' delays so the cancel lands at every point of the
finish), then cancels: ``how`` ``api``: ``Agent.cancel(run_id)``, printing
``{"canceled": true}`` or ``{"refused": "<RunStateError message>"}``;
``how`` ``cli``: the ``flowdesk`` command's own entry point with
``--db DB cancel RUN_ID``, printing ``{"code": ..., "out": ..., "err": ...}``.
``end`` on stdin stops either. The cancel side makes one warm-up call of
the command first (a cancel of a run that does not exist), so no round
pays for its imports.
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

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.errors import RunStateError
from tests.ownership_racer import agent_store, open_db

AGENT = "racer"


def wait_go(go: Path) -> None:
    while not go.exists():
        threading.Event().wait(0.0002)  # the parent creates GO for both sides at once


class GateModel(ScriptedModel):
    """Answers ``the answer <round>`` once GO exists (``ready`` printed first)."""

    def __init__(self, rnd: str, go: Path, delay_us: int) -> None:
        super().__init__([f"the answer {rnd}"])
        self.rnd, self.go, self.delay_us = rnd, go, delay_us

    def complete(self, messages: Any, tools: Any) -> Any:
        print(f"ready {self.rnd}", flush=True)
        wait_go(self.go)
        spin(self.delay_us)
        return super().complete(messages, tools)


def finish(agents: Any, rnd: str, run_id: str, go: Path, delay_us: int) -> dict[str, Any]:
    model = GateModel(rnd, go, delay_us)
    try:
        res = Agent(AGENT, model, agents).ask(f"question {rnd}", run_id=run_id)
    except Exception as exc:  # reported to the parent, which fails the round
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"status": res.status, "text": res.text, "error": res.error}


def cancel(db: str, agents: Any, run_id: str, how: str) -> dict[str, Any]:
    if how == "api":
        try:
            Agent(AGENT, ScriptedModel([]), agents).cancel(run_id)
        except RunStateError as exc:
            return {"refused": str(exc)}
        return {"canceled": True}
    from desktop_app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, "cancel", run_id])
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def spin(delay_us: int) -> None:
    until = time.perf_counter() + delay_us / 1e6
    while time.perf_counter() < until:
        pass


def main() -> int:
    mode, db, go = sys.argv[1], sys.argv[2], sys.argv[3]
    store = open_db(db)
    agents = agent_store(store)
    if mode == "cancel":  # the command's first call imports what it needs: not in a round
        cancel(db, agents, "warm-up", "cli")
    for line in sys.stdin:
        words = line.split()
        if words == ["end"]:
            break
        rnd, run_id = words[0], words[1]
        gate = Path(f"{go}.{rnd}")
        if mode == "finish":
            told = finish(agents, rnd, run_id, gate, int(words[2]))
        else:
            print(f"ready {rnd}", flush=True)
            wait_go(gate)
            spin(int(words[2]))
            told = cancel(db, agents, run_id, words[3])
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
