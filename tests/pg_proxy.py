"""A TCP proxy between a PostgreSQL client and server on 127.0.0.1 that can
drop the connection at COMMIT, in one of these modes:

* ``before_commit``: before forwarding it (the server never commits);
* ``after_commit``: after the server answered it (the server committed, the
  client never hears);
* ``hold``: the client's side is dropped but the server's is kept open and
  COMMIT is never forwarded, so the server still holds the transaction open
  (``pg_xact_status`` says ``in progress``) until someone ends its backend;
* ``after_commit_unreachable``: as ``after_commit``, then every connection
  through the proxy is cut and new ones are refused (the server cannot be
  asked what happened).

The PostgreSQL wire protocol sends ``COMMIT`` as a simple Query message:
``b"Q" + int32(11) + b"COMMIT\\0"``. ``arm(..., after=b"INSERT INTO waits")``
drops only a COMMIT of a transaction that sent those bytes (a statement's
text), so a test can aim at one write of a whole command.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Literal

COMMIT_MSG = b"Q\x00\x00\x00\x0bCOMMIT\x00"
Mode = Literal["before_commit", "after_commit", "hold", "after_commit_unreachable"]


class CommitDropProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed: Mode | None = None
        self._shots = 0
        self._after: bytes = b""
        self._lock = threading.Lock()
        self.fired: list[Mode] = []
        self._closed = False
        self._refusing = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        #: set when the server closed a connection held open by ``hold``
        self.held_ended = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: Mode, times: int = 1, *, after: bytes = b"") -> None:
        """Drop the next ``times`` connections that send COMMIT (one shot each);
        with ``after``, only a COMMIT of a transaction that sent those bytes."""
        with self._lock:
            self._armed, self._shots, self._after = mode, times, after

    def refuse(self) -> None:
        """Refuse every new connection from now on (open ones carry on)."""
        self._refusing = True

    def admit(self) -> None:
        """Accept new connections again (after :meth:`refuse`)."""
        self._refusing = False

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

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                self._close(client)
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._pairs.append((client, server))
            mute, held = threading.Event(), threading.Event()
            threading.Thread(
                target=self._up, args=(client, server, mute, held), daemon=True
            ).start()
            threading.Thread(
                target=self._down, args=(server, client, mute, held), daemon=True
            ).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

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
                if COMMIT_MSG in chunk:
                    mode = self._take(sent)
                    sent = b""
                    if mode == "before_commit":
                        self.fired.append(mode)
                        self._close(client, server)
                        return
                    if mode == "hold":
                        # _down keeps the server's side open until the server ends it
                        self.fired.append(mode)
                        held.set()
                        self._close(client)
                        return
                    if mode in ("after_commit", "after_commit_unreachable"):
                        # the server's reply (CommandComplete: it committed) is
                        # swallowed by _down, which then drops both sides
                        self.fired.append(mode)
                        if mode == "after_commit_unreachable":
                            self._refusing = True
                        mute.set()
                        server.sendall(chunk)
                        return
                server.sendall(chunk)
        except OSError:
            pass
        self._close(client, server)

    def _cut_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            self._close(client, server)

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
        self._close(client, server)
        if held.is_set():
            self.held_ended.set()
        if mute.is_set() and self._refusing:
            self._cut_all()  # the server answered COMMIT; now nothing gets through

    def close(self) -> None:
        self._closed = True
        self._listener.close()
