"""A flow whose steps make a side effect a test can count, registered in
``flowdesk agent`` subprocesses through ``FLOWDESK_FLOWS=FLOWS_ENV``, for the
tests of a worker stopped with SIGTERM while a step is in flight.

``effects`` (steps ``s0``..``s3``): each step appends ``begin STEP ATTEMPT
PID`` to the file ``state.sink``, then ``effect STEP PID`` (its side
effect); ``s1`` waits between the two until the file ``state.gate`` exists
(at most 120 s), so a signal always lands with it in flight.

``signaled``: ``s0``, a wait for the signal ``go`` (key ``k``), then
``s1``..``s3`` as in ``effects``: a run that an agent executes after
waking it, whatever the flow's ``recovery`` setting.

``dropped`` (the same steps): ``s0``, once per process, sends its own
process the signal ``state.signal`` names (SIGTERM by default) from inside
an object's finalizer (``__del__``), where CPython runs the handler and
drops what it raises ("Exception ignored"), then ends normally.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

STEPS = ("s0", "s1", "s2", "s3")


class Effects(BaseModel):
    sink: str
    gate: str
    n: int = 0
    signal: str = "SIGTERM"


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _step(state: Effects, ctx: Any) -> dict[str, Any]:
    _append(state.sink, f"begin {ctx.step_id} {ctx.attempt} {os.getpid()}")
    if ctx.step_id == "s1":
        deadline = time.monotonic() + 120
        while not Path(state.gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    _append(state.sink, f"effect {ctx.step_id} {os.getpid()}")
    return {"n": state.n + 1}


class _SignalsInItsFinalizer:
    sent = False

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)  # the handler runs right after this call, here
        _SignalsInItsFinalizer.sent = True


def _drop_a_signal(state: Effects, ctx: Any) -> dict[str, Any]:
    if ctx.step_id == "s0" and not _SignalsInItsFinalizer.sent:
        _SignalsInItsFinalizer(signal.Signals[state.signal])  # no reference kept: finalized now
    return _step(state, ctx)


_builder = FlowBuilder("effects", Effects)
for _sid in STEPS:
    _builder = _builder.step(_sid, _step)
effects = _builder.chain().compile()

_builder = FlowBuilder("dropped", Effects)
for _sid in STEPS:
    _builder = _builder.step(_sid, _drop_a_signal)
dropped = _builder.chain().compile()

signaled = (
    FlowBuilder("signaled", Effects)
    .step("s0", _step)
    .wait_signal("w", "go", key="k")
    .step("s1", _step)
    .step("s2", _step)
    .step("s3", _step)
    .chain()
    .compile()
)

#: ``FLOWDESK_FLOWS`` naming :data:`effects`, :data:`dropped` and :data:`signaled`
FLOWS_ENV = (
    '["tests.sigterm_flows:effects", "tests.sigterm_flows:dropped", "tests.sigterm_flows:signaled"]'
)
