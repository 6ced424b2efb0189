"""``flatgate stub --protocol anthropic`` spoken to with the official anthropic SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.servers import Server
from tests.stub.helpers import sse_events, stub

pytestmark = pytest.mark.integration

KEY = "sk-ant-stub-test"
TOOLS: list[Any] = [
    {
        "name": "lookup",
        "description": "looks things up",
        "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}},
    }
]
FORCE: Any = {"type": "tool", "name": "lookup"}
HEADERS = {"anthropic-version": "2023-06-01"}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("anthropic", tmp_path_factory.mktemp("anthropic-stub")) as s:
        yield s


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("anthropic", tmp_path_factory.mktemp("anthropic-keyed"), "--api-key", KEY) as s:
        yield s


_clients: list[anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def client(server: Server, key: str = "unused", timeout: float = 10) -> anthropic.Anthropic:
    """A client without retries, closed when the test ends. The SDK appends
    ``/v1/messages`` to ``base_url`` itself."""
    c = anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=timeout)
    _clients.append(c)
    return c


def test_a_whole_message(server: Server) -> None:
    m = client(server).messages.create(
        model="claude-echo",
        max_tokens=64,
        system="be brief",
        messages=user("hello big  world"),
    )
    assert (m.type, m.role, m.model) == ("message", "assistant", "claude-echo")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "hello big  world"  # type: ignore[union-attr]
    assert (m.stop_reason, m.stop_sequence) == ("end_turn", None)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (5, 3)


def test_a_streamed_message_event_by_event(server: Server) -> None:
    events = list(
        client(server).messages.create(
            model="m", max_tokens=64, messages=user("  one two\tthree "), stream=True
        )
    )
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # the SDK drops the ping
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]  # type: ignore[union-attr]
    assert deltas == ["  one ", "two\t", "three "]
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens == 3


def test_the_stream_helper_and_its_final_message(server: Server) -> None:
    with client(server).messages.stream(
        model="m", max_tokens=64, messages=user("stream me please")
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "stream me please"
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 3)


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_cuts_with_max_tokens(server: Server, stream: bool) -> None:
    c = client(server)
    m: anthropic.types.Message
    if stream:
        with c.messages.stream(model="m", max_tokens=2, messages=user("a b c d")) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(model="m", max_tokens=2, messages=user("a b c d"))
    assert m.content[0].text == "a b "  # type: ignore[union-attr]
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_use_round_trip(server: Server, stream: bool) -> None:
    c = client(server)
    ask: Any = {"model": "m", "max_tokens": 64, "tools": TOOLS, "tool_choice": FORCE}
    first = user('find "this" here')
    if stream:
        with c.messages.stream(**ask, messages=first, extra_headers={"x-request-id": "rid-7"}) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(**ask, messages=first, extra_headers={"x-request-id": "rid-7"})
    assert m.stop_reason == "tool_use"
    [block] = m.content
    assert block.type == "tool_use"
    assert (block.id, block.name) == ("toolu_rid-7", "lookup")
    assert block.input == {"input": 'find "this" here'}
    # The result goes back; the echo answers the last user message that has text.
    follow = [
        *first,
        {
            "role": "assistant",
            "content": [block.model_dump(include={"type", "id", "name", "input"})],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": block.id, "content": "found it"},
                {"type": "text", "text": "thanks, now say this"},
            ],
        },
    ]
    answer = c.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=follow)
    assert answer.content[0].text == "thanks, now say this"  # type: ignore[union-attr]
    only_result = [*follow[:2], {"role": "user", "content": [follow[2]["content"][0]]}]
    answer = c.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=only_result)
    assert answer.content[0].text == 'find "this" here'  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ("fail", anthropic.InternalServerError, 503),
        ("overloaded", anthropic.OverloadedError, 529),
        ("rate_limit", anthropic.RateLimitError, 429),
        ("auth", anthropic.AuthenticationError, 401),
        ("reject", anthropic.BadRequestError, 400),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_faults_before_the_first_byte(
    server: Server, fault: str, error: type[anthropic.APIStatusError], status: int, stream: bool
) -> None:
    with pytest.raises(error) as info:
        client(server).messages.create(
            model=f"claude@{fault}", max_tokens=8, messages=user("x"), stream=stream
        )
    assert info.value.status_code == status
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    if fault == "rate_limit":
        assert info.value.response.headers["retry-after"] == "1"
        assert body["error"]["type"] == "rate_limit_error"
    if fault == "reject":
        assert body["error"]["message"].startswith("prompt is too long")


def test_a_mid_stream_error_event_raises(server: Server) -> None:
    got: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for e in client(server).messages.create(
            model="claude@error:2", max_tokens=8, messages=user("one two three"), stream=True
        ):
            if e.type == "content_block_delta":
                got.append(e.delta.text)  # type: ignore[union-attr]
    # The SDK raises the event with the stream's own status, 200.
    assert info.value.status_code == 200
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert "".join(got) == "one two "


def test_die_cuts_the_stream(server: Server) -> None:
    # The SDK does not wrap a broken stream: httpx's error escapes as it is.
    got: list[str] = []
    with pytest.raises(Exception, match=r"incomplete chunked read|peer closed"):
        for e in client(server).messages.create(
            model="claude@die:1", max_tokens=8, messages=user("one two three"), stream=True
        ):
            if e.type == "content_block_delta":
                got.append(e.delta.text)  # type: ignore[union-attr]
    assert got == ["one "]


def test_stall_times_out(server: Server) -> None:
    with pytest.raises(anthropic.APITimeoutError):
        client(server, timeout=1).messages.create(
            model="claude@stall", max_tokens=8, messages=user("x"), stream=True
        )


def test_a_system_role_inside_messages_is_a_400(server: Server) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client(server).messages.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "system", "content": "sys"}, *user("x")],
        )
    assert 'Unexpected role "system"' in str(info.value)


def test_an_empty_text_block_is_a_400(server: Server) -> None:
    with pytest.raises(anthropic.BadRequestError, match="text content blocks must be non-empty"):
        client(server).messages.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}],
        )


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        ({"model": "m", "messages": user("x")}, HEADERS, "max_tokens: Field required"),
        ({"model": "m", "max_tokens": 5, "messages": user("x")}, {}, "anthropic-version"),
    ],
)
def test_raw_requests_the_sdk_would_not_send(
    server: Server, body: dict[str, Any], headers: dict[str, str], message: str
) -> None:
    r = httpx.post(f"{server.url}/v1/messages", json=body, headers=headers)
    assert r.status_code == 400
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert message in doc["error"]["message"]


def test_the_ping_is_on_the_wire(server: Server) -> None:
    body = {"model": "m", "max_tokens": 8, "stream": True, "messages": user("a")}
    r = httpx.post(f"{server.url}/v1/messages", json=body, headers=HEADERS)
    assert [name for name, _ in sse_events(r.text)][:3] == [
        "message_start",
        "content_block_start",
        "ping",
    ]
    assert r.headers["content-type"].startswith("text/event-stream")


def test_the_api_key(keyed: Server) -> None:
    with pytest.raises(anthropic.AuthenticationError) as info:
        client(keyed, "wrong").messages.create(model="m", max_tokens=8, messages=user("x"))
    assert info.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    m = client(keyed, KEY).messages.create(model="m", max_tokens=8, messages=user("let me in"))
    assert m.content[0].text == "let me in"  # type: ignore[union-attr]
    assert [x.id for x in client(keyed, KEY).models.list()] == ["flatgate-echo"]
    # The API's own header, as flatgate's anthropic adapter sends it.
    body = {"model": "m", "max_tokens": 8, "messages": user("by header")}
    r = httpx.post(f"{keyed.url}/v1/messages", json=body, headers={**HEADERS, "x-api-key": KEY})
    assert r.json()["content"] == [{"type": "text", "text": "by header"}]
    r = httpx.post(f"{keyed.url}/v1/messages", json=body, headers=HEADERS)
    assert r.status_code == 401
    assert r.json()["error"]["message"] == "x-api-key header is required"


async def test_concurrent_async_streams_get_their_own_words(server: Server) -> None:
    aclient = anthropic.AsyncAnthropic(base_url=server.url, api_key="x", max_retries=0)

    async def one(i: int) -> None:
        text = f"stream {i} says {i * 7}"
        async with aclient.messages.stream(model="m", max_tokens=64, messages=user(text)) as s:
            got = "".join([t async for t in s.text_stream])
        assert got == text

    try:
        await asyncio.gather(*(one(i) for i in range(20)))
    finally:
        await aclient.close()
