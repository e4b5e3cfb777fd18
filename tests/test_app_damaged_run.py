"""A run whose latest checkpoint was changed or deleted outside Flowdesk,
in the app on a real SQLite file (a tryout's report: the side panel said
"press r to resume", `r` showed the damage with the CLI's words and no
keys, and the run's screen showed its id and nothing else, so nothing in
the app could replay it). The side panel, `r` and the run's screen say
what works; the run's checkpoints still show; p on the intact revision
the hint names, as the hint says, replays the run, which then waits for
its answer as the damaged one did; c cancels the damaged run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from textual.widgets import Static

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.widgets.run_tables import CheckpointsTable
from desktop_app.config import load_settings
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until
from tests.cli_support import flowdesk
from tests.damaged_flows import stepper
from tests.test_app_detail import open_detail, select

ENV = {"FLOWDESK_FLOWS": '["tests.damaged_flows:stepper"]'}


def interrupted_and_damaged(db: Path, how: str, *, waiting: bool = False) -> str:
    """A ``stepper`` run (revision 1 its step's, 2 its wait's) left
    ``running`` by a process that is gone (``waiting``: left waiting for
    its answer), whose revision 2 was then damaged with the sqlite3 shell:
    ``changed`` (its state is no longer the JSON its checksum covers) or
    ``deleted``."""
    out = flowdesk(db, "start", "stepper", "--input", json.dumps({"order": "a"}), env=ENV)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.splitlines()[0]
    with sqlite3.connect(db) as conn:
        if how == "changed":
            sql = "UPDATE checkpoints SET state='{\"order\": 1' WHERE run_id=? AND revision=2"
        else:
            sql = "DELETE FROM checkpoints WHERE run_id=? AND revision=2"
        assert conn.execute(sql, (run_id,)).rowcount == 1
        if not waiting:
            sql = "UPDATE runs SET status='running', lease_owner=NULL WHERE run_id=?"
            conn.execute(sql, (run_id,))
    conn.close()
    return run_id


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.scenario("S106")
@pytest.mark.parametrize("how", ["changed", "deleted"])
async def test_a_damaged_run_says_what_works_and_its_hint_replays_it(
    db_path: Path, how: str
) -> None:
    db = db_path
    run_id = interrupted_and_damaged(db, how)
    what = "is missing" if how == "deleted" else "was changed outside Flowdesk"
    keys = (
        "select revision 1 in Checkpoints and press p to replay from it or f to fork it, "
        "or press c to cancel the run"
    )
    app = FlowdeskApp(load_settings(db_path=db), flows=[stepper])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        # the launch's recovery could not resume it: it says why and what works here
        await wait_until(pilot, lambda: any("was not resumed" in m for m in messages(app)))
        [launch] = [m for m in messages(app) if "was not resumed" in m]
        assert flat(launch).endswith(
            f"In the app: its checkpoint at revision 2 {what}: open the run (enter), {keys}."
        ), launch
        screen = app.runs_screen
        await wait_until(pilot, lambda: screen.table.selected_run_id() == run_id)
        said = f"interrupted — its checkpoint at revision 2 {what}: open the run (enter), {keys}"
        await wait_until(pilot, lambda: said in flat(screen.summary.text))
        assert "press r" not in screen.summary.text
        await pilot.press("r")  # refused: the same words as the launch's
        await wait_until(pilot, lambda: sum("In the app:" in m for m in messages(app)) == 2)
        detail = await open_detail(pilot, run_id)
        header = flat(str(detail.query_one("#run-header", Static).render()))
        assert f"interrupted — its checkpoint at revision 2 {what}: {keys}" in header, header
        assert not detail.check_action("resume", ()) and not detail.check_action("answer", ())
        timeline = detail.query_one(CheckpointsTable)
        await wait_until(pilot, lambda: 1 in timeline.revisions)
        await select(pilot, detail, 1)
        await pilot.press("p")
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        # what runs again: the step revision 2 saved, named when its row is
        # there to read, said unknown when it was deleted
        again = confirm.detail.splitlines()[-1]
        if how == "changed":
            assert again.startswith("Runs again: approve; what it did"), again
        else:
            assert again == (
                "Runs again: the step revision 2 saved (its checkpoint was deleted outside "
                "Flowdesk, so which step it was is not known); what it did (files moved or "
                "written, messages sent) is done again."
            ), again
        await pilot.press("y")
        await settle(pilot)
        replayed = app.screen
        assert isinstance(replayed, RunDetailScreen) and replayed.run_id != run_id
        new_id = replayed.run_id
    store = open_store(db)
    try:
        assert store.get_run(new_id).status == "waiting"  # for its answer, as revision 2 did
        assert store.get_run(new_id).parent_run_id == run_id
        assert store.latest(new_id).state["n"] == 1  # its step ran once, before revision 1
    finally:
        store.close()


@pytest.mark.scenario("S106")
async def test_c_cancels_a_damaged_run_as_its_hint_says(db_path: Path) -> None:
    run_id = interrupted_and_damaged(db_path, "changed")
    app = FlowdeskApp(load_settings(db_path=db_path), flows=[stepper])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        await wait_until(pilot, lambda: screen.table.selected_run_id() == run_id)
        await wait_until(pilot, lambda: "press c to cancel the run" in flat(screen.summary.text))
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        await wait_until(pilot, lambda: screen.table.cell(run_id, "status") == "canceled")
    store = open_store(db_path)
    try:
        assert store.get_run(run_id).status == "canceled"
    finally:
        store.close()


@pytest.mark.scenario("S106")
async def test_a_on_a_damaged_waiting_run_says_it_takes_no_answer_and_which_keys_work(
    db_path: Path,
) -> None:
    """A tryout: ``a`` on a waiting run whose latest checkpoint is damaged
    showed the store's error alone in the answer dialog (the CLI's words,
    no key); it says nothing can be answered and what works in the app."""
    run_id = interrupted_and_damaged(db_path, "deleted", waiting=True)
    app = FlowdeskApp(load_settings(db_path=db_path), flows=[stepper])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        await wait_until(pilot, lambda: screen.table.selected_run_id() == run_id)
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, AnswerScreen))
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen)
        await wait_until(pilot, lambda: bool(dialog.read_error))
        assert flat(dialog.read_error or "").endswith(
            "Nothing can be answered: press Escape, then open the run (enter), select "
            "revision 1 in Checkpoints and press p to replay from it or f to fork it, "
            "or press c to cancel the run."
        ), dialog.read_error
        assert "revision 2 is missing" in (dialog.read_error or "")
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("enter")  # as it says: the run's own screen
        await wait_until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
    store = open_store(db_path)
    try:
        assert store.get_run(run_id).status == "waiting"  # nothing was answered
    finally:
        store.close()


def test_the_side_panel_of_an_ended_run_names_no_next_step(db_path: Path) -> None:
    """A tryout: the side panel of a run timed out at its question said
    ``Next q``: no step comes after a run's end."""
    from desktop_app.app.widgets.run_summary import summary_text
    from desktop_app.flow import Engine
    from desktop_app.flow.clock import ManualClock
    from tests.timer_flows import ASK_S, Order, asker

    clock = ManualClock()
    store = open_store(db_path)
    try:
        engine = Engine(store, flows=[asker], clock=clock)
        run_id = engine.run("asker", Order(order="o")).run_id
        waiting = summary_text(store.get_run(run_id), store.latest(run_id), None, clock.now())
        assert "Next     approve" in waiting.plain
        clock.advance(ASK_S + 1)
        engine.tick()
        run, latest = store.get_run(run_id), store.latest(run_id)
        assert run.status == "timed_out" and latest.frontier == ("approve",)
        assert "Next" not in summary_text(run, latest, None, clock.now()).plain
    finally:
        store.close()


def test_the_hint_of_a_damaged_run_that_ended_offers_no_cancel(db_path: Path) -> None:
    """A completed run whose latest row was changed: its side panel names
    the revision to replay and offers no cancel (c refuses an ended run)."""
    from desktop_app.app.widgets.run_summary import latest_or_damage, summary_text
    from tests.damaged_flows import completed_stepper

    run_id, latest = completed_stepper(db_path)
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "UPDATE checkpoints SET error='x' WHERE run_id=? AND revision=?", (run_id, latest)
        )
    conn.close()
    store = open_store(db_path)
    try:
        run = store.get_run(run_id)
        said = flat(summary_text(run, latest_or_damage(store, run_id), None, run.updated_at).plain)
        assert (
            f"its checkpoint at revision {latest} was changed outside Flowdesk: open the run"
            in said
        )
        assert f"select revision {latest - 1} in Checkpoints" in said and "cancel" not in said
    finally:
        store.close()
