"""A user's own flow, registered through settings (``FLOWDESK_FLOWS``)."""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Approval(BaseModel):
    order: str
    approved: str | None = None
    paid: dict | None = None
    shipped: bool = False


approval = (
    FlowBuilder("approval", Approval)
    .await_input("approve", "approved", prompt="Ship this order?")
    .wait_signal("payment", "paid", key=lambda s: s.order, into="paid")
    .sleep("cool_off", 0.5)
    .step("ship", lambda s: {"shipped": True})
    .chain()
    .compile()
)
