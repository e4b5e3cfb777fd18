"""A flow that holds a real process in a step until the test opens its gate
(registered in subprocesses through ``FLOWDESK_FLOWS``), for the tests of
runs whose process was killed (S81).

``gated``: ``warm`` reports progress 1/4; ``hold`` writes the process id to
the file ``started``, then waits until the file ``gate`` exists (a process
killed there leaves the run ``running`` with its lease); ``finish`` ends it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Gate(BaseModel):
    started: str
    gate: str
    done: bool = False


def warm(state: Gate, ctx: Any) -> dict[str, Any]:
    ctx.progress(1, 4)
    return {}


def hold(state: Gate, ctx: Any) -> dict[str, Any]:
    ctx.progress(2, 4)
    Path(state.started).write_text(str(os.getpid()))
    while not Path(state.gate).exists():
        time.sleep(0.02)
    return {}


gated = (
    FlowBuilder("gated", Gate)
    .step("warm", warm)
    .step("hold", hold)
    .step("finish", lambda s: {"done": True})
    .chain()
    .compile()
)

#: ``FLOWDESK_FLOWS`` naming :data:`gated`
FLOWS_ENV = '["tests.interrupted_flows:gated"]'
