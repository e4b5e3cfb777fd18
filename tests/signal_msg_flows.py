"""Flows for the tests of what ``signal``, ``publish`` and ``answer`` say
(tests/test_signal_messages.py): ``late_event`` waits :data:`SOON_S`
seconds for event ``go``; ``keyed`` waits for signal ``paid`` with the key
its input names (a key may be too long to paste). Registered with
``FLOWDESK_FLOWS=FLOWS_ENV``, next to the README's ``approval``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = (
    '["tests.signal_msg_flows:late_event", "tests.signal_msg_flows:keyed", '
    '"desktop_app.examples.approval:approval"]'
)

#: seconds ``late_event`` waits for its event
SOON_S = 0.5


class Order(BaseModel):
    order: str = "o-1"
    got: Any = None
    done: bool = False


late_event = (
    FlowBuilder("late_event", Order)
    .wait_event("ev", "go", into="got", timeout_s=SOON_S)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)

keyed = (
    FlowBuilder("keyed", Order)
    .wait_signal("pay", "paid", key=lambda s: s.order, into="got")
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)
