"""Peer engines as benchmark contenders, each run in its own worker process
(see ``_harness.Worker``); nothing here imports Flowdesk or apsw.

Install them with ``pip install -r benchmarks/requirements-peers.txt``.

* :class:`LangGraph`: a ``steps``-node linear ``StateGraph`` compiled with
  ``SqliteSaver`` on one stdlib ``sqlite3`` connection (WAL,
  ``synchronous=FULL``), invoked with ``durability="sync"`` (the checkpoint
  is written before the next step starts). Concurrency: threads sharing the
  one saver, one ``thread_id`` per invocation.
* :class:`Dbos`: a workflow of ``steps`` ``@DBOS.step()`` calls with a SQLite
  system database, DBOS's own SQLite settings (rollback journal, SQLite's
  default ``synchronous=FULL``). Concurrency: threads calling the workflow
  function, each call its own workflow.

``round(concurrency, runs)`` returns seconds per step: wall time of ``runs``
runs spread over ``concurrency`` threads, divided by ``runs * steps``.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import threaded


def available(name: str) -> bool:
    """Whether the peer ``langgraph`` or ``dbos`` can be imported."""
    import importlib.util

    module = {"langgraph": "langgraph.checkpoint.sqlite", "dbos": "dbos"}[name]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LangGraph:
    def __init__(self, steps: int = 10, folder: str | None = None) -> None:
        import sqlite3
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        class S(TypedDict):
            n: int

        self.steps = steps
        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-lg-", dir=folder)
        g = StateGraph(S)
        names = [f"s{i}" for i in range(steps)]
        for name in names:
            g.add_node(name, lambda s: {"n": s["n"] + 1})
        g.add_edge(START, names[0])
        for a, b in itertools.pairwise(names):
            g.add_edge(a, b)
        g.add_edge(names[-1], END)
        self.conn = sqlite3.connect(Path(self._dir.name) / "langgraph.db", check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.app = g.compile(checkpointer=SqliteSaver(self.conn))
        self.ids = itertools.count()

    def round(self, concurrency: int, runs: int) -> float:
        base = next(self.ids) * runs

        def job(i: int) -> None:
            cfg: Any = {"configurable": {"thread_id": f"t{base + i}"}}
            out = self.app.invoke({"n": 0}, cfg, durability="sync")
            assert out["n"] == self.steps, out

        return threaded(concurrency, runs, job) / (runs * self.steps)

    def close(self) -> None:
        self.conn.close()
        self._dir.cleanup()


class Dbos:
    def __init__(self, steps: int = 10, folder: str | None = None) -> None:
        from dbos import DBOS, DBOSConfig

        self.steps = steps
        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-dbos-", dir=folder)
        config: DBOSConfig = {
            "name": "bench",
            "system_database_url": f"sqlite:///{Path(self._dir.name) / 'dbos.sqlite'}",
        }
        DBOS(config=config)

        @DBOS.step()
        def inc(n: int) -> int:
            return n + 1

        @DBOS.workflow()
        def wf() -> int:
            n = 0
            for _ in range(steps):
                n = inc(n)
            return n

        self.wf = wf
        DBOS.launch()

    def round(self, concurrency: int, runs: int) -> float:
        def job(_i: int) -> None:
            assert self.wf() == self.steps

        return threaded(concurrency, runs, job) / (runs * self.steps)

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()
        self._dir.cleanup()
