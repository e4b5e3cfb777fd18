"""``show`` says truly who fires a sleeping run's timer: on PostgreSQL the
app fires none unless its ``worker`` setting is on (only the workers,
``flowdesk agent``, do), on a SQLite file the app does too. It once said "a
running `flowdesk agent` or the app fires it" on PostgreSQL, where the app,
by default, fires nothing. The app's own behaviour is checked alongside:
with the same settings it runs its timer pump exactly where ``show`` says
it fires timers. Real processes, a real PostgreSQL and a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.app.main import FlowdeskApp
from desktop_app.config import load_settings
from tests.app_support import settle
from tests.cli_support import flowdesk
from tests.timer_flows import FLOWS_ENV

REGISTERED = {"FLOWDESK_FLOWS": FLOWS_ENV}
ON_POSTGRES_BY_WORKERS = (
    "fires it on its own; the app does not on PostgreSQL unless its `worker` setting is "
    "on (`FLOWDESK_WORKER=1`)"
)
BY_AGENT_OR_APP = "a running `flowdesk agent` or the app fires it on its own"


def napping_run(db: str) -> str:
    assert flowdesk(db, "db", "apply").returncode == 0
    out = flowdesk(db, "start", "napper", "--input", json.dumps({"order": "z"}), env=REGISTERED)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


async def app_fires_timers(db: str, monkeypatch: pytest.MonkeyPatch, worker: bool) -> bool:
    """Whether the app, launched with these settings, runs its timer pump."""
    monkeypatch.setenv("FLOWDESK_WORKER", "1" if worker else "0")
    app = FlowdeskApp(load_settings(db_path=db))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.engine is not None
        return app.timers is not None


@pytest.mark.parametrize("worker", [False, True])
async def test_show_on_postgresql_names_who_fires_a_timer(
    pg_empty_url: str, worker: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = napping_run(pg_empty_url)
    env = {**REGISTERED, "FLOWDESK_WORKER": "1" if worker else "0"}
    shown = flowdesk(pg_empty_url, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "a timer (step nap" in shown.stdout
    if worker:
        assert BY_AGENT_OR_APP in shown.stdout
        assert ON_POSTGRES_BY_WORKERS not in shown.stdout
    else:
        worker_cmd = f"flowdesk --db {pg_empty_url} agent"
        assert (
            f"a running worker of this run's scope (`{worker_cmd}`) " + (ON_POSTGRES_BY_WORKERS)
            in shown.stdout
        ), shown.stdout
        assert "or the app fires it" not in shown.stdout
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS_ENV)
    assert await app_fires_timers(pg_empty_url, monkeypatch, worker) is worker


async def test_show_on_sqlite_says_the_app_fires_a_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "t.db")
    run_id = napping_run(db)
    shown = flowdesk(db, "show", run_id, env=REGISTERED)
    assert shown.returncode == 0, shown.stderr
    assert BY_AGENT_OR_APP in shown.stdout
    monkeypatch.setenv("FLOWDESK_FLOWS", FLOWS_ENV)
    assert await app_fires_timers(db, monkeypatch, worker=False) is True  # ignored on SQLite


def test_on_postgresql_show_names_the_worker_of_the_runs_scope_and_it_fires_as_printed(
    pg_empty_url: str,
) -> None:
    """A team tryout: a run started in scope `team a` while every worker
    served `default`; its timer passed, and `show` said "a running
    `flowdesk agent` (a worker) fires it on its own". It names the worker
    command of the run's database and scope; started as printed, that
    worker fires the timer and the run completes."""
    import os
    import re
    import shlex
    import signal
    import time

    from tests.cli_support import spawn

    env = {**REGISTERED, "FLOWDESK_SCOPE": "team a"}
    assert flowdesk(pg_empty_url, "db", "apply").returncode == 0
    out = flowdesk(pg_empty_url, "start", "napper", "--input", '{"order": "z"}', env=env)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split()[0]
    shown = flowdesk(pg_empty_url, "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    found = re.search(r"a running worker of this run's scope \(`([^`]+)`\) fires it", shown.stdout)
    assert found, shown.stdout
    printed = found[1]
    assert printed == f"flowdesk --db {pg_empty_url} --scope 'team a' agent"
    argv = shlex.split(printed)
    worker = spawn(*argv[1:], env=REGISTERED, new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            status = flowdesk(pg_empty_url, "show", run_id, "-o", "json", env=env)
            if json.loads(status.stdout)["status"] == "completed":
                break
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, status.stdout
            time.sleep(0.3)
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        worker.communicate(timeout=60)
