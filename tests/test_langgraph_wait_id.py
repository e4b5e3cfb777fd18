"""A LangGraph thread's printed answer command names the question it answers
(``--wait-id`` and the checkpoint at which the thread asks): run late, or
twice, or by a second person who read the same hint, it is refused once the
thread asks its next question, instead of answering a question nobody who
ran it saw. The app's thread view answers the question it shows the same
way. Real SQLite file, a real LangGraph graph, the CLI run as printed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TypedDict

import apsw
import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.langgraph_thread import ThreadScreen
from desktop_app.config import load_settings
from desktop_app.integrations.langgraph import FlowdeskSaver
from desktop_app.integrations.langgraph.threads import get_thread
from tests.app_support import messages, settle
from tests.cli_support import as_printed, flowdesk

THREAD = "release 42"
CONFIG = {"configurable": {"thread_id": THREAD}}
HINT = re.compile(r"answer it \(the answer on standard input\): (flowdesk .*)")


class Release(TypedDict):
    got: list[str]


def ship(state: Release) -> dict[str, Any]:
    return {"got": [*state["got"], f"ship: {interrupt('Ship release 42?')}"]}


def tell(state: Release) -> dict[str, Any]:
    return {"got": [*state["got"], f"tell: {interrupt('Tell the team?')}"]}


def invoke(db: Path, start: dict[str, Any] | None) -> dict[str, Any]:
    """One run of the thread's program: two questions, one after the other."""
    graph = StateGraph(Release).add_node(ship).add_node(tell)
    graph = graph.add_edge(START, "ship").add_edge("ship", "tell")
    with FlowdeskSaver.open(db) as saver:
        out: dict[str, Any] = graph.compile(checkpointer=saver).invoke(
            start, CONFIG, durability="sync"
        )
    return out


def asks(db: Path) -> tuple[str, list[Any]]:
    shown = json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)
    return shown["status"], [i["value"] for i in shown["pending_interrupts"]]


def printed_answer(db: Path) -> str:
    listed = flowdesk(db, "waiting")
    assert listed.returncode == 0, listed.stderr
    (hint,) = HINT.findall(listed.stdout)
    return hint


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "lg.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    return db


@pytest.mark.scenario("S95")
def test_the_printed_answer_run_twice_does_not_answer_the_threads_next_question(db: Path) -> None:
    (asked,) = invoke(db, {"got": []})["__interrupt__"]
    first = printed_answer(db)
    with FlowdeskSaver.open(db) as saver:
        thread = get_thread(saver.store, saver.scope, THREAD)
    # the question is named by LangGraph's own id of the interrupt
    assert thread is not None and thread.wait_id == asked.id
    assert first.endswith(f" - --wait-id {asked.id}"), first
    done = as_printed(first, {**os.environ}, input="yes\n")
    assert done.returncode == 0, done.stderr
    assert f"langgraph thread {THREAD} answered" in done.stdout
    # its program goes on with the answer and asks the next question
    assert invoke(db, None)["__interrupt__"]
    assert asks(db) == ("waiting", ["Tell the team?"])

    # the same command again (a second person, a shell's history): refused
    late = as_printed(first, {**os.environ}, input="no\n")
    assert late.returncode == 1, (late.stdout, late.stderr)
    assert "it asks another question now" in late.stderr, late.stderr
    assert "nothing was stored" in late.stderr
    assert asks(db) == ("waiting", ["Tell the team?"])  # nothing answered it

    # a mistyped id is refused the same way, naming where the thread asks
    typo = flowdesk(db, "answer", THREAD, "no", "--wait-id", "1f0-not-a-checkpoint")
    assert typo.returncode == 1 and "1f0-not-a-checkpoint" in typo.stderr, typo.stderr
    assert asks(db) == ("waiting", ["Tell the team?"])

    # the command printed now answers the question asked now; scripts get
    # its id from `waiting --json` and `show -o json`
    second = printed_answer(db)
    assert second != first
    (row,) = [json.loads(line) for line in flowdesk(db, "waiting", "--json").stdout.splitlines()]
    shown = json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)
    assert row["wait_id"] == shown["wait_id"] and second.endswith(f" --wait-id {row['wait_id']}")
    assert as_printed(second, {**os.environ}, input="later\n").returncode == 0
    assert invoke(db, None)["got"] == ["ship: yes", "tell: later"]


class Order(TypedDict):
    where: str
    charge: str


def confirm(state: Order) -> dict[str, Any]:
    """One node, two questions: both are asked at one checkpoint."""
    where = interrupt("Ship to Berlin?")
    charge = interrupt("Charge the card 500 EUR?")
    return {"where": where, "charge": charge}


def invoke_order(db: Path, start: dict[str, Any] | None) -> dict[str, Any]:
    graph = StateGraph(Order).add_node(confirm).add_edge(START, "confirm")
    with FlowdeskSaver.open(db) as saver:
        out: dict[str, Any] = graph.compile(checkpointer=saver).invoke(
            start, CONFIG, durability="sync"
        )
    return out


