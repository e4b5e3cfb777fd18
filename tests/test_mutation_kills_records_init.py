"""The quick ``__init__`` of the records the step path makes at every step
(``store/records.py``'s ``_quick_init``: ``StepRecord``, ``Checkpoint``,
``Lease``, ``RunRecord``). It replaces the one dataclasses writes, so it must
build the very same records: the same defaults (a first visit's record, a
run's scope, a lease's issue time), a fresh ``meta``/``context`` per record
(a shared one would carry one run's bookkeeping into another), still
frozen, and the same error naming the record when an argument is missing.
A record class with a ``__post_init__`` or a field outside the plain
signature keeps dataclasses' own ``__init__`` (its hook and its
signature)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pytest

from desktop_app.store.records import Checkpoint, Lease, RunRecord, StepRecord, _quick_init


def test_records_built_from_their_required_fields_take_the_declared_defaults() -> None:
    rec = StepRecord("fetch", "in_progress")
    assert (rec.attempts, rec.iteration) == (0, 0)
    assert rec.started_at is rec.finished_at is rec.error is rec.error_type is None
    assert rec.duration_ms is rec.next_retry_at is None
    cp = Checkpoint("r1", 0, "pending", {}, {}, (), 5.0)
    assert (cp.step_id, cp.progress, cp.error, cp.meta, cp.waits) == ("", None, None, {}, ())
    run = RunRecord("r1", "f", "v1", "pending", 0, 1.0, 2.0)
    assert (run.scope, run.flow_key, run.parent_run_id, run.context) == ("default", None, None, {})
    assert run.progress is run.error is run.lease_owner is run.lease_expires_at is None
    assert run.deadline_at is None
    lease = Lease("me", 30.0)
    assert (lease.issued_at, lease.ttl_s, lease.takes_over) == (0.0, None, None)
    assert lease.ttl == 30.0  # expires_at - issued_at with the default issue time


def test_every_field_given_positionally_or_by_name_is_stored_as_given() -> None:
    values = ("s", "failed", 3, 10.0, 11.5, "boom", "ValueError", 4, 1500.0, 40.0)
    names = [f.name for f in dataclasses.fields(StepRecord)]
    by_position = StepRecord(*values)
    by_name = StepRecord(**dict(zip(names, values, strict=True)))
    assert by_position == by_name
    assert [getattr(by_position, n) for n in names] == list(values)
    meta = {"steps_taken": 2}
    cp = Checkpoint("r1", 2, "running", {"x": 1}, {}, ("b",), 5.0, "a", (1, 2), "e", meta, ())
    assert cp.meta is meta and (cp.step_id, cp.progress, cp.error) == ("a", (1, 2), "e")
    ctx = {"tenant_id": "acme"}
    run = RunRecord("r1", "f", "v1", "running", 2, 1.0, 2.0, "team", "k", "p", ctx)
    assert run.context is ctx and (run.scope, run.flow_key, run.parent_run_id) == ("team", "k", "p")
    lease = Lease("me", 30.0, 20.0, None, "them")
    assert (lease.issued_at, lease.takes_over, lease.ttl) == (20.0, "them", 10.0)
    assert Lease("me", 30.0, ttl_s=math.inf).ttl == math.inf


def test_each_record_gets_its_own_meta_and_context() -> None:
    """A default factory runs per record: one run's meta or context written
    into a record made without one must not show in another's."""
    a = Checkpoint("r1", 0, "pending", {}, {}, (), 5.0)
    b = Checkpoint("r2", 0, "pending", {}, {}, (), 5.0)
    assert a.meta is not b.meta
    a.meta["halt_reason"] = "max_steps"  # type: ignore[index]  # a dict underneath
    assert b.meta == {}
    r = RunRecord("r1", "f", "v1", "pending", 0, 1.0, 2.0)
    s = RunRecord("r2", "f", "v1", "pending", 0, 1.0, 2.0)
    assert r.context is not s.context


def test_records_stay_frozen_comparable_and_replaceable() -> None:
    rec = StepRecord("fetch", "in_progress", 1, 3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.status = "completed"  # type: ignore[misc]
    assert rec == StepRecord("fetch", "in_progress", 1, 3.0)
    assert hash(rec) == hash(StepRecord("fetch", "in_progress", 1, 3.0))
    done = dataclasses.replace(rec, status="completed", finished_at=4.0)
    assert (done.step_id, done.status, done.attempts, done.finished_at) == (
        "fetch",
        "completed",
        1,
        4.0,
    )
    cp = Checkpoint("r1", 0, "pending", {}, {}, (), 5.0, meta={"a": 1})
    assert cp.evolve(revision=1).meta == {"a": 1}


def test_a_missing_argument_names_the_record() -> None:
    with pytest.raises(TypeError, match=r"^StepRecord\.__init__\(\) missing 1 required .*'status'"):
        StepRecord("fetch")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Lease\.__init__\(\) missing 1 required .*'expires_at'"):
        Lease("me")  # type: ignore[call-arg]
    assert StepRecord.__init__.__qualname__ == "StepRecord.__init__"


def test_a_record_with_a_post_init_hook_keeps_it() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("n must not be negative")

    _quick_init(Checked)
    with pytest.raises(ValueError, match="must not be negative"):
        Checked(-1)


def test_a_record_with_a_keyword_only_or_uninitialised_field_keeps_its_signature() -> None:
    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int
        b: int = field(default=2, kw_only=True)

    _quick_init(KeywordOnly)
    with pytest.raises(TypeError):
        KeywordOnly(1, 3)  # type: ignore[misc]  # b is keyword-only
    assert KeywordOnly(1, b=3).b == 3

    @dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: list[int] = field(default_factory=list, init=False)

    _quick_init(Derived)
    with pytest.raises(TypeError):
        Derived(1, [5])  # type: ignore[call-arg]  # b is not an argument
    assert Derived(1).b == []
