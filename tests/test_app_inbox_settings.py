"""The app's inbox, start-any-flow form, settings and launch report (S51).

Driven headless with Pilot over real SQLite files. Runs left waiting are made
by another engine first (like ``flowdesk start`` in another process).
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from keyring.backend import KeyringBackend
from pydantic import BaseModel, Field
from textual.pilot import Pilot
from textual.widgets import Button, Input, Select

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.ask import AskScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.launch_report import FAIL_REASON, LaunchReportScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.screens.settings import SettingsScreen, dump_toml, masked
from desktop_app.app.screens.start_flow import StartFlowScreen, build_state, is_text, prefill
from desktop_app.config import Settings, config_file, load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from desktop_app.secrets import SERVICE
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until
from tests.file_keyring import installed

SIZE = (140, 45)
#: 3 h 12 min 30 s: shown as "in 3h 12m".
DEADLINE_S = 3 * 3600 + 12 * 60 + 30


# -- flows -----------------------------------------------------------------------


class Approval(BaseModel):
    answer: bool | None = None
    done: bool = False


def approve_flow(version: str = "1") -> CompiledFlow[Approval]:
    return (
        FlowBuilder("approve", Approval, version=version)
        .await_input("ok", "answer", prompt="Ship?")
        .step("ship", lambda s: {"done": True})
        .chain()
        .compile()
    )


class Review(BaseModel):
    verdict: str | None = None


def review_flow() -> CompiledFlow[Review]:
    return (
        FlowBuilder("review", Review)
        .await_input("check", "verdict", prompt="Looks good?", timeout_s=DEADLINE_S)
        .step("after", lambda s: {})
        .chain()
        .compile()
    )


class Deploy(BaseModel):
    go: object = None


def signal_flow() -> CompiledFlow[Deploy]:
    return (
        FlowBuilder("deploy", Deploy)
        .wait_signal("go", "deploy", "prod", into="go", timeout_s=600)
        .step("after", lambda s: {})
        .chain()
        .compile()
    )


class Order(BaseModel):
    item: str
    qty: int
    tags: list[str] = Field(default_factory=lambda: ["new"])
    note: str | None = None
    total: int = 0


def order_flow() -> CompiledFlow[Order]:
    return (
        FlowBuilder("order", Order).step("price", lambda s: {"total": s.qty * 3}).chain().compile()
    )


def all_flows() -> list[CompiledFlow[Any]]:
    return [approve_flow(), review_flow(), signal_flow(), order_flow()]


# -- helpers ---------------------------------------------------------------------


def settings_for(db: Path) -> Settings:
    return load_settings(db_path=db)


def waiting_runs(
    settings: Settings, flows: list[CompiledFlow[Any]], *starts: tuple[str, BaseModel]
) -> list[str]:
    """Runs left waiting by another engine, in order."""
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=flows)
    try:
        results = [engine.run(flow, state) for flow, state in starts]
    finally:
        engine.store.close()
    assert all(r.status == "waiting" for r in results)
    return [r.run_id for r in results]


def interrupted_run(settings: Settings, flow: CompiledFlow[Any], state: BaseModel) -> str:
    """A run of ``flow`` another engine started and left before its first
    step (interrupted, as a killed process leaves it)."""
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=[flow])
    try:
        return engine.start(flow.name, state)
    finally:
        engine.store.close()


def agent_waiting(settings: Settings, question: str) -> str:
    """An agent run asking the user (``input_required``), as ``flowdesk ask`` leaves it."""
    store = open_store(settings.db_path)
    try:
        agents = SqliteAgentStore(store)
        now = time.time()
        run_id = "a" * 32
        agents.create(
            AgentRun(run_id, "assistant", "running", "plan a trip", now, now),
            [{"role": "user", "content": "plan a trip"}],
        )
        agents.update(
            run_id,
            now,
            status="input_required",
            pending_call={"id": "c1", "name": "ask_user", "arguments": {"question": question}},
        )
    finally:
        store.close()
    return run_id


def stored(db: Path, run_id: str) -> tuple[str, dict[str, Any], str | None]:
    store = open_store(db)
    try:
        run = store.get_run(run_id)
        return run.status, dict(store.latest(run_id).state), run.error
    finally:
        store.close()


def cells(screen: InboxScreen, key: str) -> list[str]:
    return [c.plain for c in screen.table.get_row(key)]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.value = now

    def now(self) -> float:
        return self.value


class MemoryKeyring(KeyringBackend):
    """An in-memory keyring for tests."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)


