"""What a new user's tryout of the app found (and the fixes), each through
Textual's pilot on a real SQLite file: the filter bar's lists are chosen from
with the keyboard (enter in an open list chose nothing and opened the selected
run); an answer given after its question timed out says the run timed out and
nothing was answered (it said the question "was already answered"); a cancel
and a timer on a full disk say what happened to the run and the command to run
once space is free, with the app's ``--db`` (they said the run stopped,
"interrupted", and `flowdesk resume --all`, with no ``--db``); a database file
moved, deleted or replaced while the app has it open turns the app read-only,
saying so, until it is back (it wrote on into the file no longer at the path)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from textual.widgets import Button, Input, Select
from textual.widgets._select import SelectOverlay

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.cli.output import Hints
from desktop_app.config import load_settings
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.definition import CompiledFlow
from desktop_app.store.sqlite.store import open_store
from tests.app_support import answer_dialog, messages, settle, wait_until
from tests.cli_support import as_printed, flowdesk
from tests.test_app_runs_view import START, note_flow, three_runs
from tests.test_app_timers import status_of
from tests.test_full_disk import fill
from tests.timer_flows import FLOWS_ENV, NAP_S, Order, napper
from tests.tmpfs_support import mounted_tmpfs

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


def approver_waiting(db: Path) -> str:
    """A new database at ``db`` with one ``approver`` run waiting; its id."""
    assert flowdesk(db, "db", "apply").returncode == 0
    started = flowdesk(db, "start", "approver", "--input", '{"order": "A"}')
    assert started.returncode == 0, started.stderr
    return started.stdout.split()[0]


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


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted in ``tmp_path``; the timer flows registered
    (``FLOWDESK_FLOWS``) for the app and the commands it prints."""
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS_ENV)
    with mounted_tmpfs(tmp_path / "disk", "2m") as mnt:
        yield mnt


def app_on(db: Path, clock: ManualClock | None = None) -> FlowdeskApp:
    """The app as ``flowdesk --db DB app`` opens it (its hints carry ``--db``)."""
    return FlowdeskApp(load_settings(db_path=db), hints=Hints(str(db), None), clock=clock)


