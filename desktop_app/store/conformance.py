"""The store conformance suite, shipped with the package: any backend runs it
on itself (as LangGraph ships ``checkpoint-conformance`` for its savers).

A backend provides a :class:`Harness`: ``open()`` returns a NEW store object
(a new connection) on the same database each time it is called, so checks can
race two connections; ``agent_log(store)`` returns the agent log over a store
(or the harness has none); ``capabilities`` is what the store declares.
:func:`validate` runs every check and returns the failures; a test suite can
instead parametrise over :data:`CHECKS` and call :func:`run_check` (the
project's ``tests/contract`` does, on memory, SQLite and PostgreSQL).

Every method of every role protocol in :mod:`desktop_app.store.protocol` is
covered by at least one check (:func:`coverage` counts them; an uncovered
method is a failure of the suite itself). A check that needs a capability
(``sql`` for domain writes) is skipped on a store that does not declare it;
``checks_for(capabilities)`` lists what applies.

Checks raise :class:`ConformanceError` (an ``AssertionError``) saying what
the store did wrong. Times are UTC epoch seconds.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from desktop_app.errors import (
    AgentRunLeasedError,
    CheckpointNotFoundError,
    DomainWriteError,
    DuplicateFlowKeyError,
    LeaseLostError,
    RevisionConflictError,
    RunLeasedError,
    StoreError,
)
from desktop_app.store.domain import digest, tidy
from desktop_app.store.protocol import (
    AgentLog,
    AgentRun,
    ChangeFeed,
    ChangePush,
    Checkpoint,
    CheckpointStore,
    DomainStore,
    Intent,
    Lease,
    Leases,
    Mailbox,
    Outbox,
    RunLog,
    RunRecord,
    StepRecord,
    Wait,
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


CHECKS: list[Check] = []


def _check(
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


# -- helpers -------------------------------------------------------------------


def _ok(cond: object, what: str) -> None:
    if not cond:
        raise ConformanceError(what)


def _eq(got: object, want: object, what: str) -> None:
    if got != want:
        raise ConformanceError(f"{what}: got {got!r}, expected {want!r}")


@contextlib.contextmanager
def _raises(kind: type[BaseException], what: str, message: str | None = None) -> Iterator[None]:
    """Expect ``kind`` from the block; with ``message``, exactly that text."""
    try:
        yield
    except kind as exc:
        if message is not None:
            _eq(str(exc), message, what)
        return
    raise ConformanceError(f"{what}: expected {kind.__name__}, nothing was raised")


def _id() -> str:
    return uuid.uuid4().hex


def _run(run_id: str, t: float = 1000.0, **kw: Any) -> RunRecord:
    return RunRecord(run_id, kw.pop("flow", "f"), kw.pop("version", "v1"), "running", 0, t, t, **kw)


def _cp(
    run_id: str, rev: int, state: dict[str, Any] | None = None, status: Any = "running", **kw: Any
) -> Checkpoint:
    return Checkpoint(
        run_id,
        rev,
        status,
        state if state is not None else {},
        kw.pop("steps", {}),
        kw.pop("frontier", ("a",)),
        kw.pop("t", 1000.0) + rev,
        **kw,
    )


def _threads(n: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errors:
        raise errors[0]


def _clocked(h: Harness) -> tuple[CheckpointStore, ManualTime, float | None]:
    """A store whose lease clock the check controls: an injected clock, or
    (``database_clock``) explicit ``now=`` arguments from a manual time
    started at the database's now."""
    if "database_clock" in h.capabilities:
        s = h.store()
        return s, ManualTime(s.now()), 0.0
    clock = ManualTime()
    return h.store(clock.now), clock, None


# -- RunLog ----------------------------------------------------------------------


@_check("RunLog.create_run", "RunLog.latest", "RunLog.get_run", "RunLog.get_checkpoint")
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


@_check("RunLog.create_run", "RunLog.append", "RunLog.latest", "RunLog.get_checkpoint")
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


@_check("RunLog.append", "RunLog.latest")
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


@_check("RunLog.append")
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


@_check("RunLog.history", "RunLog.get_checkpoint")
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


@_check("RunLog.history_page")
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


@_check("RunLog.create_run")
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
    s.append(_cp(r1, 1, status="completed"))
    s.create_run(_run(r2, flow_key=key), _cp(r2, 0))  # the first one finished


@_check("RunLog.create_run", "RunLog.append", "RunLog.latest")
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


@_check("RunLog.create_run", "RunLog.append", "RunLog.latest")
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


@_check("RunLog.create_run", "RunLog.get_run")
def a_new_run_takes_its_scope_revision_and_status_from_the_store(h: Harness) -> None:
    """``create_run`` files the run under the store's scope at revision 0,
    with its first checkpoint's status, whatever the record passed says."""
    s = h.store()
    rid = _id()
    given = RunRecord(rid, "f", "v1", "pending", 7, 1000.0, 1000.0, scope=f"not-{s.scope}")
    s.create_run(given, _cp(rid, 0, status="running"))
    run = s.get_run(rid)
    _eq((run.scope, run.revision, run.status), (s.scope, 0, "running"), "the stored run")


@_check("RunLog.append", "RunLog.get_run", "Leases.claim")
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


@_check("RunLog.runs_of_other_versions")
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


@_check("RunLog.update_latest")
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


@_check("RunLog.list_runs")
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


