"""Conformance checks of RunLog: runs and their checkpoints (create, compare-
and-append, read, list, delete, prune)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from desktop_app.errors import (
    CheckpointNotFoundError,
    DuplicateFlowKeyError,
    LeaseLostError,
    RevisionConflictError,
)
from desktop_app.store.conformance.helpers import (
    _clocked,
    _cp,
    _eq,
    _id,
    _ok,
    _raises,
    _run,
    _threads,
)
from desktop_app.store.conformance.suite import ConformanceError, Harness, check
from desktop_app.store.protocol import (
    Checkpoint,
    Lease,
    RunRecord,
    StepRecord,
    Wait,
)


@check("RunLog.create_run", "RunLog.latest", "RunLog.get_run", "RunLog.get_checkpoint")
def create_and_read_back(h: Harness) -> None:
    s = h.store()
    rid = _id()
    steps = {"a": StepRecord("a", "in_progress", attempts=1, started_at=5.0)}
    state = {"x": 1, "items": [], "text": "é ✓", "nested": {"k": [1, 2.5, None, True]}}
    s.create_run(_run(rid, context={"tenant_id": "t1"}), _cp(rid, 0, state, steps=steps))
    latest = s.latest(rid)
    _eq((latest.revision, dict(latest.state), dict(latest.steps)), (0, state, steps), "latest")
    _eq(latest.frontier, ("a",), "frontier")
    run = s.get_run(rid)
    _eq((run.status, run.revision, run.flow_name, run.scope), ("running", 0, "f", s.scope), "run")
    _eq(run.context.get("tenant_id"), "t1", "context")
    _eq(dict(s.get_checkpoint(rid, 0).state), state, "get_checkpoint")
    other = h.store()
    _eq(dict(other.latest(rid).state), state, "a second connection reads it")


@check("RunLog.create_run", "RunLog.append", "RunLog.latest", "RunLog.get_checkpoint")
def every_field_of_a_step_and_a_wait_reads_back(h: Harness) -> None:
    """Each field of a step record (error, error type, iteration, backoff,
    duration) and of a wait (prompt, continuation, deadline, signal name and
    key) reads back exactly, from the connection that wrote it and from a
    new one, after a full write and after a write of one changed step."""
    s = h.store()
    rid = _id()
    failed = StepRecord(
        "a",
        "failed",
        attempts=3,
        started_at=10.0,
        finished_at=11.5,
        error="boom: 'quoted' ✓",
        error_type="ValueError",
        iteration=4,
        duration_ms=1500.25,
        next_retry_at=40.0,
    )
    done = StepRecord("b", "completed", attempts=1, started_at=1.0, finished_at=2.0)
    ask = Wait(
        f"{rid}:ask:0",
        "ask",
        "input",
        12.0,
        prompt={"question": "Approve?", "choices": ["yes", "no"]},
        deadline_at=99.5,
        continuation={"page": 2},
    )
    signal = Wait(f"{rid}:go:0", "go", "signal", 12.0, name="approved", key="k-1")
    s.create_run(_run(rid), _cp(rid, 0, steps={"a": failed, "b": done}))
    s.append(_cp(rid, 1, status="waiting", steps={"a": failed, "b": done}, waits=(ask, signal)))
    for where, store in (("the writer", s), ("a new connection", h.store())):
        for rev in (0, 1):
            got = store.get_checkpoint(rid, rev)
            _eq(dict(got.steps), {"a": failed, "b": done}, f"steps of revision {rev} ({where})")
        _eq(store.latest(rid).waits, (ask, signal), f"waits ({where})")
    retried = StepRecord("a", "completed", attempts=4, started_at=40.0, finished_at=41.0)
    s.append(_cp(rid, 2, steps={"a": retried, "b": done}))
    _eq(dict(h.store().latest(rid).steps), {"a": retried, "b": done}, "one changed step")


@check("RunLog.append", "RunLog.latest")
def compare_and_append_one_winner(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"x": 0}))
    s.append(_cp(rid, 1, {"x": 1}, progress=(1, 3), error=None))
    with _raises(RevisionConflictError, "appending a taken revision"):
        s.append(_cp(rid, 1, {"x": 99}))
    with _raises(RevisionConflictError, "skipping a revision"):
        s.append(_cp(rid, 3, {"x": 3}))
    _eq(dict(s.latest(rid).state), {"x": 1}, "the first writer's state")
    _eq(s.get_run(rid).progress, (1, 3), "progress")
    with _raises(CheckpointNotFoundError, "appending to a missing run"):
        s.append(_cp(_id(), 1, {}))


@check("RunLog.append")
def two_connections_race_on_compare_and_append(h: Harness) -> None:
    a, b = h.store(), h.store()
    rid = _id()
    a.create_run(_run(rid), _cp(rid, 0, {"x": 0}))
    for rev in range(1, 4):
        outcomes: list[str] = []

        def writer(i: int, rev: int = rev, outcomes: list[str] = outcomes) -> None:
            try:
                (a, b)[i].append(_cp(rid, rev, {"x": rev * 10 + i}))
                outcomes.append(f"ok{i}")
            except RevisionConflictError:
                outcomes.append("conflict")

        _threads(2, writer)
        _eq(sorted(outcomes)[0], "conflict", f"revision {rev}: exactly one of two connections wins")
        winner = int(sorted(outcomes)[1][-1])
        _eq(dict(b.latest(rid).state), {"x": rev * 10 + winner}, "the winner's state is stored")


@check("RunLog.history", "RunLog.get_checkpoint")
def history_is_ordered(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"x": 0}))
    for i in range(1, 6):
        s.append(_cp(rid, i, {"x": i, "big": list(range(i))}, step_id=f"s{i}"))
    hist = s.history(rid)
    _eq([c.revision for c in hist], list(range(6)), "history revisions")
    _eq([c.step_id for c in hist], ["", "s1", "s2", "s3", "s4", "s5"], "history step ids")
    _eq([c.id for c in hist], [f"{rid}:{i}" for i in range(6)], "checkpoint ids")
    _eq(dict(s.get_checkpoint(rid, 2).state), {"x": 2, "big": [0, 1]}, "revision 2")
    with _raises(CheckpointNotFoundError, "a revision never saved"):
        s.get_checkpoint(rid, 9)
    with _raises(CheckpointNotFoundError, "history of a missing run"):
        s.history(_id())


@check("RunLog.history_page")
def history_pages_cover_the_history(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"x": 0}))
    for i in range(1, 12):
        s.append(_cp(rid, i, {"x": i}, step_id=f"s{i}"))
    pages, after = [], -1
    while page := s.history_page(rid, after=after, limit=5):
        pages.append([c.revision for c in page])
        after = page[-1].revision
    _eq(pages, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]], "pages of 5 in revision order")
    _eq(s.history_page(rid, limit=3), s.history(rid)[:3], "a first page is the history's start")
    with _raises(CheckpointNotFoundError, "a page of a missing run"):
        s.history_page(_id(), limit=5)


@check("RunLog.create_run")
def create_refuses_duplicates(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    with _raises(RevisionConflictError, "a second run with the same id"):
        s.create_run(_run(rid), _cp(rid, 0))
    key = _id()
    r1, r2 = _id(), _id()
    s.create_run(_run(r1, flow_key=key), _cp(r1, 0))
    with _raises(DuplicateFlowKeyError, "a second live run with the flow key"):
        s.create_run(_run(r2, flow_key=key), _cp(r2, 0))
    try:  # the id is what is taken, not the flow key (a subclass of the conflict)
        s.create_run(_run(r1, flow_key=key), _cp(r1, 0))
    except RevisionConflictError as exc:
        _eq(type(exc), RevisionConflictError, "the same id again, with its live flow key")
    else:
        _ok(False, "the same id again, with its live flow key: nothing was raised")
    s.append(_cp(r1, 1, status="completed"))
    s.create_run(_run(r2, flow_key=key), _cp(r2, 0))  # the first one finished


@check("RunLog.create_run", "RunLog.append", "RunLog.latest")
def a_caller_that_reuses_its_dicts_loses_nothing(h: Harness) -> None:
    """A store keeps its own copy of what it is given and hands out copies:
    a caller that changes the state or step map it passed in, or got back
    from ``latest``, and appends it again has that change stored, read back
    by a new connection (a store that shared the dicts would diff them
    against themselves and store an empty delta)."""
    s = h.store()
    rid = _id()
    state: dict[str, Any] = {"items": [1], "n": 0}
    steps = {"a": StepRecord("a", "completed", attempts=1)}
    s.create_run(_run(rid), _cp(rid, 0, state, steps=steps))
    state["items"].append(2)
    state["n"] = 1
    steps["b"] = StepRecord("b", "in_progress", attempts=1)
    _eq(
        (dict(s.latest(rid).state), list(s.latest(rid).steps)),
        ({"items": [1], "n": 0}, ["a"]),
        "rev 0",
    )
    s.append(_cp(rid, 1, state, steps=steps))
    got = s.latest(rid)
    again, more = cast(dict[str, Any], got.state), dict(got.steps)
    again["items"].append(3)
    more["c"] = StepRecord("c", "completed", attempts=1)
    s.append(_cp(rid, 2, again, steps=more))
    fresh = h.store()
    for rev, want, names in (
        (0, [1], ["a"]),
        (1, [1, 2], ["a", "b"]),
        (2, [1, 2, 3], ["a", "b", "c"]),
    ):
        cp = fresh.get_checkpoint(rid, rev)
        _eq((cp.state["items"], sorted(cp.steps)), (want, names), f"revision {rev}, read back")
    _eq(dict(fresh.latest(rid).state), {"items": [1, 2, 3], "n": 1}, "the latest, read back")


@check("RunLog.create_run", "RunLog.append", "RunLog.latest")
def nested_values_a_caller_changes_never_reach_the_store(h: Harness) -> None:
    """A caller that changes, in place, a nested value of a state it passed
    to ``append`` (a field the append changed, and one it left as it was) or
    of a state ``latest`` returned changes neither what ``latest`` returns
    nor what the next append is diffed against: appending the changed state
    stores the change, read back by a new connection."""
    s = h.store()
    rid = _id()
    kept: dict[str, Any] = {"tags": ["x"]}
    s.create_run(_run(rid), _cp(rid, 0, {"cfg": {"a": [1]}, "kept": kept, "n": 0}))
    state: dict[str, Any] = {"cfg": {"a": [1], "b": {"c": 1}}, "kept": kept, "n": 1}
    s.append(_cp(rid, 1, state))
    state["cfg"]["a"].append(2)  # a field this append changed
    state["cfg"]["b"]["c"] = 2
    kept["tags"].append("y")  # a field it left as it was
    want1 = {"cfg": {"a": [1], "b": {"c": 1}}, "kept": {"tags": ["x"]}, "n": 1}
    _eq(dict(s.latest(rid).state), want1, "latest after the caller changed what it appended")
    got = cast(dict[str, Any], s.latest(rid).state)
    got["cfg"]["a"].append(9)
    got["kept"]["tags"].clear()
    _eq(dict(s.latest(rid).state), want1, "latest after the caller changed what latest returned")
    s.append(_cp(rid, 2, state))  # the caller's changed state: every change is a delta
    want2 = {"cfg": {"a": [1, 2], "b": {"c": 2}}, "kept": {"tags": ["x", "y"]}, "n": 1}
    _eq(dict(s.latest(rid).state), want2, "latest after appending the changed state")
    fresh = h.store()
    _eq(dict(fresh.get_checkpoint(rid, 1).state), want1, "revision 1, read back")
    _eq(dict(fresh.latest(rid).state), want2, "revision 2, read back")


@check("RunLog.create_run", "RunLog.get_run")
def a_new_run_takes_its_scope_revision_and_status_from_the_store(h: Harness) -> None:
    """``create_run`` files the run under the store's scope at revision 0,
    with its first checkpoint's status, whatever the record passed says."""
    s = h.store()
    rid = _id()
    given = RunRecord(rid, "f", "v1", "pending", 7, 1000.0, 1000.0, scope=f"not-{s.scope}")
    s.create_run(given, _cp(rid, 0, status="running"))
    run = s.get_run(rid)
    _eq((run.scope, run.revision, run.status), (s.scope, 0, "running"), "the stored run")


