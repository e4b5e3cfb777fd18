"""LangGraph on Flowdesk: ``FlowdeskSaver`` against LangGraph's own
``SqliteSaver`` (langgraph-checkpoint-sqlite) on the same graph.

    python benchmarks/bench_langgraph.py [--turns 50] [--rounds 5] [--dir DIR]

The graph: one ``reply`` node appending an AI message (about 230 bytes) to a
``messages`` channel (``add_messages``); each turn invokes it with one human
message, so a conversation of ``--turns`` 50 turns ends with 100 messages.
A turn is one LangGraph step: the input checkpoint, the node's task writes
and the step's checkpoint, written with ``durability="sync"`` (stored before
``invoke`` returns). Both savers write a fresh SQLite file in WAL mode with
``synchronous=FULL`` (Flowdesk's default; ``SqliteSaver`` on a stdlib
``sqlite3`` connection set to it), each in its own worker process (two
SQLite libraries never share a process). A round runs one whole
conversation on a new thread per contender, interleaved (``_harness``).

It prints, per turn (all turns of all rounds): the wall time of ``invoke``
and the bytes the turn added to the saver's tables (the sum of ``length()``
of every stored column: logical bytes, not pages), each as mean, median and
max; the bytes of the first and last 10 turns (growth with the thread's
length); the median of the per-round ratios SqliteSaver / Flowdesk; and the
machine's load average. Without langgraph-checkpoint-sqlite
(benchmarks/requirements-peers.txt) only Flowdesk's figures are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Worker, header, interleave, ratios, stat, table
from _peers import available


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        text = f"you said: {state['messages'][-1].content} " + "x" * 200
        return {"messages": [AIMessage(text)]}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    return g.compile(checkpointer=saver)


class _Chat:
    """A contender: ``round(turns)`` runs one conversation on a new thread and
    returns per-turn seconds and bytes."""

    def __init__(self, folder: str | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="flowdesk-bench-lg-", dir=folder)
        self.path = Path(self._dir.name) / "chat.db"
        self.threads = 0

    def stored(self) -> int:
        raise NotImplementedError

    def round(self, turns: int) -> dict[str, list[float]]:
        from langchain_core.messages import HumanMessage

        self.threads += 1
        config: Any = {"configurable": {"thread_id": f"chat-{self.threads}"}}
        seconds, sizes = [], []
        before = self.stored()
        for turn in range(turns):
            t0 = time.perf_counter()
            self.app.invoke(
                {"messages": [HumanMessage(f"message {turn}")]}, config, durability="sync"
            )
            seconds.append(time.perf_counter() - t0)
            after = self.stored()
            sizes.append(float(after - before))
            before = after
        n = len(self.app.get_state(config).values["messages"])
        assert n == 2 * turns, n
        return {"seconds": seconds, "bytes": sizes}


class FlowdeskChat(_Chat):
    def __init__(self, folder: str | None = None) -> None:
        super().__init__(folder)
        from desktop_app.integrations.langgraph import FlowdeskSaver
        from desktop_app.store import migrations
        from desktop_app.store.connection import open_connection
        from desktop_app.store.sqlite.store import open_store

        conn = open_connection(self.path)
        migrations.apply(conn)
        conn.close()
        self.store = open_store(self.path)
        self.app = _graph(FlowdeskSaver(self.store))

    def stored(self) -> int:
        sums = {
            "langgraph_checkpoints": "length(checkpoint) + length(metadata) + length(type) "
            "+ length(checkpoint_id) + coalesce(length(parent_id), 0)",
            "langgraph_blobs": "coalesce(length(blob), 0) + length(type) + length(channel) "
            "+ length(version) + coalesce(length(base), 0)",
            "langgraph_writes": "length(blob) + length(type) + length(channel) + length(task_id)",
        }
        total = 0
        for name, expr in sums.items():
            row = self.store.query(
                lambda tx, name=name, expr=expr: tx.fetchone(
                    f"SELECT coalesce(sum({expr}), 0) FROM {name}"
                )
            )
            total += int(row[0])
        return total

    def close(self) -> None:
        self.store.close()
        self._dir.cleanup()


class SqliteChat(_Chat):
    def __init__(self, folder: str | None = None) -> None:
        super().__init__(folder)
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(self.conn)
        saver.setup()  # its tables (it creates them at first use otherwise)
        self.app = _graph(saver)

    def stored(self) -> int:
        a = self.conn.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata) + length(type) "
            "+ length(checkpoint_id) + coalesce(length(parent_checkpoint_id), 0)), 0) "
            "FROM checkpoints"
        ).fetchone()[0]
        b = self.conn.execute(
            "SELECT coalesce(sum(length(value) + length(type) + length(channel) "
            "+ length(task_id)), 0) FROM writes"
        ).fetchone()[0]
        return int(a) + int(b)

    def close(self) -> None:
        self.conn.close()
        self._dir.cleanup()


def _summary(values: list[float]) -> str:
    return (
        f"mean {statistics.fmean(values):,.0f}  median {statistics.median(values):,.0f}  "
        f"max {max(values):,.0f}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", help="where the databases go (default: the temp folder)")
    a = p.parse_args()
    header("LangGraph: FlowdeskSaver vs SqliteSaver, one conversation per round",
           turns=a.turns, messages=2 * a.turns, rounds=a.rounds)  # fmt: skip
    names = {"Flowdesk": "bench_langgraph.py:FlowdeskChat"}
    if available("langgraph"):
        names["SqliteSaver"] = "bench_langgraph.py:SqliteChat"
    else:
        print("  SqliteSaver: not installed (pip install -r benchmarks/requirements-peers.txt)")
    workers = {name: Worker(target, folder=a.dir) for name, target in names.items()}
    detail: dict[str, list[dict[str, list[float]]]] = {name: [] for name in names}

    def contender(name: str) -> Any:
        def one() -> float:
            got = workers[name].round(turns=a.turns)
            detail[name].append(got)
            return sum(got["seconds"]) / a.turns

        return one

    try:
        per_turn = interleave({n: contender(n) for n in names}, a.rounds)
    finally:
        for w in workers.values():
            w.close()
    rows = []
    for name in names:
        rounds = detail[name][-a.rounds :]
        ms = [s * 1000 for r in rounds for s in r["seconds"]]
        size = [b for r in rounds for b in r["bytes"]]
        first = [b for r in rounds for b in r["bytes"][:10]]
        last = [b for r in rounds for b in r["bytes"][-10:]]
        print(f"\n{name}")
        print(f"  ms per turn:    mean {statistics.fmean(ms):.2f}  "
              f"median {statistics.median(ms):.2f}  max {max(ms):.2f}")  # fmt: skip
        print(f"  bytes per turn: {_summary(size)}")
        print(f"  bytes per turn, turns 1-10: {_summary(first)}; "
              f"last 10 turns: {_summary(last)}")  # fmt: skip
        print(f"  bytes for the whole conversation: {sum(rounds[-1]['bytes']):,.0f}")
        rows.append(Row(f"{name} ms per turn", stat(per_turn[name]).fmt(1000)))
        rows.append(
            Row(f"{name} bytes per turn, last 10", f"{statistics.median(last):,.0f} (median)")
        )
    if "SqliteSaver" in names:
        cost = stat(ratios(per_turn["SqliteSaver"], per_turn["Flowdesk"]))
        rows.append(Row("SqliteSaver / Flowdesk time per turn", cost.fmt(unit="x")))
        total = [
            sum(s["bytes"]) / sum(f["bytes"])
            for s, f in zip(detail["SqliteSaver"][-a.rounds :], detail["Flowdesk"][-a.rounds :],
                            strict=True)
        ]  # fmt: skip
        rows.append(Row("SqliteSaver / Flowdesk bytes per conversation", stat(total).fmt(unit="x")))
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
