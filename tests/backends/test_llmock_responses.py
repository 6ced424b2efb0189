"""The ``openai-responses`` adapter against a third-party implementation of
the Responses API: llmock's ``POST /v1/responses`` router (``tests.mocks
.llmock``), as the proxy's backend, spoken to with ``CompletionRequest``
buffers and with the openai SDK through the edge.

What llmock's router does not cover (so these tests cannot either): reasoning
items (it never sends one, and ignores them in ``input``), encrypted content,
hosted tools (it takes any ``tools`` entry and runs none), ``include``,
``response.incomplete`` (a cut answer comes as ``response.completed`` whose
status is ``incomplete``), ``response.failed`` and ``error`` events (its
stream faults cut, truncate or garble the stream at the transport), cached
tokens, refusals, and any validation of the input items. The stub
(``test_responses_e2e``, ``test_responses_whole_e2e``) and the documented
event fixtures (``test_responses_stream``, ``test_responses_whole``) cover
those.

A request the client does not stream is asked for whole (``stream:
false``): llmock answers it with the ``response`` object, and its journal
says whether it streamed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseFunctionToolCall

from flatgate.proxy.wire.chunk.frames import Chunk, FrameSplitter
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.request.writer import RequestWriter
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
from tests.mocks.llmock import LLMock, running_llmock
from tests.servers import Server, free_port, spawn
from tests.stacks import loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

MODEL = "gpt-4.1-mini"


class Stack(SdkStack):
    def __init__(self, mock: LLMock, edge: Server, proxy: Server) -> None:
        super().__init__(edge)
        self.mock = mock
        self.proxy = proxy


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("llmock-responses")
    with running_llmock(d) as mock:
        proxy_port, edge_port = free_port(), free_port()
        config = write_stack(
            d / "flatgate.toml",
            proxy={"port": proxy_port, "cooldown_seconds": 0},
            backends={
                "responses-mock": {
                    "url": mock.openai_url,
                    "protocol": "openai-responses",
                    "api_key": "sk-flatgate-upstream",
                },
            },
            routes={"gpt-*": "responses-mock"},
            edge={"port": edge_port, "proxy_url": loopback(proxy_port)},
            models={MODEL: "OpenAI"},
        )
        servers = [
            spawn("proxy", ["--config", config], d, port=proxy_port),
            spawn("edge", ["--config", config], d, port=edge_port),
        ]
        try:
            for s in servers:
                s.wait_healthy()
            stack = Stack(mock, servers[1], servers[0])
            yield stack
            stack.close()
        finally:
            stop_all(servers)


@pytest.fixture(autouse=True)
def clean(stack: Stack) -> None:
    stack.mock.reset()


def sent(stack: Stack, streamed: bool | None = None) -> dict[str, Any]:
    """The body llmock last received (``streamed``: checked against its
    journal's record of whether it answered with a stream)."""
    entries = stack.mock.requests()
    assert entries, "llmock received nothing"
    assert entries[-1]["path"] == "/v1/responses"
    if streamed is not None:
        assert entries[-1]["stream"] is streamed
    body: dict[str, Any] = entries[-1]["body"]
    return body


def ask(stack: Stack, text: str, **kw: Any) -> tuple[httpx.Response, list[Chunk]]:
    tools = kw.pop("tools", False)
    extras = kw.pop("extras", None)
    w = RequestWriter()
    w.strings(
        request_id="rid-1",
        model_name=MODEL,
        tenant="",
        user="",
        tool_choice_name="get_weather" if tools else "",
        response_format=b"",
        extras=json.dumps(extras).encode() if extras else b"",
    )
    w.messages([(int(Role.System), b"Be brief."), (int(Role.User), text.encode())])
    if tools:
        w.tools([(b"get_weather", b"Current weather", b'{"type":"object"}', False)])
    body = w.finish(
        provider=int(Provider.OpenAI),
        tool_choice=int(ToolChoiceMode.Function) if tools else 0,
        extras_dialect=int(ApiDialect.OPENAI_RESPONSES) if extras else 0,
        **kw,
    )
    r = httpx.post(
        f"{stack.proxy.url}/v1/completions",
        content=body,
        headers={"content-type": FLATBUFFERS, "accept": FRAMES},
        timeout=10,
    )
    chunks = (
        [read_chunk(f) for f in FrameSplitter().feed(r.content)] if r.status_code == 200 else []
    )
    return r, chunks


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_scripted_text_comes_through_with_usage(stack: Stack, stream: bool) -> None:
    stack.mock.scenario({"type": "reply", "text": "Bonjour from the mock"})
    r, chunks = ask(stack, "say something", stream=stream)
    assert r.status_code == 200
    assert sent(stack, streamed=stream)["stream"] is stream
    assert "".join(c.content for c in chunks) == "Bonjour from the mock"
    last = chunks[-1]
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is not None and last.usage.completion_tokens > 0
    assert {c.model for c in chunks} == {MODEL}
    if not stream:  # the whole answer: its text, then the final chunk
        assert len(chunks) == 2


def test_the_request_is_what_the_responses_api_expects(stack: Stack) -> None:
    extras = {"prompt_cache_key": "session-1", "tools": [{"type": "web_search"}]}
    r, _ = ask(stack, "say something", max_tokens=77, temperature=0.5, extras=extras)
    body = sent(stack, streamed=False)
    assert (body["stream"], body["store"]) == (False, False)
    assert body["model"] == MODEL
    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "say something"}],
        }
    ]
    assert body["max_output_tokens"] == 77
    assert body["prompt_cache_key"] == "session-1"
    assert "tools" not in body  # llmock runs no hosted tool: not configured as one that does
    assert r.headers[OMITTED_HEADER] == "tools[web_search]"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_tool_call_arrives_whole(stack: Stack, stream: bool) -> None:
    stack.mock.scenario(
        {"type": "reply", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    )
    _, chunks = ask(stack, "weather in Paris?", tools=True, stream=stream)
    assert sent(stack, streamed=stream)["stream"] is stream
    deltas = [d for c in chunks for d in c.tool_calls]
    assert {d.index for d in deltas} == {0}
    assert deltas[0].name == "get_weather" and deltas[0].id
    assert json.loads("".join(d.arguments for d in deltas)) == {"city": "Paris"}
    assert chunks[-1].finish_reason == FinishReason.TOOL_CALLS
    body = sent(stack)
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object"},
            "strict": False,
            "description": "Current weather",
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_parallel_calls_are_separate_calls(stack: Stack, stream: bool) -> None:
    stack.mock.scenario(
        {
            "type": "reply",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
        }
    )
    _, chunks = ask(stack, "weather in Paris and Oslo?", tools=True, stream=stream)
    by_index: dict[int, str] = {}
    for c in chunks:
        for d in c.tool_calls:
            by_index[d.index] = by_index.get(d.index, "") + d.arguments
    assert [json.loads(a) for _, a in sorted(by_index.items())] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]


