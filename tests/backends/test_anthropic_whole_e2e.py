"""Whole answers from ``anthropic`` backends, end to end: the official
``anthropic`` SDK, not streaming (``create`` with no ``stream``), through a real
``flatgate gateway`` to

- the stub speaking the Messages API (``claude-stub``), which answers whole
  when asked ``stream: false``;
- a recording loopback backend in front of the same stub (``claude-rec``),
  which keeps what flatgate sent it (``stream: false``, ``accept:
  application/json``) and what the stub answered it with;
- the same recorder through a backend with ``whole_answers = false``
  (``claude-streams``): the backend is asked to stream, as before;
- a backend answering with Anthropic's documented ``message`` examples
  (``claude-docs-*``): whole when asked whole, else as their stream;
- llmock, a third-party Messages API (``claude-mock``).

Whatever the backend was asked, the client gets the same ``message``.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from flatgate.proxy.backends.anthropic.stub_request import (
    REDACTED_DATA,
    REDACTED_TRIGGER,
    signature,
)
from tests.backends.helpers import fixture
from tests.backends.test_anthropic_whole import streamed
from tests.mocks.llmock import LLMock, running_llmock
from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-upstream-anthropic"
MOCK_MODEL = "claude-mock"
THINK: Any = {"type": "enabled", "budget_tokens": 1024}
# What the documented-answers backend answers each model with.
DOCS = {
    "claude-docs-redacted": "anthropic_response_redacted_thinking.json",
    "claude-docs-tool": "anthropic_response_tool_use.json",
    "claude-docs-reference": "anthropic_response_api_reference.json",
}
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


@dataclass
class Seen:
    """One request a loopback backend got, and the content type it answered with."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    answered: str = ""


@dataclass
class Backend:
    """A loopback Messages backend: it forwards to ``upstream`` (a port), or
    answers with the documented message its ``model`` names (``DOCS``)."""

    upstream: int = 0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"{loopback(self.port)}/v1"

    def take(self) -> list[Seen]:
        with self.lock:
            seen, self.seen = self.seen, []
        return seen

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, str, bytes]:
        body = json.loads(raw)
        if not self.upstream:
            doc = fixture(DOCS[body["model"]])
            return (
                (200, "application/json", doc)
                if not body["stream"]
                else (
                    200,
                    "text/event-stream",
                    streamed(doc),
                )
            )
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        try:
            sent = {k: v for k, v in headers.items() if k not in _HOP}
            conn.request("POST", path, body=raw, headers=sent)
            got = conn.getresponse()
            return got.status, got.getheader("content-type") or "", got.read()
        finally:
            conn.close()


@contextmanager
def serving(backend: Backend) -> Iterator[Backend]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, kind, data = backend.answer(self.path, headers, raw)
            with backend.lock:
                backend.seen.append(Seen(self.path, headers, json.loads(raw), kind))
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    backend.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield backend
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Stack:
    gateway: Server
    recorder: Backend
    docs: Backend
    mock: LLMock

    sdk: anthropic.Anthropic | None = None

    def client(self) -> anthropic.Anthropic:
        """The one SDK client of the module's tests (closed with the stack:
        one per call would leave its pooled sockets to the collector)."""
        if self.sdk is None:
            self.sdk = anthropic.Anthropic(
                base_url=self.gateway.url, api_key="unused", max_retries=0, timeout=30
            )
        return self.sdk


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("anthropic-whole")
    with ExitStack() as later:
        stub_port = free_port()
        stub = spawn("stub", ["--protocol", "anthropic", "--api-key", KEY], d, port=stub_port)
        later.callback(stub.stop)
        stub.wait_healthy()
        recorder = later.enter_context(serving(Backend(upstream=stub_port)))
        docs = later.enter_context(serving(Backend()))
        mock = later.enter_context(running_llmock(d))
        anthropic_backend = {"protocol": "anthropic", "api_key": KEY}
        config = write_stack(
            d / "flatgate.toml",
            proxy={**QUIET, "cooldown_seconds": 0, "max_attempts": 1},
            backends={
                "stub": {"url": f"{loopback(stub_port)}/v1", **anthropic_backend},
                "rec": {"url": recorder.url, **anthropic_backend},
                "rec-streams": {"url": recorder.url, **anthropic_backend, "whole_answers": False},
                "docs": {"url": docs.url, **anthropic_backend},
                "mock": {"url": mock.anthropic_url, **anthropic_backend},
            },
            routes={
                "claude-stub": "stub",
                "claude-rec": "rec",
                "claude-streams": "rec-streams",
                "claude-docs-*": "docs",
                MOCK_MODEL: "mock",
            },
            edge=QUIET,
            models=dict.fromkeys(
                ("claude-stub", "claude-rec", "claude-streams", MOCK_MODEL, *DOCS), "Anthropic"
            ),
        )
        gateway = spawn("gateway", ["--config", config], d)
        start_all([gateway])
        later.callback(stop_all, [gateway])
        stack = Stack(gateway, recorder, docs, mock)
        try:
            yield stack
        finally:
            if stack.sdk is not None:
                stack.sdk.close()


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


