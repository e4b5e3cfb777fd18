"""Flow definitions: steps, edges, routes; compiled and validated before use.

A flow is a graph of steps over a typed state (a pydantic model). Build it
with :class:`FlowBuilder`; :meth:`FlowBuilder.compile` validates the whole
graph, reports every problem at once
(:class:`~desktop_app.errors.FlowDefinitionError`) and returns an immutable
:class:`CompiledFlow` that any number of concurrent runs may share.

Step kinds:

* :class:`Step` — a function ``fn(state, ctx)`` (or ``fn(state)``), sync or
  ``async``, returning ``None``, a ``dict`` of field updates or a new state.
* :class:`LoopStep` — one step that runs a body until a condition holds,
  optionally checkpointing every iteration.
* :class:`ConditionStep` — nested steps that run only when a predicate holds;
  otherwise they are recorded ``skipped`` (Agentium's ConditionStep).
* :class:`ParallelStep` — branches fanned out concurrently, fanned in with
  per-field reducers in *declared* branch order (deterministic; completion
  order never matters). Each finished branch is checkpointed by its name.
* :class:`AwaitStep` — a durable pause for human input; the value given on
  resume becomes the step's output, assigned to one state field as given.

Every step takes a :class:`Policy`: retries, per-attempt timeout, what to do
after the last failure (fail, pause for an operator, or route to an error
step) and its recovery policy (``idempotent`` / ``resume_only``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeGuard, TypeVar

from pydantic import BaseModel

from desktop_app.errors import FlowDefinitionError
from desktop_app.flow.retry import RetryPolicy

if TYPE_CHECKING:
    from desktop_app.store.protocol import CheckpointStore, DomainWrite, Withdrawal

S = TypeVar("S", bound=BaseModel)
RecoveryPolicy = Literal["idempotent", "resume_only"]
OnError = Literal["fail", "pause", "route"]
Reducer = Callable[[Any, Any], Any]
#: a flow's record of a run that timed out: ``hook(run_id)`` -> the domain
#: writes committed with the run's ``timed_out`` checkpoint
#: (:attr:`CompiledFlow.on_timed_out`)
TimedOutHook = Callable[[str], "Sequence[DomainWrite]"]
#: a flow's record of a cancel: ``hook(store, run_id, withdrawal)``, called
#: once the canceled run's intents were withdrawn (:attr:`CompiledFlow.on_cancel`)
CancelHook = Callable[["CheckpointStore", str, "Withdrawal"], None]


@functools.lru_cache(maxsize=4096)
def _arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments (0 to 2) to pass a step function."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return min(len(positional), 2)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """How a step is retried, timed and recovered.

    Attributes:
        retry: retries after the first attempt; ``0`` inherits the flow's
            default (go-micro semantics: only a positive value overrides).
        timeout_s: seconds one attempt may take; a slower attempt fails as a
            :class:`~desktop_app.flow.errors.StepTimeoutError` and the retry
            policy applies. A sync function keeps running in its thread until
            it returns (Python cannot kill a thread); its result is discarded.
        on_error: after the last failed attempt: ``fail`` the run, ``pause``
            it for an operator (status ``waiting``; ``resume`` tries again), or
            ``route`` to ``error_route`` with the error in ``error_field``.
        error_route: the step that handles the failure (``on_error="route"``).
        error_field: the state field that receives the error message.
        recovery: ``idempotent`` — an attempt found in progress after a crash
            runs again; ``resume_only`` — ``on_recover`` runs instead of the
            body (Flower's RecoveryPolicy; ``compile`` refuses ``resume_only``
            without ``on_recover``, as Flower's default ``onResume`` throws).
        on_recover: ``on_recover(state, ctx)`` for ``resume_only`` steps.
    """

    retry: int = 0
    timeout_s: float | None = None
    on_error: OnError = "fail"
    error_route: str | None = None
    error_field: str = "error"
    recovery: RecoveryPolicy = "idempotent"
    on_recover: Callable[..., Any] | None = None


DEFAULT_POLICY = Policy()


@dataclass(frozen=True)
class Step:
    """A function step: ``fn(state, ctx)`` → ``None | dict | state``."""

    id: str
    fn: Callable[..., Any]
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="function", init=False)


@dataclass(frozen=True)
class LoopStep:
    """One step that runs ``body`` repeatedly (go-micro's ``Loop`` as one step).

    Unlike go-micro, ``until(state)`` is checked *before* each iteration, so a
    loop over an empty work list runs zero times. With
    ``checkpoint_each_iteration`` every iteration is saved with the domain
    writes it staged, so a crash resumes at the next iteration instead of the
    first. ``ctx.iteration`` is 1-based.

    Attributes:
        until: stop when it returns true.
        max_iterations: cap; reaching it ends the loop without error.
        on_iteration: ``on_iteration(iteration, state)`` after each iteration.
        progress: ``progress(state)`` → ``(done, total)``, saved each iteration.
    """

    id: str
    body: Callable[..., Any]
    until: Callable[[Any], bool]
    max_iterations: int = 1_000_000
    checkpoint_each_iteration: bool = True
    on_iteration: Callable[[int, Any], None] | None = None
    progress: Callable[[Any], tuple[int, int]] | None = None
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="loop", init=False)


@dataclass(frozen=True)
class ConditionStep:
    """Nested ``steps`` run in order when ``predicate(state)`` is true; when it
    is false each is recorded ``skipped``. The predicate's answer is stored,
    so a resumed run does not re-decide."""

    id: str
    predicate: Callable[[Any], bool]
    steps: tuple[Step, ...]
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="condition", init=False)


@dataclass(frozen=True)
class ParallelStep:
    """Branches run concurrently on the same input state, each returning field
    updates. Fan-in applies them in declared branch order; a field written by
    more than one branch needs a reducer ``reducer(current, update)``.
    Each branch's output is checkpointed under its name as it finishes, so
    after a crash only unfinished branches run again (S19, S49)."""

    id: str
    branches: tuple[tuple[str, Callable[..., Any]], ...]
    reducers: Mapping[str, Reducer]
    max_concurrency: int = 8
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="parallel", init=False)


@dataclass(frozen=True)
class AwaitStep:
    """A durable pause for input: the run saves as ``waiting`` and ``run`` /
    ``resume`` return normally. ``Engine.resume_with(run_id, value)`` assigns
    ``value`` — exactly as given, validated against the field's type — to
    the state field ``into`` and continues the same run (go-micro
    ``Await``/``ResumeWith``). With ``timeout_s`` the wait has a deadline:
    past it the run goes to ``on_timeout`` or, without one, ends ``timed_out``."""

    id: str
    into: str
    prompt: str = ""
    timeout_s: float | None = None
    on_timeout: str | None = None
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="await", init=False)


@dataclass(frozen=True)
class WaitStep:
    """A durable wait on a signal (name + key), an event type, or a timer.

    * ``signal``: consumes the oldest unconsumed signal ``(name, key)`` from
      the mailbox (a signal sent while no process ran is delivered later);
      ``key`` is a string or ``key(state)``.
    * ``event``: resolved by the first event of type ``name`` published after
      the wait began (broadcast).
    * ``timer``: resolved when ``timeout_s`` has passed (a durable sleep).

    The payload goes to state field ``into`` (if given). The deadline is stored
    when the wait begins; past it the run goes to ``on_timeout`` or, without
    one, ends ``timed_out`` (a timer just continues). ``on_enter(state, ctx)``
    runs once when the wait begins and is never repeated on recovery.
    """

    id: str
    wait_kind: Literal["signal", "event", "timer"]
    name: str | None = None
    key: str | Callable[[Any], str] | None = None
    into: str | None = None
    timeout_s: float | None = None
    on_timeout: str | None = None
    on_enter: Callable[..., Any] | None = None
    policy: Policy = DEFAULT_POLICY
    kind: str = field(default="wait", init=False)


AnyStep = Step | LoopStep | ConditionStep | ParallelStep | AwaitStep | WaitStep


@dataclass(frozen=True)
class Route:
    """A conditional route: ``pick(state)`` returns one of ``targets``."""

    source: str
    pick: Callable[[Any], str]
    targets: tuple[str, ...]


@dataclass(frozen=True)
class CompiledFlow(Generic[S]):
    """An immutable, validated flow; safe to share between concurrent runs.

    Attributes:
        name: the flow's name (runs record it).
        state_type: the pydantic model of the state.
        user_version: the author's version string.
        version: ``"<user_version>+<16 hex>"`` — a fingerprint of the topology
            (steps, kinds, edges, routes, state fields) and ``user_version``.
        entry: id of the first step.
        retry: flow-wide retry policy.
        max_steps: step executions per run before the run halts.
        delete_on_success: delete a run (and its checkpoints) when it completes.
        keep_last_n: keep only the newest n checkpoints of each run (None: all).
        deadline_s: a run-level deadline, counted from the run's creation and
            stored then (never pushed later by recovery); past it the run ends
            ``timed_out``.
        inputs: the state fields a person gives when starting a run (a form
            shows only these), or ``None``: every field. Not part of ``version``.
        description: what the flow does, for people (one or two sentences).
        variants: versions of the same flow in another mode (built by the
            same code with other options, e.g. ``digest`` with a model): a
            run of one is no older version of this one, a process built with
            that mode goes on with it. Not part of ``version``.
        on_timed_out: ``hook(run_id)``, called when a run of this flow ends
            ``timed_out`` (a wait's deadline or the run's own passed, with
            no ``on_timeout`` route): the domain writes it returns commit in
            the same transaction as the run's ``timed_out`` checkpoint, so
            the flow's own tables say what will never happen (the tidy
            flow's planned moves become skipped). ``None``: nothing more is
            written. It travels with the flow, so two flows of one name
            (two engines in one process, a test's copy) never share it. Not
            part of ``version``.
        on_cancel: ``hook(store, run_id, withdrawal)``, called when a run of
            this flow is canceled (``Engine.cancel``), right after its
            intents not delivered yet were withdrawn
            (:func:`~desktop_app.flow.outbox.withdraw_for_cancel`), so the
            flow's own tables say what was never made (the tidy flow's
            withdrawn and never-queued moves become skipped). ``None``:
            nothing more is written. It travels with the flow like
            ``on_timed_out``. Not part of ``version``.
        lean: the steps a driver may run on its lean path
            (``RunDriver.run_lean``), by id, with the number of arguments
            (0 to 2) their function takes: plain synchronous function steps
            with no timeout and ``idempotent`` recovery. Computed by
            ``compile``; empty: every step takes the general path.
        lean_next: for each step of ``lean`` with no route function, the
            steps after it (``next_steps`` without a state to read: its
            edges, or none for a finish step), computed by ``compile``; a
            lean step missing here is routed at every completion.
    """

    name: str
    state_type: type[S]
    user_version: str
    steps: Mapping[str, AnyStep]
    nested: Mapping[str, Step]
    edges: Mapping[str, tuple[str, ...]]
    routes: Mapping[str, Route]
    entry: str
    finish: frozenset[str]
    retry: RetryPolicy
    max_steps: int
    delete_on_success: bool
    keep_last_n: int | None
    version: str
    deadline_s: float | None = None
    inputs: tuple[str, ...] | None = None
    description: str = ""
    variants: frozenset[str] = frozenset()
    on_timed_out: TimedOutHook | None = None
    on_cancel: CancelHook | None = None
    lean: Mapping[str, int] = field(default_factory=dict)
    lean_next: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def step(self, step_id: str) -> AnyStep:
        return self.steps[step_id]

    def next_steps(self, step_id: str, state: Any) -> tuple[str, ...]:
        """Ids to run after ``step_id`` completes with ``state``.

        Raises:
            FlowDefinitionError: a route picked a target it did not declare.
        """
        route = self.routes.get(step_id)
        if route is not None:
            target = route.pick(state)
            if target not in route.targets:
                raise FlowDefinitionError(
                    self.name,
                    [f"route from {step_id!r} picked {target!r}, not one of {list(route.targets)}"],
                )
            return (target,)
        if step_id in self.finish:
            return ()
        return self.edges.get(step_id, ())


class FlowBuilder(Generic[S]):
    """Collects steps, edges and routes; :meth:`compile` checks them all.

    Args:
        name: the flow's name.
        state: the pydantic model class of the state.
        version: the author's version string (part of the fingerprint).
        retry: default retries per step (n retries = n + 1 attempts), or a
            full :class:`~desktop_app.flow.retry.RetryPolicy`.
        max_steps: step executions per run before it halts (runaway loops).
        delete_on_success: delete completed runs.
        keep_last_n: prune each run's checkpoints to the newest n.
        deadline_s: run-level deadline in seconds from creation.
        inputs: the state fields a person gives to start a run (names, or a
            pydantic model whose fields they are); ``None``: every field.
        description: what the flow does, for people.
        on_timed_out: ``hook(run_id)`` -> the domain writes committed with
            the ``timed_out`` checkpoint of a run that times out
            (:attr:`CompiledFlow.on_timed_out`); ``None``: none.
        on_cancel: ``hook(store, run_id, withdrawal)``, called when a run is
            canceled, once its intents were withdrawn
            (:attr:`CompiledFlow.on_cancel`); ``None``: none.
    """

    def __init__(
        self,
        name: str,
        state: type[S],
        *,
        version: str = "1",
        retry: int | RetryPolicy = 0,
        max_steps: int = 10_000,
        delete_on_success: bool = False,
        keep_last_n: int | None = None,
        deadline_s: float | None = None,
        inputs: Sequence[str] | type[BaseModel] | None = None,
        description: str = "",
        on_timed_out: TimedOutHook | None = None,
        on_cancel: CancelHook | None = None,
    ) -> None:
        self.name = name
        self.deadline_s = deadline_s
        self.on_timed_out = on_timed_out
        self.on_cancel = on_cancel
        if isinstance(inputs, type):
            inputs = list(inputs.model_fields)
        self.inputs = tuple(inputs) if inputs is not None else None
        self.description = description
        self.state_type = state
        self.version = version
        self.retry = retry if isinstance(retry, RetryPolicy) else RetryPolicy(retries=retry)
        self.max_steps = max_steps
        self.delete_on_success = delete_on_success
        self.keep_last_n = keep_last_n
        self._steps: list[AnyStep] = []
        self._edges: list[tuple[str, str]] = []
        self._routes: list[Route] = []
        self._entry: str | None = None
        self._finish: list[str] = []

    def add(self, step: AnyStep) -> FlowBuilder[S]:
        """Add any step object; returns the builder."""
        self._steps.append(step)
        return self

    def step(self, step_id: str, fn: Callable[..., Any], **policy: Any) -> FlowBuilder[S]:
        """Add a function step; keyword arguments are :class:`Policy` fields."""
        return self.add(Step(step_id, fn, Policy(**policy)))

    def loop(
        self,
        step_id: str,
        body: Callable[..., Any],
        *,
        until: Callable[[Any], bool],
        max_iterations: int = 1_000_000,
        checkpoint_each_iteration: bool = True,
        on_iteration: Callable[[int, Any], None] | None = None,
        progress: Callable[[Any], tuple[int, int]] | None = None,
        **policy: Any,
    ) -> FlowBuilder[S]:
        """Add a :class:`LoopStep`."""
        return self.add(
            LoopStep(
                step_id,
                body,
                until,
                max_iterations,
                checkpoint_each_iteration,
                on_iteration,
                progress,
                Policy(**policy),
            )
        )

    def condition(
        self,
        step_id: str,
        predicate: Callable[[Any], bool],
        steps: Sequence[tuple[str, Callable[..., Any]] | Step],
        **policy: Any,
    ) -> FlowBuilder[S]:
        """Add a :class:`ConditionStep` over nested ``(id, fn)`` pairs or Steps."""
        nested = tuple(s if isinstance(s, Step) else Step(s[0], s[1]) for s in steps)
        return self.add(ConditionStep(step_id, predicate, nested, Policy(**policy)))

    def parallel(
        self,
        step_id: str,
        branches: Mapping[str, Callable[..., Any]],
        *,
        reducers: Mapping[str, Reducer] | None = None,
        max_concurrency: int = 8,
        **policy: Any,
    ) -> FlowBuilder[S]:
        """Add a :class:`ParallelStep`; branch order is the mapping's order."""
        return self.add(
            ParallelStep(
                step_id,
                tuple(branches.items()),
                MappingProxyType(dict(reducers or {})),
                max_concurrency,
                Policy(**policy),
            )
        )

    def await_input(
        self,
        step_id: str,
        field: str,
        prompt: str = "",
        *,
        timeout_s: float | None = None,
        on_timeout: str | None = None,
    ) -> FlowBuilder[S]:
        """Add an :class:`AwaitStep` whose input lands in state ``field``."""
        return self.add(AwaitStep(step_id, field, prompt, timeout_s, on_timeout))

    def wait_signal(
        self,
        step_id: str,
        name: str,
        key: str | Callable[[Any], str],
        *,
        into: str | None = None,
        timeout_s: float | None = None,
        on_timeout: str | None = None,
        on_enter: Callable[..., Any] | None = None,
    ) -> FlowBuilder[S]:
        """Add a :class:`WaitStep` on signal ``(name, key)``.

        Raises:
            FlowDefinitionError: ``name`` is a predicate (a function): predicate
            waits cannot be persisted, so durable flows refuse them.
        """
        if callable(name):
            raise FlowDefinitionError(
                self.name,
                [
                    f"wait {step_id!r}: predicate waits cannot be persisted; wait on a signal "
                    "(name + key) or an event type instead"
                ],
            )
        return self.add(
            WaitStep(step_id, "signal", name, key, into, timeout_s, on_timeout, on_enter)
        )

    def wait_event(
        self,
        step_id: str,
        event_type: str,
        *,
        into: str | None = None,
        timeout_s: float | None = None,
        on_timeout: str | None = None,
        on_enter: Callable[..., Any] | None = None,
    ) -> FlowBuilder[S]:
        """Add a :class:`WaitStep` on the next event of ``event_type``."""
        if callable(event_type):
            raise FlowDefinitionError(
                self.name,
                [
                    f"wait {step_id!r}: predicate waits cannot be persisted; wait on an event "
                    "type (a string) instead"
                ],
            )
        return self.add(
            WaitStep(step_id, "event", event_type, None, into, timeout_s, on_timeout, on_enter)
        )

    def sleep(self, step_id: str, seconds: float) -> FlowBuilder[S]:
        """Add a durable timer: the run waits ``seconds`` (float > 0) from
        when it reaches the step; the deadline (UTC epoch seconds) is
        stored, so the wait survives restarts and a run resumed after it
        goes on at once.

        Raises:
            FlowDefinitionError: at :meth:`compile`, for ``seconds`` <= 0.
        """
        return self.add(WaitStep(step_id, "timer", timeout_s=seconds))

    def wait_until(self, step_id: str, predicate: Callable[[Any], bool]) -> FlowBuilder[S]:
        """Refused: a predicate over in-memory state cannot be a durable wait.

        Raises:
            FlowDefinitionError: always (S27); use a signal or event wait.
        """
        raise FlowDefinitionError(
            self.name,
            [
                f"wait {step_id!r}: predicate waits cannot be persisted; wait on a signal "
                "(name + key) or an event type instead"
            ],
        )

    def edge(self, source: str, target: str) -> FlowBuilder[S]:
        self._edges.append((source, target))
        return self

    def chain(self, *step_ids: str) -> FlowBuilder[S]:
        """Edges ``a→b→c…``; with no ids, chains every step in the order added."""
        ids = list(step_ids) or [s.id for s in self._steps]
        for a, b in itertools.pairwise(ids):
            self.edge(a, b)
        return self

    def route(
        self, source: str, pick: Callable[[Any], str], targets: Sequence[str]
    ) -> FlowBuilder[S]:
        """After ``source``, go to ``pick(state)``, which must be one of ``targets``.

        ``pick`` runs on the state ``source`` left, as part of that step: if
        it raises or picks another target, the step fails with
        :class:`~desktop_app.errors.RouteError` under its ``on_error`` policy,
        not retried (the route is the flow's code; LangGraph likewise runs a
        conditional edge inside its node's task). After a wait step, a
        person's answer that makes it fail is refused with nothing changed.
        """
        self._routes.append(Route(source, pick, tuple(targets)))
        return self

    def entry(self, step_id: str) -> FlowBuilder[S]:
        self._entry = step_id
        return self

    def finish(self, *step_ids: str) -> FlowBuilder[S]:
        self._finish.extend(step_ids)
        return self

    def compile(self) -> CompiledFlow[S]:
        """Validate everything and freeze the flow.

        Raises:
            FlowDefinitionError: lists every problem found: duplicate ids,
            missing entry or finish, edges or routes to unknown steps,
            unreachable steps, reducers or fields the state lacks, error
            routes to unknown steps.
        """
        problems: list[str] = []
        fields = set(self.state_type.model_fields)
        for f in self.inputs or ():
            if f not in fields:
                problems.append(f"input {f!r} is not a field of {self.state_type.__name__}")
        nested: dict[str, Step] = {}
        all_ids: list[str] = []
        for s in self._steps:
            all_ids.append(s.id)
            if isinstance(s, ConditionStep):
                for n in s.steps:
                    all_ids.append(n.id)
                    nested[n.id] = n
        seen: set[str] = set()
        for sid in all_ids:
            if not sid:
                problems.append("a step has an empty id")
            elif "/" in sid:
                problems.append(f"step id {sid!r} contains '/', which is reserved")
            elif "@" in sid:
                problems.append(
                    f"step id {sid!r} contains '@', which is reserved (a step's later "
                    "visits are keyed '<step>@<k>')"
                )
            elif sid in seen:
                problems.append(f"duplicate step id {sid!r}")
            seen.add(sid)
        ids = [s.id for s in self._steps]
        known = set(ids)
        entry = self._entry if self._entry is not None else (ids[0] if ids else None)
        if entry is None:
            problems.append("missing entry: the flow has no steps")
        elif entry not in known:
            problems.append(f"entry {entry!r} is not a step")
        edges: dict[str, list[str]] = {}
        for a, b in self._edges:
            for end in (a, b):
                if end not in known:
                    problems.append(f"edge {a!r} -> {b!r} names unknown step {end!r}")
            edges.setdefault(a, []).append(b)
        routes: dict[str, Route] = {}
        for r in self._routes:
            if r.source not in known:
                problems.append(f"route from unknown step {r.source!r}")
            if not r.targets:
                problems.append(f"route from {r.source!r} declares no targets")
            for t in r.targets:
                if t not in known:
                    problems.append(f"route from {r.source!r} to undeclared target {t!r}")
            if r.source in routes:
                problems.append(f"step {r.source!r} has more than one route")
            if r.source in edges:
                problems.append(f"step {r.source!r} has both a route and static edges")
            routes[r.source] = r
        error_edges: dict[str, str] = {}
        for s in [*self._steps, *nested.values()]:
            p = s.policy
            if p.recovery == "resume_only" and p.on_recover is None:
                # Flower's RESUME_ONLY calls onResume, whose default throws: a
                # step found in progress after a crash may or may not have
                # done its effect, and only the flow's author can say what then
                problems.append(
                    f"step {s.id!r} has recovery='resume_only' but no on_recover: give "
                    "on_recover(state, ctx), which runs instead of the step when a crash "
                    "interrupted it (check whether its effect happened, then return the "
                    "state's changes), or use recovery='idempotent' to run it again"
                )
            if p.on_error == "route":
                if p.error_route not in known:
                    problems.append(
                        f"step {s.id!r} routes errors to unknown step {p.error_route!r}"
                    )
                else:
                    error_edges[s.id] = p.error_route
                if p.error_field not in fields:
                    problems.append(
                        f"step {s.id!r} routes errors into field {p.error_field!r}, which "
                        f"{self.state_type.__name__} does not have"
                    )
            elif p.error_route is not None:
                problems.append(f"step {s.id!r} has error_route but on_error={p.on_error!r}")
            if isinstance(s, ParallelStep):
                for f in s.reducers:
                    if f not in fields:
                        problems.append(f"parallel {s.id!r} has a reducer for unknown field {f!r}")
                names = [b for b, _ in s.branches]
                if not names:
                    problems.append(f"parallel {s.id!r} has no branches")
                if len(set(names)) != len(names):
                    problems.append(f"parallel {s.id!r} has duplicate branch names")
                for b in names:
                    if "@" in b:
                        problems.append(
                            f"parallel {s.id!r} branch {b!r} contains '@', which is reserved "
                            "(a step's later visits are keyed '<step>@<k>')"
                        )
            if isinstance(s, AwaitStep) and s.into not in fields:
                problems.append(
                    f"await {s.id!r} stores its input in field {s.into!r}, which "
                    f"{self.state_type.__name__} does not have"
                )
            if isinstance(s, WaitStep):
                if s.into is not None and s.into not in fields:
                    problems.append(
                        f"wait {s.id!r} stores its payload in field {s.into!r}, which "
                        f"{self.state_type.__name__} does not have"
                    )
                if s.wait_kind == "timer" and s.timeout_s is None:
                    problems.append(f"timer {s.id!r} needs a positive duration")
                if s.wait_kind == "signal" and (not s.name or s.key is None):
                    problems.append(f"wait {s.id!r} needs a signal name and key")
            for limit in (getattr(s, "timeout_s", None), s.policy.timeout_s):
                if limit is not None and not limit > 0:  # also refuses NaN
                    problems.append(
                        f"step {s.id!r} has timeout_s={limit!r}: give a positive number of seconds"
                    )
            if isinstance(s, (AwaitStep, WaitStep)) and s.on_timeout is not None:
                if s.on_timeout not in known:
                    problems.append(f"wait {s.id!r} times out to unknown step {s.on_timeout!r}")
                else:
                    error_edges.setdefault(s.id, s.on_timeout)
        for f in self._finish:
            if f not in known:
                problems.append(f"finish {f!r} is not a step")
        finish = set(self._finish) | {s for s in ids if s not in edges and s not in routes}
        if ids and not finish:
            problems.append("missing finish: every step has an outgoing edge, so no run can end")
        by_id = {s.id: s for s in self._steps}
        if entry in known:
            reach = {entry}
            todo = [entry]
            while todo:
                cur = todo.pop()
                nxt = list(edges.get(cur, ()))
                if cur in routes:
                    nxt.extend(routes[cur].targets)
                if cur in error_edges:
                    nxt.append(error_edges[cur])
                for nxt_id in nxt:
                    if nxt_id in known and nxt_id not in reach:
                        reach.add(nxt_id)
                        todo.append(nxt_id)
                step = by_id.get(cur)
                if isinstance(step, ConditionStep):
                    for nested_step in step.steps:
                        target = error_edges.get(nested_step.id)
                        if target is not None and target in known and target not in reach:
                            reach.add(target)
                            todo.append(target)
            for sid in ids:
                if sid and sid not in reach:
                    problems.append(f"step {sid!r} is unreachable from entry {entry!r}")
        if self.keep_last_n is not None and self.keep_last_n < 1:
            problems.append("keep_last_n must be at least 1 (the latest checkpoint is kept)")
        if problems:
            raise FlowDefinitionError(self.name, problems)
        assert entry is not None
        steps = by_id
        topology = {
            "name": self.name,
            "user_version": self.version,
            "steps": [_shape(s) for s in self._steps],
            "edges": sorted(self._edges),
            "routes": {k: list(v.targets) for k, v in sorted(routes.items())},
            "entry": entry,
            "finish": sorted(finish),
            "state": sorted(fields),
        }
        digest = hashlib.sha256(json.dumps(topology, sort_keys=True).encode()).hexdigest()[:16]
        lean = {sid: _arity(s.fn) for sid, s in steps.items() if _is_lean(s)}
        return CompiledFlow(
            name=self.name,
            state_type=self.state_type,
            user_version=self.version,
            steps=MappingProxyType(steps),
            nested=MappingProxyType(nested),
            edges=MappingProxyType({k: tuple(v) for k, v in edges.items()}),
            routes=MappingProxyType(routes),
            entry=entry,
            finish=frozenset(finish),
            retry=self.retry,
            max_steps=self.max_steps,
            delete_on_success=self.delete_on_success,
            keep_last_n=self.keep_last_n,
            version=f"{self.version}+{digest}",
            deadline_s=self.deadline_s,
            inputs=self.inputs,
            description=self.description,
            on_timed_out=self.on_timed_out,
            on_cancel=self.on_cancel,
            lean=MappingProxyType(lean),
            lean_next=MappingProxyType(
                {
                    sid: () if sid in finish else tuple(edges.get(sid, ()))
                    for sid in lean
                    if sid not in routes
                }
            ),
        )


def _is_lean(step: AnyStep) -> TypeGuard[Step]:
    """Whether ``step`` may run on a driver's lean path (``CompiledFlow.lean``)."""
    return (
        type(step) is Step
        and step.policy.timeout_s is None
        and step.policy.recovery == "idempotent"
        and not inspect.iscoroutinefunction(step.fn)
    )


def _shape(step: AnyStep) -> list[Any]:
    """The part of a step that belongs to the topology fingerprint."""
    shape: list[Any] = [step.id, step.kind]
    if isinstance(step, ConditionStep):
        shape.append([n.id for n in step.steps])
    elif isinstance(step, ParallelStep):
        shape.append([b for b, _ in step.branches])
        shape.append(sorted(step.reducers))
    elif isinstance(step, AwaitStep):
        shape.append([step.into, step.on_timeout])
    elif isinstance(step, WaitStep):
        shape.append([step.wait_kind, step.name, step.into, step.on_timeout])
    if step.policy.on_error == "route":
        shape.append(["error_route", step.policy.error_route])
    return shape
