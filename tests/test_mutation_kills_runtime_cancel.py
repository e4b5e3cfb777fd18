"""What a user's cancel, pause and pinned answer promise about an agent run,
where the runtime's earlier kill files did not look: the cancel and the
pause are a compare-and-set on the status read (a run its executing process
ended meanwhile keeps its end and the user hears "already done"; a run that
went on to another live status meanwhile is decided again), a cancel seen
between two tool calls of one reply or right after a tool whose call was
never sent, and an answer pinned to the question the person read
(``wait_id``, streamed or not) refused once the run waits on another one,
also when that happens between the first read and the lease.

Another process is played by a second ``Agent`` or store write on the same
SQLite file, at the moment a store subclass or the stream's consumer picks.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.agent.approvals import ApprovalRequest, agent_wait_id, declined_result
from desktop_app.agent.tools import Tool
from desktop_app.errors import (
    AgentRunLeasedError,
    CheckpointNotFoundError,
    McpError,
    McpOutcomeUnknownError,
    RateLimitedError,
    RunStateError,
    iso_utc,
)
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore

STOPPED = "canceled by user; this process stopped before its next model or tool call"


@pytest.fixture
def astore(sqlite_store):
    return SqliteAgentStore(sqlite_store)


class ChangedAfterRead(SqliteAgentStore):
    """Once ``then`` is set, the next read of the run returns it as read and
    another process's write (``then``'s fields) commits right after."""

    then: dict[str, Any] | None = None

    def get(self, run_id: str) -> Any:
        run = super().get(run_id)
        if self.then is not None:
            fields, self.then = self.then, None
            SqliteAgentStore.update(self, run_id, 0.0, **fields)
        return run


def failed_run(agent: Agent) -> str:
    """A run left ``failed`` (not terminal, nobody executes it)."""
    rid = agent.ask("q").run_id
    agent.store.update(rid, 0.0, status="failed")
    return rid


# -- cancel and pause: a compare-and-set on the status read ----------------------------


@pytest.mark.parametrize("act", ["cancel", "pause"])
def test_a_cancel_or_pause_racing_the_runs_end_leaves_it_done_and_says_so(sqlite_store, act):
    store = ChangedAfterRead(sqlite_store)
    agent = Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), store)
    rid = failed_run(agent)
    # the executing process saves its answer between the user's read and write
    store.then = {"status": "done", "response": "the answer"}
    with pytest.raises(RunStateError) as err:
        getattr(agent, act)(rid)
    assert str(err.value) == f"agent run {rid} is already done"
    run = store.get(rid)
    assert (run.status, run.response) == ("done", "the answer")


@pytest.mark.parametrize(
    ("act", "status", "error"),
    [("cancel", "canceled", "canceled by user"), ("pause", "paused", None)],
)
def test_a_cancel_or_pause_after_another_live_status_change_is_decided_again(
    sqlite_store, act, status, error
):
    store = ChangedAfterRead(sqlite_store)
    agent = Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), store)
    rid = failed_run(agent)
    store.then = {"status": "running"}  # a resume started between the read and the write
    getattr(agent, act)(rid)
    run = store.get(rid)
    assert (run.status, run.error) == (status, error)


def test_pause_refuses_a_finished_run_and_a_missing_one(astore):
    agent = Agent("helper", ScriptedModel(["the answer"]), astore)
    rid = agent.ask("q").run_id
    with pytest.raises(RunStateError) as err:
        agent.pause(rid)
    assert str(err.value) == f"agent run {rid} is already done"
    assert (astore.get(rid).status, astore.get(rid).response) == ("done", "the answer")
    for act in (agent.pause, agent.cancel):
        with pytest.raises(CheckpointNotFoundError):
            act("no-such-run")


def test_a_paused_run_can_still_be_canceled(astore):
    agent = Agent("helper", ScriptedModel([RateLimitedError("429", retry_after_s=0.0)]), astore)
    rid = failed_run(agent)
    agent.pause(rid)
    agent.cancel(rid)
    assert (astore.get(rid).status, astore.get(rid).error) == ("canceled", "canceled by user")


# -- a cancel seen by the executing process ----------------------------------------------


def test_a_cancel_between_two_calls_of_one_reply_runs_neither_the_second_nor_a_model(astore):
    ran: list[str] = []

    @tool
    def act(x: str) -> str:
        """Act."""
        ran.append(x)
        return f"acted {x}"

    model = ScriptedModel(
        [[{"tool": "act", "args": {"x": "1"}}, {"tool": "act", "args": {"x": "2"}}], "never"]
    )
    agent = Agent("helper", model, astore, [act])
    events = []
    for event in agent.stream("q", run_id="b1"):
        events.append((event.kind, event.tool))
        if event.kind == "tool_end":  # the first call's result is saved: the user cancels
            Agent("helper", ScriptedModel([]), astore).cancel("b1")
    last = event.response
    assert last is not None and (last.status, last.error) == ("canceled", STOPPED)
    assert ran == ["1"] and model.calls == 1
    assert [k for k, _ in events].count("tool_start") == 1
    assert astore.tool_result("b1", 'act:{"x":"2"}') is None
    assert [m["role"] for m in astore.messages("b1")] == ["user", "assistant", "tool"]
    assert astore.get("b1").status == "canceled"


def test_a_cancel_after_the_last_tool_result_makes_no_model_call(astore, caplog):
    @tool
    def act(x: str) -> str:
        """Act."""
        return f"acted {x}"

    model = ScriptedModel([{"tool": "act", "args": {"x": "1"}}, "never"])
    agent = Agent("helper", model, astore, [act])
    with caplog.at_level(logging.INFO, logger="desktop_app.agent.runtime"):
        for event in agent.stream("q", run_id="b2"):
            if event.kind == "tool_end":
                Agent("helper", ScriptedModel([]), astore).cancel("b2")
    assert "agent helper: run b2 canceled while executing here" in caplog.messages
    assert event.response is not None
    assert (event.response.status, event.response.error) == ("canceled", STOPPED)
    assert model.calls == 1  # the model is not asked again after the cancel
    assert [m["role"] for m in astore.messages("b2")] == ["user", "assistant", "tool"]


def test_a_cancel_before_an_unknown_tools_answer_is_saved_says_nothing_was_in_flight(astore):
    model = ScriptedModel([{"tool": "nosuch", "args": {}}, "never"])
    agent = Agent("helper", model, astore)
    for event in agent.stream("q", run_id="b3"):
        if event.kind == "tool_start":  # nothing is sent for an unknown tool
            Agent("helper", ScriptedModel([]), astore).cancel("b3")
    assert event.response is not None
    assert (event.response.status, event.response.error) == ("canceled", STOPPED)
    assert [m["role"] for m in astore.messages("b3")] == ["user", "assistant"]
    assert astore.tool_result("b3", "nosuch:{}") is None  # nothing recorded after the cancel
    assert model.calls == 1


def test_a_call_in_flight_when_the_cancel_lands_is_answered_in_the_conversation(astore, caplog):
    @tool
    def act(x: str) -> str:
        """Act."""
        Agent("helper", ScriptedModel([]), astore).cancel("b4")  # lands mid-call
        return f"acted {x}"

    model = ScriptedModel([{"tool": "act", "args": {"x": "1"}, "id": "k1"}, "never"])
    with caplog.at_level(logging.WARNING, logger="desktop_app.agent.runtime"):
        res = Agent("helper", model, astore, [act]).ask("q", run_id="b4")
    assert caplog.messages == [
        "agent run b4: canceled while the call to act was in flight; it ran, nothing after it runs"
    ]
    assert res.status == "canceled" and "in flight" in (res.error or "")
    tool_msgs = [m for m in astore.messages("b4") if m["role"] == "tool"]
    assert [(m["content"], m["tool_call_id"], m["name"]) for m in tool_msgs] == [
        ("acted 1", "k1", "act")
    ]
    stored = astore.tool_result("b4", 'act:{"x":"1"}')
    assert stored is not None and (stored.status, stored.result) == ("completed", "acted 1")


# -- an answer pinned to the question the person read -----------------------------------


def asking_run(astore: Any, rid: str) -> tuple[Agent, str]:
    model = ScriptedModel(
        [
            {"tool": "ask_user", "args": {"question": "Which colour?"}, "id": "q1"},
            {"tool": "ask_user", "args": {"question": "Which size?"}, "id": "q2"},
            "done with it",
        ]
    )
    agent = Agent("helper", model, astore)
    res = agent.ask("q", run_id=rid)
    assert res.status == "input_required"
    wait_id = agent_wait_id(astore.get(rid).pending_call)
    assert wait_id == "ask/1:q1"  # the question's place among the run's calls, its call id
    return agent, wait_id


@pytest.mark.parametrize("streamed", [False, True])
def test_a_stale_pinned_answer_is_refused_streamed_or_not(astore, streamed):
    agent, first = asking_run(astore, "w1")
    assert agent.resume_input("w1", "red", wait_id=first).status == "input_required"
    assert agent_wait_id(astore.get("w1").pending_call) == "ask/2:q2"
    with pytest.raises(RunStateError) as err:  # a screen read before that answer
        if streamed:
            list(agent.resume_input_stream("w1", "blue", wait_id=first))
        else:
            agent.resume_input("w1", "blue", wait_id=first)
    assert str(err.value) == (
        "agent run w1 does not wait on 'ask/1:q1': it asks another question now "
        "('ask/2:q2'); the one you answered was answered elsewhere, or the id is "
        "mistyped; nothing was answered"
    )
    run = astore.get("w1")
    assert (run.status, agent_wait_id(run.pending_call), run.lease_owner) == (
        "input_required",
        "ask/2:q2",
        None,
    )
    events = list(agent.resume_input_stream("w1", "large", wait_id="ask/2:q2"))
    assert events[-1].response is not None
    assert (events[-1].response.status, events[-1].response.text) == ("done", "done with it")
    # streamed: the answer arrives as text deltas
    assert "".join(e.text or "" for e in events if e.kind == "delta") == "done with it"
    answers = [m["content"] for m in astore.messages("w1") if m["role"] == "tool"]
    assert answers == ["Human input: red", "Human input: large"]


class AnsweredWhileClaiming(SqliteAgentStore):
    """Another process answers the run's question (and the run asks the next
    one) between this process's first read and its taking the lease."""

    before_claim: dict[str, Any] | None = None

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        if self.before_claim is not None:
            fields, self.before_claim = self.before_claim, None
            SqliteAgentStore.update(self, args[0], 0.0, **fields)
        return super().claim(*args, **kwargs)