@check("RunLog.append", "RunLog.get_run", "Leases.claim")
def append_keeps_the_run_record_current(h: Harness) -> None:
    """After each append the run record carries the checkpoint's time, the
    last progress given, and the lease the append was made under: renewed
    while the run is running or pending, gone once it waits or ends. An
    append that loses a race under the writer's own lease is a conflict,
    not a lost lease."""
    s, clock, db = _clocked(h)
    t = clock.now()
    rid = _id()
    s.create_run(_run(rid, t=t), _cp(rid, 0, t=t))
    s.claim(rid, Lease("a", t + 30.0, t, ttl_s=30.0), t)
    s.append(_cp(rid, 1, progress=(1, 3), t=t), lease=Lease("a", t + 60.0, t, ttl_s=60.0))
    run = s.get_run(rid)
    _eq(run.updated_at, t + 1, "updated_at is the checkpoint's created_at")
    _eq(run.lease_owner, "a", "the lease's owner")
    held = (run.lease_expires_at or 0.0) - t
    _ok(59.0 <= held < 62.0 if db is not None else held == 60.0, f"renewed for 60 s (got {held})")
    s.append(_cp(rid, 2, status="pending", t=t), lease=Lease("a", t + 90.0, t, ttl_s=90.0))
    run = s.get_run(rid)
    _eq((run.status, run.lease_owner, run.progress), ("pending", "a", (1, 3)), "pending, leased")
    _ok((run.lease_expires_at or 0.0) - t >= 89.0, "a pending run's lease is renewed too")
    try:
        s.append(_cp(rid, 2, t=t), lease=Lease("a", t + 90.0, t, ttl_s=90.0))
    except LeaseLostError as exc:
        raise ConformanceError(f"a stale append under its own lease: {exc!r}") from exc
    except RevisionConflictError:
        pass
    else:
        raise ConformanceError("a stale append: expected RevisionConflictError")
    s.append(_cp(rid, 3, status="completed", t=t), lease=Lease("a", t + 90.0, t, ttl_s=90.0))
    run = s.get_run(rid)
    _eq((run.lease_owner, run.lease_expires_at), (None, None), "an ended run holds no lease")
    _eq(run.progress, (1, 3), "a checkpoint without progress keeps the last one")


