"""What ``FlowBuilder.compile()`` refuses (each problem word for word, all at
once), the graph it compiles (edges, routes, finish set, nested steps), the
version fingerprint (which changes to a flow change it and which do not),
and the steps the builder methods make."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import pytest
from pydantic import BaseModel

from desktop_app.errors import FlowDefinitionError
from desktop_app.flow.definition import (
    DEFAULT_POLICY,
    AwaitStep,
    ConditionStep,
    FlowBuilder,
    LoopStep,
    ParallelStep,
    Policy,
    Route,
    Step,
    WaitStep,
    _arity,
)
from desktop_app.flow.retry import RetryPolicy


class S(BaseModel):
    n: int = 0
    got: str | None = None
    error: str | None = None


class Other(BaseModel):
    n: int = 0
    got: str | None = None
    error: str | None = None
    extra: int = 0


def noop(state: S) -> None:
    return None


def other(state: S) -> dict[str, int]:
    return {"n": 1}


def problems_of(builder: FlowBuilder[S]) -> list[str]:
    with pytest.raises(FlowDefinitionError) as err:
        builder.compile()
    assert err.value.flow_name == builder.name
    return err.value.problems


# -- refusals, word for word --------------------------------------------------


def test_every_graph_problem_is_listed_at_once_in_order():
    b = (
        FlowBuilder("broken", S, inputs=["n", "nope"])
        .step("a", noop)
        .step("a", noop)
        .step("", noop)
        .step("x/y", noop)
        .step("island", noop)
        .step("b", noop)
        .edge("a", "ghost")
        .edge("phantom", "b")
        .route("b", lambda s: "nowhere", ["nowhere"])
        .route("b", lambda s: "a", [])
        .route("gone", lambda s: "a", ["a"])
        .edge("b", "a")
        .finish("zzz")
    )
    assert problems_of(b) == [
        "input 'nope' is not a field of S",
        "duplicate step id 'a'",
        "a step has an empty id",
        "step id 'x/y' contains '/', which is reserved",
        "edge 'a' -> 'ghost' names unknown step 'ghost'",
        "edge 'phantom' -> 'b' names unknown step 'phantom'",
        "route from 'b' to undeclared target 'nowhere'",
        "step 'b' has both a route and static edges",
        "route from 'b' declares no targets",
        "step 'b' has more than one route",
        "step 'b' has both a route and static edges",
        "route from unknown step 'gone'",
        "finish 'zzz' is not a step",
        "step 'x/y' is unreachable from entry 'a'",
        "step 'island' is unreachable from entry 'a'",
        "step 'b' is unreachable from entry 'a'",
    ]


def test_a_nested_step_id_counts_as_a_duplicate_of_a_top_level_one():
    b = FlowBuilder("dup", S).step("a", noop).condition("c", lambda s: True, [("a", noop)]).chain()
    assert problems_of(b) == ["duplicate step id 'a'"]


def test_no_steps_means_no_entry_and_an_unknown_entry_is_named():
    assert problems_of(FlowBuilder("empty", S)) == ["missing entry: the flow has no steps"]
    b = FlowBuilder("e", S).step("x", noop).entry("zzz")
    assert problems_of(b) == ["entry 'zzz' is not a step"]


def test_a_flow_where_every_step_has_an_edge_cannot_end():
    b = FlowBuilder("cycle", S).step("x", noop).step("y", noop).edge("x", "y").edge("y", "x")
    assert problems_of(b) == ["missing finish: every step has an outgoing edge, so no run can end"]
    # naming one of them a finish step is enough
    flow = (
        FlowBuilder("cycle", S)
        .step("x", noop)
        .step("y", noop)
        .edge("x", "y")
        .edge("y", "x")
        .finish("y")
        .compile()
    )
    assert flow.finish == frozenset({"y"})
    assert flow.next_steps("y", S()) == ()
    assert flow.next_steps("x", S()) == ("y",)


def test_error_routing_problems():
    b = (
        FlowBuilder("errs", S)
        .step("a", noop, on_error="route", error_route="ghost", error_field="nope")
        .step("b", noop, error_route="a")
        .step("c", noop, on_error="pause", error_route="a")
        .chain()
    )
    assert problems_of(b) == [
        "step 'a' routes errors to unknown step 'ghost'",
        "step 'a' routes errors into field 'nope', which S does not have",
        "step 'b' has error_route but on_error='fail'",
        "step 'c' has error_route but on_error='pause'",
    ]


def test_a_resume_only_step_without_on_recover_is_refused_and_says_what_to_give():
    """Flower's RESUME_ONLY calls ``onResume``, whose default throws: a step
    interrupted mid-way is not taken for completed (its return was never
    applied and its effect may or may not have happened)."""
    b = (
        FlowBuilder("charge", S)
        .step("charge", noop, recovery="resume_only")
        .step("ok", noop, recovery="resume_only", on_recover=noop)
        .chain()
    )
    assert problems_of(b) == [
        "step 'charge' has recovery='resume_only' but no on_recover: give "
        "on_recover(state, ctx), which runs instead of the step when a crash "
        "interrupted it (check whether its effect happened, then return the "
        "state's changes), or use recovery='idempotent' to run it again"
    ]
    nested = FlowBuilder("nested", S).condition(
        "c", lambda s: True, [Step("inner", noop, Policy(recovery="resume_only"))]
    )
    assert problems_of(nested)[0].startswith("step 'inner' has recovery='resume_only'")


def test_a_nested_steps_error_route_is_checked_and_makes_its_target_reachable():
    bad = FlowBuilder("nested", S).condition(
        "c", lambda s: True, [Step("inner", noop, Policy(on_error="route", error_route="ghost"))]
    )
    assert problems_of(bad) == ["step 'inner' routes errors to unknown step 'ghost'"]
    flow = (
        FlowBuilder("nested", S)
        .condition(
            "c",
            lambda s: True,
            [Step("inner", noop, Policy(on_error="route", error_route="handler"))],
        )
        .step("handler", noop)
        .compile()
    )
    # only the nested step's error route reaches the handler
    assert flow.edges == {}
    assert flow.finish == frozenset({"c", "handler"})
    assert set(flow.nested) == {"inner"}


def test_a_top_level_error_route_and_a_timeout_route_make_their_targets_reachable():
    flow = (
        FlowBuilder("reach", S)
        .step("a", noop, on_error="route", error_route="handler")
        .await_input("ask", "got", timeout_s=5.0, on_timeout="late")
        .step("handler", noop)
        .step("late", noop)
        .entry("a")
        .edge("a", "ask")
        .compile()
    )
    assert flow.finish == frozenset({"ask", "handler", "late"})
    wait = (
        FlowBuilder("reach", S)
        .wait_event("w", "ping", timeout_s=5.0, on_timeout="late")
        .step("late", noop)
        .compile()
    )
    assert wait.entry == "w"
    # without the timeout route the same step is unreachable
    bare = FlowBuilder("reach", S).wait_event("w", "ping").step("late", noop)
    assert problems_of(bare) == ["step 'late' is unreachable from entry 'w'"]
    errs = FlowBuilder("reach", S).step("a", noop).step("handler", noop)
    assert problems_of(errs) == ["step 'handler' is unreachable from entry 'a'"]


def test_route_targets_are_reachable_and_unreachability_follows_every_path():
    flow = (
        FlowBuilder("routes", S)
        .step("a", noop)
        .step("b", noop)
        .step("c", noop)
        .step("d", noop)
        .route("a", lambda s: "b", ["b", "c"])
        .edge("c", "d")
        .compile()
    )
    assert flow.routes["a"].targets == ("b", "c")
    assert flow.finish == frozenset({"b", "d"})
    assert flow.next_steps("a", S()) == ("b",)
    assert flow.next_steps("c", S()) == ("d",)
    assert flow.next_steps("b", S()) == ()


def test_timeout_route_problems():
    b = (
        FlowBuilder("waits", S)
        .await_input("ask", "got", timeout_s=1.0, on_timeout="ghost")
        .wait_event("w", "ping", timeout_s=1.0, on_timeout="ghost2")
        .chain()
    )
    assert problems_of(b) == [
        "wait 'ask' times out to unknown step 'ghost'",
        "wait 'w' times out to unknown step 'ghost2'",
    ]


def test_fields_that_waits_parallels_and_awaits_name_must_exist():
    b = (
        FlowBuilder("fields", S)
        .parallel("p", {}, reducers={"missing": lambda a, b: a})
        .parallel("q", {"x": noop, "y": noop})
        .add(ParallelStep("r", (("x", noop), ("x", noop)), {}))
        .await_input("ask", "nope")
        .wait_signal("sig", "go", key="k", into="nope2")
        .wait_event("ev", "ping", into="nope3")
        .add(WaitStep("sig2", "signal", "", "k"))
        .add(WaitStep("sig3", "signal", "go", None))
        .chain()
    )
    assert problems_of(b) == [
        "parallel 'p' has a reducer for unknown field 'missing'",
        "parallel 'p' has no branches",
        "parallel 'r' has duplicate branch names",
        "await 'ask' stores its input in field 'nope', which S does not have",
        "wait 'sig' stores its payload in field 'nope2', which S does not have",
        "wait 'ev' stores its payload in field 'nope3', which S does not have",
        "wait 'sig2' needs a signal name and key",
        "wait 'sig3' needs a signal name and key",
    ]


def test_fields_that_exist_are_accepted():
    flow = (
        FlowBuilder("fields", S)
        .parallel("p", {"x": noop, "y": noop}, reducers={"n": lambda a, b: a + b})
        .await_input("ask", "got")
        .wait_signal("sig", "go", key="k", into="got")
        .wait_event("ev", "ping", into="got")
        .wait_event("ev2", "ping")
        .sleep("nap", 1.0)
        .chain()
        .compile()
    )
    assert flow.finish == frozenset({"nap"})


@pytest.mark.parametrize("limit", [0, -1.0, math.nan])
def test_a_policy_timeout_must_be_positive(limit):
    b = FlowBuilder("t", S).step("a", noop, timeout_s=limit)
    assert problems_of(b) == [
        f"step 'a' has timeout_s={limit!r}: give a positive number of seconds"
    ]


def test_a_positive_policy_timeout_is_accepted():
    flow = FlowBuilder("t", S).step("a", noop, timeout_s=0.5).compile()
    step = flow.step("a")
    assert step.policy.timeout_s == 0.5


def test_keep_last_n_below_one_is_refused_and_one_is_allowed():
    b = FlowBuilder("k", S, keep_last_n=0).step("a", noop)
    assert problems_of(b) == ["keep_last_n must be at least 1 (the latest checkpoint is kept)"]
    assert FlowBuilder("k", S, keep_last_n=1).step("a", noop).compile().keep_last_n == 1


def test_predicate_waits_are_refused_when_added():
    b = FlowBuilder("p", S)
    with pytest.raises(FlowDefinitionError) as err:
        b.wait_until("w", lambda s: True)
    assert err.value.flow_name == "p"
    assert err.value.problems == [
        "wait 'w': predicate waits cannot be persisted; wait on a signal "
        "(name + key) or an event type instead"
    ]
    with pytest.raises(FlowDefinitionError) as err:
        b.wait_signal("w", lambda s: True, key="k")  # type: ignore[arg-type]
    assert err.value.flow_name == "p"
    assert err.value.problems == [
        "wait 'w': predicate waits cannot be persisted; wait on a signal "
        "(name + key) or an event type instead"
    ]
    with pytest.raises(FlowDefinitionError) as err:
        b.wait_event("w", lambda s: True)  # type: ignore[arg-type]
    assert err.value.flow_name == "p"
    assert err.value.problems == [
        "wait 'w': predicate waits cannot be persisted; wait on an event type (a string) instead"
    ]
    assert b._steps == []


def test_a_route_that_picks_an_undeclared_target_is_refused_at_run_time():
    flow = (
        FlowBuilder("r", S)
        .step("a", noop)
        .step("b", noop)
        .route("a", lambda s: "zzz", ["b"])
        .compile()
    )
    with pytest.raises(FlowDefinitionError) as err:
        flow.next_steps("a", S())
    assert err.value.flow_name == "r"
    assert err.value.problems == ["route from 'a' picked 'zzz', not one of ['b']"]


# -- the compiled flow ----------------------------------------------------------


def test_a_step_with_no_edge_and_no_finish_mark_has_no_successors():
    # a hand-built flow (compile() marks such a step a finish step)
    flow = FlowBuilder("h", S).step("a", noop).step("b", noop).chain().compile()
    bare = dataclasses.replace(flow, finish=frozenset())
    assert bare.next_steps("b", S()) == ()
    assert bare.next_steps("a", S()) == ("b",)


def test_the_compiled_flow_carries_everything_the_builder_was_given():
    retry = RetryPolicy(retries=3)
    flow = (
        FlowBuilder(
            "full",
            S,
            version="7",
            retry=retry,
            max_steps=12,
            delete_on_success=True,
            keep_last_n=4,
            deadline_s=30.0,
            inputs=["n"],
            description="does things",
        )
        .step("a", noop)
        .condition("c", lambda s: True, [("c1", noop), Step("c2", other)])
        .step("z", noop)
        .chain()
        .compile()
    )
    assert flow.name == "full"
    assert flow.state_type is S
    assert flow.user_version == "7"
    assert flow.version.startswith("7+")
    assert flow.retry is retry
    assert flow.max_steps == 12
    assert flow.delete_on_success is True
    assert flow.keep_last_n == 4
    assert flow.deadline_s == 30.0
    assert flow.inputs == ("n",)
    assert flow.description == "does things"
    assert flow.entry == "a"
    assert list(flow.steps) == ["a", "c", "z"]
    assert list(flow.nested) == ["c1", "c2"]
    assert flow.nested["c2"].fn is other
    assert flow.edges == {"a": ("c",), "c": ("z",)}
    assert flow.routes == {}
    assert flow.finish == frozenset({"z"})
    assert flow.step("c").kind == "condition"
    with pytest.raises(TypeError):
        flow.steps["new"] = flow.step("a")  # type: ignore[index]


def test_builder_defaults():
    b = FlowBuilder("d", S)
    assert b.version == "1"
    assert b.retry == RetryPolicy(retries=0)
    assert b.max_steps == 10_000
    assert b.delete_on_success is False
    assert b.keep_last_n is None
    assert b.deadline_s is None
    assert b.inputs is None
    assert b.description == ""
    flow = b.step("a", noop).compile()
    assert flow.version.startswith("1+")
    assert flow.inputs is None
    assert flow.deadline_s is None
    assert flow.description == ""
    assert FlowBuilder("d", S, retry=2).retry == RetryPolicy(retries=2)


def test_inputs_given_as_a_model_are_its_field_names():
    class Form(BaseModel):
        n: int
        got: str

    flow = FlowBuilder("f", S, inputs=Form).step("a", noop).compile()
    assert flow.inputs == ("n", "got")
    b = FlowBuilder("f", S, inputs=Other).step("a", noop)
    assert problems_of(b) == ["input 'extra' is not a field of S"]


def test_an_explicit_entry_and_finish_and_edges_in_the_order_added():
    flow = (
        FlowBuilder("g", S)
        .step("a", noop)
        .step("b", noop)
        .step("c", noop)
        .entry("b")
        .edge("b", "a")
        .edge("b", "c")
        .finish("b")
        .compile()
    )
    assert flow.entry == "b"
    assert flow.edges == {"b": ("a", "c")}
    assert flow.finish == frozenset({"a", "b", "c"})
    assert flow.next_steps("b", S()) == ()
    assert flow.next_steps("a", S()) == ()


def test_chain_with_ids_links_only_those():
    b = FlowBuilder("c", S).step("a", noop).step("b", noop).step("c", noop)
    b.chain("a", "c").chain("c", "b")
    assert b._edges == [("a", "c"), ("c", "b")]
    b2 = FlowBuilder("c", S).step("a", noop).step("b", noop).step("c", noop).chain()
    assert b2._edges == [("a", "b"), ("b", "c")]


# -- the steps the builder makes ------------------------------------------------


def test_policy_defaults_and_step_kinds():
    p = Policy()
    assert (p.retry, p.timeout_s, p.on_error, p.error_route) == (0, None, "fail", None)
    assert (p.error_field, p.recovery, p.on_recover) == ("error", "idempotent", None)
    assert p == DEFAULT_POLICY
    assert Step("a", noop).policy is DEFAULT_POLICY
    assert Step("a", noop).kind == "function"
    assert LoopStep("l", noop, lambda s: True).kind == "loop"
    assert ConditionStep("c", lambda s: True, ()).kind == "condition"
    assert ParallelStep("p", (), {}).kind == "parallel"
    assert AwaitStep("w", "got").kind == "await"
    assert WaitStep("w", "timer").kind == "wait"


def test_builder_methods_make_the_steps_they_describe():
    def until(s):
        return True

    def on_it(i, s):
        return None

    def prog(s):
        return (1, 2)

    def reduce(a, b):
        return a

    def enter(s, ctx):
        return None

    def key(s):
        return "k"

    b = (
        FlowBuilder("m", S)
        .step("s", noop, retry=2, timeout_s=3.0, recovery="resume_only")
        .loop("l", other, until=until)
        .loop(
            "l2",
            other,
            until=until,
            max_iterations=5,
            checkpoint_each_iteration=False,
            on_iteration=on_it,
            progress=prog,
            retry=1,
        )
        .condition("c", until, [("c1", noop)], retry=4)
        .parallel("p", {"x": noop, "y": other}, reducers={"n": reduce}, max_concurrency=2, retry=5)
        .parallel("p2", {"x": noop})
        .await_input("ask", "got", "why?", timeout_s=9.0, on_timeout="s")
        .await_input("ask2", "got")
        .wait_signal("sig", "go", key, into="got", timeout_s=4.0, on_timeout="s", on_enter=enter)
        .wait_event("ev", "ping", into="got", timeout_s=6.0, on_timeout="s", on_enter=enter)
        .sleep("nap", 2.5)
    )
    steps = {s.id: s for s in b._steps}
    assert steps["s"] == Step("s", noop, Policy(retry=2, timeout_s=3.0, recovery="resume_only"))
    assert steps["l"] == LoopStep("l", other, until, 1_000_000, True, None, None, Policy())
    assert steps["l2"] == LoopStep("l2", other, until, 5, False, on_it, prog, Policy(retry=1))
    assert steps["c"] == ConditionStep("c", until, (Step("c1", noop),), Policy(retry=4))
    p = steps["p"]
    assert isinstance(p, ParallelStep)
    assert p.branches == (("x", noop), ("y", other))
    assert dict(p.reducers) == {"n": reduce}
    assert (p.max_concurrency, p.policy) == (2, Policy(retry=5))
    p2 = steps["p2"]
    assert isinstance(p2, ParallelStep)
    assert (dict(p2.reducers), p2.max_concurrency) == ({}, 8)
    assert steps["ask"] == AwaitStep("ask", "got", "why?", 9.0, "s")
    assert steps["ask2"] == AwaitStep("ask2", "got", "", None, None)
    assert steps["sig"] == WaitStep("sig", "signal", "go", key, "got", 4.0, "s", enter)
    assert steps["ev"] == WaitStep("ev", "event", "ping", None, "got", 6.0, "s", enter)
    assert steps["nap"] == WaitStep("nap", "timer", timeout_s=2.5)
    b.route("nap", key, ("s",))
    assert b._routes == [Route("nap", key, ("s",))]


def test_arity_counts_positional_parameters_up_to_two():
    def zero():
        return None

    def one(s):
        return None

    def two(s, ctx):
        return None

    def three(a, b, c):
        return None

    def star(*args):
        return None

    def kw_only(s, *, ctx):
        return None

    assert _arity(zero) == 0
    assert _arity(one) == 1
    assert _arity(two) == 2
    assert _arity(three) == 2
    assert _arity(star) == 2
    assert _arity(kw_only) == 1


def test_a_callable_without_a_signature_gets_both_arguments():
    class NoSignature:
        @property
        def __signature__(self):
            raise ValueError("no signature")

        def __call__(self, *args):
            return None

    assert _arity(NoSignature()) == 2


# -- the version fingerprint ----------------------------------------------------


def _base() -> FlowBuilder[S]:
    return FlowBuilder("fp", S, version="3").step("a", noop).step("b", noop).chain()


def test_the_version_is_the_user_version_and_sixteen_hex_of_the_topology():
    flow = _base().compile()
    topology = {
        "name": "fp",
        "user_version": "3",
        "steps": [["a", "function"], ["b", "function"]],
        "edges": [["a", "b"]],
        "routes": {},
        "entry": "a",
        "finish": ["b"],
        "state": ["error", "got", "n"],
    }
    digest = hashlib.sha256(json.dumps(topology, sort_keys=True).encode()).hexdigest()[:16]
    assert flow.version == f"3+{digest}"
    # runs store this string: the fingerprint must not drift between releases
    assert flow.version == "3+f346fd54dfea5063"


def test_the_fingerprint_of_every_step_shape():
    def reduce(a, b):
        return a

    flow = (
        FlowBuilder("shapes", S, version="1")
        .condition("c", lambda s: True, [("c1", noop)])
        .parallel("p", {"x": noop, "y": noop}, reducers={"n": reduce, "got": reduce})
        .await_input("ask", "got", timeout_s=1.0, on_timeout="z")
        .wait_signal("sig", "go", key="k", into="got", on_timeout=None)
        .step("e", noop, on_error="route", error_route="z")
        .route("e", lambda s: "z", ["z"])
        .step("z", noop)
        .chain("c", "p", "ask", "sig", "e")
        .compile()
    )
    topology = {
        "name": "shapes",
        "user_version": "1",
        "steps": [
            ["c", "condition", ["c1"]],
            ["p", "parallel", ["x", "y"], ["got", "n"]],
            ["ask", "await", ["got", "z"]],
            ["sig", "wait", ["signal", "go", "got", None]],
            ["e", "function", ["error_route", "z"]],
            ["z", "function"],
        ],
        "edges": [["ask", "sig"], ["c", "p"], ["p", "ask"], ["sig", "e"]],
        "routes": {"e": ["z"]},
        "entry": "c",
        "finish": ["z"],
        "state": ["error", "got", "n"],
    }
    digest = hashlib.sha256(json.dumps(topology, sort_keys=True).encode()).hexdigest()[:16]
    assert flow.version == f"1+{digest}"


def _variants() -> dict[str, FlowBuilder[S]]:
    return {
        "name": FlowBuilder("fp2", S, version="3").step("a", noop).step("b", noop).chain(),
        "user version": FlowBuilder("fp", S, version="4").step("a", noop).step("b", noop).chain(),
        "step id": FlowBuilder("fp", S, version="3").step("a", noop).step("c", noop).chain(),
        "step kind": FlowBuilder("fp", S, version="3")
        .step("a", noop)
        .add(AwaitStep("b", "got"))
        .chain(),
        "edge": FlowBuilder("fp", S, version="3")
        .step("a", noop)
        .step("b", noop)
        .edge("a", "b")
        .edge("b", "a")
        .finish("b"),
        "entry": FlowBuilder("fp", S, version="3")
        .step("a", noop)
        .step("b", noop)
        .edge("a", "b")
        .edge("b", "a")
        .finish("b")
        .entry("b"),
        "finish": FlowBuilder("fp", S, version="3")
        .step("a", noop)
        .step("b", noop)
        .chain()
        .finish("a"),
        "state fields": FlowBuilder("fp", Other, version="3")
        .step("a", noop)
        .step("b", noop)
        .chain(),
        "route": FlowBuilder("fp", S, version="3")
        .step("a", noop)
        .step("b", noop)
        .route("a", lambda s: "b", ["b"]),
        "error route": FlowBuilder("fp", S, version="3")
        .step("a", noop, on_error="route", error_route="b")
        .step("b", noop)
        .chain(),
    }


def test_each_topology_change_changes_the_version():
    base = _base().compile().version
    versions = {what: b.compile().version for what, b in _variants().items()}
    assert all(v != base for v in versions.values()), versions
    assert len(set(versions.values())) == len(versions)


def test_step_details_that_change_the_version():
    def flow(**kw):
        shape = {
            "nested": ["c1"],
            "branches": ["x"],
            "reducers": [],
            "into": "got",
            "on_timeout": None,
            "wait_kind": "signal",
            "wait_name": "go",
            "wait_into": None,
            "wait_timeout": None,
            "route_targets": ["z"],
        }
        shape.update(kw)
        b = (
            FlowBuilder("d", S)
            .condition("c", lambda s: True, [(n, noop) for n in shape["nested"]])
            .parallel(
                "p",
                {n: noop for n in shape["branches"]},
                reducers={f: (lambda a, b: a) for f in shape["reducers"]},
            )
            .await_input("ask", shape["into"], timeout_s=1.0, on_timeout=shape["on_timeout"])
            .add(
                WaitStep(
                    "w",
                    shape["wait_kind"],
                    shape["wait_name"],
                    "k",
                    shape["wait_into"],
                    1.0,
                    shape["wait_timeout"],
                )
            )
            .step("r", noop)
            .step("z", noop)
            .step("y", noop)
            .chain("c", "p", "ask", "w", "r")
            .route("r", lambda s: "z", shape["route_targets"])
            .edge("z", "y")
        )
        if "y" not in shape["route_targets"]:
            b.finish("y")
        return b.compile().version

    base = flow()
    changed = {
        "nested ids": flow(nested=["c2"]),
        "branch names": flow(branches=["x", "x2"]),
        "reducers": flow(reducers=["n"]),
        "await field": flow(into="error"),
        "await timeout route": flow(on_timeout="y"),
        "wait kind": flow(wait_kind="event"),
        "wait name": flow(wait_name="stop"),
        "wait field": flow(wait_into="got"),
        "wait timeout route": flow(wait_timeout="y"),
        "route targets": flow(route_targets=["z", "y"]),
    }
    assert all(v != base for v in changed.values()), changed
    assert len(set(changed.values())) == len(changed)


def test_what_does_not_change_the_version():
    base = _base().compile().version
    same = [
        FlowBuilder(
            "fp",
            S,
            version="3",
            retry=5,
            max_steps=3,
            delete_on_success=True,
            keep_last_n=2,
            deadline_s=9.0,
            inputs=["n"],
            description="other words",
        )
        .step("a", other, retry=3, timeout_s=2.0)
        .step("b", other, on_error="pause")
        .chain(),
        # the same edge given by edge() instead of chain()
        FlowBuilder("fp", S, version="3").step("a", noop).step("b", noop).edge("a", "b"),
    ]
    assert [b.compile().version for b in same] == [base, base]


def test_the_steps_after_a_nested_error_route_target_are_reachable_through_it():
    # handler is reached only by the nested step's error route, after only by handler
    flow = (
        FlowBuilder("nested", S)
        .condition(
            "c",
            lambda s: True,
            [Step("inner", noop, Policy(on_error="route", error_route="handler"))],
        )
        .step("handler", noop)
        .step("after", noop)
        .edge("handler", "after")
        .compile()
    )
    assert flow.edges == {"handler": ("after",)}
    assert flow.finish == frozenset({"c", "after"})


@pytest.mark.parametrize("bad", ["a@2", "@"])
def test_an_at_sign_in_a_step_id_or_branch_name_is_refused_with_the_reason(bad):
    step = FlowBuilder("f", S).step(bad, noop)
    assert problems_of(step) == [
        f"step id {bad!r} contains '@', which is reserved (a step's later "
        "visits are keyed '<step>@<k>')"
    ]
    branch = FlowBuilder("f", S).parallel("p", {bad: noop})
    assert problems_of(branch) == [
        f"parallel 'p' branch {bad!r} contains '@', which is reserved "
        "(a step's later visits are keyed '<step>@<k>')"
    ]
