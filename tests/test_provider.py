"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging

import keyring
import pytest
from keyring.backend import KeyringBackend

from desktop_app.agent import Agent, tool
from desktop_app.agent.messages import Message
from desktop_app.agent.openai_compat import OpenAICompatibleModel
from desktop_app.errors import (
    MalformedReplyError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    SecretsError,
)
from desktop_app.flow.clock import ManualClock
from desktop_app.flow.retry import Backoff
from desktop_app.store.sqlite.agent_runs import SqliteAgentStore
from tests.chat_server import ChatServer, completion

USER = [Message("user", "hi")]


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def model_for(server: ChatServer, **kw) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(server.url, "test-model", timeout_s=kw.pop("timeout_s", 5), **kw)


def test_complete_with_tool_calls_and_tool_schemas(server):
    @tool
    def weather(city: str, days: int = 1) -> str:
        """Forecast for a city."""
        return "sunny"

    server.script = [
        ("json", completion("", [{"id": "t1", "name": "weather", "args": {"city": "Oslo"}}]))
    ]
    reply = model_for(server).complete(USER, [weather.schema()])
    assert reply.tool_calls[0].name == "weather" and reply.tool_calls[0].arguments == {
        "city": "Oslo"
    }
    sent = server.requests[0]["body"]
    assert sent["model"] == "test-model" and sent["messages"] == [{"role": "user", "content": "hi"}]
    params = sent["tools"][0]["function"]["parameters"]
    assert params["properties"]["city"]["type"] == "string"
    assert params["required"] == ["city"]


def test_streaming_sse_with_text_and_tool_call_deltas(server):
    chunks = [
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c9",
                                "function": {"name": "lookup", "arguments": '{"q": '},
                            }
                        ]
                    }
                }
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}}]},
    ]
    server.script = [("sse", chunks)]
    deltas = list(model_for(server).stream(USER, []))
    assert [d.text for d in deltas[:-1]] == ["Hel", "lo"]
    reply = deltas[-1].reply
    assert reply is not None and reply.content == "Hello"
    assert reply.tool_calls[0].id == "c9" and reply.tool_calls[0].arguments == {"q": "x"}
    assert server.requests[0]["body"]["stream"] is True


@pytest.mark.scenario("S48")
def test_errors_are_classified_by_status_not_words(server):
    m = model_for(server, timeout_s=0.5)
    server.script = [("status", 429, {"Retry-After": "7"}, "slow down")]
    with pytest.raises(RateLimitedError) as rl:
        m.complete(USER, [])
    assert rl.value.retry_after_s == 7 and rl.value.retryable
    server.script = [("status", 500, {}, "oops")]
    with pytest.raises(ProviderUnavailableError) as e5:
        m.complete(USER, [])
    assert e5.value.retryable and e5.value.status == 500
    server.script = [("status", 400, {}, "timeout while rate limit")]  # words lie
    with pytest.raises(ProviderError) as e4:
        m.complete(USER, [])
    assert type(e4.value) is ProviderError and not e4.value.retryable
    server.script = [("sleep", 1.5)]
    with pytest.raises(ProviderTimeoutError) as slow:
        m.complete(USER, [])
    # the limit it waited and the setting that changes it (a new user's report)
    assert "(no answer within 0.5 s; a slow model needs a longer model.timeout_s, " in str(
        slow.value
    )
    server.script = [("raw", "{not json")]
    with pytest.raises(MalformedReplyError):
        m.complete(USER, [])
    server.script = [("json", {"choices": []})]
    with pytest.raises(MalformedReplyError):
        m.complete(USER, [])


def test_agent_retries_5xx_and_stores_429_retry_after(server, sqlite_store):
    clock = ManualClock()
    astore = SqliteAgentStore(sqlite_store)
    agent = Agent(
        "net",
        model_for(server),
        astore,
        clock=clock,
        backoff=Backoff(initial_s=0.01, max_s=0.01, jitter_s=0),
    )
    server.script = [("status", 503, {}, "busy"), ("json", completion("fine"))]
    res = agent.ask("hello")
    assert res.status == "done" and res.text == "fine" and len(server.requests) == 2
    server.script = [("status", 429, {"Retry-After": "120"}, "later")]
    limited = agent.ask("again")
    assert limited.status == "rate_limited" and limited.retry_at == clock.now() + 120
    clock.advance(121)
    server.script = [("json", completion("now ok"))]
    (after,) = agent.resume_due()
    assert after.status == "done" and after.text == "now ok"
    server.script = [("status", 401, {}, "bad key")]
    failed = agent.ask("x")
    assert failed.status == "failed" and len(server.requests) == 5  # 4xx: not retried


