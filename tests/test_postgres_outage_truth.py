"""What Flowdesk on PostgreSQL says and measures during a server outage.

The outage is made by a relay between client and server (``tests/pg_wire.py``)
that cuts every connection and refuses new ones for ``OUTAGE_S`` seconds,
then lets them through again. The assertions are on what is measured or
printed (an offset, a duration a message states), bounded by the outage the
test made, never on how long something took.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from desktop_app.flow.worker import ServerClock
from desktop_app.store.postgres.store import open_postgres_store
from tests import cli_forkserver
from tests.cli_support import stop_agent
from tests.pg_wire import WireCounter

pytestmark = [pytest.mark.postgres]
REPO = Path(__file__).resolve().parents[1]
#: seconds the relay refuses every connection
OUTAGE_S = 3.0


def _outage(relay: WireCounter, seconds: float) -> threading.Thread:
    """Cut every connection through ``relay`` and refuse new ones for ``seconds``."""
    relay.refusing = True
    relay.cut_all()

    def end() -> None:
        time.sleep(seconds)
        relay.refusing = False

    thread = threading.Thread(target=end, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def _through_a_relay(
    pg_url: str, *, connect_wait_s: float, reconnect_max_s: float
) -> Iterator[tuple[WireCounter, Any]]:
    """A PostgreSQL store whose connections go through a relay the test cuts
    and refuses (``relay.refusing``, ``relay.cut_all()``); both closed after,
    the relay letting connections through again first."""
    relay = WireCounter(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(
        relay.url(pg_url), connect_wait_s=connect_wait_s, reconnect_max_s=reconnect_max_s
    )
    try:
        yield relay, store
    finally:
        relay.refusing = False
        store.close()
        relay.close()


def test_a_clock_sample_held_by_an_outage_does_not_move_the_offset(pg_url):
    """The database clock's offset is measured on the query's own round
    trip: a probe that waited out an outage for a pooled connection gives
    the same offset as before (one machine: about zero), where it used to
    count the wait as the server being ahead (the app's clock ran 86 s
    ahead after an 86 s outage)."""
    with _through_a_relay(pg_url, connect_wait_s=30.0, reconnect_max_s=0.5) as (relay, store):
        clock = ServerClock(store.server_time, refresh_s=0.0)  # measures at every now()
        clock.now()
        assert abs(clock.offset) < 0.5  # one machine: the clocks agree
        ended = _outage(relay, OUTAGE_S)
        started = time.monotonic()
        now = clock.now()  # the probe waits for the server to be back
        waited = time.monotonic() - started
        ended.join()
        assert waited >= OUTAGE_S  # it did wait the outage out (not a timing assertion)
        assert abs(clock.offset) < 0.5, f"offset {clock.offset:+.3f} s after a {waited:.1f} s wait"
        assert abs(now - time.time()) < 1.0  # deadlines compare right after
        assert abs(clock.now() - time.time()) < 0.5


@pytest.mark.scenario("S104")
def test_a_statement_waiting_through_an_outage_goes_on_once_the_server_is_back(pg_url):
    """A statement that waits for a pooled connection while the server is
    away goes on when it is back, not when its wait
    (``postgres.connect_wait_s``) runs out: psycopg_pool stops reconnecting
    after its ``reconnect_timeout`` and tries again only for a new request,
    so it used to wait out the whole wait after a 3 s outage (a worker's
    "back after N s" said N plus up to 30)."""
    wait_s = 120.0
    with _through_a_relay(pg_url, connect_wait_s=wait_s, reconnect_max_s=0.5) as (relay, store):
        store.data_version()
        ended = _outage(relay, OUTAGE_S)
        started = time.monotonic()
        store.data_version()  # waits through the outage for a connection
        waited = time.monotonic() - started
        ended.join()
        assert waited >= OUTAGE_S  # it did wait the outage out
        assert waited < wait_s  # and went on before its wait ran out


def _read_in_a_thread(store: Any) -> tuple[threading.Event, list[BaseException]]:
    """``store.data_version()`` in a thread of its own: an event set when it
    ended, and what it raised (empty: it went through)."""
    done = threading.Event()
    got: list[BaseException] = []

    def read() -> None:
        try:
            store.data_version()
        except BaseException as exc:  # what the read ended with
            got.append(exc)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    return done, got


def test_a_statement_gives_up_when_the_server_stays_away_for_its_whole_wait(pg_url):
    """Asking the pool again every ``reconnect_max_s`` ends with the try's
    wait: a server that stays away is reported unreachable (every try of
    the transaction), not waited for without end."""
    from desktop_app.errors import DatabaseUnreachableError

    with _through_a_relay(pg_url, connect_wait_s=1.0, reconnect_max_s=0.25) as (relay, store):
        store.data_version()
        relay.refusing = True
        relay.cut_all()
        done, got = _read_in_a_thread(store)
        assert done.wait(120), "the read never gave up"  # a bound on a hang
        assert len(got) == 1 and isinstance(got[0], DatabaseUnreachableError), got


def test_stop_waiting_shortens_a_wait_already_under_way(pg_url):
    """A process stopping (``flowdesk agent`` on SIGTERM) shortens the waits
    for a connection (``stop_waiting``): one already under way ends at its
    next ask, not at the end of its ``connect_wait_s`` (here 60 s)."""
    from desktop_app.errors import DatabaseUnreachableError

    with _through_a_relay(pg_url, connect_wait_s=60.0, reconnect_max_s=0.25) as (relay, store):
        store.data_version()
        relay.refusing = True
        relay.cut_all()
        done, got = _read_in_a_thread(store)
        assert not done.wait(1.0)  # it waits for the server (its wait is 60 s)
        store.stop_waiting(0.5)
        assert done.wait(30), "the wait under way ran on"  # a bound, far below 60 s
        assert len(got) == 1 and isinstance(got[0], DatabaseUnreachableError), got


def _agent_lines(agent: subprocess.Popen[str]) -> tuple[list[str], threading.Thread]:
    said: list[str] = []

    def read() -> None:
        assert agent.stderr is not None
        for line in agent.stderr:
            said.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return said, reader


def _wait_for(said: list[str], text: str, timeout: float) -> str | None:
    """The first line of ``said`` holding ``text``, waiting up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(said):
            if text in line:
                return line
        time.sleep(0.05)
    return None


