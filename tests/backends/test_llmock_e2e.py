"""The adapters against a third-party implementation of each API (llmock),
end to end: the official ``openai`` SDK -> edge -> proxy -> llmock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.backends.helpers import SdkStack
from tests.mocks.llmock import LLMock, running_llmock
from tests.servers import Server, free_port, spawn
from tests.stacks import loopback, write_stack

pytestmark = pytest.mark.integration

OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class Stack(SdkStack):
    def __init__(self, mock: LLMock, edge: Server) -> None:
        super().__init__(edge)
        self.mock = mock


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("llmock")
    with running_llmock(d) as mock:
        proxy_port, edge_port = free_port(), free_port()
        config = write_stack(
            d / "flatgate.toml",
            proxy={"port": proxy_port, "cooldown_seconds": 0},
            backends={
                "openai-mock": {
                    "url": mock.openai_url,
                    "protocol": "openai",
                    "api_key": "sk-flatgate-upstream",
                },
                "anthropic-mock": {
                    "url": mock.anthropic_url,
                    "protocol": "anthropic",
                    "api_key": "sk-ant-flatgate-upstream",
                    "default_max_tokens": 321,
                },
            },
            routes={"gpt-*": "openai-mock", "claude-*": "anthropic-mock"},
            edge={"port": edge_port, "proxy_url": loopback(proxy_port)},
            models={OPENAI_MODEL: "OpenAI", ANTHROPIC_MODEL: "Anthropic"},
        )
        proxy = spawn("proxy", ["--config", config], d, port=proxy_port)
        edge = spawn("edge", ["--config", config], d, port=edge_port)
        try:
            proxy.wait_healthy()
            edge.wait_healthy()
            stack = Stack(mock, edge)
            yield stack
            stack.close()
        finally:
            edge.stop()
            proxy.stop()


@pytest.fixture(autouse=True)
def clean(stack: Stack) -> None:
    stack.mock.reset()


def last_request(stack: Stack) -> dict[str, Any]:
    entries = stack.mock.requests()
    assert entries, "llmock received nothing"
    body: dict[str, Any] = entries[-1]["body"]
    return body


def stream_text(stack: Stack, model: str, **kw: Any) -> tuple[str, Any, Any]:
    chunks = list(
        stack.client().chat.completions.create(
            model=model,
            stream=True,
            stream_options={"include_usage": True},
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "say something"},
            ],
            **kw,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    return text, finish, chunks[-1].usage


@pytest.mark.parametrize("model", [OPENAI_MODEL, ANTHROPIC_MODEL])
def test_scripted_text_streams_through(stack: Stack, model: str) -> None:
    provider = "openai" if model == OPENAI_MODEL else "anthropic"
    stack.mock.scenario(
        {"type": "reply", "text": "Bonjour from the mock", "match": {"provider": provider}}
    )
    text, finish, usage = stream_text(stack, model)
    assert text == "Bonjour from the mock"
    assert finish == ["stop"]
    assert usage is not None and usage.completion_tokens > 0


def test_openai_request_is_what_the_api_expects(stack: Stack) -> None:
    stream_text(stack, OPENAI_MODEL, max_tokens=77, temperature=0.5, stop=["END"])
    sent = last_request(stack)
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == OPENAI_MODEL
    assert sent["max_tokens"] == 77
    assert sent["stop"] == ["END"]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}


def test_anthropic_request_is_what_the_api_expects(stack: Stack) -> None:
    stream_text(stack, ANTHROPIC_MODEL, stop=["END"])
    sent = last_request(stack)
    assert sent["stream"] is True
    assert sent["max_tokens"] == 321  # the backend's default_max_tokens
    assert sent["system"] == [{"type": "text", "text": "Be brief."}]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "say something"}]}
    ]
    assert sent["stop_sequences"] == ["END"]


@pytest.mark.parametrize("model", [OPENAI_MODEL, ANTHROPIC_MODEL])
def test_streamed_tool_call_arrives_whole(stack: Stack, model: str) -> None:
    provider = "openai" if model == OPENAI_MODEL else "anthropic"
    stack.mock.scenario(
        {
            "type": "reply",
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            "match": {"provider": provider},
        }
    )
    stream: Any = stack.client().chat.completions.create(
        model=model,
        stream=True,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or ():
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += tc.id or ""
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["id"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_tool_result_round_trip_to_anthropic(stack: Stack) -> None:
    """The assistant's tool call and its result go back as tool_use and
    tool_result blocks, the result in the user turn that follows."""
    stack.mock.scenario({"type": "reply", "text": "It is 18C.", "match": {"provider": "anthropic"}})
    reply = stack.client().chat.completions.create(
        model=ANTHROPIC_MODEL,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        ],
    )
    assert reply.choices[0].message.content == "It is 18C."
    sent = last_request(stack)
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ],
    }
    assert sent["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}],
    }


@pytest.mark.parametrize("model", [OPENAI_MODEL, ANTHROPIC_MODEL])
def test_backend_429_is_a_rate_limit_error_with_retry_after(stack: Stack, model: str) -> None:
    provider = "openai" if model == OPENAI_MODEL else "anthropic"
    stack.mock.scenario(
        {"type": "fail", "status": 429, "retry_after": 7, "match": {"provider": provider}}
    )
    with pytest.raises(openai.RateLimitError) as info:
        stream_text(stack, model)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"


@pytest.mark.parametrize("model", [OPENAI_MODEL, ANTHROPIC_MODEL])
def test_a_stream_cut_short_is_an_error_not_a_short_answer(stack: Stack, model: str) -> None:
    provider = "openai" if model == OPENAI_MODEL else "anthropic"
    stack.mock.scenario(
        {"type": "reply", "text": "one two three four five six", "match": {"provider": provider}},
        {
            "type": "stream_fault",
            "kind": "truncate",
            "after_chunks": 2,
            "match": {"provider": provider, "stream": True},
        },
    )
    with pytest.raises(openai.APIError) as info:
        stream_text(stack, model)
    assert "backend_stream_truncated" in str(info.value.body) or "ended" in info.value.message


@pytest.mark.parametrize("model", [OPENAI_MODEL, ANTHROPIC_MODEL])
def test_parallel_tool_calls_arrive_as_separate_calls(stack: Stack, model: str) -> None:
    provider = "openai" if model == OPENAI_MODEL else "anthropic"
    stack.mock.scenario(
        {
            "type": "reply",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
            "match": {"provider": provider},
        }
    )
    reply = stack.client().chat.completions.create(
        model=model,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "weather in Paris and Oslo?"}],
    )
    calls = reply.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    assert len({c.id for c in calls}) == 2
    assert reply.choices[0].finish_reason == "tool_calls"
