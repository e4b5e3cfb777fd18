"""A TCP proxy between a PostgreSQL client and server on 127.0.0.1 that can
drop the connection at COMMIT: before forwarding it (the server never commits)
or after the server answered it (the server committed, the client never hears).

The PostgreSQL wire protocol sends ``COMMIT`` as a simple Query message:
``b"Q" + int32(11) + b"COMMIT\\0"``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Literal

COMMIT_MSG = b"Q\x00\x00\x00\x0bCOMMIT\x00"
Mode = Literal["before_commit", "after_commit"]


class CommitDropProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed: Mode | None = None
        self._lock = threading.Lock()
        self.fired: list[Mode] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: Mode) -> None:
        """Drop the next connection that sends COMMIT (one shot)."""
        with self._lock:
            self._armed = mode

    def _take(self) -> Mode | None:
        with self._lock:
            mode, self._armed = self._armed, None
            return mode

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            mute = threading.Event()
            threading.Thread(target=self._up, args=(client, server, mute), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, mute), daemon=True).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _up(self, client: socket.socket, server: socket.socket, mute: threading.Event) -> None:
        try:
            while chunk := client.recv(65536):
                if COMMIT_MSG in chunk:
                    mode = self._take()
                    if mode == "before_commit":
                        self.fired.append(mode)
                        self._close(client, server)
                        return
                    if mode == "after_commit":
                        # the server's reply (CommandComplete: it committed) is
                        # swallowed by _down, which then drops both sides
                        self.fired.append(mode)
                        mute.set()
                        server.sendall(chunk)
                        return
                server.sendall(chunk)
        except OSError:
            pass
        self._close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, mute: threading.Event) -> None:
        try:
            while chunk := server.recv(65536):
                if mute.is_set():
                    break
                client.sendall(chunk)
        except OSError:
            pass
        self._close(client, server)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