def shape(m: Any) -> dict[str, Any]:
    """A message as the SDK parsed it, its id aside (each answer has its own)."""
    out: dict[str, Any] = m.model_dump(exclude_none=True)
    out.pop("id")
    return out


def test_the_sdk_gets_a_whole_message_from_the_stub(stack: Stack) -> None:
    c = stack.client()
    m: Any = c.messages.create(model="claude-stub", max_tokens=64, messages=user("hello big world"))
    assert [(b.type, b.text) for b in m.content] == [("text", "hello big world")]
    assert (m.model, m.stop_reason, m.stop_sequence) == ("claude-stub", "end_turn", None)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (3, 3)
    with c.messages.stream(
        model="claude-stub", max_tokens=64, messages=user("hello big world")
    ) as s:
        assert shape(s.get_final_message()) == shape(m)


def test_thinking_comes_back_whole_with_its_signature(stack: Stack) -> None:
    c = stack.client()
    m: Any = c.messages.create(
        model="claude-stub", max_tokens=2048, thinking=THINK, messages=user("think about this")
    )
    thought = "The user wrote 3 words; I repeat them back."
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (m.content[0].thinking, m.content[0].signature) == (thought, signature(thought))
    assert m.content[1].text == "think about this"
    # The next turn sends it back; the stub checks the signature.
    again: Any = c.messages.create(
        model="claude-stub",
        max_tokens=2048,
        thinking=THINK,
        messages=[
            *user("think about this"),
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            *user("and again"),
        ],
    )
    assert again.content[-1].text == "and again"


def test_redacted_thinking_comes_back_whole_with_its_data(stack: Stack) -> None:
    m: Any = stack.client().messages.create(
        model="claude-stub", max_tokens=2048, thinking=THINK, messages=user(REDACTED_TRIGGER)
    )
    assert [b.type for b in m.content] == ["redacted_thinking", "text"]
    assert m.content[0].data == REDACTED_DATA
    assert m.content[1].text == REDACTED_TRIGGER


def test_the_backend_is_asked_for_a_whole_answer(stack: Stack) -> None:
    stack.recorder.take()
    m: Any = stack.client().messages.create(
        model="claude-rec", max_tokens=64, stop_sequences=["END"], messages=user("one two three")
    )
    assert m.content[0].text == "one two three"
    (seen,) = stack.recorder.take()
    assert seen.path == "/v1/messages"
    assert seen.body["stream"] is False
    assert seen.headers["accept"] == "application/json"
    assert seen.body["stop_sequences"] == ["END"]
    assert seen.answered == "application/json"  # the stub answered whole


def test_a_streaming_client_still_streams_from_the_backend(stack: Stack) -> None:
    stack.recorder.take()
    with stack.client().messages.stream(
        model="claude-rec", max_tokens=64, messages=user("four five")
    ) as s:
        assert "".join(s.text_stream) == "four five"
    (seen,) = stack.recorder.take()
    assert seen.body["stream"] is True
    assert seen.headers["accept"] == "text/event-stream"
    assert seen.answered == "text/event-stream"


