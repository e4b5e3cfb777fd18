"""What a new user's tryout of the app found (and the fixes), each through
Textual's pilot on a real SQLite file: the filter finds any run by the 8
characters the table shows, however old; the signal dialog sends a key
holding control characters exactly and says when no run waits for it."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from textual.widgets import Button, DataTable, Input, Static

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens import inbox
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.runs import PAGE
from desktop_app.app.screens.signal import (
    SignalRequest,
    SignalScreen,
    escape_key,
    parse_signal,
    unescape_key,
)
from desktop_app.config import Settings, load_settings
from desktop_app.examples.approval import approval
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flows.tidy import TidyState
from desktop_app.store.protocol import RunRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.app_support import messages, open_inbox, settle, wait_until
from tests.cli_support import flowdesk
from tests.runs_corpus import make_runs_db
from tests.test_app_new_user_fixes import waiting_tidy

SIZE = (120, 40)


def hex_id(i: int) -> str:
    """Random-looking run ids (as ``uuid4().hex``): their first 8 characters differ."""
    return hashlib.sha256(str(i).encode()).hexdigest()[:32]


async def test_the_filter_finds_an_old_run_by_its_8_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 20,301 runs the 8 characters of the 20,279th newest found
    nothing (the prefix was looked for among the newest 20,000 only); the
    store now reads the id prefix as a range of its index, among every run."""
    n = 20_301
    db = make_runs_db(tmp_path / "runs.db", n, run_id=hex_id)
    wanted = hex_id(n - 20_279)  # the 20,279th newest
    assert sum(hex_id(i).startswith(wanted[:8]) for i in range(n)) == 1
    calls: list[dict[str, Any]] = []
    real = SqliteCheckpointStore.list_runs
    lock = threading.Lock()

    def spy(self: SqliteCheckpointStore, *args: Any, **kwargs: Any) -> list[RunRecord]:
        with lock:
            calls.append(kwargs)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SqliteCheckpointStore, "list_runs", spy)
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        await pilot.press("slash")
        await pilot.press(*wanted[:8], "enter")
        await wait_until(pilot, lambda: screen.table.run_ids == [wanted])
        assert "No runs matching" not in screen.page_line.message
        by_prefix = [c for c in calls if c.get("run_id_prefix") == wanted[:8]]
        assert by_prefix and all(c["limit"] <= PAGE + 1 for c in by_prefix)
        # 4 characters (the fewest taken) list every run starting with them.
        app.query_one("#filter-search", Input).value = ""
        await pilot.press(*wanted[:4], "enter")
        starting = sorted((i for i in range(n) if hex_id(i).startswith(wanted[:4])), reverse=True)
        await wait_until(pilot, lambda: screen.table.run_ids == [hex_id(i) for i in starting])


#: the approval example's order id, with characters a one-line field cannot keep
ORDER = "o-é\u202e\u001b[31m\n\t"