@_check("RunLog.runs_of_other_versions")
def runs_of_other_versions_lists_live_old_runs(h: Harness) -> None:
    s = h.store()
    old, done, new = _id(), _id(), _id()
    s.create_run(_run(old, version="v0"), _cp(old, 0))
    s.create_run(_run(done, t=1001.0, version="v0"), _cp(done, 0))
    s.append(_cp(done, 1, status="completed"))
    s.create_run(_run(new, t=1002.0, version="v1"), _cp(new, 0))
    _eq([r.run_id for r in s.runs_of_other_versions("f", "v1")], [old], "live runs of v0")
    _eq(s.runs_of_other_versions("other", "v1"), [], "another flow")


@_check("RunLog.delete_run")
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


@_check("RunLog.prune")
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


@_check("RunLog.delete_run", "RunLog.create_run", "RunLog.latest", "RunLog.append")
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


@_check("RunLog.create_run")
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


@_check(
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


@_check("RunLog.head")
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


# -- Leases ----------------------------------------------------------------------


@_check("Leases.claim", "Leases.release", "RunLog.append")
def lease_claim_fence_release(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    got = s.claim(rid, Lease("a", 1030.0, 1000.0, ttl_s=30.0), 1000.0)
    _eq(got.lease_owner, "a", "claimed")
    try:
        s.claim(rid, Lease("b", 1040.0, 1010.0, ttl_s=30.0), 1010.0)
    except RunLeasedError as exc:
        _eq((exc.run_id, exc.owner), (rid, "a"), "the refusal names the run and its holder")
        _eq(exc.expires_at, s.get_run(rid).lease_expires_at, "and when its lease runs out")
    else:
        raise ConformanceError("claiming a live lease: expected RunLeasedError, nothing raised")
    with _raises(LeaseLostError, "appending under someone else's live lease"):
        s.append(_cp(rid, 1), lease=Lease("b", 1040.0, 1010.0))
    s.release(rid, "b")
    _eq(s.get_run(rid).lease_owner, "a", "release by a non-holder is a no-op")
    s.release(rid, "a")
    _eq((s.get_run(rid).lease_owner, s.get_run(rid).lease_expires_at), (None, None), "released")
    s.claim(rid, Lease("c", 1060.0, 1030.0), 1030.0)
    s.append(_cp(rid, 1, status="waiting"))
    _eq(s.get_run(rid).lease_owner, None, "a waiting run has no lease")
    with _raises(CheckpointNotFoundError, "claiming a missing run"):
        s.claim(_id(), Lease("a", 1.0, 0.0), 0.0)


@_check("Leases.claim", "RunLog.append")
def a_takeover_is_a_compare_and_set_on_the_holder(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    t = s.now()
    s.claim(rid, Lease("gone", t + 3600.0, t, ttl_s=3600.0), t)
    with _raises(RunLeasedError, "a lease that names no holder taking a held run"):
        s.claim(rid, Lease("a", t + 60.0, math.inf, ttl_s=60.0), math.inf)
    with _raises(RunLeasedError, "taking over a live lease of another host's owner"):
        s.claim(rid, Lease("a", t + 60.0, t, ttl_s=60.0, takes_over="gone"), t)
    dead = Lease("a", t + 60.0, math.inf, ttl_s=60.0, takes_over="gone")
    _eq(s.claim(rid, dead, t).lease_owner, "a", "the first taker of a dead owner wins")
    late = Lease("b", t + 60.0, math.inf, ttl_s=60.0, takes_over="gone")
    with _raises(RunLeasedError, "a second taker of the owner the first one replaced"):
        s.claim(rid, late, t)
    with _raises(LeaseLostError, "appending as a second taker of the replaced owner"):
        s.append(_cp(rid, 1), lease=late)
    _eq(s.get_run(rid).lease_owner, "a", "the first taker keeps the run")
    s.append(_cp(rid, 1), lease=Lease("a", t + 60.0, t, ttl_s=60.0))
    _eq(s.get_run(rid).revision, 1, "the winner saves")
    other = _id()
    s.create_run(_run(other), _cp(other, 0))
    s.claim(other, Lease("expired", t, t, ttl_s=0.0), t)
    with _raises(LeaseLostError, "an append whose lease names no holder, on an expired lease"):
        s.append(_cp(other, 1), lease=Lease("c", t + 60.0, t + 1.0, ttl_s=60.0))
    taker = Lease("c", t + 61.0, t + 1.0, ttl_s=60.0, takes_over="expired")
    s.append(_cp(other, 1), lease=taker)
    _eq(s.get_run(other).lease_owner, "c", "an expired lease taken over by naming its owner")


@_check("Leases.renew")
def renew_extends_only_our_runs_that_still_run(h: Harness) -> None:
    s = h.store()
    ours, theirs, waiting, free = (_id() for _ in range(4))
    for rid in (ours, theirs, waiting, free):
        s.create_run(_run(rid), _cp(rid, 0))
    t = s.now()
    mine = Lease("me", t + 30.0, t, ttl_s=30.0)
    s.claim(ours, mine, t)
    s.claim(theirs, Lease("other", t + 30.0, t, ttl_s=30.0), t)
    s.claim(waiting, mine, t)
    s.append(_cp(waiting, 1, status="waiting"), lease=mine)
    _eq(s.renew([], mine), set(), "nothing to renew")
    got = s.renew([ours, theirs, waiting, free, _id()], Lease("me", t + 600.0, t, ttl_s=600.0))
    _eq(got, {ours}, "only the running run this owner holds is renewed")
    _eq((s.get_run(ours).lease_expires_at or 0.0) > t + 300.0, True, "its lease runs on")
    _eq(s.get_run(theirs).lease_owner, "other", "another owner's lease is left as it is")
    _eq(s.get_run(waiting).lease_owner, None, "a waiting run is not leased again")
    _eq(s.get_run(free).lease_owner, None, "a free run is not leased by a heartbeat")


@_check("Leases.now", "Leases.claim_runnable", "Leases.claim")
def lease_expiry_on_an_injected_clock(h: Harness) -> None:
    s, clock, db = _clocked(h)
    if db is None:
        _eq(s.now(), clock.now(), "now() is the injected clock")
    else:
        t = s.now()
        _ok(abs(t - clock.now()) < 60, "now() is the database clock")

    def at() -> float | None:
        return None if db is None else clock.now()

    rid = _id()
    s.create_run(_run(rid, t=clock.now()), _cp(rid, 0, t=clock.now()))
    (got,) = s.claim_runnable("a", 30.0, 10, now=at())
    _eq(got.lease_owner, "a", "claimed by a")
    _ok(abs((got.lease_expires_at or 0) - (clock.now() + 30.0)) < 1.0, "the lease carries its TTL")
    clock.advance(29)
    _eq(s.claim_runnable("b", 30.0, 10, now=at()), [], "a live lease is not handed out")
    clock.advance(2)
    (again,) = s.claim_runnable("b", 30.0, 10, now=at())
    _eq(again.lease_owner, "b", "an expired lease is taken over")
    _eq(s.get_run(rid).lease_owner, "b", "stored")


@_check("Leases.claim", "Leases.claim_runnable", "Outbox.claim_intents")
def claims_use_the_time_they_are_given(h: Harness) -> None:
    """A lease or an intent claim that runs out at exactly ``now`` is free;
    ``claim_runnable`` and ``claim_intents`` judge expiry at the ``now``
    passed, not the store's clock; an owner may claim its own live lease."""
    s, clock, _ = _clocked(h)
    t = clock.now()
    rid, other = _id(), _id()
    s.create_run(_run(rid, t=t), _cp(rid, 0, t=t))
    s.create_run(_run(other, t=t + 1), _cp(other, 0, t=t))
    s.claim(rid, Lease("a", t + 30.0, t, ttl_s=30.0), t)
    _eq(s.claim(rid, Lease("a", t + 40.0, t + 10, ttl_s=30.0), t + 10).lease_owner, "a", "again")
    s.claim(other, Lease("a", t + 500.0, t, ttl_s=500.0), t)
    got = s.claim_runnable("b", 60.0, 10, wakeable=False, now=t + 40.0)
    _eq([r.run_id for r in got], [rid], "a lease out at exactly now is free; a live one is not")
    intents = [Intent(f"{other}:send:0:0", other, "send", "dest", {})]
    s.append(_cp(other, 1, t=t), intents=intents)
    _eq(len(s.claim_intents("d1", 60.0, 10, now=t + 100.0)), 1, "claimed until now + 60")
    _eq(s.claim_intents("d2", 60.0, 10, now=t + 159.0), [], "live one second before")
    _eq(len(s.claim_intents("d2", 60.0, 10, now=t + 160.0)), 1, "free at exactly its expiry")


@_check("Leases.claim_runnable")
def claim_runnable_hands_out_what_may_run(h: Harness) -> None:
    s = h.store()
    t = s.now()
    ids = {
        name: _id()
        for name in ("pending", "running", "failed", "done", "waiting", "other", "ready", "dead")
    }
    for i, (name, rid) in enumerate(ids.items()):
        status = {
            "pending": "pending",
            "failed": "failed",
            "waiting": "waiting",
            "ready": "waiting",
        }.get(name, "running")
        s.create_run(
            _run(rid, t=t + i, flow="g" if name == "other" else "f"),
            _cp(rid, 0, status=status, t=t),
        )
    s.append(_cp(ids["done"], 1, status="completed", t=t))
    w = Wait(f"{ids['ready']}:w:0", "w", "signal", t, name="go", key="k")
    s.append(_cp(ids["ready"], 1, status="waiting", t=t, waits=(w,)))
    s.send_signal("go", "k", {}, t)
    s.claim(ids["dead"], Lease("ghost", t + 3600, t), t)
    got = s.claim_runnable("me", 60.0, 100, flows=["f"])
    _eq(
        [r.run_id for r in got],
        [ids["pending"], ids["running"], ids["ready"]],
        "claimed, interrupted first",
    )
    _ok(all(r.lease_owner == "me" for r in got), "returned with the lease set")
    _eq(s.claim_runnable("me2", 60.0, 100, flows=["f"]), [], "nothing twice")
    mine = s.claim_runnable("me", 60.0, 100, flows=["f"], wakeable=False)
    _eq([r.run_id for r in mine], [ids["pending"], ids["running"]], "the holder may claim again")
    dead = s.claim_runnable("me", 60.0, 100, presumed_dead=lambda o: o == "ghost", wakeable=False)
    _ok(ids["dead"] in [r.run_id for r in dead], "a dead owner's live lease is taken over")
    _ok(ids["other"] in [r.run_id for r in dead], "flows=None claims every flow")
    failed = s.claim_runnable("x", 60.0, 1, statuses=["failed"], wakeable=False)
    _eq([r.run_id for r in failed], [ids["failed"]], "statuses and limit")
    _eq(s.claim_runnable("x", 60.0, 0), [], "limit 0")
    one = s.claim_runnable("me", 60.0, 1, presumed_dead=lambda o: o == "ghost", wakeable=False)
    _eq([r.run_id for r in one], [ids["pending"]], "limit with presumed_dead: the oldest only")


@_check("RunLog.create_run", "RunLog.get_run")
def a_lease_given_at_creation_keeps_its_length(h: Harness) -> None:
    """A run created already leased (a worker starting what it runs) holds
    the lease for exactly the length it was given: ``lease_expires_at -
    created_at``, on the store's clock, never rounded up to a second."""
    s, clock, db = _clocked(h)
    t = clock.now()
    rid = _id()
    s.create_run(_run(rid, t=t, lease_owner="a", lease_expires_at=t + 0.25), _cp(rid, 0, t=t))
    got = s.get_run(rid)
    _eq(got.lease_owner, "a", "leased at creation")
    held = (got.lease_expires_at or 0.0) - t
    if db is None:
        _eq(held, 0.25, "the lease's length on the injected clock")
    else:  # the database clock ran on a little between t and the INSERT
        _ok(0.25 <= held < 0.75, f"the lease's length on the database clock (got {held:.3f} s)")
    gone = _id()
    s.create_run(_run(gone, t=t, lease_owner="a", lease_expires_at=t - 5.0), _cp(gone, 0, t=t))
    taken = s.claim(gone, Lease("b", t + 60.0, t + 1.0, ttl_s=59.0, takes_over="a"), t + 1.0)
    _eq(taken.lease_owner, "b", "a lease already out at creation holds nothing")


@_check("Leases.claim_runnable", "Mailbox.wakeable_runs")
def claiming_and_waking_runs_is_paged_by_default(h: Harness) -> None:
    s = h.store()
    t = s.now()
    for i in range(1001):  # waiting runs whose run deadline has passed
        rid = _id()
        s.create_run(
            _run(rid, t=t - 100 + i * 0.001, deadline_at=t - 10), _cp(rid, 0, status="waiting")
        )
    _eq(len(s.wakeable_runs(t)), 1000, "wakeable runs by default")
    _eq(len(s.wakeable_runs(t, limit=1001)), 1001, "wakeable runs with limit=1001")
    _eq(len(s.claim_runnable("me", 60.0)), 100, "claimed runs by default")


@_check("Leases.claim_runnable")
def four_threads_claim_each_run_once(h: Harness) -> None:
    stores = [h.store() for _ in range(4)]
    t = stores[0].now()
    ids = [_id() for _ in range(24)]
    for i, rid in enumerate(ids):
        stores[0].create_run(_run(rid, t=t + i), _cp(rid, 0, status="pending", t=t))
    claimed: list[list[str]] = [[] for _ in range(4)]

    def claimer(i: int) -> None:
        while True:  # a holder may claim its own runs again: stop when nothing is new
            got = stores[i].claim_runnable(f"w{i}", 60.0, len(claimed[i]) + 3, wakeable=False)
            new = [r.run_id for r in got if r.run_id not in claimed[i]]
            if not new:
                return
            claimed[i].extend(new)

    _threads(4, claimer)
    every = [rid for c in claimed for rid in c]
    _eq(sorted(every), sorted(ids), "each run claimed exactly once by 4 concurrent claimants")
    for i, c in enumerate(claimed):
        for rid in c:
            _eq(stores[0].get_run(rid).lease_owner, f"w{i}", "the stored lease names the claimant")


# -- Mailbox ---------------------------------------------------------------------


@_check("Mailbox.send_signal", "Mailbox.next_signal", "RunLog.append")
def signals_are_consumed_once(h: Harness) -> None:
    s = h.store()
    name, key = _id(), "k"
    first = s.send_signal(name, key, {"n": 1}, 10.0, dedupe_key=_id())
    second = s.send_signal(name, key, {"n": 2}, 11.0)
    got = s.next_signal(name, key)
    _ok(got is not None and got.signal_id == first and got.payload == {"n": 1}, "oldest first")
    _ok(got is not None and (got.name, got.key) == (name, key), "its name and key")
    _ok(got is not None and got.sent_at == 10.0, "when it was sent")
    _eq(s.next_signal(name, "other"), None, "another key")
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    s.append(_cp(rid, 1), consume=[(first, f"{rid}:w:0")])
    nxt = s.next_signal(name, key)
    _ok(nxt is not None and nxt.signal_id == second, "a consumed signal is not handed out again")
    with _raises(RevisionConflictError, "consuming a signal twice"):
        s.append(_cp(rid, 2), consume=[(first, f"{rid}:w:1")])
    _eq(s.get_run(rid).revision, 1, "the refused append saved nothing")


@_check("Mailbox.send_signal")
def signal_dedupe_from_two_connections(h: Harness) -> None:
    a, b = h.store(), h.store()
    name, dedupe = _id(), _id()
    ids: list[int] = []
    _threads(4, lambda i: ids.append((a, b)[i % 2].send_signal(name, "k", {"i": i}, 5.0, dedupe)))
    _eq(len(set(ids)), 1, "four sends with one dedupe key from two connections store one signal")
    got = b.next_signal(name, "k")
    _ok(got is not None and got.signal_id == ids[0], "that signal")


@_check("Mailbox.publish_event", "Mailbox.first_event")
def events_are_broadcast(h: Harness) -> None:
    s = h.store()
    kind = _id()
    e1 = s.publish_event(kind, {"n": 1}, 100.0)
    e2 = s.publish_event(kind, {"n": 2}, 200.0)
    _ok(e2 != e1, "distinct ids")
    got = s.first_event(kind, 50.0)
    _ok(got is not None and got.event_id == e1 and got.payload == {"n": 1}, "first since 50")
    _ok(got is not None and got.type == kind and got.published_at == 100.0, "its type and time")
    at = s.first_event(kind, 100.0)
    _ok(at is not None and at.event_id == e1, "an event at exactly `since` counts")
    got = s.first_event(kind, 150.0)
    _ok(got is not None and got.event_id == e2, "first since 150")
    _eq(s.first_event(kind, 250.0), None, "none since 250")
    _eq(s.first_event(_id(), 0.0), None, "another type")


@_check(
    "Mailbox.due_waits",
    "Mailbox.next_deadline",
    "Mailbox.wakeable_runs",
    "Mailbox.runs_waiting_for",
)
def waits_deadlines_and_wakeups(h: Harness) -> None:
    s = h.store()
    timer, sig, ev, late = _id(), _id(), _id(), _id()
    sname, etype = _id(), _id()
    waits = {
        timer: Wait(f"{timer}:t:0", "t", "timer", 10.0, deadline_at=50.0),
        sig: Wait(f"{sig}:s:0", "s", "signal", 10.0, name=sname, key="k", deadline_at=90.0),
        ev: Wait(f"{ev}:e:0", "e", "event", 10.0, name=etype),
    }
    for rid, w in waits.items():
        s.create_run(_run(rid), _cp(rid, 0))
        s.append(_cp(rid, 1, status="waiting", waits=(w,)))
    s.create_run(_run(late, deadline_at=70.0), _cp(late, 0, status="waiting"))
    _eq(s.next_deadline(), 50.0, "earliest deadline")
    _eq(s.due_waits(60.0), [(timer, f"{timer}:t:0")], "due at 60")
    _eq(s.due_waits(40.0), [], "none due at 40")
    _eq(s.wakeable_runs(40.0), [], "nothing to act on at 40")
    _eq(s.wakeable_runs(75.0), [timer, late], "due deadlines, by deadline")
    s.send_signal(sname, "k", None, 20.0)
    s.publish_event(etype, None, 30.0)
    _eq(set(s.wakeable_runs(40.0)), {sig, ev}, "a deliverable signal and event")
    _eq(s.wakeable_runs(75.0)[:2], [timer, late], "deadlines before signals")
    _eq(s.runs_waiting_for("signal", sname, "k"), [sig], "waiting for the signal")
    _eq(s.runs_waiting_for("signal", sname), [sig], "any key")
    _eq(s.runs_waiting_for("event", etype), [ev], "waiting for the event")
    s.append(_cp(timer, 2))
    _eq(s.next_deadline(), 90.0, "a resolved wait's deadline is gone")


@_check("Mailbox.wakeable_runs", "Mailbox.send_signal", "Mailbox.publish_event")
def wakeable_runs_orders_deadlines_and_matches_deliveries(h: Harness) -> None:
    """Due deadlines come first, earliest first, whether a wait's or the
    run's, and a deadline at exactly ``now`` is due; a run with both a due
    deadline and a delivery ranks by its deadline. Only a signal of the
    wait's own name and key wakes it; an event published at the instant the
    wait began wakes it."""
    s = h.store()
    p = _id()[:8]
    # run ids in the reverse of deadline order, so an order by id shows
    run_dl, sig_dl, timer20, timer30 = (f"{p}-{c}" for c in "dcba")
    other_sig, ev = f"{p}-e", f"{p}-f"
    sname = _id()
    s.create_run(_run(run_dl, deadline_at=5.0), _cp(run_dl, 0, status="waiting"))
    waits = {
        sig_dl: Wait(f"{sig_dl}:s:0", "s", "signal", 1.0, name=sname, key="k", deadline_at=10.0),
        timer20: Wait(f"{timer20}:t:0", "t", "timer", 1.0, deadline_at=20.0),
        timer30: Wait(f"{timer30}:t:0", "t", "timer", 1.0, deadline_at=30.0),
        other_sig: Wait(f"{other_sig}:s:0", "s", "signal", 1.0, name=sname, key="other"),
        ev: Wait(f"{ev}:e:0", "e", "event", 40.0, name=sname),
    }
    for rid, w in waits.items():
        s.create_run(_run(rid), _cp(rid, 0))
        s.append(_cp(rid, 1, status="waiting", waits=(w,)))
    s.send_signal(sname, "k", None, 2.0)
    s.send_signal(_id(), "other", None, 2.0)
    _eq(s.wakeable_runs(5.0)[:1], [run_dl], "a run deadline at exactly now")
    _eq(s.wakeable_runs(30.0)[:4], [run_dl, sig_dl, timer20, timer30], "deadlines, by deadline")
    _eq(s.wakeable_runs(20.0)[:3], [run_dl, sig_dl, timer20], "a wait deadline at exactly now")
    _ok(other_sig not in s.wakeable_runs(30.0), "a signal of another key or name wakes nothing")
    s.publish_event(sname, None, 40.0)
    _eq(set(s.wakeable_runs(0.0)), {sig_dl, ev}, "deliveries: the signal and the event")


# -- Outbox ----------------------------------------------------------------------


def _with_intents(s: CheckpointStore, n: int) -> tuple[str, list[str]]:
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0))
    keys = [f"{rid}:send:0:{i}" for i in range(n)]
    intents = [Intent(k, rid, "send", "dest", {"i": i}) for i, k in enumerate(keys)]
    s.append(_cp(rid, 1), intents=intents)
    return rid, keys


@_check("Outbox.intents", "Outbox.claim_intents", "Mailbox.due_waits")
def listing_intents_and_due_waits_is_paged_by_default(h: Harness) -> None:
    s = h.store()
    rid, _ = _with_intents(s, 101)
    _eq(len(s.intents(["pending"])), 100, "intents by default")
    _eq(len(s.intents(["pending"], limit=101)), 101, "intents with limit=101")
    _eq(len(s.claim_intents("d", 30.0)), 100, "claimed intents by default")
    waits = tuple(Wait(f"{rid}:t:{i}", "t", "timer", 10.0, deadline_at=50.0) for i in range(1001))
    s.append(_cp(rid, 2, status="waiting", waits=waits))
    _eq(len(s.due_waits(60.0)), 1000, "due waits by default")
    _eq(len(s.due_waits(60.0, limit=1001)), 1001, "due waits with limit=1001")


@_check("Outbox.intents", "Outbox.mark_intent", "RunLog.append")
def intents_commit_with_their_checkpoint(h: Harness) -> None:
    s = h.store()
    rid, keys = _with_intents(s, 2)
    got = s.intents(["pending"])
    _eq([i.intent_id for i in got if i.run_id == rid], keys, "pending, oldest first")
    _eq(got[0].payload, {"i": 0}, "payload")
    with _raises(RevisionConflictError, "an intent id already in the outbox"):
        s.append(_cp(rid, 2), intents=[Intent(keys[0], rid, "send", "dest", {})])
    _eq(s.get_run(rid).revision, 1, "the refused append saved nothing")
    s.mark_intent(keys[0], "sending", 5.0)
    s.mark_intent(keys[0], "delivered", 6.0, receipt={"ok": 1})
    s.mark_intent(keys[1], "sending", 5.0)
    s.mark_intent(keys[1], "failed", 6.0, error="no")
    (done,) = [i for i in s.intents(["delivered"]) if i.run_id == rid]
    _eq((done.attempts, done.receipt, done.last_error), (1, {"ok": 1}, None), "delivered")
    (bad,) = [i for i in s.intents(["failed"]) if i.run_id == rid]
    _eq((bad.intent_id, bad.last_error), (keys[1], "no"), "failed")
    _eq(s.intents(["pending", "sending"], limit=1), [], "nothing left to send")


@_check("Outbox.mark_intent")
def mark_intent_with_expect_moves_only_from_that_status(h: Harness) -> None:
    s = h.store()
    rid, keys = _with_intents(s, 1)
    (key,) = keys
    _eq(s.mark_intent(key, "sending", 5.0, expect="sending"), False, "expecting the wrong status")
    (still,) = [i for i in s.intents(["pending"]) if i.run_id == rid]
    _eq((still.status, still.attempts), ("pending", 0), "the refused move changed nothing")
    _eq(s.mark_intent(key, "sending", 5.0, expect="pending"), True, "the first dispatcher")
    _eq(s.mark_intent(key, "sending", 5.0, expect="pending"), False, "the second, too late")
    (sent,) = [i for i in s.intents(["sending"]) if i.run_id == rid]
    _eq(sent.attempts, 1, "one send counted")
    _eq(s.mark_intent(key, "delivered", 6.0, receipt={"ok": 1}, expect="sending"), True, "acked")
    _eq(s.mark_intent(key, "pending", 7.0, expect="sending"), False, "no move after delivery")
    _eq(s.mark_intent(_id(), "delivered", 7.0), False, "an unknown intent does not move")


@_check("Outbox.claim_intents", "Outbox.mark_intent")
def claimed_intents_are_not_handed_to_a_peer(h: Harness) -> None:
    s, clock, db = _clocked(h)

    def at() -> float | None:
        return None if db is None else clock.now()

    _, keys = _with_intents(s, 3)
    first = s.claim_intents("d1", 60.0, 2, now=at())
    _eq([i.intent_id for i in first], keys[:2], "oldest first, limit")
    _ok(not any(i.interrupted for i in first), "pending intents are not interrupted")
    _eq(
        [i.intent_id for i in s.claim_intents("d2", 60.0, 10, now=at())],
        keys[2:],
        "the peer gets the rest",
    )
    _eq(s.claim_intents("d3", 60.0, 10, now=at()), [], "nothing while both claims live")
    _eq(
        [i.intent_id for i in s.claim_intents("d1", 60.0, 10, now=at())],
        keys[:2],
        "the holder may claim its own again",
    )
    s.mark_intent(keys[0], "sending", clock.now())  # d1 sends keys[0] ... and dies
    s.mark_intent(keys[1], "pending", clock.now(), error="retry later")  # ends the claim
    got = s.claim_intents("d3", 60.0, 10, now=at())
    _eq([i.intent_id for i in got], [keys[1]], "an intent set back to pending is free again")
    gone = s.claim_intents("d4", 60.0, 10, presumed_dead=lambda o: o == "d1", now=at())
    _eq(
        [(i.intent_id, i.interrupted) for i in gone],
        [(keys[0], True)],
        "a dead claimant's send is reconciled",
    )
    _eq(gone[0].attempts, 1, "claiming does not count an attempt")
    clock.advance(61)
    late = s.claim_intents("d5", 60.0, 10, now=at())
    _eq(sorted(i.intent_id for i in late), sorted(keys), "every claim expired")


@_check("Outbox.claim_intents", "Outbox.mark_intent")
def claim_intents_skips_what_is_done(h: Harness) -> None:
    """Delivered and failed intents are passed over, not the end of the
    scan; a delivery clears the error an earlier attempt left."""
    s = h.store()
    _, keys = _with_intents(s, 3)
    s.mark_intent(keys[0], "delivered", 5.0, receipt=1)
    s.mark_intent(keys[1], "failed", 5.0, error="no")
    _eq([i.intent_id for i in s.claim_intents("d", 30.0, 10)], keys[2:], "the pending one")
    s.mark_intent(keys[2], "sending", 6.0)
    s.mark_intent(keys[2], "pending", 6.0, error="timed out")
    s.mark_intent(keys[2], "sending", 7.0)
    s.mark_intent(keys[2], "delivered", 8.0, receipt=2)
    (done,) = [i for i in s.intents(["delivered"]) if i.intent_id == keys[2]]
    _eq((done.last_error, done.attempts, done.receipt), (None, 2, 2), "delivered after a retry")


@_check("Outbox.claim_intents")
def two_connections_claim_each_intent_once(h: Harness) -> None:
    a, b = h.store(), h.store()
    _, keys = _with_intents(a, 12)
    got: list[list[str]]

    got = [[] for _ in range(4)]

    def claimer(i: int) -> None:
        store = (a, b)[i % 2]
        while True:  # a claimant may claim its own again: stop when nothing is new
            batch = store.claim_intents(f"d{i}", 60.0, len(got[i]) + 2)
            new = [x.intent_id for x in batch if x.intent_id not in got[i]]
            if not new:
                return
            got[i].extend(new)

    _threads(4, claimer)
    every = [k for g in got for k in g]
    _eq(sorted(every), sorted(keys), "each intent claimed exactly once")


# -- ChangeFeed ------------------------------------------------------------------


@_check("ChangeFeed.data_version")
def data_version_sees_every_commit(h: Harness) -> None:
    reader, writer = h.store(), h.store()
    rid = _id()
    v0 = reader.data_version()
    _eq(reader.data_version(), v0, "stable while nothing is committed")
    writer.create_run(_run(rid), _cp(rid, 0))
    v1 = reader.data_version()
    _ok(v1 != v0, "another connection's commit changes it")
    reader.append(_cp(rid, 1))
    _ok(reader.data_version() != v1, "the store's own commit changes it")


@_check(
    "ChangeFeed.data_version",
    "RunLog.delete_run",
    "RunLog.prune",
    "Leases.release",
    "Mailbox.send_signal",
    "Mailbox.publish_event",
    "Outbox.mark_intent",
)
def every_kind_of_write_changes_data_version(h: Harness) -> None:
    """After any committed write the number differs from every value it had
    before: one that went back to an earlier value would hide a commit from
    a reader that polled before and after it."""
    s = h.store()
    rid, other = _id(), _id()
    seen = [s.data_version()]

    def changed(what: str) -> None:
        v = s.data_version()
        _ok(v not in seen, f"{what}: data_version went back to {v} (seen: {seen})")
        seen.append(v)

    s.create_run(_run(rid), _cp(rid, 0))
    changed("create_run")
    s.create_run(_run(other), _cp(other, 0))
    changed("a second create_run")
    s.append(_cp(rid, 1))
    changed("append")
    s.claim(rid, Lease("a", s.now() + 60, s.now(), ttl_s=60.0), s.now())
    changed("claim")
    s.release(rid, "a")
    changed("release")
    _eq(len(s.claim_runnable("b", 60.0, 10, wakeable=False)), 2, "both runs claimed")
    changed("claim_runnable")
    s.send_signal(_id(), "k", None, 1.0)
    changed("send_signal")
    s.publish_event(_id(), None, 1.0)
    changed("publish_event")
    key = f"{other}:send:0:0"
    s.append(_cp(other, 1), intents=[Intent(key, other, "send", "dest", {})])
    changed("append with an intent")
    _eq(len(s.claim_intents("d", 30.0, 10)), 1, "the intent claimed")
    changed("claim_intents")
    s.mark_intent(key, "sending", 2.0)
    changed("mark_intent")
    s.append(_cp(rid, 2))
    changed("a second append")
    _eq(s.prune(rid, 1), 2, "two checkpoints pruned")
    changed("prune")
    s.delete_run(other)
    changed("delete_run")


@_check("ChangePush.watch_changes", needs=["push"])
def another_connections_changes_are_pushed(h: Harness) -> None:
    watched, writer = h.store(), h.store()
    heard = threading.Event()
    stop = cast(ChangePush, watched).watch_changes(heard.set)
    try:
        rid = _id()
        writer.create_run(_run(rid), _cp(rid, 0))
        _ok(heard.wait(30), "a run created by another connection is pushed")
        heard.clear()
        writer.append(_cp(rid, 1, status="completed"))
        _ok(heard.wait(30), "another connection's status change is pushed")
    finally:
        stop()
    stop()  # a second stop does nothing


# -- DomainStore -----------------------------------------------------------------


@_check(
    "DomainStore.query", "DomainStore.write", "RunLog.append", "RunLog.create_run", needs=["sql"]
)
def builtin_domain_writes(h: Harness) -> None:
    s = h.store()
    rid = _id()
    f = digest.DigestFile("a.md", "markdown", "A", "sum", 10)
    s.create_run(_run(rid, flow="digest"), _cp(rid, 0), writes=[digest.record_file(rid, f)])
    s.append(_cp(rid, 1), writes=[digest.record_file(rid, f)])
    (row,) = s.query(digest.files_of_run(rid))
    _eq(
        (row.path, row.title, row.times_processed),
        ("a.md", "A", 2),
        "digest upsert bumps times_processed",
    )
    moves = [tidy.TidyMove(f"/d/{n}", f"/d/X/{n}", "other", "2025-01") for n in ("a", "b", "c")]
    s.append(_cp(rid, 2), writes=[tidy.record_plan(rid, moves)])
    s.append(_cp(rid, 3), writes=[tidy.record_plan(rid, moves)])  # a re-run replaces its rows
    nxt = s.query(tidy.next_planned(rid))
    _eq(nxt.src if nxt else None, "/d/a", "next planned")
    s.append(
        _cp(rid, 4),
        writes=[tidy.mark_queued(rid, "/d/a", "key-a"), tidy.mark_queued(rid, "/d/b", "key-b")],
    )
    s.append(_cp(rid, 5), writes=[tidy.skip_planned(rid, "not approved")])
    s.write(tidy.record_outcome("key-a", True))
    s.write(tidy.record_outcome("key-b", False, "link", status="refused"))
    s.write(tidy.record_outcome("key-a", False, "late"))  # moved stays moved
    got = {m.src: (m.status, m.reason) for m in s.query(tidy.moves_of_run(rid))}
    _eq(
        got,
        {"/d/a": ("moved", None), "/d/b": ("refused", "link"), "/d/c": ("skipped", "not approved")},
        "tidy rows",
    )
    by_key = s.query(tidy.move_by_key("key-b"))
    _eq(by_key.status if by_key else None, "refused", "move by key")
    _eq(s.query(tidy.move_by_key("nope")), None, "unknown key")


@_check("DomainStore.query", "DomainStore.write", needs=["sql"])
def query_is_read_only_and_write_is_atomic(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid, flow="digest"), _cp(rid, 0))
    f = digest.DigestFile("x", "text", None, None, 1)
    refused = (
        "a domain query tried to write; query() is read-only. Run writes through "
        "store.write(op) (their own transaction) or as a step's ctx.write (with its "
        "checkpoint)."
    )
    with _raises(StoreError, "a write inside query()", refused):
        s.query(lambda tx: digest.record_file(rid, f)(tx))
    _eq(s.query(digest.files_of_run(rid)), [], "the refused write left nothing")
    # a server's data_version may move with other databases' commits (its
    # documented false positives): a query is read-only when, in one of a few
    # tries, the version did not move across it; one that wrote moves it each time
    moved = []
    for _ in range(5):
        seen = s.data_version()
        s.query(digest.files_of_run(rid))
        moved.append(s.data_version() - seen)
        if moved[-1] == 0:
            break
    _eq(moved[-1], 0, f"a read-only query is not a change (moved by {moved})")

    class Boom(Exception):
        pass

    def half(tx: Any) -> None:
        digest.record_file(rid, f)(tx)
        raise Boom()

    with _raises(Boom, "an op that raises"):
        s.write(half)
    _eq(s.query(digest.files_of_run(rid)), [], "write() rolled back")
    changed = s.write(
        lambda tx: tx.execute("UPDATE runs SET error=? WHERE run_id=?", ("e", rid)).rowcount
    )
    _eq(changed, 1, "rowcount")
    row = s.query(lambda tx: tx.fetchone("SELECT error FROM runs WHERE run_id=?", (rid,)))
    _eq(row, ("e",), "fetchone")
    _eq(h.store().get_run(rid).error, "e", "write() committed")


