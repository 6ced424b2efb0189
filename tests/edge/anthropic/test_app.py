"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` through the edge app,
over fake protocol objects and a fake proxy transport: routing, credentials,
errors in Anthropic's shape, what the proxy is sent, keep-alive pings, and a
failure after the stream began."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest

from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import KeyConfig
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.request.estimate import estimate_tokens
from flatgate.proxy.wire.schema import FinishReason
from tests.edge import fakes
from tests.edge.helpers import decode_request_fb
from tests.edge.test_app import WORDS, app_with, call, frame

KEY = "sk-acme"
HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}


def body(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "model": "flatgate-echo",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello big world"}],
    }
    base.update(fields)
    return json.dumps(base).encode()


def events(data: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in data.decode().split("\n\n")[:-1]:
        name, payload = block.split("\n")
        out.append((name.removeprefix("event: "), json.loads(payload.removeprefix("data: "))))
    return out


def anthropic_error(proto: fakes.Protocol) -> dict[str, Any]:
    assert proto.header("content-type") == "application/json"
    doc: dict[str, Any] = proto.json()
    assert doc["type"] == "error" and set(doc["error"]) == {"type", "message"}
    return doc


STREAM: Any = {
    "model": "flatgate-echo",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hello big world"}],
}


def sdk_reading(proto: fakes.Protocol) -> anthropic.Anthropic:
    """The official SDK, answered with what ``proto`` was sent (its status and
    streamed bytes, as the edge wrote them)."""

    status = proto.status
    assert status is not None

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            status, headers={"content-type": "text/event-stream"}, content=proto.streamed
        )

    client = httpx2.Client(transport=httpx2.MockTransport(answer))
    return anthropic.Anthropic(
        api_key=KEY, base_url="http://edge", http_client=client, max_retries=0
    )


async def messages(app: Any, data: bytes, **headers: str) -> fakes.Protocol:
    return await call(app, "POST", "/v1/messages", data, headers={**HEADERS, **headers})


async def test_a_whole_message_and_what_the_proxy_is_sent() -> None:
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(KEY))])
    proto = await messages(
        app, body(system="be brief", top_k=5), **{"x-api-key": KEY, "x-request-id": "rid-1"}
    )
    assert proto.status == 200, proto.payload
    doc = proto.json()
    assert doc["type"] == "message" and doc["id"].startswith("msg_")
    assert doc["content"] == [{"type": "text", "text": "hello big world"}]
    assert (doc["stop_reason"], doc["usage"]) == (
        "end_turn",
        {"input_tokens": 3, "output_tokens": 3},
    )
    assert proto.header("x-request-id") == "rid-1"
    [sent] = transport.sent
    assert sent.url == "http://127.0.0.1:9/v1/completions"
    assert sent.headers["x-request-id"] == "rid-1"
    wire = decode_request_fb(sent.body)
    assert (wire["tenant"], wire["requestId"], wire["modelName"], wire["topK"]) == (
        b"acme",
        b"rid-1",
        b"flatgate-echo",
        5,
    )
    assert [m["content"] for m in wire["messages"]] == [b"be brief", b"hello big world"]


async def test_a_stream_of_events() -> None:
    app, _ = app_with()
    proto = await messages(app, body(stream=True))
    assert proto.status == 200
    assert proto.header("content-type") == "text/event-stream"
    evs = events(proto.streamed)
    assert [n for n, _ in evs] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    text = "".join(d["delta"]["text"] for n, d in evs if n == "content_block_delta")
    assert text == "hello big world"
    assert "flatgate_edge_active_streams 0.0" in app.metrics.render().decode()


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "x-api-key header is required"),
        ({"x-api-key": "sk-wrong"}, "Incorrect API key"),
        ({"authorization": "Bearer sk-wrong"}, "Incorrect API key"),
    ],
)
async def test_credentials_are_checked(headers: dict[str, str], message: str) -> None:
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(KEY))])
    proto = await messages(app, body(), **headers)
    assert proto.status == 401
    err = anthropic_error(proto)["error"]
    assert err["type"] == "authentication_error" and message in err["message"]
    assert transport.sent == []


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_either_header_carries_the_key(header: str) -> None:
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(KEY))])
    value = KEY if header == "x-api-key" else f"Bearer {KEY}"
    proto = await messages(app, body(), **{header: value})
    assert proto.status == 200
    assert decode_request_fb(transport.sent[0].body)["tenant"] == b"acme"


