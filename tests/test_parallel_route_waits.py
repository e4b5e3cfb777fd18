"""A parallel step routed on a branch's failure takes its other branches'
open questions with it: the run does not finish with a question pending."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    a: str = ""
    note: str = ""
    error: str = ""


class Fatal(Exception):
    retryable = False


def test_routed_parallel_failure_drops_the_other_branches_questions(db_path):
    """A branch fails after its answer while another branch's question is
    still open; the step is routed away, so that question is gone too: the
    finished run lists no pending question."""
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock())

    def a(s: S, ctx) -> dict:
        return {"a": ctx.interrupt("a?")}

    def b(s: S, ctx) -> dict:
        raise Fatal(f"b broke after {ctx.interrupt('b?')}")

    engine.register(
        FlowBuilder("ask_route", S)
        .parallel("fan", {"a": a, "b": b}, on_error="route", error_route="handle")
        .step("handle", lambda s: {"note": "handled"})
        .finish("handle")
        .compile()
    )
    r = engine.run("ask_route", S())
    waits = {w.step_id: w.wait_id for w in engine.waits(r.run_id)}
    assert r.status == "waiting" and set(waits) == {"fan/a", "fan/b"}
    r = engine.resume_with(r.run_id, "go", wait_id=waits["fan/b"])
    assert r.status == "completed" and r.state.note == "handled"
    assert "b: Fatal: b broke after go" in r.state.error
    assert engine.waits(r.run_id) == [] and store.latest(r.run_id).waits == ()
    store.close()
