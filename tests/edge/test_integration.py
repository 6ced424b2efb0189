"""The edge in front of a real proxy and stub, spoken to with the official openai SDK."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.servers import Server, free_port, spawn
from tests.stacks import loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-test-acme"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up",
            "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
        },
    }
]
FORCED: Any = {"type": "function", "function": {"name": "lookup"}}


class Stack:
    def __init__(self, edge: Server, keyed: Server, stub: Server) -> None:
        self.edge, self.keyed, self.stub = edge, keyed, stub
        self._clients: list[openai.OpenAI] = []

    def _keep(self, client: openai.OpenAI) -> openai.OpenAI:
        self._clients.append(client)
        return client

    def client(self, **kw: Any) -> openai.OpenAI:
        return self._keep(
            openai.OpenAI(base_url=f"{self.edge.url}/v1", api_key="unused", max_retries=0, **kw)
        )

    def aclient(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.edge.url}/v1", api_key="unused", max_retries=0)

    def keyed_client(self, key: str) -> openai.OpenAI:
        return self._keep(
            openai.OpenAI(base_url=f"{self.keyed.url}/v1", api_key=key, max_retries=0)
        )

    def stub_stats(self) -> dict[str, int]:
        stats: dict[str, int] = httpx.get(f"{self.stub.url}/stats").json()
        return stats

    def close(self) -> None:
        for client in self._clients:
            client.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("stack")
    stub, proxy, edge, keyed = (free_port() for _ in range(4))
    models = {
        "flatgate-echo": {"provider": "SelfHosted", "aliases": ["echo"]},
        "flatgate-impatient": "SelfHosted",
        "ghost": "OpenAI",
    }
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": proxy, "cooldown_seconds": 0},
        stub={"port": stub},
        backends={
            "stub": loopback(stub),
            "stub-impatient": {"url": loopback(stub), "read_timeout": 1.0},
        },
        routes={
            "flatgate-echo": {"provider": "SelfHosted", "backends": ["stub"]},
            "flatgate-impatient": "stub-impatient",
        },
    )
    # The edges read files of their own: with the proxy's routes in the same
    # file, an edge refuses to start with a model ("ghost") no route serves.
    edge_config = write_stack(
        d / "edge.toml",
        edge={"port": edge, "proxy_url": loopback(proxy), "max_body_bytes": 4194304},
        models=models,
    )
    keyed_config = write_stack(
        d / "keyed.toml",
        edge={"port": keyed, "proxy_url": loopback(proxy), "max_body_bytes": 65536},
        models=models,
        keys={KEY: "acme"},
    )
    services = [
        spawn("stub", ["--config", config], d, port=stub),
        spawn("proxy", ["--config", config], d, port=proxy),
        spawn("edge", ["--config", edge_config], d, port=edge),
        spawn("edge", ["--config", keyed_config], d, port=keyed),
    ]
    start_all(services)
    try:
        stack = Stack(services[2], services[3], services[0])
        yield stack
        stack.close()
    finally:
        stop_all(services)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def words(*texts: str) -> int:
    return sum(len(t.split()) for t in texts)


def test_non_streaming(stack: Stack):
    done = stack.client().chat.completions.create(
        model="flatgate-echo",
        messages=[{"role": "system", "content": "be brief"}, *user("hello there world")],
    )
    assert done.id.startswith("chatcmpl-") and done.object == "chat.completion"
    assert done.model == "flatgate-echo" and done.system_fingerprint
    assert done.created > 1_600_000_000
    choice = done.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello there world"
    assert choice.finish_reason == "stop"
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (5, 3)
    assert done.usage.total_tokens == 8


def test_streaming_with_usage(stack: Stack):
    stream = stack.client().chat.completions.create(
        model="echo",
        messages=user(" one two  three "),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " one two  three "
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert deltas == [" one ", "two  ", "three "]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        3,
        3,
        6,
    )


def test_streaming_without_usage_has_no_usage_chunk(stack: Stack):
    chunks = list(
        stack.client().chat.completions.create(
            model="flatgate-echo", messages=user("a b"), stream=True
        )
    )
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_max_tokens_cuts_with_length(stack: Stack):
    client = stack.client()
    done = client.chat.completions.create(
        model="flatgate-echo", messages=user("one two three four"), max_tokens=2
    )
    assert done.choices[0].message.content == "one two "
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 2
    chunks = list(
        client.chat.completions.create(
            model="flatgate-echo",
            messages=user("one two three four"),
            max_completion_tokens=3,
            stream=True,
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one two three "
    assert chunks[-1].choices[0].finish_reason == "length"


def test_forced_tool_call(stack: Stack):
    client = stack.client()
    done = client.chat.completions.create(
        model="flatgate-echo", messages=user("weather in Paris"), tools=TOOLS, tool_choice=FORCED
    )
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"input": "weather in Paris"}


def test_forced_tool_call_streaming(stack: Stack):
    chunks = list(
        stack.client().chat.completions.create(
            model="flatgate-echo",
            messages=user("weather in Paris"),
            tools=TOOLS,
            tool_choice=FORCED,
            stream=True,
        )
    )
    calls = [
        c.choices[0].delta.tool_calls[0]
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    ]
    first, rest = calls[0], calls[1:]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function is not None and first.function.name == "lookup"
    assert rest and all(r.id is None and r.function and r.function.name is None for r in rest)
    arguments = "".join((c.function.arguments or "") for c in calls if c.function)
    assert json.loads(arguments) == {"input": "weather in Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_multi_turn_with_tool_results(stack: Stack):
    messages: list[Any] = [
        {"role": "developer", "content": "use tools"},
        *user("weather in Paris"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"input": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and cloudy"},
        {"role": "assistant", "content": "It is 18C."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "tomorrow?"}],
        },
    ]
    done = stack.client().chat.completions.create(
        model="flatgate-echo", messages=messages, tools=TOOLS
    )
    assert done.choices[0].message.content == "and tomorrow?"
    assert done.usage is not None
    assert done.usage.prompt_tokens == words(
        "use tools", "weather in Paris", "18C and cloudy", "It is 18C.", "and tomorrow?"
    )


UNICODE = '  héllo\tworld ☃ 🎉 "quotes" \\back\\slash\n\n  spaced   out \u2028 end  '


def test_unicode_and_whitespace_round_trip(stack: Stack):
    client = stack.client()
    done = client.chat.completions.create(model="flatgate-echo", messages=user(UNICODE))
    assert done.choices[0].message.content == UNICODE
    chunks = list(
        client.chat.completions.create(model="flatgate-echo", messages=user(UNICODE), stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == UNICODE


def test_one_megabyte_prompt(stack: Stack):
    text = ("lorem ipsum dolor sit amet " * 40_000)[: 1 << 20]
    client = stack.client(timeout=60)
    done = client.chat.completions.create(model="flatgate-echo", messages=user(text))
    assert done.choices[0].message.content == text
    chunks = list(
        client.chat.completions.create(
            model="flatgate-echo", messages=user(text), stream=True, max_tokens=3
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "lorem ipsum dolor "


async def test_async_client_and_50_concurrent_streams(stack: Stack):
    client = stack.aclient()

    async def one(i: int) -> None:
        text = f"stream {i} says " + " ".join(f"w{i}x{j}" for j in range(i % 7 + 1))
        stream = await client.chat.completions.create(
            model="flatgate-echo",
            messages=user(text),
            stream=True,
            stream_options={"include_usage": True},
        )
        got = []
        usage = None
        async for chunk in stream:
            if chunk.choices:
                got.append(chunk.choices[0].delta.content or "")
            usage = chunk.usage or usage
        assert "".join(got) == text
        assert usage is not None and usage.completion_tokens == len(text.split())

    try:
        done = await client.chat.completions.create(model="echo", messages=user("async hi"))
        assert done.choices[0].message.content == "async hi"
        await asyncio.gather(*(one(i) for i in range(50)))
    finally:
        await client.close()


def test_models_list(stack: Stack):
    ids = [m.id for m in stack.client().models.list()]
    assert ids == ["flatgate-echo", "echo", "flatgate-impatient", "ghost"]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"top_p": -1}, "top_p"),
        ({"n": 0}, "n"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.[0].role"),
        ({"messages": []}, "messages"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}],
                    }
                ]
            },
            "messages.[0].content.[0].image_url.url",
        ),
    ],
)
def test_bad_requests_are_bad_request_errors(stack: Stack, kwargs: dict[str, Any], param: str):
    args: dict[str, Any] = {"model": "flatgate-echo", "messages": user("x"), **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        stack.client().chat.completions.create(**args)
    assert info.value.status_code == 400
    assert info.value.param == param
    assert info.value.type == "invalid_request_error"


def test_bad_json_is_400(stack: Stack):
    r = httpx.post(f"{stack.edge.url}/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_not_found(stack: Stack):
    client = stack.client()
    for model in ("gpt-9", "ghost"):  # not configured / configured at the edge, no route
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(model=model, messages=user("x"))
        assert info.value.code == "model_not_found" and info.value.param == "model"


def test_keys(stack: Stack):
    with pytest.raises(openai.AuthenticationError) as info:
        stack.keyed_client("sk-wrong").chat.completions.create(
            model="flatgate-echo", messages=user("x")
        )
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    r = httpx.post(
        f"{stack.keyed.url}/v1/chat/completions",
        json={"model": "flatgate-echo", "messages": user("x")},
    )
    assert r.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        stack.keyed_client("sk-wrong").models.list()
    good = stack.keyed_client(KEY)
    done = good.chat.completions.create(model="flatgate-echo", messages=user("let me in"))
    assert done.choices[0].message.content == "let me in"
    assert [m.id for m in good.models.list()] == [
        "flatgate-echo",
        "echo",
        "flatgate-impatient",
        "ghost",
    ]
    # keys off on the other edge: any key (or the SDK's placeholder) works
    assert (
        stack.client()
        .chat.completions.create(model="flatgate-echo", messages=user("open"))
        .choices[0]
        .message.content
        == "open"
    )


def test_body_over_the_limit_is_413(stack: Stack):
    with pytest.raises(openai.APIStatusError) as info:
        stack.keyed_client(KEY).chat.completions.create(
            model="flatgate-echo", messages=user("x" * 70_000)
        )
    assert info.value.status_code == 413 and info.value.code == "body_too_large"


def test_method_not_allowed(stack: Stack):
    r = httpx.get(f"{stack.edge.url}/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_backend_failure_is_502(stack: Stack):
    with pytest.raises(openai.InternalServerError) as info:
        stack.client().chat.completions.create(
            model="flatgate-echo", messages=user("x"), metadata={"stub.fault": "fail"}
        )
    assert info.value.status_code == 502


def test_backend_timeout_is_504(stack: Stack):
    with pytest.raises(openai.InternalServerError) as info:
        stack.client().chat.completions.create(
            model="flatgate-impatient", messages=user("x"), metadata={"stub.fault": "stall"}
        )
    assert info.value.status_code == 504


def test_failure_mid_stream_raises_in_the_sdk(stack: Stack):
    stream = stack.client().chat.completions.create(
        model="flatgate-echo",
        messages=user("one two three four"),
        stream=True,
        metadata={"stub.fault": "die", "stub.fault_after": "2"},
    )
    got = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "one two "
    assert info.value.type == "api_error" and info.value.code


def test_stall_mid_stream_raises_in_the_sdk(stack: Stack):
    stream = stack.client().chat.completions.create(
        model="flatgate-impatient",
        messages=user("one two three"),
        stream=True,
        metadata={"stub.fault": "hang", "stub.fault_after": "1"},
    )
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass


def test_client_disconnect_cancels_the_backend(stack: Stack):
    before = stack.stub_stats()["cancelled"]
    stream = stack.client().chat.completions.create(
        model="flatgate-echo",
        messages=user("one two three"),
        stream=True,
        metadata={"stub.fault": "hang", "stub.fault_after": "1"},
    )
    first = next(iter(stream))
    assert first.choices[0].delta.content == "one "
    stream.close()
    deadline = time.monotonic() + 10
    while stack.stub_stats()["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.stub_stats()["cancelled"] == before + 1
    metrics = httpx.get(f"{stack.edge.url}/metrics").text
    assert "flatgate_edge_active_streams 0.0" in metrics


def test_health_and_metrics(stack: Stack):
    assert httpx.get(f"{stack.edge.url}/healthz").json() == {"status": "ok"}
    text = httpx.get(f"{stack.edge.url}/metrics").text
    assert 'flatgate_edge_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert "flatgate_edge_translate_seconds_bucket" in text
    assert "flatgate_edge_gc_pause_seconds_total" in text