def approved_order(tmp_path: Path, order: str = ORDER) -> tuple[Settings, str]:
    """The README's approval example, answered ``yes``: waiting for signal ``paid`` ``order``."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[approval])
    try:
        run_id = engine.run("approval", {"order": order}).run_id
        assert engine.resume_with(run_id, "yes").status == "waiting"
    finally:
        engine.store.close()
    return settings, run_id


def run_of(settings: Settings, run_id: str) -> tuple[str, dict[str, Any]]:
    store = open_store(settings.db_path)
    try:
        return store.get_run(run_id).status, dict(store.latest(run_id).state)
    finally:
        store.close()


@pytest.mark.parametrize(
    "key",
    [ORDER, "plain", " spaced ", "back\\slash", "x\\n", "\U0001f600\x7f\x9b", "\\"],
)
def test_the_key_field_reads_back_exactly_the_key_it_shows(key: str) -> None:
    shown = escape_key(key)
    assert shown.isprintable() and shown == shown.strip()
    assert unescape_key(shown) == key
    assert parse_signal("paid", shown, "") == SignalRequest("paid", key, None)
    # spaces typed around it are not the key's (its own are written \x20)
    assert parse_signal("paid", f"  {shown} ", "") == SignalRequest("paid", key, None)


def test_a_key_with_an_unknown_escape_is_refused_with_how_to_write_it() -> None:
    assert parse_signal("paid", "o\\q", "") == (
        "The key is not readable: \\q at column 2 is no escape the key knows "
        "(\\n \\t \\r \\xNN \\uNNNN \\UNNNNNNNN; \\\\ for a backslash)."
    )
    assert "\\ at the end at column 3" in str(parse_signal("paid", "o-\\", ""))


async def test_the_signal_dialog_keeps_a_key_with_control_characters(tmp_path: Path) -> None:
    """The prefilled key lost its ``\\n\\t`` (a one-line field, then a
    strip): the signal was stored under another key and the run kept
    waiting. The key is shown escaped and read back exactly: the run ships."""
    settings, run_id = approved_order(tmp_path)
    app = FlowdeskApp(settings, flows=[approval])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        form = app.screen
        assert isinstance(form, SignalScreen)
        shown = "o-é\\u202e\\x1b[31m\\n\\t"
        assert form.query_one("#key", Input).value == shown
        assert f"waits for signal paid {shown}." in str(form.query_one("#waiting").render())
        await pilot.press(*'{"amount": 3}', "enter")
        await settle(pilot)
        await wait_until(pilot, lambda: any("stored" in m for m in messages(app)))
        assert messages(app, "warning") == []
        assert f"stored (#1), delivered to run {run_id[:8]}" in messages(app)[-1]
        await wait_until(pilot, lambda: run_of(settings, run_id)[0] == "completed")
    assert run_of(settings, run_id)[1]["paid"] == {"amount": 3}
    assert run_of(settings, run_id)[1]["shipped"] is True


async def test_a_signal_no_run_waits_for_says_so_in_the_cli_s_words(tmp_path: Path) -> None:
    settings, run_id = approved_order(tmp_path, order="o-1")
    app = FlowdeskApp(settings, flows=[approval])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        form = app.screen
        assert isinstance(form, SignalScreen)
        form.query_one("#key", Input).value = "o-2\\n"
        form.query_one("#payload", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        await wait_until(pilot, lambda: bool(messages(app, "warning")))
        assert messages(app, "warning") == [
            "Signal paid o-2\\n stored (#1), but no run waits for signal 'paid' with key "
            "'o-2\\n' now; it is kept for the first run that waits for it"
        ]
    assert run_of(settings, run_id)[0] == "waiting"


def asked_order(tmp_path: Path, flows: list[Any] | None = None) -> tuple[Settings, str]:
    """The README's approval example, waiting for its answer ("Ship this order?")."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=flows or [approval])
    try:
        name = (flows or [approval])[0].name
        result = engine.run(name, {"order": "o-1"})
        assert result.status == "waiting"
    finally:
        engine.store.close()
    return settings, result.run_id


async def test_yes_has_focus_for_a_literal_yes_no_field_and_enter_approves(
    tmp_path: Path,
) -> None:
    """The approval example's field is ``Literal["yes", "no"]``: the text
    field had focus and enter said "Type an answer first"."""
    settings, run_id = asked_order(tmp_path)
    app = FlowdeskApp(settings, flows=[approval])
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AnswerScreen)
        assert isinstance(app.focused, Button) and app.focused.id == "answer-yes"
        await pilot.press("enter")
        await settle(pilot)
        await wait_until(pilot, lambda: run_of(settings, run_id)[1]["approved"] == "yes")
    assert run_of(settings, run_id) == (
        "waiting",
        {"order": "o-1", "approved": "yes", "paid": None, "shipped": False},
    )


class Pick(BaseModel):
    order: str
    size: Literal["small", "medium", "large"] | None = None


pick = (
    FlowBuilder("pick", Pick, inputs=("order",))
    .await_input("size", "size", prompt="Which size?")
    .step("done", lambda s: {})
    .chain("size", "done")
    .compile()
)


async def test_a_literal_field_s_values_are_shown_as_the_answers_it_takes(
    tmp_path: Path,
) -> None:
    settings, run_id = asked_order(tmp_path, [pick])
    app = FlowdeskApp(settings, flows=[pick])
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen)
        assert isinstance(app.focused, Input) and app.focused.id == "answer"
        shown = str(dialog.query_one("#prompt", Static).render())
        assert "Question: Which size?\nAnswers: small, medium, large" in shown
        await pilot.press(*"large", "enter")
        await settle(pilot)
        await wait_until(pilot, lambda: run_of(settings, run_id)[0] == "completed")
    assert run_of(settings, run_id)[1]["size"] == "large"


