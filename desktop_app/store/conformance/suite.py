"""The suite's machinery: the :class:`Harness` a backend provides, the
:class:`Check` registry (:data:`CHECKS`, filled by the role modules through
:func:`check`), and :func:`validate` / :func:`run_check` / :func:`coverage`.

Knows no role and no table: the checks live in one module per role protocol
(``run_log``, ``leases``, ``mailbox``, ``outbox``, ``change_feed``,
``domain_store``, ``checkpoint_store``, ``agent_log``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from desktop_app.store.protocol import (
    AgentLog,
    ChangeFeed,
    ChangePush,
    CheckpointStore,
    DomainStore,
    Leases,
    Mailbox,
    Outbox,
    RunLog,
)

#: The role protocols the suite covers, by name.
ROLES: dict[str, type] = {
    "RunLog": RunLog,
    "Leases": Leases,
    "Mailbox": Mailbox,
    "Outbox": Outbox,
    "ChangeFeed": ChangeFeed,
    "ChangePush": ChangePush,
    "DomainStore": DomainStore,
    "CheckpointStore": CheckpointStore,
    "AgentLog": AgentLog,
}


class ConformanceError(AssertionError):
    """A store broke its contract; the message says how."""


class ManualTime:
    """A clock a check moves by hand: ``now()`` returns ``t``."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Harness:
    """How the suite reaches a backend.

    Attributes:
        open: ``open(clock=None)`` -> a new store (new connection) on the
            test's database; ``clock`` (a ``() -> float``) is injected into
            stores without the ``database_clock`` capability.
        capabilities: what the store declares (``store.capabilities``).
        agent_log: ``agent_log(store)`` -> the agent log over ``store``, or
            ``None`` when the backend has none (AgentLog checks are skipped).
    """

    open: Callable[..., CheckpointStore]
    capabilities: frozenset[str]
    agent_log: Callable[[CheckpointStore], AgentLog] | None = None
    _opened: list[CheckpointStore] = field(default_factory=list)

    def store(self, clock: Callable[[], float] | None = None) -> CheckpointStore:
        """A new store on the database (closed by :meth:`close_all`)."""
        s = self.open(clock=clock) if clock is not None else self.open()
        self._opened.append(s)
        return s

    def close_all(self) -> None:
        for s in reversed(self._opened):
            with contextlib.suppress(Exception):
                s.close()
        self._opened.clear()


@dataclass(frozen=True)
class Check:
    """One conformance check: ``covers`` names ``Role.method`` entries."""

    name: str
    covers: tuple[str, ...]
    needs: frozenset[str]
    fn: Callable[[Harness], None]
    unless: frozenset[str] = frozenset()


#: Every check, in registration order (the role modules append to it on import).
CHECKS: list[Check] = []


def check(
    *covers: str, needs: Sequence[str] = (), unless: Sequence[str] = ()
) -> Callable[[Callable[[Harness], None]], Any]:
    def register(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
        CHECKS.append(Check(fn.__name__, covers, frozenset(needs), fn, frozenset(unless)))
        return fn

    return register


def role_methods() -> dict[str, list[str]]:
    """Every public method each role protocol declares itself (not inherited)."""
    out: dict[str, list[str]] = {}
    for name, proto in ROLES.items():
        out[name] = sorted(
            m for m, v in vars(proto).items() if not m.startswith("_") and inspect.isfunction(v)
        )
    return out


def coverage() -> dict[str, int]:
    """``"Role.method"`` -> how many checks cover it (0 = uncovered)."""
    counts = {f"{r}.{m}": 0 for r, ms in role_methods().items() for m in ms}
    for c in CHECKS:
        for key in c.covers:
            if key not in counts:
                raise ConformanceError(f"check {c.name} covers unknown method {key}")
            counts[key] += 1
    return counts


def checks_for(capabilities: frozenset[str], *, agent_log: bool = True) -> list[Check]:
    """The checks that apply to a store with ``capabilities``."""
    return [
        c
        for c in CHECKS
        if c.needs <= capabilities
        and not (c.unless & capabilities)
        and (agent_log or not any(k.startswith("AgentLog.") for k in c.covers))
    ]


def run_check(check: Check, harness: Harness) -> None:
    """Run one check; closes every store it opened. Raises ConformanceError."""
    try:
        check.fn(harness)
    finally:
        harness.close_all()


def validate(make_harness: Callable[[], Harness]) -> list[tuple[str, str]]:
    """Run every applicable check, each on a fresh database from
    ``make_harness()``; returns ``(check name, error)`` failures (empty: the
    store conforms)."""
    failures: list[tuple[str, str]] = []
    probe = make_harness()
    for c in checks_for(probe.capabilities, agent_log=probe.agent_log is not None):
        try:
            run_check(c, make_harness())
        except Exception as exc:
            failures.append((c.name, f"{type(exc).__name__}: {exc}"))
    return failures


def run_conformance(
    new_database: Callable[[], Callable[..., CheckpointStore]],
    *,
    agent_log: Callable[[CheckpointStore], AgentLog] | None = None,
) -> list[tuple[str, str]]:
    """The suite's entry point for a backend of any package: every check that
    applies to what its stores declare, each on a new empty database.

    Args:
        new_database: called once per check, makes a new empty database (a
            temporary file, a schema of its own, a memory space) with the
            backend's own schema applied, and returns its opener:
            ``open(clock=None) -> store``, a NEW store (connection) on that
            database each call; ``clock`` (``() -> float``, UTC epoch
            seconds) is passed only to stores that do not declare
            ``database_clock``.
        agent_log: ``agent_log(store)`` -> the backend's
            :class:`~desktop_app.store.protocol.AgentLog` over ``store``'s
            database; ``None`` skips the AgentLog checks.

    Returns:
        ``(check name, "ErrorType: message")`` for every failed check; empty
        when the backend conforms. The capabilities are read from the first
        store opened (``store.capabilities``), never probed.

    The suite needs no table of Flowdesk's built-in flows and imports none
    of them (its domain checks create their own table through ``store.write``).
    """

    def harness() -> Harness:
        opener = new_database()
        first = opener()
        try:
            capabilities = first.capabilities
        finally:
            first.close()
        return Harness(opener, capabilities, agent_log=agent_log)

    return validate(harness)