@check("RunLog.runs_of_other_versions")
def runs_of_other_versions_lists_every_live_status(h: Harness) -> None:
    s = h.store()
    t = s.now()
    by_status: dict[str, str] = {}
    for i, status in enumerate(("pending", "running", "waiting", "failed", "completed")):
        rid = _id()
        by_status[status] = rid
        s.create_run(_run(rid, t=t + i), _cp(rid, 0, status=status))
    cancelled = _id()
    s.create_run(_run(cancelled, t=t + 9), _cp(cancelled, 0))
    s.append(_cp(cancelled, 1, status="canceled"))
    current, other_flow = _id(), _id()
    s.create_run(_run(current, t=t + 10, version="v2"), _cp(current, 0))
    s.create_run(_run(other_flow, t=t + 11, flow="g"), _cp(other_flow, 0))
    _eq(
        [r.run_id for r in s.runs_of_other_versions("f", "v2")],
        [by_status[k] for k in ("pending", "running", "waiting", "failed")],
        "the live runs of the old version, oldest first",
    )


@check("RunLog.update_latest")
def update_latest_appends_atomically(h: Harness) -> None:
    a, b = h.store(), h.store()
    rid = _id()
    a.create_run(_run(rid), _cp(rid, 0, {"n": 0}))

    def bump(cp: Checkpoint) -> Checkpoint:
        return cp.evolve(revision=cp.revision + 1, state={"n": cp.state["n"] + 1})

    def updater(i: int) -> None:
        (a, b)[i % 2].update_latest(rid, bump)

    _threads(4, updater)
    _eq(dict(a.latest(rid).state), {"n": 4}, "4 concurrent update_latest calls, none lost")
    _eq(a.get_run(rid).revision, 4, "revision")
    got = a.update_latest(rid, lambda cp: cp.evolve(revision=cp.revision + 1, status="canceled"))
    _eq((got.revision, a.get_run(rid).status), (5, "canceled"), "returned checkpoint")


