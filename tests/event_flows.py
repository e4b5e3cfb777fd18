"""Flows that wait for the event ``order-shipped``, with fields of different
types: ``shipping`` takes a JSON object (``dict[str, Any] | None``),
``counting`` a number of boxes (``int | None``). Registered with
``FLOWDESK_FLOWS=FLOWS_ENV``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = '["tests.event_flows:shipping", "tests.event_flows:counting"]'


class Shipment(BaseModel):
    order: str
    shipped: dict[str, Any] | None = None
    done: bool = False


shipping = (
    FlowBuilder("shipping", Shipment, inputs=("order",))
    .wait_event("ship", "order-shipped", into="shipped")
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)


class Boxes(BaseModel):
    order: str
    boxes: int | None = None
    done: bool = False


counting = (
    FlowBuilder("counting", Boxes, inputs=("order",))
    .wait_event("count", "order-shipped", into="boxes")
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)
