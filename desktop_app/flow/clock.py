"""The engine's only source of time: an injected :class:`Clock`.

Times are UTC seconds since the epoch (``float``). Tests use
:class:`ManualClock` and move it past stored deadlines instead of editing
statuses.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current UTC time, epoch seconds."""

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        """Wait ``seconds``; return ``False`` early if ``cancel`` is set."""


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        if cancel is None:
            time.sleep(max(0.0, seconds))
            return True
        return not cancel.wait(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told (tests). ``sleep`` advances it."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)  # now() is a float even when started at an int
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, when: float) -> None:
        with self._lock:
            self._now = float(when)

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        if cancel is not None and cancel.is_set():
            return False
        self.advance(max(0.0, seconds))
        return True
