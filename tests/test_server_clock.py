"""``ServerClock``: local time plus the database clock's offset, measured
NTP-style on the query's own round trip, refreshed every ``refresh_s``;
a failed sample waits ``retry_s``, and a refresh another thread makes is
not waited for (so no reading waits out a server's outage)."""

from __future__ import annotations

import threading

import pytest

from desktop_app.errors import StoreError
from desktop_app.flow.worker import ServerClock
from tests.worker_time import FakeTime


class Probe:
    """The store's ``server_time`` stand-in: (server time, local time sent,
    local time answered), after ``waited_s`` seconds in the pool's queue."""

    def __init__(self, fake: FakeTime, ahead_s: float, rtt_s: float) -> None:
        self.fake, self.ahead_s, self.rtt_s = fake, ahead_s, rtt_s
        self.waited_s = 0.0
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self) -> tuple[float, float, float]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        self.fake.wall += self.waited_s  # waiting for a pooled connection
        sent = self.fake.wall
        # the server read its clock half way through the round trip
        server = sent + self.rtt_s / 2 + self.ahead_s
        self.fake.wall += self.rtt_s
        return server, sent, self.fake.wall


def test_server_clock_adds_the_offset_measured_at_the_round_trips_midpoint(fake_time):
    probe = Probe(fake_time, ahead_s=42.0, rtt_s=0.5)
    clock = ServerClock(probe)
    assert clock.offset == 0.0 and probe.calls == 0
    assert clock.now() == pytest.approx(fake_time.wall + 42.0, abs=1e-9)
    assert clock.offset == pytest.approx(42.0, abs=1e-9)
    fake_time.wall += 5.0
    assert clock.now() == pytest.approx(fake_time.wall + 42.0, abs=1e-9)
    assert probe.calls == 1  # within refresh_s: the offset is reused


def test_server_clock_refreshes_only_after_refresh_s(fake_time):
    probe = Probe(fake_time, ahead_s=1.0, rtt_s=0.0)
    clock = ServerClock(probe)
    assert clock.refresh_s == 60.0
    clock.now()
    probe.ahead_s = 3.0
    fake_time.mono += 60.0
    assert clock.now() == pytest.approx(fake_time.wall + 1.0)
    assert probe.calls == 1
    fake_time.mono += 0.001
    assert clock.now() == pytest.approx(fake_time.wall + 3.0)
    assert probe.calls == 2
    short = ServerClock(probe, refresh_s=0.5)
    short.now()
    fake_time.mono += 0.6
    short.now()
    assert probe.calls == 4


def test_server_clock_keeps_its_last_offset_while_the_store_is_unreachable(fake_time):
    probe = Probe(fake_time, ahead_s=7.0, rtt_s=0.0)
    clock = ServerClock(probe, refresh_s=1.0)
    probe.error = StoreError("database unreachable")
    assert clock.now() == fake_time.wall  # never measured: no offset
    probe.error = None
    fake_time.mono += 2.0  # a failed probe is not a measurement: retried once due
    assert clock.now() == pytest.approx(fake_time.wall + 7.0)
    probe.error = StoreError("database unreachable")
    fake_time.mono += 2.0
    assert clock.now() == pytest.approx(fake_time.wall + 7.0)
    assert probe.calls == 3
    probe.error = RuntimeError("a bug, not an outage")
    fake_time.mono += 2.0
    with pytest.raises(RuntimeError, match="a bug"):
        clock.now()


def test_server_clock_waits_retry_s_after_a_failed_probe_not_at_every_reading(fake_time):
    """During an outage every reading of the clock asked the server again
    and waited for it (the app's screens read it every second): a failed
    probe is tried again only after ``retry_s``, the last offset serving."""
    probe = Probe(fake_time, ahead_s=4.0, rtt_s=0.0)
    clock = ServerClock(probe, refresh_s=60.0)
    assert clock.retry_s == 5.0
    clock.now()
    probe.error = StoreError("database unreachable")
    fake_time.mono += 61.0
    for _ in range(3):  # due: one probe, it fails; the next readings do not ask
        assert clock.now() == pytest.approx(fake_time.wall + 4.0)
    assert probe.calls == 2
    fake_time.mono += 4.9
    clock.now()
    assert probe.calls == 2
    probe.error = None
    probe.ahead_s = 6.0
    fake_time.mono += 0.2  # retry_s after the failed probe
    assert clock.now() == pytest.approx(fake_time.wall + 6.0)
    assert probe.calls == 3


