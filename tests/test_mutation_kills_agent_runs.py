"""The SQLite agent log (``desktop_app.store.sqlite.agent_runs``), exactly: what each
call commits, returns and raises; messages numbered in order and checked
against their checksum; tool results upserted with their attempts; the
lease guard; scopes kept apart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from desktop_app.errors import (
    AgentRunLeasedError,
    CheckpointCorruptError,
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
)
from desktop_app.store.protocol import AgentRun, ToolResult
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


def _run(run_id: str = "ag1", **kw) -> AgentRun:
    fields = {
        "agent": "helper",
        "status": "running",
        "input": "hello",
        "created_at": 1000.0,
        "updated_at": 1000.0,
    }
    fields.update(kw)
    return AgentRun(run_id=run_id, **fields)  # type: ignore[arg-type]


SYS = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "hé ☃"}


@pytest.fixture
def agents(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def _raw_messages(agents: SqliteAgentStore, run_id: str) -> list[tuple[Any, ...]]:
    return list(
        agents.conn.execute(
            "SELECT seq, role, body, created_at, checksum FROM agent_messages "
            "WHERE run_id=? ORDER BY seq",
            (run_id,),
        )
    )


def test_create_stores_the_run_and_its_first_messages_numbered_from_zero(agents):
    run = _run(context={"k": "v"}, turns=2, lease_owner="w1", lease_expires_at=5.0)
    agents.create(run, [SYS, USER])
    assert agents.get("ag1") == run
    assert agents.messages("ag1") == [SYS, USER]
    raw = _raw_messages(agents, "ag1")
    assert [(r[0], r[1], r[3]) for r in raw] == [(0, "system", 1000.0), (1, "user", 1000.0)]
    assert raw[1][2] == '{"role": "user", "content": "hé ☃"}'  # UTF-8 kept, not \\u escapes
    assert all(r[4] is not None and len(r[4]) == 32 for r in raw)


def test_create_of_an_existing_run_is_a_conflict_and_writes_nothing(agents):
    agents.create(_run(), [SYS])
    with pytest.raises(RevisionConflictError) as err:
        agents.create(_run(input="again"), [SYS, USER])
    assert str(err.value) == "agent run ag1 already exists"
    assert agents.get("ag1").input == "hello"
    assert agents.messages("ag1") == [SYS]


def test_update_appends_messages_after_the_last_and_sets_the_fields(agents):
    agents.create(_run(), [SYS])
    agents.update("ag1", 1001.0, messages=[USER], turns=1)
    agents.update(
        "ag1",
        1002.0,
        messages=[{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
        status="input_required",
        pending_call={"name": "ask_user", "args": {"q": 1}},
        response="r",
    )
    got = agents.get("ag1")
    assert (got.updated_at, got.turns, got.status, got.response) == (
        1002.0,
        1,
        "input_required",
        "r",
    )
    assert got.pending_call == {"name": "ask_user", "args": {"q": 1}}
    raw = _raw_messages(agents, "ag1")
    assert [(r[0], r[1], r[3]) for r in raw] == [
        (0, "system", 1000.0),
        (1, "user", 1001.0),
        (2, "assistant", 1002.0),
        (3, "user", 1002.0),
    ]
    agents.update("ag1", 1003.0, pending_call=None)
    assert agents.get("ag1").pending_call is None


def test_tool_results_are_upserted_and_count_their_attempts(agents):
    agents.create(_run(), [SYS])
    assert agents.tool_result("ag1", "search:{}") is None
    agents.update("ag1", 1001.0, tool=("search:{}", "search", "in_progress", None))
    assert agents.tool_result("ag1", "search:{}") == ToolResult(
        "search:{}", "search", "in_progress", None, 1, 0
    )
    agents.update("ag1", 1002.0, tool=("search:{}", "search", "in_progress", None))
    agents.update("ag1", 1003.0, tool=("search:{}", "search", "completed", "found"))
    # a later write without a result keeps the one stored
    agents.update("ag1", 1004.0, tool=("search:{}", "search", "completed", None))
    assert agents.tool_result("ag1", "search:{}") == ToolResult(
        "search:{}", "search", "completed", "found", 2, 0
    )
    agents.mark_reused("ag1", "search:{}")
    agents.mark_reused("ag1", "search:{}")
    agents.mark_reused("ag1", "other")  # no such result: nothing happens
    assert agents.tool_result("ag1", "search:{}") == ToolResult(
        "search:{}", "search", "completed", "found", 2, 2
    )
    agents.update("ag1", 1005.0, tool=("calc:{}", "calc", "failed", "boom"))
    assert agents.tool_results("ag1") == [
        ToolResult("search:{}", "search", "completed", "found", 2, 2),
        ToolResult("calc:{}", "calc", "failed", "boom", 0, 0),
    ]
    assert agents.tool_results("nobody") == []


def test_update_by_the_lease_owner_only(agents):
    agents.create(_run(lease_owner="w1", lease_expires_at=2000.0), [SYS])
    agents.update("ag1", 1001.0, owner="w1", turns=1)
    assert agents.get("ag1").turns == 1
    with pytest.raises(LeaseLostError) as err:
        agents.update("ag1", 1002.0, owner="w2", messages=[USER], turns=5)
    assert str(err.value) == (
        "agent run ag1 is held by w1, not by w2: another process took it over; "
        "this process stops executing it."
    )
    got = agents.get("ag1")
    assert (got.turns, got.updated_at) == (1, 1001.0)
    assert agents.messages("ag1") == [SYS]  # the whole transaction rolled back


def test_update_of_a_missing_run_is_not_found_and_writes_nothing(agents):
    with pytest.raises(CheckpointNotFoundError) as err:
        agents.update("nope", 1.0, turns=1)
    assert str(err.value) == "no agent run nope in scope 'default'"
    with pytest.raises(CheckpointNotFoundError):
        agents.update("nope", 1.0, owner="w1", turns=1)


def test_claim_takes_a_free_own_or_expired_lease_and_refuses_a_live_one(agents):
    agents.create(_run(), [SYS])
    got = agents.claim("ag1", "w1", 2000.0, 1000.0)
    assert (got.lease_owner, got.lease_expires_at) == ("w1", 2000.0)
    got = agents.claim("ag1", "w1", 2500.0, 1500.0)  # renewed by its owner
    assert (got.lease_owner, got.lease_expires_at) == ("w1", 2500.0)
    with pytest.raises(AgentRunLeasedError) as err:
        agents.claim("ag1", "w2", 3000.0, 2499.0)
    assert (err.value.run_id, err.value.owner, err.value.expires_at) == ("ag1", "w1", 2500.0)
    assert agents.get("ag1").lease_owner == "w1"
    with pytest.raises(AgentRunLeasedError):  # expired, but naming no holder takes nothing
        agents.claim("ag1", "w2", 3000.0, 2500.0)
    got = agents.claim("ag1", "w2", 3000.0, 2500.0, takes_over="w1")  # expired at exactly then
    assert (got.lease_owner, got.lease_expires_at) == ("w2", 3000.0)
    got = agents.claim("ag1", "w3", 4000.0, math.inf, takes_over=agents.get("ag1").lease_owner)
    assert (got.lease_owner, got.lease_expires_at) == ("w3", 4000.0)


def test_a_lease_without_an_expiry_is_held_until_taken_over(agents):
    agents.create(_run(lease_owner="w1"), [SYS])
    with pytest.raises(AgentRunLeasedError) as err:
        agents.claim("ag1", "w2", 3000.0, 10_000.0)
    assert (err.value.owner, err.value.expires_at) == ("w1", None)  # no expiry, not epoch 0
    assert "1970" not in str(err.value)
    got = agents.claim("ag1", "w2", 3000.0, math.inf, takes_over=agents.get("ag1").lease_owner)
    assert (got.lease_owner, got.lease_expires_at) == ("w2", 3000.0)


def test_claim_of_a_missing_run_is_not_found(agents):
    with pytest.raises(CheckpointNotFoundError):
        agents.claim("nope", "w1", 2000.0, 1000.0)


def test_release_by_the_owner_only(agents):
    agents.create(_run(), [SYS])
    agents.claim("ag1", "w1", 2000.0, 1000.0)
    agents.release("ag1", "w2")
    assert agents.get("ag1").lease_owner == "w1"
    agents.release("ag1", "w1")
    got = agents.get("ag1")
    assert (got.lease_owner, got.lease_expires_at) == (None, None)


def test_a_changed_message_row_is_refused_with_its_sequence_number(agents):
    agents.create(_run(), [SYS, USER])
    agents.conn.execute(
        "UPDATE agent_messages SET body=? WHERE run_id='ag1' AND seq=1",
        ('{"role": "user", "content": "forged"}',),
    )
    with pytest.raises(CheckpointCorruptError) as err:
        agents.messages("ag1")
    assert (err.value.run_id, err.value.revision) == ("ag1", 1)
    assert str(err.value).startswith("agent message of run ag1 revision 1 was changed")
    # a row written before checksums existed (NULL) is read as it is
    agents.conn.execute("UPDATE agent_messages SET checksum=NULL WHERE run_id='ag1' AND seq=1")
    assert agents.messages("ag1") == [SYS, {"role": "user", "content": "forged"}]


def test_list_filters_by_status_and_agent_in_creation_order(agents):
    agents.create(_run("b", created_at=1.0, agent="x"), [SYS])
    agents.create(_run("a", created_at=1.0, agent="y", status="done"), [SYS])
    agents.create(_run("c", created_at=0.5, agent="x", status="failed"), [SYS])
    assert [r.run_id for r in agents.list()] == ["c", "a", "b"]
    assert [r.run_id for r in agents.list(statuses=["running", "failed"])] == ["c", "b"]
    assert [r.run_id for r in agents.list(statuses=["done"])] == ["a"]
    assert [r.run_id for r in agents.list(agent="x")] == ["c", "b"]
    assert [r.run_id for r in agents.list(statuses=["failed"], agent="y")] == []


def test_scopes_are_kept_apart(db_path: Path, agents):
    agents.create(_run(), [SYS])
    other_store = open_store(db_path, scope="other")
    try:
        other = SqliteAgentStore(other_store)
        assert (other.scope, other.path) == ("other", other_store.path)
        assert str(agents.path) == str(db_path)
        with pytest.raises(CheckpointNotFoundError) as err:
            other.get("ag1")
        assert str(err.value) == "no agent run ag1 in scope 'other'"
        assert other.list() == []
        with pytest.raises(CheckpointNotFoundError):
            other.update("ag1", 2.0, turns=9)
        with pytest.raises(CheckpointNotFoundError):
            other.claim("ag1", "w1", 2000.0, 1000.0)
        other.release("ag1", "w1")
        other.create(_run("ag2"), [SYS])
        assert [r.run_id for r in other.list()] == ["ag2"]
    finally:
        other_store.close()
    assert agents.get("ag1").turns == 0
    assert [r.run_id for r in agents.list()] == ["ag1"]


def test_create_with_a_tool_call_journals_it_with_the_run(agents):
    """A run created with its first tool call already in flight (a resumed
    run's call) keeps that call in its journal, before any later one."""
    agents.create(_run(), [SYS, USER], tool=("search:{}", "search", "in_progress", None))
    assert agents.tool_result("ag1", "search:{}") == ToolResult(
        "search:{}", "search", "in_progress", None, 1, 0
    )
    agents.update("ag1", 1001.0, tool=("calc:{}", "calc", "completed", "2"))
    assert [t.tool_key for t in agents.tool_results("ag1")] == ["search:{}", "calc:{}"]
    assert agents.tool_results("other") == []