def test_a_pinned_answer_answered_elsewhere_before_the_lease_is_refused_and_released(
    sqlite_store,
):
    store = AnsweredWhileClaiming(sqlite_store)
    agent, first = asking_run(store, "w2")
    nxt = {"id": "q2", "name": "ask_user", "arguments": {"question": "Which size?"}}
    store.before_claim = {"pending_call": nxt}
    with pytest.raises(RunStateError) as err:
        agent.resume_input("w2", "blue", wait_id=first)
    assert str(err.value) == (
        "agent run w2 does not wait on 'ask/1:q1': it asks another question now "
        "('ask/q2'); the one you answered was answered elsewhere, or the id is "
        "mistyped; nothing was answered"
    )
    run = store.get("w2")
    assert (run.status, run.lease_owner) == ("input_required", None)  # the lease is let go
    assert agent_wait_id(run.pending_call) == "ask/q2"
    assert [m["role"] for m in store.messages("w2")] == ["user", "assistant"]
    # another process answers what it waits on now at once (the lease is free)
    other = Agent("helper", ScriptedModel(["fine"]), store)
    other.resume_input("w2", "large", wait_id="ask/q2")
    answers = [m["content"] for m in store.messages("w2") if m["role"] == "tool"]
    assert answers == ["Human input: large"]


