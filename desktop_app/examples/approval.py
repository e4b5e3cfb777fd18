"""The README's example of your own flow: approve an order, wait for its
payment signal, then ship it.

Register it with ``flows = ["desktop_app.examples.approval:approval"]`` in
the settings file, or ``FLOWDESK_FLOWS='["desktop_app.examples.approval:approval"]'``.
Then::

    flowdesk start approval --input '{"order": "o-1"}'   # waits: "Ship this order?"
    flowdesk answer RUN yes                              # waits for signal paid o-1
    flowdesk signal paid o-1 --payload '{"amount": 3}'   # delivered by `resume --all` or `agent`

The answer is ``yes`` or ``no`` (any case, spaces trimmed): anything else is
refused by the field's type (exit 2, the run still waiting). ``no`` ends the
run ``completed`` with ``approved == "no"`` and nothing shipped: the route
after ``approve`` goes to ``declined``, never to the payment wait.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator

from desktop_app.flow import FlowBuilder


def _word(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


#: ``yes`` or ``no``, any case, surrounding spaces trimmed; anything else fails validation
YesNo = Annotated[Literal["yes", "no"], BeforeValidator(_word)]


class Approval(BaseModel):
    """The run's state: the order id, the answer (``"yes"``/``"no"``), the
    payment, and whether it shipped."""

    order: str
    approved: YesNo | None = None
    paid: dict[str, Any] | None = None
    shipped: bool = False


approval = (
    # a person gives only the order: the rest is filled as the run goes on
    FlowBuilder("approval", Approval, inputs=("order",))
    .await_input("approve", "approved", prompt="Ship this order?", timeout_s=86400)
    .wait_signal("payment", "paid", key=lambda s: s.order, into="paid")
    .step("ship", lambda s: {"shipped": True})
    .step("declined", lambda s: {})
    .chain("payment", "ship")
    .route(
        "approve",
        lambda s: "payment" if s.approved == "yes" else "declined",
        ["payment", "declined"],
    )
    .finish("ship", "declined")
    .compile()
)
