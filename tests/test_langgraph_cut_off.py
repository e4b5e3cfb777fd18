"""A new user's report: a LangGraph node killed with SIGKILL after its side
effect ran again on resume (LangGraph keeps only the writes of nodes that
finished), and ``show`` said only "interrupted"; a node that raised was
shown the same way, though LangGraph had stored its error. ``show`` names
the node cut off and says what may happen twice, or the node that raised
and its error, in text and in ``-o json``. Real SQLite file, a real graph
in a real process, SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import REPO, flowdesk

PROGRAM = """
import os, sys
from typing import TypedDict
from langgraph.graph import START, StateGraph
from desktop_app.integrations.langgraph import FlowdeskSaver

db, effects, how = sys.argv[1], sys.argv[2], sys.argv[3]


class Order(TypedDict, total=False):
    charged: bool


def prepare(state: Order) -> dict:
    return {}


def charge(state: Order) -> dict:
    with open(effects, "a") as f:
        f.write("charge\\n")
    if how == "kill":
        os.kill(os.getpid(), 9)  # after the side effect, before the node returns
    if how.startswith("raise"):
        raise RuntimeError("card declined")
    return {"charged": True}


graph = StateGraph(Order).add_node(prepare).add_node(charge)
graph = graph.add_edge(START, "prepare").add_edge("prepare", "charge").compile
config = {"configurable": {"thread_id": "order-7"}}
with FlowdeskSaver.open(db) as saver:
    app = graph(checkpointer=saver)
    first = app.get_state(config).created_at is None
    try:
        print(app.invoke({} if first else None, config, durability="sync"))
    except RuntimeError:
        if how != "raise-live":
            raise
        print("raised", flush=True)
        sys.stdin.read()  # a program that goes on (a server): until the test closes stdin
"""


def program(
    tmp_path: Path, db: Path, effects: Path, how: str, source: str = PROGRAM, **env: str
) -> subprocess.CompletedProcess[str]:
    """The graph program ``source`` run in a process of its own (``how``:
    what its side-effect node does after its side effect)."""
    script = tmp_path / "program.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, str(script), str(db), str(effects), how],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        timeout=120,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "lg.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    return db


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, db: Path) -> Path | str:
    """A SQLite file or a PostgreSQL database with the schema applied."""
    return request.getfixturevalue("pg_url") if request.param == "postgres" else db


def _status(db: Path | str, thread: str) -> str:
    listed = flowdesk(db, "runs", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return {r["run_id"]: r["status"] for r in json.loads(listed.stdout)}[thread]


def test_a_node_killed_after_its_side_effect_is_named_and_said_to_maybe_happen_twice(
    tmp_path: Path, db: Path
) -> None:
    effects = tmp_path / "effects.log"
    killed = program(tmp_path, db, effects, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    shown = flowdesk(db, "show", "order-7")
    assert shown.returncode == 0, shown.stderr
    assert "status interrupted" in shown.stdout
    assert (
        "cut off: node charge had not finished when its process stopped; its program runs it "
        "again from the start, so what ran before the stop (a payment, a message) may happen "
        "twice: Flowdesk cannot tell whether it did"
    ) in shown.stdout, shown.stdout
    as_json = json.loads(flowdesk(db, "show", "order-7", "-o", "json").stdout)
    assert (as_json["cut_off_nodes"], as_json["error"]) == (["charge"], None)

    # what show said happens: the resume runs the node again from its start
    done = program(tmp_path, db, effects, "finish")
    assert done.returncode == 0, done.stderr
    assert effects.read_text().splitlines() == ["charge", "charge"]
    after = flowdesk(db, "show", "order-7")
    assert "status completed" in after.stdout and "cut off" not in after.stdout
    assert json.loads(flowdesk(db, "show", "order-7", "-o", "json").stdout)["cut_off_nodes"] == []


def test_a_node_that_raised_is_shown_with_its_error(tmp_path: Path, db: Path) -> None:
    effects = tmp_path / "effects.log"
    failed = program(tmp_path, db, effects, "raise")
    assert failed.returncode == 1 and "card declined" in failed.stderr
    shown = flowdesk(db, "show", "order-7")
    assert shown.returncode == 0, shown.stderr
    assert "failed: node charge raised RuntimeError('card declined'); its program runs it " in (
        shown.stdout
    ), shown.stdout
    assert "cut off" not in shown.stdout  # it finished: by raising
    as_json = json.loads(flowdesk(db, "show", "order-7", "-o", "json").stdout)
    assert as_json["error"] == "node charge raised RuntimeError('card declined')"
    assert as_json["cut_off_nodes"] == []


@pytest.mark.scenario("S107")
def test_a_thread_whose_node_raised_is_failed_until_its_program_runs_it_again(
    tmp_path: Path, database: Path | str
) -> None:
    """A new user's report: a thread whose node raised showed `running` while
    its program lived on and `interrupted` after, never `failed`. It is
    `failed` in `runs` (and `runs --status failed`) and `show`, whose printed
    call, run by the program, runs the node again (its side effect twice,
    as `show` says) and completes the thread."""
    effects = tmp_path / "effects.log"
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    live = subprocess.Popen(
        [sys.executable, str(script), str(database), str(effects), "raise-live"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert live.stdout is not None and live.stdout.readline() == "raised\n"
        assert _status(database, "order-7") == "failed"  # its program lives: not running
    finally:
        _, err = live.communicate("", timeout=60)
    assert live.returncode == 0, err
    assert _status(database, "order-7") == "failed"  # nor interrupted once it ended
    listed = flowdesk(database, "runs", "--status", "failed", "-o", "json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["order-7"], listed.stdout
    shown = flowdesk(database, "show", "order-7")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "langgraph thread order-7  status failed", shown.stdout
    assert lines[1].startswith("failed: node charge raised RuntimeError('card declined')")
    hint = "its program continues the thread with "
    call = next(line for line in lines if line.startswith(hint)).removeprefix(hint)
    assert json.loads(flowdesk(database, "show", "order-7", "-o", "json").stdout)["status"] == (
        "failed"
    )
    refused = flowdesk(database, "answer", "order-7", "yes")
    assert refused.returncode != 0 and "is failed, not waiting" in refused.stderr

    # the program runs the call as printed (its compiled graph is `app`):
    # the node again, then the end
    assert call.startswith("graph.invoke(None, "), call
    source = PROGRAM.replace(
        'app.invoke({} if first else None, config, durability="sync")',
        call.replace("graph.", "app.", 1),
    )
    assert source != PROGRAM, call
    done = program(tmp_path, database, effects, "finish", source)
    assert done.returncode == 0, done.stderr
    assert effects.read_text().splitlines() == ["charge", "charge"]
    assert _status(database, "order-7") == "completed"


FAN_OUT = """
import operator, os, sys
from typing import Annotated, TypedDict
from langgraph.graph import START, StateGraph
from langgraph.types import Send, interrupt
from desktop_app.integrations.langgraph import FlowdeskSaver

