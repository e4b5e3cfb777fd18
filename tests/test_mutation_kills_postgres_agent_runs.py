"""The PostgreSQL agent-run store (store/postgres/agent_runs.py) against the
same checks as the SQLite one: a run created with its first tool call in
flight keeps that call in its journal, before any later one.

Real stores: a SQLite file and a PostgreSQL database (tests/pg_support.py
starts a server; under CI=true a missing one fails the test)."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_app.store.protocol import AgentRun, ToolResult


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def agents(request) -> Any:
    if request.param == "sqlite":
        from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

        return SqliteAgentStore(request.getfixturevalue("sqlite_store"))
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore

    return PostgresAgentStore(request.getfixturevalue("pg_store"))


def test_create_with_a_tool_call_keeps_it_first_in_the_journal(agents):
    run = AgentRun("ag1", "helper", "running", "hello", 1000.0, 1000.0)
    system = {"role": "system", "content": "be brief"}
    agents.create(run, [system], tool=("search:{}", "search", "in_progress", None))
    assert agents.tool_result("ag1", "search:{}") == ToolResult(
        "search:{}", "search", "in_progress", None, 1, 0
    )
    agents.update("ag1", 1001.0, tool=("calc:{}", "calc", "completed", "2"))
    assert [t.tool_key for t in agents.tool_results("ag1")] == ["search:{}", "calc:{}"]
    assert agents.tool_results("other") == []
