"""The execution context comes back whole on every path (S30)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from desktop_app.errors import CheckpointNotFoundError
from desktop_app.flow import Engine, ExecutionContext, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver

CTX = ExecutionContext(
    tenant_id="acme",
    user_id="u-1",
    session_id="sess-9",
    trace_id="0af7651916cd43dd8448eb211c80319c",
    correlation_id="corr-5",
)


class S(BaseModel):
    seen: list[dict] = []
    got: str | None = None


def record(s: S, ctx) -> dict:
    return {"seen": [*s.seen, ctx.context.model_dump()]}


def expected(run_id: str) -> dict:
    return CTX.model_copy(update={"run_id": run_id}).model_dump()


def assert_whole(engine: Engine, run_id: str) -> None:
    run = engine.status(run_id)
    assert dict(run.context) == expected(run_id)
    state = engine.get(run_id)
    assert state.seen and all(c == expected(run_id) for c in state.seen)


def wait_flow(kind: str):
    b = FlowBuilder(f"ctx-{kind}", S).step("before", record)
    if kind == "input":
        b.await_input("w", "got")
    elif kind == "signal":
        b.wait_signal("w", "sig", key="k", into="got")
    elif kind == "event":
        b.wait_event("w", "evt", into="got")
    elif kind == "timer":
        b.sleep("w", 60)
    elif kind == "interrupt":
        b.step("w", lambda s, ctx: {"got": ctx.interrupt("?"), **record(s, ctx)})
    return b.step("after", record).chain().compile()


@pytest.mark.scenario("S30")
def test_context_on_success(db_path):
    engine = Engine(open_store(db_path), flows=[wait_flow("timer")], clock=ManualClock())
    flow = FlowBuilder("ok", S).step("a", record).step("b", record).chain().compile()
    res = engine.run(flow, S(), context=CTX)
    assert res.status == "completed"
    assert_whole(engine, res.run_id)
    with pytest.raises(ValidationError):  # steps see it read-only
        CTX.tenant_id = "other"  # type: ignore[misc]
    engine.store.close()


@pytest.mark.scenario("S30")
@pytest.mark.parametrize("kind", ["input", "signal", "event", "timer", "interrupt"])
def test_context_through_each_wait_kind_and_a_restart(db_path, kind):
    clock = ManualClock()
    flow = wait_flow(kind)
    engine = Engine(open_store(db_path), flows=[flow], clock=clock)
    res = engine.run(flow.name, S(), context=CTX)
    assert res.status == "waiting"
    engine.store.close()
    engine = Engine(open_store(db_path), flows=[wait_flow(kind)], clock=clock)
    if kind in ("input", "interrupt"):
        engine.resume_with(res.run_id, "answer")
    elif kind == "signal":
        engine.signal("sig", "k", "answer")
    elif kind == "event":
        engine.publish("evt", "answer")
    else:
        clock.advance(61)
        engine.tick()
    assert engine.status(res.run_id).status == "completed"
    assert_whole(engine, res.run_id)
    engine.store.close()


@pytest.mark.scenario("S30")
def test_context_on_deadline_timeout(db_path):
    clock = ManualClock()
    flow = (
        FlowBuilder("dl", S)
        .step("a", record)
        .await_input("w", "got", timeout_s=10, on_timeout="late")
        .step("b", record)
        .step("late", record)
        .edge("a", "w")
        .edge("w", "b")
        .finish("b", "late")
        .compile()
    )
    engine = Engine(open_store(db_path), flows=[flow], clock=clock)
    res = engine.run("dl", S(), context=CTX)
    clock.advance(11)
    engine.tick()
    assert engine.status(res.run_id).status == "completed"
    assert len(engine.get(res.run_id).seen) == 2
    assert_whole(engine, res.run_id)
    engine.store.close()


@pytest.mark.scenario("S30")
def test_context_on_cancel(db_path):
    flow = wait_flow("signal")
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    res = engine.run(flow.name, S(), context=CTX)
    engine.cancel(res.run_id)
    assert engine.status(res.run_id).status == "canceled"
    assert_whole(engine, res.run_id)
    engine.store.close()


@pytest.mark.scenario("S30")
def test_context_on_duplicate_delivery(db_path):
    flow = wait_flow("signal")
    engine = Engine(open_store(db_path), flows=[flow], clock=ManualClock())
    res = engine.run(flow.name, S(), context=CTX)
    first = engine.signal("sig", "k", "answer", dedupe_key="msg-1")
    second = engine.signal("sig", "k", "answer", dedupe_key="msg-1")  # delivered twice
    assert first == second
    assert engine.get(res.run_id).got == "answer"
    assert len(engine.get(res.run_id).seen) == 2  # 'after' ran once
    assert_whole(engine, res.run_id)
    engine.store.close()


@pytest.mark.scenario("S30")
def test_context_after_a_crash_and_resume(db_path, tmp_path):
    script = tmp_path / "w.py"
    script.write_text(
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from tests.test_context import CTX, S, record\n"
        "from desktop_app.flow import Engine, FlowBuilder\n"
        "from desktop_app.store.sqlite.store import open_store\n"
        "def logged(name):\n"
        "    with open(sys.argv[3], 'a') as fh:\n"
        "        fh.write(name + '\\n'); fh.flush(); os.fsync(fh.fileno())\n"
        "def a(s, ctx):\n"
        "    logged('a')\n"
        "    return record(s, ctx)\n"
        "def die(s, ctx):\n"
        "    logged('b')\n"
        "    if sys.argv[2] == 'kill':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return record(s, ctx)\n"
        "flow = FlowBuilder('crash', S).step('a', a).step('b', die).chain().compile()\n"
        "engine = Engine(open_store(sys.argv[1]), flows=[flow])\n"
        "if sys.argv[2] == 'kill':\n"
        "    engine.run('crash', S(), context=CTX)\n"
        "else:\n"
        "    print(engine.recover()[0][1].status)\n"
    )
    log = tmp_path / "executions.log"
    r = cli_forkserver.run_argv(
        [sys.executable, str(script), str(db_path), "kill", str(log)], capture_output=True
    )
    assert r.returncode == -signal.SIGKILL
    r = cli_forkserver.run_argv(
        [sys.executable, str(script), str(db_path), "resume", str(log)],
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "completed", r.stderr
    assert log.read_text().splitlines() == ["a", "b", "b"]  # a once; b in flight at the kill
    store = open_store(db_path)
    engine = Engine(
        store, flows=[FlowBuilder("crash", S).step("a", record).step("b", record).chain().compile()]
    )
    (run,) = store.list_runs()
    assert run.status == "completed"
    assert_whole(engine, run.run_id)
    assert len(engine.get(run.run_id).seen) == 2  # one context record per step
    store.close()


@pytest.mark.scenario("S30")
def test_child_runs_inherit_all_but_run_id_and_record_parent(db_path):
    flow = FlowBuilder("ok", S).step("a", record).compile()
    engine = Engine(open_store(db_path), flows=[flow])
    parent = engine.run("ok", S(), context=CTX)
    child = engine.run("ok", S(), parent_run_id=parent.run_id)
    run = engine.status(child.run_id)
    assert run.parent_run_id == parent.run_id
    assert dict(run.context) == expected(child.run_id)
    other = engine.run("ok", S(), context=CTX.model_copy(update={"session_id": "sess-2"}))
    listed = engine.store.list_runs(tenant_id="acme", session_id="sess-9")
    assert {r.run_id for r in listed} == {parent.run_id, child.run_id}
    assert other.run_id in {r.run_id for r in engine.store.list_runs(session_id="sess-2")}
    engine.store.close()


@pytest.mark.parametrize("given", [None, CTX], ids=["inherited", "context-given"])
def test_a_parent_that_does_not_exist_is_refused_and_nothing_is_created(db_path, given):
    flow = FlowBuilder("ok", S).step("a", record).compile()
    engine = Engine(open_store(db_path), flows=[flow])
    with pytest.raises(CheckpointNotFoundError, match="no run ghost"):
        engine.run("ok", S(), run_id="kid", parent_run_id="ghost", context=given)
    with pytest.raises(CheckpointNotFoundError, match="no run ghost"):
        engine.start("ok", S(), run_id="kid", parent_run_id="ghost", context=given)
    assert engine.store.list_runs() == []
    engine.store.close()
