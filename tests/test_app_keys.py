"""Keys are discoverable: F1 (or ``?``) lists every key of the current screen,
on every screen, and at 80x24 the whole footer shows (Pilot, real SQLite)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from textual.pilot import Pilot
from textual.screen import ModalScreen, Screen
from textual.widgets import TabbedContent
from textual.widgets._footer import FooterKey

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.help import HelpScreen
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from tests.app_support import settle, wait_until


class Ask(BaseModel):
    answer: str | None = None


def ask_flow() -> CompiledFlow[Ask]:
    return (
        FlowBuilder("ask", Ask)
        .await_input("ok", "answer", prompt="Ship?", timeout_s=3600)
        .step("after", lambda s: {})
        .chain()
        .compile()
    )


def waiting_run(settings: Settings) -> str:
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[ask_flow()])
    try:
        return engine.run("ask", Ask()).run_id
    finally:
        engine.store.close()


Opener = Callable[[Pilot[None], str], Awaitable[None]]


async def press(pilot: Pilot[None], *keys: str) -> None:
    await pilot.press(*keys)
    await settle(pilot)


async def runs(pilot: Pilot[None], run_id: str) -> None:
    pass


async def inbox(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "i")


async def agent_runs(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "g")


async def detail(pilot: Pilot[None], run_id: str) -> None:
    app = pilot.app
    assert isinstance(app, FlowdeskApp)
    await wait_until(pilot, lambda: app.reader is not None)  # the app has opened its database
    app.controller.open_run(run_id)
    await wait_until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
    await settle(pilot)


async def answer(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "a")


async def cancel(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "c")


async def start_flow(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "s")


async def settings(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "ctrl+s")


async def signal(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "x")


async def new_digest(pilot: Pilot[None], run_id: str) -> None:
    await press(pilot, "n")


SCREENS: dict[str, Opener] = {
    "RunsScreen": runs,
    "InboxScreen": inbox,
    "AgentRunsScreen": agent_runs,
    "RunDetailScreen": detail,
    "AnswerScreen": answer,
    "ConfirmScreen": cancel,
    "StartFlowScreen": start_flow,
    "SettingsScreen": settings,
    "SignalScreen": signal,
    "NewDigestScreen": new_digest,
}


def own_keys(app: Any, screen: Screen[Any]) -> set[str]:
    """How the help shows each key the screen's class binds."""
    return {
        b.key_display or app.get_key_display(b)
        for b in type(screen)._merged_bindings.key_to_bindings.values()  # type: ignore[union-attr]
        for b in b
    }


