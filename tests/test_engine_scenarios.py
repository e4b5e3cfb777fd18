"""Engine scenarios S5-S25, S45, S48, S50 in one process (crash cases are in
test_engine_crash.py)."""

from __future__ import annotations

import dataclasses
import itertools
import operator
import threading
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pydantic import BaseModel, ValidationError

from desktop_app.errors import (
    CheckpointDecodeError,
    CheckpointNotFoundError,
    FlowDefinitionError,
    InputError,
    RunStateError,
)
from desktop_app.flow import Engine, FlowBuilder
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.events import StepFinished, StepStarted
from desktop_app.flow.retry import Backoff, RetryPolicy
from desktop_app.store.memory.store import InMemoryCheckpointStore
from desktop_app.store.sqlite.store import open_store
from tests.flows_for_tests import Numbers, counting_flow


class S(BaseModel):
    n: int = 0
    items: list[str] = []
    error: str | None = None
    answer: str | None = None
    flag: bool = False


@pytest.fixture(params=["memory", "sqlite"])
def store(request):
    if request.param == "memory":
        yield InMemoryCheckpointStore()
        return
    yield request.getfixturevalue("sqlite_store")


# -- retention and scopes ------------------------------------------------


@pytest.mark.scenario("S5")
def test_runs_are_kept_unless_delete_on_success(store):
    keep = FlowBuilder("keep", S).step("a", lambda s: {"n": 1}).compile()
    fail = FlowBuilder("fail", S).step("a", lambda s: 1 / 0).compile()
    drop = FlowBuilder("drop", S, delete_on_success=True).step("a", lambda s: {"n": 1}).compile()
    drop_fail = FlowBuilder("dropfail", S, delete_on_success=True).step("a", lambda s: 1 / 0)
    engine = Engine(store, flows=[keep, fail, drop, drop_fail.compile()])
    kept = engine.run("keep", S()).run_id
    failed = engine.run("fail", S()).run_id
    dropped = engine.run("drop", S())
    dropped_failed = engine.run("dropfail", S()).run_id
    assert dropped.status == "completed" and dropped.state.n == 1
    assert store.get_run(kept).status == "completed"
    assert store.get_run(failed).status == "failed"
    assert store.get_run(dropped_failed).status == "failed"  # failures are always kept
    with pytest.raises(CheckpointNotFoundError):
        store.get_run(dropped.run_id)