@_check("RunLog.append", needs=["sql"])
def a_failing_domain_write_aborts_the_append(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid, flow="digest"), _cp(rid, 0))
    f = digest.DigestFile("y", "text", None, None, 1)

    def broken(tx: Any) -> None:
        tx.execute("INSERT INTO no_such_table VALUES (1)")

    try:
        s.append(_cp(rid, 1), writes=[digest.record_file(rid, f), broken])
    except DomainWriteError as exc:  # the step's write, never a conflict of the run
        _eq((exc.table, exc.constraint), ("no_such_table", None), "a missing table")
    else:
        raise ConformanceError("an append whose domain write fails: nothing was raised")
    _eq(s.get_run(rid).revision, 0, "nothing appended")
    _eq(s.query(digest.files_of_run(rid)), [], "the first domain write rolled back too")

    def no_kind(tx: Any) -> None:
        tx.execute(
            "INSERT INTO digest_files(run_id, path, kind, size_bytes) VALUES (?, 'p', NULL, 1)",
            (rid,),
        )

    try:
        s.append(_cp(rid, 1), writes=[digest.record_file(rid, f), no_kind])
    except DomainWriteError as exc:
        _eq(exc.table, "digest_files", "the table of a broken constraint")
        _eq(exc.constraint is not None and not exc.retryable, True, "a constraint, final")
    else:
        raise ConformanceError("a domain write breaking NOT NULL: nothing was raised")
    _eq(s.get_run(rid).revision, 0, "nothing appended after a broken constraint")


