"""An answer's or a resume's hold on an agent run (``recovery.claimed_run``)
is renewed while the run's MCP servers start: a start-up that outlasts the
lease (an ``npx`` server fetching its package) must not let a worker on
another host take the run over and start it a second time."""

from __future__ import annotations

import time

import pytest

from desktop_app.agent import recovery
from desktop_app.agent.leases import claim_agent_run
from desktop_app.errors import AgentRunLeasedError
from desktop_app.store.protocol import AgentRun
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore


def test_a_hold_longer_than_the_lease_is_renewed_and_refuses_another_host(
    sqlite_store, monkeypatch
):
    agents = SqliteAgentStore(sqlite_store)
    now = time.time()
    agents.create(
        AgentRun(
            run_id="ag1",
            agent="helper",
            status="running",
            input="hi",
            created_at=now,
            updated_at=now,
        ),
        [{"role": "user", "content": "hi"}],
    )
    monkeypatch.setattr(recovery, "CLAIM_LEASE_S", 1.0)
    with recovery.claimed_run(agents, "ag1") as owner:
        time.sleep(2.5)  # the servers' start-up: 2.5 leases long
        run = agents.get("ag1")
        assert run.lease_owner == owner
        assert run.lease_expires_at is not None and run.lease_expires_at > time.time()
        with pytest.raises(AgentRunLeasedError):  # a worker on another host
            claim_agent_run(agents, run, "elsewhere:4242:abcdef", 30.0, time.time())
    assert agents.get("ag1").lease_owner is None  # given back at the end
