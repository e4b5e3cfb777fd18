"""A TCP relay on 127.0.0.1 for proxies that sit between a client and a
server in tests (``tests/pg_wire.py`` counts PostgreSQL round trips,
``tests/pg_proxy.py`` drops connections at COMMIT).

A subclass says what to do with each accepted pair of sockets
(:meth:`TcpRelay.relay`); the relay listens, connects each client to the
target, keeps every pair so :meth:`close` can cut them, and refuses new
clients while :attr:`refusing` is set.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    """Listen on 127.0.0.1 (``port``, chosen by the kernel) and hand each
    client, with a new connection to ``(host, target_port)``, to :meth:`relay`.

    Thread-safe; close with :meth:`close`.
    """

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._closed = False
        #: new clients are closed at once while set (open ones carry on)
        self.refusing = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []

    def start(self) -> None:
        """Accept clients in a daemon thread (call once the subclass is set up)."""
        threading.Thread(target=self._accept, daemon=True).start()

    def relay(self, client: socket.socket, server: socket.socket) -> None:
        """Start forwarding between ``client`` and ``server`` (threads of its own)."""
        raise NotImplementedError

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refusing:
                self.close_sockets(client)
                continue
            server = socket.create_connection(self.target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, server))
            self.relay(client, server)

    @staticmethod
    def close_sockets(*socks: socket.socket) -> None:
        """Shut down and close each socket, ignoring ones already closed."""
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def cut_all(self) -> None:
        """Close every connection relayed so far (both sides)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            self.close_sockets(client, server)

    def stop_listening(self) -> None:
        """Accept no more clients; the open connections carry on."""
        self._closed = True
        self._listener.close()

    def close(self) -> None:
        """Stop listening and cut every connection."""
        self.stop_listening()
        self.cut_all()
