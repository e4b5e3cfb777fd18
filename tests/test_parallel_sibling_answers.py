"""A parallel branch's answers are its own: when branch ``a`` completes, the
answer already given to a sibling branch whose name starts with ``a`` (here
``a/x``, which asks two questions) is kept for it.

Before the fix, completing ``a`` dropped every answer under ``fan/a``, so
``a/x`` asked its first question again under the wait id already answered,
which ``resume_with`` refuses: the run could never finish.
"""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store


class S(BaseModel):
    a: str = ""
    b: str = ""
    seen: list[str] = []


def test_a_completed_branch_keeps_its_siblings_answers(db_path):
    store = open_store(db_path)
    engine = Engine(store, clock=ManualClock())
    asked: list[str] = []

    def a(s: S, ctx) -> dict:
        return {"a": ctx.interrupt("a?")}

    def ax(s: S, ctx) -> dict:
        first = ctx.interrupt("first?", continuation="after first")
        asked.append(f"second, continuation {ctx.continuation!r}")
        second = ctx.interrupt("second?", continuation="after second")
        return {"b": f"{first}+{second}", "seen": [ctx.continuation]}

    engine.register(FlowBuilder("f", S).parallel("fan", {"a": a, "a/x": ax}).compile())
    try:
        r = engine.run("f", S())
        rid = r.run_id
        assert {w.step_id: w.wait_id for w in engine.waits(rid)} == {
            "fan/a": f"{rid}:fan/a:0",
            "fan/a/x": f"{rid}:fan/a/x:0",
        }
        r = engine.resume_with(rid, "one", wait_id=f"{rid}:fan/a/x:0")
        assert sorted(w.wait_id for w in engine.waits(rid)) == [
            f"{rid}:fan/a/x:1",
            f"{rid}:fan/a:0",
        ]
        r = engine.resume_with(rid, "A", wait_id=f"{rid}:fan/a:0")  # a completes
        assert r.status == "waiting"
        assert [w.wait_id for w in engine.waits(rid)] == [f"{rid}:fan/a/x:1"]
        assert store.latest(rid).meta["answers"] == {f"{rid}:fan/a/x:0": "one"}
        assert store.latest(rid).meta["continuations"] == {"fan/a/x": "after first"}
        r = engine.resume_with(rid, "two", wait_id=f"{rid}:fan/a/x:1")
        assert r.status == "completed"
        assert (r.state.a, r.state.b, r.state.seen) == ("A", "one+two", ["after second"])
        # the continuation is the one of the step's last answered question
        assert asked == [
            "second, continuation 'after first'",
            "second, continuation 'after second'",
        ]
        meta = store.latest(rid).meta
        assert meta.get("answers", {}) == {} and meta.get("continuations", {}) == {}
    finally:
        store.close()
