"""PostgreSQL push: NOTIFY after commit (coalesced) and a dedicated
listening connection that also carries a worker's liveness lock.

Channels (payloads are ``scope:run_id``, or ``scope:*`` for a large batch):

* :data:`CHANGES`: a change a list of runs shows that is not a wake-up (a
  run's status changed), for apps watching (``watch_changes``). Per-step
  progress is not sent: the app's ``data_version`` reads
  ``pg_current_snapshot()``, which sees every commit, so a NOTIFY per step
  would only cost round trips.
* :data:`WAKE`: something a worker may act on: a run was created or
  released, a signal or event was stored, a wait with a deadline was saved.

Notifications are sent **after** the write transaction committed, by one
:class:`Notifier` thread per store that batches everything queued within
:data:`COALESCE_S` into one ``SELECT pg_notify(…) FROM unnest(…)`` (NOTIFY
inside the write transaction takes a server-wide lock at commit and halved
8-writer throughput when measured). A notification is therefore only seen
after its data is visible; one can be lost when the process dies between
the commit and the send, which is why every listener also polls (the
fallback) on a longer interval.

:class:`Listener` owns one connection outside the pool (LISTEN and session
advisory locks need a session: a direct connection or a session-mode
pooler, never a transaction-mode PgBouncer: behind one, a session lock would
stay on whichever server connection the pooler picked, long after this
process died; give such a deployment a direct ``listen_url``). With ``owner`` given it is a
worker's liveness: it registers the owner in ``workers`` and holds
``pg_advisory_lock(lock_key)`` for as long as the session lives. When that
connection fails (server restart, ``pg_terminate_backend``, TCP keepalive
after a partition), ``on_lost`` is called at once, so the worker stops its
runs before their next step (self-fencing): a peer may be taking them over
right now. It then reconnects with backoff (exponential with jitter, capped
at ``reconnect_max_s``) for as long as it is open, whatever the outage's
length, logs that the server is away and when it is back, and takes the
lock again.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from desktop_app.flow.retry import Backoff
from desktop_app.store.migrations import PG_SCHEMA

log = logging.getLogger(__name__)

#: The workers table, named with its schema (a listener sets no search_path).
WORKERS = f"{PG_SCHEMA}.workers"
CHANGES = "flowdesk_changes"
WAKE = "flowdesk_wake"
#: Notifications queued within this many seconds go out in one statement.
COALESCE_S = 0.002
#: More distinct payloads than this for a channel in one batch become ``scope:*``.
MAX_PAYLOADS = 64
#: pg_notify refuses payloads of 8000 bytes or more.
MAX_PAYLOAD_BYTES = 7000
#: A worker's liveness session refreshes ``workers.heartbeat_at`` this often (seconds).
HEARTBEAT_S = 10.0
#: One listening pass waits at most this long (seconds) for a notification,
#: so a heartbeat or :meth:`Listener.close` is never held up longer.
POLL_S = 0.2
#: The first reconnect try waits this long (seconds); each failure doubles it
#: (tenacity's ``wait_exponential_jitter``, through :class:`~desktop_app.flow.retry.Backoff`).
RECONNECT_FIRST_S = 0.1
#: Reconnect tries are never further apart than this (seconds) by default
#: (``postgres.reconnect_max_s``); they go on for as long as the listener is open.
RECONNECT_MAX_S = 5.0


#: A NOTIFY batch (see :meth:`Notifier._send`): its own transaction, not
#: flushed to disk before COMMIT returns, and its transaction id.
_BATCH_SQL = (
    "BEGIN; SET LOCAL synchronous_commit = off; "
    "SELECT pg_current_xact_id()::text, (SELECT count(pg_notify(c, p)) "
    "FROM unnest(%s::text[], %s::text[]) AS t(c, p)); COMMIT"
)


class Notifier:
    """Sends queued notifications after commit, coalesced, on a pool connection.

    Thread-safe. :meth:`send` never blocks on the network and never raises; a
    failed batch is dropped and logged (listeners poll as a fallback).
    ``enabled = False`` stops sending (tests of the fallback).
    """

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool
        self.enabled = True
        self._pending: dict[str, set[str]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: batches sent (statements), for tests and benchmarks
        self.batches = 0
        #: held while a batch's transaction id is assigned and recorded
        self.xid_lock = threading.Lock()
        #: transaction ids of this notifier's own batches (recent ones)
        self.own_xids: set[int] = set()
        self._xid_order: list[int] = []

    def send(self, channel: str, payload: str) -> None:
        if not self.enabled:
            return
        with self._cond:
            if self._closed:
                return
            self._pending.setdefault(channel, set()).add(payload[:MAX_PAYLOAD_BYTES])
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="flowdesk-notify", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _take(self) -> dict[str, set[str]] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if not self._pending:
                return None
        time.sleep(COALESCE_S)  # let concurrent commits join this batch
        with self._cond:
            batch, self._pending = self._pending, {}
        return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            channels: list[str] = []
            payloads: list[str] = []
            for channel, items in batch.items():
                if len(items) > MAX_PAYLOADS:
                    items = {p.partition(":")[0] + ":*" for p in items}
                for item in sorted(items):
                    channels.append(channel)
                    payloads.append(item)
            try:
                with self.pool.connection() as conn:
                    self._send(conn, channels, payloads)
                self.batches += 1
            except Exception as exc:  # a lost notification only delays a poll
                log.warning("flowdesk: notification batch dropped: %s", exc)

    def _send(
        self, conn: psycopg.Connection[Any], channels: list[str], payloads: list[str]
    ) -> None:
        """One batch in one transaction and one round trip: ``BEGIN``, ``SET
        LOCAL``, the notifications and the transaction id in one statement,
        and ``COMMIT`` go as one simple query, the arrays bound on the client
        (:data:`_BATCH_SQL`; no pipeline, whose machinery costs the process
        CPU at every batch). A NOTIFY commits a transaction of its own;
        nothing in it needs to survive a server crash, so it never waits for
        fsync, and a batch whose reply is lost is only logged (listeners
        poll). The pool's connections are in autocommit mode, so psycopg
        sends no BEGIN of its own."""
        try:
            with self.xid_lock:  # see normalized: never a half-recorded batch
                cur = psycopg.ClientCursor(conn)
                cur.execute(_BATCH_SQL, (channels, payloads))
                while cur.description is None and cur.nextset():
                    pass  # BEGIN's and SET's results
                row = cur.fetchone()
                self._own(int(row[0]) if row else 0)
        finally:
            if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()

    def _own(self, xid: int) -> None:
        self.own_xids.add(xid)
        self._xid_order.append(xid)
        if len(self._xid_order) > 10_000:
            self.own_xids.discard(self._xid_order.pop(0))

    def normalized(self, snapshot: str) -> str:
        """``pg_current_snapshot()`` text with this notifier's own transactions
        left out (call under :attr:`xid_lock`): a NOTIFY batch commits a
        transaction of its own, which must not look like a data change."""
        _xmin, xmax_s, xip_s = [*snapshot.split(":"), "", "", ""][:3]
        xmax = int(xmax_s or 0)
        while xmax - 1 in self.own_xids:
            xmax -= 1
        xip = [x for x in xip_s.split(",") if x and int(x) not in self.own_xids]
        return f"{xmax}:{','.join(xip)}"

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2)


def lock_key_sql() -> str:
    """SQL computing a worker's advisory-lock key from its owner id (``%s``)."""
    return "hashtextextended(%s, 0)"


