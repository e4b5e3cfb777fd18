"""``history_page``: a long history read one bounded page at a time (every store)."""

from __future__ import annotations

import pytest

from desktop_app.errors import CheckpointNotFoundError
from tests.contract.test_checkpoint_store import cp, make_run


def test_history_pages_cover_the_history_in_order(store):
    store.create_run(make_run("r1"), cp("r1", 0, {"x": 0}))
    for i in range(1, 12):
        store.append(cp("r1", i, {"x": i}, step_id=f"s{i}"))
    pages, after = [], -1
    while page := store.history_page("r1", after=after, limit=5):
        pages.append([h.revision for h in page])
        after = page[-1].revision
    assert pages == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    assert store.history_page("r1", limit=3) == store.history("r1")[:3]
    assert [h.step_id for h in store.history_page("r1", after=10, limit=5)] == ["s11"]
    with pytest.raises(CheckpointNotFoundError):
        store.history_page("nope", limit=5)
