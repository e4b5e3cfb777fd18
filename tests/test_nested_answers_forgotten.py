"""A condition that completes takes the answers of its nested steps along:
a nested step that asked a question leaves no answer or continuation in the
checkpoint once the condition is done (before, they stayed in every later
checkpoint of the run)."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    got: str = ""
    after: bool = False


def test_a_completed_condition_drops_its_nested_steps_answers(db_path):
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock())

    def ask(s: S, ctx) -> dict:
        return {"got": ctx.interrupt("which?", continuation="asked")}

    flow = (
        FlowBuilder("c", S)
        .condition("cond", lambda s: True, [("ask", ask)])
        .step("after", lambda s: {"after": True})
        .chain()
        .compile()
    )
    engine.register(flow)
    try:
        rid = engine.run("c", S()).run_id
        (wait,) = engine.waits(rid)
        assert wait.wait_id == f"{rid}:ask:0"
        r = engine.resume_with(rid, "this one", wait_id=wait.wait_id)
        assert r.status == "completed" and (r.state.got, r.state.after) == ("this one", True)
        meta = store.latest(rid).meta
        assert meta.get("answers", {}) == {} and meta.get("continuations", {}) == {}
    finally:
        store.close()