async def test_refusals_before_the_proxy() -> None:
    app, transport = app_with(max_body=2048)
    cases = [
        (await messages(app, body(model="nope")), 404, "not_found_error"),
        (await messages(app, b"{nope"), 400, "invalid_request_error"),
        (await messages(app, body(max_tokens=0)), 400, "invalid_request_error"),
        (await messages(app, body(system="x" * 4096)), 413, "request_too_large"),
        (
            await messages(
                app,
                body(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]),
            ),
            400,
            "invalid_request_error",
        ),
    ]
    for proto, status, kind in cases:
        assert proto.status == status, proto.payload
        assert anthropic_error(proto)["error"]["type"] == kind
    assert transport.sent == []
    wrong = await call(app, "GET", "/v1/messages")
    assert (wrong.status, wrong.header("allow")) == (405, "POST")
    assert anthropic_error(wrong)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("status", "code", "retry", "expect", "kind"),
    [
        (429, "backend_rate_limited", "7", 429, "rate_limit_error"),
        (503, "backends_busy", "1", 529, "overloaded_error"),
        (503, "server_busy", "1", 529, "overloaded_error"),
        (503, "draining", "1", 503, "api_error"),
        (502, "backend_unavailable", None, 502, "api_error"),
        (504, "backend_timeout", None, 504, "timeout_error"),
        (400, "backend_rejected", None, 400, "invalid_request_error"),
        (502, "backend_auth_failed", None, 502, "api_error"),
        (404, "no_route", None, 404, "not_found_error"),
    ],
)
async def test_proxy_errors_in_anthropic_shape(
    status: int, code: str, retry: str | None, expect: int, kind: str
) -> None:
    payload = json.dumps({"error": {"code": code, "message": "from the proxy"}}).encode()
    headers = {"retry-after": retry} if retry else {}
    app, _ = app_with(lambda sent: fakes.Response(status, [payload], headers=headers))
    proto = await messages(app, body(stream=True), **{"x-request-id": "rid-9"})
    assert proto.status == expect
    doc = anthropic_error(proto)
    assert doc["error"]["type"] == kind
    assert doc["request_id"] == "rid-9"
    assert proto.header("retry-after") == retry
    assert (proto.header("x-should-retry") == "false") == (code == "backend_auth_failed")
    assert f'route="/v1/messages",status="{expect}"' in app.metrics.render().decode()


async def test_a_failure_after_the_stream_began_is_an_error_event() -> None:
    err = frame(error=ChunkError("backend_disconnected", "cut"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [WORDS[0], err]))
    proto = await messages(app, body(stream=True))
    assert proto.status == 200
    evs = events(proto.streamed)
    assert [n for n, _ in evs][:3] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    assert evs[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "cut"}})


async def test_a_failure_before_any_event_is_an_http_error() -> None:
    err = frame(error=ChunkError("backend_stream_error", "no"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [err]))
    proto = await messages(app, body(stream=True))
    assert proto.status == 502 and proto.stream is None
    assert anthropic_error(proto)["error"]["type"] == "api_error"


async def test_pings_while_the_first_token_is_awaited() -> None:
    app, _ = app_with(
        lambda sent: fakes.Response(200, [b"".join(WORDS)], delay=0.35), keepalive=0.1
    )
    proto = await messages(app, body(stream=True))
    evs = events(proto.streamed)
    pings = [n for n, _ in evs].index("message_start")
    assert pings >= 2 and all(e == ("ping", {"type": "ping"}) for e in evs[:pings])
    assert evs[-1][0] == "message_stop"
    # The SDK's stream helper takes pings before message_start in its stride.
    with sdk_reading(proto) as sdk, sdk.messages.stream(**STREAM) as stream:
        assert "".join(stream.text_stream) == "hello big world"
        assert stream.get_final_message().stop_reason == "end_turn"


