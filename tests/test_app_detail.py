"""Run detail: timeline, state tree, diff, steps, waits, outbox, context, replay and fork.

Runs are made by an engine over a real SQLite file before the app starts;
the app is driven headless with Pilot. What the app wrote is checked
through the store after the app has closed its connections.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from textual.pilot import Pilot
from textual.widgets import TabbedContent

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.fork import ForkInputError, ForkScreen, prepare_fork
from desktop_app.app.state_diff import Change, change_text, changed_fields, diff_states
from desktop_app.app.widgets.run_tables import (
    CheckpointsTable,
    ContextTable,
    OutboxTable,
    StepsTable,
    WaitsTable,
)
from desktop_app.app.widgets.state_view import STRING_CHARS, DiffTable, StateTree
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.store import open_store
from tests.app_support import messages, settle, wait_until

SIZE = (140, 44)
LONG = "x" * 300
#: 3 h 12 min 30 s: shown as "in 3h 12m".
ASK_TIMEOUT_S = 3 * 3600 + 12 * 60 + 30


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user config file and no FLOWDESK_* variables leak into these tests."""
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))


class Counter(BaseModel):
    name: str = "demo"
    count: int = 0
    tags: list[str] = []
    notes: dict[str, Any] = {}


def step_two(s: Counter, ctx: Any) -> dict[str, Any]:
    ctx.send("mailer", {"to": "ops", "count": s.count})
    return {"count": s.count + 1, "notes": {"by": "two", "long": LONG}}


def counter_flow() -> CompiledFlow[Counter]:
    return (
        FlowBuilder("counter", Counter)
        .step("one", lambda s: {"count": s.count + 1, "tags": [*s.tags, "one"]})
        .step("two", step_two)
        .step("three", lambda s: {"count": s.count + 1, "name": s.name.upper()})
        .chain()
        .compile()
    )


class Ask(BaseModel):
    answer: str | None = None


def ask_flow() -> CompiledFlow[Ask]:
    return (
        FlowBuilder("ask", Ask)
        .await_input("ok", "answer", prompt="Go?", timeout_s=ASK_TIMEOUT_S)
        .step("after", lambda s: {})
        .chain()
        .compile()
    )


def flows() -> list[CompiledFlow[Any]]:
    return [counter_flow(), ask_flow()]


def make_run(settings: Settings, flow: str, state: BaseModel, **kw: Any) -> str:
    """A run of ``flow`` made by another process (like ``flowdesk start``)."""
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings, flows=flows())
    try:
        return engine.run(flow, state, **kw).run_id
    finally:
        engine.store.close()


def stored(db: Path) -> dict[str, tuple[str, dict[str, Any], int, str | None]]:
    """Every run: status, latest state, number of checkpoints, parent."""
    store = open_store(db)
    try:
        return {
            r.run_id: (
                r.status,
                dict(store.latest(r.run_id).state),
                len(store.history(r.run_id)),
                r.parent_run_id,
            )
            for r in store.list_runs()
        }
    finally:
        store.close()


async def open_detail(pilot: Pilot[None], run_id: str) -> RunDetailScreen:
    app = pilot.app
    assert isinstance(app, FlowdeskApp)
    await settle(pilot)
    app.controller.open_run(run_id)
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, RunDetailScreen) and screen.run_id == run_id
    return screen


async def select(pilot: Pilot[None], screen: RunDetailScreen, revision: int) -> None:
    table = screen.query_one(CheckpointsTable)
    table.move_cursor(row=table.revisions.index(revision))
    await settle(pilot)
    assert screen.selected_revision == revision


def stored_intent(settings: Any, intent_id: str) -> tuple[str, str | None]:
    """An outbox intent's status and last error, read on a connection of the test's."""
    store = open_store(settings.db_path)
    try:
        [found] = [
            i
            for i in store.intents(["pending", "sending", "delivered", "failed"], 1000)
            if i.intent_id == intent_id
        ]
        return found.status, found.last_error
    finally:
        store.close()


