"""The RSGI app over fake protocol objects and a fake proxy transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.edge_translator.app import EdgeApp, create_app
from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import (
    EdgeSection,
    EdgeSettings,
    KeyConfig,
    ModelConfig,
    load_edge_settings,
)
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.transport.base import UpstreamConnectError, UpstreamProtocolError
from flatgate.proxy.transport.base import UpstreamTimeout as TransportTimeout
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.edge import fakes
from tests.edge.helpers import decode_request_fb

POOL = BuilderPool()
MODELS = (
    ModelConfig("flatgate-echo", "SelfHosted", aliases=("echo",)),
    ModelConfig("gpt-4o", "OpenAI", owned_by="openai"),
)


def frame(**kw: Any) -> bytes:
    return build_chunk(POOL, **kw)


WORDS = [
    frame(content="hello "),
    frame(content="big "),
    frame(content="world", finish_reason=FinishReason.STOP, usage=Usage(3, 3)),
]


def app_with(
    handler=None, *, keys=(), max_body=1 << 20, keepalive=15.0
) -> tuple[EdgeApp, fakes.Transport]:
    transport = fakes.Transport(handler or (lambda sent: fakes.Response(200, [b"".join(WORDS)])))
    settings = EdgeSettings(
        edge=EdgeSection(
            proxy_url="http://127.0.0.1:9/",
            max_body_bytes=max_body,
            keepalive_seconds=keepalive,
            access_log=False,
        ),
        models=MODELS,
        keys=tuple(keys),
    )
    app = EdgeApp(settings, transport_factory=lambda: transport)
    return app, transport


def chat(**fields: Any) -> bytes:
    return json.dumps(
        {
            "model": "flatgate-echo",
            "messages": [{"role": "user", "content": "hello big world"}],
            **fields,
        }
    ).encode()


async def call(
    app: EdgeApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> fakes.Protocol:
    proto = fakes.Protocol(body, **kw)
    hdrs = {"content-length": str(len(body))} if body and "pieces" not in kw else {}
    hdrs.update(headers or {})
    await ServerApp(app).__rsgi__(fakes.Scope(method, path, hdrs), proto)
    return proto


def sse(data: bytes) -> list[Any]:
    out = []
    for event in data.split(b"\n\n")[:-1]:
        if event.startswith(b":"):  # a comment (keep-alive)
            continue
        payload = event.removeprefix(b"data: ")
        out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def error_of(proto: fakes.Protocol) -> dict[str, Any]:
    assert proto.header("content-type") == "application/json"
    err: dict[str, Any] = proto.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


async def test_non_streaming_completion_and_what_the_proxy_receives():
    app, transport = app_with()
    proto = await call(
        app,
        "POST",
        "/v1/chat/completions",
        chat(temperature=0.5),
        headers={"x-request-id": "req-42"},
    )
    assert proto.status == 200
    body = proto.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "hello big world"
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert body["id"].startswith("chatcmpl-")
    assert proto.header("x-request-id") == "req-42"
    (sent,) = transport.sent
    assert (sent.method, sent.url) == ("POST", "http://127.0.0.1:9/v1/completions")
    assert sent.headers["content-type"] == "application/x-flatbuffers"
    assert sent.headers["accept"] == "application/x-flatbuffers-stream"
    assert sent.headers["x-request-id"] == "req-42"
    d = decode_request_fb(sent.body)
    assert d["requestId"] == b"req-42" and d["modelName"] == b"flatgate-echo"
    assert d["provider"] == 2 and abs(d["temperature"] - 0.5) < 1e-6
    assert transport.responses[0].closed


async def test_alias_resolves_to_the_configured_model():
    app, transport = app_with()
    proto = await call(app, "POST", "/v1/chat/completions", chat(model="echo"))
    assert proto.status == 200
    assert decode_request_fb(transport.sent[0].body)["modelName"] == b"flatgate-echo"
    assert proto.json()["model"] == "flatgate-echo"


async def test_streaming_with_frames_split_anywhere():
    blob = b"".join(WORDS)
    pieces = [blob[i : i + 7] for i in range(0, len(blob), 7)]
    app, _ = app_with(lambda sent: fakes.Response(200, pieces))
    proto = await call(
        app,
        "POST",
        "/v1/chat/completions",
        chat(stream=True, stream_options={"include_usage": True}),
    )
    assert proto.status == 200
    assert proto.header("content-type") == "text/event-stream"
    evs = sse(proto.streamed)
    assert evs[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in evs[:-2])
    assert text == "hello big world"
    assert evs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert evs[-2]["choices"] == [] and evs[-2]["usage"]["total_tokens"] == 6
    assert app.metrics.active_streams.value == 0


async def test_a_backend_heartbeat_mid_stream_is_a_keep_alive_comment():
    # The proxy relays an Anthropic backend's ping as an empty chunk: the
    # client hears something through the silence, and the text is unchanged.
    heartbeat = frame()
    pieces = [WORDS[0], heartbeat, heartbeat + WORDS[1], WORDS[2]]
    app, _ = app_with(lambda sent: fakes.Response(200, pieces))
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    raw = proto.streamed
    assert raw.count(b": keep-alive\n\n") == 1  # alone in its read: sent as a comment
    evs = sse(raw)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in evs[:-1])
    assert (text, evs[-1]) == ("hello big world", "[DONE]")


async def test_tool_calls_non_streaming():
    calls = frame(
        tool_calls=[ToolCallDelta(0, "call_1", "f", '{"input": "x"}')],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=Usage(1, 1),
    )
    app, _ = app_with(lambda sent: fakes.Response(200, [calls]))
    tools = [{"type": "function", "function": {"name": "f"}}]
    proto = await call(
        app,
        "POST",
        "/v1/chat/completions",
        chat(tools=tools, tool_choice={"type": "function", "function": {"name": "f"}}),
    )
    choice = proto.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": '{"input": "x"}',
    }


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/v1/chat/completions", 405, "POST"),
        ("POST", "/v1/models", 405, "GET"),
        ("DELETE", "/healthz", 405, "GET"),
        ("GET", "/v1/nothing", 404, None),
    ],
)
async def test_unknown_paths_and_methods(method, path, status, allow):
    app, transport = app_with()
    proto = await call(app, method, path)
    assert proto.status == status
    error_of(proto)
    assert proto.header("allow") == allow
    assert transport.sent == []


async def test_body_over_the_limit_by_content_length_and_by_counting():
    app, transport = app_with(max_body=100)
    big = chat(user="x" * 200)
    proto = await call(app, "POST", "/v1/chat/completions", big)
    assert proto.status == 413 and error_of(proto)["code"] == "body_too_large"
    proto = await call(app, "POST", "/v1/chat/completions", b"", pieces=[big[:60], big[60:]])
    assert proto.status == 413
    small = chat()
    app, transport = app_with(max_body=len(small))
    proto = await call(app, "POST", "/v1/chat/completions", b"", pieces=[small[:10], small[10:]])
    assert proto.status == 200
    assert transport.sent


async def test_bad_json_bad_fields_and_bad_headers_are_400():
    app, transport = app_with()
    proto = await call(app, "POST", "/v1/chat/completions", b"{nope")
    assert proto.status == 400 and error_of(proto)["type"] == "invalid_request_error"
    proto = await call(app, "POST", "/v1/chat/completions", chat(temperature="warm"))
    assert proto.status == 400 and error_of(proto)["param"] == "temperature"
    proto = await call(
        app, "POST", "/v1/chat/completions", chat(), headers={"content-length": "ten"}
    )
    assert proto.status == 400
    for bad in ("x" * 129, "two words", "caf\xe9"):
        proto = await call(
            app, "POST", "/v1/chat/completions", chat(), headers={"x-request-id": bad}
        )
        assert proto.status == 400 and error_of(proto)["param"] == "x-request-id"
    assert transport.sent == []


async def test_unknown_model_is_404_without_calling_the_proxy():
    app, transport = app_with()
    proto = await call(app, "POST", "/v1/chat/completions", chat(model="gpt-5"))
    assert proto.status == 404
    err = error_of(proto)
    assert (err["code"], err["param"]) == ("model_not_found", "model")
    assert transport.sent == []


async def test_keys_identify_the_tenant():
    keys = [KeyConfig("acme", hash_key("sk-acme"))]
    app, transport = app_with(keys=keys)
    proto = await call(app, "POST", "/v1/chat/completions", chat())
    assert proto.status == 401
    proto = await call(
        app, "POST", "/v1/chat/completions", chat(), headers={"authorization": "Bearer sk-wrong"}
    )
    assert proto.status == 401 and error_of(proto)["code"] == "invalid_api_key"
    assert (await call(app, "GET", "/v1/models")).status == 401
    assert (await call(app, "GET", "/healthz")).status == 200
    proto = await call(
        app, "POST", "/v1/chat/completions", chat(), headers={"authorization": "Bearer sk-acme"}
    )
    assert proto.status == 200
    assert decode_request_fb(transport.sent[0].body)["tenant"] == b"acme"


async def test_models_list():
    app, _ = app_with()
    proto = await call(app, "GET", "/v1/models")
    body = proto.json()
    assert body["object"] == "list"
    assert [(m["id"], m["owned_by"], m["object"]) for m in body["data"]] == [
        ("flatgate-echo", "flatgate", "model"),
        ("echo", "flatgate", "model"),
        ("gpt-4o", "openai", "model"),
    ]


@pytest.mark.parametrize(
    ("status", "body", "expect_status", "expect_code"),
    [
        (404, b'{"error": {"code": "no_route", "message": "no route"}}', 404, "model_not_found"),
        (502, b'{"error": {"code": "no_backend", "message": "down"}}', 502, "no_backend"),
        (504, b'{"error": {"code": "backend_timeout", "message": "slow"}}', 504, "backend_timeout"),
        # A request the proxy or a backend refuses stays a 400 (not retried).
        (400, b'{"error": {"code": "malformed", "message": "bad buffer"}}', 400, "malformed"),
        (
            400,
            b'{"error": {"code": "backend_rejected", "message": "too long"}}',
            400,
            "backend_rejected",
        ),
        (
            502,
            b'{"error": {"code": "backend_auth_failed", "message": "key"}}',
            502,
            "backend_auth_failed",
        ),
        # Mismatched protocols between edge and proxy are the gateway's fault.
        (
            415,
            b'{"error": {"code": "unsupported_media_type", "message": "x"}}',
            502,
            "unsupported_media_type",
        ),
        (413, b'{"error": {"code": "too_large", "message": "big"}}', 413, "body_too_large"),
        (500, b"not json", 502, "proxy_protocol_error"),
    ],
)
async def test_proxy_errors_before_the_first_byte(status, body, expect_status, expect_code):
    app, transport = app_with(lambda sent: fakes.Response(status, [body]))
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == expect_status
    assert error_of(proto)["code"] == expect_code
    assert proto.header("retry-after") is None
    assert transport.responses[0].closed


async def test_a_rate_limit_keeps_its_status_type_and_retry_after():
    body = b'{"error": {"code": "backend_rate_limited", "message": "slow down"}}'
    app, _ = app_with(lambda sent: fakes.Response(429, [body], headers={"retry-after": "7"}))
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 429
    assert error_of(proto)["type"] == "rate_limit_error"
    assert proto.header("retry-after") == "7"


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (UpstreamConnectError("refused"), 502),
        (TransportTimeout("no head"), 504),
        (UpstreamProtocolError("garbage"), 502),
    ],
)
async def test_transport_failures(exc, status):
    def fail(sent):
        raise exc

    app, _ = app_with(fail)
    proto = await call(app, "POST", "/v1/chat/completions", chat())
    assert proto.status == status
    assert error_of(proto)["type"] == "api_error"
    kind = "timeout" if status == 504 else "unreachable"
    failures = f'flatgate_edge_upstream_failures_total{{backend="proxy",kind="{kind}"}} 1.0'
    assert failures in app.metrics.render().decode()


async def test_error_frame_first_is_an_http_error():
    err = frame(error=ChunkError("backend_failed", "it broke"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [err]))
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 502 and proto.stream is None
    assert error_of(proto)["code"] == "backend_failed"


@pytest.mark.parametrize("one_piece", [False, True])
async def test_error_after_streaming_began_is_an_error_event(one_piece):
    err = frame(
        error=ChunkError("backend_failed", "died mid-way"), finish_reason=FinishReason.ERROR
    )
    pieces = [WORDS[0] + err] if one_piece else [WORDS[0], err]
    app, _ = app_with(lambda sent: fakes.Response(200, pieces))
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 200
    evs = sse(proto.streamed)
    assert evs[0]["choices"][0]["delta"]["content"] == "hello "
    assert evs[-1] == {
        "error": {
            "message": "died mid-way",
            "type": "api_error",
            "param": None,
            "code": "backend_failed",
        }
    }


@pytest.mark.parametrize(
    ("response", "code"),
    [
        (lambda: fakes.Response(200, [WORDS[0]]), "proxy_protocol_error"),  # closed early
        (
            lambda: fakes.Response(200, [WORDS[0]], error_after=(1, TransportTimeout("stall"))),
            "proxy_timeout",
        ),
        (lambda: fakes.Response(200, [WORDS[0], b"\x08\0\0\0garbage!"]), "proxy_protocol_error"),
    ],
)
async def test_stream_failures_after_the_head(response, code):
    app, _ = app_with(lambda sent: response())
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 200
    assert sse(proto.streamed)[-1]["error"]["code"] == code


async def test_non_streaming_stream_cut_short_is_502():
    app, _ = app_with(lambda sent: fakes.Response(200, [WORDS[0]]))
    proto = await call(app, "POST", "/v1/chat/completions", chat())
    assert proto.status == 502


async def test_client_disconnect_cancels_the_proxy_request():
    upstream = fakes.Response(200, [WORDS[0]], stall_after=1)
    app, _ = app_with(lambda sent: upstream)
    proto = fakes.Protocol(chat(stream=True))
    scope = fakes.Scope("POST", "/v1/chat/completions", {"content-length": "1"})
    scope.headers["content-length"] = str(len(proto.body))
    handler = asyncio.ensure_future(ServerApp(app).__rsgi__(scope, proto))
    await asyncio.wait_for(upstream.stalled.wait(), 5)
    assert app.metrics.active_streams.value == 1
    proto.gone.set()
    await asyncio.wait_for(handler, 5)
    assert upstream.closed
    assert app.metrics.active_streams.value == 0
    assert b"flatgate_edge_requests_total" in app.metrics.render()
    assert 'status="499"' in app.metrics.render().decode()


async def test_metrics_and_health():
    app, _ = app_with()
    await call(app, "POST", "/v1/chat/completions", chat())
    await call(app, "POST", "/v1/chat/completions", chat(model="nope"))
    health = await call(app, "GET", "/healthz")
    assert health.status == 200 and health.json() == {"status": "ok"}
    proto = await call(app, "GET", "/metrics")
    assert proto.status == 200
    text = proto.payload.decode()
    assert 'flatgate_edge_requests_total{route="/v1/chat/completions",status="200"} 1.0' in text
    assert 'flatgate_edge_requests_total{route="/v1/chat/completions",status="404"} 1.0' in text
    assert "flatgate_edge_translate_seconds_count 1.0" in text
    assert 'flatgate_edge_gc_collections_total{generation="0"}' in text
    assert "flatgate_edge_active_streams 0.0" in text
    assert 'flatgate_edge_upstream_ttfb_seconds_count{backend="proxy"} 1.0' in text


async def test_unexpected_errors_are_500_in_openai_shape():
    def boom(sent):
        raise RuntimeError("bug")

    app, _ = app_with(boom)
    proto = await call(app, "POST", "/v1/chat/completions", chat())
    assert proto.status == 500
    assert error_of(proto)["type"] == "api_error"


async def test_aclose_closes_the_transport_and_create_app_reads_the_environment(tmp_path):
    cfg = tmp_path / "f.toml"
    cfg.write_text('[edge]\nport = 9999\n[[models]]\nname = "a"\nprovider = "OpenAI"\n')
    env = {"FLATGATE_CONFIG": str(cfg), "FLATGATE_EDGE_WORKERS": "2"}
    assert isinstance(create_app(env), ServerApp)
    settings = load_edge_settings(None, environ=env)
    assert settings.edge.port == 9999 and settings.edge.workers == 2
    assert [m.name for m in settings.models] == ["a"]
    edge, transport = app_with()
    await call(edge, "POST", "/v1/chat/completions", chat())  # made in the worker's loop
    await edge.aclose()
    assert transport.closed


async def test_n_choices_are_all_read_and_a_backend_without_n_still_completes():
    two = [
        frame(content="a", index=0),
        frame(finish_reason=FinishReason.STOP, index=0),
        frame(content="b", index=1),
        frame(finish_reason=FinishReason.STOP, index=1, usage=Usage(1, 2)),
    ]
    app, _ = app_with(lambda sent: fakes.Response(200, two))
    proto = await call(app, "POST", "/v1/chat/completions", chat(n=2))
    assert [c["message"]["content"] for c in proto.json()["choices"]] == ["a", "b"]
    proto = await call(app, "POST", "/v1/chat/completions", chat(n=2, stream=True))
    evs = sse(proto.streamed)
    assert evs[-1] == "[DONE]"
    assert sorted(
        e["choices"][0]["index"] for e in evs[:-1] if e["choices"][0]["finish_reason"]
    ) == [0, 1]
    one = two[:2]
    app, _ = app_with(lambda sent: fakes.Response(200, one))
    proto = await call(app, "POST", "/v1/chat/completions", chat(n=2))
    assert proto.status == 200 and len(proto.json()["choices"]) == 1
    proto = await call(app, "POST", "/v1/chat/completions", chat(n=2, stream=True))
    assert sse(proto.streamed)[-1] == "[DONE]"


async def test_keepalives_while_the_first_token_is_awaited():
    """A reasoning model thinks before its first token: the client gets SSE
    comments in the meantime, then the stream as usual."""
    app, transport = app_with(
        lambda sent: fakes.Response(200, [b"".join(WORDS)], delay=0.35), keepalive=0.1
    )
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 200
    streamed = proto.streamed
    assert streamed.startswith(b": keep-alive\n\n")
    assert streamed.count(b": keep-alive\n\n") >= 2
    events = [e for e in sse(streamed) if isinstance(e, dict) and e.get("choices")]
    text = [e["choices"][0]["delta"].get("content") for e in events]
    assert "".join(t for t in text if t) == "hello big world"
    assert transport.responses[0].began
    assert "flatgate_edge_active_streams 0.0" in app.metrics.render().decode()


async def test_an_error_after_keepalives_is_an_error_event():
    err = frame(error=ChunkError("backend_timeout", "gave up"), finish_reason=FinishReason.ERROR)
    app, _ = app_with(lambda sent: fakes.Response(200, [err], delay=0.25), keepalive=0.1)
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert proto.status == 200
    assert proto.streamed.startswith(b": keep-alive\n\n")
    assert sse(proto.streamed)[-1]["error"]["code"] == "backend_timeout"


async def test_no_keepalive_when_the_answer_comes_in_time():
    app, _ = app_with(keepalive=5.0)
    proto = await call(app, "POST", "/v1/chat/completions", chat(stream=True))
    assert b"keep-alive" not in proto.streamed


NO_USAGE = [frame(content="hello "), frame(content="world", finish_reason=FinishReason.STOP)]


def _usage_unknown(app: EdgeApp) -> float:
    value = app.metrics.registry.get_sample_value("flatgate_edge_usage_unknown_total")
    return value or 0.0


async def test_usage_a_backend_never_sent_is_absent_not_zero():
    app, _ = app_with(lambda sent: fakes.Response(200, [b"".join(NO_USAGE)]))
    proto = await call(app, "POST", "/v1/chat/completions", chat())
    body = proto.json()
    assert body["choices"][0]["message"]["content"] == "hello world"
    assert "usage" not in body
    assert _usage_unknown(app) == 1
    proto = await call(
        app,
        "POST",
        "/v1/chat/completions",
        chat(stream=True, stream_options={"include_usage": True}),
    )
    events = sse(proto.streamed)
    assert events[-1] == "[DONE]"
    assert all(e["usage"] is None for e in events[:-1])  # no usage event, never zeros
    assert _usage_unknown(app) == 2
    # With usage sent, it is reported and not counted as unknown.
    app, _ = app_with()
    assert (await call(app, "POST", "/v1/chat/completions", chat())).json()["usage"][
        "completion_tokens"
    ] == 3
    assert _usage_unknown(app) == 0
