"""Whole answers end to end: the official SDKs, not streaming, through one
real ``flatgate gateway`` to ``openai`` backends: the stub in openai mode,
and a recording loopback server that shows what the adapter asked for
(``stream: false``, no ``stream_options``, ``accept: application/json``)
and answers it whole (or streams, when asked to). A backend with
``whole_answers = false`` still streams every answer from the backend; the
client reads the same answer either way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall as FunctionCall

from tests.backends.helpers import SdkStack, fixture
from tests.backends.test_openai_whole_parity import as_stream
from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

TEXT = "the quick brown fox jumps over the lazy dog"
STUB_KEY = "sk-upstream-openai"
REASONED: dict[str, Any] = {
    "id": "chatcmpl-rec",
    "object": "chat.completion",
    "created": 1,
    "model": "recorded-model",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Paris is the capital of France.",
                "reasoning": "A geography question.",
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 11,
        "total_tokens": 31,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 4},
    },
}
CALLED: dict[str, Any] = json.loads(fixture("openai_response_tool_calls.json"))
LOGPROBS: dict[str, Any] = json.loads(fixture("openai_response_logprobs.json"))


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Recorder:
    """Keeps each POST it is sent; answers the whole answer for its request
    (tools: a call; logprobs: the documented logprobs answer; else text), as
    JSON or, when streamed, as the equivalent SSE."""

    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> Seen:
        with self.lock:
            got, self.seen = self.seen, []
        assert len(got) == 1, got
        return got[0]


def answer_for(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("tools"):
        return CALLED
    if body.get("logprobs"):
        return LOGPROBS
    return REASONED


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, kind: str, data: bytes) -> None:
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send("application/json", b'{"object": "list", "data": []}')

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(size))
            headers = {k.lower(): v for k, v in self.headers.items()}
            with recorder.lock:
                recorder.seen.append(Seen(headers, body))
            doc = answer_for(body)
            if body.get("stream"):
                self._send("text/event-stream", as_stream(doc))
            else:
                self._send("application/json", json.dumps(doc).encode())

    return Handler


class Stack(SdkStack):
    """The gateway, the stub and the recorder behind it, and the SDK client."""

    def __init__(self, gateway: Server, stub: Server, recorder: Recorder) -> None:
        super().__init__(gateway)
        self.gateway = gateway
        self.stub = stub
        self.recorder = recorder

    def stub_stats(self) -> dict[str, Any]:
        with httpx.Client(trust_env=False) as c:
            stats: dict[str, Any] = c.get(f"{self.stub.url}/stats").json()
        return stats


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d: Path = tmp_path_factory.mktemp("whole")
    recorder = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub_port = free_port()
    rec = f"{loopback(recorder.port)}/v1"
    config = write_stack(
        d / "flatgate.toml",
        proxy=QUIET,
        backends={
            "stub": {
                "url": f"{loopback(stub_port)}/v1",
                "protocol": "openai",
                "api_key": STUB_KEY,
            },
            "rec": {"url": rec, "protocol": "openai"},
            "rec-streamed": {"url": rec, "protocol": "openai", "whole_answers": False},
        },
        routes={"echo-openai": "stub", "rec": "rec", "rec-streamed": "rec-streamed"},
        edge=QUIET,
        models={"echo-openai": "OpenAI", "rec": "OpenAI", "rec-streamed": "OpenAI"},
    )
    stub = spawn("stub", ["--protocol", "openai", "--api-key", STUB_KEY], d, port=stub_port)
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
    servers = [stub, gateway]
    try:
        for s in servers:
            s.wait_healthy()
        stack = Stack(gateway, stub, recorder)
        yield stack
        stack.close()
    finally:
        stop_all(servers)
        server.shutdown()
        server.server_close()


QUESTION: Any = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
}


# -- the stub, answering whole ------------------------------------------------------


def test_the_stubs_whole_answer_reaches_the_sdk(stack: Stack) -> None:
    before = stack.stub_stats()
    reply = stack.client().chat.completions.create(
        model="echo-openai", messages=[{"role": "user", "content": TEXT}]
    )
    after = stack.stub_stats()
    assert reply.choices[0].message.content == TEXT
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == len(TEXT.split())
    # Answered whole: one write (a stream is a write per word and more).
    assert after["completed"] == before["completed"] + 1
    assert after["frames"] == before["frames"] + 1


def test_the_stubs_whole_tool_call_reaches_the_sdk(stack: Stack) -> None:
    tool: Any = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
    reply = stack.client().chat.completions.create(
        model="echo-openai",
        messages=[{"role": "user", "content": TEXT}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    [got] = reply.choices[0].message.tool_calls or []
    assert isinstance(got, FunctionCall)
    assert got.id and got.function.name == "lookup"
    assert json.loads(got.function.arguments) == {"input": TEXT}
    assert reply.choices[0].finish_reason == "tool_calls"


def test_the_stubs_stop_sequence_reaches_a_messages_client(stack: Stack) -> None:
    with anthropic.Anthropic(base_url=stack.gateway.url, api_key="unused", max_retries=0) as c:
        reply = c.messages.create(
            model="echo-openai",
            max_tokens=50,
            messages=[{"role": "user", "content": TEXT}],
            stop_sequences=["fox"],
        )
    assert [b.text for b in reply.content if b.type == "text"] == ["the quick brown "]
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "fox")


# -- what the backend was asked, and what the client read ------------------------


def test_a_request_not_streamed_asks_the_backend_for_a_whole_answer(stack: Stack) -> None:
    stack.recorder.seen.clear()
    reply = stack.client().chat.completions.create(model="rec", messages=QUESTION)
    seen = stack.recorder.take()
    assert seen.body["stream"] is False
    assert "stream_options" not in seen.body
    assert seen.headers["accept"] == "application/json"
    assert seen.body["messages"] == QUESTION
    message = reply.choices[0].message
    assert message.content == "Paris is the capital of France."
    assert message.model_extra == {"reasoning_content": "A geography question."}
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "recorded-model"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (20, 11)
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 8
    assert reply.usage.completion_tokens_details is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 4


def test_a_whole_tool_call_and_logprobs_reach_the_sdk(stack: Stack) -> None:
    stack.recorder.seen.clear()
    client = stack.client()
    called = client.chat.completions.create(
        model="rec",
        messages=QUESTION,
        tools=[WEATHER],
    )
    assert stack.recorder.take().body["stream"] is False
    [got] = called.choices[0].message.tool_calls or []
    assert isinstance(got, FunctionCall)
    assert got.id == "call_abc123"
    assert got.function.name == "get_current_weather"
    assert got.function.arguments == '{\n"location": "Boston, MA"\n}'
    assert called.choices[0].finish_reason == "tool_calls"
    scored = client.chat.completions.create(
        model="rec",
        messages=QUESTION,
        logprobs=True,
        top_logprobs=2,
    )
    sent = stack.recorder.take().body
    assert (sent["stream"], sent["logprobs"], sent["top_logprobs"]) == (False, True, 2)
    lp = scored.choices[0].logprobs
    assert lp is not None and lp.content is not None
    assert [t.token for t in lp.content] == [
        t["token"] for t in LOGPROBS["choices"][0]["logprobs"]["content"]
    ]
    assert lp.content[1].top_logprobs[1].token == " there"


def test_a_streamed_request_still_asks_for_a_stream(stack: Stack) -> None:
    stack.recorder.seen.clear()
    chunks = list(
        stack.client().chat.completions.create(model="rec", messages=QUESTION, stream=True)
    )
    seen = stack.recorder.take()
    assert seen.body["stream"] is True
    assert seen.body["stream_options"] == {"include_usage": True}
    assert seen.headers["accept"] == "text/event-stream"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Paris is the capital of France."


def test_whole_answers_off_streams_from_the_backend_and_answers_the_same(stack: Stack) -> None:
    stack.recorder.seen.clear()
    client = stack.client()
    for tools in (False, True):
        extra: dict[str, Any] = {"tools": [WEATHER]} if tools else {}
        asked_whole = client.chat.completions.create(model="rec", messages=QUESTION, **extra)
        assert stack.recorder.take().body["stream"] is False
        streamed = client.chat.completions.create(model="rec-streamed", messages=QUESTION, **extra)
        seen = stack.recorder.take()
        assert seen.body["stream"] is True
        assert seen.body["stream_options"] == {"include_usage": True}
        assert seen.headers["accept"] == "text/event-stream"
        mine, theirs = streamed.model_dump(), asked_whole.model_dump()
        for key in ("id", "created"):
            mine.pop(key), theirs.pop(key)
        assert mine == theirs


def test_a_whole_answer_reaches_a_messages_client(stack: Stack) -> None:
    stack.recorder.seen.clear()
    with anthropic.Anthropic(base_url=stack.gateway.url, api_key="unused", max_retries=0) as c:
        reply = c.messages.create(
            model="rec",
            max_tokens=100,
            messages=[{"role": "user", "content": "What is the weather in Boston?"}],
            tools=[{"name": "get_current_weather", "input_schema": {"type": "object"}}],
        )
    seen = stack.recorder.take()
    assert seen.body["stream"] is False and "stream_options" not in seen.body
    [call] = [b for b in reply.content if b.type == "tool_use"]
    assert (call.id, call.name, call.input) == (
        "call_abc123",
        "get_current_weather",
        {"location": "Boston, MA"},
    )
    assert reply.stop_reason == "tool_use"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (82, 17)
