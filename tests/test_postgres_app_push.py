"""On PostgreSQL the app hears about other machines' changes by LISTEN/NOTIFY,
not only at its next poll: a run another store starts and finishes shows in
the runs table with the poll set to an hour. Real server, real connections."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.postgres.store import open_postgres_store
from tests.app_support import settle, wait_until

pytestmark = pytest.mark.postgres


class S(BaseModel):
    n: int = 0


FLOW = FlowBuilder("pushed", S).step("one", lambda s: {"n": s.n + 1}).chain().compile()


class Counter:
    """``on_change`` for a watcher: counts calls and lets a test wait for the next."""

    def __init__(self) -> None:
        self.calls = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.calls += 1
            self._cond.notify_all()

    def wait_past(self, seen: int, timeout: float = 30.0) -> int:
        with self._cond:
            assert self._cond.wait_for(lambda: self.calls > seen, timeout), "no change pushed"
            return self.calls


def test_a_store_pushes_other_stores_runs_and_status_changes(pg_url):
    watching = open_postgres_store(pg_url)
    writer = open_postgres_store(pg_url)
    assert "push" in watching.capabilities
    heard, other = Counter(), Counter()
    stop = watching.watch_changes(heard)
    stop_other = watching.watch_changes(other)
    try:
        result = Engine(writer, flows=[FLOW]).run("pushed", S())
        assert result.status == "completed"
        seen = heard.wait_past(0)  # the run created, then completed and released
        stop()
        stop()  # idempotent
        before = heard.calls
        seen_other = other.calls
        Engine(writer, flows=[FLOW]).run("pushed", S())
        other.wait_past(seen_other)  # the live watcher heard this run ...
        assert heard.calls == before  # ... the stopped one did not
        assert seen >= 1
    finally:
        stop_other()
        writer.close()
        watching.close()


async def test_the_app_shows_a_run_another_machine_ran_without_waiting_for_its_poll(
    pg_url: str, tmp_path: Path
) -> None:
    app = FlowdeskApp(load_settings(db_path=pg_url))
    app.POLL_S = 3600.0  # only a push can show another machine's run in time
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.services is not None, timeout=30)
        table = app.runs_screen.table
        assert table.run_ids == []
        writer = open_postgres_store(pg_url)
        try:
            run = Engine(writer, flows=[FLOW]).run("pushed", S())
        finally:
            writer.close()
        await wait_until(pilot, lambda: run.run_id in table.run_ids, timeout=30)
        assert not [n for n in app.notices if n.severity == "error"]


async def test_the_app_on_postgresql_leaves_timers_and_deadlines_to_the_workers(
    pg_url: str,
) -> None:
    """Without ``FLOWDESK_WORKER`` the app executes nothing on PostgreSQL
    (the workers, ``flowdesk agent``, do): it starts no timer pump and no
    outbox delivery, as it resumes no run at launch."""
    app = FlowdeskApp(load_settings(db_path=pg_url))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.services is not None, timeout=30)
        # what writes on its own was started (or, here, not): launched past it
        await wait_until(pilot, lambda: app._launched == "writers", timeout=30)
        assert app.engine is not None and not app.engine.executes
        assert app.timers is None and app.outbox is None
