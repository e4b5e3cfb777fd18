"""A flow that asks one question and then finishes (registered in
subprocesses through ``FLOWDESK_FLOWS``), for the tests of runs whose
checkpoint was damaged on disk and of answers given on a full disk.

``asker``: ``approve`` waits for an answer (no deadline), ``done`` counts.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Order(BaseModel):
    order: str
    approved: str | None = None
    n: int = 0


def count(state: Order) -> dict[str, int]:
    return {"n": state.n + 1}


asker = (
    FlowBuilder("asker", Order, inputs=("order",))
    .await_input("approve", "approved", prompt="OK?")
    .step("done", count)
    .chain("approve", "done")
    .finish("done")
    .compile()
)

FLOWS_ENV = '["tests.damaged_flows:asker"]'


def queue_mail(state: Order, ctx: object) -> dict[str, int]:
    ctx.send("mail", {"order": state.order})  # type: ignore[attr-defined]
    return {"n": state.n + 1}


#: ``sender``: ``queue`` queues a mail (a program's own destination, so no
#: ``flowdesk`` process delivers it), then ``approve`` waits for an answer
sender = (
    FlowBuilder("sender", Order, inputs=("order",))
    .step("queue", queue_mail)
    .await_input("approve", "approved", prompt="OK?")
    .chain("queue", "approve")
    .finish("approve")
    .compile()
)

SENDER_ENV = '["tests.damaged_flows:sender"]'

#: ``stepper``: ``count`` counts, then ``approve`` waits for an answer, then
#: ``done`` counts: revision 1 is a step's, revision 2 the wait's
stepper = (
    FlowBuilder("stepper", Order, inputs=("order",))
    .step("count", count)
    .await_input("approve", "approved", prompt="OK?")
    .step("done", count)
    .chain("count", "approve", "done")
    .finish("done")
    .compile()
)

STEPPER_ENV = '["tests.damaged_flows:asker", "tests.damaged_flows:stepper"]'


class Kid(BaseModel):
    n: int = 0


#: ``kid``: one step (a child run a test's own parent flow starts)
kid = FlowBuilder("kid", Kid).step("one", lambda s: {"n": s.n + 1}).compile()

KID_ENV = '["tests.damaged_flows:kid"]'


def completed_stepper(db: Path) -> tuple[str, int]:
    """A ``stepper`` run answered ``yes`` and completed on the SQLite file
    ``db`` (a ``Path``, schema applied): its id and its latest revision,
    for the tests that then change one of its rows by hand."""
    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import open_store

    store = open_store(db)
    try:
        engine = Engine(store, flows=[stepper])
        run_id = engine.run("stepper", Order(order="a")).run_id
        assert engine.resume_with(run_id, "yes").status == "completed"
        return run_id, store.get_run(run_id).revision
    finally:
        store.close()
