"""Snapshot tests (pytest-textual-snapshot) of the main screens.

Deterministic on purpose: runs are made by an Engine on a ManualClock with
fixed run ids, the terminal is 120x40, the header shows a fixed subtitle
instead of the temporary database path, the status line that names the
path is cleared, text cursors do not blink, the app's clock is a fixed
ManualClock and the time zone is UTC.

Update the SVGs under ``tests/__snapshots__/`` with
``pytest tests/test_app_snapshots.py --snapshot-update`` after a deliberate
change, and look at them before committing.
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
from textual.widgets import Input

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests.test_app import approve_flow, settle
from tests.test_app_snapshots_views import steady

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("TZ", "UTC")  # times are shown in the local time zone
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class Greeting(BaseModel):
    name: str = "world"
    text: str = ""
    signed: bool = False


class Upload(BaseModel):
    path: str = "report.pdf"


def disk_full(_state: Upload) -> dict[str, Any]:
    raise OSError("disk full")


def snapshot_flows() -> list[CompiledFlow[Any]]:
    hello = (
        FlowBuilder("hello", Greeting)
        .step("greet", lambda s: {"text": f"Hello, {s.name}!"})
        .step("sign", lambda s: {"signed": True})
        .chain()
        .compile()
    )
    upload = FlowBuilder("upload", Upload).step("send", disk_full).chain().compile()
    return [hello, upload, approve_flow()]


#: (run id, flow, state) in creation order, one minute apart.
RUNS: tuple[tuple[str, str, BaseModel], ...] = (
    ("0a1b2c3d4e5f60718293a4b5c6d7e8f9", "hello", Greeting(name="Ada")),
    ("1b2c3d4e5f60718293a4b5c6d7e8f90a", "upload", Upload()),
    ("2c3d4e5f60718293a4b5c6d7e8f90a1b", "approve", approve_flow().state_type()),
    ("3d4e5f60718293a4b5c6d7e8f90a1b2c", "hello", Greeting(name="Grace")),
)


def make_db(tmp_path: Path) -> Settings:
    settings = load_settings(db_path=tmp_path / "snap.db")
    bootstrap.apply_schema(settings)
    clock = ManualClock()
    engine = Engine(
        open_store(settings.db_path), flows=snapshot_flows(), clock=clock, owner="snapshots"
    )
    try:
        for run_id, flow, state in RUNS:
            engine.run(flow, state, run_id=run_id)
            clock.advance(60)
    finally:
        engine.stop()
        engine.store.close()
    return settings


#: The app's clock: ten minutes after the first run started ("10 min ago").
SHOWN_AT = ManualClock().now() + 600


def snapshot_app(tmp_path: Path) -> FlowdeskApp:
    app = FlowdeskApp(make_db(tmp_path), flows=snapshot_flows(), clock=ManualClock(SHOWN_AT))
    # a fixed scene: the app's timer pump would fire the deadlines the manual
    # clock has passed at a moment of its own, before or after the picture
    app._start_timers = lambda: None  # type: ignore[method-assign]
    return app


def test_runs_screen(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZE, run_before=steady)


def test_runs_screen_with_filters(snap_compare: Any, tmp_path: Path) -> None:
    async def filtered(pilot: Pilot[None]) -> None:
        await steady(pilot)
        await pilot.press("slash", *"hello", "enter")  # the runs of flow hello
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause()

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZE, run_before=filtered)


def test_run_detail_screen(snap_compare: Any, tmp_path: Path) -> None:
    async def open_first(pilot: Pilot[None]) -> None:
        await steady(pilot)
        await pilot.press("down", "down", "down", "enter")  # the oldest run: hello, Ada
        await settle(pilot)

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZE, run_before=open_first)


def test_new_run_form(snap_compare: Any, tmp_path: Path) -> None:
    async def open_form(pilot: Pilot[None]) -> None:
        await steady(pilot)
        await pilot.press("n")
        await pilot.pause()
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause()

    assert snap_compare(snapshot_app(tmp_path), terminal_size=SIZE, run_before=open_form)