def test_server_clock_gives_the_last_offset_while_another_thread_measures(fake_time):
    """A refresh held by a slow server (another thread's) is not waited
    for once an offset is known: a reading meanwhile gives the last one."""
    probe = Probe(fake_time, ahead_s=2.0, rtt_s=0.0)
    clock = ServerClock(probe, refresh_s=60.0)
    clock.now()
    entered, release = threading.Event(), threading.Event()
    measured = clock.probe

    def held() -> tuple[float, float, float]:
        entered.set()
        assert release.wait(30)
        return measured()

    clock.probe = held
    probe.ahead_s = 9.0
    fake_time.mono += 61.0
    other = threading.Thread(target=clock.now)
    other.start()
    read: list[float] = []
    try:
        assert entered.wait(30)
        reading = threading.Thread(target=lambda: read.append(clock.now()))
        reading.start()
        reading.join(30)  # a bound on a hang (it waited for the refresh)
        assert read == [pytest.approx(fake_time.wall + 2.0)]  # not held
    finally:
        release.set()
        other.join(30)
    assert clock.now() == pytest.approx(fake_time.wall + 9.0)


def test_server_clock_logs_a_sample_it_does_not_take(
    fake_time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    """What a person reading the log sees of a stalled sample: its round
    trip, the limit, and the offset kept."""
    probe = Probe(fake_time, ahead_s=1.5, rtt_s=0.0)
    clock = ServerClock(probe, refresh_s=1.0)
    clock.now()
    probe.rtt_s = 2.25
    fake_time.mono += 2.0
    with caplog.at_level("INFO", logger="desktop_app.flow.worker"):
        clock.now()
    assert [r.getMessage() for r in caplog.records] == [
        "database clock sample not taken: its round trip took 2.250 s (over 1.000 s); "
        "the clock offset stays +1.500 s"
    ]


def test_server_clock_takes_no_sample_whose_round_trip_was_long(fake_time):
    """A probe that waited in the pool's queue (an outage) measures the
    offset all the same; one whose round trip itself stalled past
    ``max_rtt_s`` is not taken: the last offset stays, measured again at
    the next ``now``."""
    probe = Probe(fake_time, ahead_s=3.0, rtt_s=0.2)
    clock = ServerClock(probe, refresh_s=1.0)
    assert clock.max_rtt_s == 1.0
    probe.waited_s = 86.0  # held by an outage before the query went out
    clock.now()
    assert clock.offset == pytest.approx(3.0, abs=1e-9)
    probe.waited_s = 0.0
    probe.ahead_s, probe.rtt_s = 9.0, 1.0 + 1e-6  # a stalled relay
    fake_time.mono += 2.0
    assert clock.now() == pytest.approx(fake_time.wall + 3.0, abs=1e-9)
    assert probe.calls == 2
    probe.rtt_s = 1.0  # as long as allowed: taken
    assert clock.now() == pytest.approx(fake_time.wall + 9.0, abs=1e-9)
    assert probe.calls == 3


def test_server_clock_sleep_waits_the_seconds_or_until_canceled(fake_time):
    clock = ServerClock(lambda: (0.0, 0.0, 0.0))
    assert clock.sleep(0.25) is True
    assert clock.sleep(-3.0) is True
    assert fake_time.slept == [0.25, 0.0]
    waits: list[float | None] = []

    class Cancel(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return super().wait(0)

    cancel = Cancel()
    assert clock.sleep(1.5, cancel) is True
    cancel.set()
    assert clock.sleep(-1.0, cancel) is False
    assert waits == [1.5, 0.0]
    assert fake_time.slept == [0.25, 0.0]  # a cancelable sleep waits on the event
