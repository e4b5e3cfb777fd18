"""A LangGraph graph checkpointed by FlowdeskSaver, run in its own process
by tests/test_langgraph_crash.py.

Usage: python tests/langgraph_worker.py DB COUNTS THREAD [--hang ITEM] [--call CALL]

The graph: ``plan`` → a ``Send`` per item to ``work`` (fan-out) →
``review`` (an ``interrupt()`` asking a person) → ``finish``. Every node
appends its name (``work:<item>`` for the workers) to COUNTS when it starts,
so the test counts executions. ``--hang ITEM``: the worker of ITEM hangs
(the test kills the process with SIGKILL there); ``--hang finish``: the
``finish`` node (after the answer) hangs. The first run of THREAD
starts the graph; a later one continues it (``invoke(None, config)``), or
runs ``--call``: a continuation Flowdesk printed, evaluated as printed with
``graph`` the compiled graph.
Prints one JSON line: the interrupts left and the final state.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt

from desktop_app.integrations.langgraph import FlowdeskSaver

ITEMS = ["a", "b", "c"]


class State(TypedDict, total=False):
    topic: str
    items: list[str]
    results: Annotated[list[str], operator.add]
    approved: Any
    summary: str


class Item(TypedDict):
    item: str


def build_graph(counts: str, hang: str | None = None):  # type: ignore[no-untyped-def]
    """The graph, uncompiled: nodes append their names to ``counts``; the
    worker of item ``hang`` hangs."""

    def count(name: str) -> None:
        fd = os.open(counts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{name}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def plan(state: State) -> State:
        count("plan")
        return {"items": ITEMS}

    def fan_out(state: State) -> list[Send]:
        return [Send("work", {"item": item}) for item in state["items"]]

    def work(arg: Item) -> State:
        count(f"work:{arg['item']}")
        if arg["item"] == hang:
            time.sleep(3600)  # killed here
        return {"results": [arg["item"].upper()]}

    def review(state: State) -> State:
        count("review")
        answer = interrupt({"question": "approve these results?", "results": state["results"]})
        return {"approved": answer}

    def finish(state: State) -> State:
        count("finish")
        if hang == "finish":
            time.sleep(3600)  # killed here
        return {"summary": f"{sorted(state['results'])} approved={state['approved']}"}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("review", review)
    g.add_node("finish", finish)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["work"])
    g.add_edge("work", "review")
    g.add_edge("review", "finish")
    g.add_edge("finish", END)
    return g


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("counts")
    p.add_argument("thread")
    p.add_argument("--hang")
    p.add_argument("--call")
    a = p.parse_args()
    g = build_graph(a.counts, a.hang)
    config = {"configurable": {"thread_id": a.thread, "tenant_id": "acme", "session_id": "s-1"}}
    with FlowdeskSaver.open(a.db) as saver:
        graph = g.compile(checkpointer=saver)
        started = graph.get_state(config).created_at is not None
        # "sync": each step's checkpoint is stored before the next step starts
        # (LangGraph's default, "async", may lose it in a crash: then the
        # step's finished tasks run again)
        if a.call is not None:  # the program runs what Flowdesk printed
            result = eval(a.call, {"graph": graph})
        else:
            result = graph.invoke(None if started else {"topic": "t"}, config, durability="sync")
    interrupts = [i.value for i in result.get("__interrupt__", [])]
    print(json.dumps({"interrupts": interrupts, "summary": result.get("summary")}), flush=True)


if __name__ == "__main__":
    main()
