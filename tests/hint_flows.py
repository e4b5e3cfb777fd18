"""Flows for the tests of the hints ``flowdesk`` prints around a person's
answer: ``soon`` asks a yes/no question whose deadline passes
:data:`SOON_S` seconds after it is asked; ``typed`` asks three questions in
turn, one per kind of field (a bool, a str, an int); ``two`` asks two
questions at once (parallel branches); ``sized`` asks for one of two
sizes (a ``Literal`` field); ``paid`` waits :data:`SOON_S`
seconds for signal ``payment`` with key ``o-1``. Registered with
``FLOWDESK_FLOWS=FLOWS_ENV``."""

from __future__ import annotations

import operator
from typing import Any, Literal

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = (
    '["tests.hint_flows:soon", "tests.hint_flows:typed", "tests.hint_flows:two", '
    '"tests.hint_flows:paid", "tests.hint_flows:sized"]'
)

#: seconds ``soon``'s question waits for its answer
SOON_S = 0.5


class Order(BaseModel):
    approved: bool | None = None
    note: str | None = None
    count: int | None = None
    notes: list[str] = []
    size: Literal["small", "large"] | None = None
    done: bool = False


soon = (
    FlowBuilder("soon", Order)
    .await_input("approve", "approved", prompt="Ship it?", timeout_s=SOON_S)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)

typed = (
    FlowBuilder("typed", Order)
    .await_input("approve", "approved", prompt="Ship it?")
    .await_input("describe", "note", prompt="A note for the box?")
    .await_input("how_many", "count", prompt="How many boxes?")
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)


def _ask(name: str) -> Any:
    def step(state: Order, ctx: Any) -> dict[str, Any]:
        return {"notes": [f"{name}:{ctx.interrupt(f'{name}?')}"]}

    return step


two = (
    FlowBuilder("two", Order)
    .parallel("ask", {"gift": _ask("gift"), "wrap": _ask("wrap")}, reducers={"notes": operator.add})
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)


paid = (
    FlowBuilder("paid", Order)
    .wait_signal("pay", "payment", key="o-1", into="note", timeout_s=SOON_S)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)


sized = (
    FlowBuilder("sized", Order)
    .await_input("size", "size", prompt="Which size?")
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)
