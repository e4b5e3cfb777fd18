"""What a new user of the app found (and the fixes): Yes has focus for a
tidy's yes/no question (its ``choices``), replay says what runs again before
it does, LangGraph thread ids are shown whole, the runs filter finds flow
names and esc clears it, and a database that is not open is said alike by
every key that needs it."""

from __future__ import annotations

from pathlib import Path

import pytest
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


@pytest.mark.parametrize("typed", ["", "no"])
async def test_yes_has_focus_for_a_tidys_yes_no_question_enter_approves_and_typing_types(
    tmp_path: Path, typed: str
) -> None:
    """Yes has focus (enter approves: the files move). A new user's report:
    with Yes focused, typing "no" went nowhere and enter pressed Yes, so
    every file moved. Typing now goes into the answer field: "no" + enter
    sends no, and nothing moves."""
    from textual.widgets import Input

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
        if typed:
            await pilot.press(*typed)
            assert isinstance(app.focused, Input) and app.focused.value == typed
        await pilot.press("enter")  # Yes, or the typed answer
        await settle(pilot)
        await wait_until(pilot, lambda: status_of(settings, run_id) != "waiting")
        assert "Type an answer first." not in dialog.error_text
    assert status_of(settings, run_id) == "completed"  # a tidy told no ends too
    if typed == "no":
        assert files_under(folder) == before
    else:
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
        assert "Runs again: apply and undo;" in confirm.detail
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


def two_threads(tmp_path: Path, *thread_ids: str) -> Settings:
    """LangGraph threads (waiting at their interrupt) saved by Flowdesk's saver."""
    from desktop_app.integrations.langgraph import FlowdeskSaver
    from tests.langgraph_worker import build_graph

    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    with FlowdeskSaver.open(tmp_path / "t.db") as saver:
        graph = build_graph(str(tmp_path / "counts.txt")).compile(checkpointer=saver)
        for thread_id in thread_ids:
            graph.invoke({"topic": "t"}, {"configurable": {"thread_id": thread_id}})
    return settings


@pytest.mark.parametrize("width", [80, 120])
async def test_langgraph_thread_ids_show_whole_and_flowdesk_ids_short(
    tmp_path: Path, width: int
) -> None:
    settings, run_id, _folder = waiting_tidy(tmp_path)
    long_a = "nightly-report-for-the-whole-team-" + "x" * 40 + "-a"
    long_b = "nightly-report-for-the-whole-team-" + "x" * 40 + "-b"
    two_threads(tmp_path, "release-42", "release-43", long_a, long_b)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(width, 30)) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        assert table.cell("release-42", "run") == "release-42"
        assert table.cell("release-43", "run") == "release-43"
        assert table.cell(run_id, "run") == run_id[:8]
        shown_a, shown_b = table.cell(long_a, "run"), table.cell(long_b, "run")
        assert shown_a != shown_b
        if width == 80:  # too long for 80 columns: cut in the middle, said by …
            assert "…" in shown_a and shown_a.endswith("x-a") and shown_b.endswith("x-b")
            assert len(shown_a) <= 80
        else:
            assert (shown_a, shown_b) == (long_a, long_b)
        assert "status" in table.shown_columns
        assert sum(table.column_width(k) + 2 for k in table.shown_columns) <= width


def tidy_and_digest(tmp_path: Path) -> tuple[Settings, str, str]:
    """A waiting tidy run and a completed digest run in one database."""
    from desktop_app.flows.digest import DigestState

    settings, tidy_id, _folder = waiting_tidy(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\nSome text about a.\n")
    engine = bootstrap.build_engine(settings)
    try:
        digest = engine.run("digest", DigestState(folder=str(notes), out=str(tmp_path / "out")))
    finally:
        engine.store.close()
    assert digest.status == "completed"
    return settings, tidy_id, digest.run_id


async def test_the_runs_filter_finds_flow_names_fits_80_columns_and_esc_clears_it(
    tmp_path: Path,
) -> None:
    from textual.widgets import Select

    from desktop_app.app.widgets.run_filters import RunFilter, RunFilters

    settings, tidy_id, digest_id = tidy_and_digest(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(80, 30)) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        await pilot.press("slash")
        await settle(pilot)
        bar = screen.query_one(RunFilters)
        search = bar.query_one("#filter-search")
        assert "flow" in str(search.placeholder)
        for select in bar.query(Select):  # each label on one line, whole
            label = select.query_one("#label")
            assert label.region.height == 1
            assert label.region.width >= len(str(select.prompt))
        assert bar.region.right <= 80
        await pilot.press(*"tidy")
        # "t" alone already finds only the tidy run: wait for the whole word's filter
        await wait_until(
            pilot,
            lambda: (
                screen.table.run_ids == [tidy_id]
                and "matching id, flow or key=tidy" in screen.page_line.message
            ),
        )
        await pilot.press(*["backspace"] * 4, *"dig")  # the start of one flow's name
        await wait_until(pilot, lambda: screen.table.run_ids == [digest_id])
        await pilot.press("escape")  # hides the bar and clears the filter
        await settle(pilot)
        assert not bar.is_open and screen.filter == RunFilter()
        assert sorted(screen.table.run_ids) == sorted([tidy_id, digest_id])
        assert app.focused is screen.table


async def test_every_key_that_needs_the_database_says_it_is_not_open(tmp_path: Path) -> None:
    from desktop_app.app.screens.runs import RunsScreen

    db = tmp_path / "t.db"
    db.write_text("not a database\n")
    before = db.read_bytes()
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.startup_error is not None
        await pilot.press("n")
        said = messages(app, "error")[-1]
        assert said == f"The database is not open: {app.startup_error}"
        for key in ("enter", "r", "a", "c", "o", "y", "slash", "i", "g", "s", "x", "]", "["):
            app.notices.clear()
            await pilot.press(key)
            await settle(pilot)
            assert isinstance(app.screen, RunsScreen), key
            assert messages(app) == [said], key
    assert db.read_bytes() == before


async def test_a_database_locked_at_launch_is_waited_for_and_opened_once_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process keeps the file's write lock past the busy timeout
    while the app opens it (a sqlite3 shell left in a transaction): the
    banner says so and that the app tries again; once the lock is given
    back the app opens the file and the banner goes. Before, it said
    "Cannot open the database … start Flowdesk with --db PATH … pointing at
    a usable file" and never tried again (a tryout's)."""
    from tests.lock_holder import release, write_lock_held

    monkeypatch.setenv("FLOWDESK_BUSY_TIMEOUT_S", "0.5")
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    with write_lock_held(db) as holder:
        app = FlowdeskApp(load_settings(db_path=db))
        async with app.run_test(size=SIZE) as pilot:
            banner = app.runs_screen.banner
            await wait_until(pilot, lambda: bool(banner.message))
            assert "stayed locked by another process past the busy timeout" in banner.message
            assert banner.message.endswith("until it is free (q quits).")
            assert "usable file" not in banner.message and app.startup_error is None
            release(holder)  # the lock is given back
            await wait_until(pilot, lambda: app.engine is not None, timeout=60)
            await settle(pilot)
            assert banner.message == "" and app.startup_error is None
            assert not messages(app, "error")
