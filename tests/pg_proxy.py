"""A TCP proxy between a PostgreSQL client and server on 127.0.0.1 that can
drop the connection at COMMIT, in one of these modes:

* ``before_commit``: before forwarding it (the server never commits);
* ``after_commit``: after the server answered it (the server committed, the
  client never hears);
* ``hold``: the client's side is dropped but the server's is kept open and
  COMMIT is never forwarded, so the server still holds the transaction open
  (``pg_xact_status`` says ``in progress``) until someone ends its backend;
* ``hold_after_send``: as ``hold``, but the message is forwarded first: the
  server runs it (or waits to, behind a lock) and nobody hears the reply;
* ``after_commit_unreachable``: as ``after_commit``, then every connection
  through the proxy is cut and new ones are refused (the server cannot be
  asked what happened).

The PostgreSQL wire protocol sends ``COMMIT`` as a simple Query message:
``b"Q" + int32(11) + b"COMMIT\\0"``. An append the store sends with no
``BEGIN`` (one statement, committed by the server before it replies) counts
as a COMMIT here: ``before_commit`` then means the statement never reached
the server, ``after_commit`` that it ran and its reply was lost, ``hold``
that it never reached the server while the server's side stays open.
``arm(..., after=b"INSERT INTO waits")`` drops only a COMMIT of a
transaction that sent those bytes (a statement's text), so a test can aim
at one write of a whole command.
"""

from __future__ import annotations

import re
import socket
import threading
from typing import Any, Literal

from tests.tcp_relay import TcpRelay

COMMIT_MSG = b"Q\x00\x00\x00\x0bCOMMIT\x00"
#: a simple Query that commits by itself: the store's append sent with no
#: ``BEGIN`` (``EXECUTE flowdesk_…``, after its ``PREPARE`` the first time)
ALONE_MSG = re.compile(rb"Q.{4}(?:PREPARE flowdesk_[0-9a-f]+ AS [^;]*; )?EXECUTE flowdesk_", re.S)


def commits(chunk: bytes) -> bool:
    """Whether ``chunk`` holds a message that commits: ``COMMIT``, or a
    statement the store sends with no ``BEGIN`` (which the server commits
    before it replies)."""
    return COMMIT_MSG in chunk or ALONE_MSG.search(chunk) is not None


Mode = Literal[
    "before_commit", "after_commit", "hold", "hold_after_send", "after_commit_unreachable"
]


class CommitDropProxy(TcpRelay):
    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self._armed: Mode | None = None
        self._shots = 0
        self._after: bytes = b""
        self.fired: list[Mode] = []
        #: set when the server closed a connection held open by ``hold``
        self.held_ended = threading.Event()
        self.start()

    def arm(self, mode: Mode, times: int = 1, *, after: bytes = b"") -> None:
        """Drop the next ``times`` connections that send COMMIT (one shot each);
        with ``after``, only a COMMIT of a transaction that sent those bytes."""
        with self._lock:
            self._armed, self._shots, self._after = mode, times, after

    def refuse(self) -> None:
        """Refuse every new connection from now on (open ones carry on)."""
        self.refusing = True

    def admit(self) -> None:
        """Accept new connections again (after :meth:`refuse`)."""
        self.refusing = False

    def _take(self, sent: bytes = b"") -> Mode | None:
        with self._lock:
            if self._after and self._after not in sent:
                return None
            mode = self._armed
            if mode is not None:
                self._shots -= 1
                if self._shots <= 0:
                    self._armed = None
            return mode

    def relay(self, client: socket.socket, server: socket.socket) -> None:
        mute, held = threading.Event(), threading.Event()
        threading.Thread(target=self._up, args=(client, server, mute, held), daemon=True).start()
        threading.Thread(target=self._down, args=(server, client, mute, held), daemon=True).start()

    def _up(
        self,
        client: socket.socket,
        server: socket.socket,
        mute: threading.Event,
        held: threading.Event,
    ) -> None:
        sent = b""  # what the transaction sent so far (only kept while armed with `after`)
        try:
            while chunk := client.recv(65536):
                if self._after:
                    sent = (sent + chunk)[-65536:]
                if commits(chunk):
                    mode = self._take(sent)
                    sent = b""
                    if mode == "before_commit":
                        self.fired.append(mode)
                        self.close_sockets(client, server)
                        return
                    if mode == "hold_after_send":
                        self.fired.append(mode)
                        held.set()  # before the server can answer: _down swallows it
                        server.sendall(chunk)
                        self.close_sockets(client)
                        return
                    if mode == "hold":
                        # _down keeps the server's side open until the server ends it
                        self.fired.append(mode)
                        held.set()
                        self.close_sockets(client)
                        return
                    if mode in ("after_commit", "after_commit_unreachable"):
                        # the server's reply (CommandComplete: it committed) is
                        # swallowed by _down, which then drops both sides
                        self.fired.append(mode)
                        if mode == "after_commit_unreachable":
                            self.refusing = True
                        mute.set()
                        server.sendall(chunk)
                        return
                server.sendall(chunk)
        except OSError:
            pass
        self.close_sockets(client, server)

    def _down(
        self,
        server: socket.socket,
        client: socket.socket,
        mute: threading.Event,
        held: threading.Event,
    ) -> None:
        try:
            while chunk := server.recv(65536):
                if mute.is_set():
                    break
                if not held.is_set():
                    client.sendall(chunk)
        except OSError:
            pass
        self.close_sockets(client, server)
        if held.is_set():
            self.held_ended.set()
        if mute.is_set() and self.refusing:
            self.cut_all()  # the server answered COMMIT; now nothing gets through

    def close(self) -> None:
        """Stop listening; connections still open carry on until their ends close them."""
        self.stop_listening()


def append_behind_a_row_lock(
    store: Any, proxy: CommitDropProxy, pg_url: str, checkpoint: Any
) -> None:
    """``store.append(checkpoint)`` (``store`` connected through ``proxy``)
    while another connection holds the run's row locked: the proxy forwards
    the append and drops the client (``hold_after_send``), so the server's
    backend waits behind the lock with nobody to hear it; the lock is let go
    once the store has ended that backend. Asserts the proxy fired and the
    waiting backend was ended."""
    import psycopg

    locker = psycopg.connect(pg_url)
    try:
        locker.execute(
            "SELECT 1 FROM flowdesk.runs WHERE run_id=%s FOR UPDATE", (checkpoint.run_id,)
        )

        def release() -> None:  # once the store ended the waiting backend
            if proxy.held_ended.wait(60):
                locker.commit()

        releaser = threading.Thread(target=release)
        releaser.start()
        proxy.arm("hold_after_send")
        store.append(checkpoint)
        releaser.join()
    finally:
        locker.close()
    assert proxy.fired == ["hold_after_send"]
    assert proxy.held_ended.is_set(), "the waiting backend was never ended"
