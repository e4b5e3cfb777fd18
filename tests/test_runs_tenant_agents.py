"""``runs --tenant/--session`` and the app's tenant and session filters left
out every agent run (a tryout: a Pydantic AI run with ``tenant_id=
"initech"`` gave "no runs" even with ``--kind agent``): agent runs keep their
ExecutionContext ids as flow runs do, and pass these filters by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app import bootstrap
from desktop_app.app.widgets.run_filters import RunFilter
from desktop_app.config import load_settings
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from tests.cli_support import flowdesk

AT = 1_767_225_600.0
MINE = "a1" * 16
OTHER = "b2" * 16
CHILD = "c3" * 16


def make_runs(db: Path) -> None:
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    store = bootstrap.open_sqlite_store(settings)
    try:
        agents = SqliteAgentStore(store)
        ids = {"tenant_id": "initech", "session_id": "s-1"}
        agents.create(
            AgentRun(MINE, "ask", "done", "q", AT, AT, context={"run_id": MINE, **ids}), []
        )
        agents.create(AgentRun(OTHER, "ask", "done", "q", AT + 1, AT + 1), [])
        agents.create(
            AgentRun(
                CHILD, "digest", "done", "q", AT + 2, AT + 2, parent_run_id="f" * 32, context=ids
            ),
            [],
        )
    finally:
        store.close()


def listed(db: Path, *args: str) -> list[str]:
    out = flowdesk(db, "runs", *args, "-o", "jsonl")
    assert out.returncode == 0, out.stderr
    return [json.loads(line)["run_id"] for line in out.stdout.splitlines()]


@pytest.mark.scenario("S123")
def test_runs_tenant_and_session_list_the_agent_runs_of_that_tenant_and_session(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    make_runs(db)
    assert listed(db, "--tenant", "initech") == [MINE]
    assert listed(db, "--kind", "agent", "--session", "s-1") == [MINE]
    assert listed(db, "--tenant", "initech", "--children") == [CHILD, MINE]
    assert listed(db, "--tenant", "initech", "--session", "s-2") == []
    assert listed(db, "--kind", "agent") == [OTHER, MINE]  # no filter: every top-level one
    out = flowdesk(db, "runs", "--tenant", "initech", "-o", "jsonl")
    [row] = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["context"] == {"run_id": MINE, "tenant_id": "initech", "session_id": "s-1"}
    shown = flowdesk(db, "runs", "--tenant", "nobody")
    assert shown.returncode == 0 and shown.stdout.strip() == "no runs", shown.stdout


def test_the_apps_tenant_and_session_filters_pass_agent_runs_by_their_context(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    make_runs(db)
    store = bootstrap.open_sqlite_store(load_settings(db_path=db))
    try:
        agents = SqliteAgentStore(store)
        assert [r.run_id for r in RunFilter(tenant="initech").agent_runs(agents)] == [MINE]
        assert [r.run_id for r in RunFilter(session="s-1").agent_runs(agents)] == [MINE]
        assert RunFilter(tenant="initech", session="s-2").agent_runs(agents) == []
        assert RunFilter(tenant="initech", kind="flow").agent_runs(agents) == []
    finally:
        store.close()