class Listener:
    """A dedicated session: LISTEN on ``channels`` and, for a worker, liveness.

    Args:
        conninfo: the libpq URL (the same server as the store's pool).
        channels: channels to LISTEN on.
        owner: a worker's lease owner id; when given, the session registers it
            in ``workers`` and holds its advisory lock (see module doc).
        on_lost: called (from the listener thread) when the session dropped;
            the worker fences its runs there.
        connect_kwargs: extra ``psycopg.connect`` keyword arguments
            (keepalives, ``prepare_threshold``). Tables are named with their
            schema, so no ``search_path`` is needed.
        heartbeat_s: seconds between a worker's ``workers.heartbeat_at`` updates.
        reconnect_max_s: the longest wait (seconds) between reconnect tries;
            the first waits :data:`RECONNECT_FIRST_S` and each failure doubles it.

    :meth:`wait` blocks until a notification arrives or ``timeout`` seconds
    pass; ``received`` counts notifications; ``alive`` is true while the
    session (and the lock) is held.
    """

    def __init__(
        self,
        conninfo: str,
        channels: Iterable[str],
        *,
        owner: str | None = None,
        on_lost: Callable[[], None] | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        reconnect_max_s: float = RECONNECT_MAX_S,
    ) -> None:
        self.conninfo = conninfo
        self.channels = tuple(channels)
        self.owner = owner
        self.on_lost = on_lost
        self.connect_kwargs = dict(connect_kwargs or {})
        self.heartbeat_s = heartbeat_s
        self.reconnect_max_s = reconnect_max_s
        self.received = 0
        self.losses = 0
        self.backend_pid = 0
        self._alive = threading.Event()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._alive.is_set()

    def start(self) -> Listener:
        """Connect (and take the lock); returns once the session is up.

        Raises psycopg.Error when the first connection fails."""
        self._connect()
        self._thread = threading.Thread(target=self._run, name="flowdesk-listen", daemon=True)
        self._thread.start()
        return self

    def _connect(self) -> None:
        kwargs = dict(self.connect_kwargs)
        kwargs["autocommit"] = True
        if self.owner is not None:
            kwargs["application_name"] = (self.owner + " liveness")[:63]
        conn = psycopg.connect(self.conninfo, **kwargs)
        try:
            if self.owner is not None:
                host, _, rest = self.owner.partition(":")
                pid = rest.partition(":")[0]
                conn.execute(
                    f"INSERT INTO {WORKERS}(owner, lock_key, host, pid, started_at, heartbeat_at) "
                    f"VALUES (%s, {lock_key_sql()}, %s, %s, now(), now()) "
                    "ON CONFLICT (owner) DO UPDATE SET heartbeat_at=now()",
                    (self.owner, self.owner, host or socket.gethostname(),
                     int(pid) if pid.isdigit() else 0),
                )  # fmt: skip
                # Blocks only while a peer holds it for an instant (a claim's xact lock).
                conn.execute(f"SELECT pg_advisory_lock({lock_key_sql()})", (self.owner,))
                # Rows of workers long gone (SIGKILLed: they never unregistered).
                conn.execute(
                    f"DELETE FROM {WORKERS} WHERE heartbeat_at < now() - interval '1 day' "
                    "AND pg_try_advisory_xact_lock(lock_key)"
                )
            for channel in self.channels:
                conn.execute(f"LISTEN {channel}")
        except BaseException:
            conn.close()
            raise
        self.backend_pid = conn.info.backend_pid
        self._conn = conn
        self._alive.set()

    def _run(self) -> None:
        # the wait between reconnect tries: the project's Backoff (tenacity's
        # exponential curve), capped, without jitter (each wait as logged);
        # tries go on for as long as the listener is open
        backoff = Backoff(initial_s=RECONNECT_FIRST_S, max_s=self.reconnect_max_s, jitter_s=0.0)
        tries = 0
        lost_at = 0.0
        last_beat = time.monotonic()
        while not self._closed.is_set():
            conn = self._conn
            if conn is None:
                if tries == 0:
                    lost_at = time.monotonic()
                try:
                    self._connect()
                except psycopg.Error as exc:
                    tries += 1
                    delay = backoff.delay(tries)
                    log.warning(
                        "flowdesk: listener reconnect failed: %s; next try in %g s", exc, delay
                    )
                    self._closed.wait(delay)
                    continue
                log.warning(
                    "flowdesk: liveness/listen session re-established after %.1f s "
                    "(%d failed tries): the PostgreSQL server is back",
                    time.monotonic() - lost_at,
                    tries,
                )
                tries = 0
                last_beat = time.monotonic()
                self._wake.set()  # re-check for work after a reconnect
                continue
            try:
                for _ in conn.notifies(timeout=POLL_S, stop_after=1):
                    self.received += 1
                    self._wake.set()
                if self.owner is not None and time.monotonic() - last_beat > self.heartbeat_s:
                    conn.execute(
                        f"UPDATE {WORKERS} SET heartbeat_at=now() WHERE owner=%s", (self.owner,)
                    )
                    last_beat = time.monotonic()
            except psycopg.Error as exc:
                if self._closed.is_set():
                    return
                self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        self._alive.clear()
        self.losses += 1
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        log.warning("flowdesk: liveness/listen connection lost (%s); fencing", exc)
        if self.on_lost is not None:
            try:
                self.on_lost()
            except Exception:
                log.exception("flowdesk: on_lost failed")

    def wait(self, timeout: float) -> bool:
        """Block until a notification or ``timeout`` seconds; True when notified."""
        woke = self._wake.wait(max(0.0, timeout))
        self._wake.clear()
        return woke

    def poke(self) -> None:
        """Wake :meth:`wait` now (a stop request)."""
        self._wake.set()

    def close(self, *, unregister: bool = True) -> None:
        """Stop listening; a worker unregisters and releases its lock."""
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        conn, self._conn = self._conn, None
        self._alive.clear()
        if conn is not None:
            with contextlib.suppress(Exception):
                if unregister and self.owner is not None:
                    conn.execute(f"DELETE FROM {WORKERS} WHERE owner=%s", (self.owner,))
            with contextlib.suppress(Exception):
                conn.close()
