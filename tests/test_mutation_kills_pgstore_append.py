"""A step's append on PostgreSQL (``_append``), as the mutation run of that
function (issue 29) found it unpinned: the run's error as the list shows
it, and why an append over a revision that is not stored is refused. Every
test runs on a real server (``tests/pg_support.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_app.errors import LeaseLostError
from desktop_app.store.protocol import Checkpoint, RunRecord
from desktop_app.store.records import Lease

pytestmark = pytest.mark.postgres


def cp(run_id: str, rev: int, **kw: Any) -> Checkpoint:
    return Checkpoint(run_id, rev, "running", {"x": rev}, {}, ("a",), 1000.0 + rev, **kw)


def test_a_failed_revision_puts_its_error_on_the_run(pg_store):
    """The error of a revision that fails the run is what the run shows (the
    runs list, ``flowdesk runs``), not only what its checkpoint holds."""
    now = pg_store.now()
    pg_store.create_run(RunRecord("r1", "f", "v1", "running", 0, now, now), cp("r1", 0))
    pg_store.append(cp("r1", 1).evolve(status="failed", error="step a: boom"))
    assert pg_store.get_run("r1").error == "step a: boom"
    assert [r.error for r in pg_store.list_runs()] == ["step a: boom"]


def test_an_append_over_a_missing_revision_by_a_worker_whose_lease_was_taken_is_lease_lost(
    pg_store,
):
    """A worker whose run was taken over appends a revision whose previous
    one is not stored: it is told its lease was lost (it stops, the new
    holder goes on), not that another writer's revision conflicts."""
    now = pg_store.now()
    rec = RunRecord(
        "r1", "f", "v1", "running", 0, now, now, lease_owner="w1", lease_expires_at=now - 1.0
    )
    pg_store.create_run(rec, cp("r1", 0))
    pg_store.claim("r1", Lease("w2", now + 60.0, pg_store.now(), takes_over="w1"), pg_store.now())
    with pytest.raises(LeaseLostError):
        pg_store.append(cp("r1", 5), lease=Lease("w1", now + 60.0, now))
    assert [h.revision for h in pg_store.history("r1")] == [0]