async def test_a_cancel_on_a_full_disk_says_to_cancel_again_with_the_app_s_db(
    small_disk: Path,
) -> None:
    """The run waits; the cancel's save finds the disk full. The app said
    the run "stopped at its last saved step, shown as interrupted" and to
    run `flowdesk resume --all` (no ``--db``: the default database). It says
    nothing was written and to run the cancel again, which works as printed."""
    db = small_disk / "f.db"
    run_id = approver_waiting(db)
    app = app_on(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.runs_screen.selected_run_id() == run_id
        filler = fill(small_disk)
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: bool(messages(app, "error")))
        [said] = messages(app, "error")
    again = f"flowdesk --db {db} cancel {run_id}"
    assert said == (
        f"Run {run_id[:8]} was not canceled: the disk holding the database {db} is full (no "
        "space left on the device); nothing more was written and nothing saved before is lost. "
        f"Free at least 5 MiB on that disk, then run `{again}`."
    )
    assert "interrupted" not in said and "resume" not in said
    assert status_of(db, run_id) == "waiting"
    filler.unlink()  # the user frees space and runs the command as printed
    done = as_printed(said[said.index("`") + 1 : said.rindex("`")], env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert status_of(db, run_id) == "canceled"


async def test_a_timer_fired_on_a_full_disk_says_the_run_still_waits_and_resume_run(
    small_disk: Path,
) -> None:
    """A run's timer is due while the app is open on a full disk: the wake's
    save fails, the run still waits. The app said it "stopped at its last
    saved step, shown as interrupted" and `flowdesk resume --all` (no
    ``--db``); it says nothing was written, and the ``resume RUN`` that wakes
    it, with the app's ``--db``, which works as printed."""
    db = small_disk / "f.db"
    bootstrap.apply_schema(load_settings(db_path=db))
    clock = ManualClock(START)
    engine = Engine(open_store(db), flows=[napper], clock=clock)
    try:
        run_id = engine.run("napper", Order(order="A")).run_id  # sleeps NAP_S seconds
    finally:
        engine.store.close()
    app = app_on(db, clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        filler = fill(small_disk)
        clock.advance(NAP_S + 1)  # the timer is due: the app fires it
        await wait_until(pilot, lambda: bool(messages(app, "error")))
        said = messages(app, "error")[0]
        assert status_of(db, run_id) in ("waiting", "completed")  # the app fires it again
        timers = app.timers
        assert timers is not None
        passes = timers.passes
        await wait_until(pilot, lambda: timers.passes >= passes + 3)
        # the timer tried again at each pass: said once (a tryout: 11 stacked notices)
        assert messages(app, "error").count(said) == 1, messages(app, "error")
    then = f"flowdesk --db {db} resume {run_id}"
    assert said == (
        f"Run {run_id[:8]}: the disk holding the database {db} is full (no space left on the "
        "device); nothing more was written and nothing saved before is lost. Free at least "
        f"5 MiB on that disk, then run `{then}`."
    )
    assert "interrupted" not in said and "--all" not in said
    filler.unlink()  # the user frees space and runs the command as printed
    done = as_printed(said[said.index("`") + 1 : said.rindex("`")], env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} completed" in done.stdout


@pytest.mark.scenario("S128")
async def test_a_database_file_moved_away_turns_the_app_read_only_until_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder of the database the app has open is moved away (``mv``):
    answering and sending a signal "succeeded" into the file no longer at
    the path (lost with it, after ``rm -rf``). The app notices at its poll
    (the path's ``st_dev``/``st_ino`` against the file's at open), says so
    in its banner and refuses what writes; moved back, it goes on. Another
    file put at the path is said too."""
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS_ENV)
    folder, moved = tmp_path / "bad", tmp_path / "bad-moved"
    folder.mkdir()
    db = folder / "b.db"
    run_id = approver_waiting(db)
    app = app_on(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        banner = app.runs_screen.banner
        assert banner.message == ""
        folder.rename(moved)
        await wait_until(pilot, lambda: bool(banner.message))
        gone = banner.message
        assert gone.startswith(
            f"The database file {db} is gone (moved or deleted) since the app opened it: "
        )
        assert gone.endswith(
            f"Put it back at {db} to go on here, or quit (q) and start Flowdesk with --db "
            "naming where it is now."
        )
        assert messages(app, "error") == [gone]
        for key in ("a", "x"):  # answer, send a signal: refused, saying why
            app.notices.clear()
            await pilot.press(key)
            await settle(pilot)
            assert app.screen is app.runs_screen, key
            assert messages(app) == [gone], key
        assert status_of(moved / "b.db", run_id) == "waiting"  # nothing was written
        moved.rename(folder)  # put back: the app goes on
        await wait_until(pilot, lambda: banner.message == "")
        assert f"The database file {db} is back" in messages(app)[-1]
        modal = await answer_dialog(pilot)
        assert isinstance(modal, AnswerScreen)
        modal.query_one("#answer", Input).focus()
        await pilot.press(*"ok", "enter")
        await wait_until(pilot, lambda: status_of(db, run_id) == "completed")
        await settle(pilot)
        shutil.copy(db, tmp_path / "other.db")  # another file put at the path
        os.replace(tmp_path / "other.db", db)
        await wait_until(pilot, lambda: bool(banner.message))
        assert banner.message.startswith(
            f"The database file {db} was replaced by another file since the app opened it: "
        )


async def test_an_ended_run_s_detail_moves_its_ago_times_on_with_the_clock(tmp_path: Path) -> None:
    """The detail's "Started … (N min ago)" was redrawn every second only
    for a running run: an ended run's stayed at the value it was opened
    with (a tryout: "1 min ago" while the runs table said 2)."""
    from textual.widgets import Static

    from desktop_app.app.screens.detail import RunDetailScreen

    settings = load_settings(db_path=tmp_path / "t.db")
    three_runs(settings)
    clock = ManualClock(START + 600)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        detail = app.screen

        def header() -> str:
            return str(detail.query_one("#run-header", Static).render())

        await wait_until(pilot, lambda: "min ago" in header())
        clock.advance(2 * 3600)
        await wait_until(pilot, lambda: "(2 h ago)" in header())
