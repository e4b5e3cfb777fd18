"""Everyday use (issue 28): open a run's output with the system opener,
copy a run id, j/k move the cursor (Fork is f in the detail), Yes has focus
for a yes/no question, and Screenshot works without ~/Downloads."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from textual.widgets import Button

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp, screenshot_dir
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.fork import ForkScreen
from desktop_app.flows.digest import DigestState
from tests.app_support import messages, settle, wait_until
from tests.test_app_inbox_settings import Approval, approve_flow, settings_for, waiting_runs

SIZE = (120, 35)


def fake_opener(bin_dir: Path, log: Path) -> None:
    """An ``xdg-open`` (and ``open``) that writes its arguments to ``log``."""
    bin_dir.mkdir()
    for name in ("xdg-open", "open"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{log}"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


async def test_o_opens_a_digest_report_with_the_system_opener_and_y_copies_the_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\nSome text about a.\n")
    settings = settings_for(tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        result = engine.run("digest", DigestState(folder=str(notes), out=str(tmp_path / "out")))
    finally:
        engine.store.close()
    assert result.status == "completed"
    log = tmp_path / "opened.log"
    fake_opener(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        await wait_until(pilot, log.exists)
        await wait_until(pilot, lambda: log.read_text().strip() != "")
        assert log.read_text().splitlines() == [str(tmp_path / "out" / "digest.md")]
        await pilot.press("y")
        await settle(pilot)
        assert app.clipboard == result.run_id
        assert messages(app)[-1] == f"Copied run id {result.run_id}."


async def test_j_and_k_move_the_cursor_and_f_forks_in_the_detail(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    waiting_runs(settings, [approve_flow("1")], *[("approve", Approval())] * 3)
    app = FlowdeskApp(settings, flows=[approve_flow("1")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("enter")
        await settle(pilot)
        detail = app.screen
        assert isinstance(detail, RunDetailScreen)
        await pilot.press("k")  # moves up the timeline: no fork dialog
        await settle(pilot)
        assert app.screen is detail
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, ForkScreen)


async def test_yes_has_focus_for_a_yes_no_question(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    (run_id,) = waiting_runs(settings, [approve_flow("1")], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[approve_flow("1")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AnswerScreen)
        assert isinstance(app.focused, Button) and app.focused.id == "answer-yes"
        await pilot.press("enter")  # Yes
        await settle(pilot)
    store = bootstrap.open_sqlite_store(settings)
    try:
        assert store.get_run(run_id).status == "completed"
    finally:
        store.close()


async def test_a_screenshot_is_saved_without_a_downloads_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(home / "Downloads"))
    where = screenshot_dir()
    assert where == home / ".local" / "share" / "flowdesk" / "screenshots"
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_screenshot()
        await wait_until(pilot, lambda: any(where.glob("*.svg")))
        assert not messages(app, "error")


async def test_a_screenshot_in_downloads_is_readable_by_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A screenshot shows run questions, file names and conversations: it is
    created 0600 like the database, also in a ``~/Downloads`` others may read
    and under the usual umask 022 (Textual alone wrote it 0644)."""
    home = tmp_path / "home"
    downloads = home / "Downloads"
    downloads.mkdir(parents=True)
    downloads.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(downloads))
    assert screenshot_dir() == downloads
    old_umask = os.umask(0o022)
    try:
        app = FlowdeskApp(settings_for(tmp_path / "t.db"))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.action_screenshot()
            await wait_until(
                pilot,
                lambda: any(
                    p.read_text().rstrip().endswith("</svg>") for p in downloads.glob("*.svg")
                ),
            )
            assert not messages(app, "error")
    finally:
        os.umask(old_umask)
    [shot] = downloads.glob("*.svg")
    assert "<svg" in shot.read_text()
    assert stat.S_IMODE(shot.stat().st_mode) == 0o600


async def test_a_screenshot_to_a_missing_folder_says_so_and_the_app_goes_on(
    tmp_path: Path,
) -> None:
    """The 0600 file is made before Textual writes it; a folder that cannot
    take it is Textual's failure toast, as before, never a crash of the app."""
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.deliver_screenshot(path=str(tmp_path / "missing"))
        await settle(pilot)
        await pilot.press("i")  # still answering keys
        await settle(pilot)
        assert app.is_running
    assert not (tmp_path / "missing").exists()


def two_tidies(tmp_path: Path) -> tuple[object, list[str]]:
    from desktop_app.flows.tidy import TidyState

    settings = settings_for(tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    ids = []
    try:
        for name in ("one", "two"):
            folder = tmp_path / name
            folder.mkdir()
            (folder / "paper.pdf").write_bytes(b"pdf")
            result = engine.run("tidy", TidyState(folder=str(folder)))
            assert result.status == "waiting"
            ids.append(result.run_id)
    finally:
        engine.store.close()
    return settings, ids


async def test_y_shows_a_tidys_plan_before_its_first_approval(tmp_path: Path) -> None:
    from desktop_app.app.screens.inbox import InboxScreen

    settings, ids = two_tidies(tmp_path)
    app = FlowdeskApp(settings)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert isinstance(inbox, InboxScreen)
        first = inbox.selected
        assert first is not None
        await pilot.press("y")  # the plan first, nothing approved
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen) and dialog.run.run_id == first.run_id
        assert dialog.query_one("#preview").display  # the planned moves
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is inbox
        assert {i.run_id for i in inbox.items} == set(ids)  # still waiting
        await pilot.press("y")  # seen: approved now
        await settle(pilot)
        await wait_until(pilot, lambda: first.run_id not in {i.run_id for i in inbox.items})
        assert app.screen is inbox


