"""Conformance checks of AgentLog: agent runs, their messages, tool results and leases."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from desktop_app.errors import (
    AgentRunCanceledError,
    AgentRunLeasedError,
    AgentRunStatusChangedError,
    CheckpointNotFoundError,
    LeaseLostError,
    RevisionConflictError,
)
from desktop_app.store.conformance.helpers import (
    _eq,
    _id,
    _ok,
    _raises,
    _threads,
)
from desktop_app.store.conformance.suite import ConformanceError, Harness, check
from desktop_app.store.protocol import (
    AgentLog,
    AgentRun,
    CheckpointStore,
)


def _agent(h: Harness) -> tuple[AgentLog, CheckpointStore]:
    if h.agent_log is None:
        raise ConformanceError("no agent log in this harness")
    s = h.store()
    return h.agent_log(s), s


def _agent_run(rid: str, **kw: Any) -> AgentRun:
    return AgentRun(
        rid, kw.pop("agent", "helper"), kw.pop("status", "running"), "hi", 1.0, 1.0, **kw
    )


@check("AgentLog.create", "AgentLog.get", "AgentLog.messages", "AgentLog.list")
def agent_runs_create_and_read(h: Harness) -> None:
    log, store = _agent(h)
    a, b = _id(), _id()
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi ✓"}]
    log.create(_agent_run(a, context={"tenant_id": "t"}), msgs)
    log.create(AgentRun(b, "other", "input_required", "q", 2.0, 2.0, error="an earlier try"), [])
    _eq(log.get(b).error, "an earlier try", "an error given at creation")
    got = log.get(a)
    _eq(
        (got.agent, got.status, got.input, got.context),
        ("helper", "running", "hi", {"tenant_id": "t"}),
        "run",
    )
    _eq(log.messages(a), msgs, "messages in order")
    with _raises(CheckpointNotFoundError, "a missing agent run"):
        log.get(_id())
    with _raises(
        RevisionConflictError,
        "a second agent run with the same id",
        f"agent run {a} already exists",
    ):
        log.create(_agent_run(a), [])
    _eq(log.scope, store.scope, "the agent log is in its store's scope")
    ids = [r.run_id for r in log.list()]
    _ok(ids.index(a) < ids.index(b), "oldest first")
    _eq(
        [r.run_id for r in log.list(statuses=["input_required"]) if r.run_id in (a, b)],
        [b],
        "by status",
    )
    _eq([r.run_id for r in log.list(agent="helper") if r.run_id in (a, b)], [a], "by agent")


@check("AgentLog.list_page")
def agent_runs_are_read_newest_first_a_page_at_a_time(h: Harness) -> None:
    log, _ = _agent(h)
    # later than anything another check creates, so these are the newest
    ids = sorted(_id() for _ in range(5))
    for i, rid in enumerate(ids[:4]):
        log.create(AgentRun(rid, "helper", "done", "hi", 9e9 + i, 9e9 + i), [])
    log.create(AgentRun(ids[4], "helper", "done", "hi", 9e9 + 3, 9e9 + 3), [])  # a tie: by id
    pages = [[r.run_id for r in log.list_page(offset=o, limit=2)] for o in (0, 2)]
    want = [[ids[4], ids[3]], [ids[2], ids[1]]]
    _eq(pages, want, "newest first (created_at, then run id, descending), two at a time")
    _eq(log.list_page(offset=4, limit=2)[0].run_id, ids[0], "the page after them starts")


@check("AgentLog.update", "AgentLog.tool_result", "AgentLog.tool_results", "AgentLog.mark_reused")
def agent_updates_messages_and_tool_results(h: Harness) -> None:
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid), [{"role": "user", "content": "go"}])
    log.update(rid, 5.0, tool=("k1", "search", "in_progress", None), turns=1)
    log.update(rid, 6.0, tool=("k1", "search", "in_progress", None))  # a retry: attempt 2
    log.update(
        rid,
        7.0,
        messages=[{"role": "tool", "content": "r"}],
        tool=("k1", "search", "completed", "r"),
    )
    log.update(rid, 8.0, tool=("k2", "fetch", "failed", None), pending_call={"tool": "ask"})
    one = log.tool_result(rid, "k1")
    _ok(one is not None, "tool result stored")
    assert one is not None
    _eq(
        (one.tool, one.status, one.result, one.attempts, one.reused),
        ("search", "completed", "r", 2, 0),
        "k1",
    )
    log.mark_reused(rid, "k1")
    reused = log.tool_result(rid, "k1")
    _eq(reused.reused if reused else None, 1, "reuse counted")
    _eq([t.tool_key for t in log.tool_results(rid)], ["k1", "k2"], "by update time")
    _eq(log.tool_result(rid, "nope"), None, "unknown key")
    run = log.get(rid)
    _eq((run.turns, run.pending_call, run.updated_at), (1, {"tool": "ask"}, 8.0), "fields")
    _eq([m["role"] for m in log.messages(rid)], ["user", "tool"], "appended")
    log.update(rid, 9.0, status="done", response="ok", pending_call=None)
    _eq((log.get(rid).status, log.get(rid).response), ("done", "ok"), "finished")
    with _raises(CheckpointNotFoundError, "updating a missing agent run"):
        log.update(_id(), 1.0, status="done")


@check("AgentLog.claim", "AgentLog.release", "AgentLog.update")
def agent_leases_fence_a_stale_owner(h: Harness) -> None:
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid), [])
    _eq(log.claim(rid, "a", 130.0, 100.0).lease_owner, "a", "claimed")
    with _raises(AgentRunLeasedError, "claiming a live lease"):
        log.claim(rid, "b", 140.0, 110.0)
    log.update(rid, 111.0, owner="a", turns=1)
    with _raises(AgentRunLeasedError, "a clock alone taking an expired lease"):
        log.claim(rid, "b", 200.0, 131.0)  # a's lease expired at 130, but b named no one
    with _raises(AgentRunLeasedError, "taking over a named owner before its lease expired"):
        log.claim(rid, "b", 200.0, 129.0, takes_over="a")
    log.claim(rid, "b", 200.0, 131.0, takes_over="a")  # a's lease expired at 130
    with _raises(LeaseLostError, "an update by the owner whose lease was taken over"):
        log.update(rid, 132.0, owner="a", messages=[{"role": "assistant", "content": "x"}])
    _eq(log.messages(rid), [], "the fenced update wrote nothing")
    with _raises(AgentRunLeasedError, "a second taker of the owner the first one replaced"):
        log.claim(rid, "d", 300.0, math.inf, takes_over="a")
    _eq(log.get(rid).lease_owner, "b", "the first taker keeps the run")
    log.claim(rid, "c", 300.0, math.inf, takes_over="b")
    _eq(log.get(rid).lease_owner, "c", "takeover of a dead owner")
    log.release(rid, "b")
    _eq(log.get(rid).lease_owner, "c", "release by a non-holder is a no-op")
    log.release(rid, "c")
    _eq((log.get(rid).lease_owner, log.get(rid).lease_expires_at), (None, None), "released")
    with _raises(CheckpointNotFoundError, "claiming a missing agent run"):
        log.claim(_id(), "a", 1.0, 0.0)


@check("AgentLog.update")
def a_cancel_fences_the_executing_owner(h: Harness) -> None:
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid), [])
    log.claim(rid, "a", 130.0, 100.0)
    log.update(rid, 101.0, status="canceled", error="canceled by user")  # another process
    with _raises(AgentRunCanceledError, "a write of the owner of a canceled run"):
        log.update(
            rid,
            102.0,
            owner="a",
            status="done",
            messages=[{"role": "assistant", "content": "x"}],
            tool=("k", "t", "in_progress", None),
        )
    run = log.get(rid)
    _eq((run.status, run.error), ("canceled", "canceled by user"), "the cancel stands")
    _eq((log.messages(rid), log.tool_results(rid)), ([], []), "the fenced write wrote nothing")
    log.update(rid, 103.0, tool=("k", "t", "completed", "r"))  # no owner: written
    _eq([t.status for t in log.tool_results(rid)], ["completed"], "an ownerless write")


@check("AgentLog.update")
def a_status_compare_and_set_never_overwrites_a_finished_run(h: Harness) -> None:
    """A cancel conditioned on the status it read (``expect_status``) loses
    to the executing owner that ended the run after that read: the run keeps
    ``done`` and its reply, and the refused cancel names what it found."""
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid), [])
    log.claim(rid, "a", 130.0, 100.0)
    read = log.get(rid).status  # the canceling process reads 'running'
    log.update(rid, 101.0, owner="a", status="done", response="the answer")  # the owner ends it
    with _raises(
        AgentRunStatusChangedError,
        "a cancel conditioned on a status the run no longer has",
        f"agent run {rid} is done, no longer running: another process changed it meanwhile; "
        "nothing was written",
    ):
        log.update(
            rid,
            102.0,
            expect_status=read,
            status="canceled",
            error="canceled by user",
            messages=[{"role": "assistant", "content": "x"}],
            tool=("k", "t", "in_progress", None),
        )
    run = log.get(rid)
    _eq((run.status, run.response, run.error), ("done", "the answer", None), "the end stands")
    _eq((log.messages(rid), log.tool_results(rid)), ([], []), "the refused write wrote nothing")
    with _raises(AgentRunStatusChangedError, "an owner's write conditioned on another status"):
        log.update(rid, 103.0, owner="a", expect_status="running", turns=9)
    _eq(log.get(rid).turns, 0, "nothing of it written")
    other = _id()
    log.create(_agent_run(other), [])
    log.update(other, 104.0, expect_status="running", status="canceled", error="canceled by user")
    _eq(log.get(other).status, "canceled", "the status it expected: written")


@check(
    "AgentLog.get",
    "AgentLog.update",
    "AgentLog.claim",
    "AgentLog.messages",
    "AgentLog.tool_result",
    "AgentLog.tool_results",
    "AgentLog.mark_reused",
)
def an_unknown_agent_run_is_named_or_empty(h: Harness) -> None:
    log, _ = _agent(h)
    rid = _id()
    want = f"no agent run {rid} in scope {log.scope!r}"
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: log.get(rid),
        "update": lambda: log.update(rid, 1.0, status="done"),
        "update by an owner": lambda: log.update(rid, 1.0, owner="a", turns=1),
        "claim": lambda: log.claim(rid, "a", 2.0, 1.0),
    }
    for name, call in calls.items():
        with _raises(CheckpointNotFoundError, f"{name} of an unknown agent run", want):
            call()
    _eq(log.messages(rid), [], "messages of an unknown agent run")
    _eq(log.tool_result(rid, "k"), None, "a tool result of an unknown agent run")
    _eq(log.tool_results(rid), [], "tool results of an unknown agent run")
    log.mark_reused(rid, "k")  # nothing to count: no error


@check("AgentLog.create", "AgentLog.update", "AgentLog.get", "AgentLog.tool_result")
def agent_updates_store_what_they_were_given(h: Harness) -> None:
    """Unknown fields are refused before anything is written; a pending call
    is stored as a copy (a caller changing its dict later changes nothing);
    a tool result first written finished keeps its status and result, and a
    later update without a result keeps the stored one. A run is created
    without a pending call, whatever the record says."""
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid, pending_call={"tool": "stale"}), [])
    _eq(log.get(rid).pending_call, None, "created without a pending call")
    with _raises(ValueError, "unknown fields", "not agent-run fields: agent, bogus"):
        log.update(rid, 2.0, messages=[{"role": "user", "content": "x"}], bogus=1, agent="x")
    _eq((log.messages(rid), log.get(rid).updated_at), ([], 1.0), "the refused update wrote nothing")
    call: dict[str, Any] = {"tool": "search", "input": {"q": "a"}}
    log.update(rid, 3.0, pending_call=call, error="boom: 'quoted' ✓")
    _eq(log.get(rid).error, "boom: 'quoted' ✓", "an error set by an update")
    call["input"]["q"] = "changed afterwards"
    _eq(log.get(rid).pending_call, {"tool": "search", "input": {"q": "a"}}, "a copy is stored")
    log.update(rid, 4.0, tool=("k", "search", "completed", "found it"))
    first = log.tool_result(rid, "k")
    _eq(
        None if first is None else (first.status, first.result, first.attempts),
        ("completed", "found it", 0),
        "a tool result first written finished",
    )
    log.update(rid, 5.0, tool=("k", "search", "in_progress", None))
    again = log.tool_result(rid, "k")
    _eq(
        None if again is None else (again.status, again.result, again.attempts),
        ("in_progress", "found it", 1),
        "an update without a result keeps the stored one",
    )


@check("AgentLog.claim", "AgentLog.update")
def agent_lease_refusals_name_the_holder(h: Harness) -> None:
    log, _ = _agent(h)
    rid = _id()
    log.create(_agent_run(rid), [])
    log.claim(rid, "a", 130.0, 100.0)
    try:
        log.claim(rid, "b", 140.0, 129.0)
    except AgentRunLeasedError as exc:
        _eq((exc.run_id, exc.owner, exc.expires_at), (rid, "a", 130.0), "the refusal's fields")
    else:
        raise ConformanceError("claiming a live agent lease: expected AgentRunLeasedError")
    _eq(
        log.claim(rid, "b", 190.0, 130.0, takes_over="a").lease_owner,
        "b",
        "a lease is out at its expiry",
    )
    with _raises(
        LeaseLostError,
        "an update by the owner that lost the lease",
        f"agent run {rid} is held by b, not by a: another process took it over; "
        "this process stops executing it.",
    ):
        log.update(rid, 131.0, owner="a", turns=2)


@check("AgentLog.claim")
def two_connections_claim_an_agent_run_once(h: Harness) -> None:
    if h.agent_log is None:
        raise ConformanceError("no agent log in this harness")
    logs = [h.agent_log(h.store()) for _ in range(2)]
    rid = _id()
    logs[0].create(_agent_run(rid), [])
    won: list[str] = []

    def claimer(i: int) -> None:
        try:
            logs[i % 2].claim(rid, f"o{i}", 500.0, 100.0)
            won.append(f"o{i}")
        except AgentRunLeasedError:
            pass

    _threads(4, claimer)
    _eq(len(won), 1, "exactly one of four concurrent claimants wins")
    _eq(logs[1].get(rid).lease_owner, won[0], "the winner holds the lease")
