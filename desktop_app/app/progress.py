"""Rate, ETA and elapsed time of running runs, from their progress samples.

The app feeds :class:`ProgressMeter` every ``(done, total)`` it shows (live
engine events, or a run's stored progress when another process runs it),
stamped with the app's clock; the meter keeps the samples of the last
:data:`WINDOW_S` seconds per run and derives a rate from them. No Textual,
no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from desktop_app.app.format import bar

#: Seconds of samples the rate is measured over.
WINDOW_S = 30.0
#: Most samples kept per run.
MAX_SAMPLES = 64


def duration(seconds: float) -> str:
    """``45s``, ``3m 20s``, ``2h 05m``, ``3d 4h`` (rounded up to whole seconds)."""
    s = max(0, math.ceil(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True)
class Pace:
    """A run's progress as people read it.

    Attributes:
        done / total: units of work.
        rate: units per second over the last window (``None`` until two samples differ).
        eta_s: seconds left at that rate (``None`` without a rate).
    """

    done: int
    total: int
    rate: float | None
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total > 0 else 0.0

    def bar(self, width: int = 10) -> str:
        return bar(self.fraction, width)

    def rate_text(self) -> str:
        """``12.5/s · 1m 40s left``, ``measuring…`` or ``""`` when finished."""
        if self.total and self.done >= self.total:
            return ""
        if self.rate is None or self.eta_s is None:
            return "measuring…"
        rate = f"{self.rate:.1f}/s" if self.rate < 100 else f"{self.rate:.0f}/s"
        return f"{rate} · {duration(self.eta_s)} left"


class ProgressMeter:
    """Per-run progress samples; :meth:`pace` turns them into rate and ETA."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._totals: dict[str, int] = {}

    def record(self, run_id: str, done: int, total: int, now: float) -> None:
        """A sample of ``run_id`` at ``now`` (UTC epoch seconds)."""
        samples = self._samples.setdefault(run_id, deque(maxlen=MAX_SAMPLES))
        if samples and done < samples[-1][1]:  # went back (replayed, forked): start over
            samples.clear()
        if samples and samples[-1][1] == done and len(samples) > 1:
            return  # nothing moved: keep the older samples; the rate decays with time
        samples.append((now, done))
        while len(samples) > 2 and now - samples[0][0] > WINDOW_S:
            samples.popleft()
        self._totals[run_id] = total

    def forget(self, run_id: str) -> None:
        self._samples.pop(run_id, None)
        self._totals.pop(run_id, None)

    def pace(self, run_id: str, done: int, total: int, now: float) -> Pace:
        """The pace of ``run_id`` at ``(done, total)`` as of ``now``."""
        samples = self._samples.get(run_id)
        rate: float | None = None
        if samples and len(samples) >= 2:
            (t0, d0), (t1, d1) = samples[0], samples[-1]
            span = max(now, t1) - t0
            if span > 0 and d1 > d0:
                rate = (d1 - d0) / span
        eta = (total - done) / rate if rate else None
        return Pace(done, total, rate, eta)
