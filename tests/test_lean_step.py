"""The lean step path (issue 31): what it skips must not change what a run
stores, reads back or tells its subscribers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.state import LayeredSteps
from desktop_app.store.group_commit import AppendRequest
from desktop_app.store.protocol import Checkpoint, RunRecord, StepRecord
from desktop_app.store.rows import step_json
from desktop_app.store.sqlite.store import open_store


def test_step_json_keeps_every_field_a_record_has():
    """``step_json`` names the record's fields one by one: a field added to
    ``StepRecord`` and forgotten there would be silently lost on disk."""
    rec = StepRecord(
        "s",
        "failed",
        attempts=3,
        started_at=1.5,
        finished_at=2.5,
        error="boom",
        error_type="ValueError",
        iteration=4,
        duration_ms=7.25,
        next_retry_at=9.0,
    )
    assert {f.name for f in dataclasses.fields(StepRecord)} - {"step_id"} == set(step_json(rec))
    assert StepRecord.from_json({"step_id": "s", **step_json(rec)}) == rec
    assert step_json(StepRecord("s", "in_progress")) == {"status": "in_progress", "attempts": 0}


class Items(BaseModel):
    items: list[str] = []
    n: int = 0


KEPT: list[str] = []


def test_a_step_changing_in_place_what_it_returned_earlier_changes_nothing_stored(
    db_path: Path,
):
    """The engine gives its encoded state to the store uncopied
    (``AppendRequest.given``): a list a step returned and later changes in
    place must change neither the store's cached latest checkpoint nor the
    file."""
    KEPT[:] = ["a"]

    def first(s: Items) -> dict[str, object]:
        return {"items": KEPT}

    def second(s: Items) -> dict[str, object]:
        KEPT.append("changed in place")
        return {"n": 1}

    def third(s: Items) -> dict[str, object]:
        KEPT.append("again")
        return {"n": 2}

    flow = (
        (
            FlowBuilder("kept", Items)
            .step("first", first)
            .step("second", second)
            .step("third", third)
        )
        .chain()
        .compile()
    )
    store = open_store(db_path)
    res = Engine(store, flows=[flow]).run("kept", Items())
    assert res.status == "completed"
    assert store.latest(res.run_id).state == {"items": ["a"], "n": 2}
    store.close()
    again = open_store(db_path)
    assert again.latest(res.run_id).state == {"items": ["a"], "n": 2}
    again.close()


def test_compile_puts_only_plain_synchronous_steps_on_the_lean_path():
    """A step with a timeout, an async function, resume-only recovery or a
    composite kind keeps the general path (``CompiledFlow.lean``)."""

    async def later(s: Items) -> None:
        return None

    flow = (
        FlowBuilder("kinds", Items)
        .step("plain", lambda s: None)
        .step("with_ctx", lambda s, ctx: None)
        .step("timed", lambda s: None, timeout_s=5.0)
        .step("async", later)
        .step("resume_only", lambda s: None, recovery="resume_only", on_recover=lambda s: None)
        .loop("loop", lambda s: None, until=lambda s: True)
        .chain()
        .compile()
    )
    assert dict(flow.lean) == {"plain": 1, "with_ctx": 2}


def test_subscribers_get_the_step_events_of_lean_steps(db_path: Path):
    """The lean path builds no event nobody receives, and every event for a
    subscriber: started, finished and progress, in order, for each step."""

    def counted(s: Items, ctx) -> dict[str, object]:
        ctx.progress(s.n + 1, 2)
        return {"n": s.n + 1}

    flow = FlowBuilder("evented", Items).step("a", counted).step("b", counted).chain().compile()
    assert set(flow.lean) == {"a", "b"}
    store = open_store(db_path)
    engine = Engine(store, flows=[flow])
    seen: list[tuple[str, ...]] = []
    engine.events.subscribe(lambda e: seen.append((type(e).__name__, getattr(e, "step_id", ""))))
    res = engine.run("evented", Items())
    store.close()
    assert res.status == "completed"
    names = [name for name, _ in seen]
    assert names == [
        "RunStarted",
        "StepStarted",
        "StepFinished",
        "RunProgress",
        "StepStarted",
        "StepFinished",
        "RunProgress",
        "RunFinished",
    ]
    assert [sid for name, sid in seen if name == "StepStarted"] == ["a", "b"]


def test_a_failed_lean_attempt_retries_from_the_state_as_stored(db_path: Path):
    """A lean step's attempt that changed the state in place and failed is
    forgotten: its retry (on the general path) starts from the stored state,
    and the run stores what the retry returned."""
    attempts: list[list[str]] = []

    def flaky(s: Items, ctx) -> dict[str, object]:
        attempts.append(list(s.items))
        if ctx.attempt == 1:
            s.items.append("half-done")  # in place, then fail
            raise RuntimeError("flaky")
        return {"items": [*s.items, "done"]}

    flow = (
        FlowBuilder("flaky", Items, retry=1)
        .step("first", lambda s: {"items": ["a"]})
        .step("flaky", flaky)
        .chain()
        .compile()
    )
    assert "flaky" in flow.lean
    store = open_store(db_path)
    res = Engine(store, flows=[flow]).run("flaky", Items())
    assert res.status == "completed"
    assert attempts == [["a"], ["a"]]
    assert store.latest(res.run_id).state["items"] == ["a", "done"]
    assert store.latest(res.run_id).steps["flaky"].attempts == 2
    store.close()


def test_an_append_after_a_given_one_keeps_the_given_step_map_unchanged(db_path: Path):
    """The store caches a given checkpoint as it is (``AppendRequest.given``);
    a later append that is not given puts its step records into a copy of
    that map, never into the map the writer gave."""
    store = open_store(db_path)
    run = RunRecord("r1", "flow", "v1", "running", 0, 1.0, 1.0)
    first = StepRecord("a", "in_progress", attempts=1, started_at=1.0)
    store.create_run(run, Checkpoint("r1", 0, "running", {"n": 0}, {"a": first}, ("a",), 1.0))
    done = StepRecord("a", "completed", attempts=1, started_at=1.0, finished_at=2.0)
    given_steps = LayeredSteps({"a": done}, {})
    store.append_batch(
        [
            AppendRequest(
                Checkpoint("r1", 1, "running", {"n": 1}, given_steps, ("b",), 2.0, "a"),
                given=True,
            )
        ]
    )
    b = StepRecord("b", "completed", attempts=1, started_at=2.0, finished_at=3.0)
    store.append(Checkpoint("r1", 2, "completed", {"n": 2}, {"a": done, "b": b}, (), 3.0, "b"))
    assert dict(given_steps) == {"a": done}
    latest = store.latest("r1")
    assert (dict(latest.steps), latest.state) == ({"a": done, "b": b}, {"n": 2})
    store.close()
    again = open_store(db_path)
    assert dict(again.latest("r1").steps) == {"a": done, "b": b}
    again.close()


def test_lean_steps_take_the_arguments_they_ask_for_and_await_what_they_return(
    db_path: Path,
):
    """On the lean path a function gets no context unless it takes one (it
    is not made), and an awaitable a synchronous function returns is
    awaited, as on the general path."""

    async def later(n: int) -> dict[str, object]:
        return {"n": n}

    seen: list[object] = []
    flow = (
        FlowBuilder("shapes", Items)
        .step("none", lambda: {"items": ["none"]})
        .step("state", lambda s: {"items": [*s.items, "state"]})
        .step("both", lambda s, ctx: seen.append(ctx.step_id) or {"n": 1})
        .step("awaits", lambda s: later(s.n + 1))
        .chain()
        .compile()
    )
    assert dict(flow.lean) == {"none": 0, "state": 1, "both": 2, "awaits": 1}
    store = open_store(db_path)
    res = Engine(store, flows=[flow]).run("shapes", Items())
    assert res.status == "completed"
    assert seen == ["both"]
    assert store.latest(res.run_id).state == {"items": ["none", "state"], "n": 2}
    store.close()


def test_a_lean_step_failing_with_a_backoff_retries_at_the_stored_time(db_path: Path):
    """A failed lean attempt with a backoff stores the next attempt's time
    (``next_retry_at``); the retry, on the general path, starts only then
    (the clock moved by the stored delay), and the run completes."""
    from desktop_app.flow.clock import ManualClock
    from desktop_app.flow.retry import Backoff, RetryPolicy

    clock = ManualClock()
    started_at: list[float] = []

    def flaky(s: Items, ctx) -> dict[str, object]:
        started_at.append(clock.now())
        if ctx.attempt == 1:
            raise RuntimeError("not yet")
        return {"n": 1}

    policy = RetryPolicy(retries=1, backoff=Backoff(initial_s=7.0, max_s=7.0, jitter_s=0.0))
    flow = FlowBuilder("backoff", Items, retry=policy).step("flaky", flaky).chain().compile()
    assert "flaky" in flow.lean
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=clock).run("backoff", Items())
    assert res.status == "completed"
    assert len(started_at) == 2 and started_at[1] - started_at[0] == 7.0
    rec = store.latest(res.run_id).steps["flaky"]
    assert (rec.status, rec.attempts, rec.next_retry_at) == ("completed", 2, None)
    store.close()


def test_compile_gives_each_unrouted_lean_step_its_next_steps():
    """``CompiledFlow.lean_next`` holds what ``next_steps`` would return for
    a lean step without a route function (its edges; nothing for a finish
    step); a routed step is absent, so it is routed at every completion."""
    flow = (
        FlowBuilder("nexts", Items)
        .step("a", lambda s: None)
        .step("pick", lambda s: None)
        .step("low", lambda s: None)
        .step("high", lambda s: None)
        .edge("a", "pick")
        .route("pick", lambda s: "high" if s.n > 0 else "low", ["low", "high"])
        .finish("low", "high")
        .compile()
    )
    assert set(flow.lean) == {"a", "pick", "low", "high"}
    assert dict(flow.lean_next) == {"a": ("pick",), "low": (), "high": ()}
    for sid, nxt in flow.lean_next.items():
        assert flow.next_steps(sid, Items()) == nxt


def test_a_lean_steps_route_reads_the_state_its_step_left(db_path: Path):
    """A routed lean step is routed on the state its own output made (the
    route runs after the output is applied), and the run stores the path
    taken."""
    flow = (
        FlowBuilder("routed", Items)
        .step("bump", lambda s: {"n": s.n + 1})
        .step("low", lambda s: {"items": ["low"]})
        .step("high", lambda s: {"items": ["high"]})
        .route("bump", lambda s: "high" if s.n > 0 else "low", ["low", "high"])
        .finish("low", "high")
        .compile()
    )
    store = open_store(db_path)
    res = Engine(store, flows=[flow]).run("routed", Items())
    assert res.status == "completed"
    assert store.latest(res.run_id).state == {"items": ["high"], "n": 1}
    assert "low" not in store.latest(res.run_id).steps
    store.close()


def test_a_caller_changing_what_latest_gave_it_changes_nothing_stored(db_path: Path):
    """The store caches the latest checkpoint uncopied and hands out copies:
    a step that reads its run's latest checkpoint and changes its state,
    step map and meta in place changes neither the next deltas nor the
    file (read back by a fresh store)."""
    store = open_store(db_path)

    def meddle(s: Items, ctx) -> dict[str, object]:
        got = store.latest(ctx.run_id)
        got.state["items"].append("meddled")  # type: ignore[attr-defined]
        got.state["n"] = 99  # type: ignore[index]
        got.steps.clear()  # type: ignore[attr-defined]
        return {"items": [*s.items, ctx.step_id], "n": s.n + 1}

    flow = (
        (FlowBuilder("meddled", Items).step("a", meddle).step("b", meddle).step("c", meddle))
        .chain()
        .compile()
    )
    assert set(flow.lean) == {"a", "b", "c"}
    res = Engine(store, flows=[flow]).run("meddled", Items())
    assert res.status == "completed"
    expected = {"items": ["a", "b", "c"], "n": 3}
    assert store.latest(res.run_id).state == expected
    store.close()
    again = open_store(db_path)
    cp = again.latest(res.run_id)
    assert cp.state == expected
    assert {sid: rec.status for sid, rec in cp.steps.items()} == {
        "a": "completed",
        "b": "completed",
        "c": "completed",
    }
    again.close()


def test_step_records_made_by_the_quick_init_behave_as_dataclasses_made_them():
    """``StepRecord``, ``Checkpoint``, ``Lease`` and ``RunRecord`` set their
    slots through their descriptors (``records._quick_init``): the same
    signature, defaults and factories as dataclasses writes, still frozen,
    equal, replaceable and picklable."""
    import inspect
    import pickle

    from desktop_app.store.records import Lease, RunRecord

    for cls in (StepRecord, Checkpoint, Lease, RunRecord):
        params = inspect.signature(cls).parameters
        fields = dataclasses.fields(cls)
        assert list(params) == [f.name for f in fields]
        for f in fields:
            if f.default is not dataclasses.MISSING:
                assert params[f.name].default == f.default
    cp = Checkpoint("r", 1, "running", {"n": 1}, {}, ("a",), 2.5)
    assert (cp.step_id, cp.progress, cp.error, cp.waits) == ("", None, None, ())
    assert cp.meta == {} and cp.meta is not Checkpoint("r", 1, "running", {}, {}, (), 0.0).meta
    assert cp == Checkpoint("r", 1, "running", {"n": 1}, {}, ("a",), 2.5, meta={})
    assert dataclasses.replace(cp, revision=2).revision == 2
    assert pickle.loads(pickle.dumps(cp)) == cp
    rec = StepRecord("s", "completed", 2, finished_at=3.0)
    assert (rec.attempts, rec.started_at, rec.finished_at, rec.iteration) == (2, None, 3.0, 0)
    try:
        rec.attempts = 3  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a StepRecord must stay frozen")
    lease = Lease("me", 10.0)
    assert (lease.issued_at, lease.ttl_s, lease.takes_over) == (0.0, None, None)
    assert RunRecord("r", "f", "1", "running", 0, 1.0, 1.0).context == {}
