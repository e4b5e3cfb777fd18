"""User flows for the reliability tests, registered through ``FLOWDESK_FLOWS``.

``unstorable``: its step returns a value no checkpoint can hold unless the
environment variable ``UNSTORABLE_FIXED`` is set (the user's fix).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Holder(BaseModel):
    payload: Any = None
    done: bool = False


def produce(state: Holder) -> dict[str, Any]:
    if os.environ.get("UNSTORABLE_FIXED"):
        return {"payload": {"ok": 1}}
    return {"payload": object()}


unstorable = (
    FlowBuilder("unstorable", Holder)
    .step("produce", produce)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)