@pytest.mark.slow
def test_a_worker_says_the_database_is_unreachable_while_it_is_and_for_how_long(pg_url):
    """``flowdesk agent`` whose server goes away (the relay cuts and refuses
    every connection) says so while the server is still away, not when the
    pass that met the outage finally gives up (the pool's 30 s wait per try,
    several tries: it used to say it only once the server was back), and
    its "back after N s" counts from when it met the outage: at least the
    time the outage lasted after it said so (it said 0.0 s after an 86 s
    outage)."""
    relay = WireCounter(int(urlsplit(pg_url).port or 5432))
    agent = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", relay.url(pg_url), "agent",
         "--poll", "0.2"],
        stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    said, reader = _agent_lines(agent)
    try:
        assert _wait_for(said, "flowdesk agent: worker ", 120), "".join(said)
        relay.refusing = True
        relay.cut_all()
        # well within the pool's first 30 s wait for a connection
        away = _wait_for(said, "the database is unreachable", 20)
        assert away is not None, "".join(said)
        assert not [line for line in said if "the database is back after" in line]
        time.sleep(OUTAGE_S)  # the outage goes on after the worker said so
        relay.refusing = False
        back = _wait_for(said, "the database is back after", 150)
        assert back is not None, "".join(said)
    finally:
        try:
            stop_agent(agent)
        finally:
            reader.join(timeout=10)
            relay.close()
    match = re.search(r"the database is back after ([0-9.]+) s", back)
    assert match is not None, back
    assert float(match.group(1)) >= OUTAGE_S, "".join(said)
    text = "".join(said)
    assert text.count("the database is unreachable") == 1, text
    assert "Traceback" not in text


class _SlowClock:
    """store.py's ``time`` module, with a monotonic clock that only the
    test's probe moves (each failed try of the probe takes ``try_s``)."""

    def __init__(self) -> None:
        self.mono = 1000.0

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.mono += seconds

    @staticmethod
    def time() -> float:
        return time.time()


def test_an_unknown_outcome_states_how_long_it_did_ask_and_the_wait_is_said_at_once(
    pg_store, monkeypatch
):
    """Asking a server that cannot be reached whether a lost COMMIT landed:
    each try may take longer than the whole deadline (a connect timeout), so
    the error states the time it did ask, not the deadline (it said "30 s"
    after a silence of 2 min 36 s); and the store says at the first failed
    try that the server cannot be reached (its ``on_unreachable`` handler, once)."""
    import psycopg

    from desktop_app.errors import CommitUnknownError
    from desktop_app.store.postgres import store as postgres

    clock = _SlowClock()
    monkeypatch.setattr(postgres, "time", clock)
    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 1.0)
    said: list[str] = []
    pg_store.on_unreachable(lambda exc: said.append(str(exc)))
    tries: list[float] = []

    def probe() -> str | None:
        tries.append(clock.mono)
        clock.mono += 5.0  # a try that ran into its connect timeout
        raise psycopg.OperationalError("connection timeout expired")

    with pytest.raises(CommitUnknownError) as caught:
        pg_store._resolve(probe, "813")
    assert len(tries) == 1  # its one try outlasted the deadline
    assert caught.value.reason == (
        "the server could not be reached to ask for 5.0 s (connection timeout expired)"
    )
    assert len(said) == 1 and said[0].startswith("lost the connection to PostgreSQL")
    # asked within the deadline until it passed: the last try at the deadline
    monkeypatch.setattr(postgres, "RESOLVE_TIMEOUT_S", 2.0)
    tries.clear()

    def refused() -> str | None:
        tries.append(clock.mono)
        raise psycopg.OperationalError("connection refused")

    with pytest.raises(CommitUnknownError) as caught:
        pg_store._resolve(refused, "814")
    asked = float(caught.value.reason.split("ask for ")[1].split(" s ")[0])
    assert asked == pytest.approx(2.0) and tries[-1] - tries[0] == pytest.approx(2.0)
    assert len(said) == 1  # said once an outage
