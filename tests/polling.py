"""Waiting in a test for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(ok: Callable[[], bool], what: str, bound_s: float = 30.0) -> None:
    """Poll ``ok()`` every 10 ms until it is true; fail naming ``what`` once
    ``bound_s`` seconds have passed (a bound on a hang, never a timing
    assertion: a slow machine only takes longer)."""
    deadline = time.monotonic() + bound_s
    while not ok():
        assert time.monotonic() < deadline, f"not within {bound_s:g} s: {what}"
        time.sleep(0.01)
