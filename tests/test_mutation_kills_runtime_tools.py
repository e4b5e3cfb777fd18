"""What the agent runtime promises about the tools a run is resumed with and
who resumes it, where the other kill files did not look: the sources row a
run records when it starts (``flowdesk show`` lists it under ``recorded:``),
a resume with the very sources and servers it recorded (it goes on), a
resume that adds own tools to a run whose sources name no folder, or that
points the same tools at another folder (refused, nothing changed), a run
started by Python code resumed by the CLI's sources (it goes on), a second
identical call of a tool that needs approval (answered from the journal, no
second question), and the log lines an operator reads in ``flowdesk.log``
to see which process took a run over."""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
from collections.abc import Collection
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.agent.tools import Tool
from desktop_app.errors import AgentToolsChangedError, RateLimitedError
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests import cli_forkserver

THIEF = "otherhost:1:thief"


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


def limited() -> list[Any]:
    """A script whose first model call is rate limited: the run stops, resumable."""
    return [RateLimitedError("429", retry_after_s=0.0)]


@tool
def other(x: str) -> str:
    """Another tool."""
    return x


class ListedServer:
    """A tool source with a tool list (what an MCP server is to the runtime)."""

    def __init__(self, name: str, tools: list[str]) -> None:
        self.name = name
        self.tools = tools
        self.listing_key = f"mcp/tools_list:{name}"
        self.listing_tool = f"mcp {name}"

    def listing(self) -> str:
        return json.dumps(self.tools)

    def check_listing(self, recorded: str, used: Collection[str]) -> str | None:
        return None if json.loads(recorded) == self.tools else f"{self.name} changed its tools"

    def tool(self, name: str) -> Tool:
        def call(x: str = "") -> str:
            """A server tool."""
            return name

        t = Tool(call, name=name)
        t.server = self  # type: ignore[attr-defined]
        return t


def sources(folder: str | None = None, mcp: tuple[str, ...] = ()) -> str:
    return json.dumps({"folder": folder, "mcp": list(mcp)})


# -- the sources a run records, and a resume with them ------------------------------


def test_a_run_resumed_with_the_mcp_servers_and_sources_it_recorded_goes_on(astore):
    notes = ListedServer("notes", ["n1"])
    recorded = sources(mcp=("notes",))
    starter = Agent(
        "helper", ScriptedModel(limited()), astore, [notes.tool("n1")], tool_sources=recorded
    )
    rid = starter.ask("q").run_id
    row = astore.tool_result(rid, "agent/tool_sources")
    # what `flowdesk show` lists under "recorded:", beside the server's tool list
    assert (row.tool, row.status, row.result) == ("tool_sources", "completed", recorded)
    assert sorted(r.tool for r in astore.tool_results(rid)) == ["mcp notes", "tool_sources"]
    again = Agent("helper", ScriptedModel(["x"]), astore, [notes.tool("n1")], tool_sources=recorded)
    res = again.resume(rid)
    assert (res.status, res.text) == ("done", "x")


def test_a_run_whose_recorded_server_is_not_given_is_refused(astore):
    notes = ListedServer("notes", ["n1"])
    recorded = sources(mcp=("notes",))
    starter = Agent(
        "helper", ScriptedModel(limited()), astore, [notes.tool("n1")], tool_sources=recorded
    )
    rid = starter.ask("q").run_id
    before = astore.get(rid)
    model = ScriptedModel(["never"])
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", model, astore, tool_sources=sources()).resume(rid)
    assert str(err.value) == (
        f"agent run {rid} was started with the tools of MCP server notes (recorded when it "
        "started) but is resumed with none; nothing was changed and it can still be resumed "
        f"with the same tools (flowdesk resume {rid} reconnects them)"
    )
    assert astore.get(rid) == before and model.calls == 0


def test_own_tools_given_to_a_run_whose_sources_name_no_folder_are_refused(astore):
    starter = Agent("helper", ScriptedModel(limited()), astore, tool_sources=sources())
    rid = starter.ask("q").run_id
    before = astore.get(rid)
    model = ScriptedModel(["never"])
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", model, astore, [other]).resume(rid)
    assert str(err.value) == (
        f"agent run {rid} was started with no tools (recorded when it started) but is resumed "
        "with the tools other; nothing was changed and it can still be resumed with the same "
        f"tools (flowdesk resume {rid} reconnects them)"
    )
    assert astore.get(rid) == before and model.calls == 0


