"""The throughput sparkline of a running run that reports progress (its
progress units done per second over the last minute), on the app's
injected clock."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from textual.widgets import Sparkline

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.progress import ProgressMeter
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.config import load_settings
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.owners import new_owner
from tests.app_support import settle
from tests.flows_for_tests import Crash, Numbers, counting_flow


def test_throughput_spreads_steps_over_the_time_between_samples() -> None:
    meter = ProgressMeter()
    meter.record("r", 0, 100, 1000.0)
    meter.record("r", 20, 100, 1010.0)  # 2/s for 10 s
    meter.record("r", 20, 100, 1020.0)  # nothing for 10 s
    meter.record("r", 80, 100, 1030.0)  # 6/s for 10 s
    bars = meter.throughput("r", 1030.0, span_s=30.0, bars=3)
    assert bars == pytest.approx([2.0, 0.0, 6.0])
    # a minute later the old samples have left the window
    meter.record("r", 80, 100, 1100.0)
    assert meter.throughput("r", 1100.0, span_s=30.0, bars=3) == [0.0, 0.0, 0.0]
    assert meter.throughput("other", 1100.0) == [0.0] * 30


async def test_a_running_runs_detail_shows_its_throughput_sparkline(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db", recover_on_launch=False)
    bootstrap.apply_schema(settings)
    flow = counting_flow(Counter(), crash_in={"s3"}, n=3)
    sv = bootstrap.open_services(settings, flows=[flow])
    try:
        with pytest.raises(Crash):
            sv.engine.run(flow.name, Numbers(), run_id="d" * 32)
        # left "running" at s3, by a live process (this one): a run whose
        # process is gone shows interrupted, with no sparkline
        sv.checkpoints.write(
            lambda c: c.execute(
                "UPDATE runs SET lease_owner=?, lease_expires_at=1e12 WHERE run_id=?",
                (new_owner(), "d" * 32),
            )
        )
    finally:
        sv.close()
    clock = ManualClock()
    app = FlowdeskApp(settings, flows=[counting_flow(Counter())], clock=clock)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        run_id = "d" * 32
        app.controller.open_run(run_id)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        # it reports no progress yet: no sparkline (it counts progress, not steps)
        assert not screen.query_one("#throughput-row").display
        # progress seen over the last minute: 60 steps in the first 30 s, then 30
        t0 = clock.now()
        app.meter.record(run_id, 0, 500, t0)
        clock.advance(30)
        app.meter.record(run_id, 60, 500, clock.now())
        clock.advance(30)
        app.meter.record(run_id, 90, 500, clock.now())
        screen.set_progress(run_id, 90, 500)
        await settle(pilot)
        spark = screen.query_one("#throughput", Sparkline)
        assert spark.data == screen.throughput
        assert screen.throughput[:15] == pytest.approx([2.0] * 15)
        assert screen.throughput[15:] == pytest.approx([1.0] * 15)
        assert screen.query_one("#throughput-row").display
        assert "done/s, last 60 s (peak 2.0)" in str(screen.query_one("#throughput-label").render())
