"""A flow whose step waits for a file (registered in subprocesses through
``FLOWDESK_FLOWS``), for tests that act on a run while a step is in flight.

``gated``: ``first`` counts 1 (a checkpoint saved by the executing
process), ``gate`` appends a line (its process id) to ``<dir>/gate.runs``
and waits until ``<dir>/go`` exists, ``last`` appends a line to
``<dir>/last.runs``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Gate(BaseModel):
    dir: str
    n: int = 0


def first(state: Gate) -> dict[str, int]:
    return {"n": state.n + 1}


def gate(state: Gate) -> dict[str, int]:
    folder = Path(state.dir)
    with open(folder / "gate.runs", "a") as f:
        f.write(f"{os.getpid()}\n")
    while not (folder / "go").exists():
        time.sleep(0.02)
    return {"n": state.n + 1}


def last(state: Gate) -> dict[str, int]:
    with open(Path(state.dir) / "last.runs", "a") as f:
        f.write(f"{os.getpid()}\n")
    return {"n": state.n + 1}


gated = (
    FlowBuilder("gated", Gate, inputs=("dir",))
    .step("first", first)
    .step("gate", gate)
    .step("last", last)
    .chain("first", "gate")
    .chain("gate", "last")
    .finish("last")
    .compile()
)

#: ``FLOWDESK_FLOWS`` naming it
FLOWS_ENV = '["tests.gated_flows:gated"]'
