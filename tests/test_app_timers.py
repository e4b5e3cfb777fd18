"""The app fires timers and deadlines while it is open (SQLite), as
``flowdesk agent`` does: a run another process started sleeps and goes on,
an expired question times out and leaves the inbox, without any other
process. Real app (Pilot), real ``flowdesk`` processes, a real SQLite file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, open_inbox, settle, wait_until
from tests.cli_support import flowdesk
from tests.timer_flows import FLOWS_ENV

SIZE = (140, 45)


def status_of(db: Path, run_id: str) -> str:
    store = open_store(db)
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


def start(db: Path, flow: str) -> str:
    out = flowdesk(
        db, "start", flow, "--input", json.dumps({"order": "z3"}), env={"FLOWDESK_FLOWS": FLOWS_ENV}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS_ENV)
    path = tmp_path / "s.db"
    assert flowdesk(path, "db", "apply").returncode == 0
    return path


async def test_a_sleep_started_elsewhere_goes_on_while_the_app_is_open(db: Path) -> None:
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = start(db, "napper")
        assert status_of(db, run_id) == "waiting"
        # no `flowdesk agent` runs: the app fires the timer
        await wait_until(pilot, lambda: status_of(db, run_id) == "completed", timeout=60)
    store = open_store(db)
    try:
        assert store.latest(run_id).state["n"] == 2
    finally:
        store.close()


async def test_a_sleep_due_while_the_app_was_closed_goes_on_at_launch(db: Path) -> None:
    run_id = start(db, "napper")
    store = open_store(db)
    try:
        deadline = store.next_deadline()
    finally:
        store.close()
    assert deadline is not None
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: status_of(db, run_id) == "completed", timeout=60)


@pytest.mark.slow
async def test_an_expired_question_times_out_and_leaves_the_inbox(db: Path) -> None:
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # a deadline long enough for the question to be shown first under load
        run_id = start(db, "slow_asker")
        inbox = await open_inbox(pilot)
        await wait_until(pilot, lambda: [i.run_id for i in inbox.items] == [run_id], timeout=30)
        await wait_until(pilot, lambda: status_of(db, run_id) == "timed_out", timeout=60)
        await wait_until(pilot, lambda: inbox.items == [], timeout=30)
        assert not messages(app, "error"), messages(app)
        # the notice says what happened to it: nobody answered it
        said = messages(app)
        assert not any("answered elsewhere" in m for m in said), said
        assert any(m.startswith(f"Run {run_id[:8]}'s question timed out") for m in said), said


async def test_a_question_whose_run_was_canceled_elsewhere_says_so(db: Path) -> None:
    """The selected question leaves the inbox because another process canceled
    its run: the notice says the run was canceled, not that someone answered."""
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        run_id = start(db, "approver")
        inbox = await open_inbox(pilot)
        await wait_until(pilot, lambda: [i.run_id for i in inbox.items] == [run_id], timeout=30)
        canceled = flowdesk(db, "cancel", run_id)
        assert canceled.returncode == 0, canceled.stderr
        await wait_until(pilot, lambda: inbox.items == [], timeout=30)
        said = messages(app)
        assert not any("answered elsewhere" in m for m in said), said
        assert any(
            m.startswith(f"Run {run_id[:8]}'s question is gone: the run was canceled") for m in said
        ), said