def front(app: FlowdeskApp) -> object:
    """The screen in front (typed loosely: it changes under the test's feet)."""
    return app.screen


# -- pure parts ----------------------------------------------------------------


def test_diff_states_reports_paths_with_old_and_new_values() -> None:
    old = {"a": 1, "b": {"x": 1, "y": [1, 2]}, "gone": True, "same": "s"}
    new = {"a": 2, "b": {"x": 1, "y": [1, 3, 4], "z": None}, "same": "s", "new": "n"}
    assert diff_states(old, new) == [
        Change("a", "changed", 1, 2),
        Change("b.y[1]", "changed", 2, 3),
        Change("b.y[2]", "added", new=4),
        Change("b.z", "added", new=None),
        Change("gone", "removed", old=True),
        Change("new", "added", new="n"),
    ]
    assert diff_states(old, old) == []
    assert diff_states({"v": 1}, {"v": 1.0}) == [Change("v", "changed", 1, 1.0)]
    assert diff_states({"v": {"k": 1}}, {"v": [1]}) == [Change("v", "changed", {"k": 1}, [1])]
    assert diff_states({"l": [1, 2, 3]}, {"l": [1]}) == [
        Change("l[1]", "removed", old=2),
        Change("l[2]", "removed", old=3),
    ]
    assert change_text(Change("a", "changed", "x", 2)) == '"x" → 2'
    assert change_text(Change("a", "changed", "y" * 200, 1), limit=10) == '"yyyyyyyy… → 1'
    assert changed_fields({"a": 1, "b": [1]}, {"a": 1, "b": [2], "c": 0}) == ["b", "c"]


def test_prepare_fork_validates_and_keeps_only_changed_fields() -> None:
    original = Counter(count=1, tags=["one"]).model_dump(mode="json")
    edited = dict(original, count=10)
    assert prepare_fork(json.dumps(edited), original, Counter) == {"count": 10}
    # Pydantic's coercion counts: "7" is the integer 7.
    assert prepare_fork(json.dumps(dict(original, count="7")), original, Counter) == {"count": 7}

    cases = {
        "{not json": "Not valid JSON: line 1, column 2",
        "[1, 2]": "must be a JSON object",
        json.dumps(dict(original, typo=1)): "typo: not a field of Counter",
        json.dumps(dict(original, count="many")): "count: Input should be a valid integer",
        json.dumps(dict(original, tags=["a", 3])): "tags[1]: Input should be a valid string",
        json.dumps(original): "Nothing changed",
    }
    for text, expected in cases.items():
        with pytest.raises(ForkInputError) as caught:
            prepare_fork(text, original, Counter)
        assert expected in str(caught.value), (text, caught.value.lines)


# -- the screen -------------------------------------------------------------------


