"""Forms for people: a flow's start form shows only the inputs it declares,
with their descriptions and the flow's description (Pilot, real SQLite files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel
from textual import events
from textual.widgets import DataTable, Input, Select

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.answer import AnswerScreen
from desktop_app.app.screens.confirm import ConfirmScreen
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.screens.inbox import InboxScreen
from desktop_app.app.screens.new_run import NewDigestScreen
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.screens.start_flow import StartFlowScreen, form_fields
from desktop_app.config import Settings, load_settings
from desktop_app.errors import FlowDefinitionError, InputError
from desktop_app.flow import FlowBuilder
from desktop_app.flows.digest import build_digest_flow
from desktop_app.flows.tidy import TidyState, build_tidy_flow
from desktop_app.flows.tidy_undo import undo_tidy
from tests.app_support import messages, settle, wait_until

SIZE = (120, 40)


def isolated_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlowdeskApp:
    """The app on its own database, no FLOWDESK_ variable or config file of yours."""
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    return FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))


def test_digest_and_tidy_declare_their_inputs_and_a_description() -> None:
    digest, tidy = build_digest_flow(), build_tidy_flow()
    assert digest.inputs == ("folder", "out") and tidy.inputs == ("folder",)
    assert "digest.md" in digest.description and "approve" in tidy.description
    assert [n for n, _ in form_fields(digest)] == ["folder", "out"]
    assert all(info.description for _, info in form_fields(digest))


def test_an_input_that_is_not_a_state_field_is_refused_at_compile() -> None:
    class S(BaseModel):
        a: int = 0

    with pytest.raises(FlowDefinitionError, match="input 'b' is not a field of S"):
        FlowBuilder("f", S, inputs=["a", "b"]).step("x", lambda s: {}).chain().compile()


async def test_the_digest_start_form_shows_exactly_its_input_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Plans\n\nWe ship the digest flow this week.\n")
    out = tmp_path / "out"
    app = isolated_app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, StartFlowScreen)
        assert form.query_one("#flow", Select).has_focus  # the flow is chosen first
        form.query_one("#flow", Select).value = "digest"
        await settle(pilot)
        fields = [w.id.removeprefix("field-") for w in form.query(Input) if w.id]
        assert fields == ["folder", "out"]  # not cursor, files, skipped, report_path
        assert "digest.md" in str(form.query_one("#flow-description").render())
        assert "summarised" in str(form.query_one("#help-folder").render())
        form.query_one("#field-folder", Input).value = str(notes)
        form.query_one("#field-out", Input).value = str(out)
        await pilot.click("#start")
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)
        await wait_until(pilot, lambda: (out / "digest.md").is_file())
        assert not messages(app, "error")
    assert "Plans" in (out / "digest.md").read_text()


def waiting_tidy(settings: Settings, folder: Path) -> str:
    """A tidy run left waiting for approval by another engine (like ``flowdesk start``)."""
    bootstrap.apply_schema(settings)
    engine = bootstrap.build_engine(settings)
    try:
        result = engine.run("tidy", TidyState(folder=str(folder)))
    finally:
        engine.store.close()
    assert result.status == "waiting"
    return result.run_id


def downloads(tmp_path: Path) -> Path:
    folder = tmp_path / "Downloads"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"jpg")
    (folder / "paper.pdf").write_bytes(b"pdf")
    return folder


async def test_tidy_question_previews_its_moves_yes_moves_them_and_undo_moves_them_back(
    tmp_path: Path,
) -> None:
    folder = downloads(tmp_path)
    settings = load_settings(db_path=tmp_path / "t.db")
    run_id = waiting_tidy(settings, folder)
    app = FlowdeskApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        inbox = app.screen
        assert isinstance(inbox, InboxScreen)
        # the whole question shows under the table, not cut at the column
        assert "Answer yes to move them" in inbox.question_text
        assert "Deadline: " in inbox.question_text
        await pilot.press("enter")
        await settle(pilot)
        modal = app.screen
        assert isinstance(modal, AnswerScreen)
        preview = modal.query_one("#preview", DataTable)
        rows = [[c.plain for c in preview.get_row_at(i)] for i in range(preview.row_count)]
        month = rows[0][3].split("/")[1]
        assert rows == [
            ["paper.pdf", "documents", "planned", f"Documents/{month}/paper.pdf"],
            ["photo.jpg", "images", "planned", f"Images/{month}/photo.jpg"],
        ]
        assert "2 files: 2 to move" in str(modal.query_one("#preview-title").render())
        await pilot.click("#answer-yes")
        await settle(pilot)
        await wait_until(pilot, lambda: (folder / "Images" / month / "photo.jpg").exists())
        await wait_until(pilot, lambda: (folder / "Documents" / month / "paper.pdf").exists())
        await wait_until(pilot, lambda: app.read(lambda s: s.get_run(run_id).status) == "completed")

        await pilot.press("escape")
        app.controller.open_run(run_id)
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)
        await pilot.press("u")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#yes")
        await settle(pilot)
        assert (folder / "photo.jpg").read_bytes() == b"jpg"
        assert (folder / "paper.pdf").read_bytes() == b"pdf"
        assert not (folder / "Images" / month / "photo.jpg").exists()
        assert any(
            m.startswith(f"Undid tidy run {run_id[:8]}: 2 files moved back") for m in messages(app)
        )
        assert not messages(app, "error")


def test_undo_twice_changes_nothing_the_second_time_and_a_bad_list_is_refused(
    tmp_path: Path,
) -> None:
    moved = tmp_path / "Images" / "2026-11" / "a.jpg"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(b"a")
    undo_list = tmp_path / ".flowdesk-tidy-undo-r1.json"
    undo_list.write_text(json.dumps([{"from": str(moved), "to": str(tmp_path / "a.jpg")}]))
    first = undo_tidy(undo_list)
    assert first.moved_back == 1 and first.left == []
    assert first.folders_removed == [str(moved.parent), str(moved.parent.parent)]
    second = undo_tidy(undo_list)
    assert (second.moved_back, second.already_back, second.left) == (0, 1, [])
    undo_list.write_text('{"not": "a list"}')
    with pytest.raises(InputError, match="not a tidy undo list"):
        undo_tidy(undo_list)
    with pytest.raises(InputError, match="does not exist"):
        undo_tidy(tmp_path / "missing.json")


async def test_keys_typed_before_the_digest_form_focuses_its_field_are_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine a person's first keys can reach the form before its
    folder field has the focus (Textual then hands them to the screen): a
    tmux run of the real app lost a whole typed path that way. They go into
    the field, in order, with the keys typed after the field took the focus."""
    app = isolated_app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, NewDigestScreen)
        folder = form.query_one("#folder", Input)
        assert folder.has_focus  # the field to type into first
        form.set_focus(None)  # the form as drawn before its field took the focus
        for key, char in (("slash", "/"), ("t", "t"), ("m", "m")):
            form.post_message(events.Key(key, char))  # queued for the screen itself
        await settle(pilot)
        assert folder.has_focus and folder.value == "/tm"
        for key, char in (("p", "p"), ("slash", "/")):
            form.post_message(events.Key(key, char))  # queued while the field has it
        await pilot.press("x")  # and typed after, into the field
        await settle(pilot)
        assert folder.value == "/tmp/x"
        assert form.query_one("#out", Input).value == ""


