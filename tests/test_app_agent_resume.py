"""Resuming an agent run from the app (`r`): the answer streams like an ask,
the completed part is not asked again, and runs the app cannot resume say why.
The model is scripted and released one delta at a time (no sleeps)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.agent_runs import AgentRunsScreen
from desktop_app.app.screens.ask import AskScreen, StreamingAnswer
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import load_settings
from desktop_app.errors import ProviderError
from tests.app_support import settle, wait_until
from tests.test_app_ask_stream import GatedModel


async def ask(app: FlowdeskApp, pilot: Pilot[None], question: str) -> AgentRunsScreen:
    """Open the agent runs screen (g) and ask ``question`` there (a)."""
    await pilot.press("g")
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, AgentRunsScreen)
    await pilot.press("a")
    await settle(pilot)
    assert isinstance(app.screen, AskScreen)
    await pilot.press(*question, "enter")
    return screen


async def ask_and_fail(app: FlowdeskApp, pilot: Pilot[None]) -> AgentRunsScreen:
    """Ask; the model's first call fails for good, so the run ends ``failed``."""
    screen = await ask(app, pilot, "capital of France?")
    await wait_until(pilot, lambda: screen.answered is not None)
    assert screen.answered is not None and screen.answered.status == "failed"
    await wait_until(pilot, lambda: [r.status for r in screen.runs] == ["failed"])
    return screen


async def test_r_resumes_a_failed_agent_run_streaming_its_answer(tmp_path: Path) -> None:
    model = GatedModel([ProviderError("the provider refused the request"), "Paris is it"])
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"), model=model)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await ask_and_fail(app, pilot)
        (failed,) = screen.runs
        await pilot.press("r")
        stream = screen.query_one(StreamingAnswer)
        await wait_until(pilot, lambda: stream.display and stream.question != "")
        assert stream.question == "capital of France?"
        assert stream.answer == ""
        model.gate.release()
        await wait_until(pilot, lambda: stream.answer == "Paris")
        model.gate.release()
        model.gate.release()
        await wait_until(pilot, lambda: screen.answered is not None)
        await settle(pilot)
        assert screen.answered is not None
        assert screen.answered.run_id == failed.run_id  # the same run, not a new one
        assert screen.answered.status == "done"
        await wait_until(pilot, lambda: [r.status for r in screen.runs] == ["done"])
        assert screen.shown is not None and screen.shown.run.response == "Paris is it"
        assert model.calls == 2  # one failed call, one answer


async def test_r_on_the_runs_table_resumes_an_agent_run_in_its_screen(tmp_path: Path) -> None:
    model = GatedModel([ProviderError("the provider refused the request"), "Paris"])
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"), model=model)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        first = await ask_and_fail(app, pilot)
        (failed,) = first.runs
        await pilot.press("escape")
        await settle(pilot)
        runs = app.screen
        assert isinstance(runs, RunsScreen)
        await wait_until(pilot, lambda: runs.table.selected_run_id() == failed.run_id)
        # r is offered once the row shows the run failed: under a CI run's load
        # the table could still show it running, and r then did nothing
        await wait_until(pilot, lambda: runs.table.cell(failed.run_id, "status") == "failed")
        await settle(pilot)
        model.gate.release()  # the one word of the answer may go as soon as it is asked
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, AgentRunsScreen))
        screen = app.screen
        assert isinstance(screen, AgentRunsScreen)
        await wait_until(pilot, lambda: screen.answered is not None)
        assert screen.answered is not None
        assert (screen.answered.run_id, screen.answered.status) == (failed.run_id, "done")


async def test_a_done_run_is_not_resumed_and_says_so(tmp_path: Path) -> None:
    model = GatedModel(["Paris"])
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"), model=model)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        model.gate.release()
        screen = await ask(app, pilot, "capital?")
        await wait_until(pilot, lambda: screen.answered is not None)
        await wait_until(pilot, lambda: [r.status for r in screen.runs] == ["done"])
        await pilot.press("r")
        await wait_until(pilot, lambda: any("is done" in n.message for n in app.notices))
        assert model.calls == 1
