"""A test clock that holds one thread inside the engine (kill tests of the
engine's per-thread guard: two threads on one run at once)."""

from __future__ import annotations

import threading

from desktop_app.flow.clock import ManualClock


class FirstHeldClock(ManualClock):
    """The injected clock (a :class:`ManualClock` at its default start):
    once :attr:`armed`, the first thread whose name starts with ``prefix``
    to read it (inside ``resume`` or ``wake``, with the run in hand, before
    it delivers anything) waits there until :attr:`release` is set (at most
    30 s, then fails)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.release = threading.Event()
        self.first: str | None = None
        self.armed = False
        self._lock = threading.Lock()

    def now(self) -> float:
        name = threading.current_thread().name
        if self.armed and name.startswith(self.prefix):
            with self._lock:
                if self.first is None:
                    self.first = name
            if self.first == name:
                assert self.release.wait(30)
        return super().now()
