"""The clocks' own contracts: how long ``SystemClock.sleep`` waits and what
it returns (on a fake ``time`` module and a recording event, no wall clock),
and ``ManualClock``'s start, advance and cancel rules."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from desktop_app.flow import clock as clock_module
from desktop_app.flow.clock import ManualClock, SystemClock


class FakeTime:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def time(self) -> float:
        return 1_800_000_000.0


class RecordingEvent(threading.Event):
    """A real event that records each wait's timeout and returns at once."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(0)


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(clock_module, "time", fake)
    return fake


def test_system_clock_without_cancel_sleeps_the_seconds_and_never_a_negative(fake_time):
    clock = SystemClock()
    assert clock.now() == 1_800_000_000.0
    assert clock.sleep(0.25) is True
    assert clock.sleep(-3) is True
    assert fake_time.slept == [0.25, 0.0]


def test_system_clock_with_cancel_waits_on_the_event_and_says_if_it_was_canceled(fake_time):
    clock = SystemClock()
    cancel = RecordingEvent()
    assert clock.sleep(0.25, cancel) is True  # the full wait passed
    assert clock.sleep(-3, cancel) is True
    cancel.set()
    assert clock.sleep(5, cancel) is False  # canceled
    assert cancel.timeouts == [0.25, 0.0, 5]
    assert fake_time.slept == []  # never the uncancellable sleep


def test_manual_clock_starts_at_2026_01_01_utc_and_moves_only_when_told():
    clock = ManualClock()
    assert clock.now() == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert ManualClock(10.0).now() == 10.0


def test_manual_clock_sleep_advances_by_the_seconds_and_never_back():
    clock = ManualClock(100.0)
    assert clock.sleep(0.25) is True
    assert clock.now() == 100.25
    assert clock.sleep(-3) is True
    assert clock.now() == 100.25
    cancel = threading.Event()
    assert clock.sleep(0.5, cancel) is True
    assert clock.now() == 100.75


def test_manual_clock_sleep_on_a_set_cancel_returns_false_without_moving():
    clock = ManualClock(100.0)
    cancel = threading.Event()
    cancel.set()
    assert clock.sleep(30, cancel) is False
    assert clock.now() == 100.0


# -- CheckedClock: the process clock checked against the store's ----------------


class Reference:
    """A reference clock ``offset`` seconds off the real one, counting its reads."""

    def __init__(self, offset: float) -> None:
        self.offset = offset
        self.reads = 0

    def __call__(self) -> float | None:
        import time

        self.reads += 1
        return time.time() + self.offset


def test_checked_clock_refuses_a_skew_past_the_tolerance_either_way_naming_it():
    from desktop_app.errors import ClockSkewError
    from desktop_app.flow.clock import CheckedClock

    for offset, way in ((3600.0, "behind"), (-86400.0, "ahead of")):
        clock = CheckedClock(Reference(offset), "the file system holding s.db")
        with pytest.raises(ClockSkewError) as err:
            clock.now()
        assert f"is {'1 h 0 min 0 s' if offset > 0 else '1 d 0 h 0 min 0 s'} {way} " in str(
            err.value
        )
        assert "the file system holding s.db (more than the 5 s allowed)" in str(err.value)
        assert err.value.skew_s == pytest.approx(-offset, abs=0.5)


def test_checked_clock_lets_a_skew_within_the_tolerance_pass_and_rechecks_on_time(monkeypatch):
    from desktop_app.errors import ClockSkewError
    from desktop_app.flow import clock as module
    from desktop_app.flow.clock import SKEW_RECHECK_S, SKEW_TOLERANCE_S, CheckedClock

    assert (SKEW_TOLERANCE_S, SKEW_RECHECK_S) == (5.0, 10.0)
    ref = Reference(0.5)
    clock = CheckedClock(ref, "x")
    mono = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: mono[0])
    clock.now()
    clock.now()
    assert ref.reads == 1  # compared once, not at every reading
    mono[0] += 9.9
    clock.now()
    assert ref.reads == 1
    mono[0] += 0.1
    ref.offset = 6.0  # the clock drifted meanwhile
    with pytest.raises(ClockSkewError):
        clock.now()
    with pytest.raises(ClockSkewError):  # and again until it agrees
        clock.now()
    ref.offset = 0.0
    clock.now()
    assert ref.reads == 4


def test_trusted_now_is_the_later_of_the_two_clocks():
    import time

    from desktop_app.flow.clock import CheckedClock, trusted_now

    ahead = CheckedClock(Reference(0.8), "x")
    assert trusted_now(ahead) >= time.time() + 0.7
    behind = CheckedClock(Reference(-0.8), "x")
    assert trusted_now(behind) <= time.time() + 0.01
    assert trusted_now(ManualClock(5.0)) == 5.0
    assert CheckedClock(lambda: None, "x").skew() is None


class FrozenTime(FakeTime):
    """A ``time`` module whose wall clock stands still at 1_800_000_000 s."""

    def monotonic(self) -> float:
        return 0.0


def test_checked_clock_allows_a_skew_of_exactly_the_tolerance_and_not_a_hair_more(monkeypatch):
    from desktop_app.errors import ClockSkewError
    from desktop_app.flow.clock import SKEW_TOLERANCE_S, CheckedClock

    monkeypatch.setattr(clock_module, "time", FrozenTime())
    for offset in (SKEW_TOLERANCE_S, -SKEW_TOLERANCE_S):  # "largest difference allowed"
        clock = CheckedClock(lambda offset=offset: 1_800_000_000.0 + offset, "x")
        assert clock.now() == 1_800_000_000.0
    for offset in (SKEW_TOLERANCE_S + 0.001, -SKEW_TOLERANCE_S - 0.001):
        with pytest.raises(ClockSkewError):
            CheckedClock(lambda offset=offset: 1_800_000_000.0 + offset, "x").now()


def test_trusted_now_without_a_reference_reading_is_this_process_clock(monkeypatch):
    from desktop_app.flow.clock import CheckedClock, trusted_now

    monkeypatch.setattr(clock_module, "time", FrozenTime())
    # no reading (an in-memory database, a folder the clock file cannot be written in)
    assert CheckedClock(lambda: None, "x").trusted_now() == 1_800_000_000.0
    assert trusted_now(CheckedClock(lambda: None, "x")) == 1_800_000_000.0


def test_checked_clock_sleeps_like_the_system_clock_and_stops_when_canceled(fake_time):
    from desktop_app.flow.clock import CheckedClock

    clock = CheckedClock(lambda: None, "x")
    assert clock.sleep(0.25) is True
    assert fake_time.slept == [0.25]
    cancel = RecordingEvent()
    assert clock.sleep(0.5, cancel) is True
    cancel.set()
    assert clock.sleep(5, cancel) is False  # a stop does not wait the 5 s out
    assert cancel.timeouts == [0.5, 5]
    assert fake_time.slept == [0.25]  # waited on the event, not slept
