"""At most one refresh per interval, on an injected clock (no Textual here).

The app asks :meth:`RefreshThrottle.request` whenever new progress waits to be
shown: ``0.0`` means "refresh now", a positive number "schedule one refresh in
that many seconds", ``None`` "one is scheduled already". It tells
:meth:`RefreshThrottle.flushed` when it refreshed. The latest value always
lands: a request is never dropped, only deferred.
"""

from __future__ import annotations

from collections.abc import Callable


class RefreshThrottle:
    """Spaces refreshes at least ``interval_s`` seconds apart on ``clock``.

    Args:
        interval_s: least seconds between two refreshes.
        clock: monotonic seconds (``time.monotonic`` in the app; a fake in tests).
    """

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: float | None = None
        self._scheduled = False
        #: clock readings of every refresh (the last 1,000), for tests and benchmarks
        self.flushes: list[float] = []

    def request(self) -> float | None:
        """``0.0`` (refresh now), the seconds to wait before one, or ``None``
        (a refresh is scheduled already)."""
        if self._scheduled:
            return None
        now = self.clock()
        wait = 0.0 if self._last is None else self._last + self.interval_s - now
        if wait > 0:
            self._scheduled = True
            return wait
        return 0.0

    def flushed(self) -> None:
        """A refresh happened now (scheduled or immediate)."""
        self._scheduled = False
        self._last = self.clock()
        self.flushes.append(self._last)
        del self.flushes[:-1000]
