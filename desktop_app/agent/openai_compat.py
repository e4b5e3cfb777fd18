"""An OpenAI-compatible chat-completions provider on httpx.

Works with local servers (Ollama ``http://127.0.0.1:11434/v1``, llama.cpp,
LM Studio) and hosted APIs. The API key comes from keyring (never from
settings, SQLite or logs) and is sent only in the ``Authorization`` header.

Errors are classified by type and HTTP status, never by message text:
429 → :class:`RateLimitedError` with ``Retry-After`` seconds; other 4xx →
:class:`ProviderError` (not retryable); 5xx and reset connections →
:class:`ProviderUnavailableError`; timeouts → :class:`ProviderTimeoutError`;
a reply that is not the chat-completions shape → :class:`MalformedReplyError`;
a reply with no text and no tool call → :class:`EmptyReplyError` (never an
empty answer taken as the agent's last word);
a streamed reply to a request with tools that shows the server cannot stream
tool calls → :class:`ToolCallStreamingError` (turn streaming off).
The provider's text quoted in an error is masked first
(:func:`desktop_app.observability.redact`): a 401 that echoes the API key
stores, prints and exports ``***`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from desktop_app.agent.messages import (
    INVALID_ARGUMENTS,
    AssistantReply,
    Message,
    StreamDelta,
    ToolCall,
)
from desktop_app.errors import (
    EmptyReplyError,
    MalformedReplyError,
    NotJsonReplyError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    ToolCallStreamingError,
)
from desktop_app.errors import redact as redact_url
from desktop_app.observability import mask_secret, redact


def to_wire(m: Message) -> dict[str, Any]:
    """A message in the chat-completions request format."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in m.tool_calls
        ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    return out