@check("RunLog.list_runs")
def list_runs_filters_and_pages(h: Harness) -> None:
    s = h.store()
    ids = [f"{_id()[:8]}-{i}" for i in range(5)]
    for i, rid in enumerate(ids):
        ctx = {"tenant_id": "t" + str(i % 2), "session_id": "s" if i == 3 else None}
        s.create_run(
            _run(
                rid,
                t=1000.0 + i,
                flow="g" if i == 4 else "f",
                flow_key="k" if i == 2 else None,
                context=ctx,
            ),
            _cp(rid, 0, status="pending" if i == 1 else "running"),
        )
    _eq([r.run_id for r in s.list_runs()], ids, "oldest first")
    _eq([r.run_id for r in s.list_runs(newest_first=True)], ids[::-1], "newest first")
    _eq([r.run_id for r in s.list_runs(limit=2, offset=1)], ids[1:3], "limit and offset")
    _eq([r.run_id for r in s.list_runs(offset=3)], ids[3:], "offset without limit")
    _eq([r.run_id for r in s.list_runs(statuses=["pending"])], [ids[1]], "by status")
    _eq([r.run_id for r in s.list_runs(flow_name="g")], [ids[4]], "by flow")
    _eq([r.run_id for r in s.list_runs(tenant_id="t1")], [ids[1], ids[3]], "by tenant")
    _eq([r.run_id for r in s.list_runs(session_id="s")], [ids[3]], "by session")
    _eq([r.run_id for r in s.list_runs(flow_key="k")], [ids[2]], "by flow key")
    _eq([r.run_id for r in s.list_runs(run_id_prefix=ids[2][:8])], [ids[2]], "by id prefix")
    _eq([r.run_id for r in s.list_runs(run_id_prefix=ids[2])], [ids[2]], "a whole id as prefix")
    _eq(s.list_runs(run_id_prefix=ids[2] + "0"), [], "a prefix longer than every id")
    _eq(s.list_runs(run_id_prefix=ids[2][:8], tenant_id="t1"), [], "id prefix and tenant")
    with _raises(ValueError, "an empty id prefix", "a run id prefix must not be empty"):
        s.list_runs(run_id_prefix="")


