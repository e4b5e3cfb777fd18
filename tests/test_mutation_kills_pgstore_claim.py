"""PostgreSQL ``claim_runnable`` reading the waiting runs to wake a window at
a time (issue 29, at 1589dd9), as its mutation run found it unpinned: a
claim that takes runs in two rounds (one in the first window, the rest
behind a window of other flows' due runs) hands out at most ``limit`` runs,
never the same run twice, and logs the takeover its first round made; the
windows grow past wakeable_runs' default 1000; a claim judging liveness and
one with the default limit stay within ``limit``, a claim of more than 400
reaches past the first window. Every test runs on a
real server (``tests/pg_support.py``)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from desktop_app.store.protocol import Checkpoint, RunRecord

pytestmark = pytest.mark.postgres

T0 = 1000.0
NOW = T0 + 10_000.0
#: due runs of another flow, more than the first window (max(4 * limit, 100)) holds
AHEAD = 120


def _make(s: Any, run_id: str, flow: str, created: float, deadline: float, **kw: Any) -> None:
    run = RunRecord(run_id, flow, "v1", "waiting", 0, created, created, deadline_at=deadline, **kw)
    cp = Checkpoint(run_id, 0, "waiting", {}, {}, ("a",), created)
    s.create_run(run, replace(cp, created_at=created))


def _split(s: Any, mine_front: list[str], mine_behind: list[str]) -> None:
    """``mine_front`` due first (in the first window), then ``AHEAD`` due runs
    of another flow, then ``mine_behind`` (past the first window); created in
    the order given, the front ones first."""
    for i, rid in enumerate(mine_front):
        _make(s, rid, "mine", T0 + i, T0 + i)
    for i in range(AHEAD):
        _make(s, f"other{i:03d}", "other", T0 + 100 + i, T0 + 100 + i)
    for i, rid in enumerate(mine_behind):
        _make(s, rid, "mine", T0 + 1000 + i, T0 + 1000 + i)


def _holders(s: Any) -> dict[str, str | None]:
    return {r.run_id: r.lease_owner for r in s.list_runs()}


def test_a_claim_over_two_windows_hands_out_at_most_limit_runs(pg_store):
    """One run in the first window, three behind it: ``limit=2`` hands out
    the front one and the oldest behind, and leases no third run."""
    s = pg_store
    _split(s, ["front"], ["b1", "b2", "b3"])
    got = s.claim_runnable("me", 60.0, 2, flows=["mine"], now=NOW)
    assert [r.run_id for r in got] == ["front", "b1"]
    held = {rid for rid, owner in _holders(s).items() if owner is not None}
    assert held == {"front", "b1"}


def test_a_claim_over_two_windows_never_hands_out_a_run_twice(pg_store):
    """The front run is the oldest, so the second round would find it again
    (its lease is now the claimant's own) were it not left out: the claim
    hands out the front run once and the one behind."""
    s = pg_store
    _split(s, ["front"], ["behind"])
    got = s.claim_runnable("me", 60.0, 2, flows=["mine"], now=NOW)
    assert [r.run_id for r in got] == ["front", "behind"]
    assert all(r.lease_owner == "me" for r in got)


def test_a_takeover_in_the_first_window_is_logged_when_a_later_one_claims_more(pg_store, caplog):
    """A run whose lease ran out, taken in the first round, is logged as
    taken over even though the claim went on to a second round that took
    over nothing."""
    s = pg_store
    _split(s, [], ["behind"])
    _make(s, "stale", "mine", T0 - 1, T0 - 1, lease_owner="gone", lease_expires_at=T0)
    at = s.now() + 2 * 86400.0  # the lease (as stored, on the database clock) ran out
    with caplog.at_level(logging.INFO, logger="desktop_app.store.leases"):
        got = s.claim_runnable("me", 60.0, 2, flows=["mine"], now=at)
    assert [r.run_id for r in got] == ["stale", "behind"]
    logged = [r.getMessage() for r in caplog.records if "takes it over" in r.getMessage()]
    assert logged == ["run stale: me takes it over from gone (lease expired)"]


def test_a_claim_judging_liveness_hands_out_at_most_limit_runs(pg_store):
    """With ``presumed_dead`` (the claim reads every candidate, no SQL
    ``LIMIT``), ``limit=1`` still hands out one run of two free ones."""
    s = pg_store
    for rid in ("a", "b"):
        _make(s, rid, "mine", T0, T0)
    got = s.claim_runnable("me", 60.0, 1, presumed_dead=lambda owner: False, now=NOW)
    assert [r.run_id for r in got] == ["a"]
    assert _holders(s) == {"a": "me", "b": None}


def test_a_claim_without_a_limit_hands_out_a_hundred_runs(pg_store):
    """``limit`` defaults to 100: of 101 due runs a claim hands out 100, the
    youngest is left for the next claim."""
    s = pg_store
    for i in range(101):
        _make(s, f"r{i:03d}", "mine", T0 + i, T0 + i)
    got = s.claim_runnable("me", 60.0, now=NOW)
    assert [r.run_id for r in got] == [f"r{i:03d}" for i in range(100)]
    assert _holders(s)["r100"] is None


def test_a_workers_due_run_behind_a_thousand_of_other_flows_is_claimed(pg_store):
    """More due runs of another flow come first than ``wakeable_runs`` reads
    by default (1000): the windows grow past them and the worker's own due
    run is claimed."""
    s = pg_store
    for i in range(1001):
        _make(s, f"other{i:04d}", "other", T0 + i, T0 + i)
    _make(s, "mine", "mine", T0 + 2000, T0 + 2000)
    got = s.claim_runnable("me", 60.0, 1, flows=["mine"], now=NOW)
    assert [r.run_id for r in got] == ["mine"]


def test_a_claim_of_more_than_four_hundred_reaches_its_run_behind_other_flows(pg_store):
    """``limit=401`` (a worker with that many free slots): its run behind
    ``AHEAD`` due runs of another flow is claimed."""
    s = pg_store
    _split(s, [], ["behind"])
    got = s.claim_runnable("me", 60.0, 401, flows=["mine"], now=NOW)
    assert [r.run_id for r in got] == ["behind"]
