"""A TCP proxy between a PostgreSQL client and server on 127.0.0.1 that
counts what the client asks of the server, for tests and benchmarks that
count round trips rather than time them.

It reads the frontend's side of the wire protocol (PostgreSQL manual,
"Frontend/Backend Protocol": after the untyped SSLRequest/GSSENCRequest and
StartupMessage, every message is a type byte and an int32 length) and counts:

* ``messages``: client messages by type byte (``Q`` simple query, ``P``
  Parse, ``B`` Bind, ``E`` Execute, ``S`` Sync, ``X`` Terminate…);
* ``round_trips``: times the client sent after the server had answered, i.e.
  how often it waited for the server (a pipelined batch is one);
* ``requests``: ``Q`` + ``S`` messages: the server's request cycles (each
  ends with one ReadyForQuery).

Counts are of every connection through the proxy; :meth:`reset` zeroes them.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

from tests.tcp_relay import TcpRelay

#: untyped request codes a client may send before its StartupMessage
_PRE_STARTUP = {80877103, 80877104}  # SSLRequest, GSSENCRequest


class _ClientStream:
    """Splits one client's byte stream into protocol messages."""

    def __init__(self) -> None:
        self.buf = b""
        self.started = False

    def feed(self, chunk: bytes) -> list[bytes]:
        self.buf += chunk
        types: list[bytes] = []
        while True:
            if not self.started:
                if len(self.buf) < 8:
                    return types
                (length,) = struct.unpack("!i", self.buf[:4])
                (code,) = struct.unpack("!i", self.buf[4:8])
                if len(self.buf) < length:
                    return types
                self.buf = self.buf[length:]
                if code not in _PRE_STARTUP:
                    self.started = True
                continue
            if len(self.buf) < 5:
                return types
            (length,) = struct.unpack("!i", self.buf[1:5])
            if len(self.buf) < 1 + length:
                return types
            types.append(self.buf[:1])
            self.buf = self.buf[1 + length :]


class WireCounter(TcpRelay):
    """Listen on 127.0.0.1 (``port``) and forward to ``target_port``, counting.

    Thread-safe; close with :meth:`close`.
    """

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        super().__init__(target_port, host)
        self.messages: Counter[str] = Counter()
        self.round_trips = 0
        self.start()

    @property
    def requests(self) -> int:
        """Simple queries plus Syncs: the server's request cycles."""
        with self._lock:
            return self.messages["Q"] + self.messages["S"]

    def reset(self) -> None:
        with self._lock:
            self.messages.clear()
            self.round_trips = 0

    def snapshot(self) -> tuple[int, int, Counter[str]]:
        """``(round_trips, requests, messages)`` so far."""
        with self._lock:
            m = Counter(self.messages)
            return self.round_trips, m["Q"] + m["S"], m

    def url(self, dsn: str) -> str:
        """``dsn`` (a ``postgresql://`` URL of the target) through this proxy."""
        p = urlsplit(dsn)
        netloc = f"{p.username}@" if p.username else ""
        return urlunsplit((p.scheme, f"{netloc}127.0.0.1:{self.port}", p.path, p.query, ""))

    def relay(self, client: socket.socket, server: socket.socket) -> None:
        answered = threading.Event()
        answered.set()  # the first message is a turn of its own
        threading.Thread(target=self._up, args=(client, server, answered), daemon=True).start()
        threading.Thread(target=self._down, args=(server, client, answered), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, answered: threading.Event) -> None:
        stream = _ClientStream()
        try:
            while chunk := client.recv(65536):
                types = stream.feed(chunk)
                with self._lock:
                    if answered.is_set():
                        answered.clear()
                        self.round_trips += 1
                    for t in types:
                        self.messages[t.decode("latin-1")] += 1
                server.sendall(chunk)
        except OSError:
            pass
        self.close_sockets(client, server)

    def _down(
        self, server: socket.socket, client: socket.socket, answered: threading.Event
    ) -> None:
        try:
            while chunk := server.recv(65536):
                answered.set()  # before the client can read it and ask again
                client.sendall(chunk)
        except OSError:
            pass
        self.close_sockets(client, server)
