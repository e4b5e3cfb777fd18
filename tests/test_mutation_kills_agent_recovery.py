"""An answer's lease (``claimed_run``: ``flowdesk answer`` and the
app's answer take it before a run's MCP servers start) and the app's
hand-over of an answered run to the workers (``hand_answer_to_workers``,
the app on PostgreSQL), exactly, as the mutation run of
``agent/recovery.py`` (issue 29) found them unpinned: what each stores,
what it refuses and leaves untouched, and the lease it holds and gives
back. Real SQLite files; no model, no MCP server (nothing is executed)."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import pytest

from desktop_app.agent.approvals import ApprovalRequest, agent_wait_id
from desktop_app.agent.recovery import claimed_run, hand_answer_to_workers
from desktop_app.errors import (
    AgentRunLeasedError,
    ApprovalAnswerError,
    CheckpointNotFoundError,
    RunStateError,
)
from desktop_app.flow.owners import new_owner
from desktop_app.store.protocol import AgentRun
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

T0 = 1000.0
ASK = {"id": "c1", "name": "ask_user", "arguments": {"question": "which colour?"}}
CALL = {"id": "c2", "name": "notes__write", "arguments": {"text": "hi"}}
REQUEST = ApprovalRequest.of("notes__write", {"text": "hi"}, 2)
APPROVE = {**CALL, "approval": REQUEST.to_json()}
#: another owner of this process: a live process of this host
LIVE = new_owner()


@pytest.fixture
def agents(sqlite_store: Any) -> SqliteAgentStore:
    return SqliteAgentStore(sqlite_store)


def _waiting(agents: SqliteAgentStore, pending: dict[str, Any], **kw: Any) -> AgentRun:
    run = AgentRun(
        run_id="r1",
        agent="helper",
        status="input_required",
        input="go",
        created_at=T0,
        updated_at=T0,
        pending_call=pending,
        **kw,
    )
    agents.create(run, [{"role": "user", "content": "go"}])
    agents.update("r1", T0, pending_call=pending)  # create stores no pending call
    return agents.get("r1")


def _sources(agents: SqliteAgentStore, **data: Any) -> None:
    import json

    from desktop_app.agent.tools import TOOL_SOURCES_KEY

    agents.update("r1", T0, tool=(TOOL_SOURCES_KEY, "tool_sources", "completed", json.dumps(data)))


def _untouched(agents: SqliteAgentStore, pending: dict[str, Any]) -> None:
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == ("input_required", pending, None)
    assert len(agents.messages("r1")) == 1
    assert agents.tool_result("r1", REQUEST.key) is None


# -- hand_answer_to_workers ------------------------------------------------------


def test_a_question_answered_for_the_workers_is_stored_as_the_models_tool_message(agents, caplog):
    """The answer to an ``ask_user`` question is the tool message the model
    reads, the run ``running`` with no question and no error, its lease
    released (a worker takes it), at the store's time given; the log says
    who answered and that the workers have it."""
    run = _waiting(agents, ASK, error="asked")
    with caplog.at_level(logging.INFO, logger="desktop_app.agent.recovery"):
        hand_answer_to_workers(
            agents, run, "blue", owner="app:1:x", now=T0 + 5, wait_id=agent_wait_id(ASK)
        )
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.error) == ("running", None, None)
    assert (now.lease_owner, now.lease_expires_at) == (None, None)
    assert now.updated_at == T0 + 5
    assert agents.messages("r1")[-1] == {
        "role": "tool",
        "content": "Human input: blue",
        "tool_call_id": "c1",
        "name": "ask_user",
    }
    assert "agent run r1 answered by app:1:x and handed to the workers" in caplog.messages


@pytest.mark.parametrize(("answer", "result"), [("yes", "yes"), (" N ", "no")])
def test_an_approval_answered_for_the_workers_is_journaled(agents, answer, result):
    """Yes or no to a tool call is journaled as the decision (the call is
    made, or refused, by the worker that resumes the run); no message."""
    run = _waiting(agents, APPROVE)
    hand_answer_to_workers(agents, run, answer, owner="app:1:x", now=T0 + 5)
    row = agents.tool_result("r1", REQUEST.key)
    assert row is not None and (row.status, row.result) == ("completed", result)
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == ("running", None, None)
    assert len(agents.messages("r1")) == 1


def test_an_approval_answered_with_neither_yes_nor_no_stores_nothing(agents):
    run = _waiting(agents, APPROVE)
    with pytest.raises(ApprovalAnswerError):
        hand_answer_to_workers(agents, run, "maybe", owner="app:1:x", now=T0 + 5)
    _untouched(agents, APPROVE)


def test_a_run_waiting_for_nothing_is_refused_naming_its_status(agents):
    _waiting(agents, ASK)
    agents.update("r1", T0, status="failed", pending_call=None)
    failed = agents.get("r1")
    with pytest.raises(RunStateError) as caught:
        hand_answer_to_workers(agents, failed, "blue", owner="app:1:x", now=T0 + 5)
    assert str(caught.value) == "agent run r1 is not waiting for input (status 'failed')"
    # input_required with nothing pending is refused as well
    agents.update("r1", T0, status="input_required")
    with pytest.raises(RunStateError, match=r"not waiting for input \(status 'input_required'\)"):
        hand_answer_to_workers(agents, agents.get("r1"), "blue", owner="app:1:x", now=T0 + 5)
    assert agents.get("r1").lease_owner is None


def test_an_answer_to_another_question_than_the_run_asks_is_refused(agents):
    """``wait_id``: what the person read; the run asks something else now."""
    run = _waiting(agents, ASK)
    with pytest.raises(RunStateError, match="it asks another question now"):
        hand_answer_to_workers(agents, run, "yes", owner="app:1:x", now=T0 + 5, wait_id=REQUEST.key)
    _untouched(agents, ASK)


def test_a_question_answered_elsewhere_after_the_run_was_read_is_refused(agents):
    """The run as the screen read it asked; by the time the lease is taken
    someone else answered: nothing more is stored, the lease given back."""
    stale = _waiting(agents, ASK)
    hand_answer_to_workers(agents, agents.get("r1"), "blue", owner="cli:1:y", now=T0 + 1)
    with pytest.raises(RunStateError, match="answered elsewhere"):
        hand_answer_to_workers(agents, stale, "red", owner="app:1:x", now=T0 + 5)
    now = agents.get("r1")
    assert (now.status, now.lease_owner, now.updated_at) == ("running", None, T0 + 1)
    assert [m["content"] for m in agents.messages("r1")] == ["go", "Human input: blue"]


def test_a_run_a_live_process_executes_is_not_answered_for_the_workers(agents):
    run = _waiting(agents, ASK, lease_owner=LIVE, lease_expires_at=T0 + 600)
    with pytest.raises(AgentRunLeasedError):
        hand_answer_to_workers(agents, run, "blue", owner="app:1:x", now=T0 + 5)
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == ("input_required", ASK, LIVE)


def test_the_lease_is_taken_for_the_time_given_while_the_answer_is_written(agents):
    """The answer is written under the owner's lease (``now +
    lease_ttl_s``): a write fenced on another owner would fail. Seen from
    the store's claim: a run whose lease is held until the time asked."""
    seen: list[tuple[str | None, float | None]] = []
    update = agents.update

    def spying(run_id: str, now: float, **kw: Any) -> None:
        run = agents.get(run_id)
        seen.append((run.lease_owner, run.lease_expires_at))
        update(run_id, now, **kw)

    run = _waiting(agents, ASK)
    agents.update = spying  # type: ignore[method-assign]
    hand_answer_to_workers(agents, run, "blue", owner="app:1:x", now=T0 + 5, lease_ttl_s=7.0)
    assert seen == [("app:1:x", T0 + 12.0)]
    update("r1", T0, status="input_required", pending_call=ASK)
    hand_answer_to_workers(agents, agents.get("r1"), "red", owner="app:1:x", now=T0 + 5)
    assert seen[-1] == ("app:1:x", T0 + 35.0)  # 30 s by default


