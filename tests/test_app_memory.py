"""The app's memory stays flat while a person uses it: screens shown and
closed, and the cursor moved, leave nothing behind.

Textual drops the watcher of a removed widget only when the watched
reactive next changes; the key bar's keys (``compact``, composed again at
every cursor move) and each screen's header (the app's ``title``) kept
every one ever shown alive, with its closed screen's caches: the objects a
full garbage collection walks grew by ~750 per cursor move and ~2,000 per
run opened for as long as the app ran, so its pauses grew with use
(measured: 126,000 -> 283,000 objects over 120 cursor moves, 317,000 ->
530,000 over 120 runs opened; flat after the fix once the caches Textual
bounds are full). The test counts the widgets behind that growth.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from textual.widgets import Header  # noqa: TID251 (any header, ours or not)
from textual.widgets._footer import FooterKey

from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from tests.app_support import settle
from tests.runs_corpus import make_runs_db

#: the keys of one more closed screen's key bar that may still be referenced
#: (the leak this test found kept ~15 per key bar shown: ~120 over 3 rounds)
ONE_KEY_BAR = 10

#: a run opened and closed, the inbox opened and closed, the cursor moved
ROUND = ("down", "enter", "escape", "i", "escape", "up")


def _detached(kind: type) -> int:
    """Widgets of ``kind`` alive but no longer in the app's DOM."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, kind) and not o.is_attached)


@pytest.mark.slow
async def test_showing_screens_and_moving_the_cursor_leaves_no_widget_behind(
    tmp_path: Path,
) -> None:
    db = make_runs_db(tmp_path / "runs.db", 50)
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)

        async def rounds(n: int) -> None:
            for _ in range(n):
                for key in ROUND:
                    await pilot.press(key)
                    await pilot.pause()

        await rounds(2)
        await settle(pilot)
        # the last screen closed may still be referenced, with its header and
        # key bar (4 or 5 keys here); since the key bar composes only when its
        # keys change, one more closed screen sometimes is, for a while,
        # depending on the order their last messages ran (4 or 9 detached
        # keys after 10 rounds, 4 after 30; never more)
        keys, headers = _detached(FooterKey), _detached(Header)
        await rounds(3)
        await settle(pilot)  # the key bar's last recompose done
        # before the fix: +3 headers and +~120 keys (~15 per key bar shown)
        assert _detached(FooterKey) <= keys + ONE_KEY_BAR
        assert _detached(Header) <= headers + 1
