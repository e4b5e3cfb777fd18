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

import contextlib
import socket
import struct
import threading
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

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


class WireCounter:
    """Listen on 127.0.0.1 (``port``) and forward to ``target_port``, counting.

    Thread-safe; close with :meth:`close`.
    """

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self.messages: Counter[str] = Counter()
        self.round_trips = 0
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

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

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [client, server]
            answered = threading.Event()
            answered.set()  # the first message is a turn of its own
            threading.Thread(target=self._up, args=(client, server, answered), daemon=True).start()
            threading.Thread(
                target=self._down, args=(server, client, answered), daemon=True
            ).start()

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
        self._close(client, server)

    def _down(
        self, server: socket.socket, client: socket.socket, answered: threading.Event
    ) -> None:
        try:
            while chunk := server.recv(65536):
                answered.set()  # before the client can read it and ask again
                client.sendall(chunk)
        except OSError:
            pass
        self._close(client, server)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        self._close(*socks)
