"""A user's cancel racing the end of an agent run, as users meet it: two real
processes released at one instant (tests/cancel_racer.py), many rounds, on
a real SQLite file and on PostgreSQL.

In each round one process drives an agent run whose model answers once
released (the run ends ``done`` through the runtime's owner-fenced write),
and the other cancels it, through ``Agent.cancel`` or the ``flowdesk
cancel RUN`` command (``--db`` the same database), after a delay swept
over the rounds so the cancel lands before, during and after the end.
Whatever the order, what each side was told agrees with what is stored:
the cancel said it canceled exactly when the run is ``canceled`` and the
executing process was told so; it said ``already done`` exactly when the
run is ``done`` with the answer the executing process returned.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.line_racer import LineRacer
from tests.ownership_racer import agent_store, open_db

RACER = Path(__file__).resolve().parent / "cancel_racer.py"
ROUNDS = 40
#: microseconds between the release and the cancel (> 0) or the model's
#: answer (< 0), swept over a side's rounds so the cancel lands before,
#: during and after the end (which takes some 2 ms on SQLite, more on
#: PostgreSQL): ``Agent.cancel`` acts at once, while the command first
#: opens the database (some 20 ms on SQLite, 70 on PostgreSQL), so its
#: rounds delay the end instead
SWEEP_US = {
    "api": [
        *(-3000, -2000, -1000, -500, 0, 250, 500, 750, 1000, 1500),
        *(2000, 2500, 3000, 4000, 5000, 6000, 8000, 10000, 13000, 16000),
    ],
    "cli": [-d for d in range(0, 200_000, 10_000)],
}


def cancel_said(rid: str, how: str, said: dict) -> str:
    """``canceled`` or ``already done``: what the cancel told its user,
    checked word for word."""
    if how == "api":
        if said == {"canceled": True}:
            return "canceled"
        assert said == {"refused": f"agent run {rid} is already done"}, said
        return "already done"
    if said["code"] == 0:
        assert said["out"].splitlines()[0] == f"agent run {rid} canceled", said
        return "canceled"
    assert (said["code"], said["out"]) == (1, ""), said
    assert said["err"].splitlines() == [f"flowdesk: agent run {rid} is already done"], said
    return "already done"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def race_db(request) -> str:
    fixture = "db_path" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.mark.slow
@pytest.mark.scenario("S97")
def test_a_cancel_racing_the_end_of_an_agent_run_tells_both_sides_the_truth(
    race_db: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    finisher, canceler = (
        LineRacer(RACER, "finish", race_db, str(go)),
        LineRacer(RACER, "cancel", race_db, str(go)),
    )
    store = open_db(race_db)
    agents = agent_store(store)
    seen: Counter[str] = Counter()
    try:
        for rnd in range(ROUNDS):
            rid = f"race-{rnd}"
            how = "cli" if rnd % 2 else "api"
            delay = SWEEP_US[how][(rnd // 2) % len(SWEEP_US[how])]
            finisher.send(f"{rnd} {rid} {max(-delay, 0)}")
            assert finisher.line() == f"ready {rnd}"  # the run is stored, its model called
            canceler.send(f"{rnd} {rid} {max(delay, 0)} {how}")
            assert canceler.line() == f"ready {rnd}"
            Path(f"{go}.{rnd}").touch()  # both released at once
            ended = finisher.told(rnd)
            said = cancel_said(rid, how, canceler.told(rnd))
            run = agents.get(rid)
            where = f"round {rnd} ({how}, {delay} us): cancel said {said!r}, run ended {ended}"
            if said == "canceled":
                assert run.status == "canceled", where
                assert (run.error, run.response) == ("canceled by user", None), where
                assert ended == {
                    "status": "canceled",
                    "text": None,
                    "error": "canceled by user; this process stopped before its next model "
                    "or tool call",
                }, where
            else:
                assert (run.status, run.response) == ("done", f"the answer {rnd}"), where
                assert ended == {"status": "done", "text": f"the answer {rnd}", "error": None}
            seen[f"{how}: {said}"] += 1
    finally:
        finisher.close()
        canceler.close()
        store.close()
    print(f"cancel vs end of an agent run, {ROUNDS} rounds: {dict(seen)}")
    # both orders happened for both ways to cancel: the sweep put the cancel
    # on either side of the end
    assert set(seen) == {
        f"{how}: {said}" for how in SWEEP_US for said in ("canceled", "already done")
    }, dict(seen)
