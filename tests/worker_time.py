"""A fake ``time`` module for flow/worker.py (the fence cooldown and
``ServerClock`` read ``time`` from its namespace): wall and monotonic
clocks the test sets, and sleeps recorded, not slept."""

from __future__ import annotations

import pytest

from desktop_app.flow import worker as worker_module


class FakeTime:
    """worker.py's ``time`` module: wall and monotonic clocks set by the test."""

    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 1000.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """worker.py's ``time`` replaced by a :class:`FakeTime` for the test."""
    fake = FakeTime()
    monkeypatch.setattr(worker_module, "time", fake)
    return fake
