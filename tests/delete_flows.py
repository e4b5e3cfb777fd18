"""Flows with a retention policy (``delete_on_success``, ``keep_last_n``),
registered in subprocesses through ``FLOWDESK_FLOWS``.

``paid_notify``: waits for signal ``paid`` keyed by the order, then queues
one ``http`` side effect (a program's own destination: no ``flowdesk``
process delivers it). ``paid_only``: the same wait, and no side effect;
``asked_only``: one question; ``asked_notify``: one question, then a side
effect. ``pruned``: see below.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Order(BaseModel):
    key: str
    paid: dict[str, Any] | None = None


def notify(state: Order, ctx: Any) -> dict[str, Any]:
    ctx.send("http", {"key": state.key})
    return {}


paid_notify = (
    FlowBuilder("paid_notify", Order, delete_on_success=True)
    .wait_signal("payment", "paid", key=lambda s: s.key, into="paid")
    .step("notify", notify)
    .chain("payment", "notify")
    .finish("notify")
    .compile()
)

paid_only = (
    FlowBuilder("paid_only", Order, delete_on_success=True)
    .wait_signal("payment", "paid", key=lambda s: s.key, into="paid")
    .compile()
)


class Asked(BaseModel):
    key: str
    ok: str | None = None


#: ``asked_only``: one question, then done (an answer completes it)
asked_only = (
    FlowBuilder("asked_only", Asked, delete_on_success=True)
    .await_input("approve", "ok", prompt="OK?")
    .compile()
)


def notify_asked(state: Asked, ctx: Any) -> dict[str, Any]:
    ctx.send("http", {"key": state.key})
    return {}


#: ``asked_notify``: one question, then a step queues an ``http`` side
#: effect: an answer completes it, kept until the post is delivered
asked_notify = (
    FlowBuilder("asked_notify", Asked, delete_on_success=True)
    .await_input("approve", "ok", prompt="OK?")
    .step("notify", notify_asked)
    .chain("approve", "notify")
    .finish("notify")
    .compile()
)


class Count(BaseModel):
    n: int = 0


def bump(state: Count) -> dict[str, int]:
    return {"n": state.n + 1}


def post(state: Count, ctx: Any) -> dict[str, int]:
    ctx.send("http", {"n": state.n})
    return {"n": state.n + 1}


#: ``pruned``: three counting steps, then ``post`` queues a side effect;
#: only the last two checkpoints are kept (``keep_last_n``)
pruned = (
    FlowBuilder("pruned", Count, keep_last_n=2)
    .step("one", bump)
    .step("two", bump)
    .step("three", bump)
    .step("post", post)
    .chain("one", "two", "three", "post")
    .finish("post")
    .compile()
)

FLOWS_ENV = (
    '["tests.delete_flows:paid_notify", "tests.delete_flows:paid_only", '
    '"tests.delete_flows:asked_only", "tests.delete_flows:pruned", '
    '"tests.delete_flows:asked_notify"]'
)
