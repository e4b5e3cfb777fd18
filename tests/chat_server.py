"""A chat-completions server on 127.0.0.1 for provider tests.

Each request takes the next scripted behaviour from ``ChatServer.script``:
``("json", body)``, ``("sse", [chunk, ...])``, ``("sse_cut", [chunk, ...])`` (the
chunks, then the connection closes with no ``[DONE]``: a server killed
mid-reply), ``("status", code, headers, body)``,
``("sleep", seconds)``, ``("raw", text)`` (as JSON), ``("sse_raw", text)`` (as
an event stream), ``("ask_user_if_offered", question,
answer)`` (a model that calls ``ask_user`` when the request offers it, and
otherwise answers), ``("gate", event, body)`` (``body`` as ``"json"`` once
the test sets the ``threading.Event``: a model call in flight for as long as
the test needs). Requests (headers and JSON bodies)
are recorded in ``ChatServer.requests``.

``ChatServer(llama_cpp=...)`` answers as llama.cpp's server (llama-cpp-python's
OpenAI-compatible server) does: a request's ``tools`` are ignored unless it
sends ``tool_choice`` (a scripted tool call becomes a text reply), and a
streamed request with tools whose reply is a tool call is answered, with
``"json"``, by a plain chat completion instead of server-sent events, with
``"no_call"``, by a stream that ends for a tool call without sending it, or,
with ``"abort"``, as its ``chatml-function-calling`` handler does (it raises
"Automatic streaming tool choice is not supported" once the event stream's 200
has gone out): headers of an event stream, then the connection closes with no
event.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    def __init__(self, llama_cpp: str | None = None) -> None:
        assert llama_cpp in (None, "json", "no_call", "abort")
        self.llama_cpp = llama_cpp
        self.script: list[tuple[Any, ...]] = []
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(
                    {"headers": dict(self.headers), "body": body, "path": self.path}
                )
                step = server.script.pop(0) if server.script else ("status", 500, {}, "empty")
                kind = step[0]
                if kind == "gate":  # answer once the test opens the gate (a slow model)
                    assert step[1].wait(120), "the test never opened the gate"
                    step, kind = ("json", step[2]), "json"
                if kind == "ask_user_if_offered":
                    offered = {t["function"]["name"] for t in body.get("tools") or []}
                    call = [{"id": "q", "name": "ask_user", "args": {"question": step[1]}}]
                    reply = completion("", call) if "ask_user" in offered else completion(step[2])
                    step, kind = ("json", reply), "json"
                if kind == "json" and server.llama_cpp:
                    step = server._as_llama_cpp(body, step)
                    kind = step[0]
                if kind == "sleep":
                    time.sleep(step[1])
                    return self._send(200, {"late": True})
                if kind == "abort":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                if kind == "json" and body.get("stream"):
                    msg = step[1]["choices"][0]["message"]
                    chunks = []
                    if msg.get("content"):
                        chunks.append({"choices": [{"delta": {"content": msg["content"]}}]})
                    for i, c in enumerate(msg.get("tool_calls") or []):
                        chunks.append(
                            {
                                "choices": [
                                    {
                                        "delta": {
                                            "tool_calls": [
                                                {
                                                    "index": i,
                                                    "id": c["id"],
                                                    "function": c["function"],
                                                }
                                            ]
                                        }
                                    }
                                ]
                            }
                        )
                    step = ("sse", chunks)
                    kind = "sse"
                if kind == "json":
                    return self._send(200, step[1])
                if kind == "raw":
                    return self._send_raw(200, step[1].encode(), "application/json")
                if kind == "sse_raw":  # an event stream's bytes as given (a garbled one)
                    return self._send_raw(200, step[1].encode(), "text/event-stream")
                if kind == "status":
                    _, code, headers, text = step
                    self.send_response(code)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    data = text.encode()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                if kind in ("sse", "sse_cut"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for chunk in step[1]:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    if kind == "sse":
                        self.wfile.write(b"data: [DONE]\n\n")
                    return None  # "sse_cut": the connection closes mid-reply
                raise AssertionError(kind)

            def _send(self, code: int, body: Any) -> None:
                self._send_raw(code, json.dumps(body).encode(), "application/json")

            def _send_raw(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _as_llama_cpp(self, request: dict, step: tuple[Any, ...]) -> tuple[Any, ...]:
        msg = step[1]["choices"][0]["message"]
        if not msg.get("tool_calls"):
            return step
        if not request.get("tools") or "tool_choice" not in request:  # tools ignored
            text = {"role": "assistant", "content": msg.get("content") or "I have no tools."}
            return ("json", {**step[1], "choices": [{"index": 0, "message": text}]})
        if not request.get("stream"):
            return step
        if self.llama_cpp == "json":  # the handler returned a completion, not chunks
            return ("raw", json.dumps(step[1]))
        if self.llama_cpp == "abort":
            return ("abort",)
        role = {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
        return ("sse", [role, {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}])

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(content: str = "", tool_calls: list[dict] | None = None) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
            }
            for c in tool_calls
        ]
    return {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": msg}]}
