"""Cancels and a dispatcher racing over one intent a dead dispatcher left
``sending``, as users meet it: three real processes (tests/settle_racer.py)
released at one instant, many rounds, on a real SQLite file and on
PostgreSQL; the mails made are counted at the destination (lines in a file).

In each round a run has queued one mail; a dispatcher process claimed it,
marked it ``sending`` and died, in half the rounds after the mail was made.
Then two processes cancel the run (``Engine.cancel_withdrawing`` or the
``flowdesk cancel RUN`` command) while a third makes a dispatcher pass,
which reconciles the interrupted intent. Whatever the order: the mail is
made at most once, exactly one cancel says it canceled, what it said of
the mail is what is stored, and the stored status is the truth: delivered
when the mail was made, withdrawn (never made) when it was not. A cancel
says the outcome is unknown only where it cannot ask the mailer (the
``no-lookup`` rounds: its lookup is not registered in the cancelers).
"""

from __future__ import annotations

import itertools
import socket
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.outbox import CANCELED, OUTCOME_UNKNOWN
from tests.line_racer import LineRacer
from tests.ownership_racer import open_db
from tests.settle_racer import mail_flow

RACER = Path(__file__).resolve().parent / "settle_racer.py"
ROUNDS = 24
#: microseconds between the release and the dispatcher's pass, swept over
#: the rounds so it lands before, during and after the cancels (the command
#: first opens the database: some 20 ms on SQLite, more on PostgreSQL)
SWEEP_US = {
    "api": [0, 500, 1000, 2000, 3000, 5000],
    "cli": [0, 10_000, 20_000, 40_000, 60_000, 90_000],
}


def racer(mode: str, db: str, go: Path, sink: Path) -> LineRacer:
    """One long-lived ``settle_racer.py`` process."""
    return LineRacer(RACER, mode, db, str(go), str(sink))


