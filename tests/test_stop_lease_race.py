"""``Engine.stop`` (what SIGTERM and the app's shutdown call) racing a peer
that tries to take the run over while the step is in flight: the lease
stays with the stopping engine until the step ended, so the peer's resume
is refused (``RunLeasedError``) every time until then, and it goes on after
the step, which made its side effect once (a new user saw a stopped
worker's step run twice at once). A barrier lines the stop up with the step;
20 rounds on a real SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder

ROUNDS = 20


class S(BaseModel):
    n: int = 0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, db_path: Path):
    if request.param == "sqlite":
        from desktop_app.store.sqlite.store import open_store

        return lambda: open_store(db_path)
    from desktop_app.store.postgres.store import open_postgres_store

    url = request.getfixturevalue("pg_url")
    return lambda: open_postgres_store(url)


def race_flow(r: int, at_step: threading.Barrier, stopped: threading.Event, effects: list):
    def work(state: S, ctx) -> dict:
        at_step.wait(timeout=30)  # the stop is sent now, with this step in flight
        assert stopped.wait(timeout=30)
        effects.append((r, "work", "stopping"))
        return {"n": state.n + 1}

    def after(state: S, ctx) -> dict:
        effects.append((r, "after", "peer"))
        return {"n": state.n + 1}

    return FlowBuilder("race", S).step("work", work).step("after", after).chain().compile()


def test_stop_mid_step_keeps_the_run_from_a_peer_until_the_step_ended(opener) -> None:
    effects: list[tuple[int, str, str]] = []  # (round, step, engine)
    peer_store = opener()
    try:
        for r in range(ROUNDS):
            at_step, stopped = threading.Barrier(2), threading.Event()
            flow = race_flow(r, at_step, stopped, effects)
            stopping = Engine(opener(), flows=[flow])
            peer = Engine(peer_store, flows=[flow])
            run_id = stopping.start("race", S())
            result: list[object] = []
            driver = threading.Thread(target=drive, args=(stopping, run_id, result))
            driver.start()
            at_step.wait(timeout=30)
            stopping.stop()
            refused = False
            try:
                peer.resume(run_id)
            except RunLeasedError:
                refused = True  # held by the stopping engine while its step runs
            stopped.set()
            driver.join(timeout=60)
            assert not driver.is_alive()
            assert result and getattr(result[0], "status", None) == "running"
            assert refused, f"round {r}: the peer took the run over mid-step"
            assert peer.resume(run_id).status == "completed"
            stopping.store.close()
    finally:
        peer_store.close()
    assert effects == [
        (r, s, e) for r in range(ROUNDS) for s, e in (("work", "stopping"), ("after", "peer"))
    ]


def drive(engine: Engine, run_id: str, result: list[object]) -> None:
    result.append(engine.resume(run_id))