db, effects, how = sys.argv[1], sys.argv[2], sys.argv[3]


class Batch(TypedDict, total=False):
    done: Annotated[list, operator.add]


def fan(state: Batch) -> list:
    return [Send("work", {"item": i}) for i in range(3)]


def work(state: dict) -> dict:
    if state["item"] == 1:
        with open(effects, "a") as f:
            f.write("work 1\\n")
        if how == "kill":
            os.kill(os.getpid(), 9)
        if how == "raise":
            raise ValueError("bad 1")
    return {"done": [state["item"]]}


def ask(state: Batch) -> dict:
    answer = interrupt("ship it?")
    with open(effects, "a") as f:
        f.write(f"ship {answer}\\n")
    if how == "kill":
        os.kill(os.getpid(), 9)
    return {"done": [answer]}


graph = StateGraph(Batch).add_node(work).add_node(ask)
if how.startswith("ask") or os.environ.get("ASK"):
    graph = graph.add_edge(START, "ask")
else:
    graph = graph.add_conditional_edges(START, fan)
config = {"configurable": {"thread_id": "batch-3"}}
with FlowdeskSaver.open(db) as saver:
    app = graph.compile(checkpointer=saver)
    first = app.get_state(config).created_at is None
    print(app.invoke({"done": []} if first else None, config, durability="sync"))
