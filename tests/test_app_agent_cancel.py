"""The app cancels agent runs as ``flowdesk cancel`` does (``Agent.cancel``),
driven with Pilot over a real SQLite file: ``c`` on a waiting ``ask`` run
asks, then cancels it; the palette's "Cancel run" on a done one says plainly
there is nothing to cancel, in the words the table shows for its status, and
changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

from textual.command import CommandList, CommandPalette

from desktop_app import bootstrap
from desktop_app.agent import Agent, ScriptedModel
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import Settings, load_settings
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests.app_support import messages, settle, wait_until

SIZE = (120, 40)


def ask_runs(settings: Settings) -> tuple[str, str]:
    """A ``done`` ask run, then (newer, so selected first) one waiting for an answer."""
    bootstrap.apply_schema(settings)
    store = bootstrap.open_sqlite_store(settings)
    try:
        agents = SqliteAgentStore(store)
        done = Agent("ask", ScriptedModel(["Paris."]), agents).ask("capital of France?")
        assert done.status == "done"
        time.sleep(0.01)  # a later created_at: the newest run
        waiting = Agent(
            "ask",
            ScriptedModel([{"tool": "ask_user", "args": {"question": "Which city?"}}]),
            agents,
        ).ask("book me a trip")
        assert waiting.status == "input_required"
    finally:
        store.close()
    return done.run_id, waiting.run_id


def palette_offers(app: FlowdeskApp, title: str) -> bool:
    """Whether the open command palette highlights a command titled ``title``."""
    if not isinstance(app.screen, CommandPalette):
        return False
    found = app.screen.query_one(CommandList)
    at = found.highlighted
    return at is not None and str(found.get_option_at_index(at).prompt).startswith(title)


def agent_status(settings: Settings, run_id: str) -> tuple[str, str | None]:
    store = bootstrap.open_sqlite_store(settings)
    try:
        run = SqliteAgentStore(store).get(run_id)
        return run.status, run.error
    finally:
        store.close()


async def test_c_cancels_a_waiting_ask_run_after_asking(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    done_id, waiting_id = ask_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        assert screen.selected_run_id() == waiting_id
        assert screen.table.cell(waiting_id, "status") == "waiting"
        assert "c" in screen.active_bindings  # offered: it can be canceled

        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # keep it
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert agent_status(settings, waiting_id)[0] == "input_required"

        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        assert f"Agent run {waiting_id[:8]} is canceled." in messages(app)
        assert not any("is an agent run" in m for m in messages(app))
        assert not messages(app, "error")
        await wait_until(pilot, lambda: screen.table.cell(waiting_id, "status") == "canceled")
        assert "c" not in screen.active_bindings  # nothing left to cancel
    # what `flowdesk cancel` writes: canceled by the user, the done run untouched
    assert agent_status(settings, waiting_id) == ("canceled", "canceled by user")
    assert agent_status(settings, done_id)[0] == "done"


async def test_the_palettes_cancel_on_a_done_agent_run_says_nothing_to_cancel(
    tmp_path: Path,
) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    done_id, _waiting_id = ask_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        await pilot.press("down")
        assert screen.selected_run_id() == done_id
        assert screen.table.cell(done_id, "status") == "completed"
        assert "c" not in screen.active_bindings
        await pilot.press("ctrl+p")
        await pilot.press(*"Cancel run")
        await wait_until(pilot, lambda: palette_offers(app, "Cancel run"))
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)  # refused at once, no question
        assert messages(app)[-1] == (
            f"Agent run {done_id[:8]} is already completed; nothing to cancel."
        )
        # o (output) on it names only what applies to a completed agent run
        await pilot.press("o")
        assert messages(app)[-1] == (
            f"{done_id[:8]} is an agent run (completed): enter shows its conversation."
        )
    assert agent_status(settings, done_id) == ("done", None)


async def test_o_on_a_waiting_agent_run_names_the_keys_that_apply(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    _done_id, waiting_id = ask_runs(settings)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        assert messages(app)[-1] == (
            f"{waiting_id[:8]} is an agent run (waiting): enter shows its conversation, "
            "r resumes it, i (the inbox) answers it and c cancels it."
        )


async def test_the_agent_runs_table_shows_a_run_interrupted_when_its_process_is_killed(
    tmp_path: Path,
) -> None:
    """The second tryout's report: after a `kill -9` of the process running
    an agent run, the agent runs screen (g) kept its row `running` (it
    redrew only after a commit, and a killed process commits nothing),
    while `flowdesk runs` and the main table said `interrupted`."""
    import socket
    import subprocess
    import sys

    from desktop_app.store.records import AgentRun

    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        store = bootstrap.open_sqlite_store(settings)
        now = time.time()
        owner = f"{socket.gethostname()}:{child.pid}:abc123"
        SqliteAgentStore(store).create(
            AgentRun("held-1", "ask", "running", "q", now, now, lease_owner=owner,
                     lease_expires_at=now + 3600),
            [{"role": "user", "content": "q"}],
        )  # fmt: skip
        store.close()
        app = FlowdeskApp(settings)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await pilot.press("g")
            await settle(pilot)
            screen = app.screen
            await wait_until(pilot, lambda: bool(getattr(screen, "row_keys", None)))
            status = lambda: screen.cells("held-1")[2]  # noqa: E731
            assert status() == "running"
            # two polls: the screen has seen the database's version (its
            # first poll reloads anyway), so only a redraw can show the kill
            await pilot.pause(2.5)
            assert status() == "running"
            child.kill()
            child.wait()
            await wait_until(pilot, lambda: status() == "interrupted", timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
