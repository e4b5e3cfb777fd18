"""Rate, ETA and elapsed time of running runs, from their progress samples.

The app feeds :class:`ProgressMeter` every ``(done, total)`` it shows (live
engine events, or a run's stored progress when another process runs it),
stamped with the app's clock; the meter keeps the samples of the last
:data:`WINDOW_S` seconds per run and derives a rate from them. No Textual,
no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise

from desktop_app.app.format import bar
from desktop_app.words import duration

#: Seconds of samples the rate is measured over.
WINDOW_S = 30.0
#: Most samples kept per run.
MAX_SAMPLES = 64
#: Seconds of history the throughput sparkline covers.
SPARK_S = 60.0
#: Bars of the throughput sparkline (each SPARK_S / SPARK_BARS seconds).
SPARK_BARS = 30


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
        #: the last SPARK_S seconds of samples per run, for the sparkline
        self._recent: dict[str, deque[tuple[float, int]]] = {}

    def record(self, run_id: str, done: int, total: int, now: float) -> None:
        """A sample of ``run_id`` at ``now`` (UTC epoch seconds)."""
        self._keep_recent(run_id, done, now)
        samples = self._samples.setdefault(run_id, deque(maxlen=MAX_SAMPLES))
        if samples and done < samples[-1][1]:  # went back (replayed, forked): start over
            samples.clear()
        if samples and samples[-1][1] == done and len(samples) > 1:
            return  # nothing moved: keep the older samples; the rate decays with time
        samples.append((now, done))
        while len(samples) > 2 and now - samples[0][0] > WINDOW_S:
            samples.popleft()
        self._totals[run_id] = total

    def _keep_recent(self, run_id: str, done: int, now: float) -> None:
        recent = self._recent.setdefault(run_id, deque(maxlen=4 * 1024))
        if recent and done < recent[-1][1]:
            recent.clear()
        if len(recent) >= 2 and recent[-1][1] == recent[-2][1] == done:
            recent.pop()  # a plateau: keep where it began and where it is now
        recent.append((now, done))
        # keep one sample older than the window: the first bar's start
        while len(recent) > 2 and now - recent[1][0] > SPARK_S:
            recent.popleft()

    def forget(self, run_id: str) -> None:
        self._samples.pop(run_id, None)
        self._totals.pop(run_id, None)
        self._recent.pop(run_id, None)

    def throughput(
        self, run_id: str, now: float, *, span_s: float = SPARK_S, bars: int = SPARK_BARS
    ) -> list[float]:
        """Units per second in each of ``bars`` equal slices of the last
        ``span_s`` seconds before ``now`` (oldest first); the units between two
        samples are spread evenly over the time between them."""
        width = span_s / bars
        start = now - span_s
        out = [0.0] * bars
        for (t0, d0), (t1, d1) in pairwise(self._recent.get(run_id, ())):
            if d1 <= d0 or t1 <= t0 or t1 <= start:
                continue
            rate = (d1 - d0) / (t1 - t0)
            first = max(0, int((t0 - start) // width))
            for i in range(first, bars):
                b0 = start + i * width
                if b0 >= t1:
                    break
                overlap = min(t1, b0 + width) - max(t0, b0)
                if overlap > 0:
                    out[i] += rate * overlap / width
        return out

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
