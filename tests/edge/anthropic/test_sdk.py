"""The official ``anthropic`` SDK, sync and async, with ``base_url`` at a real
flatgate: the one-process gateway, and the split edge + proxy for a few cases
(``tests.edge.anthropic.stack``). The stub echoes the last user message word
by word, so every answer is checked exactly. Clients make no retries: each
failure must surface as the SDK's matching exception on the first answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from flatgate.proxy.wire.request.estimate import estimate_tokens
from tests.edge.anthropic.stack import KEY, MAX_BODY, MessagesStack
from tests.servers import Server

pytestmark = pytest.mark.integration

TOOLS: Any = [
    {
        "name": "lookup",
        "description": "looks things up",
        "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}},
    }
]
UNICODE = 'naïve café 東京タワー\tschön ☕🙂 e\u0301 "quoted" back\\slash\nnew line עברית'


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def sync(messages: MessagesStack) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=messages.gateway.url, api_key=KEY, max_retries=0, timeout=20)
    yield c
    c.close()


def client(server: Server, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=20)


def test_a_whole_message(sync: anthropic.Anthropic) -> None:
    m: Any = sync.messages.create(model="echo", max_tokens=64, messages=user("hello big world"))
    assert (m.type, m.role, m.model) == ("message", "assistant", "echo")
    assert m.id.startswith("msg_")
    assert [(b.type, b.text) for b in m.content] == [("text", "hello big world")]
    assert (m.stop_reason, m.stop_sequence) == ("end_turn", None)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (3, 3)


def test_a_streamed_message_event_by_event(sync: anthropic.Anthropic) -> None:
    events = list(
        sync.messages.create(
            model="echo", max_tokens=64, stream=True, messages=user("one two three")
        )
    )
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]  # type: ignore[union-attr]
    assert deltas == ["one ", "two ", "three"]
    final: Any = events[-2]
    assert final.delta.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 3)


def test_the_stream_helper(sync: anthropic.Anthropic) -> None:
    with sync.messages.stream(
        model="echo", max_tokens=64, system="be brief", messages=user("alpha beta gamma")
    ) as stream:
        text = "".join(stream.text_stream)
        final: Any = stream.get_final_message()
    assert text == "alpha beta gamma"
    assert final.content[0].text == text
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == (
        "end_turn",
        5,
        3,
    )


async def test_the_async_client_create_streaming_and_not_and_its_stream_helper(
    messages: MessagesStack,
) -> None:
    c = anthropic.AsyncAnthropic(base_url=messages.gateway.url, api_key=KEY, max_retries=0)
    try:
        m: Any = await c.messages.create(model="echo", max_tokens=8, messages=user("async hello"))
        assert m.content[0].text == "async hello"
        events: list[Any] = [
            e
            async for e in await c.messages.create(
                model="echo", max_tokens=8, stream=True, messages=user("async events")
            )
        ]
        assert (events[0].type, events[-2].delta.stop_reason, events[-1].type) == (
            "message_start",
            "end_turn",
            "message_stop",
        )
        assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == (
            "async events"
        )
        async with c.messages.stream(model="echo", max_tokens=8, messages=user("a b c")) as s:
            text = "".join([t async for t in s.text_stream])
            final = await s.get_final_message()
        assert (text, final.stop_reason) == ("a b c", "end_turn")
    finally:
        await c.close()


async def test_fifty_concurrent_streams(messages: MessagesStack) -> None:
    c = anthropic.AsyncAnthropic(
        base_url=messages.gateway.url, api_key=KEY, max_retries=0, timeout=30
    )

    async def one(i: int) -> str:
        text = f"stream {i} says {'word ' * (i % 7)}done"
        async with c.messages.stream(model="echo", max_tokens=64, messages=user(text)) as s:
            got = "".join([t async for t in s.text_stream])
        assert got == text
        return got

    try:
        got = await asyncio.gather(*(one(i) for i in range(50)))
    finally:
        await c.close()
    assert len(set(got)) == 50


def test_a_tool_use_round_trip(sync: anthropic.Anthropic) -> None:
    first: Any = sync.messages.create(
        model="echo",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "lookup"},
        messages=user("find the weather"),
    )
    assert first.stop_reason == "tool_use"
    [call] = first.content
    assert (call.type, call.name, call.input) == (
        "tool_use",
        "lookup",
        {"input": "find the weather"},
    )
    second: Any = sync.messages.create(
        model="echo",
        max_tokens=64,
        tools=TOOLS,
        messages=[
            *user("find the weather"),
            {"role": "assistant", "content": [call.model_dump()]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"},
                    {"type": "text", "text": "so, sunny then"},
                ],
            },
        ],
    )
    assert (second.stop_reason, second.content[0].text) == ("end_turn", "so, sunny then")


def test_a_streamed_tool_call_accumulates(sync: anthropic.Anthropic) -> None:
    with sync.messages.stream(
        model="echo",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "lookup"},
        messages=user("stream the call"),
    ) as stream:
        final: Any = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].input == {"input": "stream the call"}


def test_max_tokens_cuts(sync: anthropic.Anthropic) -> None:
    m: Any = sync.messages.create(model="echo", max_tokens=2, messages=user("one two three four"))
    assert (m.content[0].text, m.stop_reason, m.usage.output_tokens) == (
        "one two ",
        "max_tokens",
        2,
    )


def test_system_prompts(sync: anthropic.Anthropic) -> None:
    systems: list[Any] = [
        "you echo",
        [
            {"type": "text", "text": "you ", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "echo"},
        ],
    ]
    for system in systems:
        m: Any = sync.messages.create(
            model="echo", max_tokens=9, system=system, messages=user("hi there")
        )
        assert m.content[0].text == "hi there"
        assert m.usage.input_tokens == 4  # the stub counts words: "you echo" + "hi there"


def test_unicode_round_trips_exactly(sync: anthropic.Anthropic) -> None:
    whole: Any = sync.messages.create(model="echo", max_tokens=64, messages=user(UNICODE))
    assert whole.content[0].text == UNICODE
    with sync.messages.stream(model="echo", max_tokens=64, messages=user(UNICODE)) as s:
        assert "".join(s.text_stream) == UNICODE


def test_a_stop_sequence(sync: anthropic.Anthropic) -> None:
    m: Any = sync.messages.create(
        model="echo", max_tokens=64, stop_sequences=["STOP"], messages=user("go on STOP here")
    )
    assert (m.content[0].text, m.stop_reason, m.stop_sequence) == (
        "go on ",
        "stop_sequence",
        "STOP",
    )


def test_count_tokens(sync: anthropic.Anthropic) -> None:
    counted = sync.messages.count_tokens(model="echo", system="sys", messages=user("x" * 40))
    assert counted.input_tokens == estimate_tokens(43, 2)


# -- each failure, as the SDK's exception ---------------------------------------


def _create(c: anthropic.Anthropic, model: str, **kw: Any) -> Any:
    return c.messages.create(**{"model": model, "max_tokens": 16, "messages": user("hi"), **kw})


@pytest.mark.parametrize(
    ("model", "kw", "exc", "status", "kind"),
    [
        (
            "echo",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "A",
                                },
                            }
                        ],
                    }
                ]
            },
            anthropic.BadRequestError,
            400,
            "invalid_request_error",
        ),
        ("echo@reject", {}, anthropic.BadRequestError, 400, "invalid_request_error"),
        ("gpt-9", {}, anthropic.NotFoundError, 404, "not_found_error"),
        (
            "echo",
            {"system": "x" * MAX_BODY},
            anthropic.ContentTooLargeError,
            413,
            "request_too_large",
        ),
        ("echo@rate_limit", {}, anthropic.RateLimitError, 429, "rate_limit_error"),
        ("closed", {}, anthropic.InternalServerError, 502, "api_error"),
        ("slow@stall", {}, anthropic.GatewayTimeoutError, 504, "timeout_error"),
    ],
)
def test_errors_are_the_sdks_exceptions(  # noqa: PLR0917
    sync: anthropic.Anthropic, model: str, kw: dict[str, Any], exc: type, status: int, kind: str
) -> None:
    with pytest.raises(exc) as info:
        _create(sync, model, **kw)
    err: Any = info.value
    assert (err.status_code, err.type) == (status, kind), err.body
    assert err.body["type"] == "error" and err.body["error"]["message"]
    if status == 429:
        assert err.response.headers["retry-after"] == "1"


def test_backends_at_capacity_are_overloaded(sync: anthropic.Anthropic) -> None:
    """Every backend of the route at its ``max_outstanding``: 529."""
    with sync.messages.stream(model="busy@hang:1", max_tokens=8, messages=user("a b")) as held:
        assert next(iter(held.text_stream)) == "a "
        with pytest.raises(anthropic.OverloadedError) as info:
            _create(sync, "busy")
    assert (info.value.status_code, info.value.type) == (529, "overloaded_error")
    assert info.value.response.headers["retry-after"] == "1"


def test_a_wrong_key_is_an_authentication_error(messages: MessagesStack) -> None:
    for c in (client(messages.gateway, "sk-wrong"), client(messages.edge, "sk-wrong")):
        with pytest.raises(anthropic.AuthenticationError) as info, c:
            _create(c, "echo")
        assert info.value.type == "authentication_error"


def test_a_failure_mid_stream_raises_while_iterating(sync: anthropic.Anthropic) -> None:
    for model in ("echo@die:2", "echo@error:2"):
        got: list[str] = []
        with (
            pytest.raises(anthropic.APIStatusError) as info,
            sync.messages.stream(model=model, max_tokens=16, messages=user("a b c d")) as s,
        ):
            got.extend(s.text_stream)
        assert "".join(got) == "a b "
        body: Any = info.value.body
        assert body["error"]["type"] == "api_error"


# -- the split edge and proxy -------------------------------------------------


def test_the_split_edge(messages: MessagesStack) -> None:
    with client(messages.edge) as c:
        m: Any = c.messages.create(model="echo-anthropic", max_tokens=8, messages=user("split hi"))
        assert m.content[0].text == "split hi"
        with c.messages.stream(model="echo-openai", max_tokens=8, messages=user("x y")) as s:
            assert "".join(s.text_stream) == "x y"


@pytest.mark.parametrize("front", ["gateway", "edge"])
def test_the_query_string_is_ignored(messages: MessagesStack, front: str) -> None:
    """Agents call ``/v1/messages?beta=true``."""
    server = getattr(messages, front)
    r = httpx.post(
        f"{server.url}/v1/messages?beta=true",
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        content=json.dumps({"model": "echo", "max_tokens": 4, "messages": user("beta")}),
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "beta"}]
