"""A proxy on 127.0.0.1 in front of a real model server (``make test-model``):
it passes each request through unchanged, streams the reply back as it
comes, and records every request's JSON body and the reply's bytes, so a
test can assert what Flowdesk sent and received.

``RecordingProxy.hold`` (a set of request numbers, 1-based) makes those
requests hang without being forwarded until the client goes away: the model
call a test kills Flowdesk during.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[dict[str, Any]] = []
        self.replies: list[bytes] = []
        self.hold: set[int] = set()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the reply ends when the connection closes

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    proxy.requests.append(json.loads(raw))
                    number = len(proxy.requests)
                if number in proxy.hold:  # until Flowdesk is killed (at most 5 minutes)
                    for _ in range(600):
                        poller = select.poll()  # not select: descriptors past 1,024
                        poller.register(self.connection, select.POLLIN)
                        ready = poller.poll(500)
                        if ready and self.connection.recv(1, socket.MSG_PEEK) == b"":
                            return
                    return
                headers = {"Content-Type": "application/json"}
                with (
                    httpx.Client(timeout=600) as client,
                    client.stream(
                        "POST", proxy.upstream + self.path, content=raw, headers=headers
                    ) as resp,
                ):
                    self.send_response(resp.status_code)
                    self.send_header("Content-Type", resp.headers.get("content-type", ""))
                    self.end_headers()
                    body = b""
                    for chunk in resp.iter_raw():
                        body += chunk
                        self.wfile.write(chunk)
                        self.wfile.flush()
                with proxy._lock:
                    proxy.replies.append(body)

            def do_GET(self) -> None:
                resp = httpx.get(proxy.upstream + self.path, timeout=60)
                self.send_response(resp.status_code)
                self.end_headers()
                self.wfile.write(resp.content)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
