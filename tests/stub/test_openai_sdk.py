"""``flatgate stub --protocol openai`` spoken to with the official openai SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.servers import Server
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

KEY = "sk-stub-test"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "looks things up",
            "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
        },
    }
]
FORCE: Any = {"type": "function", "function": {"name": "lookup"}}


def user(text: str) -> list[Any]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("openai", tmp_path_factory.mktemp("openai-stub")) as s:
        yield s


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("openai", tmp_path_factory.mktemp("openai-keyed"), "--api-key", KEY) as s:
        yield s


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def client(server: Server, key: str = "unused", timeout: float = 10) -> openai.OpenAI:
    """A client without retries, closed when the test ends."""
    c = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=timeout)
    _clients.append(c)
    return c


def test_a_whole_answer(server: Server) -> None:
    r = client(server).chat.completions.create(model="echo-1", messages=user("hello big  world"))
    assert r.object == "chat.completion" and r.model == "echo-1"
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello big  world"
    assert choice.finish_reason == "stop"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (5, 3, 8)


def test_a_streamed_answer_word_by_word(server: Server) -> None:
    stream = client(server).chat.completions.create(
        model="echo-1", messages=user("  one two\tthree "), stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert deltas == ["  one ", "two\t", "three "]
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert {c.id for c in chunks} == {chunks[0].id}


def test_usage_on_a_last_chunk_when_asked(server: Server) -> None:
    chunks = list(
        client(server).chat.completions.create(
            model="echo-1",
            messages=user("a b c"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (5, 3)
    assert chunks[-2].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_cuts_with_length(server: Server, stream: bool, limit: str) -> None:
    kw: Any = {limit: 2}
    c = client(server).chat.completions
    if stream:
        chunks = list(c.create(model="m", messages=user("a b c d"), stream=True, **kw))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        r = c.create(model="m", messages=user("a b c d"), **kw)
        text, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
    assert (text, finish) == ("a b ", "length")


def test_max_completion_tokens_wins(server: Server) -> None:
    r = client(server).chat.completions.create(
        model="m", messages=user("a b c d"), max_tokens=1, max_completion_tokens=3
    )
    assert r.choices[0].message.content == "a b c "


def test_a_streamed_tool_call_assembles_in_the_sdk(server: Server) -> None:
    with client(server).chat.completions.stream(
        model="m",
        messages=user('find "this" here'),
        tools=TOOLS,
        tool_choice=FORCE,
        extra_headers={"x-request-id": "rid-42"},
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.id == "call_rid-42"
    assert call.type == "function"
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"input": 'find "this" here'}


def test_a_streamed_tool_call_comes_in_fragments(server: Server) -> None:
    chunks = list(
        client(server).chat.completions.create(
            model="m", messages=user("x y z"), tools=TOOLS, tool_choice=FORCE, stream=True
        )
    )
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert calls[0][0].id == "call_stub" and calls[0][0].function is not None
    assert calls[0][0].function.name == "lookup"
    fragments = [tc[0].function.arguments for tc in calls[1:] if tc[0].function]
    assert len(fragments) >= 2
    assert json.loads("".join(f or "" for f in fragments)) == {"input": "x y z"}


def test_a_whole_tool_call(server: Server) -> None:
    r = client(server).chat.completions.create(
        model="m", messages=user("q"), tools=TOOLS, tool_choice=FORCE
    )
    [call] = r.choices[0].message.tool_calls or []
    assert call.function.name == "lookup"  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ("fail", openai.InternalServerError, 503),
        ("overloaded", openai.InternalServerError, 503),
        ("rate_limit", openai.RateLimitError, 429),
        ("auth", openai.AuthenticationError, 401),
        ("reject", openai.BadRequestError, 400),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_faults_before_the_first_byte(
    server: Server, fault: str, error: type[openai.APIStatusError], status: int, stream: bool
) -> None:
    with pytest.raises(error) as info:
        client(server).chat.completions.create(
            model=f"echo@{fault}", messages=user("x"), stream=stream
        )
    assert info.value.status_code == status
    if fault == "reject":
        assert info.value.code == "context_length_exceeded"
        assert info.value.param == "messages"
    if fault == "rate_limit":
        assert info.value.response.headers["retry-after"] == "1"
        assert info.value.code == "rate_limit_exceeded"


def test_a_mid_stream_error_raises_api_error(server: Server) -> None:
    got: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client(server).chat.completions.create(
            model="echo@error:2", messages=user("one two three"), stream=True
        ):
            got.append(chunk.choices[0].delta.content or "")
    assert not isinstance(info.value, openai.APIStatusError)
    assert "stub fault: error" in info.value.message
    assert "".join(got) == "one two "


def test_a_non_streamed_error_is_a_500(server: Server) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client(server).chat.completions.create(model="echo@error", messages=user("x"))
    assert info.value.status_code == 500


def test_die_cuts_the_stream(server: Server) -> None:
    got: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client(server).chat.completions.create(
            model="echo@die:1", messages=user("one two three"), stream=True
        ):
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "one "


@pytest.mark.parametrize("fault", ["hang:1", "stall"])
def test_silence_times_out(server: Server, fault: str) -> None:
    with pytest.raises(openai.APITimeoutError):
        list(
            client(server, timeout=1).chat.completions.create(
                model=f"echo@{fault}", messages=user("one two"), stream=True
            )
        )


@pytest.mark.parametrize(
    ("messages", "kw", "param"),
    [
        ([], {}, "messages"),
        ([{"role": "robot", "content": "x"}], {}, "messages[0].role"),
        ([*user("x"), {"role": "tool", "content": "r"}], {}, "messages[2].tool_call_id"),
        (user("x"), {"max_tokens": 0}, "max_tokens"),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}],
                }
            ],
            {},
            "messages[0].content[0].image_url.url",
        ),
    ],
)
def test_invalid_requests_are_400s(
    server: Server, messages: list[Any], kw: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(model="m", messages=messages, **kw)
    assert info.value.param == param
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"


def test_a_missing_model_is_a_400(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": user("x")})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "you must provide a model parameter"


def test_the_api_key(keyed: Server) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        client(keyed, "sk-wrong").chat.completions.create(model="m", messages=user("x"))
    assert info.value.code == "invalid_api_key"
    r = client(keyed, KEY).chat.completions.create(model="m", messages=user("let me in"))
    assert r.choices[0].message.content == "let me in"
    assert [m.id for m in client(keyed, KEY).models.list()] == ["flatgate-echo"]
    assert httpx.get(f"{keyed.url}/healthz").status_code == 200
    # vLLM's probe too, which vllm-router waits on before it listens.
    assert httpx.get(f"{keyed.url}/health").status_code == 200
    assert httpx.get(f"{keyed.url}/stats").json()["protocol"] == "openai"


async def test_concurrent_async_streams_get_their_own_words(server: Server) -> None:
    aclient = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)

    async def one(i: int) -> str:
        text = f"stream {i} says {i * 7}"
        stream = await aclient.chat.completions.create(model="m", messages=user(text), stream=True)
        got = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert got == text
        return got

    try:
        assert len(await asyncio.gather(*(one(i) for i in range(20)))) == 20
    finally:
        await aclient.close()