# -- a call that waits for a person's approval ------------------------------------------


class Crash(BaseException):
    """The process dies (not an Exception: nothing may catch it)."""


def approval_tool(ran: list[str], crash: bool = False) -> Any:
    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        ran.append(to)
        if crash:
            raise Crash(to)
        return f"sent to {to}"

    return send


def tool_answers(model: ScriptedModel, call: int) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.content) for m in model.seen[call] if m.role == "tool"]


@pytest.mark.parametrize(
    ("answer", "ran_then", "said"),
    [
        ("yes", ["bob"], "sent to bob"),
        ("no", [], declined_result("send")),
    ],
)
def test_an_approved_call_runs_once_and_a_declined_one_is_told_to_the_model(
    astore, answer, ran_then, said
):
    ran: list[str] = []
    model = ScriptedModel([{"tool": "send", "args": {"to": "bob"}, "id": "s1"}, "ok"])
    agent = Agent("helper", model, astore, [approval_tool(ran)])
    asked = agent.ask("q", run_id="a1")
    assert asked.status == "input_required" and ran == []
    request = ApprovalRequest.of("send", {"to": "bob"}, 1)
    assert (asked.question, asked.approval) == (request.question(), request)
    assert asked.question == 'approve the call send {"to":"bob"}? (yes/no)'
    waiting = astore.get("a1")
    assert waiting.pending_call == {
        "id": "s1",
        "name": "send",
        "arguments": {"to": "bob"},
        "approval": request.to_json(),
    }
    assert waiting.lease_owner is None and model.calls == 1
    events = list(agent.resume_input_stream("a1", answer))
    assert events[-1].response is not None and events[-1].response.text == "ok"
    assert [(e.tool, e.reused) for e in events if e.kind == "tool_end"] == [("send", False)]
    assert ran == ran_then
    assert tool_answers(model, 1) == [("s1", said)]
    stored = [m for m in astore.messages("a1") if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in stored] == [("s1", "send", said)]


