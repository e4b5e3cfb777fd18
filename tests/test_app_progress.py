"""Seeing work happen: progress bars with rate, ETA and elapsed time, and the
refresh throttle, on injected clocks (no wall-clock assertions)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from pydantic import BaseModel

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.progress import ProgressMeter
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.throttle import RefreshThrottle
from desktop_app.config import load_settings
from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.owners import new_owner
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_refreshes_are_spaced_and_the_last_request_is_never_dropped() -> None:
    clock = FakeMonotonic()
    throttle = RefreshThrottle(0.1, clock)
    due: float | None = None  # when the scheduled refresh fires
    for step in range(1000):  # a request every millisecond for one second
        clock.t = step / 1000
        if due is not None and clock.t >= due:
            throttle.flushed()
            due = None
        wait = throttle.request()
        if wait == 0.0:
            throttle.flushed()
        elif wait is not None:
            due = clock.t + wait
    assert due is not None  # the last request is still scheduled, not dropped
    gaps = [b - a for a, b in itertools.pairwise(throttle.flushes)]
    assert len(throttle.flushes) <= 11
    assert min(gaps) >= 0.1 - 1e-9


def test_pace_gives_rate_eta_and_a_bar() -> None:
    meter = ProgressMeter()
    meter.record("r", 0, 100, 1000.0)
    assert meter.pace("r", 0, 100, 1000.0).rate_text() == "measuring…"
    meter.record("r", 20, 100, 1010.0)
    pace = meter.pace("r", 20, 100, 1010.0)
    assert pace.rate == 2.0 and pace.eta_s == 40.0
    assert pace.rate_text() == "2.0/s · 40s left"
    assert pace.bar(10) == "██░░░░░░░░"
    # nothing moved for 10 s: the rate decays instead of freezing
    assert meter.pace("r", 20, 100, 1020.0).rate == 1.0
    meter.record("r", 100, 100, 1030.0)
    assert meter.pace("r", 100, 100, 1030.0).rate_text() == ""  # finished
    meter.record("r", 5, 100, 1040.0)  # went back (a replay): measured again
    assert meter.pace("r", 5, 100, 1040.0).rate is None


class Count(BaseModel):
    n: int = 0
    total: int = 1000


def count_flow() -> CompiledFlow[Count]:
    return (
        FlowBuilder("count", Count)
        .loop(
            "tick",
            lambda s: {"n": s.n + 1},
            until=lambda s: s.n >= 400,
            progress=lambda s: (s.n, s.total),
        )
        .chain()
        .compile()
    )


async def test_a_running_run_shows_a_bar_rate_and_eta_against_the_app_clock(
    tmp_path: Path,
) -> None:
    """A run another process is running (its progress read from the store)."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    clock = ManualClock()
    engine = Engine(open_store(settings.db_path), flows=[count_flow()], clock=clock)
    try:
        engine.run("count", Count(), run_id="c" * 32)  # completes: 400 of 1000
    finally:
        engine.store.close()
    # Pretend it is still running elsewhere: progress comes from the store.
    store = open_store(settings.db_path)
    try:
        run = store.get_run("c" * 32)
    finally:
        store.close()
    assert run.progress == (400, 1000)
    app_clock = ManualClock(clock.now() + 60)
    app = FlowdeskApp(settings, flows=[count_flow()], clock=app_clock)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.table
        # running in a live process (this one holds the lease)
        running = dataclasses.replace(
            run, status="running", lease_owner=new_owner(), lease_expires_at=app_clock.now() + 30
        )
        app.meter.record(run.run_id, 200, 1000, app_clock.now() - 100)
        table.update_run(running)
        assert table.cell(run.run_id, "bar") == "████░░░░░░"
        assert table.cell(run.run_id, "progress") == "400/1000"
        # 200 more in 100 s: 2/s; 600 left: 5 min
        assert table.cell(run.run_id, "pace") == "2.0/s · 5m left"
        # live progress from the engine moves the bar and the rate
        app_clock.advance(50)
        app.meter.record(run.run_id, 700, 1000, app_clock.now())
        table.set_progress(run.run_id, 700, 1000)
        assert table.cell(run.run_id, "bar") == "███████░░░"
        # the rate is measured over the last 30 s of samples: 300 in 50 s
        assert table.cell(run.run_id, "pace") == "6.0/s · 50s left"