def _retry_after(resp: httpx.Response) -> float:
    raw = resp.headers.get("Retry-After", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return 30.0


def _raise_for(resp: httpx.Response, key_hint: str) -> None:
    code = resp.status_code
    if code < 400:
        return
    body = redact(resp.text)[:200]  # a 401 may echo the key: masked before it is cut
    if code == 429:
        raise RateLimitedError(
            f"rate limited by the provider (HTTP 429): {body}", retry_after_s=_retry_after(resp)
        )
    if code >= 500:
        raise ProviderUnavailableError(f"provider error HTTP {code}: {body}", status=code)
    raise ProviderError(
        f"provider refused the request (HTTP {code}): {body}; check the model name, "
        f"base URL and API key ({key_hint})",
        status=code,
    )


def _parse_args(raw: Any) -> dict[str, Any]:
    """A tool call's arguments (a JSON object, or the object itself). A raw
    tab or newline inside a string is accepted (``strict=False``): llama.cpp's
    grammar-constrained JSON lets a model write them, and they mean what
    their escapes would. Arguments that are no JSON object (a small model's
    broken JSON) come back as ``{INVALID_ARGUMENTS: text}``: the runtime
    makes no call and tells the model, which may try again; the run goes on."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}", strict=False)
    except (TypeError, json.JSONDecodeError):
        return {INVALID_ARGUMENTS: str(raw)}
    if not isinstance(value, dict):
        return {INVALID_ARGUMENTS: str(raw)}
    return value


def _not_empty(reply: AssistantReply, finish: str | None) -> AssistantReply:
    """``reply`` unless it holds no text and no tool call.

    Raises:
        EmptyReplyError: nothing in it; ``finish`` (the choice's
            ``finish_reason``) is named, since it says why.
    """
    if reply.content or reply.tool_calls:
        return reply
    why = {
        "length": ": the reply hit the token limit before any text",
        "content_filter": ": the provider withheld it (content filter)",
    }.get(finish or "", "")
    raise EmptyReplyError(
        f"the model sent an empty reply, no text and no tool call (finish_reason "
        f"{finish!r}){why}; nothing was taken for its answer"
    )


def _unicode(reply: AssistantReply) -> AssistantReply:
    """``reply`` if all its text is valid Unicode. JSON's ``\\ud800`` escape
    decodes to a lone surrogate, which no UTF-8 file or database can hold:
    refused here, as a malformed reply, before the run records any of it.

    Raises:
        MalformedReplyError: the content or a tool call's name or arguments
            hold a lone surrogate.
    """
    try:
        reply.content.encode()
        for c in reply.tool_calls:
            c.id.encode()
            c.name.encode()
            json.dumps(c.arguments, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise MalformedReplyError(
            "the provider's reply holds text that is not valid Unicode (a lone surrogate, "
            f"{exc.object[exc.start : exc.end]!r}); nothing of it was recorded"
        ) from exc
    return reply


def provider_url(base_url: str) -> tuple[str, httpx.QueryParams]:
    """``model.base_url`` split for requests: the URL without its query
    (each request's path goes after the base's path, not after its ``?``:
    ``http://h/v1?api_key=K`` asks ``/v1/chat/completions?api_key=K``), and
    the query's parameters, sent with every request. Its password (httpx
    sends ``user:password@`` as a ``Basic`` header, which a provider's 401
    may echo) and each secret parameter's value are masked wherever text is
    (:func:`~desktop_app.observability.mask_secret`)."""
    import base64
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    from desktop_app.errors import secret_param

    parts = urlsplit(base_url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    if parts.password:
        mask_secret(parts.password)
        basic = f"{parts.username or ''}:{parts.password}".encode()
        mask_secret(base64.b64encode(basic).decode())
    for name, value in params:
        if secret_param(name):
            mask_secret(value)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base, httpx.QueryParams(tuple(params))


class OpenAICompatibleModel:
    """A :class:`~desktop_app.agent.models.ChatModel` over ``POST {base_url}/chat/completions``.

    Args:
        base_url: e.g. ``http://127.0.0.1:11434/v1``.
        model: the model name the server knows.
        api_key: sent as a bearer token (read it from keyring; may be ``None``).
        timeout_s: seconds for connect and read.
        transport: an httpx transport (tests).
        stream: ``False`` asks every turn as one non-streamed request, also
            through :meth:`stream` (which then yields the whole reply at
            once): for servers that cannot stream tool calls (llama.cpp's
            llama-cpp-python server).
        key_hint: where the key comes from and how to change it, named in a
            refused request's error (see :func:`desktop_app.secrets.api_key_hint`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        stream: bool = True,
        key_hint: str = "the API key the model was built with",
    ) -> None:
        self.model = model
        self.key_hint = key_hint
        self.streaming = stream
        self.timeout_s = timeout_s
        mask_secret(api_key)  # never in a log record nor in a provider's error text
        #: whether requests carry an API key (``doctor`` words a 401 by it)
        self.has_key = bool(api_key)
        base, params = provider_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base, params=params, headers=headers, timeout=timeout_s, transport=transport
        )

    def _waited(self) -> str:
        """How long a timeout waited, and the setting that changes it."""
        return (
            f"(no answer within {self.timeout_s:g} s; a slow model needs a longer "
            "model.timeout_s, FLOWDESK_MODEL__TIMEOUT_S)"
        )

    def _base_url(self) -> str:
        """The base URL as messages show it: its password and secret query
        parameters masked (:func:`desktop_app.errors.redact`)."""
        return redact_url(str(self._client.base_url))

    def __repr__(self) -> str:  # never show the key
        return (
            f"OpenAICompatibleModel(base_url={self._base_url()!r}, model={self.model!r}, "
            f"stream={self.streaming})"
        )

    def probe(self, timeout_s: float = 3.0) -> int:
        """The HTTP status of ``GET /models`` asked as every request is (the
        key, the base URL's query): ``doctor``'s check of the provider.

        Raises:
            httpx.HTTPError: the provider cannot be reached in ``timeout_s``
                seconds.
        """
        return self._client.get("/models", timeout=timeout_s).status_code

    def close(self) -> None:
        self._client.close()

    def _body(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [to_wire(m) for m in messages]}
        if tools:  # without tool_choice llama.cpp's server ignores the tools
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        if stream:
            body["stream"] = True
        return body

    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> AssistantReply:
        try:
            resp = self._client.post("/chat/completions", json=self._body(messages, tools, False))
        except httpx.TimeoutException as exc:
            raise ProviderTimeoutError(
                f"the provider did not answer in time: {redact(str(exc))} {self._waited()}"
            ) from exc
        except httpx.TransportError as exc:
            raise ProviderUnavailableError(
                f"cannot reach the provider: {redact(str(exc))}"
            ) from exc
        _raise_for(resp, self.key_hint)
        try:
            data = resp.json()
        except ValueError as exc:
            raise self._not_json(resp, resp.text) from exc
        try:
            choice = data["choices"][0]
            msg = choice["message"]
            calls = tuple(
                ToolCall(
                    str(c["id"]),
                    str(c["function"]["name"]),
                    _parse_args(c["function"].get("arguments")),
                )
                for c in msg.get("tool_calls") or []
            )
            reply = AssistantReply(msg.get("content") or "", calls)
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise MalformedReplyError(
                f"the provider's reply is not a chat completion ({type(exc).__name__}: {exc}): "
                f"{redact(resp.text)[:200]}"
            ) from exc
        return _unicode(_not_empty(reply, finish))

    def _not_json(self, resp: httpx.Response, text: str) -> NotJsonReplyError:
        """The error for a 2xx reply whose body ``text`` is not JSON: the
        body (secrets masked, at most 200 characters) and what to check."""
        shown = redact(text)[:200] or "an empty body"
        return NotJsonReplyError(
            f"the provider's reply is not JSON (HTTP {resp.status_code}, content type "
            f"{resp.headers.get('content-type')!r}): {shown!r}; check that model.base_url "
            f"({self._base_url()}) is an OpenAI-compatible API, whose /chat/completions "
            "answers JSON, and that no proxy in between rewrites its replies"
        )

    def stream(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> Iterator[StreamDelta]:
        """The reply as it arrives: text deltas, then one delta carrying the
        whole :class:`AssistantReply`. With ``stream=False`` (the setting
        ``model.stream``) one non-streamed request, yielded at once.

        Raises:
            ToolCallStreamingError: ``tools`` were given and the streamed reply
                shows the server cannot stream tool calls.
            ProviderUnavailableError: the stream ended with neither a
                ``finish_reason`` nor ``[DONE]`` (the connection closed
                mid-reply): retried like a reset, never taken for the reply.
            ProviderError: as :meth:`complete` (and a malformed stream).
        """
        if not self.streaming:
            reply = self.complete(messages, tools)
            if reply.content:
                yield StreamDelta(reply.content)
            yield StreamDelta("", reply)
            return
        text: list[str] = []
        finish: str | None = None
        calls: dict[int, dict[str, Any]] = {}
        answered = seen_event = False  # a 200 came / a server-sent event came
        done = False  # the stream's own end came: "[DONE]"
        try:
            with self._client.stream(
                "POST", "/chat/completions", json=self._body(messages, tools, True)
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    _raise_for(resp, self.key_hint)
                answered = True
                body: list[str] = []  # what came that is no event (bounded)
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        if not seen_event and sum(map(len, body)) < 4096:
                            body.append(line)
                        continue
                    seen_event = True
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                        break
                    try:
                        event = json.loads(payload)
                    except ValueError as exc:  # cut off or garbled: no server's way
                        raise MalformedReplyError(
                            f"a stream chunk is not JSON: {redact(payload)[:200]}"
                        ) from exc
                    try:
                        choice = event["choices"][0]
                        delta = choice.get("delta", {})
                        finish = choice.get("finish_reason") or finish
                    except (AttributeError, KeyError, IndexError, TypeError) as exc:
                        raise MalformedReplyError(
                            f"a stream chunk is not a chat completion chunk: "
                            f"{redact(payload)[:200]}"
                        ) from exc
                    if delta.get("content"):
                        text.append(delta["content"])
                        yield StreamDelta(delta["content"])
                    for c in delta.get("tool_calls") or []:
                        slot = calls.setdefault(int(c.get("index", 0)), {"args": ""})
                        if c.get("id"):
                            slot["id"] = c["id"]
                        fn = c.get("function") or {}
                        if fn.get("name"):
                            slot["name"] = fn["name"]
                        slot["args"] += fn.get("arguments") or ""
                if not seen_event and not _is_json("\n".join(body)):
                    raise self._not_json(resp, "\n".join(body))
                if not seen_event and tools and _is_completion("\n".join(body)):
                    # a whole chat completion for a streamed request: a server
                    # that does not stream when tools are offered (llama.cpp's)
                    raise _cannot_stream_tools(
                        "it answered with no server-sent events (content type "
                        f"{resp.headers.get('content-type')!r})"
                    )
                if not seen_event:
                    raise MalformedReplyError(
                        "asked for a stream but the provider sent no server-sent events "
                        f"(content type {resp.headers.get('content-type')!r})"
                    )
                if finish is None and not done:
                    # the connection closed mid-reply (a server killed, a proxy's
                    # cut): what came is no reply, and a tool call in it no call
                    raise ProviderUnavailableError(
                        "the provider's stream ended before its reply was complete (no "
                        "finish_reason and no [DONE]); nothing of it was kept"
                    )
        except httpx.TimeoutException as exc:
            raise ProviderTimeoutError(
                f"the provider stopped answering: {redact(str(exc))} {self._waited()}"
            ) from exc
        except httpx.TransportError as exc:
            if tools and answered and not seen_event:  # llama-cpp-python's server raises "Automatic
                # streaming tool choice is not supported" after its 200 went out
                raise _cannot_stream_tools(
                    f"the stream broke before its first event ({type(exc).__name__})"
                ) from exc
            raise ProviderUnavailableError(
                f"the connection to the provider broke: {redact(str(exc))}"
            ) from exc
        try:
            tool_calls = tuple(
                ToolCall(str(s["id"]), str(s["name"]), _parse_args(s["args"]))
                for _, s in sorted(calls.items())
            )
        except KeyError as exc:
            if tools:
                raise _cannot_stream_tools(f"a streamed tool call lacks {exc}") from exc
            raise MalformedReplyError(f"a streamed tool call lacks {exc}") from exc
        if tools and not tool_calls and finish == "tool_calls":
            raise _cannot_stream_tools("the stream ended for a tool call that it never sent")
        reply = _not_empty(AssistantReply("".join(text), tool_calls), finish)
        yield StreamDelta("", _unicode(reply))


def _is_completion(text: str) -> bool:
    """Whether ``text`` is a chat completion's JSON (an object with a list of
    ``choices``), as a server answers a request it does not stream."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("choices"), list)


def _is_json(text: str) -> bool:
    """Whether ``text`` parses as JSON (an empty body does not)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _cannot_stream_tools(what: str) -> ToolCallStreamingError:
    return ToolCallStreamingError(
        f"the provider cannot stream tool calls: asked for a streamed reply with tools, {what} "
        "(llama.cpp's llama-cpp-python server does this); turn streaming off: "
        "ask with --no-stream, or set stream = false under [model] in the settings "
        "(FLOWDESK_MODEL__STREAM=false)"
    )
