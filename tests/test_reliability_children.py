"""Child runs are journaled in the parent, not re-derived from its run id (S61)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.agent.models import ScriptedModel
from desktop_app.agent.runtime import Agent, agent_step
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver


class Q(BaseModel):
    question: str
    answer: str | None = None
    n: int = 0


class Broken(Exception):
    retryable = False


def _quiz(agent: Agent, fail: dict[str, bool], version: str = "1"):
    ask = agent_step(agent, lambda s: s.question, into="answer")

    def ask_then_maybe_fail(s: Q, ctx) -> dict:
        out = ask(s, ctx)
        if fail["on"]:
            raise Broken("the step failed after its child answered")
        return out

    return (
        FlowBuilder("quiz", Q, version=version)
        .step("ask", ask_then_maybe_fail)
        .step("count", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )


@pytest.mark.scenario("S61")
def test_agent_child_reattached_by_replay_fork_and_upgrade_fork(db_path):
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    model = ScriptedModel(["Paris.", "a second, paid answer"])
    agent = Agent("geo", model, astore)
    fail = {"on": True}
    engine = Engine(store, flows=[_quiz(agent, fail)])
    first = engine.run("quiz", Q(question="Capital of France?"))
    assert first.status == "failed" and model.calls == 1
    fail["on"] = False

    replayed = engine.replay(f"{first.run_id}:0")  # from before the child started
    assert replayed.status == "completed" and replayed.state.answer == "Paris."
    forked = engine.fork(f"{first.run_id}:{first.revision}", {"n": 10})
    assert forked.status == "completed" and forked.state.answer == "Paris."
    assert forked.state.n == 11

    upgraded = Engine(store, flows=[_quiz(agent, fail, version="2")])
    moved = upgraded.fork_onto_current(first.run_id)
    assert moved.status == "completed" and moved.state.answer == "Paris."
    assert store.get_run(first.run_id).status == "canceled"

    same = upgraded.replay(f"{moved.run_id}:0")
    assert same.status == "completed"
    assert model.calls == 1  # never a second model call
    children = astore.list()
    assert len(children) == 1 and children[0].status == "done"
    assert children[0].parent_run_id == first.run_id
    journal = store.latest(moved.run_id).meta["children"]
    assert journal == {"ask": [{"id": f"{first.run_id}:ask", "kind": "agent"}]}
    store.close()


@pytest.mark.scenario("S61")
def test_child_flow_reattached_and_several_children_per_step(db_path):
    store = open_store(db_path)
    executed: Counter[str] = Counter()
    fail = {"on": True}

    class C(BaseModel):
        text: str
        out: str | None = None

    def work(s: C) -> dict:
        executed[s.text] += 1
        return {"out": s.text.upper()}

    child = FlowBuilder("child", C).step("work", work).compile()
    engine = Engine(store, flows=[child])

    def spawn(s: Q, ctx) -> dict:
        one = engine.run_child(ctx, "child", {"text": "one"})
        two = engine.run_child(ctx, "child", {"text": "two"})
        if fail["on"]:
            raise Broken("after both children")
        return {"answer": f"{one.state.out}+{two.state.out}"}

    parent = FlowBuilder("parent", Q).step("spawn", spawn).compile()
    engine.register(parent)
    first = engine.run("parent", Q(question="?"))
    assert first.status == "failed"
    fail["on"] = False
    again = engine.replay(f"{first.run_id}:0")
    assert again.status == "completed" and again.state.answer == "ONE+TWO"
    resumed = engine.resume(first.run_id)  # the same run re-executes the step
    assert resumed.status == "completed"
    assert executed == {"one": 1, "two": 1}
    kids = store.list_runs(flow_name="child")
    assert sorted(r.run_id for r in kids) == [f"{first.run_id}:spawn", f"{first.run_id}:spawn:1"]
    assert all(r.parent_run_id == first.run_id for r in kids)
    store.close()


@pytest.mark.scenario("S61")
def test_canceling_a_parent_cancels_its_children(db_path):
    store = open_store(db_path)
    astore = SqliteAgentStore(store)
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "Which city?"}}])
    agent = Agent("geo", model, astore)

    class C(BaseModel):
        answer: str | None = None

    child = FlowBuilder("waits", C).await_input("ask", "answer", prompt="?").compile()
    engine = Engine(store, flows=[child])
    ask = agent_step(agent, lambda s: s.question, into="answer")

    def spawn(s: Q, ctx) -> dict:
        engine.run_child(ctx, "waits", {})
        return ask(s, ctx)  # the agent asks a person: the step fails, the child waits

    engine.register(FlowBuilder("parent", Q).step("spawn", spawn).compile())
    res = engine.run("parent", Q(question="Book a trip"))
    assert res.status == "failed"
    flow_child = f"{res.run_id}:spawn"
    agent_child = f"{res.run_id}:spawn:1"
    assert store.get_run(flow_child).status == "waiting"
    assert astore.get(agent_child).status == "input_required"
    engine.cancel(res.run_id)
    assert store.get_run(flow_child).status == "canceled"
    assert astore.get(agent_child).status == "canceled"
    store.close()


CHILDREN_WORKER = Path(__file__).resolve().parent / "children_worker.py"


def _children_worker(db: Path, log: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return cli_forkserver.run_argv(
        [sys.executable, str(CHILDREN_WORKER), str(db), str(log), mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.scenario("S61")
@pytest.mark.parametrize("mode", ["upgrade", "resume"])
def test_killed_parent_reattaches_to_its_agent_child_in_a_new_process(db_path, tmp_path, mode):
    log = tmp_path / "calls.log"
    killed = _children_worker(db_path, log, "start")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert log.read_text().splitlines() == ["model-call"]
    after = _children_worker(db_path, log, mode)
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("status completed")
    assert log.read_text().splitlines() == ["model-call"]  # no second paid call
    store = open_store(db_path)
    children = SqliteAgentStore(store).list()
    assert len(children) == 1 and children[0].status == "done"
    runs = {r.flow_version.split("+")[0]: r for r in store.list_runs(flow_name="trip")}
    if mode == "upgrade":
        assert runs["1"].status == "canceled" and runs["2"].status == "completed"
    else:
        assert list(runs) == ["1"] and runs["1"].status == "completed"
    store.close()
