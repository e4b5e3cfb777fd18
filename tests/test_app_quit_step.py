"""``q`` while a flow run's step is in flight in the app (a second
tryout): the terminal went blank for the step's remaining minute, with
nothing said, and the app closed its database under the step, so the
run's lease was no longer renewed while the step ran on (a worker on
another machine could then take the run and run the step again at the
same time). The app now says so and stays up, its lease renewed, until
the step has ended and its checkpoint is saved; then it quits by itself,
the run stopped before its next step and resumable, the step done once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from desktop_app.flow import FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until

entered, release = threading.Event(), threading.Event()
done: list[str] = []


class S(BaseModel):
    n: int = 0


def slow(s: S) -> dict[str, Any]:
    entered.set()
    release.wait(60)
    done.append("slow")
    return {"n": s.n + 1}


def flow():  # type: ignore[no-untyped-def]
    return (
        FlowBuilder("slowish", S)
        .step("slow", slow)
        .step("after", lambda s: {"n": s.n + 1})
        .chain()
        .compile()
    )


@pytest.fixture(autouse=True)
def _fresh() -> None:
    entered.clear()
    release.clear()
    done.clear()


async def test_q_with_a_step_in_flight_says_so_waits_for_it_and_quits(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    app = FlowdeskApp(settings, flows=[flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        run_id = app.controller.start_flow("slowish", {})
        assert run_id is not None
        await wait_until(pilot, entered.is_set)
        await pilot.press("q")
        await wait_until(pilot, lambda: any("Quitting once the step" in m for m in messages(app)))
        said = next(m for m in messages(app) if "Quitting once the step" in m)
        assert run_id[:8] in said and "q again quits now" in said
        await pilot.pause(0.3)
        assert app.is_running  # it waits for the step, the database open
        release.set()
        await wait_until(pilot, lambda: not app.is_running, timeout=30)
    store = open_store(db)
    try:
        run = store.get_run(run_id)
        cp = store.latest(run_id)
    finally:
        store.close()
    assert done == ["slow"]  # the step ran once, to its end
    assert cp.steps["slow"].status == "completed"  # its checkpoint saved
    assert "after" not in cp.steps or cp.steps["after"].status != "completed"
    assert run.lease_owner is None  # given back: resumable at once
