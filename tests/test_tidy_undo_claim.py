"""The claim an undo of a tidy run takes (``tidy_undos``), on SQLite and on
PostgreSQL: one live holder at a time, a finished or dead one's claim taken,
another host's taken only once it has given no sign for
``UNDO_CLAIM_TTL_S`` seconds (the rule of outbox claims and run leases)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.owners import holding, new_owner
from desktop_app.flows.tidy import build_tidy_flow
from desktop_app.flows.tidy_undo import UNDO_CLAIM_TTL_S, UndoUnderWay, claim_undo_of
from desktop_app.store.domain.tidy import UndoHolder, claim_undo, end_undo, undo_of
from tests.tidy_folders import fill


@pytest.fixture(params=["sqlite", "postgres"])
def store(request):
    yield request.getfixturevalue("pg_store" if request.param == "postgres" else "sqlite_store")


def _dead_owner() -> str:
    """The owner id of a process of this host that has exited (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{socket.gethostname()}:{proc.pid}:dead00"


def test_one_live_undo_holds_the_run_and_a_stopped_one_is_taken_over(store, tmp_path):
    fill(tmp_path / "dl", 3)
    engine = Engine(store, flows=[build_tidy_flow()], clock=ManualClock())
    run_id = engine.run("tidy", {"folder": str(tmp_path / "dl")}).run_id
    first, second = new_owner(), new_owner()
    assert claim_undo_of(store, run_id, first, wait_s=0) == (None, None)
    assert store.query(undo_of(run_id)).owner == first
    with pytest.raises(UndoUnderWay, match=first):  # alive on this host: kept
        claim_undo_of(store, run_id, second, wait_s=0)
    store.write(end_undo(run_id, first, store.now()))  # finished: free
    assert claim_undo_of(store, run_id, second, wait_s=0) == (None, None)

    dead = _dead_owner()
    assert store.write(claim_undo(run_id, dead, store.now(), lambda h: True)) is None
    third = new_owner()
    assert claim_undo_of(store, run_id, third, wait_s=0) == (None, dead)
    assert store.query(undo_of(run_id)).owner == third

    elsewhere = "another-host:4242:abcdef"
    now = store.now()
    assert store.write(claim_undo(run_id, elsewhere, now, lambda h: True)) is None
    held = store.write(claim_undo(run_id, new_owner(), now + 1, lambda h: False))
    assert held is not None and held.owner == elsewhere and held.last_seen == pytest.approx(now)
    with pytest.raises(UndoUnderWay, match=elsewhere):  # its claim has not expired
        claim_undo_of(store, run_id, new_owner(), wait_s=0)
    assert held.last_seen + UNDO_CLAIM_TTL_S > store.now()
    later = now + UNDO_CLAIM_TTL_S + 1  # no sign from it since: its claim expired

    def expired(h: UndoHolder) -> bool:
        return holding(h.owner, h.last_seen + UNDO_CLAIM_TTL_S, later) != "held"

    last = new_owner()
    assert store.write(claim_undo(run_id, last, later, expired)) is None
    assert store.query(undo_of(run_id)).owner == last
