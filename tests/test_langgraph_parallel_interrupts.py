"""A LangGraph thread whose two parallel nodes each call ``interrupt()``:
Flowdesk lists both questions (it kept only the last task's), and
``flowdesk answer`` refuses to store an answer LangGraph would give to
whichever interrupt it resumes first (a person answering question B had
answered A); its program answers them by interrupt id, and goes on."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests.cli_support import flowdesk


class Got(TypedDict):
    got: Annotated[list[str], operator.add]


def ask(name: str):
    def node(state: Got) -> dict[str, list[str]]:
        return {"got": [f"{name}:{interrupt(f'question {name.upper()}')}"]}

    return node


def build(saver: FlowdeskSaver):
    g = StateGraph(Got)
    g.add_node("a", ask("a"))
    g.add_node("b", ask("b"))
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


def test_two_questions_at_once_are_both_listed_and_answered_by_id(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    config = {"configurable": {"thread_id": "par"}}
    with FlowdeskSaver.open(db) as saver:
        graph = build(saver)
        graph.invoke({"got": []}, config, durability="sync")
        pending = graph.get_state(config).interrupts
        assert sorted(i.value for i in pending) == ["question A", "question B"]
        assert sorted(get_thread(saver.store, saver.scope, "par").interrupts) == [
            "question A",
            "question B",
        ]

    shown = flowdesk(db, "show", "par")
    assert "question A" in shown.stdout and "question B" in shown.stdout, shown.stdout
    refused = flowdesk(db, "answer", "par", "ANSWER-FOR-B")
    assert refused.returncode == 2, refused.stderr
    assert "waits on 2 questions at once" in refused.stderr
    assert "nothing was stored" in refused.stderr
    by_id = flowdesk(db, "answer", "par", "x", "--wait-id", pending[0].id)
    assert by_id.returncode == 2 and "--wait-id is for flow and agent runs" in by_id.stderr

    with FlowdeskSaver.open(db) as saver:
        graph = build(saver)
        answers = {i.id: f"answer to {i.value}" for i in pending}
        done = graph.invoke(Command(resume=answers), config, durability="sync")
    assert sorted(done["got"]) == ["a:answer to question A", "b:answer to question B"]
    assert flowdesk(db, "show", "par").returncode == 0