@pytest.fixture
def memory_keyring() -> Any:
    with installed(MemoryKeyring()) as ring:
        yield ring


# -- inbox -----------------------------------------------------------------------


async def test_inbox_lists_questions_with_deadlines_and_agent_runs(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    approve_id, review_id, deploy_id = waiting_runs(
        settings,
        all_flows(),
        ("approve", Approval()),
        ("review", Review()),
        ("deploy", Deploy()),
    )
    agent_id = agent_waiting(settings, "Which city?")
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)  # no launch report: nothing is old
        await pilot.press("i")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, InboxScreen)
        keys = [i.key for i in screen.items]
        assert keys == [f"{approve_id}:ok:0", f"{review_id}:check:0", f"agent:{agent_id}"]
        assert deploy_id not in {i.run_id for i in screen.items}  # a signal, not a person
        assert cells(screen, keys[0]) == [
            approve_id[:8],
            "approve",
            "Ship?",
            "-",
            "",  # no deadline: no time-left bar
            "y approve · n reject · enter answer",
        ]
        assert cells(screen, keys[1])[1:4] == ["review", "Looks good?", "in 3h 12m"]
        assert cells(screen, keys[2]) == [
            agent_id[:8],
            "agent assistant",
            "Which city?",
            "-",
            "",
            "enter answer",
        ]
        assert screen.status_text.startswith("2 flow questions and 1 agent question")

        # The countdown is live: it follows the engine's clock.
        deadline = screen.items[1].deadline_at
        assert deadline is not None and app.engine is not None
        app.engine.clock = FakeClock(deadline - 65)
        screen._tick()
        assert screen.deadline_text(keys[1]) == "in 1m 05s"
        app.engine.clock = FakeClock(deadline + 1)
        screen._tick()
        assert screen.deadline_text(keys[1]) == "expired"
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        assert not messages(app, "error")


async def test_approve_and_reject_in_place(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    first, second = waiting_runs(
        settings, all_flows(), ("approve", Approval()), ("approve", Approval())
    )
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, InboxScreen)
        assert [i.run_id for i in screen.items] == [first, second]
        await pilot.press("y")  # the first row is selected
        await settle(pilot)
        assert [i.run_id for i in screen.items] == [second]
        # the answered question took the selection with it: a second key
        # press (a double tap) answers nothing, it says how to pick one
        assert screen.selected is None
        await pilot.press("y")
        await settle(pilot)
        assert [i.run_id for i in screen.items] == [second]
        said = f"No question is selected (you answered run {first[:8]}'s): ↑ or ↓ picks"
        assert any(m.startswith(said) for m in messages(app, "warning")), messages(app)
        await pilot.press("down")  # picks the question after it
        assert screen.selected is not None and screen.selected.run_id == second
        await pilot.press("n")
        await settle(pilot)
        assert screen.items == []
        assert screen.status_text == "Nothing is waiting for you."
        assert f"Answered {first}:ok:0; run {first[:8]} goes on." in messages(app)
        assert not messages(app, "error")
    assert stored(db, first)[:2] == ("completed", {"answer": True, "done": True})
    assert stored(db, second)[:2] == ("completed", {"answer": False, "done": True})


async def test_enter_answers_with_the_answer_dialog(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    [run_id] = waiting_runs(settings, all_flows(), ("review", Review()))
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert isinstance(inbox, InboxScreen)
        await pilot.press("enter")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, AnswerScreen) and modal.run.run_id == run_id
        await pilot.press(*"ship it", "enter")
        await settle(pilot)
        assert app.screen is inbox and isinstance(inbox, InboxScreen)
        assert inbox.items == []
        assert not messages(app, "error")
    assert stored(db, run_id)[:2] == ("completed", {"verdict": "ship it"})