"""


def fan_out(tmp_path: Path, db: Path, effects: Path, how: str, **env: str) -> Any:
    return program(tmp_path, db, effects, how, FAN_OUT, **env)


def test_a_send_task_killed_or_raising_is_named_with_its_index(tmp_path: Path, db: Path) -> None:
    """The second tryout's report: a `Send` fan-out's task cut off by a
    SIGKILL, or raising, was not named (`cut_off_nodes` empty, no `failed`)."""
    effects = tmp_path / "effects.log"
    killed = fan_out(tmp_path, db, effects, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    as_json = json.loads(flowdesk(db, "show", "batch-3", "-o", "json").stdout)
    assert "work (Send 1)" in as_json["cut_off_nodes"], as_json
    shown = flowdesk(db, "show", "batch-3").stdout
    assert "work (Send 1)" in shown and "may happen twice" in shown, shown

    other = tmp_path / "other.db"
    assert flowdesk(other, "db", "apply").returncode == 0
    failed = fan_out(tmp_path, other, effects, "raise")
    assert failed.returncode == 1 and "bad 1" in failed.stderr
    as_json = json.loads(flowdesk(other, "show", "batch-3", "-o", "json").stdout)
    assert as_json["error"] == "node work (Send 1) raised ValueError('bad 1')", as_json
    shown = flowdesk(other, "show", "batch-3").stdout
    assert (
        "failed: node work (Send 1) raised ValueError('bad 1'); its program runs it again from "
        "the start, so what it did before (a payment, a message) may happen twice"
    ) in shown, shown


def test_a_node_killed_after_its_answer_is_named_cut_off(tmp_path: Path, db: Path) -> None:
    """The second tryout's report: a node resumed with its answer and killed
    mid side effect was not named (its interrupt and answer, stored at the
    checkpoint, were taken for a result)."""
    effects = tmp_path / "effects.log"
    asked = fan_out(tmp_path, db, effects, "ask")
    assert asked.returncode == 0, asked.stderr
    assert flowdesk(db, "answer", "batch-3", "yes").returncode == 0
    killed = fan_out(tmp_path, db, effects, "kill", ASK="1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert effects.read_text().splitlines() == ["ship yes"]
    as_json = json.loads(flowdesk(db, "show", "batch-3", "-o", "json").stdout)
    assert (as_json["status"], as_json["cut_off_nodes"]) == ("interrupted", ["ask"]), as_json
    done = fan_out(tmp_path, db, effects, "ask")
    assert done.returncode == 0, done.stderr
    assert effects.read_text().splitlines() == ["ship yes", "ship yes"]  # as show said


def test_a_task_that_raised_then_finished_on_its_rerun_is_not_shown_failed(db: Path) -> None:
    """The error a task stored stays at the checkpoint after its rerun
    finished (while another task of the step was cut off): it is not
    reported as failed, and the task is not reported cut off."""
    from langgraph.checkpoint.base import empty_checkpoint

    from desktop_app.integrations.langgraph import FlowdeskSaver

    with FlowdeskSaver.open(db) as saver:
        base = {"configurable": {"thread_id": "step-2", "checkpoint_ns": ""}}
        checkpoint = {**empty_checkpoint(), "updated_channels": ["branch:to:a", "branch:to:b"]}
        config = saver.put(base, checkpoint, {"source": "loop", "step": 1}, {})
        saver.put_writes(
            config, [("__error__", ValueError("first try"))], "task-a", "~__pregel_pull, a"
        )
        assert saver.stopped_at("step-2") == (["b"], [("a", "ValueError('first try')")])
        saver.put_writes(config, [("out", 1)], "task-a", "~__pregel_pull, a")  # its rerun
        assert saver.stopped_at("step-2") == (["b"], [])


def test_a_node_whose_error_handler_takes_its_exception_does_not_fail_the_thread(
    db: Path,
) -> None:
    """LangGraph routes a node's exception to its ``error_handler`` node and
    the graph goes on: the thread is not `failed` while the handler runs
    (seen from inside it) and completes."""
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    from desktop_app.integrations.langgraph import FlowdeskSaver
    from desktop_app.integrations.langgraph.threads import get_thread

    class Order(TypedDict, total=False):
        note: str

    seen: list[str] = []

    with FlowdeskSaver.open(db) as saver:

        def charge(state: Order) -> Order:
            raise RuntimeError("card declined")

        def fallback(state: Order) -> Order:
            thread = get_thread(saver.store, saver.scope, "handled")
            seen.append(thread.status if thread is not None else "none")
            return {"note": "charged later"}

        graph = StateGraph(Order).add_node("charge", charge, error_handler=fallback)
        app = graph.add_edge(START, "charge").compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "handled"}}
        assert app.invoke({}, config, durability="sync") == {"note": "charged later"}
        assert seen == ["running"]
        final = get_thread(saver.store, saver.scope, "handled")
        assert final is not None and final.status == "completed"
