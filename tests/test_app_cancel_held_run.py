"""``c`` in the app on a run another process is executing (a team tryout:
the app said only "Run R is canceled." while that process's step ran on and
wrote its effect 11 s later): it says what ``flowdesk cancel`` says, that
the process executing it stops before its next step and that its step in
flight runs to its end; and nothing after that step runs."""

from __future__ import annotations

import time
from pathlib import Path

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.config import load_settings
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until
from tests.cli_support import flowdesk, spawn
from tests.test_db_copy_live_runs import _env, _steps, _wait_for, gate


async def test_c_on_a_run_another_process_executes_says_its_step_in_flight_runs_to_its_end(
    tmp_path: Path,
) -> None:
    db = tmp_path / "f.db"
    env = _env(tmp_path)
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    proc = spawn("--db", str(db), "start", "gate", env=env)
    try:
        _wait_for(tmp_path / "started-*", proc)  # its step `hold` is in flight
        store = open_store(db)
        try:
            (run,) = store.list_runs()
        finally:
            store.close()
        app = FlowdeskApp(load_settings(db_path=db), flows=[gate])
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(pilot)
            screen = app.runs_screen
            await wait_until(pilot, lambda: screen.table.selected_run_id() == run.run_id)
            await pilot.press("c")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await wait_until(pilot, lambda: any("is canceled" in m for m in messages(app)))
            [said] = [m for m in messages(app) if "is canceled" in m]
            assert said.startswith(f"Run {run.run_id[:8]} is canceled; the process executing it (")
            assert said.endswith(
                "stops before its next step; its step hold is in flight: it runs to its end "
                "(what it does stays done) and nothing after it runs."
            ), said
        (tmp_path / "release").touch()  # the step in flight ends
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    time.sleep(0.2)
    assert [s.split()[0] for s in _steps(tmp_path)] == ["hold"]  # `after` never ran
    assert (
        flowdesk(db, "show", run.run_id, env=env).stdout.splitlines()[0].endswith("status canceled")
    )