def test_a_pydantic_ai_run_is_handed_over_only_for_an_approval(agents):
    """A Pydantic AI agent's question is its own (Flowdesk cannot write its
    answer where that agent reads it); an approval Flowdesk journals is."""
    run = _waiting(agents, ASK)
    _sources(agents, pydantic_ai="pkg.mod:agent")
    with pytest.raises(RunStateError) as caught:
        hand_answer_to_workers(agents, run, "blue", owner="app:1:x", now=T0 + 5)
    assert str(caught.value) == "agent run r1 waits for no answer Flowdesk can give"
    assert agents.get("r1").lease_owner is None
    agents.update("r1", T0, pending_call=APPROVE)
    hand_answer_to_workers(agents, agents.get("r1"), "yes", owner="app:1:x", now=T0 + 5)
    assert agents.get("r1").status == "running"


def test_a_run_with_file_tools_is_handed_over_with_its_answer(agents):
    """Sources with no Pydantic AI agent (a folder's file tools) are no
    reason to refuse a question's answer."""
    run = _waiting(agents, ASK)
    _sources(agents, folder="/tmp/x", mcp=["notes"])
    hand_answer_to_workers(agents, run, "blue", owner="app:1:x", now=T0 + 5)
    assert agents.get("r1").status == "running"


# -- claimed_run -------------------------------------------------------------


