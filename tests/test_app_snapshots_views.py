"""Snapshot tests (pytest-textual-snapshot) of the runs table, the grouped
timeline, the inbox and the help overlay at 80x24 and 160x50.

Deterministic like tests/test_app_snapshots.py (fixed run ids, a ManualClock
for the engine and the app, TZ=UTC, no path in the header). Update with
``--snapshot-update`` after a deliberate change and look at the SVGs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from textual.pilot import Pilot

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle, wait_until

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}
START = ManualClock().now()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class Batch(BaseModel):
    n: int = 0
    total: int = 25
    ok: str | None = None


def batch_flow() -> CompiledFlow[Batch]:
    return (
        FlowBuilder("batch", Batch)
        .step("plan", lambda s: {})
        .loop(
            "work",
            lambda s: {"n": s.n + 1},
            until=lambda s: s.n >= s.total,
            progress=lambda s: (s.n, s.total),
        )
        .await_input(
            "confirm", "ok", prompt="Publish the 25 results to the team page?", timeout_s=3600
        )
        .step("publish", lambda s: {})
        .chain()
        .compile()
    )


RUN_IDS = ("0a1b2c3d4e5f60718293a4b5c6d7e8f9", "1b2c3d4e5f60718293a4b5c6d7e8f90a")


def make_db(tmp_path: Path) -> Settings:
    settings = load_settings(db_path=tmp_path / "snap.db")
    bootstrap.apply_schema(settings)
    clock = ManualClock(START)
    engine = Engine(open_store(settings.db_path), flows=[batch_flow()], clock=clock, owner="snap")
    try:
        for run_id in RUN_IDS:
            engine.run("batch", Batch(), run_id=run_id)
            clock.advance(60)
    finally:
        engine.stop()
        engine.store.close()
    return settings


def snapshot_app(tmp_path: Path) -> FlowdeskApp:
    app = FlowdeskApp(make_db(tmp_path), flows=[batch_flow()], clock=ManualClock(START + 900))
    # a fixed scene: the app's timer pump would fire the deadlines the manual
    # clock has passed at a moment of its own, before or after the picture
    app._start_timers = lambda: None  # type: ignore[method-assign]
    return app


async def steady(pilot: Pilot[None]) -> None:
    """Start-up done (the engine open, its status said, the first page
    painted: under load the engine's ready message once came after the
    status line was cleared, a CI flake); hide what depends on the
    temporary path or on time."""
    app = pilot.app
    assert isinstance(app, FlowdeskApp)
    await wait_until(pilot, lambda: app._launched is not None)
    await settle(pilot)
    app.sub_title = "snap.db"
    app.runs_screen.status_line.say("")
    await pilot.pause()


@pytest.mark.parametrize("size", list(SIZES))
def test_runs_table(snap_compare: Any, tmp_path: Path, size: str) -> None:
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=steady)


@pytest.mark.parametrize("size", list(SIZES))
def test_grouped_timeline(snap_compare: Any, tmp_path: Path, size: str) -> None:
    async def open_detail(pilot: Pilot[None]) -> None:
        await steady(pilot)
        app = pilot.app
        assert isinstance(app, FlowdeskApp)
        app.controller.open_run(RUN_IDS[0])
        await settle(pilot)
        await pilot.pause()

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=open_detail)


@pytest.mark.parametrize("size", list(SIZES))
def test_inbox(snap_compare: Any, tmp_path: Path, size: str) -> None:
    async def open_inbox(pilot: Pilot[None]) -> None:
        await steady(pilot)
        await pilot.press("i")
        await settle(pilot)
        await pilot.pause()

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=open_inbox)


@pytest.mark.parametrize("size", list(SIZES))
def test_help_overlay(snap_compare: Any, tmp_path: Path, size: str) -> None:
    async def open_help(pilot: Pilot[None]) -> None:
        await steady(pilot)
        await pilot.press("f1")
        await settle(pilot)

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=open_help)


@pytest.mark.parametrize("size", list(SIZES))
def test_flow_graph(snap_compare: Any, tmp_path: Path, size: str) -> None:
    async def open_graph(pilot: Pilot[None]) -> None:
        await steady(pilot)
        app = pilot.app
        assert isinstance(app, FlowdeskApp)
        app.controller.open_run(RUN_IDS[0])
        await settle(pilot)
        await pilot.press("7")
        await settle(pilot)

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZES[size], run_before=open_graph)