def test_whole_answers_false_streams_from_the_backend(stack: Stack) -> None:
    stack.recorder.take()
    c = stack.client()
    streamed_from: Any = c.messages.create(
        model="claude-streams", max_tokens=64, messages=user("six seven")
    )
    (seen,) = stack.recorder.take()
    assert seen.body["stream"] is True
    assert seen.headers["accept"] == "text/event-stream"
    assert seen.answered == "text/event-stream"
    whole: Any = c.messages.create(model="claude-rec", max_tokens=64, messages=user("six seven"))
    assert stack.recorder.take()[0].body["stream"] is False
    assert shape(streamed_from) | {"model": "m"} == shape(whole) | {"model": "m"}


@pytest.mark.parametrize("model", list(DOCS))
def test_a_documented_message_reaches_the_client_whole_or_streamed_alike(
    stack: Stack, model: str
) -> None:
    doc = json.loads(fixture(DOCS[model]))
    c = stack.client()
    stack.docs.take()
    m: Any = c.messages.create(model=model, max_tokens=1024, messages=user("hi"))
    assert stack.docs.take()[0].body["stream"] is False
    blocks = [b.model_dump(exclude_none=True) for b in m.content]
    # Citations are not carried (the stream translator skips them too).
    assert blocks == [{k: v for k, v in b.items() if k != "citations"} for b in doc["content"]]
    assert (m.stop_reason, m.stop_sequence) == (doc["stop_reason"], doc.get("stop_sequence"))
    if "usage" in doc:
        u = doc["usage"]
        assert (m.usage.input_tokens, m.usage.output_tokens) == (
            u["input_tokens"],
            u["output_tokens"],
        )
        assert m.usage.cache_read_input_tokens == u.get("cache_read_input_tokens")
        assert m.usage.cache_creation_input_tokens == u.get("cache_creation_input_tokens")
    with c.messages.stream(model=model, max_tokens=1024, messages=user("hi")) as s:
        got, want = shape(s.get_final_message()), shape(m)
    if "usage" not in doc:
        # Usage nobody reported: the Messages edge's stream starts with its
        # own estimate of the input, its whole message says 0.
        del got["usage"], want["usage"]
    assert got == want
    assert stack.docs.take()[0].body["stream"] is True


def test_a_chat_client_gets_the_documented_tool_call_whole(stack: Stack) -> None:
    c = openai.OpenAI(base_url=f"{stack.gateway.url}/v1", api_key="unused", max_retries=0)
    try:
        reply = c.chat.completions.create(
            model="claude-docs-tool", messages=[{"role": "user", "content": "weather?"}]
        )
    finally:
        c.close()
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.id == "toolu_01A09q90qw90lq917835lq9"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {  # type: ignore[union-attr]
        "location": "San Francisco, CA",
        "unit": "celsius",
    }
    assert reply.choices[0].finish_reason == "tool_calls"


def test_llmock_answers_whole_through_the_sdk(stack: Stack) -> None:
    stack.mock.reset()
    stack.mock.scenario({"type": "reply", "text": "Bonjour from the mock"})
    m: Any = stack.client().messages.create(model=MOCK_MODEL, max_tokens=64, messages=user("hi"))
    assert [(b.type, b.text) for b in m.content] == [("text", "Bonjour from the mock")]
    assert m.stop_reason == "end_turn"
    assert m.usage.output_tokens > 0
    assert stack.mock.requests()[-1]["body"]["stream"] is False


def test_llmock_tool_calls_arrive_whole(stack: Stack) -> None:
    stack.mock.reset()
    stack.mock.scenario(
        {
            "type": "reply",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
        }
    )
    tools: Any = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    m: Any = stack.client().messages.create(
        model=MOCK_MODEL, max_tokens=64, tools=tools, messages=user("weather in Paris and Oslo?")
    )
    uses = [b for b in m.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in uses] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert len({b.id for b in uses}) == 2
    assert m.stop_reason == "tool_use"
    assert stack.mock.requests()[-1]["body"]["stream"] is False