def asked_orders(tmp_path: Path, n: int) -> tuple[Settings, list[str]]:
    """``n`` runs of the approval example waiting for their answers, oldest first."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[approval])
    try:
        ids = [engine.run("approval", {"order": f"o-{i}"}).run_id for i in range(n)]
    finally:
        engine.store.close()
    return settings, ids


async def test_the_inbox_reads_a_bounded_page_and_space_redraws_one_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 20,300 waiting runs the inbox took 36 s to open (every run's
    checkpoint read, every row drawn) and each space 16 s (every row
    redrawn). It reads the oldest INBOX_LIMIT questions (a page of runs at a
    time) and space redraws only its row (timed in benchmarks/bench_app_inbox.py)."""
    monkeypatch.setattr(inbox, "INBOX_LIMIT", 3)
    monkeypatch.setattr(inbox, "RUNS_PER_READ", 2)
    settings, ids = asked_orders(tmp_path, 5)
    reads: list[str] = []
    real = SqliteCheckpointStore.latest

    def spy(self: SqliteCheckpointStore, run_id: str) -> Any:
        reads.append(run_id)
        return real(self, run_id)

    app = FlowdeskApp(settings, flows=[approval])
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        monkeypatch.setattr(SqliteCheckpointStore, "latest", spy)
        screen = await open_inbox(pilot)
        assert [i.run_id for i in screen.items] == ids[:3]
        assert set(reads) == set(ids[:3])
        assert screen.status_text == (
            "3 flow questions wait for you, and more: the oldest 3 flow questions are "
            "shown (answering them shows the next)."
        )
        fills: list[object] = []
        real_fill = screen._fill
        # a commit the launch's own work makes late on a loaded machine would
        # reload the inbox (a full fill, rightly: the app's reload, or the
        # inbox's own poll of the database's version, once in CI): this
        # counts what space draws, and reloads come back before the answer
        monkeypatch.setattr(app, "_reload_all", lambda: None)
        reload = screen.reload
        screen.reload = lambda: None  # type: ignore[method-assign]
        monkeypatch.setattr(screen, "_fill", lambda *a: fills.append(a) or real_fill(*a))
        await pilot.press("space")
        await pilot.pause()
        assert fills == [] and screen.marked == {screen.items[0].key}
        assert screen.table.get_cell(screen.items[0].key, "run").plain == f"● {ids[0][:8]}"
        assert screen.table.get_cell(screen.items[1].key, "run").plain == ids[1][:8]
        await pilot.press("space")
        await pilot.pause()
        assert screen.marked == set()
        assert screen.table.get_cell(screen.items[0].key, "run").plain == ids[0][:8]
        # answering the first makes room for the fourth
        screen.reload = reload  # type: ignore[method-assign]
        await pilot.press("y")
        await wait_until(pilot, lambda: [i.run_id for i in screen.items] == ids[1:4])
        assert not any("answered elsewhere" in m for m in messages(app))


async def open_plan_dialog(pilot: Any) -> tuple[Any, AnswerScreen]:
    """y on the inbox's tidy question: (the inbox, the plan dialog it opens
    with Yes focused)."""
    screen = await open_inbox(pilot)
    await pilot.press("y")
    await settle(pilot)
    dialog = pilot.app.screen
    assert isinstance(dialog, AnswerScreen)
    assert isinstance(pilot.app.focused, Button) and pilot.app.focused.id == "answer-yes"
    return screen, dialog


async def test_y_in_the_inbox_through_the_plan_dialog_is_not_answered_elsewhere(
    tmp_path: Path,
) -> None:
    """A tidy's first y shows its plan (the answer dialog); Yes there
    answered it, and back in the inbox the notice said the question "was
    answered elsewhere"."""
    settings, run_id, _folder = waiting_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 35)) as pilot:
        screen, _dialog = await open_plan_dialog(pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen and screen.items == [])
        await settle(pilot)
        said = messages(app)
        assert not any("answered elsewhere" in m for m in said), said
        assert f"Answered {run_id}:approve:0; run {run_id[:8]} goes on." in said


@pytest.mark.parametrize(("second", "moved"), [("y", True), ("N", False)])
async def test_a_second_y_typed_in_the_plan_dialog_answers_yes(
    tmp_path: Path, second: str, moved: bool
) -> None:
    """A tryout: y on a tidy in the inbox showed its plan (the answer
    dialog); after an arrow key a second y was typed into the answer field
    (keys typed on a button go there), and enter then refused "'y' is not
    an answer". The field of a yes/no question takes y and n, as the
    inbox's keys do: y there approves (the files move), n declines."""
    settings, run_id, folder = waiting_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 35)) as pilot:
        screen, dialog = await open_plan_dialog(pilot)
        await pilot.press("down", second)
        await settle(pilot)
        assert isinstance(app.focused, Input) and app.focused.value == second
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen and screen.items == [])
        await settle(pilot)
        said = messages(app)
        assert f"Answered {run_id}:approve:0; run {run_id[:8]} goes on." in said, said
        assert "is not an answer" not in dialog.error_text
        if moved:  # the app delivers the moves
            await wait_until(pilot, lambda: not (folder / "photo.jpg").exists())
    assert (folder / "photo.jpg").exists() is not moved