@check("RunLog.runs_of_other_versions")
def runs_of_other_versions_lists_live_old_runs(h: Harness) -> None:
    s = h.store()
    old, done, new = _id(), _id(), _id()
    s.create_run(_run(old, version="v0"), _cp(old, 0))
    s.create_run(_run(done, t=1001.0, version="v0"), _cp(done, 0))
    s.append(_cp(done, 1, status="completed"))
    s.create_run(_run(new, t=1002.0, version="v1"), _cp(new, 0))
    _eq([r.run_id for r in s.runs_of_other_versions("f", "v1")], [old], "live runs of v0")
    _eq(s.runs_of_other_versions("other", "v1"), [], "another flow")


@check("RunLog.delete_run")
def delete_run_removes_everything(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    s.append(_cp(rid, 1, waits=(Wait(f"{rid}:w:0", "w", "timer", 1.0, deadline_at=5.0),)))
    s.delete_run(rid)
    with _raises(CheckpointNotFoundError, "a deleted run"):
        s.get_run(rid)
    with _raises(CheckpointNotFoundError, "deleting twice"):
        s.delete_run(rid)
    _eq(s.due_waits(10.0), [], "a deleted run's waits")


@check("RunLog.prune")
def prune_keeps_the_newest(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"v": 0}))
    for i in range(1, 8):
        s.append(_cp(rid, i, {"v": i, "keep": {"a": i % 3}}))
    _eq(s.prune(rid, 3), 5, "checkpoints deleted")
    _eq([c.revision for c in s.history(rid)], [5, 6, 7], "kept")
    _eq(dict(s.latest(rid).state), {"v": 7, "keep": {"a": 1}}, "latest intact")
    _eq(dict(s.get_checkpoint(rid, 5).state), {"v": 5, "keep": {"a": 2}}, "oldest kept intact")
    s.append(_cp(rid, 8, {"v": 8}))
    _eq(dict(s.latest(rid).state), {"v": 8}, "appending after a prune")
    _eq(s.prune(rid, 10), 0, "nothing to prune")
    _eq(s.prune(rid, 1), 3, "keep_last_n=1 deletes all but the latest")
    _eq([c.revision for c in s.history(rid)], [8], "kept with keep_last_n=1")
    _eq(dict(s.latest(rid).state), {"v": 8}, "latest intact after keep_last_n=1")
    _eq(s.prune(rid, 1), 0, "a run of one checkpoint has nothing to prune")
    never = "keep_last_n must be at least 1: the latest checkpoint is never pruned"
    with _raises(ValueError, "keep_last_n=0", never):
        s.prune(rid, 0)


