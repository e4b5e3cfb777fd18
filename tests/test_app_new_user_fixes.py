"""What a new user of the app found (and the fixes): Yes has focus for a
tidy's yes/no question (its ``choices``), replay says what runs again before
it does, LangGraph thread ids are shown whole, the runs filter finds flow
names and esc clears it, and a database that is not open is said alike by
every key that needs it."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Button

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.config import Settings, load_settings
from desktop_app.flows.tidy import TidyState
from tests.app_support import messages, settle, wait_until

SIZE = (120, 35)


def files_under(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


def waiting_tidy(tmp_path: Path) -> tuple[Settings, str, Path]:
    """A tidy run left waiting for approval (as ``flowdesk start tidy`` leaves it)."""
    folder = tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    (folder / "paper.pdf").write_bytes(b"pdf")
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        result = engine.run("tidy", TidyState(folder=str(folder)))
    finally:
        engine.store.close()
    assert result.status == "waiting"
    return settings, result.run_id, folder


def status_of(settings: Settings, run_id: str) -> str:
    store = bootstrap.open_sqlite_store(settings)
    try:
        return store.get_run(run_id).status
    finally:
        store.close()


async def test_yes_has_focus_for_a_tidys_yes_no_question_and_enter_approves(
    tmp_path: Path,
) -> None:
    settings, run_id, folder = waiting_tidy(tmp_path)
    before = files_under(folder)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen)
        assert isinstance(app.focused, Button) and app.focused.id == "answer-yes"
        await pilot.press("enter")  # Yes
        await settle(pilot)
        await wait_until(pilot, lambda: status_of(settings, run_id) == "completed")
        assert "Type an answer first." not in dialog.error_text
    assert files_under(folder) != before  # the files moved
    assert sorted(Path(p).name for p in files_under(folder)) == ["paper.pdf", "photo.jpg"]


def approved_tidy(tmp_path: Path) -> tuple[Settings, str]:
    """A tidy run approved and completed (its moves queued in the outbox)."""
    settings, run_id, _folder = waiting_tidy(tmp_path)
    engine = bootstrap.build_engine(settings)
    try:
        assert engine.resume_with(run_id, "yes").status == "completed"
    finally:
        engine.store.close()
    return settings, run_id


def run_ids(settings: Settings) -> list[str]:
    store = bootstrap.open_sqlite_store(settings)
    try:
        return [r.run_id for r in store.list_runs()]
    finally:
        store.close()


async def test_replay_says_which_steps_run_again_and_enter_keeps_the_run(
    tmp_path: Path,
) -> None:
    from desktop_app.app.screens.confirm import ConfirmScreen
    from desktop_app.app.screens.detail import RunDetailScreen
    from tests.test_app_detail import open_detail, select

    settings, run_id = approved_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        detail = await open_detail(pilot, run_id)
        await select(pilot, detail, 4)  # approved, nothing applied yet
        await pilot.press("p")
        await settle(pilot)
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        assert "Runs again: apply, undo;" in confirm.detail
        assert "files moved" in confirm.detail
        assert isinstance(app.focused, Button) and app.focused.id == "no"
        await pilot.press("enter")  # the default: No
        await settle(pilot)
        assert app.screen is detail
        assert run_ids(settings) == [run_id]  # nothing ran again
        await pilot.press("p", "y")
        await settle(pilot)
        await wait_until(pilot, lambda: len(run_ids(settings)) == 2)
        assert isinstance(app.screen, RunDetailScreen)