async def test_revisions_show_their_state_as_a_tree(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        table = screen.query_one(CheckpointsTable)
        assert table.revisions == [0, 1, 2, 3]
        assert table.has_focus
        # The latest revision is selected first.
        tree = screen.query_one(StateTree)
        assert screen.selected_revision == 3
        assert tree.labels() == ['name: "DEMO"', "count: 3", "tags [1]", "notes {2}"]

        await pilot.press("up")  # the timeline has the focus: revision 2
        await settle(pilot)
        assert screen.selected_revision == 2
        assert tree.labels() == ['name: "demo"', "count: 2", "tags [1]", "notes {2}"]
        tags = tree.find(["tags"])
        assert tags is not None and tree.labels(tags) == ['[0]: "one"']
        long = tree.find(["notes", "long"])
        assert long is not None
        label = long.label.plain  # type: ignore[union-attr]
        assert label.endswith("…") and len(label) < len("long: ") + STRING_CHARS + 1
        assert "Revision 2" in str(screen.query_one("#state-title").render())

        await select(pilot, screen, 0)
        assert tree.labels() == ['name: "demo"', "count: 0", "tags [0]", "notes {0}"]
        assert not messages(app, "error")


async def test_diff_between_a_base_and_the_selected_revision(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        diff = screen.query_one(DiffTable)
        await select(pilot, screen, 1)
        await pilot.press("d")
        await settle(pilot)
        assert screen.base_revision == 1
        assert screen.query_one(TabbedContent).active == "tab-diff"
        assert diff.plain_rows() == []  # the base against itself

        await pilot.press("down")  # revision 2
        await settle(pilot)
        assert screen.selected_revision == 2
        assert diff.plain_rows() == [
            ("count", "changed", "1 → 2"),
            ("notes.by", "added", '"two"'),
            ("notes.long", "added", json.dumps(LONG)[:79] + "…"),
        ]
        title = str(screen.query_one("#diff-title").render())
        assert "Revision 1 (base) → revision 2: 3 changes" in title

        await select(pilot, screen, 3)
        assert ("name", "changed", '"demo" → "DEMO"') in diff.plain_rows()
        assert ("count", "changed", "1 → 3") in diff.plain_rows()

        await select(pilot, screen, 1)
        await pilot.press("d")  # d on the base clears it
        assert screen.base_revision is None and diff.plain_rows() == []


async def test_steps_outbox_and_context_panels(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    context = ExecutionContext(tenant_id="acme", user_id="ann", trace_id="7e" * 16)
    run_id = make_run(settings, "counter", Counter(), context=context)
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        steps = screen.query_one(StepsTable)
        for step in ("one", "two", "three"):
            row = [c.plain for c in steps.get_row(step)]
            assert row[:4] == [step, "completed", "1", "-"]
            assert row[4] != "-" and float(row[4]) >= 0  # duration (ms)
        await pilot.press("5")  # the Outbox tab
        await settle(pilot)
        outbox = screen.query_one(OutboxTable)
        [intent] = outbox.intents
        assert (intent.destination, intent.step_id) == ("mailer", "two")
        # The app runs the outbox dispatcher (as `flowdesk agent` does); it has
        # no "mailer" destination, so the intent stays pending for the program
        # that delivers to it (it was failed for good, the effect lost)
        assert app.outbox is not None
        passes = app.outbox.passes
        app.outbox.wake()
        await wait_until(pilot, lambda: app.outbox is not None and app.outbox.passes > passes)
        assert outbox.status_of(intent.intent_id) == "pending"
        assert stored_intent(settings, intent.intent_id) == ("pending", None)
        await pilot.press("6")
        ctx = screen.query_one(ContextTable)
        assert ctx.value("Tenant") == "acme" and ctx.value("User") == "ann"
        assert ctx.value("Run") == run_id and ctx.value("Trace") == "7e" * 16
        assert ctx.value("Session") == "-"


async def test_the_outbox_tab_lists_the_runs_own_intents_however_many_others_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tab read the database's oldest intents (up to its limit) and kept
    this run's: past the limit a run's own were missing ("This run has no
    outbox intents") behind older runs'. It reads this run's only."""
    from desktop_app.app.screens import detail

    monkeypatch.setattr(detail, "OUTBOX_LIMIT", 2)
    settings = load_settings(db_path=tmp_path / "t.db")
    older = [make_run(settings, "counter", Counter()) for _ in range(2)]
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await pilot.press("5")  # the Outbox tab
        await settle(pilot)
        [intent] = screen.query_one(OutboxTable).intents
        assert intent.run_id == run_id and intent.intent_id.startswith(f"{run_id}:two:")
        title = str(screen.query_one("#outbox-title").render())
        assert title == "0 of 1 delivered here", title
    assert all(r not in intent.intent_id for r in older)


async def test_fork_with_edited_state_makes_a_new_run(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    run_id = make_run(settings, "counter", Counter())
    before = stored(db)[run_id]
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await select(pilot, screen, 1)
        await pilot.press("f")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, ForkScreen)
        state = json.loads(modal.editor.text)
        assert state == {"name": "demo", "count": 1, "tags": ["one"], "notes": {}}
        modal.editor.text = json.dumps(dict(state, count=10, name="forked"), indent=2)
        await pilot.press("ctrl+s")
        await settle(pilot)
        new = app.screen
        assert isinstance(new, RunDetailScreen) and new.run_id != run_id
        assert f"Checkpoint {run_id[:8]}:1 forked as run {new.run_id[:8]} (completed)" in (
            messages(app)
        )
        assert new.record is not None and new.record.parent_run_id == run_id
        assert not messages(app, "error")
        new_id = new.run_id
    runs = stored(db)
    assert runs[run_id] == before  # the original is untouched
    status, state, _, parent = runs[new_id]
    # count 10 after step one, then two and three ran: 12; name upper-cased by three.
    assert (status, parent) == ("completed", run_id)
    assert state["count"] == 12 and state["name"] == "FORKED" and state["tags"] == ["one"]


async def test_invalid_json_or_state_is_refused_in_the_modal(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await select(pilot, screen, 2)
        await pilot.press("f")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, ForkScreen)
        state = json.loads(modal.editor.text)

        modal.editor.text = modal.editor.text.replace('"count": 2', '"count": 2,,')
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert front(app) is modal
        assert modal.error_text.startswith("Not valid JSON: line 3")

        modal.editor.text = json.dumps(dict(state, count="lots"))
        await pilot.click("#fork")
        await settle(pilot)
        assert front(app) is modal
        assert modal.error_text.startswith("count: Input should be a valid integer")
        assert "count: Input" in str(modal.query_one("#fork-error").render())

        await pilot.press("escape")
        assert front(app) is screen
    assert list(stored(db)) == [run_id]  # nothing ran


async def test_replay_asks_first_then_makes_a_new_run(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    run_id = make_run(settings, "counter", Counter())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await select(pilot, screen, 2)
        await pilot.press("p")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert front(app) is screen
        await pilot.press("p")
        await pilot.press("y")
        await settle(pilot)
        new = app.screen
        assert isinstance(new, RunDetailScreen) and new.run_id != run_id
        assert any(f"replayed as run {new.run_id[:8]}" in m for m in messages(app))
        new_id = new.run_id
    runs = stored(db)
    assert len(runs) == 2
    assert runs[new_id][0] == "completed" and runs[new_id][1]["count"] == 3
    assert runs[new_id][3] == run_id


async def test_fork_of_another_flow_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    run_id = make_run(settings, "counter", Counter())
    changed = (
        FlowBuilder("counter", Counter)
        .step("one", lambda s: {})
        .step("two", lambda s: {})
        .chain()
        .compile()
    )
    app = FlowdeskApp(settings, flows=[changed, ask_flow()])
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await pilot.press("f")
        await pilot.press("p")
        await settle(pilot)
        assert front(app) is screen
        errors = messages(app, "error")
        assert len(errors) == 2 and all("started under flow version" in e for e in errors)
    assert list(stored(db)) == [run_id]


async def test_waits_show_a_live_countdown(tmp_path: Path) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    run_id = make_run(settings, "ask", Ask())
    app = FlowdeskApp(settings, flows=flows())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, run_id)
        await pilot.press("4")  # the Waits tab
        waits = screen.query_one(WaitsTable)
        [wait] = waits.waits
        row = [c.plain for c in waits.get_row(wait.wait_id)]
        assert row[:3] == [f"{run_id[:8]}:ok:0", "input", "in 3h 12m"]
        assert row[4:] == ["an answer", "Go?"]
        assert waits.left(wait.wait_id) == "in 3h 12m"
        assert "Waits (1)" in str(screen.query_one(TabbedContent).get_tab("tab-waits").label)
        # The countdown follows the clock every second.
        assert wait.deadline_at is not None
        later = wait.deadline_at - 65
        screen.now = lambda: later  # type: ignore[method-assign]
        await wait_until(pilot, lambda: waits.left(wait.wait_id) == "in 1m 05s")
        screen.now = lambda: later + 3600  # type: ignore[method-assign]
        await wait_until(pilot, lambda: waits.left(wait.wait_id) == "expired")
