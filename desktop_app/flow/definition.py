"""Flow definitions: steps, edges, routes; compiled and validated before use.

A flow is a graph of steps over a typed state (a pydantic model). Build it
with :class:`FlowBuilder`, then :meth:`FlowBuilder.compile` validates the
whole graph, reports every problem at once
(:class:`~desktop_app.errors.FlowDefinitionError`) and returns an immutable
:class:`CompiledFlow` that any number of runs may share.

Step functions are called as ``fn(state, ctx)`` (or ``fn(state)`` when they
take one parameter) and return ``None`` (no change), a ``dict`` of field
updates, or a new state instance. ``async def`` functions are awaited.
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
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from desktop_app.errors import FlowDefinitionError

S = TypeVar("S", bound=BaseModel)
RecoveryPolicy = Literal["idempotent", "resume_only"]


@functools.lru_cache(maxsize=4096)
def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return min(len(positional), 2)


@dataclass(frozen=True)
class Step:
    """A function step.

    Attributes:
        id: unique within the flow.
        fn: ``fn(state, ctx)`` → ``None | dict | state``.
        retry: retries after the first attempt; ``0`` inherits the flow's default.
        recovery: ``idempotent`` (an interrupted attempt runs again) or
            ``resume_only`` (``on_recover`` runs instead of ``fn``), as Flower's
            RecoveryPolicy REENTER_IDEMPOTENT / RESUME_ONLY.
        on_recover: called like ``fn`` for ``resume_only`` steps found in progress.
    """

    id: str
    fn: Callable[..., Any]
    retry: int = 0
    recovery: RecoveryPolicy = "idempotent"
    on_recover: Callable[..., Any] | None = None

    kind: str = field(default="function", init=False)

    @property
    def arity(self) -> int:
        return _arity(self.fn)


@dataclass(frozen=True)
class LoopStep:
    """One step that runs ``body`` repeatedly (go-micro's ``Loop`` as one step).

    Unlike go-micro, ``until(state)`` is checked *before* each iteration, so a
    loop over an empty work list runs zero times. With
    ``checkpoint_each_iteration`` (the default) every iteration is saved, with
    the domain writes it staged, so a crash resumes at the next iteration
    instead of iteration 1.

    Attributes:
        body: ``body(state, ctx)`` → ``None | dict | state``; ``ctx.iteration`` is 1-based.
        until: stop when it returns true.
        max_iterations: hard cap; reaching it ends the loop without error.
        on_iteration: ``on_iteration(iteration, state)`` after each iteration.
        progress: ``progress(state)`` → ``(done, total)`` saved with each iteration.
    """

    id: str
    body: Callable[..., Any]
    until: Callable[[Any], bool]
    max_iterations: int = 1_000_000
    checkpoint_each_iteration: bool = True
    on_iteration: Callable[[int, Any], None] | None = None
    progress: Callable[[Any], tuple[int, int]] | None = None
    retry: int = 0
    recovery: RecoveryPolicy = "idempotent"
    on_recover: Callable[..., Any] | None = None

    kind: str = field(default="loop", init=False)

    @property
    def fn(self) -> Callable[..., Any]:
        return self.body

    @property
    def arity(self) -> int:
        return _arity(self.body)


AnyStep = Step | LoopStep


@dataclass(frozen=True)
class Route:
    """A conditional route: ``pick(state)`` returns one of ``targets``."""

    source: str
    pick: Callable[[Any], str]
    targets: tuple[str, ...]


@dataclass(frozen=True)
class CompiledFlow(Generic[S]):
    """An immutable, validated flow. Safe to share between concurrent runs.

    Attributes:
        name: the flow's name (runs record it).
        state_type: the pydantic model of the state.
        user_version: the version string the author gave.
        version: fingerprint of topology + ``user_version`` (hex, 16 chars).
        entry: id of the first step.
        retry: default retries after the first attempt.
        max_steps: step executions allowed per run before it halts.
    """

    name: str
    state_type: type[S]
    user_version: str
    steps: Mapping[str, AnyStep]
    edges: Mapping[str, tuple[str, ...]]
    routes: Mapping[str, Route]
    entry: str
    finish: frozenset[str]
    retry: int
    max_steps: int
    version: str

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
    """Collects steps, edges and routes, then :meth:`compile` checks them all.

    Args:
        name: the flow's name.
        state: the pydantic model class of the state.
        version: the author's version string; part of the fingerprint.
        retry: default retries per step (n retries = n + 1 attempts).
        max_steps: step executions per run before it halts (runaway loops).
    """

    def __init__(
        self,
        name: str,
        state: type[S],
        *,
        version: str = "1",
        retry: int = 0,
        max_steps: int = 10_000,
    ) -> None:
        self.name = name
        self.state_type = state
        self.version = version
        self.retry = retry
        self.max_steps = max_steps
        self._steps: list[AnyStep] = []
        self._edges: list[tuple[str, str]] = []
        self._routes: list[Route] = []
        self._entry: str | None = None
        self._finish: list[str] = []

    def step(
        self,
        step_id: str,
        fn: Callable[..., Any],
        *,
        retry: int = 0,
        recovery: RecoveryPolicy = "idempotent",
        on_recover: Callable[..., Any] | None = None,
    ) -> FlowBuilder[S]:
        """Add a function step; returns the builder."""
        self._steps.append(Step(step_id, fn, retry, recovery, on_recover))
        return self

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
        retry: int = 0,
    ) -> FlowBuilder[S]:
        """Add a :class:`LoopStep`; returns the builder."""
        self._steps.append(
            LoopStep(
                step_id,
                body,
                until,
                max_iterations,
                checkpoint_each_iteration,
                on_iteration,
                progress,
                retry,
            )
        )
        return self

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
        """After ``source``, go to ``pick(state)``, which must be one of ``targets``."""
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
            FlowDefinitionError: lists every problem found (duplicate ids,
            missing entry or finish, edges or routes to unknown steps,
            unreachable steps).
        """
        problems: list[str] = []
        ids = [s.id for s in self._steps]
        seen: set[str] = set()
        for sid in ids:
            if not sid:
                problems.append("a step has an empty id")
            elif sid in seen:
                problems.append(f"duplicate step id {sid!r}")
            seen.add(sid)
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
        for f in self._finish:
            if f not in known:
                problems.append(f"finish {f!r} is not a step")
        finish = set(self._finish) | {s for s in ids if s not in edges and s not in routes}
        if ids and not finish:
            problems.append("missing finish: every step has an outgoing edge, so no run can end")
        if entry in known:
            reach = {entry}
            todo = [entry]
            while todo:
                cur = todo.pop()
                nxt = list(edges.get(cur, ()))
                if cur in routes:
                    nxt.extend(routes[cur].targets)
                for n in nxt:
                    if n in known and n not in reach:
                        reach.add(n)
                        todo.append(n)
            for sid in ids:
                if sid and sid not in reach:
                    problems.append(f"step {sid!r} is unreachable from entry {entry!r}")
        if problems:
            raise FlowDefinitionError(self.name, problems)
        assert entry is not None
        steps = {s.id: s for s in self._steps}
        frozen_edges = {k: tuple(v) for k, v in edges.items()}
        topology = {
            "name": self.name,
            "user_version": self.version,
            "steps": [[s.id, s.kind] for s in self._steps],
            "edges": sorted(self._edges),
            "routes": {k: list(v.targets) for k, v in sorted(routes.items())},
            "entry": entry,
            "finish": sorted(finish),
            "state": sorted(self.state_type.model_fields),
        }
        digest = hashlib.sha256(json.dumps(topology, sort_keys=True).encode()).hexdigest()[:16]
        return CompiledFlow(
            name=self.name,
            state_type=self.state_type,
            user_version=self.version,
            steps=MappingProxyType(steps),
            edges=MappingProxyType(frozen_edges),
            routes=MappingProxyType(routes),
            entry=entry,
            finish=frozenset(finish),
            retry=self.retry,
            max_steps=self.max_steps,
            version=f"{self.version}+{digest}",
        )
