"""The README's example of your own flow: approve an order, wait for its
payment signal, then ship it.

Register it with ``flows = ["desktop_app.examples.approval:approval"]`` in
the settings file, or ``FLOWDESK_FLOWS='["desktop_app.examples.approval:approval"]'``.
Then::

    flowdesk start approval --input '{"order": "o-1"}'   # waits: "Ship this order?"
    flowdesk answer RUN yes                              # waits for signal paid o-1
    flowdesk signal paid o-1 --payload '{"amount": 3}'   # delivered by `resume --all` or `agent`
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Approval(BaseModel):
    """The run's state: the order id, the answer, the payment, and whether it shipped."""

    order: str
    approved: str | None = None
    paid: dict[str, Any] | None = None
    shipped: bool = False


approval = (
    # a person gives only the order: the rest is filled as the run goes on
    FlowBuilder("approval", Approval, inputs=("order",))
    .await_input("approve", "approved", prompt="Ship this order?", timeout_s=86400)
    .wait_signal("payment", "paid", key=lambda s: s.order, into="paid")
    .step("ship", lambda s: {"shipped": True})
    .chain()
    .compile()
)
