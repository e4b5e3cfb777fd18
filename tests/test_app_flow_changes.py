"""Runs of an older flow version are described by what changed, not by hash."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button, DataTable

from desktop_app.app.flow_changes import flow_change
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.launch_report import LaunchReportScreen
from desktop_app.flow import CompiledFlow, FlowBuilder
from tests.app_support import settle
from tests.test_app_inbox_settings import Approval, settings_for, waiting_runs


def test_only_the_version_string_changed() -> None:
    change = flow_change("1+aaaa", "2+bbbb", ["a", "b", "c"], ["a", "b", "c"])
    assert change.describe() == "version 1 → 2: same steps; routes or state fields changed"


def test_steps_the_run_has_not_reached_are_named_not_called_unchanged() -> None:
    """The store keeps no old definition, so a step appended to the flow
    looks like one the run had not got to: the report names the steps that
    run next and says it cannot tell whether they are new. Before, a run
    stopped at ``b`` of a flow that gained ``c`` read "same steps" (a
    tryout's), and one whose flow gained two steps after a renamed one read
    only the rename."""
    change = flow_change("1+aaaa", "2+bbbb", ["a", "b"], ["a", "b", "c"])
    assert change.describe() == (
        "version 1 → 2: no change in the steps it reached; "
        "not reached yet: c (whether it is new is not recorded)"
    )
    change = flow_change("1+a", "3+b", ["prep", "approve"], ["prep", "review", "audit", "notify"])
    assert change.describe() == (
        "version 1 → 3: renamed approve → review; "
        "not reached yet: audit, notify (whether any of them is new is not recorded)"
    )


def test_a_renamed_step_an_added_one_and_a_removed_one() -> None:
    change = flow_change("1+aa", "2+bb", ["fetch", "parse", "old"], ["download", "parse", "new"])
    assert change.renamed == (("fetch", "download"), ("old", "new"))
    assert change.describe() == "version 1 → 2: renamed fetch → download; renamed old → new"
    change = flow_change("1+aa", "1+bb", ["a", "gone"], ["a"])
    assert change.describe() == "version 1 (same name, new definition): removed gone"
    change = flow_change("1+aa", "2+bb", ["a", "c"], ["a", "b", "c"])
    assert change.describe() == "version 1 → 2: added b"


def prep_flow(version: str, first: str) -> CompiledFlow[Approval]:
    return (
        FlowBuilder("approve", Approval, version=version)
        .step(first, lambda s: {})
        .await_input("ok", "answer", prompt="Ship?")
        .step("ship", lambda s: {"done": True})
        .chain()
        .compile()
    )


@pytest.mark.scenario("S51")
async def test_launch_report_says_what_changed_instead_of_hashes(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "t.db")
    old, new = prep_flow("1.0", "prep"), prep_flow("1.1", "prepare")
    (run_id,) = waiting_runs(settings, [old], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[new])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        table = report.query_one("#incompatible", DataTable)
        changed = table.get_cell(run_id, "changed").plain
        assert changed.startswith("version 1.0 → 1.1: renamed prep → prepare; ")
        shown = " ".join(str(report.query_one("#change").render()).split())
        assert shown.endswith(
            "version 1.0 → 1.1: renamed prep → prepare; "
            "not reached yet: ship (whether it is new is not recorded)"
        )
        assert old.version.split("+")[1] not in changed


def many_steps_flow(version: str, names: list[str]) -> CompiledFlow[Approval]:
    builder = FlowBuilder("approve", Approval, version=version)
    for name in names:
        builder = builder.step(name, lambda s: {})
    return builder.await_input("ok", "answer", prompt="Ship?").chain().compile()


@pytest.mark.parametrize("size", [(220, 50), (80, 24)], ids=["220x50", "80x24"])
async def test_launch_report_shows_the_selected_runs_whole_change_under_the_table(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """A change longer than the dialog's column (a tryout's, cut even at 220
    columns) is shown whole, wrapped, for the selected run; on a small
    terminal the report scrolls and its buttons stay on screen."""
    settings = settings_for(tmp_path / "t.db")
    before = [f"download_the_{i}_source_archive" for i in range(8)]
    after = [f"fetch_the_{i}_source_bundle" for i in range(8)]
    old, new = many_steps_flow("1.0", before), many_steps_flow("2.0", after)
    (run_id,) = waiting_runs(settings, [old], ("approve", Approval()))
    app = FlowdeskApp(settings, flows=[new])
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        report = app.screen
        assert isinstance(report, LaunchReportScreen)
        for button in report.query(Button):  # above the footer's line
            assert button.region.height and button.region.bottom <= size[1] - 1, button
        whole = flow_change(old.version, new.version, [*before, "ok"], [*after, "ok"]).describe()
        cell = report.query_one("#incompatible", DataTable).get_cell(run_id, "changed").plain
        assert len(cell) < len(whole)  # the column is cut to fit the dialog
        shown = " ".join(str(report.query_one("#change").render()).split())
        assert shown == f"What changed in run {run_id[:8]}: {whole}"