@check("RunLog.delete_run", "RunLog.create_run", "RunLog.latest", "RunLog.append")
def a_run_deleted_and_created_again_elsewhere_is_read_fresh(h: Harness) -> None:
    here, there = h.store(), h.store()
    rid = _id()
    here.create_run(_run(rid), _cp(rid, 0, {"v": "old"}))
    _eq(dict(here.latest(rid).state), {"v": "old"}, "the first run")
    here.delete_run(rid)
    there.create_run(_run(rid), _cp(rid, 0, {"v": "new"}))
    _eq(dict(here.latest(rid).state), {"v": "new"}, "the run created again, read here")
    here.append(_cp(rid, 1, {"v": "next"}))
    _eq(dict(there.latest(rid).state), {"v": "next"}, "appending here after that")


@check("RunLog.create_run")
def create_run_takes_the_runs_revision_0_checkpoint(h: Harness) -> None:
    s = h.store()
    rid = _id()
    for first in (_cp(rid, 1), _cp(_id(), 0)):
        with _raises(
            ValueError, "a wrong first", "create_run needs the run's revision-0 checkpoint"
        ):
            s.create_run(_run(rid), first)
    s.create_run(_run(rid, progress=(2, 5), error="an earlier try failed"), _cp(rid, 0))
    got = s.get_run(rid)
    _eq((got.progress, got.error), ((2, 5), "an earlier try failed"), "progress and error kept")


@check(
    "RunLog.get_run",
    "RunLog.latest",
    "RunLog.get_checkpoint",
    "RunLog.history",
    "RunLog.history_page",
    "RunLog.append",
    "RunLog.update_latest",
    "RunLog.delete_run",
    "RunLog.prune",
    "Leases.claim",
)
def an_unknown_run_is_named(h: Harness) -> None:
    s = h.store()
    rid = _id()
    want = f"no run {rid} in scope {s.scope!r}"
    calls: dict[str, Callable[[], object]] = {
        "get_run": lambda: s.get_run(rid),
        "latest": lambda: s.latest(rid),
        "get_checkpoint": lambda: s.get_checkpoint(rid, 0),
        "history": lambda: s.history(rid),
        "history_page": lambda: s.history_page(rid, limit=10),
        "append": lambda: s.append(_cp(rid, 1)),
        "update_latest": lambda: s.update_latest(rid, lambda cp: cp.evolve(revision=1)),
        "delete_run": lambda: s.delete_run(rid),
        "prune": lambda: s.prune(rid, 1),
        "claim": lambda: s.claim(rid, Lease("a", 1030.0, 1000.0, ttl_s=30.0), 1000.0),
    }
    for name, call in calls.items():
        with _raises(CheckpointNotFoundError, f"{name} of an unknown run", want):
            call()


@check("RunLog.head")
def head_reads_the_run_and_its_latest_checkpoint_together(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"v": 0}))
    s.append(_cp(rid, 1, {"v": 1}, status="waiting", meta={"pause": {"step": "a"}}))
    for where, store in (("this connection", s), ("a second connection", h.store())):
        run, cp = store.head(rid)
        _eq((run.run_id, run.status, run.revision), (rid, "waiting", 1), f"head's run ({where})")
        _eq((cp.revision, dict(cp.state)), (1, {"v": 1}), f"head's checkpoint ({where})")
        _eq(dict(cp.meta), {"pause": {"step": "a"}}, f"head's checkpoint meta ({where})")
        _eq(cp, store.latest(rid), f"head's checkpoint is latest ({where})")
        _eq(run, store.get_run(rid), f"head's run is get_run ({where})")
    missing = _id()
    want = f"no run {missing} in scope {s.scope!r}"
    with _raises(CheckpointNotFoundError, "head of an unknown run", want):
        s.head(missing)