def test_an_answers_lease_is_held_by_a_new_owner_of_this_process_for_30_s(agents):
    """While the block runs, the run is held by the yielded owner (this
    host and process, a fresh nonce), for 30 s from now: a second answer
    at once is refused. The run is left as it was, free, after the block."""
    _waiting(agents, ASK)
    t0 = time.time()
    with claimed_run(agents, "r1") as owner:
        t1 = time.time()
        held = agents.get("r1")
        host, pid, nonce = owner.split(":", 2)
        assert (host, int(pid)) == (socket.gethostname(), os.getpid()) and nonce
        assert held.lease_owner == owner
        assert held.lease_expires_at is not None
        assert t0 + 30.0 <= held.lease_expires_at <= t1 + 30.0
        with pytest.raises(AgentRunLeasedError), claimed_run(agents, "r1"):
            pass
        assert agents.get("r1").lease_owner == owner
    with claimed_run(agents, "r1") as second:
        assert second != owner
    _untouched(agents, ASK)


def test_an_answers_lease_is_given_back_when_the_block_fails(agents):
    _waiting(agents, ASK)
    with pytest.raises(OSError, match="server did not start"), claimed_run(agents, "r1"):
        raise OSError("server did not start")
    _untouched(agents, ASK)


def test_an_answer_to_a_run_that_does_not_exist_is_refused(agents):
    with pytest.raises(CheckpointNotFoundError), claimed_run(agents, "nope"):
        pass


def test_a_cancel_landing_while_the_answer_is_written_is_not_overwritten(agents):
    """The answer is written fenced on the lease just taken (and on the run
    not being canceled): a ``flowdesk cancel`` from another process that
    lands between the lease and the write wins, and the run stays canceled
    rather than handed to the workers as ``running``."""
    from desktop_app.errors import AgentRunCanceledError

    update = agents.update

    def cancel_first(run_id: str, now: float, **kw: Any) -> None:
        update(run_id, now, status="canceled", error="canceled by you")
        update(run_id, now, **kw)

    run = _waiting(agents, ASK)
    agents.update = cancel_first  # type: ignore[method-assign]
    with pytest.raises(AgentRunCanceledError):
        hand_answer_to_workers(agents, run, "blue", owner="app:1:x", now=T0 + 5)
    now = agents.get("r1")
    assert (now.status, now.error, now.lease_owner) == ("canceled", "canceled by you", None)
    assert len(agents.messages("r1")) == 1


# -- Agent.record_input (what an answer records before the run's servers start) --


def _recorder(agents: SqliteAgentStore) -> Any:
    from desktop_app.agent.runtime import Agent

    return Agent("helper", object(), agents, [], owner="app:1:x")  # type: ignore[arg-type]


def test_an_answer_is_recorded_by_an_agent_that_has_none_of_the_runs_tools(agents):
    """``record_input`` runs before the run's MCP servers start, so with
    no tools: the run's recorded tools are not compared then (that is the
    resume's job, once they are connected). The answer is stored and the
    run held by the answering owner."""
    _waiting(agents, ASK)
    _sources(agents, folder="/tmp/x", mcp=["notes"])
    _recorder(agents).record_input("r1", "blue")
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == ("running", None, "app:1:x")
    assert agents.messages("r1")[-1]["content"] == "Human input: blue"


def test_an_answer_recorded_for_another_question_than_the_run_asks_is_refused(agents):
    _waiting(agents, ASK)
    with pytest.raises(RunStateError, match="it asks another question now"):
        _recorder(agents).record_input("r1", "yes", wait_id=REQUEST.key)
    _untouched(agents, ASK)
