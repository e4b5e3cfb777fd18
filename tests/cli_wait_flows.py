"""Flows for ``flowdesk show``'s wait lines: ``every_wait`` waits in every
way a run can, one after the other (a person's answer, a signal, an event,
a timer); ``paused`` pauses for an operator when its step fails
(``on_error="pause"``) until the file it needs exists. Registered with
``FLOWDESK_FLOWS=FLOWS_ENV``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = '["tests.cli_wait_flows:every_wait", "tests.cli_wait_flows:paused"]'


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


class Needs(BaseModel):
    needs: str
    done: bool = False


def read_it(state: Needs) -> dict[str, Any]:
    if not Path(state.needs).exists():
        raise RuntimeError(f"{state.needs} is not there yet")
    return {"done": True}


paused = FlowBuilder("paused", Needs).step("read_it", read_it, on_error="pause").compile()