@pytest.mark.parametrize("name", list(SCREENS))
async def test_help_lists_every_key_of_the_screen(tmp_path: Path, name: str) -> None:
    s = load_settings(db_path=tmp_path / "t.db")
    run_id = waiting_run(s)
    app = FlowdeskApp(s, flows=[ask_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await SCREENS[name](pilot, run_id)
        under = app.screen
        assert type(under).__name__ == name
        await press(pilot, "f1")  # works even while a text field has focus
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        shown = {k.key for k in help_screen.keys}
        assert own_keys(app, under) <= shown
        assert "F1" in shown
        if not isinstance(under, ModalScreen):  # a modal screen stops the app's keys
            assert {"i", "g", "s", "^s", "x", "?"} <= shown
        await press(pilot, "escape")
        assert app.screen is under


async def test_question_mark_opens_help_where_no_text_field_has_focus(tmp_path: Path) -> None:
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await press(pilot, "question_mark")  # ? again closes it
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("name", list(SCREENS))
async def test_the_whole_footer_shows_at_80x24(tmp_path: Path, name: str) -> None:
    s = load_settings(db_path=tmp_path / "t.db")
    run_id = waiting_run(s)
    app = FlowdeskApp(s, flows=[ask_flow()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await SCREENS[name](pilot, run_id)
        screen = app.screen
        assert type(screen).__name__ == name
        keys = list(screen.query(FooterKey))
        expected = {b.binding.action for b in screen.active_bindings.values() if b.binding.show}
        assert {k.action for k in keys} == expected  # keys of one action show once
        assert "F1" in {k.key_display for k in keys}
        for key in keys:  # every key is on screen, none past the right edge
            assert key.region.width > 0 and key.region.right <= 80, (name, key.key_display)


async def test_tabs_show_their_keys(tmp_path: Path) -> None:
    s = load_settings(db_path=tmp_path / "t.db")
    run_id = waiting_run(s)
    app = FlowdeskApp(s, flows=[ask_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await detail(pilot, run_id)
        tabs = app.screen.query_one(TabbedContent)
        labels = [str(tabs.get_tab(p).label) for p in ("tab-state", "tab-outbox", "tab-context")]
        # 60 cells for seven tabs with "4 Waits (1)": the long names are cut, the keys stay
        assert labels == ["1 State", "5 Out", "6 Ctx"]
        await press(pilot, "5")
        assert tabs.active == "tab-outbox"


def done_and_waiting(tmp_path: Path) -> tuple[FlowdeskApp, str, str]:
    """An app over two runs of the ask flow: one answered (completed), one waiting."""
    s = load_settings(db_path=tmp_path / "t.db")
    done, waiting = waiting_run(s), waiting_run(s)
    engine = bootstrap.build_engine(s, flows=[ask_flow()])
    try:
        assert engine.resume_with(done, "yes").status == "completed"
    finally:
        engine.store.close()
    return FlowdeskApp(s, flows=[ask_flow()]), done, waiting


def footer_actions(app: FlowdeskApp) -> set[str]:
    """The actions of the keys the footer shows now."""
    return {k.action for k in app.screen.query(FooterKey)}


async def test_the_footer_offers_only_the_run_keys_that_apply(tmp_path: Path) -> None:
    """A user's report: the footer offered r (resume), a (answer) and c
    (cancel) on a completed run, where each only said "nothing to do". The
    keys follow the selected run: a waiting run takes a, r and c, a completed
    one none; F1 still lists r, a and c, dimmed as not working now."""
    app, done, waiting = done_and_waiting(tmp_path)

    def footer() -> set[str]:
        return footer_actions(app)

    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.table  # type: ignore[attr-defined]
        table.follow(waiting)
        await wait_until(pilot, lambda: table.selected_run_id() == waiting)
        await settle(pilot)
        assert {"answer_run", "resume_run"} <= footer()  # resume: a due timer
        assert app.screen.check_action("cancel_run", ()) is True
        table.follow(done)
        await wait_until(pilot, lambda: table.selected_run_id() == done)
        await settle(pilot)
        assert {"answer_run", "resume_run", "cancel_run"}.isdisjoint(footer())
        await press(pilot, "r")  # a key that does not apply does nothing
        assert type(app.screen).__name__ == "RunsScreen"
        await press(pilot, "f1")
        dimmed = {k.key for k in app.screen.keys if not k.enabled}  # type: ignore[attr-defined]
        assert {"r", "a", "c"} <= dimmed


async def test_the_footer_keeps_its_keys_while_the_cursor_moves_over_runs_with_the_same_keys(
    tmp_path: Path,
) -> None:
    """Each cursor move refreshes the screen's bindings; the footer composes
    its keys again (a style and layout pass, ~800 objects) only when what it
    shows changed: over two waiting runs it keeps the same keys, on a
    completed run it shows that run's keys, and back on a waiting one the
    waiting run's keys again."""
    app, done, first = done_and_waiting(tmp_path)
    second = waiting_run(load_settings(db_path=tmp_path / "t.db"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.table  # type: ignore[attr-defined]

        async def select(run_id: str) -> list[FooterKey]:
            table.follow(run_id)
            await wait_until(pilot, lambda: table.selected_run_id() == run_id)
            await settle(pilot)
            return list(app.screen.query(FooterKey))

        on_first = await select(first)
        assert "answer_run" in {k.action for k in on_first}
        on_second = await select(second)
        assert [id(k) for k in on_second] == [id(k) for k in on_first]  # not composed again
        on_done = await select(done)
        assert "answer_run" not in {k.action for k in on_done}
        assert all(k.is_attached for k in on_done)
        assert not any(k.is_attached for k in on_first)
        back = await select(first)
        assert "answer_run" in {k.action for k in back}


@pytest.mark.slow
async def test_the_detail_and_inbox_footers_offer_only_keys_that_apply(tmp_path: Path) -> None:
    """A new user's report: a completed run's detail offered r, a and c
    (each only said "already completed"), and an empty inbox offered
    Approve and Reject. A waiting run's detail offers a and r; the inbox
    offers y and n while a question waits, and none once it is answered."""
    app, done, waiting = done_and_waiting(tmp_path)

    def footer() -> set[str]:
        return footer_actions(app)

    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for run_id, offered in ((done, set()), (waiting, {"answer", "resume", "cancel"})):
            app.controller.open_run(run_id)
            await settle(pilot)
            assert isinstance(app.screen, RunDetailScreen)
            await wait_until(pilot, lambda: app.screen.record is not None)  # type: ignore[attr-defined]
            await settle(pilot)
            assert footer() & {"answer", "resume", "cancel"} == offered, run_id
            assert app.screen.check_action("cancel", ()) is bool(offered)
            await press(pilot, "escape")
        await press(pilot, "i")
        assert {"approve", "reject"} <= footer()
        await press(pilot, "y")  # the waiting run's question: approved
        await wait_until(pilot, lambda: app.screen.items == [])  # type: ignore[attr-defined]
        await settle(pilot)
        assert {"approve", "reject", "answer"}.isdisjoint(footer())
