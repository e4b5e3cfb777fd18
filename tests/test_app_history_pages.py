"""A long run's history reaches the detail one bounded page at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens import detail
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.widgets.run_tables import CheckpointsTable
from desktop_app.config import load_settings
from tests.app_support import settle
from tests.test_app_progress import Count, count_flow


async def test_the_history_is_read_in_pages_and_the_timeline_gets_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    sv = bootstrap.open_services(settings, flows=[count_flow()])
    try:
        run_id = sv.engine.run("count", Count()).run_id
        full = sv.checkpoints.history(run_id)
    finally:
        sv.close()
    assert len(full) > 400
    monkeypatch.setattr(detail, "HISTORY_PAGE", 100)
    app = FlowdeskApp(settings, flows=[count_flow()])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        reader: Any = app.reader
        limits: list[int] = []
        page = reader.history_page

        def counted(rid: str, *, after: int = -1, limit: int) -> Any:
            limits.append(limit)
            return page(rid, after=after, limit=limit)

        def whole(rid: str) -> Any:
            raise AssertionError("the detail read the whole history at once")

        monkeypatch.setattr(reader, "history_page", counted)
        monkeypatch.setattr(reader, "history", whole)
        app.controller.open_run(run_id)
        for _ in range(40):
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunDetailScreen)
            if len(screen.history) == len(full):
                break
        assert [h.revision for h in screen.history] == [h.revision for h in full]
        assert max(limits) == 100 and limits.count(100) >= len(full) // 100
        # the loop is still one row of the grouped timeline
        assert screen.query_one(CheckpointsTable).row_count < 10