@pytest.mark.scenario("S95")
def test_the_printed_answer_run_twice_does_not_answer_the_next_question_of_the_same_node(
    db: Path,
) -> None:
    """A new user's report: a node that calls ``interrupt()`` twice asks both
    questions at one checkpoint, and the wait id was the checkpoint's, so the
    answer command printed for "Ship to Berlin?", run again, was taken as
    the answer to "Charge the card 500 EUR?"."""
    assert invoke_order(db, {"where": "", "charge": ""})["__interrupt__"]
    first = printed_answer(db)
    assert as_printed(first, {**os.environ}, input="yes\n").returncode == 0
    assert invoke_order(db, None)["__interrupt__"]
    assert asks(db) == ("waiting", ["Charge the card 500 EUR?"])
    second = printed_answer(db)
    assert second != first

    late = as_printed(first, {**os.environ}, input="yes\n")
    assert late.returncode == 1, (late.stdout, late.stderr)
    assert "it asks another question now" in late.stderr, late.stderr
    assert asks(db) == ("waiting", ["Charge the card 500 EUR?"])  # nothing answered it

    assert as_printed(second, {**os.environ}, input="no\n").returncode == 0
    assert invoke_order(db, None) == {"where": "yes", "charge": "no"}


def test_the_json_of_a_waiting_thread_gives_its_answer_command_which_works_as_given(
    db: Path,
) -> None:
    """A new user's report: `show -o json` and `waiting --json` of a waiting
    thread gave its wait_id but no command (a flow run's and an agent
    run's JSON give theirs): a script had to build it. Both give the
    command the text prints; run as given, it answers; after the thread
    went on, neither offers one for a thread that does not wait."""
    assert invoke(db, {"got": []})["__interrupt__"]
    (row,) = [json.loads(line) for line in flowdesk(db, "waiting", "--json").stdout.splitlines()]
    shown = json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)
    assert row["command"] == shown["command"] == printed_answer(db)
    assert as_printed(row["command"], {**os.environ}, input="yes\n").returncode == 0
    assert json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)["command"] is None
    assert invoke(db, None)["__interrupt__"]  # the next question
    shown = json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)
    assert as_printed(shown["command"], {**os.environ}, input="later\n").returncode == 0
    assert invoke(db, None)["got"] == ["ship: yes", "tell: later"]
    assert json.loads(flowdesk(db, "show", THREAD, "-o", "json").stdout)["command"] is None


def test_an_answer_without_wait_id_goes_to_the_question_asked_when_it_runs(db: Path) -> None:
    assert invoke(db, {"got": []})["__interrupt__"]
    assert flowdesk(db, "answer", THREAD, "yes").returncode == 0
    assert invoke(db, None)["__interrupt__"]
    assert flowdesk(db, "answer", THREAD, "no").returncode == 0
    assert invoke(db, None)["got"] == ["ship: yes", "tell: no"]


async def test_the_thread_view_answers_only_the_question_it_shows(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the view keeps showing what it read (no poll reads the thread again)
    monkeypatch.setattr(FlowdeskApp, "POLL_S", 3600.0)
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    assert invoke(db, {"got": []})["__interrupt__"]
    app = FlowdeskApp(settings)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ThreadScreen)
        assert "Ship release 42?" in str(app.screen.query_one("#thread-head").render())
        # meanwhile someone answers it from a shell and its program asks the next one
        assert as_printed(printed_answer(db), {**os.environ}, input="yes\n").returncode == 0
        assert invoke(db, None)["__interrupt__"]
        await pilot.press("a")
        await pilot.press(*"no")
        await pilot.press("enter")
        await settle(pilot)
        refused = messages(app, "error")
        assert any("it asks another question now" in m for m in refused), messages(app)
        # the view reads the thread again: it shows the question asked now
        await settle(pilot)
        head = str(app.screen.query_one("#thread-head").render())
        assert "Tell the team?" in head and "Ship release 42?" not in head, head
    assert asks(db) == ("waiting", ["Tell the team?"])


def test_an_answer_to_a_checkpoint_changed_outside_flowdesk_is_refused_and_stores_nothing(
    db: Path,
) -> None:
    """A new user's report: `flowdesk answer` on a thread whose checkpoint was
    damaged stored the answer (the thread turned `answered`), and only its
    program, run again, failed. The answer command checks the checkpoint it
    answers first: refused, the thread still waits, nothing stored."""
    assert invoke(db, {"got": []})["__interrupt__"]
    with FlowdeskSaver.open(db) as saver:
        thread = get_thread(saver.store, saver.scope, THREAD)
        forged = saver.serde.dumps_typed({"forged": True})[1]
    assert thread is not None and thread.checkpoint_id
    conn = apsw.Connection(str(db))  # no Flowdesk process has the file open
    changed = conn.execute(
        "UPDATE langgraph_checkpoints SET checkpoint=? WHERE thread_id=? AND checkpoint_id=?",
        (forged, THREAD, thread.checkpoint_id),
    )
    assert conn.changes() == 1, changed
    conn.close()

    said = flowdesk(db, "answer", THREAD, "yes")
    assert said.returncode != 0, said.stdout
    assert "outside Flowdesk" in said.stderr and thread.checkpoint_id in said.stderr, said.stderr
    assert "answered" not in said.stdout
    with FlowdeskSaver.open(db) as saver:
        after = get_thread(saver.store, saver.scope, THREAD)
        resumes = saver.store.query(
            lambda tx: tx.fetchall(
                "SELECT count(*) FROM langgraph_writes WHERE thread_id=? AND channel='__resume__'",
                (THREAD,),
            )
        )
    assert after is not None and after.status == "waiting"
    assert resumes == [(0,)]
