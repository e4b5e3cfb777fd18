"""What a new user's tryout of the app found (and the fixes), each through
Textual's pilot on a real SQLite file: the filter finds any run by the 8
characters the table shows, however old."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.runs import PAGE
from desktop_app.config import load_settings
from desktop_app.store.protocol import RunRecord
from desktop_app.store.sqlite.store import SqliteCheckpointStore
from tests.app_support import settle, wait_until
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
