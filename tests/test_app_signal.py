"""Send a signal from the app; a run waiting on it continues."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from textual.widgets import Button, Input

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.signal import SignalRequest, SignalScreen, parse_signal
from desktop_app.config import Settings, load_settings
from desktop_app.flow import FlowBuilder
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until


class Order(BaseModel):
    paid: dict | None = None


def pay_flow():
    return (
        FlowBuilder("pay", Order)
        .wait_signal("w", "payment", key="o-1", into="paid")
        .step("ship", lambda s: None)
        .chain()
        .compile()
    )


def waiting_pay_run(tmp_path: Path) -> tuple[Settings, str]:
    """Settings of a new SQLite file in ``tmp_path`` and a ``pay`` run
    waiting there for signal ``payment o-1``."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[pay_flow()])
    run_id = engine.run("pay", Order()).run_id
    engine.store.close()
    return settings, run_id


def test_parse_signal_explains_bad_input():
    assert parse_signal("", "k", "") == "Give the signal's name and key (a waiting run shows both)."
    assert "not JSON" in str(parse_signal("n", "k", "{oops"))
    assert parse_signal(" n ", "k", "") == SignalRequest("n", "k", None)


async def test_send_a_signal_from_the_app(tmp_path: Path) -> None:
    settings, run_id = waiting_pay_run(tmp_path)
    app = FlowdeskApp(settings, flows=[pay_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        form = app.screen
        assert isinstance(form, SignalScreen)
        # prefilled from the selected run's signal wait; the payload has focus
        assert form.query_one("#name", Input).value == "payment"
        assert form.query_one("#key", Input).value == "o-1"
        assert f"Run {run_id[:8]} waits for signal payment o-1" in str(
            form.query_one("#waiting").render()
        )
        assert form.query_one("#payload", Input).has_focus
        await pilot.press(*'{"amount": 3}')
        await pilot.press("enter")
        await settle(pilot)
        await wait_until(pilot, lambda: any("stored" in m for m in messages(app)))
    store = open_store(settings.db_path)
    try:
        run = store.get_run(run_id)
        assert run.status == "completed"
        assert store.latest(run_id).state["paid"] == {"amount": 3}
    finally:
        store.close()


async def test_answer_on_a_run_waiting_for_a_signal_sends_it_from_the_prefilled_form(
    tmp_path: Path,
) -> None:
    """``a`` on a run that waits for a signal shows what it waits for and a
    Send signal… button (no greyed Yes and No): it opens the signal form
    filled in from the run, and the payload sent there completes it."""
    settings, run_id = waiting_pay_run(tmp_path)
    app = FlowdeskApp(settings, flows=[pay_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AnswerScreen)
        assert "Send signal… below opens the signal form" in str(
            dialog.query_one("#prompt").render()
        )
        assert not dialog.query_one("#answer-yes", Button).display
        assert dialog.query_one("#send-signal", Button).has_focus  # enter presses it
        await pilot.press("enter")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, SignalScreen)
        assert form.query_one("#name", Input).value == "payment"
        assert form.query_one("#key", Input).value == "o-1"
        await pilot.press(*'{"amount": 5}', "enter")
        await wait_until(pilot, lambda: any("stored" in m for m in messages(app)))
    store = open_store(settings.db_path)
    try:
        assert store.get_run(run_id).status == "completed"
        assert store.latest(run_id).state["paid"] == {"amount": 5}
    finally:
        store.close()


async def test_a_payload_the_waiting_run_cannot_take_is_refused_once_in_plain_words(
    tmp_path: Path,
) -> None:
    """The refusal already says the signal was not sent; the app's notice
    said it twice ("The signal was not sent: signal ... was not sent: ...")."""
    settings, run_id = waiting_pay_run(tmp_path)
    app = FlowdeskApp(settings, flows=[pay_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        assert isinstance(app.screen, SignalScreen)
        await pilot.press(*"[1, 2]")  # a list where the run takes an object
        await pilot.press("enter")
        await settle(pilot)
        await wait_until(pilot, lambda: bool(messages(app, "error")))
        said = messages(app, "error")
        assert len(said) == 1 and said[0].count("not sent") == 1, said
        assert said[0].startswith("signal 'payment' with key 'o-1' was not sent"), said
    store = open_store(settings.db_path)
    try:
        assert store.get_run(run_id).status == "waiting"
    finally:
        store.close()
