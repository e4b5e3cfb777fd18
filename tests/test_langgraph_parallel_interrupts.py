"""A LangGraph thread whose two parallel nodes each call ``interrupt()``:
Flowdesk lists both questions (it kept only the last task's), and
``flowdesk answer`` refuses to store an answer LangGraph would give to
whichever interrupt it resumes first (a person answering question B had
answered A); its program answers them by interrupt id, and goes on."""

from __future__ import annotations

import operator
import os
import re
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests.cli_support import as_printed, flowdesk


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
    # an interrupt id as --wait-id does not pick one of them either
    by_id = flowdesk(db, "answer", "par", "x", "--wait-id", pending[0].id)
    assert by_id.returncode == 2 and "waits on 2 questions at once" in by_id.stderr

    with FlowdeskSaver.open(db) as saver:
        graph = build(saver)
        answers = {i.id: f"answer to {i.value}" for i in pending}
        done = graph.invoke(Command(resume=answers), config, durability="sync")
    assert sorted(done["got"]) == ["a:answer to question A", "b:answer to question B"]
    assert flowdesk(db, "show", "par").returncode == 0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a PostgreSQL database with the schema (``pg_url``)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "t.db")


@pytest.mark.slow
def test_show_and_waiting_offer_only_what_works_and_show_json_gives_the_ids(
    database: str,
) -> None:
    """A thread waiting on two questions at once: `show` and `waiting` once
    printed `flowdesk answer THREAD -`, which `answer` then refused (exit 2).
    They say it waits on 2 questions that its program answers by interrupt
    id, and `show -o json` gives each id with its value: the program
    answering with those ids goes on."""
    import json

    db = database
    assert flowdesk(db, "db", "apply").returncode == 0
    config = {"configurable": {"thread_id": "par-1"}}
    with FlowdeskSaver.open(db) as saver:
        graph = build(saver)
        graph.invoke({"got": []}, config, durability="sync")
        ids = {i.id: i.value for i in graph.get_state(config).interrupts}

    for command in (["show", "par-1"], ["waiting"]):
        said = flowdesk(db, *command)
        assert said.returncode == 0, said.stderr
        assert "answer par-1" not in said.stdout, said.stdout  # refused if run: not offered
        assert "it waits on 2 questions at once" in said.stdout, said.stdout
        assert "Command(resume={interrupt.id: value, ...})" in said.stdout
        assert "{'configurable': {'thread_id': 'par-1'}}" in said.stdout
    shown = flowdesk(db, "show", "par-1")
    listed = [x for x in shown.stdout.splitlines() if x.startswith("interrupt ids: ")]
    assert [set(x.removeprefix("interrupt ids: ").split(", ")) for x in listed] == [set(ids)]
    waiting = flowdesk(db, "waiting").stdout
    ids_hint = re.search(r"its interrupt ids with their values: (flowdesk .*)$", waiting, re.M)
    assert ids_hint is not None, waiting
    assert ids_hint.group(1) == f"flowdesk --db {db} show par-1 -o json"
    got = json.loads(as_printed(ids_hint.group(1), dict(os.environ)).stdout)
    pending = {p["id"]: p["value"] for p in got["pending_interrupts"]}
    assert pending == ids
    # no one wait id names both (the second tryout: it gave the checkpoint's,
    # which --wait-id then refused as naming no question)
    assert (got["wait_id"], got["command"]) == (None, None)

    with FlowdeskSaver.open(db) as saver:  # the program answers by the ids show gave
        graph = build(saver)
        answers = {i: f"answer to {v}" for i, v in pending.items()}
        done = graph.invoke(Command(resume=answers), config, durability="sync")
    assert sorted(done["got"]) == ["a:answer to question A", "b:answer to question B"]
    after = json.loads(flowdesk(db, "show", "par-1", "-o", "json").stdout)
    assert after["status"] == "completed" and after["pending_interrupts"] == []