def dead_owner() -> str:
    """The owner id of a dispatcher whose process (on this host) has exited."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return f"{socket.gethostname()}:{gone.pid}:dead"


def cancel_said(rid: str, how: str, said: dict[str, Any]) -> dict[str, int] | None:
    """What a cancel told its user of the mail (``withdrawn``/``made``/
    ``unknown``/``in_flight`` counts), or ``None`` when it was refused (the
    other cancel won), checked word for word."""
    if how == "api":
        if "refused" in said:
            assert said == {"refused": f"run {rid} is already canceled; nothing to do"}, said
            return None
        return said
    if said["code"] != 0:
        assert (said["code"], said["out"]) == (1, ""), said
        assert said["err"].splitlines() == [
            f"flowdesk: run {rid} is already canceled; nothing to do"
        ], said
        return None
    line = {
        "1 queued side effect withdrawn (never made)": "withdrawn",
        "1 side effect made before the process making it stopped (recorded as made)": "made",
        "1 being delivered now (left to its dispatcher)": "in_flight",
        "1 side effect whose outcome is unknown: the process making it stopped mid-way, "
        "and it is never made again": "unknown",
    }
    (out,) = said["out"].splitlines()
    parts = out.split("; ")
    assert parts[0] == f"run {rid} canceled", said
    counts = dict.fromkeys(("withdrawn", "made", "unknown", "in_flight"), 0)
    for part in parts[1:]:
        counts[line[part]] = 1
    return counts


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def race_db(request) -> str:
    fixture = "db_path" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.mark.parametrize("lookup", [True, False], ids=["mailer-asked", "no-lookup"])
def test_cancels_and_a_dispatcher_racing_over_an_interrupted_send_make_it_once_and_say_the_truth(
    race_db: str, tmp_path: Path, lookup: bool
) -> None:
    go, sink = tmp_path / "go", tmp_path / "mails.txt"
    mode = "cancel" if lookup else "cancel-blind"
    cancelers = [racer(mode, race_db, go, sink) for _ in range(2)]
    dispatcher = racer("dispatch", race_db, go, sink)
    store = open_db(race_db)
    engine = Engine(store, flows=[mail_flow()])
    seen: Counter[str] = Counter()
    try:
        for rnd in itertools.count():
            sides = {k.split()[0] for k in seen}
            # ROUNDS rounds, and more (at most 3x) until the sweep has put the
            # dispatcher on both sides of the cancels: load shifts the sweep
            if rnd >= ROUNDS and (len(sides) == 2 or rnd >= 3 * ROUNDS):
                break
            rid = engine.run("mails", {}).run_id
            (intent,) = store.claim_intents(dead_owner(), 60.0, 10)
            assert store.mark_intent(intent.intent_id, "sending", 1.0, expect="pending")
            made_before = rnd % 2 == 0  # the dead dispatcher's mail went out before it died
            if made_before:
                with sink.open("a") as f:
                    f.write(f"{intent.intent_id}\n")
            how = "cli" if (rnd // 2) % 2 else "api"
            delay = SWEEP_US[how][(rnd // 4) % len(SWEEP_US[how])]
            for canceler in cancelers:
                canceler.send(f"{rnd} {rid} 0 {how}")
                assert canceler.line() == f"ready {rnd}"
            dispatcher.send(f"{rnd} {rid} {delay}")
            assert dispatcher.line() == f"ready {rnd}"
            Path(f"{go}.{rnd}").touch()  # all three released at once
            said = [cancel_said(rid, how, c.told(rnd)) for c in cancelers]
            sent = dispatcher.told(rnd)["delivered"]  # sent, or found made (reconciled)

            where = f"round {rnd} ({how}, {delay} us, made before: {made_before}): {said}, {sent}"
            mailed = sink.read_text().split().count(intent.intent_id) if sink.exists() else 0
            assert mailed <= 1, where  # never made twice
            winners = [s for s in said if s is not None]
            assert len(winners) == 1, where  # one cancel canceled, the other was told so
            (told,) = winners
            assert engine.status(rid).status == "canceled", where
            (row,) = [
                i for i in store.intents(["delivered", "failed"]) if i.intent_id == intent.intent_id
            ]
            key = {"mailed": intent.intent_id}
            if told["unknown"]:  # withdrawn mid-send, and no mailer to ask here
                assert not lookup and sent == 0 and mailed == int(made_before), where
                assert told == {"withdrawn": 0, "made": 0, "unknown": 1, "in_flight": 0}, where
                assert (row.status, row.last_error) == ("failed", OUTCOME_UNKNOWN), where
                seen["cancel withdrew it: outcome unknown"] += 1
            elif told["made"]:  # withdrawn mid-send, the mailer had it
                assert lookup and made_before and sent == 0 and mailed == 1, where
                assert told == {"withdrawn": 0, "made": 1, "unknown": 0, "in_flight": 0}, where
                assert (row.status, row.receipt) == ("delivered", key), where
                seen["cancel settled it: made"] += 1
            elif told["withdrawn"]:  # withdrawn mid-send, the mailer did not have it
                assert lookup and not made_before and sent == 0 and mailed == 0, where
                assert told == {"withdrawn": 1, "made": 0, "unknown": 0, "in_flight": 0}, where
                assert (row.status, row.last_error) == ("failed", CANCELED), where
                seen["cancel withdrew it: never made"] += 1
            else:  # the dispatcher had it: in flight at the cancel, or delivered before
                assert mailed == 1 and sent == 1, where
                assert (row.status, row.receipt) == ("delivered", key), where
                seen[
                    "dispatcher "
                    + ("reconciled it" if made_before else "sent it")
                    + (", in flight at the cancel" if told["in_flight"] else ", before the cancel")
                ] += 1
    finally:
        for each in (*cancelers, dispatcher):
            each.close()
        store.close()
    print(f"two cancels and a dispatcher (lookup: {lookup}), {rnd} rounds: {dict(seen)}")
    # the sweep put the dispatcher on either side of the cancels
    assert any(k.startswith("cancel") for k in seen), dict(seen)
    assert any(k.startswith("dispatcher") for k in seen), dict(seen)