@pytest.mark.scenario("S114")
@pytest.mark.parametrize(
    ("key", "echoed"),
    [
        ("sk-TRYOUT-SECRET-12345", "TRYOUT-SECRET-12345"),
        ("sk-proj-a1b2c3d4e5f6g7h8", "a1b2c3d4e5f6g7h8"),
        ("ghp_0123456789abcdef", "0123456789abcdef"),
    ],
)
def test_a_refusal_echoing_the_key_without_its_prefix_is_masked(server, key, echoed):
    """A privacy tryout: a provider (or a proxy) that echoed the key with
    its ``sk-`` prefix cut off had it stored and printed whole: only the key
    as configured was masked."""
    server.script = [("status", 401, {}, f"internal error for key {echoed} (partial)")]
    with pytest.raises(ProviderError) as err:
        model_for(server, api_key=key, stream=False).complete(USER, [])
    assert echoed not in str(err.value) and "for key *** (partial)" in str(err.value)


class MemoryKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.items.get((service, username))

    def set_password(self, service, username, password):
        self.items[(service, username)] = password

    def delete_password(self, service, username):
        self.items.pop((service, username), None)


def test_api_key_from_keyring_never_reaches_sqlite_or_logs(server, db_path, caplog):
    from desktop_app.bootstrap import build_model
    from desktop_app.config import load_settings
    from desktop_app.secrets import set_secret
    from desktop_app.store.sqlite.store import open_store

    secret = "sk-test-DO-NOT-LEAK-1234567890"
    with pytest.raises(SecretsError, match="keyring"):  # the default test keyring fails
        set_secret("model_api_key", secret)
    previous = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring())
    try:
        set_secret("model_api_key", secret)
        settings = load_settings(db_path=db_path, model={"base_url": server.url, "model": "m"})
        model = build_model(settings)
        assert model is not None and secret not in repr(model)
        caplog.set_level(logging.DEBUG)
        store = open_store(db_path)
        server.script = [
            (
                "json",
                completion("", [{"id": "t", "name": "ask_user", "args": {"question": "name?"}}]),
            ),
            ("json", completion("hello Ada")),
        ]
        agent = Agent("keyed", model, SqliteAgentStore(store))
        res = agent.ask("greet me")
        assert agent.resume_input(res.run_id, "Ada").text == "hello Ada"
        assert server.requests[0]["headers"]["Authorization"] == f"Bearer {secret}"
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.close()
    finally:
        keyring.set_keyring(previous)
    raw = db_path.read_bytes()
    assert b"hello Ada" in raw  # the conversation is in the file (mode 0600)...
    assert secret.encode() not in raw  # ...the key is not
    assert secret not in caplog.text
    assert "Ada" not in "".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)


def test_a_non_stream_reply_to_a_stream_request_is_malformed(server):
    server.script = [("raw", '{"choices": []}')]
    with pytest.raises(MalformedReplyError, match="no server-sent events"):
        list(model_for(server).stream(USER, []))


def test_a_garbled_stream_with_tools_offered_is_malformed_not_a_tool_streaming_refusal(server):
    """A chunk cut off mid-JSON, or a JSON body that is no chat completion,
    were reported as "the provider cannot stream tool calls ... turn
    streaming off" whenever tools were offered, though no tool call was
    made (a tryout): they are malformed replies; only a whole chat
    completion for a streamed request (llama.cpp's way) is that refusal."""
    from desktop_app.errors import ToolCallStreamingError

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    server.script = [
        ("sse_raw", 'data: {"choices": [{"delta": {"content": "Hel"\n\n'),
        ("sse_raw", 'data: {"hello": "world"}\n\ndata: [DONE]\n\n'),
        ("raw", '{"object": "error", "message": "overloaded"}'),
        ("raw", json.dumps(completion("whole"))),
    ]
    model = model_for(server)
    with pytest.raises(MalformedReplyError, match="a stream chunk is not JSON") as cut:
        list(model.stream(USER, tools))
    assert not isinstance(cut.value, ToolCallStreamingError)
    with pytest.raises(MalformedReplyError, match="not a chat completion chunk") as odd:
        list(model.stream(USER, tools))
    assert not isinstance(odd.value, ToolCallStreamingError)
    with pytest.raises(MalformedReplyError, match="no server-sent events") as other:
        list(model.stream(USER, tools))
    assert not isinstance(other.value, ToolCallStreamingError)
    with pytest.raises(ToolCallStreamingError, match="cannot stream tool calls"):
        list(model.stream(USER, tools))


def test_tool_call_arguments_with_a_raw_tab_in_a_string_are_read_as_llama_cpp_writes_them():
    """llama.cpp's grammar-constrained JSON (seen from llama-cpp-python's
    server in make test-model) may hold a raw tab inside a string."""
    from desktop_app.agent.openai_compat import _parse_args

    assert _parse_args('{ "value":"a\tb\nc" }') == {"value": "a\tb\nc"}