async def test_space_selects_several_questions_and_y_approves_them_all(tmp_path: Path) -> None:
    from desktop_app.app.screens.inbox import InboxScreen

    settings = settings_for(tmp_path / "t.db")
    ids = waiting_runs(settings, [approve_flow("1")], *[("approve", Approval())] * 3)
    app = FlowdeskApp(settings, flows=[approve_flow("1")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert isinstance(inbox, InboxScreen)
        order = [i.run_id for i in inbox.items]
        await pilot.press("space")
        await settle(pilot)
        assert "1 selected: y approves it, n rejects it." in messages(app)
        await pilot.press("down", "space")
        await settle(pilot)
        assert "2 selected: y approves them all, n rejects them all." in messages(app)
        assert inbox.table.get_cell(inbox.items[0].key, "run").plain.startswith("● ")
        await pilot.press("y")
        await settle(pilot)
        await wait_until(pilot, lambda: [i.run_id for i in inbox.items] == order[2:])
    store = bootstrap.open_sqlite_store(settings)
    try:
        statuses = {r: store.get_run(r).status for r in ids}
    finally:
        store.close()
    assert sorted(statuses.values()) == ["completed", "completed", "waiting"]
    assert statuses[order[2]] == "waiting"


async def test_the_runs_filter_applies_as_you_type(tmp_path: Path) -> None:
    from desktop_app.app.screens.runs import RunsScreen
    from desktop_app.config import load_settings
    from desktop_app.flow.clock import ManualClock
    from tests.test_app_runs_view import START, note_flow, three_runs

    settings = load_settings(db_path=tmp_path / "t.db")
    ids = three_runs(settings)
    app = FlowdeskApp(settings, flows=[note_flow()], clock=ManualClock(START + 600))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await pilot.press("slash", *ids[1][:8])  # no enter
        await wait_until(pilot, lambda: screen.table.run_ids == [ids[1]])
        await pilot.press(*["backspace"] * 8)
        await wait_until(pilot, lambda: len(screen.table.run_ids) == 3)


def test_the_approval_example_asks_only_for_the_order() -> None:
    from desktop_app.app.screens.start_flow import form_fields
    from desktop_app.examples.approval import approval

    assert [name for name, _ in form_fields(approval)] == ["order"]


async def test_the_detail_header_shows_the_authors_version_not_its_hash(tmp_path: Path) -> None:
    from textual.widgets import Static

    settings = settings_for(tmp_path / "t.db")
    flow = approve_flow("1.2")
    (run_id,) = waiting_runs(settings, [flow], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[flow])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.controller.open_run(run_id)
        await settle(pilot)
        header = str(app.screen.query_one("#run-header", Static).render())
        assert "Flow approve 1.2\n" in header
        assert flow.version.split("+")[1] not in header
        assert app.screen.query_one("ContextTable").value("Flow version") == flow.version  # type: ignore[attr-defined]


async def test_a_theme_chosen_in_the_app_is_saved_and_opens_next_time(tmp_path: Path) -> None:
    import tomllib

    from desktop_app.config import config_file, load_settings

    db = tmp_path / "t.db"
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.theme = "nord"  # what the command palette's "Change theme" does
        await settle(pilot)
    assert tomllib.loads(config_file().read_text())["theme"] == "nord"
    again = FlowdeskApp(load_settings(db_path=db))
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert again.theme == "nord"
        assert not messages(again, "warning")


def test_times_are_local_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """One time format: local time (the offset said in the run's header)."""
    import time

    from desktop_app.app.format import local_when, when
    from desktop_app.app.widgets.run_tables import CheckpointsTable, StepsTable

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert when(0.0) == "1970-01-01 09:00:00"
        assert local_when(0.0) == "1970-01-01 09:00:00 +0900"
        labels = [label for _, label in (*CheckpointsTable.COLUMNS, *StepsTable.COLUMNS)]
        assert not [label for label in labels if "UTC" in label]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_folder_completion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from desktop_app.app.widgets.paths import complete_folder

    (tmp_path / "notes").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / ".nothing").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert complete_folder(f"{tmp_path}/note") == f"{tmp_path}/notebooks/"
    assert complete_folder(f"{tmp_path}/notes") == f"{tmp_path}/notes/"
    assert complete_folder("~/notes") == "~/notes/"
    assert complete_folder("~/.no") == "~/.nothing/"
    assert complete_folder("~/zz") is None
    monkeypatch.chdir(tmp_path)
    assert complete_folder("notes") == "notes/"


async def test_the_folder_field_completes_a_folder_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from textual.widgets import Input

    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    app = FlowdeskApp(settings_for(tmp_path / "t.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        field = app.screen.query_one("#folder", Input)
        await pilot.click("#folder")
        await pilot.press(*"no")
        await pilot.pause(0.2)
        await pilot.press("right")  # takes the suggestion
        await pilot.pause()
        assert field.value == "notes/"