def test_a_cancel_before_a_declined_calls_answer_is_saved_writes_nothing_more(astore):
    ran: list[str] = []
    model = ScriptedModel([{"tool": "send", "args": {"to": "bob"}, "id": "s1"}, "never"])
    agent = Agent("helper", model, astore, [approval_tool(ran)])
    assert agent.ask("q", run_id="a3").status == "input_required"
    for event in agent.resume_input_stream("a3", "no"):
        if event.kind == "tool_start":  # the user cancels before the refusal is saved
            Agent("helper", ScriptedModel([]), astore).cancel("a3")
    assert event.response is not None
    assert (event.response.status, event.response.error) == ("canceled", STOPPED)
    assert ran == [] and model.calls == 1
    assert [m["role"] for m in astore.messages("a3")] == ["user", "assistant"]


def test_an_approved_call_cut_off_by_a_crash_is_not_sent_again(astore):
    ran: list[str] = []
    model = ScriptedModel([{"tool": "send", "args": {"to": "bob"}, "id": "s1"}])
    agent = Agent("helper", model, astore, [approval_tool(ran, crash=True)])
    assert agent.ask("q", run_id="a2").status == "input_required"
    with pytest.raises(Crash):
        agent.resume_input("a2", "yes")
    assert ran == ["bob"]
    after = ScriptedModel(["ok"])
    res = Agent("helper", after, astore, [approval_tool(ran)]).resume("a2")
    assert (res.status, res.text, ran) == ("done", "ok", ["bob"])  # sent once, never again
    ((call_id, content),) = tool_answers(after, 0)
    assert call_id == "s1" and json.loads(content) == {
        "error": "the call to send was interrupted before its result was saved; it was not "
        "repeated, so whether it took effect is unknown",
        "outcome": "unknown",
    }


# -- ask_user ---------------------------------------------------------------------------


def test_an_ask_user_call_without_a_question_is_told_to_the_model_and_nothing_pauses(astore):
    model = ScriptedModel(
        [{"tool": "ask_user", "args": {"what": "colour"}, "id": "u1"}, "no question then"]
    )
    res = Agent("helper", model, astore).ask("q", run_id="u")
    assert (res.status, res.text, res.question) == ("done", "no question then", None)
    ((call_id, content),) = tool_answers(model, 1)
    assert call_id == "u1" and json.loads(content) == {
        "error": "invalid arguments: question: Field required; call ask_user with "
        '{"question": "<what to ask the user>"}'
    }


def test_an_agent_without_ask_user_answers_the_call_as_an_unknown_tool(astore):
    model = ScriptedModel([{"tool": "ask_user", "args": {"question": "Which?"}}, "fine"])
    res = Agent("helper", model, astore, ask_user=False).ask("q")
    assert (res.status, res.text) == ("done", "fine")
    ((_, content),) = tool_answers(model, 1)
    assert json.loads(content) == {"error": "unknown tool 'ask_user'"}


# -- an MCP call sent without an answer --------------------------------------------------


def silent_server_tool(at_most_once: bool, sent: list[str]) -> Tool:
    def note(text: str) -> str:
        """Write a note."""
        sent.append(text)
        raise McpOutcomeUnknownError("MCP server notes did not answer within 5 s")

    out = Tool(note)
    out.at_most_once = at_most_once
    return out


