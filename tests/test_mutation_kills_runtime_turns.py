"""What an agent run's drive promises turn by turn, where the runtime's
earlier kill files did not look: a cancel that lands between the executing
process's last check and its write (the store refuses the write; the run
keeps the user's reason and nothing of the turn is saved), and the
``invoke_agent`` span a run leaves (its attributes, and its status when the
run is canceled or waits for a person).

Another process is played by a store write on the same SQLite file at the
moment a store subclass picks; spans are read in a subprocess, which owns
the process-wide OpenTelemetry tracer provider.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.errors import InputRequiredError, ProviderUnavailableError, RateLimitedError
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests.test_mutation_kills_runtime import ListedServer, script_json

STOPPED = "canceled by user; this process stopped before its next model or tool call"


class CanceledBeforeSave(SqliteAgentStore):
    """Another process cancels the run right before this process's next
    write of a message with ``role`` (a model reply, a tool's answer), after
    its last check that the run is live."""

    armed = True
    role = "assistant"
    status: str | None = None  # or: before this status is written

    def update(self, run_id: str, now: float, **fields: Any) -> None:
        saves = any(m.get("role") == self.role for m in fields.get("messages") or ())
        if self.status is not None:
            saves = fields.get("status") == self.status
        if self.armed and saves:
            self.armed = False
            SqliteAgentStore.update(self, run_id, now, status="canceled", error="canceled by user")
        super().update(run_id, now, **fields)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_cancel_between_the_check_and_the_replys_save_drops_the_reply(sqlite_store, streamed):
    store = CanceledBeforeSave(sqlite_store)
    model = ScriptedModel(["the answer", "never"])
    agent = Agent("helper", model, store)
    if streamed:
        events = list(agent.stream("q", run_id="c1"))
        res = events[-1].response
        assert [e.kind for e in events].count("done") == 1
    else:
        res = agent.ask("q", run_id="c1")
    assert res is not None
    assert (res.run_id, res.status, res.error, res.text) == ("c1", "canceled", STOPPED, None)
    run = store.get("c1")
    assert (run.status, run.error, run.response, run.turns) == (
        "canceled",
        "canceled by user",
        None,
        0,
    )
    assert [m["role"] for m in store.messages("c1")] == ["user"]  # the reply is not saved
    assert model.calls == 1


def test_a_malformed_ask_user_call_is_answered_as_ask_user_unless_the_run_was_canceled(
    sqlite_store,
):
    reply = [{"tool": "ask_user", "args": {"what": "colour"}, "id": "u1"}]
    store = SqliteAgentStore(sqlite_store)
    res = Agent("helper", ScriptedModel([reply, "fine"]), store).ask("q", run_id="u1")
    assert (res.status, res.text) == ("done", "fine")
    (answer,) = [m for m in store.messages("u1") if m["role"] == "tool"]
    assert (answer["tool_call_id"], answer["name"]) == ("u1", "ask_user")
    assert json.loads(answer["content"])["error"].startswith("invalid arguments: question")
    # the user cancels right before that answer is saved: nothing more is written
    store = CanceledBeforeSave(sqlite_store)
    store.role = "tool"
    model = ScriptedModel([reply, "never"])
    res = Agent("helper", model, store).ask("q", run_id="u2")
    assert (res.status, res.error) == ("canceled", STOPPED)
    assert [m["role"] for m in store.messages("u2")] == ["user", "assistant"]
    assert model.calls == 1


def test_a_call_waiting_for_approval_names_its_run_streamed_or_not(sqlite_store):
    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    store = SqliteAgentStore(sqlite_store)
    for rid, streamed in (("p1", False), ("p2", True)):
        agent = Agent(
            "helper", ScriptedModel([{"tool": "send", "args": {"to": "bob"}}]), store, [send]
        )
        if streamed:
            res = list(agent.stream("q", run_id=rid))[-1].response
        else:
            res = agent.ask("q", run_id=rid)
        assert res is not None
        assert (res.run_id, res.status) == (rid, "input_required")
        assert res.question == 'approve the call send {"to":"bob"}? (yes/no)'
        assert store.get(rid).status == "input_required"
        with pytest.raises(InputRequiredError) as err:  # resume without an answer: says what
            agent.resume(rid)
        assert str(err.value) == (
            f"agent run {rid} waits for an answer to "
            '\'approve the call send {"to":"bob"}? (yes/no)\'; use resume_input(run_id, text)'
        )


@pytest.mark.parametrize(
    "pending", [None, {"name": "ask_user"}, {"name": "ask_user", "arguments": {}}]
)
def test_a_waiting_run_with_no_question_recorded_says_it_waits_for_an_answer(sqlite_store, pending):
    """A run left ``input_required`` with no question recorded (its row
    edited by hand): resume says it waits for an answer, not for one to
    ``None`` or ``'None'``."""
    store = SqliteAgentStore(sqlite_store)
    agent = Agent(
        "helper",
        ScriptedModel([{"tool": "ask_user", "args": {"question": "Which?"}}]),
        store,
    )
    rid = agent.ask("q").run_id
    store.update(rid, 1.0, pending_call=pending)
    assert store.get(rid).pending_call == pending
    with pytest.raises(InputRequiredError) as err:
        agent.resume(rid)
    assert str(err.value) == (
        f"agent run {rid} waits for an answer; use resume_input(run_id, text)"
    )


@pytest.mark.parametrize("asks", ["question", "approval"])
def test_a_cancel_right_before_a_question_is_saved_leaves_the_run_canceled(sqlite_store, asks):
    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    call = {
        "question": {"tool": "ask_user", "args": {"question": "Which?"}},
        "approval": {"tool": "send", "args": {"to": "bob"}},
    }[asks]
    store = CanceledBeforeSave(sqlite_store)
    store.status = "input_required"
    res = Agent("helper", ScriptedModel([call, "never"]), store, [send]).ask("q", run_id="x")
    assert (res.status, res.error, res.question) == ("canceled", STOPPED, None)
    run = store.get("x")
    assert (run.status, run.error, run.pending_call) == ("canceled", "canceled by user", None)


class SlowRefusal(SqliteAgentStore):
    """Saving the answer to a malformed ask_user call takes ``seconds`` (on the clock)."""

    clock: ManualClock
    seconds = 0.0

    def update(self, run_id: str, now: float, **fields: Any) -> None:
        super().update(run_id, now, **fields)
        if any(m.get("name") == "ask_user" for m in fields.get("messages") or ()):
            self.clock.advance(self.seconds)


def test_the_deadline_is_checked_between_turns_not_between_the_calls_of_one_reply(
    sqlite_store,
):
    ran: list[str] = []

    @tool
    def act(x: str) -> str:
        """Act."""
        ran.append(x)
        return f"acted {x}"

    store = SlowRefusal(sqlite_store)
    store.clock = ManualClock()
    store.seconds = 60.0  # the deadline passes while the malformed call is answered
    reply = [{"tool": "ask_user", "args": {"what": "colour"}}, {"tool": "act", "args": {"x": "1"}}]
    model = ScriptedModel([reply, "never"])
    agent = Agent("helper", model, store, [act], clock=store.clock, timeout_s=30.0)
    res = agent.ask("q", run_id="t1")
    # the reply's other call still runs; the next turn is not started
    assert (res.status, res.error) == ("timeout", "the run's deadline passed")
    assert ran == ["1"] and model.calls == 1
    roles = [(m["role"], m.get("name")) for m in store.messages("t1")]
    assert roles == [("user", None), ("assistant", None), ("tool", "ask_user"), ("tool", "act")]


def test_a_run_whose_server_changed_its_tools_fails_and_the_log_says_which_and_why(
    sqlite_store, caplog
):
    store = SqliteAgentStore(sqlite_store)
    notes = ListedServer("notes", ["read"])
    tools = [notes.tool("read")]
    limited = ScriptedModel([RateLimitedError("429", retry_after_s=0.0)])
    rid = Agent("helper", limited, store, tools).ask("q").run_id
    notes.tools = ["read", "delete"]  # the server offers other tools on the resume
    model = ScriptedModel(["never"])
    with caplog.at_level(logging.WARNING, logger="desktop_app.agent.runtime"):
        res = Agent("helper", model, store, tools).resume(rid)
    assert (res.status, res.error) == ("failed", "notes changed its tools")
    # this module's warnings only: another test's thread may still log on its own
    # logger, and a test that configured logging before may leave INFO lines let through
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "desktop_app.agent.runtime" and r.levelno >= logging.WARNING
    ]
    assert said == [f"agent run {rid} failed: notes changed its tools"]
    run = store.get(rid)
    assert (run.status, run.error, run.error_type) == (
        "failed",
        "notes changed its tools",
        "McpToolsChangedError",
    )
    assert model.calls == 0


SPANS_SCRIPT = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from desktop_app.agent import Agent, ScriptedModel, tool
from desktop_app.flow.context import ExecutionContext
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

store = SqliteAgentStore(open_store(sys.argv[1]))
ctx = ExecutionContext(trace_id="ab" * 16)


@tool
def stop(x: str) -> str:
    "The user cancels the run while this call runs."
    Agent("helper", ScriptedModel([]), store).cancel("canceled")
    return "stopped " + x


runs = {}
for rid, model, tools in (
    ("done", ScriptedModel(["ok"]), []),
    ("asking", ScriptedModel([{"tool": "ask_user", "args": {"question": "Which?"}}]), []),
    ("canceled", ScriptedModel([{"tool": "stop", "args": {"x": "a"}}, "never"]), [stop]),
):
    res = Agent("helper", model, store, tools).ask("q", context=ctx, run_id=rid)
    runs[rid] = res.status
out = []
for s in exporter.get_finished_spans():
    if s.name.startswith("invoke_agent"):
        out.append({
            "name": s.name,
            "trace_id": format(s.context.trace_id, "032x"),
            "status": s.status.status_code.name,
            "error": s.status.description,
            "attributes": dict(s.attributes),
        })
print(json.dumps({"runs": runs, "spans": out}))
"""


def test_a_runs_span_names_the_agent_and_says_how_the_run_stopped(db_path):
    pytest.importorskip("opentelemetry.sdk")
    got = script_json(SPANS_SCRIPT, db_path)
    assert got["runs"] == {"done": "done", "asking": "input_required", "canceled": "canceled"}
    spans = {s["attributes"]["flowdesk.run_id"]: s for s in got["spans"]}
    assert sorted(spans) == ["asking", "canceled", "done"]
    for rid, status, outcome in (
        ("done", "done", ("UNSET", None)),
        # waiting for a person is no error
        ("asking", "input_required", ("UNSET", None)),
        # a run the user canceled while it executed here says so
        ("canceled", "canceled", ("ERROR", "canceled")),
    ):
        span = spans[rid]
        assert span["name"] == "invoke_agent helper"
        assert span["trace_id"] == "ab" * 16
        assert span["attributes"] == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "helper",
            "flowdesk.run_id": rid,
            "flowdesk.status": status,
        }
        assert (span["status"], span["error"]) == outcome


