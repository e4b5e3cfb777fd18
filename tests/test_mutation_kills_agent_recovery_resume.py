"""Resuming agent runs with the tools they recorded (``agent/recovery.py``):
the recorded tool sources, the tools connected from them, which runs count
as interrupted, the recovery pass, a resume or an answer with the recorded
tools, and a Pydantic AI agent's approval recorded before its agent loads,
exactly, as the mutation run of ``agent/recovery.py`` (issue 29) found them
unpinned. Real SQLite files, Flowdesk's scripted model, no MCP server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel
from desktop_app.agent.approvals import ApprovalRequest, agent_wait_id
from desktop_app.agent.recovery import (
    ToolSources,
    connected_tools,
    goes_on,
    interrupted_agent_runs,
    pydantic_ai_unavailable,
    record_approval,
    recover_agent_runs,
    resume_pydantic_ai,
    resume_with_recorded_tools,
)
from desktop_app.agent.tools import TOOL_SOURCES_KEY
from desktop_app.config import Settings
from desktop_app.errors import ConfigError, InputError, RunStateError
from desktop_app.flow.owners import new_owner
from desktop_app.store.protocol import AgentRun
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests.cli_support import install_hint

T0 = 1000.0
ASK = {"tool": "ask_user", "args": {"question": "which colour?"}}
REQUEST = ApprovalRequest.of("notes__write", {"text": "hi"}, 1)
#: the tool call a Pydantic AI agent's run waits to have approved
APPROVE = {"id": "c1", "name": "notes__write", "arguments": {"text": "hi"}}


@pytest.fixture
def agents(sqlite_store: Any) -> SqliteAgentStore:
    return SqliteAgentStore(sqlite_store)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "s.db")


def _run(agents: SqliteAgentStore, run_id: str = "r1", **kw: Any) -> AgentRun:
    fields: dict[str, Any] = {"status": "running", "created_at": T0, "updated_at": T0}
    fields.update(kw)
    agents.create(
        AgentRun(run_id=run_id, agent="helper", input="go", **fields),
        [{"role": "user", "content": "go"}],
    )
    return agents.get(run_id)


def _sources(agents: SqliteAgentStore, run_id: str = "r1", **data: Any) -> None:
    tool = (TOOL_SOURCES_KEY, "tool_sources", "completed", json.dumps(data))
    agents.update(run_id, T0, tool=tool)


def _asking(agents: SqliteAgentStore) -> AgentRun:
    """A run of Flowdesk's own agent waiting for its question's answer."""
    rid = Agent("helper", ScriptedModel([ASK]), agents).ask("go").run_id
    run = agents.get(rid)
    assert run.status == "input_required"
    return run


def _approval_waiting(agents: SqliteAgentStore, **sources: Any) -> AgentRun:
    """A Pydantic AI agent's run waiting for a call's approval."""
    _run(agents, status="input_required")
    agents.update(
        "r1",
        T0,
        messages=[{"role": "assistant", "content": "", "tool_calls": [APPROVE]}],
        pending_call={**APPROVE, "approval": REQUEST.to_json()},
    )
    _sources(agents, **({"folder": None, "mcp": [], "pydantic_ai": "bot"} | sources))
    return agents.get("r1")


def _hold(agents: SqliteAgentStore) -> str:
    from desktop_app.agent.leases import claim_agent_run

    owner = new_owner()
    claim_agent_run(agents, agents.get("r1"), owner, 30.0, T0 + 1)
    return owner


# -- ToolSources -----------------------------------------------------------------


def test_only_sources_with_no_folder_server_or_pydantic_ai_agent_are_empty():
    assert ToolSources().empty
    assert not ToolSources(folder=Path("/d")).empty
    assert not ToolSources(mcp=("notes",)).empty
    assert not ToolSources(pydantic_ai="bot").empty


def test_sources_are_stored_as_exactly_this_json():
    assert ToolSources().to_json() == '{"folder": null, "mcp": []}'
    assert ToolSources(Path("/d"), ("a", "b")).to_json() == '{"folder": "/d", "mcp": ["a", "b"]}'
    assert ToolSources(pydantic_ai="bot").to_json() == (
        '{"folder": null, "mcp": [], "pydantic_ai": "bot"}'
    )


def test_the_sources_a_run_recorded_are_read_back(agents):
    _run(agents)
    assert ToolSources.of_run(agents, "r1") == ToolSources()
    _sources(agents, folder="/d", mcp=["a", "b"], pydantic_ai="bot")
    assert ToolSources.of_run(agents, "r1") == ToolSources(Path("/d"), ("a", "b"), "bot")
    _sources(agents, mcp=None)
    assert ToolSources.of_run(agents, "r1") == ToolSources()


def test_sources_recorded_with_no_text_read_as_none(agents):
    _run(agents)
    agents.update("r1", T0, tool=(TOOL_SOURCES_KEY, "tool_sources", "completed", None))
    assert ToolSources.of_run(agents, "r1") == ToolSources()


# -- connected_tools -----------------------------------------------------------------


def test_the_file_tools_of_the_recorded_folder_wait_as_the_settings_say(tmp_path):
    settings = Settings(db_path=tmp_path / "s.db", file_tools={"require_approval": ["read_file"]})
    (tmp_path / "a.txt").write_text("hello")
    with connected_tools(settings, ToolSources(folder=tmp_path)) as tools:
        assert {t.name: t.requires_approval for t in tools} == {
            "read_file": True,
            "list_folder": False,
        }
    with connected_tools(settings, ToolSources()) as tools:
        assert tools == []


@pytest.mark.parametrize("gone", ["missing", "a.txt"])
def test_a_recorded_folder_that_is_gone_is_refused_saying_what_to_do(tmp_path, settings, gone):
    (tmp_path / "a.txt").write_text("not a folder")
    folder = tmp_path / gone
    with pytest.raises(InputError) as err, connected_tools(settings, ToolSources(folder=folder)):
        pytest.fail("no tools without their folder")
    assert str(err.value) == (
        f"{folder} is not a folder: the file tools (--tools files --folder) need it; "
        "restore it, or cancel the run with `flowdesk cancel RUN`"
    )


def test_the_recorded_servers_are_opened_named_as_they_start_and_closed_after(tmp_path, caplog):
    import sys

    from desktop_app.config import McpServerSettings
    from tests.test_mcp_tools import REPO, require

    require("mcp")
    command = [sys.executable, str(REPO / "tests" / "mcp_shapes_server.py")]
    settings = Settings(
        db_path=tmp_path / "s.db",
        mcp_servers={"shapes": McpServerSettings(command=command, timeout_s=20)},
    )
    (tmp_path / "d").mkdir()
    started: list[str] = []
    sources = ToolSources(folder=tmp_path / "d", mcp=("shapes",))
    with connected_tools(settings, sources, "r9", on_connect=started.append) as tools:
        names = [t.name for t in tools]
        server = next(t.server for t in tools if t.name.startswith("shapes__"))
        assert server._thread is not None and server._thread.is_alive()
    assert started == ["shapes"]
    assert names[:2] == ["read_file", "list_folder"]
    assert "shapes__two_texts" in names
    assert not server._thread.is_alive()  # closed when the block ended
    # a server that cannot start is logged with the run it was opened for
    dead = Settings(
        db_path=tmp_path / "s.db",
        mcp_servers={
            "dead": McpServerSettings(command=[sys.executable, "-c", "pass"], timeout_s=5)
        },
    )
    from desktop_app.errors import McpError

    with (
        caplog.at_level("WARNING"),
        pytest.raises(McpError),
        connected_tools(dead, ToolSources(mcp=("dead",)), "r9"),
    ):
        pytest.fail("no tools from a server that cannot start")
    assert any(r.getMessage().startswith("agent run r9: ") for r in caplog.records)


# -- goes_on -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retry_at", "expected"),
    [
        ("done", None, False),
        ("input_required", None, False),
        ("canceled", None, False),
        ("timeout", None, False),
        ("expired", None, False),
        ("running", None, True),
        ("failed", None, True),
        ("rate_limited", T0 + 1, False),
        ("rate_limited", T0, True),
        ("rate_limited", None, True),
    ],
)
def test_a_run_goes_on_unless_finished_waiting_or_limited_beyond_now(status, retry_at, expected):
    run = AgentRun(run_id="r1", agent="a", status=status, input="go", created_at=T0, updated_at=T0)
    assert goes_on(replace(run, retry_at=retry_at), T0) is expected


def test_a_run_limited_until_a_moment_after_the_epoch_does_not_go_on_at_the_epoch():
    run = AgentRun(
        run_id="r1", agent="a", status="rate_limited", input="go", created_at=0, updated_at=0
    )
    assert goes_on(replace(run, retry_at=0.5), 0.0) is False
    assert goes_on(replace(run, retry_at=None), -0.5) is False
    assert goes_on(replace(run, retry_at=None), 0.0) is True


# -- interrupted_agent_runs ------------------------------------------------------------


def test_only_abandoned_top_level_runs_and_those_due_again_are_interrupted(agents):
    now = T0 + 10
    _run(agents, "free", created_at=T0)
    _run(agents, "child", parent_run_id="free", created_at=T0 + 1)
    _run(agents, "held", lease_owner=new_owner(), lease_expires_at=now + 100, created_at=T0 + 2)
    _run(agents, "due", status="rate_limited", retry_at=now - 1, created_at=T0 + 3)
    _run(agents, "due_now", status="rate_limited", retry_at=now, created_at=T0 + 4)
    _run(agents, "later", status="rate_limited", retry_at=now + 1, created_at=T0 + 5)
    _run(agents, "no_time", status="rate_limited", created_at=T0 + 6)
    _run(agents, "asks", status="input_required", created_at=T0 + 7)
    _run(agents, "done", status="done", created_at=T0 + 8)
    assert agents.get("held").lease_owner is not None
    got = [r.run_id for r in interrupted_agent_runs(agents, now)]
    assert sorted(got) == ["due", "due_now", "free"]


# -- recover_agent_runs --------------------------------------------------------------


def test_every_interrupted_run_is_resumed_or_reported_and_skipped_ones_left(agents, settings):
    done = Agent("helper", ScriptedModel(["first"]), agents).ask("go")
    agents.update(done.run_id, T0, status="running")  # interrupted before it was marked done
    _run(agents, "gone", created_at=T0 + 1)
    _sources(agents, "gone", folder="/no/such/folder", mcp=[])
    _run(agents, "skipped", created_at=T0 + 2)
    seen: list[tuple[str, Any]] = []
    report = recover_agent_runs(
        agents,
        settings,
        ScriptedModel(["again"]),
        T0 + 5,
        on_result=lambda run, outcome: seen.append((run.run_id, outcome)),
        skip={"skipped"},
    )
    assert sorted((r.run_id, type(o).__name__) for r, o in report) == sorted(
        [(done.run_id, "AgentResponse"), ("gone", "InputError")]
    )
    assert [(rid, o) for rid, o in seen] == [(r.run_id, o) for r, o in report]
    assert agents.get("skipped").status == "running"
    assert agents.get(done.run_id).status == "done"


def test_without_a_model_each_run_is_reported_saying_why_there_is_none(agents, settings):
    _run(agents)
    ((run, outcome),) = recover_agent_runs(agents, settings, None, T0 + 5, no_model="set one")
    assert run.run_id == "r1"
    assert isinstance(outcome, ConfigError)
    assert str(outcome) == "agent run r1 needs a model: set one"
    ((_, outcome),) = recover_agent_runs(agents, settings, None, T0 + 5)
    assert str(outcome) == "agent run r1 needs a model: no model is set up"


# -- resume_with_recorded_tools ------------------------------------------------------


def test_an_answer_is_recorded_then_the_run_goes_on_with_it(agents, settings):
    run = _asking(agents)
    model = ScriptedModel(["blue it is"])
    res = resume_with_recorded_tools(
        agents, settings, model, run, "blue", wait_id=agent_wait_id(run.pending_call)
    )
    assert (res.status, res.text) == ("done", "blue it is")
    assert agents.get(run.run_id).lease_owner is None
    assert {"role": "tool", "content": "Human input: blue"}.items() <= next(
        m for m in agents.messages(run.run_id) if m["role"] == "tool"
    ).items()


def test_an_answer_to_another_question_than_the_run_asks_is_refused(agents, settings):
    run = _asking(agents)
    with pytest.raises(RunStateError, match="it asks another question now"):
        resume_with_recorded_tools(
            agents, settings, ScriptedModel(["x"]), run, "blue", wait_id=REQUEST.key
        )
    assert agents.get(run.run_id).status == "input_required"


def test_an_answer_to_a_run_answered_meanwhile_is_refused_naming_its_status(agents, settings):
    run = _asking(agents)
    agents.update(run.run_id, T0, status="running", pending_call=None)
    with pytest.raises(RunStateError) as err:
        resume_with_recorded_tools(agents, settings, ScriptedModel(["x"]), run, "blue")
    assert str(err.value) == (f"agent run {run.run_id} is not waiting for input (status 'running')")
    run2 = _asking(agents)
    agents.update(run2.run_id, T0, pending_call=None)
    with pytest.raises(RunStateError, match="status 'input_required'"):
        resume_with_recorded_tools(agents, settings, ScriptedModel(["x"]), run2, "blue")


def test_an_answer_whose_question_changed_once_the_lease_is_taken_is_refused(agents, settings):
    run = _asking(agents)
    stale = replace(run, pending_call=run.pending_call)
    agents.update(run.run_id, T0, pending_call={**run.pending_call, "id": "other"})
    wait = agent_wait_id(stale.pending_call)
    if agent_wait_id(agents.get(run.run_id).pending_call) == wait:
        pytest.skip("the wait id does not name the call id")
    with pytest.raises(RunStateError, match="it asks another question now"):
        resume_with_recorded_tools(agents, settings, ScriptedModel(["x"]), stale, "b", wait_id=wait)


def test_a_run_that_does_not_go_on_is_answered_as_it_stands_with_no_tools(agents, settings):
    rid = Agent("helper", ScriptedModel(["first"]), agents).ask("go").run_id
    _sources(agents, rid, folder="/no/such/folder", mcp=[])  # never connected
    res = resume_with_recorded_tools(agents, settings, ScriptedModel([]), agents.get(rid))
    assert (res.status, res.text) == ("done", "first")


def test_a_run_without_a_model_is_refused_saying_why(agents, settings):
    run = _run(agents)
    with pytest.raises(ConfigError) as err:
        resume_with_recorded_tools(agents, settings, None, run, no_model="none here")
    assert str(err.value) == "agent run r1 needs a model: none here"


# -- record_approval and the Pydantic AI agent's resume ------------------------------


@pytest.mark.parametrize("place", [1, 2, 0])
def test_a_declined_call_is_told_to_the_model_under_its_call_id(agents, place):
    from desktop_app.agent.approvals import declined_result

    request = ApprovalRequest.of("notes__write", {"text": "hi"}, place)
    _run(agents, status="input_required")
    agents.update(
        "r1",
        T0,
        messages=[{"role": "assistant", "content": "", "tool_calls": [APPROVE]}],
        pending_call={**APPROVE, "approval": request.to_json()},
    )
    record_approval(agents, "r1", "no", owner=_hold(agents), now=T0 + 3)
    run = agents.get("r1")
    assert (run.status, run.pending_call, run.error, run.updated_at) == (
        "running",
        None,
        None,
        T0 + 3,
    )
    told = agents.messages("r1")[-1]
    assert told["role"] == "tool"
    assert told["content"] == declined_result("notes__write")
    assert told.get("name") == "notes__write"
    assert told.get("tool_call_id") == ("c1" if place == 1 else None)
    assert agents.tool_result("r1", request.key).result == "no"


def test_an_approved_call_is_journaled_with_no_message(agents):
    _approval_waiting(agents)
    record_approval(agents, "r1", "yes", owner=_hold(agents), wait_id=REQUEST.key)
    run = agents.get("r1")
    assert (run.status, run.pending_call) == ("running", None)
    assert run.updated_at > T0 + 1
    assert len(agents.messages("r1")) == 2
    assert agents.tool_result("r1", REQUEST.key).result == "yes"


def test_an_approval_for_a_run_waiting_for_none_is_refused(agents):
    _run(agents)
    with pytest.raises(RunStateError) as err:
        record_approval(agents, "r1", "yes", owner=_hold(agents))
    assert str(err.value) == "agent run r1 waits for no answer (status 'running')"


def test_an_approval_for_another_call_than_the_run_waits_on_is_refused(agents):
    _approval_waiting(agents)
    with pytest.raises(RunStateError, match="another"):
        record_approval(agents, "r1", "yes", owner=_hold(agents), wait_id="other")
    assert agents.get("r1").status == "input_required"
    assert agents.tool_result("r1", REQUEST.key) is None


def test_an_approval_for_an_agent_not_registered_is_recorded_and_the_error_says_so(
    agents, settings
):
    run = _approval_waiting(agents)
    with pytest.raises(ConfigError) as err:
        resume_with_recorded_tools(agents, settings, None, run, "yes", wait_id=REQUEST.key)
    notes = "\n".join(getattr(err.value, "__notes__", []))
    assert notes == (
        "your answer was recorded: the run goes on with it once its agent can be loaded "
        "and started here: run flowdesk resume RUN then (a running `flowdesk agent` where "
        "it is registered does it on its own)"
    )
    now = agents.get("r1")
    assert (now.status, now.pending_call, now.lease_owner) == ("running", None, None)
    assert agents.tool_result("r1", REQUEST.key).result == "yes"


def test_a_resume_of_an_agent_not_registered_records_nothing(agents, settings):
    _approval_waiting(agents)
    agents.update("r1", T0, status="running", pending_call=None)
    with pytest.raises(ConfigError, match="not registered"):
        resume_pydantic_ai(agents, settings, "r1")
    with pytest.raises(ConfigError, match="not registered"):
        resume_pydantic_ai(agents, settings, "r1", owner="app:1:x")
    assert agents.get("r1").lease_owner is None


def test_why_a_pydantic_ai_run_cannot_be_resumed_here(tmp_path, settings):
    assert pydantic_ai_unavailable(settings, ToolSources()) is None
    assert pydantic_ai_unavailable(settings, ToolSources(pydantic_ai="bot")) == (
        "it is a run of the Pydantic AI agent 'bot', which is not registered here: add "
        '"package.module:attribute" of it to pydantic_ai_agents in the settings (or '
        """FLOWDESK_PYDANTIC_AI_AGENTS='["package.module:attribute"]', the module importable)"""
    )
    broken = Settings(db_path=tmp_path / "s.db", pydantic_ai_agents=["no_such_module_x:agent"])
    why = pydantic_ai_unavailable(broken, ToolSources(pydantic_ai="bot"))
    assert why is not None
    assert why.startswith("it is a run of the Pydantic AI agent 'bot', which is not registered")
    assert (
        "the module importable); cannot load the Pydantic AI agent of pydantic_ai_agents entry "
        "'no_such_module_x:agent': ModuleNotFoundError"
    ) in why, why


def test_without_the_pydantic_ai_extra_its_runs_are_refused_saying_what_to_install(
    agents, settings, monkeypatch
):
    import sys

    monkeypatch.setitem(sys.modules, "desktop_app.integrations.pydantic_ai.registry", None)
    _approval_waiting(agents)
    with pytest.raises(ConfigError) as err:
        resume_pydantic_ai(agents, settings, "r1", "yes")
    assert str(err.value) == (
        "agent run r1 was started by a Pydantic AI agent; install Flowdesk with its extra "
        f"({install_hint('pydantic-ai')}) to resume it"
    )
    assert agents.get("r1").status == "input_required"  # nothing recorded
    assert pydantic_ai_unavailable(settings, ToolSources(pydantic_ai="bot")) == (
        "it is a run of the Pydantic AI agent 'bot'; install Flowdesk with its extra "
        f"({install_hint('pydantic-ai')})"
    )