def test_a_run_over_a_folder_resumed_with_the_tool_names_it_recorded_goes_on(astore, tmp_path):
    # `other` stands for the file tools the folder gives: their names are
    # recorded on the first drive, and the same names are what it takes
    recorded = sources(folder=str(tmp_path))
    starter = Agent("helper", ScriptedModel(limited()), astore, [other], tool_sources=recorded)
    rid = starter.ask("q").run_id
    assert astore.tool_result(rid, "agent/toolset").result == '["other"]'
    res = Agent("helper", ScriptedModel(["x"]), astore, [other], tool_sources=recorded).resume(rid)
    assert (res.status, res.text) == ("done", "x")


def test_the_same_tools_over_another_folder_are_refused(astore, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    recorded = sources(folder=str(first))
    starter = Agent("helper", ScriptedModel(limited()), astore, [other], tool_sources=recorded)
    rid = starter.ask("q").run_id
    before = astore.get(rid)
    model = ScriptedModel(["never"])
    elsewhere = sources(folder=str(second))
    with pytest.raises(AgentToolsChangedError) as err:
        Agent("helper", model, astore, [other], tool_sources=elsewhere).resume(rid)
    assert str(err.value) == (
        f"agent run {rid} was started with the file tools over {first} (recorded when it "
        "started) but is resumed with the tools other; nothing was changed and it can still "
        f"be resumed with the same tools (flowdesk resume {rid} reconnects them)"
    )
    assert astore.get(rid) == before and model.calls == 0


def test_a_run_started_by_python_code_may_be_resumed_with_sources_and_its_tools(astore):
    rid = Agent("helper", ScriptedModel(limited()), astore, [other]).ask("q").run_id
    assert astore.tool_result(rid, "agent/tool_sources") is None  # none recorded
    agent = Agent("helper", ScriptedModel(["x"]), astore, [other], tool_sources=sources())
    res = agent.resume(rid)
    assert (res.status, res.text) == ("done", "x")


# -- a second identical call of a tool that needs approval --------------------------


def test_an_identical_call_after_an_approved_one_is_answered_from_the_journal(astore):
    ran: list[str] = []

    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        ran.append(to)
        return f"sent to {to}"

    model = ScriptedModel(
        [
            {"tool": "send", "args": {"to": "bob"}, "id": "s1"},
            {"tool": "send", "args": {"to": "bob"}, "id": "s2"},
            "ok",
        ]
    )
    agent = Agent("helper", model, astore, [send])
    assert agent.ask("q", run_id="twice").status == "input_required"
    events = list(agent.resume_input_stream("twice", "yes"))
    res = events[-1].response
    assert res is not None and (res.status, res.text, res.question) == ("done", "ok", None)
    assert [(e.tool, e.reused) for e in events if e.kind == "tool_end"] == [
        ("send", False),
        ("send", True),
    ]
    assert ran == ["bob"]  # sent once; the second call was not asked about again


# -- who took a run over: the operator's log lines -----------------------------------


def test_a_takeover_and_a_resume_are_logged_naming_both_owners(astore, caplog):
    clock = ManualClock()
    model = ScriptedModel([RateLimitedError("429", retry_after_s=0.0), "a", "b", "c"])
    agent = Agent("helper", model, astore, clock=clock, lease_ttl_s=30.0)
    rid = agent.ask("q", run_id="r1").run_id
    dead = cli_forkserver.popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = f"{socket.gethostname()}:{dead.pid}:x"
    astore.claim(rid, gone, clock.now() + 1000, 0.0)
    astore.update(rid, clock.now(), status="failed")
    caplog.clear()  # the ask's own lines, let through where logging was configured before
    with caplog.at_level(logging.INFO, logger="desktop_app"):
        assert agent.resume(rid).text == "a"
    assert caplog.messages[:2] == [
        f"agent helper: run r1: {agent.owner} takes it over from {gone} (owner gone)",
        "agent helper: run r1 resumed (status was failed)",
    ]
    astore.update(rid, clock.now(), status="failed", messages=[{"role": "user", "content": "more"}])
    astore.claim(rid, THIEF, clock.now() + 5, math.inf, takes_over=astore.get(rid).lease_owner)
    clock.advance(5.0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="desktop_app"):
        assert agent.resume(rid).text == "b"
    assert caplog.messages[:2] == [
        f"agent helper: run r1: {agent.owner} takes it over from {THIEF} (lease expired)",
        "agent helper: run r1 resumed (status was failed)",
    ]
    caplog.clear()
    astore.update(rid, clock.now(), status="failed", messages=[{"role": "user", "content": "c"}])
    with caplog.at_level(logging.INFO, logger="desktop_app.agent.runtime"):
        assert agent.resume(rid).text == "c"  # a free run: resumed, nobody taken over
    assert not [m for m in caplog.messages if "taken over" in m]
    assert "agent helper: run r1 resumed (status was failed)" in caplog.messages