async def test_text_typed_right_after_picking_a_flow_goes_into_its_first_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = isolated_app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, StartFlowScreen)
        select = form.query_one("#flow", Select)
        assert select.has_focus
        select.value = "tidy"  # picked; the form rebuilds its fields
        await pilot.press(*"/srv")  # typed at once, the selector still focused
        await settle(pilot)
        assert form.flow_name == "tidy"
        assert form.query_one("#field-folder", Input).value == "/srv"
        assert select.value == "tidy"  # the keys did not pick another flow
        assert form.query_one("#field-folder", Input).has_focus  # typing goes on there


def read_at_once(app: FlowdeskApp, text: str) -> None:
    """Keys as the app gets them from one read of the terminal: all posted
    before any is handled."""
    names = {"/": "slash", "~": "tilde"}
    for char in text:
        app.post_message(events.Key(names.get(char, char), char))


async def test_keys_typed_with_the_key_that_opens_a_form_go_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``n`` and a folder typed at once (one read from the terminal): the
    letters were dispatched to the runs table before ``n`` opened the form,
    and came back to an app with no binding for them. They go into the form,
    and letters the runs screen binds (``a`` answer, ``c`` cancel) do nothing
    there."""
    app = isolated_app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        read_at_once(app, "n/acr")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, NewDigestScreen)
        assert form.query_one("#folder", Input).value == "/acr"
        await pilot.press("escape")
        await settle(pilot)
        read_at_once(app, "s~/x")
        await settle(pilot)
        start = app.screen
        assert isinstance(start, StartFlowScreen)
        assert start.query_one(f"#field-{start.field_names[0]}", Input).value == "~/x"