async def test_the_tidy_plan_shows_each_file_and_where_it_moves_at_80x24(
    tmp_path: Path,
) -> None:
    """Long file names took the whole width at 80x24: only the File column
    showed. File and Moves to now share the width, each wrapped in full."""
    folder = tmp_path / "Downloads"
    folder.mkdir()
    names = [
        "quarterly-financial-report-for-the-board-meeting-final-v3.pdf",
        "holiday-photo-from-the-mountains-with-the-whole-family-2026.jpg",
    ]
    for name in names:
        (folder / name).write_bytes(b"x")
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        run_id = engine.run("tidy", TidyState(folder=str(folder))).run_id
    finally:
        engine.store.close()
    app = FlowdeskApp(settings)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen)
        table = dialog.query_one("#preview", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2)
        await pilot.pause()
        labels = [str(c.label) for c in table.columns.values()]
        assert labels == ["File", "Kind", "Status", "Moves to"]
        widths = [c.get_render_width(table) for c in table.columns.values()]
        assert sum(widths) <= table.scrollable_content_region.width, widths
        assert table.virtual_size.width <= table.scrollable_content_region.width
        # each cell's text is all there, wrapped over the row's lines
        for row in table.ordered_rows:
            file, _kind, _status, moves_to = (str(c) for c in table.get_row(row.key))
            assert file in names and moves_to.endswith(file)
            assert row.height >= -(
                -len(moves_to) // table.columns[table.ordered_columns[3].key].width
            )
    assert run_id


@pytest.mark.parametrize("answer", ["no", "yes"])
async def test_a_declined_tidy_shows_nothing_moved_in_runs_and_the_app(
    tmp_path: Path, answer: str
) -> None:
    """A tidy answered no (nothing moved) showed ``completed 50/50`` with a
    full bar: its progress counts the moves queued, not the files handled."""
    settings, run_id, _folder = waiting_tidy(tmp_path)
    engine = bootstrap.build_engine(settings)
    try:
        assert engine.resume_with(run_id, answer).status == "completed"
    finally:
        engine.store.close()
    shown = "0/2" if answer == "no" else "2/2"
    listed = flowdesk(settings.db_path, "runs")
    assert listed.returncode == 0, listed.stderr
    (line,) = [row for row in listed.stdout.splitlines() if run_id[:8] in row]
    assert "completed" in line and shown in line.split(), line
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.runs_screen.table
        await wait_until(pilot, lambda: run_id in table.run_ids)
        assert table.cell(run_id, "progress") == shown
        full = "█" in table.cell(run_id, "bar")
        assert full is (answer == "yes")


class Note(BaseModel):
    text: str = ""


note = FlowBuilder("note", Note).step("write", lambda s: {"text": "x"}).chain().compile()


async def test_the_side_panel_s_updated_ago_keeps_counting(tmp_path: Path) -> None:
    """The side panel kept "Updated 6 s ago" while the table said 32 s: it
    was drawn only when the selection changed. The times timer redraws it."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    start = ManualClock().now()
    engine = Engine(open_store(settings.db_path), flows=[note], clock=ManualClock(start))
    try:
        run_id = engine.run("note", Note()).run_id
        updated = engine.store.get_run(run_id).updated_at
    finally:
        engine.store.close()
    clock = ManualClock(updated + 6)
    app = FlowdeskApp(settings, flows=[note], clock=clock)
    async with app.run_test(size=(170, 40)) as pilot:
        await settle(pilot)
        screen = app.runs_screen
        assert screen.has_class("-wide")
        await wait_until(pilot, lambda: "Updated  6 s ago" in screen.summary.text)
        clock.advance(26)
        await wait_until(pilot, lambda: screen.table.cell(run_id, "updated") == "32 s ago")
        await wait_until(pilot, lambda: "Updated  32 s ago" in screen.summary.text)


async def test_an_answer_refused_in_the_plan_dialog_leaves_the_focus_in_the_field(
    tmp_path: Path,
) -> None:
    """A tryout: in a tidy's plan dialog (a yes/no question) "nope" typed and
    enter was refused ("is not an answer"), the focus went back to Yes, and
    the next enter approved: the files moved that the person had declined
    to move. After a refusal the focus stays in the answer field with the
    text to edit; enter sends the text again (refused again), backspace
    edits it, and "no" then declines: nothing moves."""
    settings, run_id, folder = waiting_tidy(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 35)) as pilot:
        screen, dialog = await open_plan_dialog(pilot)
        await pilot.press(*"nope", "enter")
        await wait_until(pilot, lambda: "is not an answer" in dialog.error_text)
        await settle(pilot)
        assert isinstance(app.focused, Input) and app.focused.value == "nope"
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is dialog and "is not an answer" in dialog.error_text
        assert isinstance(app.focused, Input)
        await pilot.press(*["backspace"] * 4, "n", "o", "enter")
        await wait_until(pilot, lambda: app.screen is screen and screen.items == [])
        await settle(pilot)
    assert (folder / "photo.jpg").exists()
    shown = flowdesk(settings.db_path, "show", run_id)
    files = shown.stdout.split("files:", 1)[-1].split("\n", 1)[0]
    assert files.strip() == "2 not moved (not approved)", shown.stdout
