"""A flow that waits in every way a run can, one after the other: a
person's answer, a signal, an event, a timer (for ``flowdesk show``'s wait
lines). Register it with ``FLOWDESK_FLOWS='["tests.cli_wait_flows:every_wait"]'``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = '["tests.cli_wait_flows:every_wait"]'


class Order(BaseModel):
    order: str
    approved: str | None = None
    paid: dict[str, Any] | None = None
    shipped: dict[str, Any] | None = None
    done: bool = False


every_wait = (
    FlowBuilder("every_wait", Order)
    .await_input("approve", "approved", prompt="Ship this order?", timeout_s=86400)
    .wait_signal("payment", "paid", key=lambda s: s.order, into="paid", timeout_s=3600)
    .wait_event("shipping", "order-shipped", into="shipped")
    .sleep("cool_off", 0.3)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)
