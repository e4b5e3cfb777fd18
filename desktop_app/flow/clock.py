"""The engine's only source of time: an injected :class:`Clock`.

Times are UTC seconds since the epoch (``float``). Tests use
:class:`ManualClock` and move it past stored deadlines instead of editing
statuses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from desktop_app.errors import ClockSkewError

#: Seconds this process's clock may differ from its store's (the database's
#: file system on SQLite) before :class:`CheckedClock` refuses to tell the time.
#: Not less: some file systems stamp whole seconds (HFS+) or two (FAT, a USB
#: stick), so a reading can be that far behind a clock that is right.
SKEW_TOLERANCE_S = 5.0
#: Seconds between two comparisons of :class:`CheckedClock` with its store's clock.
SKEW_RECHECK_S = 10.0


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


class CheckedClock:
    """Wall-clock time, compared with a trusted reference: the clock of the
    store (on SQLite the time the database's file system stamps on a write,
    ``SQLiteCheckpointStore.file_system_now``, which no process's own clock
    moves). The engine's default on SQLite: every time it writes into a run
    (checkpoints, deadlines, timers, answers, signals) comes from here.

    The first :meth:`now` compares, and again at most every ``recheck_s``
    seconds (of the monotonic clock); while the two differ by more than
    ``tolerance_s``, :meth:`now` raises instead of returning, so a process
    whose clock is skewed either way writes nothing.

    Args:
        reference: the trusted reading (UTC epoch seconds), or ``None`` when
            there is none (then nothing is compared).
        where: names the reference in the error (``the file system holding
            /x/s.db``).
        tolerance_s: largest difference allowed (seconds).
        recheck_s: seconds between two comparisons.
    """

    def __init__(
        self,
        reference: Callable[[], float | None],
        where: str,
        *,
        tolerance_s: float = SKEW_TOLERANCE_S,
        recheck_s: float = SKEW_RECHECK_S,
    ) -> None:
        self._reference = reference
        self.where = where
        self.tolerance_s = tolerance_s
        self.recheck_s = recheck_s
        self._next_check: float | None = None
        self._lock = threading.Lock()
        #: the last :meth:`check`'s skew beyond ``tolerance_s`` (seconds), else 0
        self.refused_skew_s = 0.0

    def skew(self) -> float | None:
        """This clock minus the reference (seconds; negative when behind), or
        ``None`` when there is no reference reading."""
        before = time.time()
        ref = self._reference()
        after = time.time()
        if ref is None:
            return None
        return (before + after) / 2 - ref

    def check(self) -> None:
        """Compare with the reference now.

        Raises:
            ClockSkewError: the two differ by more than ``tolerance_s``.
        """
        skew = self.skew()
        if skew is not None and abs(skew) > self.tolerance_s:
            self.refused_skew_s = skew
            raise ClockSkewError(skew, self.where, self.tolerance_s)
        self.refused_skew_s = 0.0

    def now(self) -> float:
        """Current UTC time, epoch seconds.

        Raises:
            ClockSkewError: this process's clock differs from the
                reference's by more than ``tolerance_s``.
        """
        mono = time.monotonic()
        nxt = self._next_check  # read without the lock: the step path's cost
        if nxt is None or mono >= nxt:
            with self._lock:  # one thread compares; the others see it done
                nxt = self._next_check
                if nxt is None or mono >= nxt:
                    self.check()  # raises: compared again at the next call
                    self._next_check = mono + self.recheck_s
        return time.time()

    def trusted_now(self) -> float:
        """The later of :meth:`now` and a fresh reading of the reference
        (UTC epoch seconds): what a deadline is compared with before an
        answer is taken, so none is taken once the deadline passed by the
        store's clock, even within the tolerance.

        Raises:
            ClockSkewError: as :meth:`now`.
        """
        now = self.now()
        ref = self._reference()
        return now if ref is None else max(now, ref)

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        return SystemClock().sleep(seconds, cancel)


def default_clock(store: object) -> Clock:
    """The clock that dates writes into ``store``'s runs when none is
    injected (flow runs: the engine's; agent runs: an agent's, its answers'
    and its leases'): on a store with a clock of its own that no process can
    skew (SQLite: ``file_system_now``, the checkpoint store's or the agent
    store's), the system clock checked against it (:class:`CheckedClock`: a
    process whose clock is skewed either way writes nothing into runs, its
    ``now()`` raises :class:`~desktop_app.errors.ClockSkewError`); else the
    system clock (PostgreSQL decides leases by the database's clock)."""
    reference = getattr(store, "file_system_now", None)
    if reference is None:
        return SystemClock()
    path = getattr(store, "path", "")
    return CheckedClock(reference, f"the file system holding {path}")


def reading(clock: Clock) -> float:
    """``clock``'s time for display (UTC epoch seconds), never raising: for a
    :class:`CheckedClock` (whose ``now`` refuses while skewed) the system's
    time less the skew its last check refused (so ages shown stay right),
    else ``clock.now()`` (an injected test clock). Nothing written into a
    run may be dated with it."""
    if isinstance(clock, CheckedClock):
        return time.time() - clock.refused_skew_s
    return clock.now()


def skew_error(clock: Clock) -> ClockSkewError | None:
    """The :class:`~desktop_app.errors.ClockSkewError` ``clock`` raises now
    (compared with its reference afresh), or ``None`` when it tells the time
    (it is no :class:`CheckedClock`, or one within its tolerance)."""
    if not isinstance(clock, CheckedClock):
        return None
    try:
        clock.check()
    except ClockSkewError as exc:
        return exc
    return None


def trusted_now(clock: Clock) -> float:
    """``clock``'s :meth:`CheckedClock.trusted_now` when it has one, else its
    ``now()`` (an injected test clock, the system clock on PostgreSQL)."""
    trusted = getattr(clock, "trusted_now", None)
    return trusted() if trusted is not None else clock.now()