@pytest.mark.scenario("S5")
def test_keep_last_n_prunes_older_never_the_latest(store):
    flow = (
        FlowBuilder("many", S, keep_last_n=3)
        .loop("count", lambda s: {"n": s.n + 1}, until=lambda s: s.n >= 20)
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("many", S())
    history = store.history(res.run_id)
    assert len(history) == 3
    assert history[-1].revision == res.revision
    assert engine.get(res.run_id).n == 20
    for info in history:
        store.get_checkpoint(res.run_id, info.revision)  # every retained one decodes


@pytest.mark.scenario("S6")
def test_scopes_do_not_see_each_other(db_path):
    a = open_store(db_path, scope="alice")
    b = open_store(db_path, scope="bob")
    calls: Counter[str] = Counter()
    rid = Engine(a, flows=[counting_flow(calls)]).run("counting", Numbers()).run_id
    assert [r.run_id for r in a.list_runs()] == [rid]
    assert b.list_runs() == []
    with pytest.raises(CheckpointNotFoundError):
        b.get_run(rid)
    with pytest.raises(CheckpointNotFoundError):
        Engine(b, flows=[counting_flow(calls)]).resume(rid)
    a.close()
    b.close()


# -- definition ----------------------------------------------------------


@pytest.mark.scenario("S11")
def test_compile_lists_every_problem_at_once():
    b = (
        FlowBuilder("broken", S)
        .step("a", lambda s: None)
        .step("a", lambda s: None)
        .step("island", lambda s: None)
        .step("b", lambda s: None)
        .edge("a", "ghost")
        .route("b", lambda s: "nowhere", ["nowhere"])
        .edge("a", "b")
    )
    with pytest.raises(FlowDefinitionError) as info:
        b.compile()
    problems = "\n".join(info.value.problems)
    assert "duplicate step id 'a'" in problems
    assert "unknown step 'ghost'" in problems
    assert "undeclared target 'nowhere'" in problems
    assert "'island' is unreachable" in problems
    assert len(info.value.problems) >= 4
    with pytest.raises(FlowDefinitionError, match="missing entry"):
        FlowBuilder("empty", S).compile()
    with pytest.raises(FlowDefinitionError, match="missing finish"):
        FlowBuilder("cycle", S).step("x", lambda s: None).step("y", lambda s: None).edge(
            "x", "y"
        ).edge("y", "x").compile()
    with pytest.raises(FlowDefinitionError, match="entry 'zzz' is not a step"):
        FlowBuilder("e", S).step("x", lambda s: None).entry("zzz").compile()


@pytest.mark.scenario("S12")
def test_one_compiled_flow_many_concurrent_runs(db_path):
    flow = (
        FlowBuilder("conc", S)
        .loop(
            "count",
            lambda s, ctx: {"n": s.n + 1, "items": [*s.items, ctx.run_id[:6]]},
            until=lambda s: s.n >= 15,
        )
        .compile()
    )
    store = open_store(db_path)
    engine = Engine(store, flows=[flow])
    results = {}

    def go(i: int) -> None:
        res = engine.run(flow, S(n=i))
        results[i] = res

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    for i, res in results.items():
        assert res.status == "completed" and res.state.n == 15
        assert set(res.state.items) == {res.run_id[:6]} and len(res.state.items) == 15 - i
    with pytest.raises(dataclasses.FrozenInstanceError):
        flow.entry = "other"  # type: ignore[misc]
    store.close()


@pytest.mark.scenario("S13")
def test_max_steps_halts_a_runaway_loop(store):
    flow = (
        FlowBuilder("spin", S, max_steps=25)
        .step("a", lambda s: {"n": s.n + 1})
        .step("b", lambda s: None)
        .step("end", lambda s: None)
        .edge("a", "b")
        .route("b", lambda s: "a" if s.n < 10_000 else "end", ["a", "end"])
        .compile()
    )
    res = Engine(store, flows=[flow]).run("spin", S())
    assert res.status == "failed"
    assert "max_steps 25" in (res.error or "")
    assert store.latest(res.run_id).meta["halt_reason"] == "max_steps"
    assert res.state.n == 13


# -- control ---------------------------------------------------------------


@pytest.mark.scenario("S14")
def test_cancel_a_running_run_stops_it(db_path):
    started, release = threading.Event(), threading.Event()

    def slow(s: S) -> dict:
        started.set()
        release.wait(5)
        return {"n": 1}

    flow = FlowBuilder("slow", S).step("a", slow).step("b", lambda s: {"n": 2}).chain().compile()
    store = open_store(db_path)
    engine = Engine(store, flows=[flow])
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", engine.run("slow", S())))
    t.start()
    started.wait(5)
    (run,) = store.list_runs()
    assert engine.cancel(run.run_id, "user changed their mind").status == "canceled"
    release.set()
    t.join(10)
    assert box["r"].status == "canceled"
    assert store.get_run(run.run_id).status == "canceled"
    assert "b" not in store.latest(run.run_id).steps  # the step after the cancel never started
    with pytest.raises(RunStateError, match="cannot be resumed"):
        engine.resume(run.run_id)
    store.close()


@pytest.mark.scenario("S14")
def test_cancel_a_waiting_run(store):
    flow = (
        FlowBuilder("ask", S)
        .await_input("approve", "answer")
        .step("x", lambda s: None)
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("ask", S())
    assert res.status == "waiting"
    assert engine.cancel(res.run_id).status == "canceled"
    with pytest.raises(RunStateError):
        engine.resume_with(res.run_id, "yes")


# -- policies ----------------------------------------------------------------


@pytest.mark.scenario("S15")
def test_step_retry_overrides_flow_default_zero_inherits(store):
    seen: Counter[str] = Counter()

    def failing(name: str):
        def fn(s: S) -> None:
            seen[name] += 1
            raise RuntimeError(name)

        return fn

    own = FlowBuilder("own", S, retry=1).step("x", failing("own"), retry=3).compile()
    inherit = FlowBuilder("inh", S, retry=2).step("x", failing("inh"), retry=0).compile()
    engine = Engine(store, flows=[own, inherit])
    engine.run("own", S())
    engine.run("inh", S())
    assert seen == {"own": 4, "inh": 3}


@pytest.mark.scenario("S15")
def test_backoff_grows_exponentially_and_is_capped(db_path):
    clock = ManualClock()
    waits: list[float] = []
    real_sleep = clock.sleep

    def recording_sleep(seconds, cancel=None):
        waits.append(seconds)
        return real_sleep(seconds, cancel)

    clock.sleep = recording_sleep  # type: ignore[method-assign]
    attempts: Counter[str] = Counter()

    def flaky(s: S) -> None:
        attempts["x"] += 1
        raise TimeoutError("upstream slow")

    policy = RetryPolicy(retries=4, backoff=Backoff(initial_s=1, max_s=3, jitter_s=0))
    flow = FlowBuilder("b", S, retry=policy).step("x", flaky).compile()
    store = open_store(db_path)
    res = Engine(store, flows=[flow], clock=clock).run("b", S())
    assert res.status == "failed" and attempts["x"] == 5
    assert waits == [1, 2, 3, 3]  # exponential, capped at 3 s
    store.close()
    # cancel during a backoff wait: tests/test_core_gaps.py (on the injected clock)


@pytest.mark.scenario("S16")
def test_step_timeout_fails_the_attempt_then_retry_applies(store):
    calls: Counter[str] = Counter()
    release = threading.Event()  # a guard: the test ends the first attempt's wait

    def sometimes_slow(s: S, ctx) -> dict:
        calls["x"] += 1
        if calls["x"] == 1:
            # a cooperative sync step: it works until its attempt times out,
            # as the engine asks (a sync step cannot be stopped from outside)
            for _ in range(3000):  # at most 30 s, should the timeout never come
                if ctx.cancelled or release.wait(0.01):
                    break
            assert ctx.cancelled, "the attempt never timed out"
        return {"n": calls["x"]}

    async def always_slow(s: S) -> dict:
        import asyncio

        await asyncio.sleep(5)
        return {"n": 99}

    flow = FlowBuilder("t", S).step("x", sometimes_slow, timeout_s=0.2, retry=1).compile()
    flow2 = FlowBuilder("t2", S).step("x", always_slow, timeout_s=0.1).compile()
    engine = Engine(store, flows=[flow, flow2])
    res = engine.run("t", S())
    assert res.status == "completed" and res.state.n == 2
    rec = store.latest(res.run_id).steps["x"]
    assert rec.attempts == 2
    res2 = engine.run("t2", S())
    assert res2.status == "failed" and "timed out after 0.1 s" in (res2.error or "")
    assert store.latest(res2.run_id).steps["x"].error_type == "StepTimeoutError"
    release.set()


@pytest.mark.scenario("S17")
def test_error_pause_waits_for_operator_and_resume_retries(store):
    broken = {"on": True}

    def charge(s: S) -> dict:
        if broken["on"]:
            raise RuntimeError("card declined")
        return {"n": 1}

    flow = (
        FlowBuilder("pay", S)
        .step("charge", charge, on_error="pause")
        .step("ship", lambda s: {"flag": True})
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("pay", S())
    assert res.status == "waiting" and "card declined" in (res.error or "")
    assert [r.run_id for r in engine.waiting()] == [res.run_id]
    assert engine.pending() == []
    broken["on"] = False
    again = engine.resume(res.run_id)
    assert again.status == "completed" and again.state.flag and again.state.n == 1


@pytest.mark.scenario("S17")
def test_error_route_sends_the_run_to_the_error_step(store):
    handled = []
    flow = (
        FlowBuilder("route", S)
        .step("risky", lambda s: 1 / 0, on_error="route", error_route="cleanup")
        .step("normal", lambda s: {"n": 1})
        .step("cleanup", lambda s: handled.append(s.error) or {"flag": True})
        .edge("risky", "normal")
        .finish("normal", "cleanup")
        .compile()
    )
    res = Engine(store, flows=[flow]).run("route", S())
    assert res.status == "completed" and res.state.flag and res.state.n == 0
    assert handled == ["ZeroDivisionError: division by zero"]
    steps = store.latest(res.run_id).steps
    assert steps["risky"].status == "failed" and "normal" not in steps
    with pytest.raises(FlowDefinitionError, match="unknown step 'nope'"):
        FlowBuilder("bad", S).step(
            "x", lambda s: None, on_error="route", error_route="nope"
        ).compile()


@pytest.mark.scenario("S18")
def test_conditional_route_and_condition_step(store):
    flow = (
        FlowBuilder("cond", S)
        .step("start", lambda s: None)
        .route("start", lambda s: "big" if s.n > 10 else "small", ["big", "small"])
        .step("big", lambda s: {"items": ["big"]})
        .step("small", lambda s: {"items": ["small"]})
        .condition(
            "maybe",
            lambda s: s.flag,
            [
                ("extra1", lambda s: {"items": [*s.items, "e1"]}),
                ("extra2", lambda s: {"items": [*s.items, "e2"]}),
            ],
        )
        .edge("big", "maybe")
        .edge("small", "maybe")
        .compile()
    )
    engine = Engine(store, flows=[flow])
    seen = []
    engine.events.subscribe(lambda e: seen.append(e) if isinstance(e, StepFinished) else None)
    a = engine.run("cond", S(n=50, flag=True))
    assert a.state.items == ["big", "e1", "e2"]
    b = engine.run("cond", S(n=1, flag=False))
    assert b.state.items == ["small"]
    steps = store.latest(b.run_id).steps
    assert steps["extra1"].status == steps["extra2"].status == "skipped"
    assert "big" not in steps
    skipped = [e.result.name for e in seen if e.result.status == "skipped"]
    assert skipped == ["extra1", "extra2"]


@pytest.mark.scenario("S19")
@pytest.mark.parametrize("finish_order", [("x", "y", "z"), ("z", "y", "x"), ("y", "z", "x")])
def test_parallel_fan_in_uses_reducers_deterministically(store, finish_order):
    """Branches finish in ``finish_order`` (each waits for the one before it);
    the merged state is in declared order whatever that order is."""
    done = {name: threading.Event() for name in "xyz"}
    finished: list[str] = []

    def branch(name: str):
        def fn(s: S) -> dict:
            i = finish_order.index(name)
            if i > 0:
                assert done[finish_order[i - 1]].wait(30), "previous branch never finished"
            finished.append(name)
            done[name].set()
            return {"items": [name], "n": 1}

        return fn

    flow = (
        FlowBuilder("par", S)
        .parallel(
            "fan",
            {name: branch(name) for name in "xyz"},
            reducers={"items": operator.add, "n": operator.add},
        )
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("par", S(items=["start"]))
    assert finished == list(finish_order)
    assert res.state.items == ["start", "x", "y", "z"] and res.state.n == 3
    clash = (
        FlowBuilder("clash", S)
        .parallel("fan", {"a": lambda s: {"n": 1}, "b": lambda s: {"n": 2}})
        .compile()
    )
    res = engine.run(clash, S())
    assert res.status == "failed" and "declare a reducer" in (res.error or "")


@pytest.mark.scenario("S21")
def test_each_step_yields_a_result_record_and_events(store):
    flow = (
        FlowBuilder("ev", S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: 1 / 0)
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    events = []
    engine.events.subscribe(events.append)
    engine.events.subscribe(lambda e: 1 / 0)  # a broken listener does not break the run
    res = engine.run("ev", S())
    assert res.status == "failed"
    started = [e.step_id for e in events if isinstance(e, StepStarted)]
    finished = [e.result for e in events if isinstance(e, StepFinished)]
    assert started == ["a", "b"]
    assert [(r.name, r.status) for r in finished] == [("a", "done"), ("b", "error")]
    assert finished[1].error == "ZeroDivisionError: division by zero"
    assert all(r.duration_ms >= 0 for r in finished)


# -- time travel ---------------------------------------------------------------


def three_steps():
    return (
        FlowBuilder("inc", S)
        .step("one", lambda s: {"n": s.n + 1, "items": [*s.items, "one"]})
        .step("ten", lambda s: {"n": s.n + 10, "items": [*s.items, "ten"]})
        .step("hundred", lambda s: {"n": s.n + 100, "items": [*s.items, "hundred"]})
        .chain()
        .compile()
    )


@pytest.mark.scenario("S23")
def test_history_lists_every_checkpoint_with_stable_ids(store):
    engine = Engine(store, flows=[three_steps()])
    res = engine.run("inc", S())
    hist = engine.history(res.run_id)
    assert [h.revision for h in hist] == [0, 1, 2, 3]
    assert [h.step_id for h in hist] == ["", "one", "ten", "hundred"]
    assert [h.id for h in hist] == [f"{res.run_id}:{i}" for i in range(4)]
    assert [engine.checkpoint(h.id).state["n"] for h in hist] == [0, 1, 11, 111]
    assert engine.history(res.run_id) == hist  # stable


@pytest.mark.scenario("S24")
def test_replay_continues_from_a_checkpoint_under_a_new_run(store):
    engine = Engine(store, flows=[three_steps()])
    res = engine.run("inc", S())
    replay = engine.replay(f"{res.run_id}:1")
    assert replay.run_id != res.run_id
    assert replay.status == "completed" and replay.state.n == 111
    assert replay.state.items == ["one", "ten", "hundred"]
    assert store.get_run(replay.run_id).parent_run_id == res.run_id
    assert store.latest(replay.run_id).meta["replayed_from"] == f"{res.run_id}:1"
    last = engine.replay(f"{res.run_id}:3")
    assert last.status == "completed" and last.state.n == 111


@pytest.mark.scenario("S25")
def test_fork_with_mutation_leaves_original_untouched(store):
    engine = Engine(store, flows=[three_steps()])
    res = engine.run("inc", S())
    before = [(h.revision, engine.checkpoint(h.id).state) for h in engine.history(res.run_id)]
    fork = engine.fork(f"{res.run_id}:1", {"n": 50})
    assert fork.run_id != res.run_id and fork.state.n == 160
    fork2 = engine.fork(f"{res.run_id}:2", lambda s: {"items": ["rewritten"]})
    assert fork2.state.items == ["rewritten", "hundred"]
    after = [(h.revision, engine.checkpoint(h.id).state) for h in engine.history(res.run_id)]
    assert before == after
    assert engine.get(res.run_id).n == 111
    runs_before = [r.run_id for r in engine.store.list_runs()]
    with pytest.raises(ValidationError, match="n\n  Input should be a valid integer"):
        engine.fork(f"{res.run_id}:1", {"n": "not a number"})
    assert [r.run_id for r in engine.store.list_runs()] == runs_before  # nothing started


# -- waits (the await kind; durable waits are tested with the waits issue) --------


@pytest.mark.scenario("S26")
def test_await_step_input_becomes_its_output(store):
    flow = (
        FlowBuilder("approve", S)
        .step("prep", lambda s: {"n": 5})
        .await_input("ask", "answer", prompt="ship it?")
        .step("after", lambda s: {"items": [s.answer or ""]})
        .chain()
        .compile()
    )
    engine = Engine(store, flows=[flow])
    res = engine.run("approve", S())
    assert res.status == "waiting"
    assert [r.run_id for r in engine.waiting()] == [res.run_id]
    with pytest.raises(RunStateError, match="resume_with"):
        engine.resume(res.run_id)
    with pytest.raises(InputError):
        engine.resume_with(res.run_id, {"not": "a string"})
    done = engine.resume_with(res.run_id, "yes, ship")
    assert done.run_id == res.run_id and done.status == "completed"
    assert done.state.answer == "yes, ship" and done.state.items == ["yes, ship"]
    assert done.state.n == 5
    with pytest.raises(RunStateError, match="not waiting"):
        engine.resume_with(res.run_id, "again")


# -- failure modes ----------------------------------------------------------------


class Rich(BaseModel):
    class Inner(BaseModel):
        when: datetime
        price: Decimal

    tags: set[str]
    pair: tuple[int, str]
    at: datetime
    amount: Decimal
    inner: Inner
    nested: list[Inner]


@pytest.mark.scenario("S45")
def test_rich_types_round_trip_exactly(sqlite_store):
    now = datetime(2026, 11, 29, 12, 30, 15, 123456, tzinfo=UTC)
    value = Rich(
        tags={"b", "a"},
        pair=(7, "x"),
        at=now,
        amount=Decimal("10.005"),
        inner=Rich.Inner(when=now, price=Decimal("0.1")),
        nested=[Rich.Inner(when=now, price=Decimal("3.14159265358979323846"))],
    )
    flow = FlowBuilder("rich", Rich).step("noop", lambda s: None).compile()
    engine = Engine(sqlite_store, flows=[flow])
    res = engine.run("rich", value)
    sqlite_store._last.clear()
    back = engine.get(res.run_id)
    assert back == value
    assert isinstance(back.tags, set) and isinstance(back.pair, tuple)
    assert back.nested[0].price == Decimal("3.14159265358979323846")


@pytest.mark.scenario("S45")
def test_value_that_no_longer_decodes_is_a_typed_error_never_defaults(db_path):
    class V1(BaseModel):
        title: str = ""
        count: int = 0

    class V2(BaseModel):  # 'count' renamed to 'total', with a default
        title: str = ""
        total: int = 0

    class V3(BaseModel):  # 'count' now rejects what was stored
        title: str = ""
        count: list[int] = []

    store = open_store(db_path)
    f1 = (
        FlowBuilder("doc", V1, version="1")
        .step("a", lambda s: {"count": 3})
        .step("b", lambda s: None)
        .chain()
        .compile()
    )
    rid = Engine(store, flows=[f1]).run("doc", V1(title="t")).run_id
    for model, field in ((V2, "count"), (V3, "count")):
        f = (
            FlowBuilder("doc", model, version="1")
            .step("a", lambda s: None)
            .step("b", lambda s: None)
            .chain()
            .compile()
        )
        store._last.clear()
        with pytest.raises(CheckpointDecodeError) as info:
            Engine(store, flows=[f]).get(rid)
        assert (info.value.run_id, info.value.field_path) == (rid, field)
        assert info.value.revision == store.get_run(rid).revision
    store.close()


class NotRetryable(Exception):
    retryable = False


@pytest.mark.scenario("S48")
def test_errors_are_classified_by_type_not_message(store):

    seen: Counter[str] = Counter()

    def raiser(name: str, exc: Exception):
        def fn(s: S) -> None:
            seen[name] += 1
            raise exc

        return fn

    class Bad(BaseModel):
        x: int

    try:
        Bad(x="no")  # type: ignore[arg-type]
    except ValidationError as e:
        validation_error = e
    flows = [
        FlowBuilder("timeout", S, retry=2).step("x", raiser("timeout", TimeoutError("x"))),
        # message says "timeout" but the type says do not retry
        FlowBuilder("words", S, retry=2).step("x", raiser("words", NotRetryable("timeout!"))),
        FlowBuilder("valid", S, retry=2).step("x", raiser("valid", validation_error)),
        FlowBuilder("valid_opt_in", S, retry=RetryPolicy(retries=2, give_up_on=())).step(
            "x", raiser("valid_opt_in", validation_error)
        ),
    ]
    engine = Engine(store, flows=[f.compile() for f in flows])
    for name in ("timeout", "words", "valid", "valid_opt_in"):
        res = engine.run(name, S())
        assert res.status == "failed"
    assert seen == {"timeout": 3, "words": 1, "valid": 1, "valid_opt_in": 3}
    res = engine.run("timeout", S())
    assert "failed after 3 attempts" in (res.error or "")


@pytest.mark.scenario("S50")
@pytest.mark.slow
def test_long_conversation_grows_linearly_and_pruning_returns_space(db_path):
    import os

    class Chat(BaseModel):
        turns: list[str] = []
        answer: str | None = None

    payload = "x" * 5 * 1024
    store = open_store(db_path)

    def pages() -> tuple[int, int, int]:
        return store.query(
            lambda c: tuple(
                int(c.execute(f"PRAGMA {p}").fetchone()[0])
                for p in ("page_count", "freelist_count", "page_size")
            )
        )

    sizes: list[int] = []

    def talk(s: Chat) -> dict:
        if len(s.turns) % 100 == 0:
            sizes.append(pages()[0])  # committed pages after every 100 turns
        return {"turns": [*s.turns, f"{len(s.turns)}:{payload}"]}

    def chat_flow(name: str, keep_last_n: int | None = None):
        return (
            FlowBuilder(name, Chat, keep_last_n=keep_last_n)
            .loop("talk", talk, until=lambda s: len(s.turns) >= 500)
            .await_input("confirm", "answer")
            .step("end", lambda s: None)
            .chain()
            .compile()
        )

    full, pruned = chat_flow("chat_all"), chat_flow("chat", keep_last_n=20)
    engine = Engine(store, flows=[full, pruned])
    big = engine.run("chat_all", Chat())
    assert big.status == "waiting" and len(big.state.turns) == 500
    sizes.append(pages()[0])
    # linear growth: every 100 turns add about the same number of pages, and
    # a turn costs about its new content (a whole-state copy per checkpoint
    # would be quadratic: 500 turns x 1.25 MiB on average)
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    assert len(steps) == 5 and max(steps) <= 1.2 * min(steps), steps
    page_size = pages()[2]
    assert steps[-1] * page_size / 100 < 3 * len(payload), steps

    # pruning the 500-turn history to its last 20 checkpoints gives space back
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size_before = os.path.getsize(db_path)
    assert store.prune(big.run_id, 20) == big.revision + 1 - 20  # revisions 0..n, 20 kept
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size_after = os.path.getsize(db_path)
    kept = store.query(
        lambda c: c.execute(
            "SELECT sum(length(state) + length(steps) + length(frontier)) FROM checkpoints"
        ).fetchone()[0]
    )
    # the 20 kept checkpoints hold the whole conversation (a snapshot of 500
    # turns at the oldest), so pruning frees little net; the file then holds
    # about what they need (before schema 0011 the (run_id, revision) WITHOUT
    # ROWID b-tree left 1.8x the data in the file, and pruning shrank it 38%)
    assert size_after <= size_before and size_after < 1.25 * kept, (size_after, kept)
    assert pages()[1] <= 256  # freed pages went back to the file system, not the freelist
    assert len(store.history(big.run_id)) == 20

    # a run pruned as it goes keeps resume and fork working from every retained checkpoint
    res = engine.run("chat", Chat())
    assert res.status == "waiting"
    history = engine.history(res.run_id)
    assert 20 <= len(history) < 40 and history[-1].revision == res.revision
    for info in history:
        fork = engine.fork(info.id, {"answer": None})
        assert fork.status == "waiting" and len(fork.state.turns) == 500
        assert engine.resume_with(fork.run_id, "ok").status == "completed"
    done = engine.resume_with(res.run_id, "yes")
    assert done.status == "completed" and done.state.answer == "yes"
    assert done.state.turns[-1].startswith("499:") and len(done.state.turns) == 500
    done_big = engine.resume_with(big.run_id, "yes")  # the explicitly pruned run resumes too
    assert done_big.status == "completed" and len(done_big.state.turns) == 500
    store.close()