def test_a_call_sent_to_a_silent_server_is_outcome_unknown_and_never_sent_again(astore, caplog):
    sent: list[str] = []
    model = ScriptedModel([{"tool": "note", "args": {"text": "hi"}, "id": "n1"}, "ok"])
    with caplog.at_level(logging.WARNING, logger="desktop_app.agent.runtime"):
        res = Agent("helper", model, astore, [silent_server_tool(True, sent)]).ask("q")
    assert (res.status, sent) == ("done", ["hi"])
    ((call_id, content),) = tool_answers(model, 1)
    assert call_id == "n1" and json.loads(content) == {
        "error": "MCP server notes did not answer within 5 s; the call was sent and may have "
        "taken effect; it is not repeated, so whether it took effect is unknown",
        "outcome": "unknown",
    }
    stored = astore.tool_result(res.run_id, 'note:{"text":"hi"}')
    assert stored is not None and (stored.status, stored.result) == ("completed", content)
    assert f"agent run {res.run_id}: MCP server notes did not answer within 5 s" in caplog.messages


def test_a_silent_server_for_a_repeatable_call_is_an_error_the_model_reads(astore, caplog):
    sent: list[str] = []
    model = ScriptedModel([{"tool": "note", "args": {"text": "hi"}}, "ok"])
    with caplog.at_level(logging.WARNING, logger="desktop_app.agent.runtime"):
        res = Agent("helper", model, astore, [silent_server_tool(False, sent)]).ask("q")
    assert res.status == "done"
    ((_, content),) = tool_answers(model, 1)
    assert json.loads(content) == {
        "error": "McpOutcomeUnknownError: MCP server notes did not answer within 5 s"
    }
    assert f"agent run {res.run_id}: MCP server notes did not answer within 5 s" in caplog.messages


def test_an_mcp_error_is_logged_and_an_ordinary_tool_error_is_not(astore, caplog):
    def broken(x: str) -> str:
        """Fail."""
        raise McpError(f"MCP server notes is gone ({x})")

    def buggy(x: str) -> str:
        """Fail differently."""
        raise ValueError(f"secret {x}")

    turn = [{"tool": "broken", "args": {"x": "a"}}, {"tool": "buggy", "args": {"x": "b"}}]
    model = ScriptedModel([turn, "ok"])
    with caplog.at_level(logging.WARNING, logger="desktop_app.agent.runtime"):
        res = Agent("helper", model, astore, [Tool(broken), Tool(buggy)]).ask("q")
    assert [json.loads(c) for _, c in tool_answers(model, 1)] == [
        {"error": "McpError: MCP server notes is gone (a)"},
        {"error": "ValueError: secret b"},
    ]
    assert caplog.messages == [f"agent run {res.run_id}: MCP server notes is gone (a)"]


# -- an answer arriving after another process took the question -------------------------

REMOTE = "otherhost:1:other"
YEAR_2100 = 4102444800.0


def test_an_answer_to_a_run_another_live_process_carries_on_says_who_holds_it(astore):
    agent, _ = asking_run(astore, "h1")
    astore.update("h1", 0.0, status="running", pending_call=None)  # answered elsewhere
    astore.claim("h1", REMOTE, YEAR_2100, 0.0)  # and carried on there
    with pytest.raises(AgentRunLeasedError) as err:
        agent.resume_input("h1", "blue")
    assert (err.value.run_id, err.value.owner, err.value.expires_at) == ("h1", REMOTE, YEAR_2100)
    assert str(err.value) == (
        f"agent run h1 is held by a live process: it is being executed by {REMOTE}. Nothing "
        "was run here. Wait for it; if that machine or process is gone, the run can be resumed "
        f"when its lease runs out, at {iso_utc(YEAR_2100)}."
    )
    run = astore.get("h1")
    assert (run.status, run.lease_owner, run.lease_expires_at) == ("running", REMOTE, YEAR_2100)
    assert [m["role"] for m in astore.messages("h1")] == ["user", "assistant"]


@pytest.mark.parametrize("holder", ["expired", "mine", "none"])
def test_an_answer_to_a_run_nobody_else_carries_on_is_not_waiting(astore, holder):
    rid = f"h-{holder}"
    agent, _ = asking_run(astore, rid)
    owner = {"expired": REMOTE, "mine": agent.owner, "none": None}[holder]
    astore.update(rid, 0.0, status="running", pending_call=None)
    if owner is not None:
        astore.claim(rid, owner, 1.0 if holder == "expired" else YEAR_2100, 0.0)
    with pytest.raises(RunStateError) as err:
        agent.resume_input(rid, "blue")
    assert str(err.value) == f"agent run {rid} is not waiting for input (status 'running')"
    assert astore.get(rid).lease_owner == owner
