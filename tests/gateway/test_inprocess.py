"""The router as the edge's transport, in process: what the edge reads from it
is what it reads from the proxy over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.inmemory import FakeAnswer, FakeTransport, serve_one
from flatgate.proxy.service import dispatch
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessTransport
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import (
    Timeouts,
    Upstream,
    UpstreamConnectError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
)
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.request.verify import verify_request as verify
from flatgate.proxy.wire.schema import BACKEND_HEADER, FinishReason

CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [{"name": "stub", "url": "http://127.0.0.1:9"}],
    "routes": [{"model": "echo-*", "backends": ["stub"]}],
}
FRAMES = write_chunk(content="hello ") + write_chunk(
    content="world", finish_reason=FinishReason.STOP
)


class BrokenAnswer(FakeAnswer):
    """Sends ``data``, then the connection breaks."""

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield self.data
        raise UpstreamProtocolError("connection reset mid-response")


class Scripted(FakeTransport):
    def __init__(self, data: bytes = FRAMES, error: Exception | None = None, broken: bool = False):
        super().__init__(data)
        self.error = error
        self.broken = broken

    async def request(self, req: Upstream) -> Any:
        if self.error is not None:
            raise self.error
        self.last_body = req.body
        self.last_answer = (BrokenAnswer if self.broken else FakeAnswer)(self.data)
        return self.last_answer


def router(upstream: FakeTransport) -> tuple[ProxyServer, InProcessTransport]:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = upstream
    return proxy, InProcessTransport(proxy)


async def ask(t: InProcessTransport, model: str = "echo-1") -> tuple[Any, bytes]:
    body = build_request(model, [("user", "hi")], request_id="r1")
    resp = await t.request(
        Upstream("POST", "unused", body=body, headers=[("x-request-id", "r1")], timeouts=Timeouts())
    )
    return resp, await resp.read()


def chunks(data: bytes) -> list[Any]:
    return [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]


async def test_the_backend_gets_the_very_bytes_and_the_frames_come_back() -> None:
    upstream = Scripted()
    proxy, t = router(upstream)
    body = build_request("echo-1", [("user", "hi")])
    resp = await t.request(Upstream("POST", "x", body=body, headers=[], timeouts=Timeouts()))
    assert resp.status == 200 and resp.headers[BACKEND_HEADER] == "stub"
    assert await resp.read() == FRAMES
    assert upstream.last_body is body  # the untouched object, no copy
    await resp.aclose()
    assert proxy.backends["stub"].outstanding == 0
    assert upstream.last_answer is not None and upstream.last_answer.closed
    assert (
        proxy.metrics.registry.get_sample_value(
            "flatgate_requests_total", {"route": "echo-*", "status": "200"}
        )
        == 1
    )


async def test_a_refusal_is_the_proxys_status_and_json() -> None:
    _, t = router(Scripted())
    resp, body = await ask(t, "nope")
    assert resp.status == 404 and json.loads(body)["error"]["code"] == "no_route"
    _, t = router(Scripted(error=UpstreamPoolTimeout("full")))
    resp, body = await ask(t)
    assert resp.status == 503 and resp.headers["retry-after"] == "1"
    assert json.loads(body)["error"]["code"] == "pool_exhausted"
    _, t = router(Scripted(error=UpstreamConnectError("refused")))
    resp, body = await ask(t)
    assert resp.status == 502 and json.loads(body)["error"]["code"] == "backend_unavailable"


async def test_a_failure_mid_stream_is_one_error_chunk() -> None:
    proxy, t = router(Scripted(write_chunk(content="hello "), broken=True))
    _, body = await ask(t)
    got = chunks(body)
    assert [c.content for c in got] == ["hello ", ""]
    assert got[-1].finish_reason == FinishReason.ERROR
    assert got[-1].error is not None and got[-1].error.code == "backend_disconnected"
    assert proxy.backends["stub"].outstanding == 0


OPENAI_CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [{"name": "oai", "url": "http://127.0.0.1:9/v1", "protocol": "openai"}],
    "routes": [{"model": "gpt-*", "backends": ["oai"]}],
}
WHOLE = (
    b'{"model": "gpt-x", "choices": [{"index": 0, "message": {"role": "assistant", '
    b'"content": "hi"}, "finish_reason": "stop"}]}'
)


class _Counted:
    """``verify_request`` that counts its calls and verifies as it would."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: bytes, **kw: Any) -> None:
        self.calls += 1
        verify(body, **kw)


async def test_the_edges_own_buffer_is_read_without_the_verifiers_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = _Counted()
    monkeypatch.setattr(dispatch, "verify_request", counted)
    upstream = Scripted(WHOLE)
    proxy = ProxyServer(parse_config(OPENAI_CONFIG), worker="t")
    proxy._transport = upstream
    body = build_request("gpt-x", [("user", "hello there")], request_id="r1", stream=False)
    # In process: the edge wrote the buffer, so the adapter reads it unverified.
    resp = await InProcessTransport(proxy).request(
        Upstream("POST", "x", body=body, headers=[("x-request-id", "r1")], timeouts=Timeouts())
    )
    [chunk] = chunks(await resp.read())
    await resp.aclose()
    assert counted.calls == 0
    assert chunk.content == "hi" and chunk.finish_reason == FinishReason.STOP
    sent = json.loads(upstream.last_body)
    assert sent["messages"] == [{"role": "user", "content": "hello there"}]
    # Over the proxy's HTTP surface the same bytes are a caller's: verified first.
    exchange = serve_one(proxy, body)
    assert exchange.status == 200 and counted.calls == 1
