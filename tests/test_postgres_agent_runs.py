"""The agent-run store on SQLite and PostgreSQL: same calls, same results."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from desktop_app.errors import CheckpointNotFoundError
from desktop_app.store.sqlite.agent_runs import AgentRun


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def agents(request) -> Any:
    if request.param == "sqlite":
        from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

        return SqliteAgentStore(request.getfixturevalue("sqlite_store"))
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore

    return PostgresAgentStore(request.getfixturevalue("pg_store"))


def _run(run_id: str = "a1", **kw: Any) -> AgentRun:
    return AgentRun(run_id, "helper", "running", "hi", 100.0, 100.0, context={"t": 1}, **kw)


def test_create_append_tool_results_and_fields(agents):
    agents.create(
        _run(deadline_at=500.0),
        [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
    )
    agents.update(
        "a1",
        101.0,
        messages=[{"role": "assistant", "content": "call"}],
        tool=("t:{}", "t", "in_progress", None),
        turns=1,
    )
    agents.update("a1", 102.0, tool=("t:{}", "t", "in_progress", None))
    agents.update(
        "a1",
        103.0,
        messages=[{"role": "tool", "content": "42"}],
        tool=("t:{}", "t", "completed", "42"),
        pending_call={"q": "?"},
        retry_at=200.5,
    )
    agents.mark_reused("a1", "t:{}")
    run = agents.get("a1")
    assert (run.turns, run.updated_at, run.deadline_at, run.retry_at) == (1, 103.0, 500.0, 200.5)
    assert run.pending_call == {"q": "?"} and run.context == {"t": 1}
    assert [m["role"] for m in agents.messages("a1")] == ["system", "user", "assistant", "tool"]
    res = agents.tool_result("a1", "t:{}")
    assert (res.status, res.result, res.attempts, res.reused) == ("completed", "42", 2, 1)
    assert [r.tool_key for r in agents.tool_results("a1")] == ["t:{}"]
    assert agents.tool_result("a1", "nope") is None
    agents.create(_run("a2"), [])
    agents.update("a2", 104.0, status="done", response="ok")
    assert [r.run_id for r in agents.list(statuses=["done"])] == ["a2"]
    assert [r.run_id for r in agents.list(agent="helper")] == ["a1", "a2"]
    with pytest.raises(CheckpointNotFoundError):
        agents.get("missing")
    with pytest.raises(CheckpointNotFoundError):
        agents.update("missing", 1.0, turns=3)


@pytest.mark.postgres
def test_concurrent_appends_from_two_connections_get_distinct_seqs(pg_url, pg_store):
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore
    from desktop_app.store.postgres.store import open_postgres_store

    other = open_postgres_store(pg_url)
    try:
        a, b = PostgresAgentStore(pg_store), PostgresAgentStore(other)
        a.create(_run(), [])
        barrier = threading.Barrier(2)

        def append(store: Any, who: str) -> None:
            barrier.wait()
            for i in range(10):
                store.update("a1", 101.0, messages=[{"role": "user", "content": f"{who}{i}"}])

        threads = [threading.Thread(target=append, args=(s, w)) for s, w in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(a.messages("a1")) == 20
    finally:
        other.close()


@pytest.mark.postgres
def test_an_agent_error_holding_nul_is_kept_readable_on_postgres(pg_store):
    """PostgreSQL text cannot hold NUL: an error with one (from a tool's
    output) is stored with U+FFFD in its place, at creation and on update."""
    from desktop_app.store.postgres.agent_runs import PostgresAgentStore

    agents = PostgresAgentStore(pg_store)
    agents.create(AgentRun("nul", "helper", "running", "hi", 1.0, 1.0, error="a\x00b"), [])
    assert agents.get("nul").error == "a\ufffdb"
    agents.update("nul", 2.0, error="c\x00d")
    assert agents.get("nul").error == "c\ufffdd"


def test_list_page_reads_newest_first_a_page_at_a_time(agents):
    for i in range(5):
        agents.create(AgentRun(f"p{i}", "helper", "done", "hi", 100.0 + i, 100.0 + i), [])
    agents.create(AgentRun("p5", "helper", "done", "hi", 104.0, 104.0), [])  # same time: by id
    pages = [agents.list_page(offset=o, limit=2) for o in (0, 2, 4, 6)]
    assert [[r.run_id for r in page] for page in pages] == [
        ["p5", "p4"],
        ["p3", "p2"],
        ["p1", "p0"],
        [],
    ]


def test_list_page_of_the_memory_log() -> None:
    from desktop_app.store.memory.agent_runs import InMemoryAgentLog

    log = InMemoryAgentLog()
    for i in range(3):
        log.create(AgentRun(f"m{i}", "helper", "done", "hi", 100.0 + i, 100.0 + i), [])
    assert [r.run_id for r in log.list_page(offset=1, limit=5)] == ["m1", "m0"]
