"""Flows whose step after a wait fails (for the tests of what ``answer``
and ``signal`` say when the run they continue fails in their process):
``ask_then_fail`` waits for an answer, ``signal_then_fail`` for signal
``paid`` keyed by its order; then ``charge`` raises, unless the file named
by ``$FLOWDESK_TEST_CHARGE_OK`` exists (so the printed resume can succeed).
Registered with ``FLOWDESK_FLOWS=FLOWS_ENV``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

FLOWS_ENV = (
    '["tests.fail_after_wait_flows:ask_then_fail", "tests.fail_after_wait_flows:signal_then_fail"]'
)


class Order(BaseModel):
    order: str = "o-1"
    got: Any = None
    charged: bool = False


def charge(state: Order) -> dict[str, bool]:
    ok = os.environ.get("FLOWDESK_TEST_CHARGE_OK", "")
    if not (ok and Path(ok).exists()):
        raise RuntimeError("card declined")
    return {"charged": True}


ask_then_fail = (
    FlowBuilder("ask_then_fail", Order, inputs=("order",))
    .await_input("approve", "got", prompt="Charge it?")
    .step("charge", charge)
    .chain()
    .compile()
)

signal_then_fail = (
    FlowBuilder("signal_then_fail", Order, inputs=("order",))
    .wait_signal("pay", "paid", key=lambda s: s.order, into="got")
    .step("charge", charge)
    .chain()
    .compile()
)
