"""Forms for people: a flow's start form shows only the inputs it declares,
with their descriptions and the flow's description (Pilot, real SQLite files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel
from textual.widgets import Input, Select

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.runs import RunsScreen
from desktop_app.app.screens.start_flow import StartFlowScreen, form_fields
from desktop_app.config import load_settings
from desktop_app.errors import FlowDefinitionError
from desktop_app.flow import FlowBuilder
from desktop_app.flows.digest import build_digest_flow
from desktop_app.flows.tidy import build_tidy_flow
from tests.app_support import messages, settle, wait_until

SIZE = (120, 40)


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
    for name in list(os.environ):
        if name.startswith("FLOWDESK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWDESK_CONFIG", str(tmp_path / "no-config.toml"))
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Plans\n\nWe ship the digest flow this week.\n")
    out = tmp_path / "out"
    app = FlowdeskApp(load_settings(db_path=tmp_path / "t.db"))
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
