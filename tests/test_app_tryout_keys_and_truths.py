"""What a new user's tryout of the app found (and the fixes), each through
Textual's pilot on a real SQLite file: the filter bar's lists are chosen from
with the keyboard (enter in an open list chose nothing and opened the selected
run); an answer given after its question timed out says the run timed out and
nothing was answered (it said the question "was already answered")."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from textual.widgets import Button, Select
from textual.widgets._select import SelectOverlay

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.config import load_settings
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import CompiledFlow
from desktop_app.store.sqlite.store import open_store
from tests.app_support import answer_dialog, settle, wait_until
from tests.test_app_runs_view import START, note_flow, three_runs

SIZE = (120, 40)


async def test_the_filter_bar_s_lists_are_chosen_from_with_the_keyboard(tmp_path: Path) -> None:
    """``/``, tab to a select, enter opens its list, the arrows move the
    highlight, enter chooses it (and esc closes the list): the runs screen's
    enter (a priority key, so that it opens the selected run from anywhere)
    stood aside for a focused select but not for its open list, so enter
    there opened the run's detail and chose nothing."""
    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=ManualClock(START + 600))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)

        async def choose(select_id: str, keys: list[str], wanted: str) -> None:
            """With the focus on ``select_id``: enter, ``keys`` in its open list, enter."""
            select = screen.query_one(select_id, Select)
            assert app.focused is select
            await pilot.press("enter")
            await settle(pilot)
            overlay = select.query_one(SelectOverlay)
            assert app.focused is overlay and select.expanded
            await pilot.press(*keys)
            await settle(pilot)
            assert overlay.highlighted is not None
            assert str(overlay.get_option_at_index(overlay.highlighted).prompt) == wanted
            await pilot.press("enter")
            await settle(pilot)
            assert app.screen is screen  # no run's detail opened
            assert select.value == wanted and not select.expanded
            assert app.focused is select

        await pilot.press("slash", "tab")  # the status select
        await settle(pilot)
        await choose("#filter-status", ["down"] * 4, "completed")  # blank, pending, ... completed
        assert screen.filter.status == "completed"
        assert sorted(screen.table.run_ids) == sorted(ids)
        await pilot.press("tab")  # the kind select
        await choose("#filter-kind", ["down", "down", "up"], "flow")
        assert screen.filter.kind == "flow"
        await pilot.press("tab")  # the flow select: typing searches its list
        await choose("#filter-flow", ["n", "o"], "note")
        assert screen.filter.flow == "note"
        assert sorted(screen.table.run_ids) == sorted(ids)
        # esc closes an open list and leaves the bar and its filter as they are
        await pilot.press("enter")
        await settle(pilot)
        flow = screen.query_one("#filter-flow", Select)
        assert flow.expanded
        await pilot.press("escape")
        await settle(pilot)
        assert not flow.expanded and app.focused is flow
        assert screen.filters is not None and screen.filters.is_open
        assert screen.filter.flow == "note" and app.screen is screen


class Approval(BaseModel):
    answer: bool | None = None


#: the question's deadline (seconds; the test's clock jumps past it)
ASK_S = 20


def deadline_flow() -> CompiledFlow[Approval]:
    """Asks a yes/no question with an :data:`ASK_S` second deadline."""
    return (
        FlowBuilder("ship", Approval)
        .await_input("ok", "answer", prompt="Ship?", timeout_s=ASK_S)
        .step("ship", lambda s: {})
        .chain()
        .compile()
    )


def status_of(db: Path, run_id: str) -> str:
    store = open_store(db)
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


async def test_an_answer_after_the_deadline_says_the_run_timed_out_not_already_answered(
    tmp_path: Path,
) -> None:
    """The answer dialog stays open past the question's deadline; the app
    fires the deadline (the run is ``timed_out``), then Yes is pressed. The
    engine refuses it as a question already resolved; the app said "was
    already answered; the first answer stands" (nobody answered): it says
    what the CLI says, the run's status and that nothing was answered."""
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    clock = ManualClock(START)
    engine = Engine(open_store(db), flows=[deadline_flow()], clock=clock)
    try:
        run_id = engine.run("ship", Approval()).run_id
    finally:
        engine.store.close()
    app = FlowdeskApp(settings, flows=[deadline_flow()], clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        modal = await answer_dialog(pilot)
        assert isinstance(app.focused, Button) and app.focused.id == "answer-yes"
        clock.advance(ASK_S + 1)  # the deadline passes: the app's timers fire it
        await wait_until(pilot, lambda: status_of(db, run_id) == "timed_out")
        await settle(pilot)
        assert app.screen is modal
        await pilot.press("enter")  # Yes
        await wait_until(pilot, lambda: bool(modal.error_text))
        said = modal.error_text
        assert said == (
            f"Run {run_id[:8]} is timed_out, not waiting for an answer; nothing was answered."
        )
        assert "already answered" not in said
    assert status_of(db, run_id) == "timed_out"
