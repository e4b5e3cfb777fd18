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
from textual.widgets import Button, Input, Static

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
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
from desktop_app.flow import FlowBuilder
from desktop_app.store.protocol import RunRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store
from tests.app_support import messages, settle, wait_until
from tests.runs_corpus import make_runs_db

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
        starting = sorted(
            (i for i in range(n) if hex_id(i).startswith(wanted[:4])), reverse=True
        )
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
        assert f"stored (#1) for 1 waiting run: {run_id[:8]}" in messages(app)[-1]
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