async def test_y_and_n_on_an_agent_question_say_enter_answers_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    bootstrap.apply_schema(settings)
    agent_id = agent_waiting(settings, "Which city?")
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, InboxScreen)
        for key in ("y", "n"):
            await pilot.press(key)
            await settle(pilot)
            assert messages(app, "warning")[-1] == (
                f"Agent run {agent_id[:8]} asks a question: enter answers it."
            )
        assert app.screen is screen
        await pilot.press("enter")  # the answer field; escape leaves it unanswered
        await settle(pilot)
        assert isinstance(app.screen, AskScreen)
        assert app.screen.title_text == f"Agent run {agent_id[:8]} asks: Which city?"
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen
    store = open_store(db)
    try:
        assert SqliteAgentStore(store).get(agent_id).status == "input_required"
    finally:
        store.close()


async def test_a_refused_answer_is_a_notice(tmp_path: Path) -> None:
    """Answered elsewhere while the inbox was open: the first answer stands."""
    db = tmp_path / "t.db"
    settings = settings_for(db)
    [run_id] = waiting_runs(settings, all_flows(), ("approve", Approval()))
    app = FlowdeskApp(settings, flows=all_flows())
    # the inbox must not notice the other answer before `y` (under load its
    # 1 s look at the database could empty it first, and `y` would then
    # answer nothing): the answer is refused, not the row gone
    app.POLL_S = 3600
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        assert isinstance(app.screen, InboxScreen)
        other = bootstrap.build_engine(settings, flows=all_flows())
        try:
            other.resume_with(run_id, False)
        finally:
            other.store.close()
        await pilot.press("y")
        await wait_until(pilot, lambda: bool(messages(app, "error")))
        errors = messages(app, "error")
        assert "already answered" in errors[-1] or "not waiting" in errors[-1], errors
    assert stored(db, run_id)[:2] == ("completed", {"answer": False, "done": True})


# -- start any flow ----------------------------------------------------------------


def test_form_fields_from_the_state_model() -> None:
    fields = Order.model_fields
    assert [is_text(f.annotation) for f in fields.values()] == [True, False, False, True, False]
    assert [prefill(f) for f in fields.values()] == ["", "", '["new"]', "", "0"]
    data, errors, other = build_state(Order, {"item": "", "qty": "x", "tags": "[1"})
    assert data is None and other == ""
    assert set(errors) == {"item", "qty", "tags"}
    assert errors["item"] == "Field required"
    data, errors, _ = build_state(Order, {"item": "pen", "qty": "2", "note": "[not json"})
    assert errors == {} and data == {"item": "pen", "qty": 2, "note": "[not json"}


async def test_start_any_flow_with_errors_at_the_fields(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    app = FlowdeskApp(settings_for(db), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, StartFlowScreen)
        assert list(form.flows) == ["approve", "deploy", "order", "review"]
        form.query_one("#flow", Select).value = "order"
        await settle(pilot)
        assert form.flow_name == "order"
        label = str(form.query_one("#label-item").render())
        assert "item: str (required)" in label
        assert "tags: list[str]" in str(form.query_one("#label-tags").render())
        assert form.query_one("#field-tags", Input).value == '["new"]'
        assert form.query_one("#field-total", Input).value == "0"

        form.query_one("#field-qty", Input).value = "lots"
        await pilot.click("#start")
        await settle(pilot)
        assert app.screen is form and isinstance(form, StartFlowScreen)
        assert form.field_errors["item"] == "Field required"
        assert "valid integer" in form.field_errors["qty"]
        assert str(form.query_one("#error-qty").render()) == form.field_errors["qty"]
        assert form.error_text == "Fix the fields marked above."

        form.query_one("#field-item", Input).value = "pen"
        form.query_one("#field-qty", Input).value = "4"
        await pilot.pause()
        assert form.field_errors == {}  # editing a field clears its error
        await pilot.click("#start")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        started = [m for m in messages(app) if m.startswith("Started order run ")]
        assert len(started) == 1
        run_id = started[0].removeprefix("Started order run ")
        assert f"Run {run_id[:8]} completed" in messages(app)
        assert not messages(app, "error")
    status, state, _ = stored(db, run_id)
    assert status == "completed"
    assert state == {"item": "pen", "qty": 4, "tags": ["new"], "note": None, "total": 12}


# -- settings --------------------------------------------------------------------


def test_toml_round_trip() -> None:
    data = {
        "db_path": "/tmp/a b.db",
        "flows": ["pkg.mod:flows", 'quote"d'],
        "recover_on_launch": False,
        "busy_timeout_s": 2.5,
        "model": {"base_url": "http://x/v1", "timeout_s": 30.0, "extra": {"k": 1}},
        "odd key": {"x.y": "ünï\n"},
        "items": [{"a": 1}, {"a": 2}],
    }
    assert tomllib.loads(dump_toml(data)) == data
    assert masked("sk-abcdefgh1234567890") == "sk-…7890"
    assert "abcdefgh" not in masked("sk-abcdefgh1234567890")
    assert masked("short1") == "…t1" and masked("abc") == "…"


async def open_settings(pilot: Pilot[None]) -> SettingsScreen:
    await pilot.press("ctrl+s")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, SettingsScreen)
    return screen