def test_a_reply_holding_a_lone_surrogate_is_malformed_and_nothing_is_recorded(
    server, sqlite_store
):
    r"""JSON's ``\ud800`` escape decodes to a lone surrogate, which no UTF-8
    file holds: an agent run took it into its conversation and the SQLite
    store failed on it with a bare UnicodeEncodeError. Now the provider
    refuses the reply (streamed or not) as malformed: the run fails with
    that message and stores none of the reply."""
    import json as _json

    astore = SqliteAgentStore(sqlite_store)
    lone = '{"x": "\\ud800"}'  # the escape as a model writes it, not a Python str
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": lone}}
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [call]}}]}
    text = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}

    @tool
    def echo(x: str) -> str:
        """Echo."""
        return x

    server.script = [("raw", _json.dumps(body))]  # arguments: JSON text holding \ud800
    out = Agent("u", model_for(server, stream=False), astore, tools=[echo]).ask("go", run_id="lone")
    assert out.status == "failed" and "not valid Unicode (a lone surrogate" in str(out.error)
    assert astore.get("lone").status == "failed"
    messages = astore.messages("lone")
    assert [m["role"] for m in messages] == ["user"]  # the question only: no reply recorded
    # streamed: json.dumps writes the lone surrogate as its escape, \udc00
    server.script = [("sse", [{"choices": [{"delta": {"content": "a\udc00b"}}]}])]
    with pytest.raises(MalformedReplyError, match="not valid Unicode"):
        list(model_for(server, stream=True).stream(USER, []))
    server.script = [("json", text)]  # the same store takes the next, valid reply
    assert Agent("u", model_for(server, stream=False), astore).ask("go").text == "ok"


TOOL_CALL_CHUNK = {
    "choices": [
        {
            "delta": {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "function": {"name": "charge", "arguments": '{"amount": 5}'},
                    }
                ]
            }
        }
    ]
}


def test_a_stream_cut_mid_reply_is_no_reply(server):
    """A stream that ends with neither a finish_reason nor [DONE] (the
    server killed mid-reply) is a broken connection, retried like a reset:
    not a reply (its text was only the start) and not a tool call."""
    m = model_for(server)
    server.script = [("sse_cut", [{"choices": [{"delta": {"content": "Partial words"}}]}])]
    with pytest.raises(ProviderUnavailableError, match="ended before its reply was complete"):
        list(m.stream(USER, []))
    server.script = [("sse_cut", [TOOL_CALL_CHUNK])]
    with pytest.raises(ProviderUnavailableError) as cut:
        list(m.stream(USER, []))
    assert cut.value.retryable
    finished = {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}
    server.script = [("sse_cut", [TOOL_CALL_CHUNK, finished])]  # ended by its finish_reason
    (*_, last) = m.stream(USER, [])
    assert last.reply is not None and last.reply.tool_calls[0].arguments == {"amount": 5}


def test_an_agent_never_makes_a_tool_call_from_a_cut_stream(server, sqlite_store):
    """Streamed (as ``flowdesk ask`` streams): a reply cut after a whole
    tool-call chunk is asked for again, and the tool is not called on it;
    one cut after some of its text fails the run (resumable), keeping none
    of that text as the answer."""
    charged: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        return "charged"

    agent = Agent(
        "pay",
        model_for(server),
        SqliteAgentStore(sqlite_store),
        tools=[charge],
        clock=ManualClock(),
        backoff=Backoff(initial_s=0.01, max_s=0.01, jitter_s=0),
    )

    def streamed(message: str):
        (done,) = [e.response for e in agent.stream(message) if e.kind == "done"]
        return done

    answer = {"choices": [{"delta": {"content": "Not charged."}, "finish_reason": "stop"}]}
    server.script = [("sse_cut", [TOOL_CALL_CHUNK]), ("sse", [answer])]
    res = streamed("charge 5")
    assert res.status == "done" and res.text == "Not charged.", res
    assert charged == [] and len(server.requests) == 2
    server.script = [("sse_cut", [{"choices": [{"delta": {"content": "Partial words"}}]}])]
    cut = streamed("say something")
    assert cut.status == "failed" and "ended before its reply was complete" in str(cut.error)
    assert cut.text is None


def test_broken_tool_arguments_are_told_to_the_model_and_no_call_is_made(server, sqlite_store):
    """A small model's broken JSON arguments failed the whole run, and
    every resume the same way; now the call is not made (nor offered for
    approval), the model reads why, and its corrected call goes through."""
    charged: list[int] = []

    @tool(requires_approval=True)
    def charge(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        return "charged"

    @tool
    def ping() -> str:
        """Answer pong (no arguments needed)."""
        charged.append(-1)
        return "pong"

    broken = completion("", [{"id": "b1", "name": "ping", "args": {}}])
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"line": "x'
    broken_charge = completion("", [{"id": "b2", "name": "charge", "args": {}}])
    broken_charge["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[5]"
    server.script = [("json", broken), ("json", broken_charge), ("json", completion("Gave up."))]
    agent = Agent(
        "pay",
        model_for(server, stream=False),
        SqliteAgentStore(sqlite_store),
        tools=[charge, ping],
        clock=ManualClock(),
    )
    res = agent.ask("ping then charge 5")
    assert res.status == "done" and res.text == "Gave up.", res
    assert charged == []  # not even the argument-less ping ran on broken arguments
    told = [m["content"] for m in server.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert len(told) == 2 and all("are not a JSON object" in t for t in told)
    first = json.loads(told[0])["error"]
    assert '\'{"line": "x\'' in first and "it was not made" in first
