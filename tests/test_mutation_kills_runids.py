"""Run ids as people type them (store/runids.py), on a real SQLite file.

Written against the mutants the CLI tests missed: those reach
``resolve_run_id`` only inside ``flowdesk`` subprocesses, so no in-process
test checked the exact-id, prefix, child-id and scope rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.errors import AmbiguousRunIdError, UnknownRunError
from desktop_app.store.protocol import Checkpoint, RunRecord
from desktop_app.store.runids import MIN_PREFIX, RunRef, resolve_run_id
from desktop_app.store.sqlite.agent_runs import AgentRun, SqliteAgentStore
from desktop_app.store.sqlite.store import open_store


def _flow_run(store, run_id: str) -> None:
    store.create_run(
        RunRecord(run_id, "f", "v1", "completed", 0, 1000.0, 1000.0, scope=store.scope),
        Checkpoint(run_id, 0, "completed", {}, {}, (), 1000.0),
    )


def _agent_run(agents: SqliteAgentStore, run_id: str) -> None:
    agents.create(
        AgentRun(run_id, "notes", "done", "hi", 1000.0, 1000.0),
        [{"role": "user", "content": "hi"}],
    )


@pytest.fixture
def stores(db_path: Path):
    store = open_store(db_path)
    yield store, SqliteAgentStore(store)
    store.close()


def test_a_unique_prefix_picks_the_flow_run_or_the_agent_run(stores):
    store, agents = stores
    _flow_run(store, "f00dcafe0001")
    _agent_run(agents, "beefbeef0002")
    assert resolve_run_id(store, agents, "f00d") == RunRef("f00dcafe0001", "flow")
    assert resolve_run_id(store, agents, "beefb") == RunRef("beefbeef0002", "agent")


def test_an_exact_id_wins_over_longer_ids_it_prefixes(stores):
    store, agents = stores
    _flow_run(store, "abcd1234")
    _flow_run(store, "abcd12345")
    _agent_run(agents, "abcd123456")
    assert resolve_run_id(store, agents, "abcd1234") == RunRef("abcd1234", "flow")
    assert resolve_run_id(store, agents, "abcd123456") == RunRef("abcd123456", "agent")


def test_surrounding_whitespace_is_ignored(stores):
    store, agents = stores
    _flow_run(store, "abcd1234")
    _agent_run(agents, "cdef5678")
    assert resolve_run_id(store, agents, "  abcd1234\n") == RunRef("abcd1234", "flow")
    assert resolve_run_id(store, agents, " cdef5678 ") == RunRef("cdef5678", "agent")
    assert resolve_run_id(store, agents, " abcd ") == RunRef("abcd1234", "flow")


def test_the_shortest_prefix_accepted_is_min_prefix_characters(stores):
    store, agents = stores
    _flow_run(store, "abcdef01")
    assert MIN_PREFIX == 4
    assert resolve_run_id(store, agents, "abcd") == RunRef("abcdef01", "flow")
    # a short id that is no run's whole id: said to be matched whole (a
    # chosen id may be 2 characters long: "give at least 4" misled)
    with pytest.raises(UnknownRunError) as err:
        resolve_run_id(store, agents, "abc")
    assert str(err.value) == (
        "no run abc in scope 'default' (an id shorter than 4 characters is matched whole, "
        "not as the start of a longer one)"
    )


def test_a_prefix_without_a_colon_never_picks_a_child_agent_run(stores):
    store, agents = stores
    _flow_run(store, "f00dcafe")
    _agent_run(agents, "f00dcafe:notes.md")
    _agent_run(agents, "f00dcafe:todo.md")
    assert resolve_run_id(store, agents, "f00d") == RunRef("f00dcafe", "flow")
    assert resolve_run_id(store, agents, "f00dcafe:n") == RunRef("f00dcafe:notes.md", "agent")
    with pytest.raises(AmbiguousRunIdError) as err:
        resolve_run_id(store, agents, "f00dcafe:")
    assert err.value.matches == ["f00dcafe:notes.md (agent)", "f00dcafe:todo.md (agent)"]


def test_a_child_agent_run_alone_is_not_found_without_its_colon(stores):
    store, agents = stores
    _agent_run(agents, "f00dcafe:notes.md")
    with pytest.raises(UnknownRunError):
        resolve_run_id(store, agents, "f00dcafe")


def test_several_matches_are_listed_sorted_with_their_kind(stores):
    store, agents = stores
    _flow_run(store, "abcd2222")
    _agent_run(agents, "abcd1111")
    _flow_run(store, "abcd0000")
    with pytest.raises(AmbiguousRunIdError) as err:
        resolve_run_id(store, agents, "abcd")
    assert err.value.prefix == "abcd"
    assert err.value.matches == ["abcd0000 (flow)", "abcd1111 (agent)", "abcd2222 (flow)"]
    # one more character makes each unique again
    assert resolve_run_id(store, agents, "abcd1") == RunRef("abcd1111", "agent")


def test_no_match_names_the_scope(db_path: Path):
    store = open_store(db_path, scope="tenant-a")
    other = open_store(db_path, scope="tenant-b")
    try:
        _flow_run(other, "abcd1234")
        with pytest.raises(UnknownRunError, match="in scope 'tenant-a'"):
            resolve_run_id(store, SqliteAgentStore(store), "abcd")
        with pytest.raises(UnknownRunError, match="in scope 'tenant-a'"):
            resolve_run_id(store, SqliteAgentStore(store), "abcd1234")
        assert resolve_run_id(other, None, "abcd") == RunRef("abcd1234", "flow")
    finally:
        store.close()
        other.close()


def test_without_an_agent_store_only_flow_runs_are_looked_at(stores):
    store, agents = stores
    _flow_run(store, "abcd0001")
    _agent_run(agents, "abcd0002")
    assert resolve_run_id(store, None, "abcd") == RunRef("abcd0001", "flow")
    with pytest.raises(UnknownRunError):
        resolve_run_id(store, None, "abcd0002")


def test_an_exact_agent_run_id_wins_over_longer_agent_ids_it_prefixes(stores):
    store, agents = stores
    _agent_run(agents, "abcd1234")
    _agent_run(agents, "abcd12345")
    assert resolve_run_id(store, agents, "abcd1234") == RunRef("abcd1234", "agent")
    with pytest.raises(AmbiguousRunIdError):
        resolve_run_id(store, agents, "abcd123")
