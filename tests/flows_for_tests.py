"""Small flows used by several tests (and by the crash-test worker script)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder


class Numbers(BaseModel):
    value: int = 0
    trail: list[str] = []


class Crash(BaseException):
    """Simulates the process dying mid-step: not an Exception, so the engine
    cannot catch it and the step stays recorded in_progress."""


def counting_flow(
    calls: Counter[str], crash_in: set[str] | None = None, n: int = 3, version: str = "1"
):
    """Linear flow s1..sn; each step appends its id to ``trail`` and counts its calls.
    A step named in ``crash_in`` raises :class:`Crash` once (then is removed)."""
    crash_in = crash_in if crash_in is not None else set()

    def make(sid: str):
        def step(state: Numbers) -> dict:
            calls[sid] += 1
            if sid in crash_in:
                crash_in.discard(sid)
                raise Crash(sid)
            return {"value": state.value + 1, "trail": [*state.trail, sid]}

        return step

    b = FlowBuilder("counting", Numbers, version=version)
    for i in range(1, n + 1):
        b.step(f"s{i}", make(f"s{i}"))
    return b.chain().compile()


def file_counting_flow(log: Path, n: int = 3):
    """Like counting_flow but counts calls in a file (survives process death)."""

    def make(sid: str):
        def step(state: Numbers) -> dict:
            with log.open("a") as fh:
                fh.write(sid + "\n")
            return {"value": state.value + 1, "trail": [*state.trail, sid]}

        return step

    b = FlowBuilder("filecount", Numbers)
    for i in range(1, n + 1):
        b.step(f"s{i}", make(f"s{i}"))
    return b.chain().compile()
