"""The timeline shows a stop as a row of its own and no row's Took counts
the time a run lay stopped (issue 28): a digest killed with kill -9 mid-way
and resumed shows ``interrupted → resumed`` between its loop's two rows."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from desktop_app.app.main import FlowdeskApp
from desktop_app.app.screens.detail import RunDetailScreen
from desktop_app.app.widgets.run_tables import CheckpointsTable, group_history, resumed_at
from desktop_app.config import load_settings
from desktop_app.store.sqlite.store import open_store
from tests.app_support import settle, wait_until
from tests.digest_corpus import make_corpus
from tests.test_digest import apply_schema, worker


async def test_a_killed_and_resumed_digest_shows_the_stop_as_a_row(tmp_path: Path) -> None:
    folder, out, log, db = (
        tmp_path / "corpus",
        tmp_path / "out",
        tmp_path / "log",
        tmp_path / "t.db",
    )
    make_corpus(folder, 30)
    apply_schema(db)
    killed = worker(db, folder, out, log, "--kill-after", "12")
    assert killed.returncode == -signal.SIGKILL
    with sqlite3.connect(db) as conn:
        ((run_id, stopped_at),) = conn.execute("SELECT run_id, revision FROM runs").fetchall()
    done = worker(db, folder, out, log)  # a new process resumes it to the end
    assert done.returncode == 0, done.stderr

    store = open_store(db)
    try:
        latest = store.latest(run_id)
        history = store.history(run_id)
    finally:
        store.close()
    assert resumed_at(latest.meta) == {stopped_at + 1: "interrupted"}
    groups = group_history(history, resumed_at(latest.meta))
    [stop] = [g for g in groups if g.stopped]
    before, after = groups[groups.index(stop) - 1], groups[groups.index(stop) + 1]
    assert (before.step_id, before.last) == ("summarize", stopped_at)
    assert (after.step_id, after.first) == ("summarize", stopped_at + 1)
    # no row spans the stop: each Took is its own checkpoints' span
    assert before.last_at < stop.last_at <= after.first_at
    assert before.iterations + after.iterations == 30 - 12 + 12  # the loop's iterations, all

    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        app.push_screen(RunDetailScreen(run_id))
        await settle(pilot)
        table = app.screen.query_one(CheckpointsTable)
        await wait_until(pilot, lambda: any(g.stopped for g in table.groups))
        row = [c.plain for c in table.get_row(str(groups.index(stop)))]
        assert row[1:4] == [
            f"{stopped_at} → {stopped_at + 1}",
            "interrupted",
            "interrupted → resumed",
        ]
        assert row[4].endswith(" stopped)")
