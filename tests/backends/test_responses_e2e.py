"""The ``openai-responses`` adapter end to end, against the stub speaking the
Responses API over loopback: ``CompletionRequest`` buffers straight to the
proxy (with what only the wire carries: extras, reasoning parts), and the
official ``openai`` SDK's Chat Completions client through the edge (any
client API reaches a Responses-native backend). The stub's echo is
deterministic, its encrypted reasoning a fake it checks when it comes back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.responses.stub_request import encrypted
from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.writer import RequestWriter, WireMessage
from flatgate.proxy.wire.schema import (
    FLATBUFFERS,
    FRAMES,
    OMITTED_HEADER,
    ApiDialect,
    FinishReason,
    Provider,
    Role,
    ToolChoiceMode,
)
from tests.backends.helpers import SdkStack
from tests.servers import Server, free_port, spawn
from tests.stacks import loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-upstream-responses"
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
THINK = {
    "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "low", "summary": "auto"},
    "prompt_cache_key": "session-1",
}
WEB = {"tools": [{"type": "web_search"}]}


class Stack(SdkStack):
    def __init__(self, edge: Server, proxy: Server, stub: Server) -> None:
        super().__init__(edge)
        self.proxy = proxy
        self.stub = stub


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("responses-e2e")
    ports = {name: free_port() for name in ("stub", "proxy", "edge")}
    base = f"{loopback(ports['stub'])}/v1"
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": ports["proxy"], "cooldown_seconds": 0},
        backends={
            "responses": {"url": base, "protocol": "openai-responses", "api_key": KEY},
            "responses-hosted": {
                "url": base,
                "protocol": "openai-responses",
                "api_key": KEY,
                "hosted_tools": ["web_search"],
            },
        },
        routes={"echo-hosted*": "responses-hosted", "echo*": "responses"},
        edge={"port": ports["edge"], "proxy_url": loopback(ports["proxy"])},
        models={"echo": "OpenAI", "echo@rate_limit": "OpenAI"},
    )
    servers = [
        spawn("stub", ["--protocol", "openai-responses", "--api-key", KEY], d, port=ports["stub"]),
        spawn("proxy", ["--config", config], d, port=ports["proxy"]),
        spawn("edge", ["--config", config], d, port=ports["edge"]),
    ]
    try:
        for s in servers:
            s.wait_healthy()
        stack = Stack(servers[2], servers[1], servers[0])
        yield stack
        stack.close()
    finally:
        stop_all(servers)


def buffer(
    model: str,
    messages: list[WireMessage],
    *,
    extras: dict[str, Any] | None = None,
    tools: bool = False,
    max_tokens: int = 0,
    stream: bool = True,
) -> bytes:
    w = RequestWriter()
    w.strings(
        request_id="rid-1",
        model_name=model,
        tenant="",
        user="",
        tool_choice_name="lookup" if tools else "",
        response_format=b"",
        extras=json.dumps(extras).encode() if extras else b"",
    )
    w.messages(messages)
    if tools:
        w.tools([(b"lookup", b"looks things up", b'{"type":"object"}', False)])
    return w.finish(
        provider=int(Provider.OpenAI),
        stream=stream,
        max_tokens=max_tokens,
        tool_choice=int(ToolChoiceMode.Function) if tools else 0,
        extras_dialect=RESPONSES if extras else 0,
    )


def ask(stack: Stack, body: bytes) -> tuple[httpx.Response, list[Chunk]]:
    r = httpx.post(
        f"{stack.proxy.url}/v1/completions",
        content=body,
        headers={"content-type": FLATBUFFERS, "accept": FRAMES, "x-request-id": "rid-1"},
        timeout=10,
    )
    chunks = (
        [read_chunk(f) for f in FrameSplitter().feed(r.content)] if r.status_code == 200 else []
    )
    return r, chunks


def user(text: str) -> WireMessage:
    return (int(Role.User), text.encode())


def text_of(chunks: list[Chunk]) -> str:
    return "".join(c.content for c in chunks)


def counted(stack: Stack, backend: str, field: str) -> float:
    text = httpx.get(f"{stack.proxy.url}/metrics").text
    line = f'flatgate_proxy_dropped_fields_total{{backend="{backend}",field="{field}"}} '
    for row in text.splitlines():
        if row.startswith(line):
            return float(row[len(line) :])
    return 0.0


# -- straight to the proxy ---------------------------------------------------------


# Each case runs streamed and whole: a request that does not stream is asked
# for a whole answer (``stream: false``), which the stub answers with the
# ``response`` object.
streamed_and_whole = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])


@streamed_and_whole
def test_text_streams_back_with_usage(stack: Stack, stream: bool) -> None:
    r, chunks = ask(stack, buffer("echo", [user("the quick brown fox")], stream=stream))
    assert r.status_code == 200
    assert OMITTED_HEADER not in r.headers
    assert text_of(chunks) == "the quick brown fox"
    last = chunks[-1]
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is not None and (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        4,
        4,
    )


def test_a_hosted_tool_is_left_out_named_and_counted(stack: Stack) -> None:
    before = counted(stack, "responses", "tools[web_search]")
    r, chunks = ask(stack, buffer("echo", [user("search this")], extras=WEB))
    assert r.status_code == 200
    assert r.headers[OMITTED_HEADER] == "tools[web_search]"
    assert text_of(chunks) == "search this"
    assert counted(stack, "responses", "tools[web_search]") == before + 1


def test_a_backend_that_runs_the_hosted_tool_is_sent_it(stack: Stack) -> None:
    body = buffer("echo-hosted", [user("search this")], extras=WEB)
    r, chunks = ask(stack, body)
    assert r.status_code == 200
    assert OMITTED_HEADER not in r.headers
    assert text_of(chunks) == "search this"
    # What the stub received is the adapter's body, web_search in its tools.
    hosted = ResponsesAdapter(
        ResponsesConfig(
            name="h", url="http://x/v1", protocol="openai-responses", hosted_tools=("web_search",)
        )
    )
    sent = hosted.prepare(Inbound(body, lambda: read_request(body), "rid-1", "")).body
    assert json.loads(sent)["tools"] == [{"type": "web_search"}]
    stats = httpx.get(f"{stack.stub.url}/stats").json()
    assert stats["last_body_sha256"] == hashlib.sha256(sent).hexdigest()
    assert stats["last_headers"]["authorization"] == (
        "sha256:" + hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
    )


@streamed_and_whole
def test_encrypted_reasoning_comes_back_and_goes_back(stack: Stack, stream: bool) -> None:
    r, chunks = ask(stack, buffer("echo", [user("think first")], extras=THINK, stream=stream))
    assert r.status_code == 200
    opening, *parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    # The item's id first (its payload is bound to it), then the whole part.
    assert opening == ReasoningPart(dialect=RESPONSES, id="rs_rid-1")
    assert parts == [
        ReasoningPart(
            "The user wrote 2 words; I repeat them back.",
            encrypted("rs_rid-1").encode(),
            RESPONSES,
            "rs_rid-1",
        )
    ]
    assert "".join(c.reasoning for c in chunks) == parts[0].text
    assert text_of(chunks) == "think first"
    # The next turn sends the part back; the stub checks its encrypted content.
    history: list[WireMessage] = [
        user("think first"),
        (int(Role.Assistant), b"think first", b"", b"", (), False, parts),
        user("and again"),
    ]
    r, chunks = ask(stack, buffer("echo", history, extras=THINK, stream=stream))
    assert (r.status_code, text_of(chunks)) == (200, "and again")
    forged = ReasoningPart(parts[0].text, b"forged", RESPONSES, "rs_rid-1")
    history[1] = (int(Role.Assistant), b"x", b"", b"", (), False, [forged])
    r, _ = ask(stack, buffer("echo", history))
    assert r.status_code == 400
    assert "could not be verified" in r.json()["error"]["message"]


def test_reasoning_of_another_dialect_is_left_out_and_named(stack: Stack) -> None:
    claude = ReasoningPart("Claude thought", b"signature", int(ApiDialect.ANTHROPIC_MESSAGES))
    history: list[WireMessage] = [
        user("hi"),
        (int(Role.Assistant), b"hello", b"", b"", (), False, [claude]),
        user("again"),
    ]
    r, chunks = ask(stack, buffer("echo", history))
    assert (r.status_code, r.headers[OMITTED_HEADER], text_of(chunks)) == (
        200,
        "reasoning",
        "again",
    )


@streamed_and_whole
def test_a_forced_function_is_a_tool_call(stack: Stack, stream: bool) -> None:
    r, chunks = ask(stack, buffer("echo", [user("weather in Paris")], tools=True, stream=stream))
    assert r.status_code == 200
    deltas = [d for c in chunks for d in c.tool_calls]
    assert (deltas[0].id, deltas[0].name) == ("call_rid-1", "lookup")
    assert json.loads("".join(d.arguments for d in deltas)) == {"input": "weather in Paris"}
    assert chunks[-1].finish_reason == FinishReason.TOOL_CALLS


@streamed_and_whole
def test_the_output_limit_is_a_length_finish(stack: Stack, stream: bool) -> None:
    body = buffer("echo", [user("one two three")], max_tokens=2, stream=stream)
    _, chunks = ask(stack, body)
    assert (text_of(chunks), chunks[-1].finish_reason) == ("one two ", FinishReason.LENGTH)


def test_statuses_and_mid_stream_errors_are_the_openai_adapters(stack: Stack) -> None:
    r, _ = ask(stack, buffer("echo@rate_limit", [user("x")]))
    assert (r.status_code, r.headers["retry-after"]) == (429, "1")
    assert r.json()["error"]["code"] == "backend_rate_limited"
    r, _ = ask(stack, buffer("echo@reject", [user("x")]))
    assert r.status_code == 400
    r, chunks = ask(stack, buffer("echo@error:1", [user("a b c")]))
    assert (r.status_code, text_of(chunks)) == (200, "a ")
    assert chunks[-1].error is not None
    assert chunks[-1].error.code == "backend_stream_error"


def test_the_backend_is_ready_through_its_models_endpoint(stack: Stack) -> None:
    r = httpx.get(f"{stack.proxy.url}/readyz")
    assert r.status_code == 200


# -- a Chat Completions client, through the edge ---------------------------------------


def test_a_chat_client_reaches_a_responses_backend(stack: Stack) -> None:
    chunks = list(
        stack.client().chat.completions.create(
            model="echo",
            stream=True,
            stream_options={"include_usage": True},
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hello there"},
            ],
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello there"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    reply = stack.client().chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "find it"}],
        tools=[
            {
                "type": "function",
                "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
            }
        ],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "lookup"  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "tool_calls"


def test_a_chat_clients_rate_limit_is_a_429_with_retry_after(stack: Stack) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        stack.client().chat.completions.create(
            model="echo@rate_limit", messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.response.headers["retry-after"] == "1"
