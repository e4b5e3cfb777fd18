"""The row mapping both SQL stores share (``desktop_app.store.rows``): every
field of every record reads back exactly as written, through the SQLite
store, and the checkpoint rows hold the bytes the module documents (a
snapshot, then deltas holding only what changed, defaults left out)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from desktop_app.errors import (
    CheckpointDecodeError,
    CheckpointNotFoundError,
    StateNotStorableError,
    StoreError,
)
from desktop_app.store import rows
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import (
    AgentRun,
    Checkpoint,
    CheckpointInfo,
    Intent,
    RunRecord,
    StepRecord,
    Wait,
)
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from desktop_app.store.sqlite.store import open_store

PARENT = RunRecord("p0", "parent", "v1", "running", 0, 900.0, 900.0)

FULL_RUN = RunRecord(
    run_id="r1",
    flow_name="flow",
    flow_version="v3",
    status="running",
    revision=0,
    created_at=1000.25,
    updated_at=1001.5,
    scope="default",
    flow_key="fk-1",
    parent_run_id="p0",
    context={"tenant_id": "t1", "session_id": "s1", "x": [1, 2]},
    progress=(3, 7),
    error="boom",
    lease_owner="w1",
    lease_expires_at=2000.5,
    deadline_at=3000.75,
)

STEP_A = StepRecord(
    "a", "completed", attempts=2, started_at=1.5, finished_at=2.5, iteration=3, duration_ms=1000.0
)
WAIT = Wait(
    "w1",
    "b",
    "signal",
    1000.0,
    name="go",
    key="k1",
    prompt={"q": 1},
    deadline_at=5000.0,
    continuation={"c": 2},
)
CP0 = Checkpoint(
    "r1",
    0,
    "waiting",
    {"items": [1], "keep": "k", "drop": 1},
    {"a": STEP_A, "b": StepRecord("b", "waiting")},
    ("b",),
    1000.25,
    step_id="a",
    progress=(1, 2),
    meta={"m": 1},
    waits=(WAIT,),
)
CP1 = Checkpoint(
    "r1",
    1,
    "running",
    {"items": [1, 2], "keep": "k"},
    {"a": STEP_A, "b": StepRecord("b", "in_progress", attempts=1, started_at=3.0)},
    ("b",),
    1001.5,
    step_id="b",
    progress=(2, 2),
    error="e1",
)
CP2 = Checkpoint(
    "r1",
    2,
    "completed",
    {"items": [1, 2], "keep": "k2", "new": 5},
    {"a": STEP_A, "b": StepRecord("b", "completed", attempts=1, started_at=3.0, finished_at=4.0)},
    (),
    1002.75,
    step_id="b",
    meta={"m": 2},
)


def _first(run: RunRecord) -> Checkpoint:
    return Checkpoint(run.run_id, 0, run.status, {}, {}, (), run.created_at)


def test_every_field_of_a_run_reads_back_as_written(sqlite_store):
    sqlite_store.create_run(PARENT, _first(PARENT))
    sqlite_store.create_run(FULL_RUN, _first(FULL_RUN))
    assert sqlite_store.get_run("r1") == FULL_RUN
    assert sqlite_store.list_runs(flow_name="flow") == [FULL_RUN]


def test_a_run_reads_back_with_the_scope_of_the_store_that_wrote_it(db_path):
    store = open_store(db_path, scope="team-a")
    try:
        store.create_run(PARENT, _first(PARENT))
        assert store.get_run("p0") == replace(PARENT, scope="team-a")
    finally:
        store.close()


def test_a_run_without_progress_reads_back_without_progress(sqlite_store):
    sqlite_store.create_run(PARENT, _first(PARENT))
    assert sqlite_store.get_run("p0") == PARENT
    assert sqlite_store.get_run("p0").progress is None


def _three_revisions(store: Any) -> None:
    store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
    store.append(CP1)
    store.append(CP2)


def test_every_field_of_every_checkpoint_reads_back_as_written(sqlite_store):
    _three_revisions(sqlite_store)
    for cp in (CP0, CP1, CP2):
        assert sqlite_store.get_checkpoint("r1", cp.revision) == cp
    assert sqlite_store.history("r1") == [
        CheckpointInfo("r1", 0, "waiting", "a", 1000.25),
        CheckpointInfo("r1", 1, "running", "b", 1001.5),
        CheckpointInfo("r1", 2, "completed", "b", 1002.75),
    ]
    assert sqlite_store.history_page("r1", after=0, limit=1) == [
        CheckpointInfo("r1", 1, "running", "b", 1001.5)
    ]


def test_checkpoint_rows_hold_a_snapshot_then_deltas_of_what_changed(sqlite_store):
    _three_revisions(sqlite_store)
    stored = sqlite_store.query(
        lambda tx: tx.fetchall(
            "SELECT revision, kind, status, step_id, state, steps, frontier, progress, error, "
            "meta, waits FROM checkpoints WHERE run_id=? ORDER BY revision",
            ("r1",),
        )
    )

    def parsed(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*row[:4], *(None if v is None else json.loads(v) for v in row[4:8]), *row[8:])

    a = {
        "status": "completed",
        "attempts": 2,
        "started_at": 1.5,
        "finished_at": 2.5,
        "iteration": 3,
        "duration_ms": 1000.0,
    }
    assert parsed(stored[0])[:8] == (
        0,
        "snapshot",
        "waiting",
        "a",
        {"items": [1], "keep": "k", "drop": 1},
        {"a": a, "b": {"status": "waiting", "attempts": 0}},  # no None, no iteration 0
        ["b"],
        [1, 2],
    )
    assert stored[0][8] is None
    assert json.loads(stored[0][9]) == {"m": 1}
    assert json.loads(stored[0][10]) == [WAIT.to_json()]
    # a delta: the appended item, the removed field, the one step record that changed
    assert parsed(stored[1]) == (
        1,
        "delta",
        "running",
        "b",
        {"append": {"items": [2]}, "unset": ["drop"]},
        {"b": {"status": "in_progress", "attempts": 1, "started_at": 3.0}},
        ["b"],
        [2, 2],
        "e1",
        None,  # no meta, no waits: NULL, not an empty JSON value
        None,
    )
    assert parsed(stored[2])[:8] == (
        2,
        "delta",
        "completed",
        "b",
        {"set": {"keep": "k2", "new": 5}},
        {"b": {"status": "completed", "attempts": 1, "started_at": 3.0, "finished_at": 4.0}},
        [],
        None,
    )
    assert json.loads(stored[2][9]) == {"m": 2}


def test_a_step_record_is_stored_without_its_key_and_its_defaults():
    rec = StepRecord("s", "failed", attempts=0, error="x", error_type="ValueError", iteration=0)
    assert rows.step_json(rec) == {
        "status": "failed",
        "attempts": 0,
        "error": "x",
        "error_type": "ValueError",
    }
    assert rows.step_json(StepRecord("s", "skipped", iteration=1)) == {
        "status": "skipped",
        "attempts": 0,
        "iteration": 1,
    }


def test_a_delta_with_the_writers_changed_steps_stores_only_those(sqlite_store):
    sqlite_store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
    assert sqlite_store.append_batch([AppendRequest(CP1, changed_steps=frozenset({"b", "x"}))]) == [
        None
    ]
    (steps,) = sqlite_store.query(
        lambda tx: tx.fetchone(
            "SELECT steps FROM checkpoints WHERE run_id=? AND revision=1", ("r1",)
        )
    )
    assert json.loads(steps) == {"b": {"status": "in_progress", "attempts": 1, "started_at": 3.0}}
    assert sqlite_store.get_checkpoint("r1", 1) == CP1


def test_the_waits_of_a_checkpoint_are_indexed_for_deadlines_and_signals(sqlite_store):
    sqlite_store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
    assert sqlite_store.next_deadline() == 5000.0
    assert sqlite_store.runs_waiting_for("signal", "go", "k1") == ["r1"]
    assert sqlite_store.due_waits(4999.0) == []
    assert sqlite_store.due_waits(5000.0) == [("r1", "w1")]


def test_signals_and_events_read_back_as_sent(sqlite_store):
    sid = sqlite_store.send_signal("go", "k1", {"v": [1]}, 1234.5)
    got = sqlite_store.next_signal("go", "k1")
    assert got is not None
    assert (got.signal_id, got.name, got.key, got.payload, got.sent_at) == (
        sid,
        "go",
        "k1",
        {"v": [1]},
        1234.5,
    )
    eid = sqlite_store.publish_event("done", {"e": 2}, 2345.25)
    ev = sqlite_store.first_event("done", 2000.0)
    assert ev is not None
    assert (ev.event_id, ev.type, ev.payload, ev.published_at) == (eid, "done", {"e": 2}, 2345.25)


def test_an_intent_reads_back_with_its_receipt_error_and_attempts(sqlite_store):
    sqlite_store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
    intent = Intent("i1", "r1", "b", "mailer", {"to": "x"})
    sqlite_store.append(CP1, intents=[intent])
    assert sqlite_store.intents(["pending"]) == [intent]
    (claimed,) = sqlite_store.claim_intents("d1", 30.0, now=2000.0)
    assert claimed == intent
    assert sqlite_store.mark_intent("i1", "sending", 2001.0)
    (again,) = sqlite_store.claim_intents("d1", 30.0, now=2002.0)
    assert again == Intent("i1", "r1", "b", "mailer", {"to": "x"}, "sending", 1, interrupted=True)
    assert sqlite_store.mark_intent("i1", "failed", 2003.0, error="refused")
    assert sqlite_store.intents(["failed"]) == [
        Intent("i1", "r1", "b", "mailer", {"to": "x"}, "failed", 1, None, "refused")
    ]
    assert sqlite_store.mark_intent("i1", "delivered", 2004.0, receipt={"id": 7})
    assert sqlite_store.intents(["delivered"]) == [
        Intent("i1", "r1", "b", "mailer", {"to": "x"}, "delivered", 1, {"id": 7}, None)
    ]


FULL_AGENT = AgentRun(
    run_id="ag1",
    agent="helper",
    status="running",
    input="hello",
    created_at=1000.25,
    updated_at=1000.5,
    parent_run_id="p0",
    response="resp",
    error="err",
    error_type="ToolError",
    turns=4,
    pending_call=None,
    deadline_at=3000.5,
    expires_at=4000.5,
    retry_at=1500.5,
    context={"tenant_id": "t1"},
    lease_owner="w1",
    lease_expires_at=2000.5,
)


def test_every_field_of_an_agent_run_and_its_tool_results_reads_back(sqlite_store):
    agents = SqliteAgentStore(sqlite_store)
    agents.create(FULL_AGENT, [{"role": "system", "content": "s"}])
    assert agents.get("ag1") == FULL_AGENT
    agents.update("ag1", 1001.0, pending_call={"tool": "t", "args": {"a": 1}})
    assert agents.get("ag1").pending_call == {"tool": "t", "args": {"a": 1}}
    assert agents.list() == [agents.get("ag1")]
    agents.update("ag1", 1002.0, tool=("k1", "search", "in_progress", None))
    agents.update("ag1", 1003.0, tool=("k1", "search", "completed", "found"))
    agents.mark_reused("ag1", "k1")
    result = agents.tool_result("ag1", "k1")
    assert result is not None
    assert (result.tool_key, result.tool, result.status, result.result) == (
        "k1",
        "search",
        "completed",
        "found",
    )
    assert (result.attempts, result.reused) == (1, 1)
    assert agents.tool_results("ag1") == [result]


# -- the fold, on rows as a store reads them (revision, kind, status, step_id,
# created_at, state, steps, frontier, progress, error, meta, waits) -----------


def _row(rev: int, kind: str, state: str = "{}", steps: str = "{}", **last: Any) -> tuple[Any, ...]:
    return (
        rev,
        kind,
        last.get("status", "running"),
        last.get("step_id", "s"),
        last.get("created_at", 10.0 + rev),
        state,
        steps,
        last.get("frontier", "[]"),
        last.get("progress"),
        last.get("error"),
        last.get("meta"),
        last.get("waits"),
    )


def test_a_fold_needs_its_last_row_at_the_revision_asked_for():
    with pytest.raises(CheckpointNotFoundError) as err:
        rows.checkpoint_from_rows("r1", 0, [])
    assert str(err.value) == "run r1 has no checkpoint at revision 0 (pruned or never saved)"
    with pytest.raises(CheckpointNotFoundError):
        rows.checkpoint_from_rows("r1", 3, [_row(1, "snapshot"), _row(2, "delta")])
    cp = rows.checkpoint_from_rows("r1", 2, [_row(1, "snapshot"), _row(2, "delta")])
    assert cp.revision == 2


@pytest.mark.parametrize(
    ("state", "steps"),
    [("[]", "{}"), ("{}", "[]"), ("1", "2"), ("{", "{}")],
    ids=["state-list", "steps-list", "both-scalars", "bad-json"],
)
def test_a_malformed_row_in_a_fold_is_a_decode_error_naming_its_revision(state, steps):
    with pytest.raises(CheckpointDecodeError) as err:
        rows.checkpoint_from_rows(
            "r1", 2, [_row(1, "snapshot"), _row(2, "delta", state=state, steps=steps)]
        )
    assert (err.value.run_id, err.value.revision, err.value.field_path) == ("r1", 2, "")
    assert err.value.reason.startswith("malformed record: ")
    if state != "{":
        assert err.value.reason == "malformed record: state and steps must be JSON objects"


def test_a_malformed_last_row_is_a_decode_error_at_the_revision_asked_for():
    with pytest.raises(CheckpointDecodeError) as err:
        rows.checkpoint_from_rows("r1", 1, [_row(1, "snapshot", waits='[{"kind": "x"}]')])
    assert (err.value.run_id, err.value.revision, err.value.field_path) == ("r1", 1, "")
    assert err.value.reason.startswith("malformed record: ")


def test_unstorable_state_names_the_step_and_the_field():
    cp = Checkpoint("r9", 1, "running", {"a": 1, "b": {1, 2}, "c": {3}}, {}, (), 1.0, step_id="x")
    err = rows.unstorable(cp, TypeError("Type is not JSON serializable: set"))
    assert isinstance(err, StateNotStorableError)
    assert (err.step_id, err.field) == ("x", "b")  # the first field that cannot be stored
    assert str(err).startswith(
        "step 'x' returned a value for state field 'b' that cannot be stored: "
        "TypeError: Type is not JSON serializable: set. "
    )


def test_unstorable_error_text_or_meta_is_named_when_the_state_is_fine():
    cp = Checkpoint("r9", 2, "failed", {"a": 1}, {}, (), 1.0, step_id="x", error="bad \udcff")
    assert rows.unstorable(cp, ValueError("surrogates not allowed")).field == "error"
    cp = Checkpoint("r9", 2, "running", {"a": 1}, {}, (), 1.0, step_id="x")
    assert rows.unstorable(cp, ValueError("surrogates not allowed")).field == "meta"


def test_unstorable_input_state_is_a_store_error_naming_the_run():
    cp = Checkpoint("r9", 0, "running", {"b": {1}}, {}, (), 1.0)
    err = rows.unstorable(cp, TypeError("Type is not JSON serializable: set"))
    assert type(err) is StoreError
    assert str(err) == (
        "run r9: a value in its input state cannot be stored as JSON text "
        "(TypeError: Type is not JSON serializable: set); the run was not created. "
        "Pass plain JSON data (valid UTF-8 strings, numbers, lists, objects)."
    )


def test_a_checkpoint_whose_state_is_not_json_is_refused_with_nothing_written(sqlite_store):
    sqlite_store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
    bad = Checkpoint("r1", 1, "running", {"items": {1, 2}}, {}, (), 1001.0)
    with pytest.raises(StateNotStorableError) as err:
        sqlite_store.append(bad)
    assert err.value.field == "items"
    assert "cannot be stored: TypeError: " in str(err.value)
    assert sqlite_store.get_run("r1").revision == 0
    assert [c.revision for c in sqlite_store.history("r1")] == [0]


def test_the_cached_latest_checkpoint_is_what_a_fresh_read_of_the_file_gives(db_path):
    """A checkpoint appended by a caller that keeps it (not ``given``: an
    ``update_latest``, a program's own append) is cached as the delta row
    applied to the cached revision before (``rows.remembered``): every
    field, its step id, progress and error among them, is what a second
    store reading the file returns."""
    store = open_store(db_path)
    fresh = open_store(db_path)
    try:
        store.create_run(RunRecord("r1", "flow", "v1", "waiting", 0, 1000.25, 1000.25), CP0)
        store.latest("r1")  # cached: the revision the delta applies to
        for cp in (CP1, CP2):
            assert store.append_batch([AppendRequest(cp)]) == [None]
            cached = store.latest("r1")
            assert cached == fresh.get_checkpoint("r1", cp.revision) == cp
            assert (cached.step_id, cached.progress, cached.error) == (
                cp.step_id,
                cp.progress,
                cp.error,
            )
    finally:
        fresh.close()
        store.close()