async def test_a_timeout_the_settings_would_refuse_is_not_saved(tmp_path: Path) -> None:
    """``1e300`` (a number, finite, above 0) was saved, and every command
    after it refused the settings file (or, before the bound, every request
    was a traceback): the form takes what the settings take, at most a day."""
    settings = settings_for(tmp_path / "t.db")
    path = config_file()
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        save = screen.query_one("#save", Button)

        async def click_save() -> None:
            # a Button ignores a click during its 0.2 s press effect (as a
            # person's double click): wait it out, or a fast machine's next
            # click was lost and the last value never saved
            await wait_until(pilot, lambda: not save.has_class("-active"))
            await pilot.click("#save")

        for bad in ("1e300", "86401", "inf", "0"):
            screen.query_one("#timeout", Input).value = bad
            await click_save()
            assert set(screen.field_errors) == {"timeout"}, bad
            assert not path.exists(), bad
        screen.query_one("#timeout", Input).value = "86400"
        await click_save()
        await settle(pilot)
        assert screen.field_errors == {}
    assert load_settings().model.timeout_s == 86400.0


async def test_settings_are_saved_to_the_toml_file_keeping_other_keys(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    path = config_file()
    # keys the screen does not edit stay (an unknown key would be an error now)
    path.write_text(
        'scope = "default"\n\n[model]\napi_key_name = "mykey"\n\n[recovery]\ndigest = "ask"\n'
    )
    app = FlowdeskApp(settings, flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        assert str(db) in str(screen.query_one("#db-path").render())
        assert screen.query_one("#synchronous", Select).value == "FULL"
        assert screen.query_one("#timeout", Input).value == "60.0"

        # An invalid field: shown there, nothing written.
        before = path.read_text()
        screen.query_one("#timeout", Input).value = "-1"
        screen.query_one("#base-url", Input).value = "localhost:11434"
        await pilot.click("#save")
        assert set(screen.field_errors) == {"timeout", "base-url"}
        assert path.read_text() == before

        screen.query_one("#synchronous", Select).value = "NORMAL"
        screen.query_one("#base-url", Input).value = "http://127.0.0.1:11434/v1"
        screen.query_one("#model", Input).value = "llama3.2"
        screen.query_one("#timeout", Input).value = "30"
        screen.query_one("#timeout", Input).focus()
        await pilot.press("enter")  # enter in a field saves too
        await settle(pilot)
        assert screen.field_errors == {}
        assert screen.saved_text == f"Saved to {path}. Restart Flowdesk to apply."
        assert app.settings.synchronous == "FULL"  # applied at the next launch
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
    assert tomllib.loads(path.read_text()) == {
        "scope": "default",
        "synchronous": "NORMAL",
        "model": {
            "api_key_name": "mykey",
            "base_url": "http://127.0.0.1:11434/v1",
            "model": "llama3.2",
            "timeout_s": 30.0,
        },
        "recovery": {"digest": "ask"},
    }
    again = load_settings(db_path=db)
    assert again.synchronous == "NORMAL"
    assert (again.model.base_url, again.model.model, again.model.timeout_s) == (
        "http://127.0.0.1:11434/v1",
        "llama3.2",
        30.0,
    )


async def test_settings_file_is_created_with_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "conf" / "flowdesk" / "config.toml"
    monkeypatch.setenv("FLOWDESK_CONFIG", str(path))
    app = FlowdeskApp(settings_for(tmp_path / "t.db"), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        screen.query_one("#model", Input).value = "qwen"
        await pilot.click("#save")
    assert tomllib.loads(path.read_text()) == {
        "synchronous": "FULL",
        "model": {"model": "qwen", "timeout_s": 60.0},
    }


async def test_api_key_refused_by_the_keyring_is_a_notice_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """The default test keyring fails: the error is shown, the key goes nowhere."""
    db = tmp_path / "t.db"
    key = "sk-secret-0123456789abcdef"
    app = FlowdeskApp(settings_for(db), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        assert screen.key_text == "not set"
        screen.query_one("#api-key", Input).value = key
        await pilot.click("#save-key")
        await settle(pilot)
        errors = messages(app, "error")
        assert len(errors) == 1 and "cannot store secret 'model_api_key'" in errors[0]
        assert key not in errors[0]
        assert screen.key_text == "not stored"
        assert app.screen is screen
    assert not config_file().exists()
    for file in db.parent.glob("t.db*"):
        assert key.encode() not in file.read_bytes()


async def test_api_key_is_stored_in_the_keyring_and_shown_masked(
    tmp_path: Path, memory_keyring: MemoryKeyring
) -> None:
    db = tmp_path / "t.db"
    key = "sk-secret-0123456789abcdef"
    app = FlowdeskApp(settings_for(db), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        assert screen.key_text == "not set"
        await pilot.click("#api-key")
        screen.query_one("#api-key", Input).value = key
        await pilot.press("enter")
        await settle(pilot)
        assert memory_keyring.store == {(SERVICE, "model_api_key"): key}
        assert screen.key_text == "stored: sk-…cdef"
        assert screen.query_one("#api-key", Input).value == ""
        assert not messages(app, "error")
        assert all(key not in m for m in messages(app))
        await pilot.press("escape")
        # Opened again: read back from the keyring, masked.
        screen = await open_settings(pilot)
        assert screen.key_text == "stored: sk-…cdef"
    assert not config_file().exists()  # the key is never a setting


# -- launch report (S51) -------------------------------------------------------------


async def test_launch_report_lists_runs_of_an_older_flow_version(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    v1, v2 = approve_flow("1"), approve_flow("2")
    to_fail, to_fork, to_keep = waiting_runs(settings, [v1], *[("approve", Approval())] * 3)
    app = FlowdeskApp(settings, flows=[v2])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        assert [r.run_id for r in report.runs] == [to_fail, to_fork, to_keep]
        row = [c.plain for c in report.query_one("#incompatible").get_row(to_fail)]  # type: ignore[attr-defined]
        assert row == [
            to_fail[:8],
            "approve",
            "waiting",
            "ok",
            "version 1 → 2: no change in the steps it reached; not reached yet: ship…",
            "undecided",
        ]
        await pilot.press("f")
        await settle(pilot)
        assert report.decision(to_fail) == "failed"
        await pilot.press("down", "o")
        await settle(pilot)
        assert report.decision(to_fork).startswith("forked → ")
        assert report.decision(to_fork).endswith("(waiting)")
        await pilot.press("down", "k")
        await settle(pilot)
        assert report.decision(to_keep) == "kept"
        await pilot.press("up", "up", "f")  # decided already: refused
        await settle(pilot)
        assert messages(app, "warning")[-1] == f"Run {to_fail[:8]} is failed already."
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        assert not messages(app, "error")
    assert stored(db, to_fail)[0::2] == ("failed", FAIL_REASON)
    assert stored(db, to_fork)[0] == "canceled"
    assert stored(db, to_keep)[0] == "waiting"
    store = open_store(db)
    try:
        [fork] = [r for r in store.list_runs() if r.parent_run_id == to_fork]
        assert (fork.status, fork.flow_version) == ("waiting", v2.version)
    finally:
        store.close()
    # Nothing is left for a second launch to ask about but the kept run.
    again = FlowdeskApp(settings, flows=[v2])
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(again.screen, LaunchReportScreen)
        assert [r.run_id for r in again.screen.runs] == [to_keep]


async def test_launch_report_follows_recovery_and_says_why_a_run_was_not_resumed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    settings = settings_for(db)
    v1, v2 = approve_flow("1"), approve_flow("2")
    run_id = interrupted_run(settings, v1, Approval())
    app = FlowdeskApp(settings, flows=[v2])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert messages(app, "error") == []  # the report says it, not a toast
        assert app.recovery == (
            "1 run an earlier process left running is of a flow that changed since it started "
            "(see the launch report); nothing to resume"
        )
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        assert report.recovery == app.recovery
        assert app.recovery in str(report.query_one("#recovery").render())
        [old_run] = report.runs
        assert (old_run.run_id, old_run.status, old_run.step) == (run_id, "pending", "ok")
        await pilot.click("#fork")
        await settle(pilot)
        assert report.decision(run_id).endswith("(waiting)")
    assert stored(db, run_id)[0] == "canceled"


async def test_a_fork_from_the_launch_report_names_the_new_run_before_its_steps_end(
    tmp_path: Path,
) -> None:
    """The fork's new run is named (``running``) as soon as it is stored,
    while its first step still runs (a model call can take minutes); the
    decision then follows it to its end. Before, the report said
    "forking…" until the new run ended or waited."""
    import threading

    db = tmp_path / "t.db"
    settings = settings_for(db)
    release = threading.Event()

    def slow(s: Approval) -> dict[str, Any]:
        assert release.wait(60), "the test never released the step"
        return {"done": True}

    def flow(version: str, step: Any) -> CompiledFlow[Approval]:
        return (
            FlowBuilder("slowfork", Approval, version=version).step("work", step).chain().compile()
        )

    v1, v2 = flow("1", lambda s: {"done": True}), flow("2", slow)
    run_id = interrupted_run(settings, v1, Approval())
    app = FlowdeskApp(settings, flows=[v2])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        await pilot.click("#fork")
        await wait_until(pilot, lambda: report.decision(run_id) != "forking…")
        decided = report.decision(run_id)
        assert decided.startswith("forked → ") and decided.endswith(" (running)"), decided
        assert not release.is_set()  # its step has not ended
        store = open_store(db)
        try:
            [new] = [r for r in store.list_runs() if r.parent_run_id == run_id]
            assert new.status == "running" and decided == f"forked → {new.run_id[:8]} (running)"
        finally:
            store.close()
        assert stored(db, run_id)[0] == "canceled"
        await pilot.press("o")  # decided already: refused, not forked twice
        await pilot.pause()
        assert messages(app, "warning")[-1] == f"Run {run_id[:8]} is {decided} already."
        release.set()
        await settle(pilot)
        assert report.decision(run_id) == f"forked → {new.run_id[:8]} (completed)"
        assert not messages(app, "error")


async def test_a_question_of_a_run_whose_flow_changed_is_not_offered_an_answer(
    tmp_path: Path,
) -> None:
    """A run waits under version 1 of its flow; the app has version 2. Its
    question is listed but offers no answer (its flow changed: answered once
    its code is restored), ``y`` sends nothing, and ``a`` in the runs list
    says what works in the app's keys. Before, the row offered y/n/enter,
    ``a`` opened Yes/No, and sending said to call Engine methods (a
    tryout's)."""
    from desktop_app.app.screens.inbox import CHANGED_HOW, InboxScreen
    from tests.app_support import open_inbox

    db = tmp_path / "t.db"
    settings = settings_for(db)
    (run_id,) = waiting_runs(settings, [approve_flow("1")], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[approve_flow("2")])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, LaunchReportScreen)
        await pilot.press("escape")  # kept for now
        inbox = await open_inbox(pilot)
        assert isinstance(inbox, InboxScreen)
        (item,) = inbox.items
        assert (item.run_id, item.changed, item.answerable) == (run_id, True, False)
        assert item.how(app.hints) == CHANGED_HOW
        assert inbox.check_action("approve", ()) is False  # y, n, enter are not offered
        assert CHANGED_HOW in inbox.question_text
        assert "under a flow that changed since it started" in inbox.status_text
        inbox.action_approve()  # the binding hidden, still refused if reached
        await settle(pilot)
        assert messages(app, "warning")[-1] == f"Run {run_id[:8]} {CHANGED_HOW}; nothing was sent."
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)  # no Yes/No dialog
        said = messages(app, "warning")[-1]
        assert said.startswith(f"run {run_id} was started under flow version 1+")
        assert "press a again, or press c to cancel it" in said and "Engine." not in said
        assert not messages(app, "error")
    assert stored(db, run_id)[0] == "waiting"  # nothing was answered


async def test_actions_are_in_the_command_palette(tmp_path: Path) -> None:
    app = FlowdeskApp(settings_for(tmp_path / "t.db"), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Inbox", "Start flow", "Settings"} <= titles
        footer = {k: b.binding.description for k, b in app.screen.active_bindings.items()}
        assert (footer["i"], footer["s"], footer["ctrl+s"]) == ("Inbox", "Start flow", "Settings")


async def test_settings_name_the_key_in_use_when_the_variable_gives_it(
    tmp_path: Path, memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tryout's key came from FLOWDESK_MODEL__API_KEY, and Settings said
    the keyring entry was "not set": it says the key in use and where it
    comes from (masked), and that a key stored here is not used while the
    variable is set."""
    key = "sk-from-env-0123456789wxyz"
    monkeypatch.setenv("FLOWDESK_MODEL__API_KEY", key)
    app = FlowdeskApp(settings_for(tmp_path / "t.db"), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        assert screen.key_text == (
            "in use: sk-…wxyz, from FLOWDESK_MODEL__API_KEY (the keyring entry is not used "
            "while it is set)"
        )
        assert all(key not in m for m in messages(app))


async def test_the_base_url_is_shown_without_its_secrets_and_saving_keeps_them(
    tmp_path: Path,
) -> None:
    """A base URL with a password and an ``?api-key=`` was shown as written
    in the settings screen; it shows them as ``***``, and a save that leaves
    the field as shown keeps the URL the settings file holds."""
    written = "http://u:TRYOUT-URLPASS-66@127.0.0.1:11434/v1?api-key=TRYOUT-URLKEY-55"
    path = config_file()
    path.write_text(f'[model]\nbase_url = "{written}"\nmodel = "m"\n')
    app = FlowdeskApp(settings_for(tmp_path / "t.db"), flows=all_flows())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = await open_settings(pilot)
        field = screen.query_one("#base-url", Input)
        shown = field.value
        assert shown == "http://u:***@127.0.0.1:11434/v1?api-key=***"
        # edited from its masked form (another port): *** is not saved as the secret
        field.value = shown.replace(":11434", ":11435")
        await pilot.click("#save")
        await settle(pilot)
        assert screen.field_errors["base-url"].startswith("Its password or key shows as ***")
        assert screen.saved_text == "Nothing saved: fix the fields marked above."
        assert tomllib.loads(path.read_text())["model"]["base_url"] == written
        field.value = shown  # as it was shown: saved with the secrets the file holds
        # a Button ignores a click while it still shows the last one (Textual's
        # -active effect, 0.2 s): on a fast machine the second click came sooner
        save = screen.query_one("#save")
        await wait_until(pilot, lambda: not save.has_class("-active"))
        await pilot.click("#save")
        await settle(pilot)
        assert screen.saved_text == f"Saved to {path}. Restart Flowdesk to apply."
    assert tomllib.loads(path.read_text())["model"]["base_url"] == written
