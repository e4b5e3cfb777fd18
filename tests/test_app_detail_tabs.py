"""The run detail's tab row fits the terminal (80x24: 40 cells for seven
tabs): full labels when they fit, short names next, else the active tab's
label and the others' keys. Its look at 80x24 is the snapshot
``test_app_snapshots_sizes.py::test_screen[detail-80x24]``."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Tab, TabbedContent

from desktop_app.app.screens.detail import RunDetailScreen, tab_labels
from tests.app_support import settle
from tests.test_app_snapshots_sizes import app_for, open_detail
from tests.test_app_snapshots_views import isolated  # noqa: F401  (autouse fixture)


def tab_row(screen: RunDetailScreen) -> tuple[list[str], list[bool]]:
    panels = screen.query_one(TabbedContent)
    tabs = list(panels.query(Tab))
    inside = [t.region.right <= panels.region.right for t in tabs]
    return [t.label_text for t in tabs], inside


@pytest.mark.parametrize("size", [(80, 24), (120, 35), (200, 60)])
async def test_every_tab_label_is_inside_the_tab_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    app = app_for(tmp_path, monkeypatch)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await open_detail(pilot)
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        labels, inside = tab_row(screen)
        assert all(inside), labels
        assert labels[0] == "1 State"
        if size == (200, 60):
            assert labels[3:5] == ["4 Waits (1)", "5 Outbox"]
        await pilot.press("6")  # another tab: its name shows, the row still fits
        await settle(pilot)
        labels, inside = tab_row(screen)
        assert all(inside), labels
        assert labels[5] in ("6 Context", "6 Ctx")


def test_labels_shrink_in_steps() -> None:
    counts = {"tab-waits": 2}
    assert tab_labels("tab-state", counts, 200)["tab-outbox"] == "5 Outbox"
    assert tab_labels("tab-state", counts, 60)["tab-outbox"] == "5 Out"
    narrow = tab_labels("tab-diff", counts, 40)
    assert list(narrow.values()) == ["1", "2 Diff", "3", "4 (2)", "5", "6", "7"]