async def test_a_backend_ping_mid_stream_is_a_ping_event() -> None:
    heartbeat = frame()
    app, _ = app_with(lambda sent: fakes.Response(200, [WORDS[0], heartbeat, *WORDS[1:]]))
    proto = await messages(app, body(stream=True))
    names = [n for n, _ in events(proto.streamed)]
    assert names.count("ping") == 1
    assert names.index("ping") > names.index("content_block_start")
    # The SDK takes a ping between deltas in its stride.
    with sdk_reading(proto) as sdk, sdk.messages.stream(**STREAM) as stream:
        assert "".join(stream.text_stream) == "hello big world"


async def test_an_error_after_pings_is_an_error_event() -> None:
    err = frame(error=ChunkError("backend_timeout", "gave up"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [err], delay=0.25), keepalive=0.1)
    proto = await messages(app, body(stream=True))
    assert proto.status == 200
    evs = events(proto.streamed)
    assert evs[0][0] == "ping"
    assert evs[-1][1]["error"] == {"type": "timeout_error", "message": "gave up"}
    with (
        sdk_reading(proto) as sdk,
        pytest.raises(anthropic.APIStatusError) as info,
        sdk.messages.stream(**STREAM) as stream,
    ):
        stream.get_final_message()
    assert info.value.body == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "gave up"},
    }


async def test_a_tool_call_streams_as_a_tool_use_block() -> None:
    frames = [
        frame(tool_calls=(ToolCallDelta(0, "toolu_1", "lookup", '{"q": "x"}'),)),
        frame(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(4, 1)),
    ]
    app, _ = app_with(lambda sent: fakes.Response(200, [b"".join(frames)]))
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    proto = await messages(app, body(stream=True, tools=tools, tool_choice={"type": "any"}))
    evs = events(proto.streamed)
    assert evs[1][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "lookup",
        "input": {},
    }
    assert evs[2][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"q": "x"}'}
    assert evs[-2][1]["delta"]["stop_reason"] == "tool_use"
    whole = await messages(app, body(tools=tools))
    assert whole.json()["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
    ]


async def test_count_tokens_is_the_estimate_and_calls_no_backend() -> None:
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(KEY))])
    data = json.dumps(
        {"model": "echo", "system": "sys", "messages": [{"role": "user", "content": "東京 abc"}]}
    ).encode()
    proto = await call(app, "POST", "/v1/messages/count_tokens", data, headers={"x-api-key": KEY})
    assert proto.status == 200
    assert proto.json() == {"input_tokens": estimate_tokens(len("sys東京 abc".encode()), 2)}
    assert transport.sent == []
    denied = await call(app, "POST", "/v1/messages/count_tokens", data)
    assert denied.status == 401
    unknown = await call(
        app,
        "POST",
        "/v1/messages/count_tokens",
        data.replace(b'"echo"', b'"nope"'),
        headers={"x-api-key": KEY},
    )
    assert unknown.status == 404
    assert anthropic_error(unknown)["error"]["type"] == "not_found_error"
    text = app.metrics.render().decode()
    assert 'route="/v1/messages/count_tokens",status="200"} 1.0' in text


async def test_a_key_s_model_allow_list_holds_for_both_endpoints() -> None:
    """A model the key may not use does not exist for it: 404 from
    ``/v1/messages`` and from ``count_tokens`` alike, before any proxy call."""
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(KEY), models=("gpt-*",))])
    count = json.dumps(
        {"model": "flatgate-echo", "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    for path, data in (("/v1/messages", body()), ("/v1/messages/count_tokens", count)):
        denied = await call(app, "POST", path, data, headers={"x-api-key": KEY})
        assert denied.status == 404, path
        err = anthropic_error(denied)["error"]
        assert err["type"] == "not_found_error" and "flatgate-echo" in err["message"]
        allowed = await call(
            app, "POST", path, data.replace(b"flatgate-echo", b"gpt-4o"), headers={"x-api-key": KEY}
        )
        assert allowed.status == 200, (path, allowed.payload)
    assert len(transport.sent) == 1  # the allowed /v1/messages only