@_check("DomainStore.query", "DomainStore.write", unless=["sql"])
def without_sql_domain_calls_are_refused(h: Harness) -> None:
    s = h.store()
    rid = _id()
    with _raises(StoreError, "query() without the sql capability"):
        s.query(digest.files_of_run(rid))
    with _raises(StoreError, "write() without the sql capability"):
        s.write(tidy.record_outcome("k", True))
    with _raises(StoreError, "domain writes without the sql capability"):
        s.create_run(
            _run(rid),
            _cp(rid, 0),
            writes=[digest.record_file(rid, digest.DigestFile("p", "t", None, None, 1))],
        )


@_check("CheckpointStore.close")
def close_keeps_what_was_committed(h: Harness) -> None:
    s = h.store()
    rid = _id()
    s.create_run(_run(rid), _cp(rid, 0, {"kept": True}))
    s.close()
    _eq(dict(h.store().latest(rid).state), {"kept": True}, "committed before close")
    _ok(isinstance(s.capabilities, frozenset), "capabilities are declared")


# -- AgentLog --------------------------------------------------------------------


def _agent(h: Harness) -> tuple[AgentLog, CheckpointStore]:
    if h.agent_log is None:
        raise ConformanceError("no agent log in this harness")
    s = h.store()
    return h.agent_log(s), s


def _agent_run(rid: str, **kw: Any) -> AgentRun:
    return AgentRun(
        rid, kw.pop("agent", "helper"), kw.pop("status", "running"), "hi", 1.0, 1.0, **kw
    )


@_check("AgentLog.create", "AgentLog.get", "AgentLog.messages", "AgentLog.list")
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


@_check("AgentLog.update", "AgentLog.tool_result", "AgentLog.tool_results", "AgentLog.mark_reused")
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


@_check("AgentLog.claim", "AgentLog.release", "AgentLog.update")
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


@_check(
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


@_check("AgentLog.create", "AgentLog.update", "AgentLog.get", "AgentLog.tool_result")
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


@_check("AgentLog.claim", "AgentLog.update")
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


@_check("AgentLog.claim")
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
