"""A trace id that is not one (a tryout): ``ExecutionContext(trace_id=...)``
took any text (``not-hex-at-all``, all zeros, upper-case hex, LangGraph's
``configurable`` too) and stored and showed it, while the run's spans went
to a new trace in each process: the id shown with the run found nothing.
A new context with one is refused, saying what a trace id is; a context an
older version stored with one is read back as it was (its run resumes, its
children inherit it)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import pytest
from pydantic import BaseModel, ValidationError

from desktop_app.errors import InputError
from desktop_app.flow import Engine, ExecutionContext, FlowBuilder
from desktop_app.store.sqlite.store import open_store

GOOD = "4bf92f3577b34da6a3ce929d0e0e4736"
BAD = ["not-hex-at-all", "0" * 32, GOOD.upper(), GOOD[:31], GOOD + "0", f" {GOOD[1:]}", ""]


class S(BaseModel):
    answer: str | None = None


def ask_flow():  # type: ignore[no-untyped-def]
    return (
        FlowBuilder("ask", S).await_input("q", "answer").step("b", lambda s: {}).chain().compile()
    )


@pytest.mark.parametrize("bad", BAD)
def test_a_context_with_a_trace_id_that_is_not_one_is_refused_saying_what_one_is(
    bad: str,
) -> None:
    with pytest.raises(ValidationError) as refused:
        ExecutionContext(tenant_id="acme", trace_id=bad)
    said = str(refused.value)
    assert f"trace_id {bad!r} is not a W3C trace id (32 lowercase hex digits, not all zeros)" in (
        said
    ), said
    assert ExecutionContext(trace_id=GOOD).trace_id == GOOD


def test_a_copy_with_one_is_refused_too() -> None:
    """A second tryout passed ``ExecutionContext(...).model_copy(update=
    {"trace_id": "NOT-A-TRACE-ID"})`` to ``Engine.run``, and the run was
    stored with it: pydantic's copy validates nothing."""
    base = ExecutionContext(tenant_id="acme")
    with pytest.raises(ValueError, match="trace_id 'NOT-A-TRACE-ID' is not a W3C trace id"):
        base.model_copy(update={"trace_id": "NOT-A-TRACE-ID"})
    assert base.model_copy(update={"trace_id": GOOD}).trace_id == GOOD
    assert base.model_copy(update={"session_id": "s"}).session_id == "s"


def test_nothing_is_created_with_one(db_path: Path) -> None:
    engine = Engine(open_store(db_path), flows=[ask_flow()])
    try:
        with pytest.raises(ValidationError):
            engine.run("ask", S(), context=ExecutionContext(trace_id="nope"))
        assert engine.store.list_runs() == []
    finally:
        engine.store.close()


@pytest.mark.scenario("S121")
def test_a_run_an_older_version_stored_with_one_resumes_and_its_child_inherits_it(
    db_path: Path,
) -> None:
    store = open_store(db_path)
    engine = Engine(store, flows=[ask_flow()])
    try:
        run_id = engine.run("ask", S(), context=ExecutionContext(tenant_id="acme")).run_id
        stored = f'{{"run_id": "{run_id}", "tenant_id": "acme", "trace_id": "tr-1"}}'
        store.conn.execute("UPDATE runs SET context=? WHERE run_id=?", (stored, run_id))
        assert engine.resume_with(run_id, "yes").status == "completed"
        assert dict(store.get_run(run_id).context)["trace_id"] == "tr-1"
        child = engine.run("ask", S(), parent_run_id=run_id).run_id
        inherited = {k: v for k, v in store.get_run(child).context.items() if v is not None}
        assert inherited == {"run_id": child, "tenant_id": "acme", "trace_id": "tr-1"}
    finally:
        store.close()


def test_a_langgraph_configurable_with_one_is_refused_and_nothing_is_stored(
    db_path: Path,
) -> None:
    from langgraph.graph import START, StateGraph

    from desktop_app.integrations.langgraph import FlowdeskSaver

    class G(TypedDict):
        n: int

    store = open_store(db_path)
    try:
        g = StateGraph(G)
        g.add_node("inc", lambda s: {"n": s["n"] + 1})
        g.add_edge(START, "inc")
        graph = g.compile(checkpointer=FlowdeskSaver(store))
        bad = {"configurable": {"thread_id": "t-bad", "trace_id": "NOT-A-TRACE"}}
        with pytest.raises(InputError, match="the configurable's trace_id 'NOT-A-TRACE' is not"):
            graph.invoke({"n": 0}, bad)
        assert graph.get_state(bad).values == {}  # nothing stored
        number = {"configurable": {"thread_id": "t-num", "tenant_id": 123}}
        with pytest.raises(InputError, match="the configurable's tenant_id is int 123, not a"):
            graph.invoke({"n": 0}, number)  # it was dropped without a word
        good = {"configurable": {"thread_id": "t-good", "trace_id": GOOD}}
        assert graph.invoke({"n": 0}, good) == {"n": 1}
    finally:
        store.close()
