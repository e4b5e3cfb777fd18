"""What Flowdesk on PostgreSQL says and measures during a server outage.

The outage is made by a relay between client and server (``tests/pg_wire.py``)
that cuts every connection and refuses new ones for ``OUTAGE_S`` seconds,
then lets them through again. The assertions are on what is measured or
printed (an offset, a duration a message states), bounded by the outage the
test made, never on how long something took.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

import pytest

from desktop_app.flow.worker import ServerClock
from desktop_app.store.postgres.store import open_postgres_store
from tests.pg_wire import WireCounter

pytestmark = [pytest.mark.postgres]
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


def test_a_clock_sample_held_by_an_outage_does_not_move_the_offset(pg_url):
    """The database clock's offset is measured on the query's own round
    trip: a probe that waited out an outage for a pooled connection gives
    the same offset as before (one machine: about zero), where it used to
    count the wait as the server being ahead (the app's clock ran 86 s
    ahead after an 86 s outage)."""
    relay = WireCounter(int(urlsplit(pg_url).port or 5432))
    store = open_postgres_store(relay.url(pg_url), connect_wait_s=30.0, reconnect_max_s=0.5)
    try:
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
    finally:
        store.close()
        relay.close()
