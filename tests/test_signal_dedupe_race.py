"""Senders of one ``--dedupe-key`` released at one instant (a team tryout:
six ``flowdesk signal … --dedupe-key K`` at once through PgBouncer, two of
them said ``signal 7 stored``). Nothing was stored twice, but a sender was
told it stored the signal when another one had: both passed the check made
before the insert, and the loser's insert found the winner's row. The
store's insert now tells them apart: exactly one sender says ``stored``,
every other says ``duplicate`` naming that same signal, and one row holds
it. Real processes (long-lived racers, each round's command run in its
own), twenty rounds, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.line_racer import CLI_RACER, REPO, LineRacer

ROUNDS = 20
SENDERS = 3


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        from tests.cli_support import flowdesk

        db = str(tmp_path / "s.db")
        assert flowdesk(db, "db", "apply").returncode == 0
        return db
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.scenario("S119")
@pytest.mark.slow
def test_one_sender_of_a_dedupe_key_says_stored_the_others_duplicate(
    database: str, tmp_path: Path
) -> None:
    from desktop_app.store.records import Signal
    from tests.ownership_racer import open_db

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = [LineRacer(CLI_RACER, env=env) for _ in range(SENDERS)]
    store = open_db(database)
    try:
        for r in range(ROUNDS):
            go = str(tmp_path / f"go{r}")
            key = f"K-{r}"
            argv = ["--db", database, "signal", "paid", f"order-{r}", "--payload", '{"a": 2}',
                    "--dedupe-key", key]  # fmt: skip
            for i, racer in enumerate(racers):
                racer.task(r, go=go, do="cli", args=argv, delay=(r + i) % 3 / 1000)
            Path(go).touch()
            told = [racer.told(r) for racer in racers]
            stored = [t for t in told if re.match(r"signal \d+ stored", t["out"])]
            dupes = [t for t in told if t["out"].startswith(f"duplicate: dedupe key '{key}' ")]
            assert all(t["code"] == 0 for t in told), (r, told)
            assert len(stored) == 1 and len(dupes) == SENDERS - 1, (r, told)
            first = store.signal_by_dedupe_key(key)
            assert isinstance(first, Signal)
            assert stored[0]["out"].startswith(f"signal {first.signal_id} stored"), (r, told)
            for t in dupes:  # each names the one stored
                assert f"(signal {first.signal_id}); nothing new was stored" in t["out"], (r, t)
        for racer in racers:
            racer.close()
    finally:
        for racer in racers:
            if racer.proc.poll() is None:
                racer.proc.kill()
                racer.proc.communicate(timeout=60)
        store.close()
