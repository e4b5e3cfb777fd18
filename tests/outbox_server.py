"""A destination for outbox tests: a real HTTP server on 127.0.0.1.

POST /ops with header Idempotency-Key records the operation (a repeated key
is accepted and not counted twice: the server de-duplicates, as a good API
does); GET /ops/<key> answers 200 with the receipt or 404; GET /count/<key>
returns how many times a POST with that key reached the server at all.
With ``--drop-first``, the first POST of each key makes the operation and
then closes the connection without answering (a server that died mid-call
after making the effect): the client sees the connection reset.
Run: python tests/outbox_server.py PORTFILE [--drop-first]
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    drop_first = False
    ops: dict[str, dict] = {}
    posts: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        with self.lock:
            self.posts[key] = self.posts.get(key, 0) + 1
            receipt = self.ops.setdefault(key, {"op": len(self.ops) + 1, "payload": body})
            drop = self.drop_first and self.posts[key] == 1
        if drop:  # made, then gone before answering
            self.close_connection = True
            return
        self._send(200, receipt)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        with self.lock:
            if parts[0] == "ops" and len(parts) == 2:
                receipt = self.ops.get(parts[1])
                self._send(200, receipt) if receipt else self._send(404, None)
            elif parts[0] == "count" and len(parts) == 2:
                self._send(
                    200,
                    {"posts": self.posts.get(parts[1], 0), "ops": 1 if parts[1] in self.ops else 0},
                )
            else:
                self._send(404, None)


def serve(portfile: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(portfile, "w") as fh:
        fh.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    Handler.drop_first = "--drop-first" in sys.argv[2:]
    serve(sys.argv[1])