def test_a_429_is_a_rate_limit_with_retry_after(stack: Stack) -> None:
    stack.mock.scenario({"type": "fail", "status": 429, "retry_after": 7})
    r, _ = ask(stack, "hi")
    assert (r.status_code, r.headers["retry-after"]) == (429, "7")


def test_a_stream_cut_short_is_an_error_not_a_short_answer(stack: Stack) -> None:
    stack.mock.scenario(
        {"type": "reply", "text": "one two three four five six"},
        {"type": "stream_fault", "kind": "truncate", "after_chunks": 4, "match": {"stream": True}},
    )
    r, chunks = ask(stack, "hi", stream=True)
    assert r.status_code == 200
    assert chunks[-1].error is not None
    assert chunks[-1].error.code == "backend_stream_truncated"


def test_the_openai_sdk_through_the_edge(stack: Stack) -> None:
    stack.mock.scenario({"type": "reply", "text": "Hello from the Responses mock"})
    reply = stack.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a question long enough to count"}]
    )
    assert sent(stack, streamed=False)["stream"] is False
    assert reply.choices[0].message.content == "Hello from the Responses mock"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0


def test_the_sdks_responses_client_gets_a_whole_answer(stack: Stack) -> None:
    stack.mock.scenario(
        {"type": "reply", "text": "Checking."},
        {"type": "reply", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    )
    reply = stack.client().responses.create(model=MODEL, input="hello there", stream=False)
    assert sent(stack, streamed=False)["stream"] is False
    assert (reply.status, reply.output_text, reply.model) == ("completed", "Checking.", MODEL)
    assert reply.usage is not None and reply.usage.output_tokens > 0
    tool: FunctionToolParam = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object"},
        "strict": False,
    }
    called = stack.client().responses.create(
        model=MODEL, input="weather in Oslo?", tools=[tool], stream=False
    )
    (call,) = called.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "get_weather" and call.call_id
    assert json.loads(call.arguments) == {"city": "Oslo"}


def test_an_unknown_model_at_the_backend_is_its_own_error(stack: Stack) -> None:
    stack.mock.scenario({"type": "fail", "status": 404, "message": "The model does not exist"})
    with pytest.raises(openai.NotFoundError):
        stack.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
