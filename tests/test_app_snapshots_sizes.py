"""Snapshots of every screen at 80x24, 120x35 and 200x60 (issue 28: fits
any terminal): runs, run detail, inbox, answer dialog, settings, help,
agent runs, the ask dialog, launch report, start-a-flow form.

Deterministic like tests/test_app_snapshots_views.py (fixed run ids, a
ManualClock for the engine and the app, TZ=UTC, no temporary path on
screen: the database is ``snap.db`` in the test's working directory).
Update with ``--snapshot-update`` after a deliberate change and look at the
SVGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle
from tests.test_app_snapshots_views import (
    RUN_IDS,
    START,
    Batch,
    batch_flow,
    isolated,  # noqa: F401  (the autouse fixture: TZ=UTC, no settings file)
    make_db,
    steady,
)

SIZES = {"80x24": (80, 24), "120x35": (120, 35), "200x60": (200, 60)}
PARENT = RUN_IDS[0]


def add_agent_runs(db: Path) -> None:
    """A top-level agent run with a conversation, and three children of a flow run."""
    store = open_store(db)
    try:
        agents = SqliteAgentStore(store)
        agents.create(
            AgentRun("a1" * 16, "ask", "done", "what is in __init__.py?", START, START + 5),
            [
                {"role": "user", "content": "what is in __init__.py?"},
                {"role": "assistant", "content": "It is **empty**."},
            ],
        )
        for i in range(3):
            at = START + 10 + i
            agents.create(
                AgentRun(
                    f"{PARENT}:notes/f{i}.md", "digest", "done", "sum", at, at, parent_run_id=PARENT
                ),
                [{"role": "user", "content": "sum"}],
            )
    finally:
        store.close()


def app_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, version: str = "1") -> FlowdeskApp:
    make_db(tmp_path)
    add_agent_runs(tmp_path / "snap.db")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(db_path="snap.db")
    flow = batch_flow() if version == "1" else old_batch_flow(version)
    app = FlowdeskApp(settings, flows=[flow], clock=ManualClock(START + 900))
    # a fixed scene: the app's timer pump would fire the deadlines the manual
    # clock has passed at a moment of its own, before or after the picture
    app._start_timers = lambda: None  # type: ignore[method-assign]
    return app


def old_batch_flow(version: str) -> Any:
    from desktop_app.flow import FlowBuilder

    return (
        FlowBuilder("batch", Batch, version=version)
        .step("plan", lambda s: {})
        .await_input("confirm", "ok", prompt="Publish?")
        .step("publish", lambda s: {})
        .chain()
        .compile()
    )


def keys(*pressed: str, then: Any = None) -> Any:
    async def run_before(pilot: Pilot[None]) -> None:
        await steady(pilot)
        for key in pressed:
            await pilot.press(key)
            await settle(pilot)
        if then is not None:
            await then(pilot)
        screen = pilot.app.screen  # a blinking cursor is drawn or not, as the clock has it
        for field in [*screen.query(Input), *screen.query(TextArea)]:
            field.cursor_blink = False
        # a text area lays its lines out again once the change is refreshed;
        # under load one pause took the snapshot between the two (a CI flake)
        await settle(pilot)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    return run_before


async def open_detail(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, FlowdeskApp)
    app.controller.open_run(RUN_IDS[0])
    await settle(pilot)


async def open_fork(pilot: Pilot[None]) -> None:
    await open_detail(pilot)
    await pilot.press("f")
    await settle(pilot)


SCREENS = {
    "runs": keys(),
    "detail": keys(then=open_detail),
    "inbox": keys("i"),
    "answer": keys("a"),
    "settings": keys("ctrl+s"),
    "help": keys("f1"),
    "agent_runs": keys("g", "enter"),
    "ask": keys("g", "a"),
    "start_flow": keys("s"),
    "new_digest": keys("n"),
    "signal": keys("x"),
    "cancel_confirm": keys("c"),
    "fork": keys(then=open_fork),
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(
    snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, screen: str, size: str
) -> None:
    app = app_for(tmp_path, monkeypatch)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=SCREENS[screen])


@pytest.mark.parametrize("size", list(SIZES))
def test_launch_report(
    snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    """Runs of batch 1 waiting; the app has batch 2."""
    app = app_for(tmp_path, monkeypatch, version="2")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=keys())


_ = (bootstrap, Engine)
