"""The child journal's rules that no scenario test reached: a slot without a
``kind`` is a flow child, and a kind registered at run time is how canceling
a parent cancels such a child."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.children import canceler, journaled, register_child_kind
from desktop_app.store.sqlite.store import open_store


def test_a_slot_without_a_kind_is_a_flow_child_in_step_order():
    meta = {"children": {"a": [{"id": "r:a"}, {"id": "r:a:1", "kind": "agent"}], "b": [{"id": 7}]}}
    assert journaled(meta) == [("r:a", "flow"), ("r:a:1", "agent"), ("7", "flow")]
    assert journaled({}) == []


class S(BaseModel):
    n: int = 0


def test_a_registered_kind_cancels_its_children_when_the_parent_is_canceled(db_path):
    canceled: list[tuple[str, str]] = []

    def cancel_job(store, child_id: str, reason: str, now: float) -> None:
        canceled.append((child_id, reason))

    register_child_kind("kill-test-job", cancel_job)
    assert canceler("kill-test-job") is cancel_job

    def start_job(s: S, ctx) -> dict:
        ctx.child_run_id("kill-test-job")
        ctx.interrupt("wait here")  # the parent stays live with its child journaled
        return {}

    store = open_store(db_path)
    engine = Engine(store, flows=[FlowBuilder("jobs", S).step("start", start_job).compile()])
    res = engine.run("jobs", S())
    assert res.status == "waiting"
    engine.cancel(res.run_id)
    assert canceled == [(f"{res.run_id}:start", f"parent run {res.run_id} was canceled")]
    assert store.get_run(res.run_id).status == "canceled"
    store.close()