def test_a_run_out_of_turns_resumes_only_under_a_higher_max_turns(sqlite_store):
    """S117 in-process: a run that used its ``max_turns`` is refused by a
    resume under the same limit, with nothing asked of the model; an agent
    whose limit is higher goes on with one more model call. A run that
    failed another way, or is not failed, is not refused so."""
    from desktop_app.errors import RunStateError

    store = SqliteAgentStore(sqlite_store)
    model = ScriptedModel([{"tool": "nope", "args": {}}] * 2)
    res = Agent("helper", model, store, max_turns=2).ask("q", run_id="t1")
    assert (res.status, res.error) == ("failed", "no answer after 2 turns")
    assert store.get("t1").turns == 2 and model.calls == 2
    with pytest.raises(RunStateError) as refused:
        Agent("helper", model, store, max_turns=2).resume("t1")
    assert str(refused.value) == (
        "agent run t1 took 2 turns with no answer and may take 2; raise the agent's "
        "max_turns above 2 to resume it (max_turns under [agents.helper] in the settings, "
        "FLOWDESK_AGENTS__HELPER__MAX_TURNS; Agent(max_turns=…) in a program)"
    )
    assert model.calls == 2 and store.get("t1").status == "failed"  # nothing asked or changed
    more = ScriptedModel(["at last"])
    done = Agent("helper", more, store, max_turns=3).resume("t1")
    assert (done.status, done.text, more.calls) == ("done", "at last", 1)

    # failed another way with as many turns: resumed (the model asked again)
    nope = {"tool": "nope", "args": {}}
    other = ScriptedModel([nope, nope, ProviderUnavailableError("503")])
    failed = Agent("helper", other, store, max_turns=5, retries=0).ask("q", run_id="t2")
    assert failed.status == "failed" and store.get("t2").error_type != "MaxTurns"
    assert store.get("t2").turns == 2
    again = ScriptedModel(["fine"])
    ended = Agent("helper", again, store, max_turns=1).resume("t2")
    # its limit is passed, so the drive ends it (no refusal), saying the turns it took
    assert (ended.status, ended.error, again.calls) == ("failed", "no answer after 2 turns", 0)
    assert Agent("helper", again, store, max_turns=3).resume("t2").text == "fine"
