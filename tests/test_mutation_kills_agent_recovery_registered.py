"""Resuming and answering agent runs with what they recorded
(``agent/recovery.py``), the cases its second mutation run (issue 29) found
unpinned: a run of a *registered* Pydantic AI agent resumed or approved by
that agent (in this process: a ``FunctionModel``, no HTTP), approvals that
race another answer or a cancel, declined calls among several, the tools a
resumed Flowdesk agent gets back (its folder, a server that cannot start),
and which runs the recovery pass picks up (another host's leases, runs
that were once rate limited). Real SQLite files, no network."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.approvals import ApprovalRequest, agent_wait_id, declined_result
from desktop_app.agent.recovery import (
    hand_answer_to_workers,
    interrupted_agent_runs,
    record_approval,
    recover_agent_runs,
    resume_pydantic_ai,
    resume_with_recorded_tools,
)
from desktop_app.agent.tools import TOOL_SOURCES_KEY
from desktop_app.config import McpServerSettings, Settings
from desktop_app.errors import (
    AgentRunCanceledError,
    AgentRunLeasedError,
    ConfigError,
    LeaseLostError,
    McpError,
    RunStateError,
)
from desktop_app.flow.owners import new_owner
from desktop_app.store.protocol import AgentRun
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

T0 = 1000.0
#: the registration of :func:`make_bot`, as a person writes it in the settings
BOT = f"{__name__}:make_bot"
#: each time the registered agent was built (its module loaded and the factory called)
BUILT: list[str] = []
#: each call the agent's approved tool made
DELETED: list[str] = []


def make_bot() -> Any:
    """The registered Pydantic AI agent ``bot``: it asks to ``delete`` x (a
    call that needs approval), then y, then says what it was told."""
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    BUILT.append("bot")

    def model(messages: list[Any], info: Any) -> ModelResponse:
        told = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not told:
            return ModelResponse(parts=[ToolCallPart("delete", {"name": "x"}, tool_call_id="c1")])
        if len(told) == 1:
            return ModelResponse(parts=[ToolCallPart("delete", {"name": "y"}, tool_call_id="c2")])
        return ModelResponse(parts=[TextPart(f"told: {told[0]} / {told[1]}")])

    agent = PydanticAgent(FunctionModel(model), name="bot")

    @agent.tool_plain(requires_approval=True)
    def delete(name: str) -> str:
        """Delete something."""
        DELETED.append(name)
        return f"deleted {name}"

    return agent


@pytest.fixture
def agents(sqlite_store: Any) -> SqliteAgentStore:
    return SqliteAgentStore(sqlite_store)


@pytest.fixture
def registered(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "s.db", pydantic_ai_agents=[BOT])


@pytest.fixture
def bare(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "s.db")


@pytest.fixture
def waiting(agents: SqliteAgentStore) -> AgentRun:
    """Run r1 of ``bot``, waiting for ``delete x`` to be approved (nothing
    built or deleted since)."""
    from desktop_app.integrations.pydantic_ai import FlowdeskAgent

    result = FlowdeskAgent(make_bot(), agents).run_sync("delete x then y", run_id="r1")
    assert result.status == "input_required"
    BUILT.clear()
    DELETED.clear()
    return agents.get("r1")


def _approved_not_resumed(agents: SqliteAgentStore, bare: Settings) -> None:
    """``yes`` recorded where ``bot`` is not registered: r1 is left running, interrupted."""
    with pytest.raises(ConfigError, match="not registered"):
        resume_pydantic_ai(agents, bare, "r1", "yes")
    run = agents.get("r1")
    assert (run.status, run.lease_owner, DELETED) == ("running", None, [])


def _hold(agents: SqliteAgentStore, run_id: str = "r1", owner: str | None = None) -> str:
    from desktop_app.agent.leases import claim_agent_run

    owner = owner or new_owner()
    assert claim_agent_run(agents, agents.get(run_id), owner, 30.0, time.time()) is None
    return owner


# -- a registered Pydantic AI agent's run ---------------------------------------


def test_an_interrupted_run_is_resumed_by_its_registered_agent(agents, waiting, bare, registered):
    _approved_not_resumed(agents, bare)
    res = resume_pydantic_ai(agents, registered, "r1")
    assert (res.status, res.approval.arguments if res.approval else None) == (
        "input_required",
        {"name": "y"},
    )
    assert DELETED == ["x"]  # the approved call, made once
    assert agents.get("r1").lease_owner is None


@pytest.mark.parametrize("owner", [None, "app:1:x"])
def test_an_approval_is_recorded_and_the_registered_agent_makes_the_call(
    agents, waiting, registered, owner
):
    """``owner`` names a lease already held only for a resume without an
    answer: an answer is recorded and acted on under a lease taken here."""
    kw = {} if owner is None else {"owner": owner}
    wait = agent_wait_id(waiting.pending_call)
    res = resume_pydantic_ai(agents, registered, "r1", "yes", wait_id=wait, **kw)
    assert res.status == "input_required" and res.approval is not None
    assert res.approval.arguments == {"name": "y"}
    assert DELETED == ["x"]
    res = resume_pydantic_ai(agents, registered, "r1", "no")
    assert (res.status, res.text) == ("done", f"told: deleted x / {declined_result('delete')}")
    assert DELETED == ["x"]
    assert agents.get("r1").lease_owner is None


def test_a_resume_by_the_process_holding_the_lease_goes_on_under_it(
    agents, waiting, bare, registered
):
    _approved_not_resumed(agents, bare)
    held = _hold(agents)
    res = resume_pydantic_ai(agents, registered, "r1", owner=held)
    assert res.status == "input_required"
    assert DELETED == ["x"]


@pytest.mark.parametrize("answer", [None, "yes"])
def test_a_run_another_live_process_holds_is_refused_before_its_agent_is_built(
    agents, waiting, bare, registered, answer
):
    if answer is None:
        _approved_not_resumed(agents, bare)
    before = agents.get("r1")
    _hold(agents)
    with pytest.raises(AgentRunLeasedError):
        resume_pydantic_ai(agents, registered, "r1", answer)
    assert (BUILT, DELETED) == ([], [])
    now = agents.get("r1")
    assert (now.status, now.pending_call) == (before.status, before.pending_call)
    journaled = agents.tool_result("r1", ApprovalRequest.of("delete", {"name": "x"}, 1).key)
    assert (journaled is None) is (answer is not None)  # only the earlier answer, if any


def test_an_approval_pinned_to_another_wait_records_nothing(agents, waiting, registered):
    with pytest.raises(RunStateError, match="another"):
        resume_pydantic_ai(agents, registered, "r1", "yes", wait_id="approval/other")
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == (
        "input_required",
        waiting.pending_call,
        None,
    )
    assert (BUILT, DELETED) == ([], [])


def _answered_elsewhere(agents: SqliteAgentStore, registered: Settings) -> None:
    """Another process approved ``delete x``: r1 now waits on ``delete y``."""
    resume_pydantic_ai(agents, registered, "r1", "yes")
    assert agents.get("r1").pending_call["arguments"] == {"name": "y"}
    assert DELETED == ["x"]


def test_an_approval_of_a_call_answered_elsewhere_meanwhile_is_refused(agents, waiting, registered):
    """The run was read (the app's inbox row) while it waited on ``delete x``;
    approved elsewhere since, it now waits on ``delete y``: the stale ``yes``
    is refused, not taken for the new call."""
    _answered_elsewhere(agents, registered)
    wait = agent_wait_id(waiting.pending_call)
    with pytest.raises(RunStateError, match="another"):
        resume_with_recorded_tools(agents, registered, None, waiting, "yes", wait_id=wait)
    with pytest.raises(RunStateError, match="another"):
        hand_answer_to_workers(agents, waiting, "yes", owner="app:1:x", now=time.time())
    now = agents.get("r1")
    assert (now.status, now.pending_call["arguments"], now.lease_owner) == (
        "input_required",
        {"name": "y"},
        None,
    )
    assert DELETED == ["x"]


def test_an_approval_handed_to_the_workers_is_written_at_the_time_given(agents, waiting):
    at = waiting.updated_at + 100.0
    hand_answer_to_workers(agents, waiting, "yes", owner="app:1:x", now=at)
    now = agents.get("r1")
    assert (now.status, now.updated_at, now.lease_owner) == ("running", at, None)


def _cancel_first(agents: SqliteAgentStore) -> None:
    """A ``flowdesk cancel`` from another process lands right before the next write."""
    update = agents.update

    def cancel_first(run_id: str, now: float, **kw: Any) -> None:
        update(run_id, now, status="canceled", error="canceled by you")
        update(run_id, now, **kw)

    agents.update = cancel_first  # type: ignore[method-assign]


@pytest.mark.parametrize("via", ["resume", "workers"])
def test_a_cancel_landing_while_an_approval_is_written_wins(agents, waiting, registered, via):
    _cancel_first(agents)
    with pytest.raises(AgentRunCanceledError):
        if via == "resume":
            resume_pydantic_ai(agents, registered, "r1", "yes")
        else:
            hand_answer_to_workers(agents, waiting, "yes", owner="app:1:x", now=time.time())
    now = agents.get("r1")
    assert (now.status, now.error, now.lease_owner) == ("canceled", "canceled by you", None)
    assert (BUILT, DELETED) == ([], [])


def test_an_approval_written_by_an_owner_not_holding_the_run_is_refused(agents, waiting):
    _hold(agents)
    with pytest.raises(LeaseLostError):
        record_approval(agents, "r1", "yes", owner="other-host:1:x")
    assert agents.get("r1").status == "input_required"


def test_an_approval_to_a_canceled_run_is_refused_saying_so(agents, waiting, registered):
    from desktop_app.integrations.pydantic_ai import FlowdeskAgent

    FlowdeskAgent(make_bot(), agents).cancel("r1")
    BUILT.clear()
    with pytest.raises(RunStateError) as err:
        resume_pydantic_ai(agents, registered, "r1", "yes")
    assert str(err.value) == "agent run r1 waits for no answer (status 'canceled')"
    assert (agents.get("r1").status, BUILT, DELETED) == ("canceled", [], [])


# -- record_approval: which call a declined approval answers -------------------------

REQUEST = ApprovalRequest.of("notes__write", {"text": "hi"}, 2)


def _asks_approval(agents: Any, request: ApprovalRequest, turns: list[dict[str, Any]], **kw: Any):
    run = AgentRun(
        run_id="r1",
        agent="helper",
        status="input_required",
        input="go",
        created_at=T0,
        updated_at=T0,
        **kw,
    )
    agents.create(run, [{"role": "user", "content": "go"}])
    call = {"name": request.tool, "arguments": request.arguments, "approval": request.to_json()}
    agents.update("r1", T0, messages=turns, pending_call=call, **kw)
    return _hold(agents)


def _write(call_id: str, name: str = "notes__write") -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": {"text": "hi"}}


@pytest.mark.parametrize(
    ("turns", "told_id"),
    [
        # a text reply before the turn of calls; the second of two calls declined
        (
            [
                {"role": "assistant", "content": "let me think"},
                {"role": "assistant", "content": "", "tool_calls": [_write("c1"), _write("c2")]},
            ],
            "c2",
        ),
        # the call at that place is another tool's: the message names no call
        (
            [{"role": "assistant", "content": "", "tool_calls": [_write("c1"), _write("c2", "x")]}],
            None,
        ),
    ],
)
def test_a_declined_call_among_several_is_told_under_its_own_call_id(agents, turns, told_id):
    owner = _asks_approval(agents, REQUEST, turns, error="an earlier failure")
    record_approval(agents, "r1", "no", owner=owner, now=T0 + 3)
    told = agents.messages("r1")[-1]
    assert (told["role"], told.get("tool_call_id"), told["content"]) == (
        "tool",
        told_id,
        declined_result("notes__write"),
    )
    run = agents.get("r1")
    assert (run.status, run.error, run.pending_call) == ("running", None, None)


def test_an_approval_is_recorded_in_a_memory_store_too():
    from desktop_app.store.memory.agent_runs import InMemoryAgentLog

    agents = InMemoryAgentLog()
    turns = [{"role": "assistant", "content": "", "tool_calls": [_write("c1"), _write("c2")]}]
    owner = _asks_approval(agents, REQUEST, turns)
    record_approval(agents, "r1", "yes", owner=owner, now=T0 + 3)
    assert agents.get("r1").status == "running"
    assert len(agents.messages("r1")) == 2  # no tool message for an approved call
    assert agents.tool_result("r1", REQUEST.key).result == "yes"


# -- resume_with_recorded_tools: a Flowdesk agent's run and its tools -----------------

ASK = {"tool": "ask_user", "args": {"question": "which file?"}}


def _answered_not_resumed(agents: SqliteAgentStore, run_id: str, answer: str) -> None:
    """``answer`` recorded, then the process ended before the run went on."""
    Agent("helper", ScriptedModel([]), agents, owner="app:1:x").record_input(run_id, answer)
    agents.release(run_id, "app:1:x")
    assert agents.get(run_id).status == "running"


def _sources(agents: SqliteAgentStore, run_id: str, **data: Any) -> None:
    data = {"folder": None, "mcp": []} | data
    agents.update(
        run_id, T0, tool=(TOOL_SOURCES_KEY, "tool_sources", "completed", json.dumps(data))
    )


def test_a_run_without_a_model_is_refused_with_the_default_reason(agents, bare):
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    agents.update(rid, T0, status="running", pending_call=None)
    with pytest.raises(ConfigError) as err:
        resume_with_recorded_tools(agents, bare, None, agents.get(rid))
    assert str(err.value) == f"agent run {rid} needs a model: no model is set up"


def test_a_run_limited_until_later_is_refused_and_connects_nothing(agents, bare):
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    until = time.time() + 3600
    agents.update(rid, T0, status="rate_limited", retry_at=until, pending_call=None)
    _sources(agents, rid, folder="/no/such/folder")  # connecting it would raise InputError
    model = ScriptedModel([])
    with pytest.raises(RunStateError, match="is rate limited until"):
        resume_with_recorded_tools(agents, bare, model, agents.get(rid))
    assert model.calls == 0


@pytest.mark.parametrize("answer", [None, "notes.txt"])
def test_a_resumed_run_gets_its_recorded_folder_back(agents, tmp_path, answer, caplog):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("the notes")
    settings = Settings(db_path=tmp_path / "s.db")
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    _sources(agents, rid, folder=str(tmp_path / "d"))
    if answer is None:
        _answered_not_resumed(agents, rid, "notes.txt")
    model = ScriptedModel([{"tool": "read_file", "args": {"path": "notes.txt"}}, "read it"])
    with caplog.at_level(logging.INFO, logger="desktop_app.agent.runtime"):
        res = resume_with_recorded_tools(agents, settings, model, agents.get(rid), answer)
    assert (res.status, res.text) == ("done", "read it")
    told = [m["content"] for m in agents.messages(rid) if m["role"] == "tool"]
    assert told[-1] == "the notes"
    resumed = [r.getMessage() for r in caplog.records if "resumed (status was" in r.getMessage()]
    assert resumed and all(m.startswith(f"agent helper: run {rid} resumed") for m in resumed)


@pytest.mark.parametrize("answer", [None, "blue"])
def test_a_recorded_server_that_cannot_start_is_logged_with_the_run(
    agents, tmp_path, answer, caplog
):
    settings = Settings(
        db_path=tmp_path / "s.db",
        mcp_servers={
            "dead": McpServerSettings(command=[sys.executable, "-c", "pass"], timeout_s=5)
        },
    )
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    _sources(agents, rid, mcp=["dead"])
    if answer is None:
        agents.update(rid, T0, status="running", pending_call=None)
    model = ScriptedModel(["never"])
    with caplog.at_level("WARNING"), pytest.raises(McpError):
        resume_with_recorded_tools(agents, settings, model, agents.get(rid), answer)
    assert any(r.getMessage().startswith(f"agent run {rid}: ") for r in caplog.records)
    assert model.calls == 0
    now = agents.get(rid)
    assert (now.status, now.lease_owner) == ("running", None)  # an answer stays recorded


# -- which runs the recovery pass takes ------------------------------------------------


def _run(agents: SqliteAgentStore, run_id: str, **kw: Any) -> None:
    fields: dict[str, Any] = {"status": "running", "created_at": T0, "updated_at": T0}
    fields.update(kw)
    agents.create(AgentRun(run_id=run_id, agent="helper", input="go", **fields), [])


def test_another_hosts_run_is_interrupted_only_once_its_lease_ran_out(agents):
    now = T0 + 10
    _run(agents, "live", lease_owner="elsewhere:1:a", lease_expires_at=now + 5)
    _run(
        agents, "ran_out", lease_owner="elsewhere:1:b", lease_expires_at=now - 1, created_at=T0 + 1
    )
    assert [r.run_id for r in interrupted_agent_runs(agents, now)] == ["ran_out"]


def test_runs_once_rate_limited_and_since_ended_are_not_interrupted(agents):
    now = T0 + 10
    for status in ("done", "failed", "canceled", "input_required"):
        _run(agents, status, status="rate_limited", retry_at=T0)
        agents.update(status, T0 + 1, status=status)  # resumed since, then ended or waiting
    assert interrupted_agent_runs(agents, now) == []


def test_the_recovery_pass_resumes_a_run_whose_limit_has_passed(agents, bare):
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    _answered_not_resumed(agents, rid, "blue")
    agents.update(rid, T0, status="rate_limited", retry_at=T0)
    ((run, outcome),) = recover_agent_runs(agents, bare, ScriptedModel(["later"]), T0 + 5)
    assert run.run_id == rid
    assert (outcome.status, outcome.text) == ("done", "later")
